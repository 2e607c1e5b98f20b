/**
 * Methods of strings, lists and dicts (`s.startswith(...)`, `d.items()`, `xs.append(...)`), and
 * attribute access on values.
 * @module
 */

import {
  type CallArgs,
  dictKey,
  equals,
  JCallable,
  type JDict,
  keyValue,
  toStr,
  UNDEFINED,
  type Value,
} from "./value.ts";
import { EvalFault } from "./error.ts";
import { arg, capitalize, items, iterate, replace, split, str, strip, title } from "./ops.ts";

/** A builtin method as a callable value. */
export function method(name: string, fn: (call: CallArgs) => Value): JCallable {
  return new JCallable(name, fn);
}

/** Python's `str.format` for `{}`, `{0}` and `{name}` fields (no format specs). */
function format(s: string, call: CallArgs): string {
  let next = 0;
  return s.replace(/\{\{|\}\}|\{([^{}]*)\}/g, (all, field: string | undefined) => {
    if (all === "{{") return "{";
    if (all === "}}") return "}";
    const f = field ?? "";
    let v: Value | undefined;
    if (f === "") v = call.args[next++];
    else if (/^\d+$/.test(f)) v = call.args[Number(f)];
    else v = call.kwargs.get(f);
    if (v === undefined) throw new EvalFault(`format: no argument for {${f}}`);
    return toStr(v);
  });
}

function stringMethod(s: string, name: string): Value {
  switch (name) {
    case "startswith":
    case "endswith":
      return method(name, (c) => {
        const p = c.args[0];
        const prefixes = Array.isArray(p) ? p : [p ?? ""];
        return prefixes.some((x) =>
          name === "startswith" ? s.startsWith(str(x, name)) : s.endsWith(str(x, name))
        );
      });
    case "strip":
      return method(name, (c) => strip(s, c.args[0] ?? UNDEFINED, true, true));
    case "lstrip":
      return method(name, (c) => strip(s, c.args[0] ?? UNDEFINED, true, false));
    case "rstrip":
      return method(name, (c) => strip(s, c.args[0] ?? UNDEFINED, false, true));
    case "split":
      return method(name, (c) => split(s, arg(c, 0, "sep"), arg(c, 1, "maxsplit")));
    case "upper":
      return method(name, () => s.toUpperCase());
    case "lower":
      return method(name, () => s.toLowerCase());
    case "title":
      return method(name, () => title(s));
    case "capitalize":
      return method(name, () => capitalize(s));
    case "replace":
      return method(
        name,
        (c) =>
          replace(s, str(arg(c, 0, "old"), name), str(arg(c, 1, "new"), name), arg(c, 2, "count")),
      );
    case "find":
      return method(name, (c) => s.indexOf(str(c.args[0] ?? UNDEFINED, name)));
    case "count":
      return method(name, (c) => {
        const sub = str(c.args[0] ?? UNDEFINED, name);
        return sub.length === 0 ? s.length + 1 : s.split(sub).length - 1;
      });
    case "join":
      return method(name, (c) => iterate(c.args[0] ?? UNDEFINED, name).map(toStr).join(s));
    case "format":
      return method(name, (c) => format(s, c));
  }
  return UNDEFINED;
}

function dictMethod(d: JDict, name: string): Value {
  switch (name) {
    case "items":
      return method(name, () => items(d));
    case "keys":
      return method(name, () => [...d.keys()].map(keyValue));
    case "values":
      return method(name, () => [...d.values()]);
    case "get":
      return method(name, (c) => {
        const k = c.args[0];
        const key = dictKey(k ?? null);
        return d.has(key) ? d.get(key)! : (c.args[1] ?? null);
      });
  }
  return UNDEFINED;
}

function listMethod(xs: Value[], name: string): Value {
  switch (name) {
    case "append":
      return method(name, (c) => {
        xs.push(c.args[0] ?? UNDEFINED);
        return null;
      });
    case "pop":
      return method(name, (c) => {
        if (xs.length === 0) throw new EvalFault("pop from an empty list");
        const i = typeof c.args[0] === "number" ? c.args[0] : xs.length - 1;
        const at = i < 0 ? xs.length + i : i;
        if (at < 0 || at >= xs.length) throw new EvalFault("pop index out of range");
        return xs.splice(at, 1)[0]!;
      });
    case "index":
      return method(name, (c) => {
        const i = xs.findIndex((x) => equals(x, c.args[0] ?? UNDEFINED));
        if (i < 0) throw new EvalFault("index: value is not in the list");
        return i;
      });
  }
  return UNDEFINED;
}

/** `v.name`: a dict entry, or a method of a string, list or dict; else undefined. */
export function getAttribute(v: Value, name: string): Value {
  if (v instanceof Map) {
    if (v.has(name)) return v.get(name)!;
    return dictMethod(v, name);
  }
  if (typeof v === "string") return stringMethod(v, name);
  if (Array.isArray(v)) return listMethod(v, name);
  return UNDEFINED;
}
