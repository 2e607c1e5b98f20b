/**
 * Runtime values of the template engine and their conversions: truthiness, printing, JSON
 * (`tojson`, formatted as llama.cpp's engine does), equality and ordering.
 * @module
 */

/** A float (a number literal with a point, or an arithmetic result involving one). */
export class JFloat {
  /** Wraps a float. */
  constructor(readonly value: number) {}
}

/** The value of a name or attribute that does not exist. */
export class JUndefined {
  /** Why it is undefined (for messages). */
  constructor(readonly hint = "") {}
}

/** The one shared undefined value. */
export const UNDEFINED: JUndefined = new JUndefined();

/** Arguments of a call: positional, then keyword. */
export interface CallArgs {
  args: Value[];
  kwargs: Map<string, Value>;
}

/** A callable: a global function, a bound method or a macro. */
export class JCallable {
  /** Wraps a function. */
  constructor(readonly name: string, readonly fn: (call: CallArgs) => Value) {}
}

/** A dict key: a string, or an int, float, bool or none as a template may write one. */
export type DictKey = string | number | boolean | null;

/** A dict (insertion-ordered). */
export type JDict = Map<DictKey, Value>;

/** A value as a dict key (floats by value, other non-primitive values by their string). */
export function dictKey(v: Value): DictKey {
  if (typeof v === "string" || typeof v === "number" || typeof v === "boolean" || v === null) {
    return v;
  }
  if (v instanceof JFloat) return v.value;
  return toStr(v);
}

/** A dict key back as a value. */
export function keyValue(k: DictKey): Value {
  return typeof k === "number" && !Number.isInteger(k) ? new JFloat(k) : k;
}

/** Any runtime value. Integers are `number`; floats are `JFloat`. */
export type Value =
  | string
  | number
  | boolean
  | null
  | JFloat
  | JUndefined
  | Value[]
  | JDict
  | JCallable;

/** True for integers and floats (not booleans). */
export function isNumber(v: Value): v is number | JFloat {
  return typeof v === "number" || v instanceof JFloat;
}

/** The numeric value of an int or float. */
export function numberOf(v: number | JFloat): number {
  return typeof v === "number" ? v : v.value;
}

/** A JS value (from JSON or options) as a template value: objects become dicts. */
export function fromJS(x: unknown): Value {
  if (x === undefined) return UNDEFINED;
  if (x === null) return null;
  if (typeof x === "string" || typeof x === "boolean") return x;
  if (typeof x === "number") return Number.isInteger(x) ? x : new JFloat(x);
  if (typeof x === "bigint") return Number(x);
  if (Array.isArray(x)) return x.map(fromJS);
  if (x instanceof Map) {
    const m: JDict = new Map();
    for (const [k, v] of x) m.set(String(k), fromJS(v));
    return m;
  }
  if (typeof x === "object") {
    const m: JDict = new Map();
    for (const [k, v] of Object.entries(x as Record<string, unknown>)) m.set(k, fromJS(v));
    return m;
  }
  return UNDEFINED;
}

/** Jinja truthiness: none, undefined, false, 0, "" and empty lists and dicts are false. */
export function truthy(v: Value): boolean {
  if (v === null || v instanceof JUndefined) return false;
  if (typeof v === "boolean") return v;
  if (typeof v === "number") return v !== 0;
  if (v instanceof JFloat) return v.value !== 0;
  if (typeof v === "string") return v.length > 0;
  if (Array.isArray(v)) return v.length > 0;
  if (v instanceof Map) return v.size > 0;
  return true;
}

/** A float as llama.cpp prints it: six decimals, trailing zeros dropped, at least one kept. */
export function floatString(x: number): string {
  if (!Number.isFinite(x)) return Number.isNaN(x) ? "nan" : x > 0 ? "inf" : "-inf";
  let s = x.toFixed(6);
  s = s.replace(/0+$/, "");
  if (s.endsWith(".")) s += "0";
  return s;
}

/** A string as Python's repr would quote it (single quotes unless it holds one). */
function repr(v: Value): string {
  if (typeof v === "string") return v.includes("'") ? toJson(v) : `'${v}'`;
  return toStr(v);
}

/** `str(v)` as the engine's string conversion (the `string` filter, `~`, string methods). */
export function toStr(v: Value): string {
  if (typeof v === "string") return v;
  if (typeof v === "number") return String(v);
  if (v instanceof JFloat) return floatString(v.value);
  if (typeof v === "boolean") return v ? "True" : "False";
  if (v === null) return "None";
  if (v instanceof JUndefined) return "";
  if (Array.isArray(v)) return `[${v.map(repr).join(", ")}]`;
  if (v instanceof Map) {
    return `{${[...v].map(([k, x]) => `${repr(keyValue(k))}: ${repr(x)}`).join(", ")}}`;
  }
  return `<function ${v.name}>`;
}

