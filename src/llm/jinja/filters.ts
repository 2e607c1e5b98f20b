/**
 * Builtin filters (`x | name(args)`) and tests (`x is name`).
 * @module
 */

import {
  type CallArgs,
  equals,
  isNumber,
  JCallable,
  JFloat,
  JUndefined,
  numberOf,
  toJson,
  toStr,
  truthy,
  typeName,
  UNDEFINED,
  type Value,
} from "./value.ts";
import { EvalFault } from "./error.ts";
import {
  arg,
  attribute,
  capitalize,
  compare,
  compareValues,
  contains,
  int,
  items,
  iterate,
  length,
  replace,
  str,
  strip,
  title,
} from "./ops.ts";

/** A filter: the value left of `|`, then the call's arguments. */
export type Filter = (value: Value, call: CallArgs) => Value;

/** A test: the value left of `is`, then its arguments. */
export type Test = (value: Value, args: Value[]) => boolean;

/** Tests, by name (`x is name`). */
export const TESTS: ReadonlyMap<string, Test> = new Map<string, Test>([
  ["defined", (v) => !(v instanceof JUndefined)],
  ["undefined", (v) => v instanceof JUndefined],
  ["none", (v) => v === null],
  ["boolean", (v) => typeof v === "boolean"],
  ["true", (v) => v === true],
  ["false", (v) => v === false],
  ["string", (v) => typeof v === "string"],
  ["number", (v) => isNumber(v)],
  ["integer", (v) => typeof v === "number"],
  ["float", (v) => v instanceof JFloat],
  ["mapping", (v) => v instanceof Map],
  ["iterable", (v) => Array.isArray(v) || v instanceof Map || typeof v === "string"],
  ["sequence", (v) => Array.isArray(v) || v instanceof Map || typeof v === "string"],
  ["callable", (v) => v instanceof JCallable],
  ["odd", (v) => int(v, "odd") % 2 !== 0],
  ["even", (v) => int(v, "even") % 2 === 0],
  ["divisibleby", (v, a) => int(v, "divisibleby") % int(a[0] ?? UNDEFINED, "divisibleby") === 0],
  ["lower", (v) => typeof v === "string" && v === v.toLowerCase()],
  ["upper", (v) => typeof v === "string" && v === v.toUpperCase()],
  ["eq", (v, a) => equals(v, a[0] ?? UNDEFINED)],
  ["equalto", (v, a) => equals(v, a[0] ?? UNDEFINED)],
  ["==", (v, a) => equals(v, a[0] ?? UNDEFINED)],
  ["sameas", (v, a) => v === a[0]],
  ["ne", (v, a) => !equals(v, a[0] ?? UNDEFINED)],
  ["!=", (v, a) => !equals(v, a[0] ?? UNDEFINED)],
  ["lt", (v, a) => compareValues("<", v, a[0] ?? UNDEFINED)],
  ["lessthan", (v, a) => compareValues("<", v, a[0] ?? UNDEFINED)],
  ["<", (v, a) => compareValues("<", v, a[0] ?? UNDEFINED)],
  ["le", (v, a) => compareValues("<=", v, a[0] ?? UNDEFINED)],
  ["<=", (v, a) => compareValues("<=", v, a[0] ?? UNDEFINED)],
  ["gt", (v, a) => compareValues(">", v, a[0] ?? UNDEFINED)],
  ["greaterthan", (v, a) => compareValues(">", v, a[0] ?? UNDEFINED)],
  [">", (v, a) => compareValues(">", v, a[0] ?? UNDEFINED)],
  ["ge", (v, a) => compareValues(">=", v, a[0] ?? UNDEFINED)],
  [">=", (v, a) => compareValues(">=", v, a[0] ?? UNDEFINED)],
  ["in", (v, a) => contains(a[0] ?? UNDEFINED, v)],
]);

/** Runs test `name` on `v`. */
export function runTest(name: string, v: Value, args: Value[]): boolean {
  const t = TESTS.get(name);
  if (!t) throw new EvalFault(`unknown test '${name}'`);
  return t(v, args);
}

function selectFilter(attr: boolean, keep: boolean): Filter {
  return (v, call) => {
    const items = iterate(v, "select");
    const a = call.args;
    const name = attr ? a[0] : undefined;
    if (attr && typeof name !== "string") throw new EvalFault("selectattr needs an attribute name");
    const testName = a[attr ? 1 : 0];
    const rest = a.slice(attr ? 2 : 1);
    return items.filter((item) => {
      const x = attr ? attribute(item, name as string) : item;
      const ok = testName === undefined ? truthy(x) : runTest(str(testName, "select"), x, rest);
      return ok === keep;
    });
  };
}

function indent(s: string, width: Value, first: Value, blank: Value): string {
  const pad = typeof width === "string" ? width : " ".repeat(typeof width === "number" ? width : 4);
  const lines = s.split("\n");
  return lines.map((line, i) => {
    if (i === 0 && !truthy(first)) return line;
    if (line.length === 0 && !truthy(blank)) return line;
    return pad + line;
  }).join("\n");
}

function tojsonFilter(v: Value, call: CallArgs): Value {
  const ind = arg(call, 0, "indent");
  const seps = arg(call, 2, "separators");
  const sort = arg(call, 3, "sort_keys");
  if (truthy(sort)) throw new EvalFault("tojson(sort_keys=true) is not supported");
  const width = typeof ind === "number" ? ind : -1;
  const itemSep = Array.isArray(seps) && typeof seps[0] === "string" ? seps[0] : undefined;
  const keySep = Array.isArray(seps) && typeof seps[1] === "string" ? seps[1] : undefined;
  return toJson(v, width, itemSep ?? (width < 0 ? ", " : ","), keySep ?? ": ");
}

