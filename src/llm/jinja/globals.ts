/**
 * Global functions: `raise_exception`, `namespace`, `dict`, `range`, `strftime_now`.
 * @module
 */

import { type DictKey, type JDict, toStr, UNDEFINED, type Value } from "./value.ts";
import { EvalFault } from "./error.ts";
import { int, str } from "./ops.ts";
import { method } from "./methods.ts";
import { applyFilter } from "./filters.ts";

const MONTHS = [
  "January",
  "February",
  "March",
  "April",
  "May",
  "June",
  "July",
  "August",
  "September",
  "October",
  "November",
  "December",
];

const DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];

/** C `strftime` on local time, for the common conversions (`%Y %y %m %d %e %H %I %M %S %p %b %B %a %A %j %%`). */
export function strftime(format: string, t: Date): string {
  const p2 = (n: number): string => String(n).padStart(2, "0");
  return format.replace(/%([a-zA-Z%])/g, (all, c: string) => {
    switch (c) {
      case "Y":
        return String(t.getFullYear());
      case "y":
        return p2(t.getFullYear() % 100);
      case "m":
        return p2(t.getMonth() + 1);
      case "d":
        return p2(t.getDate());
      case "e":
        return String(t.getDate()).padStart(2, " ");
      case "H":
        return p2(t.getHours());
      case "I":
        return p2(t.getHours() % 12 || 12);
      case "M":
        return p2(t.getMinutes());
      case "S":
        return p2(t.getSeconds());
      case "p":
        return t.getHours() < 12 ? "AM" : "PM";
      case "b":
        return MONTHS[t.getMonth()]!.slice(0, 3);
      case "B":
        return MONTHS[t.getMonth()]!;
      case "a":
        return DAYS[t.getDay()]!.slice(0, 3);
      case "A":
        return DAYS[t.getDay()]!;
      case "j": {
        const start = new Date(t.getFullYear(), 0, 1);
        return String(Math.floor((t.getTime() - start.getTime()) / 86400000) + 1).padStart(3, "0");
      }
      case "%":
        return "%";
      default:
        return all;
    }
  });
}

/**
 * Global functions: `raise_exception`, `namespace`, `dict`, `range`, `strftime_now` (formats
 * `now`, local time).
 */
export function globalFunctions(now: Date): Map<string, Value> {
  return new Map<string, Value>([
    [
      "strftime_now",
      method("strftime_now", (c) => strftime(str(c.args[0] ?? UNDEFINED, "strftime_now"), now)),
    ],
    [
      "raise_exception",
      method("raise_exception", (c) => {
        throw new EvalFault(toStr(c.args[0] ?? "raise_exception called"));
      }),
    ],
    [
      "namespace",
      method("namespace", (c) => {
        const ns: JDict = new Map();
        for (const a of c.args) {
          if (a instanceof Map) { for (const [k, x] of a) ns.set(k, x); }
        }
        for (const [k, x] of c.kwargs) ns.set(k, x);
        return ns;
      }),
    ],
    ["dict", method("dict", (c) => new Map<DictKey, Value>(c.kwargs))],
    [
      "range",
      method("range", (c) => {
        const a = c.args.map((x) => int(x, "range"));
        const [start, stop, step] = a.length === 1 ? [0, a[0]!, 1] : [a[0]!, a[1]!, a[2] ?? 1];
        if (step === 0) throw new EvalFault("range step must not be zero");
        const out: Value[] = [];
        for (let i = start; step > 0 ? i < stop : i > stop; i += step) out.push(i);
        return out;
      }),
    ],
    [
      "tojson",
      method(
        "tojson",
        (c) =>
          applyFilter("tojson", c.args[0] ?? UNDEFINED, {
            args: c.args.slice(1),
            kwargs: c.kwargs,
          }),
      ),
    ],
  ]);
}