/** What `{{ v }}` writes: strings, numbers and booleans; lists item by item; nothing else. */
export function printValue(v: Value, out: string[]): void {
  if (typeof v === "string") out.push(v);
  else if (typeof v === "number" || typeof v === "boolean" || v instanceof JFloat) {
    out.push(toStr(v));
  } else if (Array.isArray(v)) { for (const x of v) printValue(x, out); }
}

function jsonString(s: string): string {
  let out = '"';
  for (const c of s) {
    switch (c) {
      case '"':
        out += '\\"';
        break;
      case "\\":
        out += "\\\\";
        break;
      case "\b":
        out += "\\b";
        break;
      case "\f":
        out += "\\f";
        break;
      case "\n":
        out += "\\n";
        break;
      case "\r":
        out += "\\r";
        break;
      case "\t":
        out += "\\t";
        break;
      default: {
        const code = c.codePointAt(0)!;
        out += code < 0x20 ? `\\u${code.toString(16).padStart(4, "0")}` : c;
      }
    }
  }
  return out + '"';
}

/** A float as C++'s default stream output (`%g`, six significant digits). */
function streamFloat(x: number): string {
  if (!Number.isFinite(x)) return Number.isNaN(x) ? "nan" : x > 0 ? "inf" : "-inf";
  if (x === 0) return "0";
  const exp = Math.floor(Math.log10(Math.abs(x)));
  if (exp < -5 || exp >= 6) {
    const [m, e] = x.toExponential(5).split("e");
    const mant = m!.includes(".") ? m!.replace(/0+$/, "").replace(/\.$/, "") : m!;
    const en = Number(e);
    return `${mant}e${en < 0 ? "-" : "+"}${String(Math.abs(en)).padStart(2, "0")}`;
  }
  const s = x.toPrecision(6);
  return s.includes(".") ? s.replace(/0+$/, "").replace(/\.$/, "") : s;
}

/**
 * JSON as llama.cpp's `tojson`: `", "` and `": "` separators without indent; with an indent,
 * one item a line and `","` between items; non-ASCII kept as is; none/undefined as `null`.
 */
export function toJson(
  v: Value,
  indent = -1,
  itemSep = indent < 0 ? ", " : ",",
  keySep = ": ",
  level = 0,
): string {
  const pad = (l: number): string => (indent > 0 ? " ".repeat(l * indent) : "");
  const nl = indent >= 0 ? "\n" : "";
  if (v === null || v instanceof JUndefined) return "null";
  if (typeof v === "boolean") return v ? "true" : "false";
  if (typeof v === "number") return String(v);
  if (v instanceof JFloat) return streamFloat(v.value);
  if (typeof v === "string") return jsonString(v);
  if (Array.isArray(v)) {
    if (v.length === 0) return "[]";
    const items = v.map((x) => pad(level + 1) + toJson(x, indent, itemSep, keySep, level + 1));
    return `[${nl}${items.join(itemSep + nl)}${nl}${pad(level)}]`;
  }
  if (v instanceof Map) {
    if (v.size === 0) return "{}";
    const items = [...v].map(([k, x]) =>
      pad(level + 1) + jsonString(toStr(keyValue(k))) + keySep +
      toJson(x, indent, itemSep, keySep, level + 1)
    );
    return `{${nl}${items.join(itemSep + nl)}${nl}${pad(level)}}`;
  }
  return "null";
}

/** Deep equality; ints and floats compare by value. */
export function equals(a: Value, b: Value): boolean {
  if (isNumber(a) && isNumber(b)) return numberOf(a) === numberOf(b);
  if (a instanceof JUndefined || b instanceof JUndefined) {
    return a instanceof JUndefined && b instanceof JUndefined;
  }
  if (Array.isArray(a) && Array.isArray(b)) {
    return a.length === b.length && a.every((x, i) => equals(x, b[i]!));
  }
  if (a instanceof Map && b instanceof Map) {
    if (a.size !== b.size) return false;
    for (const [k, x] of a) {
      if (!b.has(k) || !equals(x, b.get(k)!)) return false;
    }
    return true;
  }
  return a === b;
}

/** A short type name for messages. */
export function typeName(v: Value): string {
  if (v === null) return "none";
  if (v instanceof JUndefined) return "undefined";
  if (typeof v === "number") return "int";
  if (v instanceof JFloat) return "float";
  if (typeof v === "string") return "string";
  if (typeof v === "boolean") return "bool";
  if (Array.isArray(v)) return "list";
  if (v instanceof Map) return "dict";
  return "function";
}