function sortKey(call: CallArgs): (x: Value) => Value {
  const attr = arg(call, 2, "attribute");
  return typeof attr === "string" ? (x) => attribute(x, attr) : (x) => x;
}

/** Filters, by name (`x | name(args)`). */
export const FILTERS: ReadonlyMap<string, Filter> = new Map<string, Filter>([
  ["trim", (v, c) => strip(str(v, "trim"), arg(c, 0, "chars"), true, true)],
  ["strip", (v, c) => strip(str(v, "strip"), arg(c, 0, "chars"), true, true)],
  ["upper", (v) => str(v, "upper").toUpperCase()],
  ["lower", (v) => str(v, "lower").toLowerCase()],
  ["title", (v) => title(str(v, "title"))],
  ["capitalize", (v) => capitalize(str(v, "capitalize"))],
  ["length", (v) => length(v)],
  ["count", (v) => length(v)],
  ["default", (v, c) => {
    const boolean = truthy(arg(c, 1, "boolean", false));
    const undef = v instanceof JUndefined || (boolean && !truthy(v));
    return undef ? arg(c, 0, "default_value", "") : v;
  }],
  ["join", (v, c) => {
    const sep = arg(c, 0, "d", "");
    const attr = arg(c, 1, "attribute");
    return iterate(v, "join").map((x) => toStr(typeof attr === "string" ? attribute(x, attr) : x))
      .join(toStr(sep));
  }],
  ["first", (v) => iterate(v, "first")[0] ?? UNDEFINED],
  ["last", (v) => {
    const xs = iterate(v, "last");
    return xs[xs.length - 1] ?? UNDEFINED;
  }],
  ["list", (v) => [...iterate(v, "list")]],
  ["reverse", (v) => typeof v === "string" ? [...v].reverse().join("") : [...iterate(v)].reverse()],
  ["replace", (v, c) =>
    replace(
      str(v, "replace"),
      str(arg(c, 0, "old"), "replace"),
      str(arg(c, 1, "new"), "replace"),
      arg(c, 2, "count"),
    )],
  ["tojson", tojsonFilter],
  ["string", (v) => toStr(v)],
  ["safe", (v) => v],
  ["int", (v, c) => {
    if (typeof v === "number") return v;
    if (v instanceof JFloat) return Math.trunc(v.value);
    if (typeof v === "boolean") return v ? 1 : 0;
    if (typeof v === "string") {
      const n = Number.parseInt(v.trim(), 10);
      return Number.isNaN(n) ? arg(c, 0, "default", 0) : n;
    }
    return arg(c, 0, "default", 0);
  }],
  ["float", (v, c) => {
    if (isNumber(v)) return new JFloat(numberOf(v));
    if (typeof v === "string") {
      const n = Number.parseFloat(v.trim());
      if (!Number.isNaN(n)) return new JFloat(n);
    }
    return arg(c, 0, "default", new JFloat(0));
  }],
  ["abs", (v) => {
    if (typeof v === "number") return Math.abs(v);
    if (v instanceof JFloat) return new JFloat(Math.abs(v.value));
    throw new EvalFault(`abs of ${typeName(v)}`);
  }],
  [
    "indent",
    (v, c) => indent(str(v, "indent"), arg(c, 0, "width"), arg(c, 1, "first"), arg(c, 2, "blank")),
  ],
  ["items", (v) => items(v)],
  ["dictsort", (v) => items(v).sort((a, b) => compare((a as Value[])[0]!, (b as Value[])[0]!))],
  ["selectattr", selectFilter(true, true)],
  ["rejectattr", selectFilter(true, false)],
  ["select", selectFilter(false, true)],
  ["reject", selectFilter(false, false)],
  ["map", (v, c) => {
    const xs = iterate(v, "map");
    const attr = c.kwargs.get("attribute");
    if (typeof attr === "string") {
      const def = c.kwargs.get("default");
      return xs.map((x) => {
        const r = attribute(x, attr);
        return r instanceof JUndefined && def !== undefined ? def : r;
      });
    }
    const name = c.args[0];
    if (typeof name !== "string") throw new EvalFault("map needs a filter name or attribute=");
    return xs.map((x) => applyFilter(name, x, { args: c.args.slice(1), kwargs: new Map() }));
  }],
  ["unique", (v) => {
    const out: Value[] = [];
    for (const x of iterate(v, "unique")) if (!out.some((y) => equals(x, y))) out.push(x);
    return out;
  }],
  ["sort", (v, c) => {
    const key = sortKey(c);
    const rev = truthy(arg(c, 0, "reverse", false));
    const xs = [...iterate(v, "sort")].sort((a, b) => compare(key(a), key(b)));
    return rev ? xs.reverse() : xs;
  }],
  ["sum", (v) => {
    let total = 0, float = false;
    for (const x of iterate(v, "sum")) {
      if (!isNumber(x)) throw new EvalFault(`sum of ${typeName(x)}`);
      float ||= x instanceof JFloat;
      total += numberOf(x);
    }
    return float ? new JFloat(total) : total;
  }],
  ["min", (v) => iterate(v, "min").reduce((a, b) => (compare(b, a) < 0 ? b : a), UNDEFINED)],
  ["max", (v) => iterate(v, "max").reduce((a, b) => (compare(b, a) > 0 ? b : a), UNDEFINED)],
  ["wordcount", (v) => str(v, "wordcount").split(/\s+/).filter((w) => w.length > 0).length],
]);

/** Applies filter `name`. */
export function applyFilter(name: string, v: Value, call: CallArgs): Value {
  const f = FILTERS.get(name);
  if (!f) throw new EvalFault(`unknown filter '${name}'`);
  return f(v, call);
}
