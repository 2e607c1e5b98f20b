/**
 * Value operations shared by the filters, the methods and the evaluator: argument access,
 * string helpers, iteration, attribute paths, ordering and membership.
 * @module
 */

import {
  type CallArgs,
  dictKey,
  equals,
  isNumber,
  JFloat,
  JUndefined,
  keyValue,
  numberOf,
  typeName,
  UNDEFINED,
  type Value,
} from "./value.ts";
import { EvalFault } from "./error.ts";

/** Argument `name` of a call: the keyword if given, else positional `index`, else `fallback`. */
export function arg(
  call: CallArgs,
  index: number,
  name: string,
  fallback: Value = UNDEFINED,
): Value {
  if (call.kwargs.has(name)) return call.kwargs.get(name)!;
  return index < call.args.length ? call.args[index]! : fallback;
}

/** `v` as a string, or a fault naming `what` when it is not one. */
export function str(v: Value, what: string): string {
  if (typeof v !== "string") throw new EvalFault(`${what} expects a string, got ${typeName(v)}`);
  return v;
}

/** `v` as an integer (floats truncate, booleans are 0/1), or a fault naming `what`. */
export function int(v: Value, what: string): number {
  if (typeof v === "number") return v;
  if (v instanceof JFloat) return Math.trunc(v.value);
  if (typeof v === "boolean") return v ? 1 : 0;
  throw new EvalFault(`${what} expects an integer, got ${typeName(v)}`);
}

/** The items a value iterates over: list items, dict keys, string characters. */
export function iterate(v: Value, what = "for"): Value[] {
  if (Array.isArray(v)) return v;
  if (v instanceof Map) return [...v.keys()].map(keyValue);
  if (typeof v === "string") return [...v];
  if (v instanceof JUndefined || v === null) return [];
  throw new EvalFault(`${what}: ${typeName(v)} is not iterable`);
}

/** Python's `str.title` for whitespace-separated words. */
export function title(s: string): string {
  return s.replace(/[^\s]+/g, (w) => w[0]!.toUpperCase() + w.slice(1).toLowerCase());
}

/** Python's `str.capitalize`: first character upper, the rest lower. */
export function capitalize(s: string): string {
  return s.length === 0 ? s : s[0]!.toUpperCase() + s.slice(1).toLowerCase();
}

/** Strips `chars` (default: whitespace) from the left and/or right of `s`. */
export function strip(s: string, chars: Value, left: boolean, right: boolean): string {
  const set = typeof chars === "string" ? chars : " \t\n\r\v\f";
  let a = 0, b = s.length;
  if (left) { while (a < b && set.includes(s[a]!)) a++; }
  if (right) { while (b > a && set.includes(s[b - 1]!)) b--; }
  return s.slice(a, b);
}

/** `str.split` as llama.cpp: no separator means a single space; `maxsplit` as Python. */
export function split(s: string, sep: Value, maxsplit: Value): string[] {
  // As llama.cpp: no separator means a single space (not Python's whitespace runs).
  const d = typeof sep === "string" ? sep : " ";
  const max = typeof maxsplit === "number" ? maxsplit : -1;
  if (d.length === 0) throw new EvalFault("split: empty separator");
  const parts = s.split(d);
  if (max < 0 || parts.length <= max + 1) return parts;
  return [...parts.slice(0, max), parts.slice(max).join(d)];
}

/** Replaces `from` by `to`, all or the first `count` occurrences. */
export function replace(s: string, from: string, to: string, count: Value): string {
  const n = typeof count === "number" ? count : -1;
  if (n < 0) return s.split(from).join(to);
  let out = "", rest = s;
  for (let i = 0; i < n; i++) {
    const k = rest.indexOf(from);
    if (k < 0) break;
    out += rest.slice(0, k) + to;
    rest = rest.slice(k + from.length);
  }
  return out + rest;
}

/** `obj.attr` (for `map(attribute=)` and friends): dict key or undefined; dotted paths allowed. */
export function attribute(v: Value, path: string): Value {
  let cur = v;
  for (const part of path.split(".")) {
    if (cur instanceof Map) cur = cur.has(part) ? cur.get(part)! : UNDEFINED;
    else if (Array.isArray(cur) && /^-?\d+$/.test(part)) cur = cur.at(Number(part)) ?? UNDEFINED;
    else return UNDEFINED;
  }
  return cur;
}

/** Orders two numbers, strings or booleans (negative, zero, positive); other pairs fault. */
export function compare(a: Value, b: Value): number {
  if (isNumber(a) && isNumber(b)) return numberOf(a) - numberOf(b);
  if (typeof a === "string" && typeof b === "string") return a < b ? -1 : a > b ? 1 : 0;
  if (typeof a === "boolean" && typeof b === "boolean") return Number(a) - Number(b);
  throw new EvalFault(`cannot compare ${typeName(a)} with ${typeName(b)}`);
}

/** `<`, `>`, `<=`, `>=` on two values. */
export function compareValues(op: string, a: Value, b: Value): boolean {
  const c = compare(a, b);
  return op === "<" ? c < 0 : op === ">" ? c > 0 : op === "<=" ? c <= 0 : c >= 0;
}

/** `a in b`: list membership, substring, dict key. */
export function contains(container: Value, item: Value): boolean {
  if (Array.isArray(container)) return container.some((x) => equals(x, item));
  if (typeof container === "string") {
    return typeof item === "string" && container.includes(item);
  }
  if (container instanceof Map) return container.has(dictKey(item));
  if (container instanceof JUndefined || container === null) return false;
  throw new EvalFault(`'in' needs a list, string or dict on its right, got ${typeName(container)}`);
}

/** Length of a string (code points), list or dict; 0 for none/undefined. */
export function length(v: Value): number {
  if (typeof v === "string") return [...v].length;
  if (Array.isArray(v)) return v.length;
  if (v instanceof Map) return v.size;
  if (v instanceof JUndefined || v === null) return 0;
  throw new EvalFault(`length of ${typeName(v)}`);
}

/** A dict's `[key, value]` pairs; none/undefined give an empty list. */
export function items(v: Value): Value[] {
  if (v instanceof Map) return [...v].map(([k, x]) => [keyValue(k), x]);
  if (v instanceof JUndefined || v === null) return [];
  throw new EvalFault(`items of ${typeName(v)}`);
}
