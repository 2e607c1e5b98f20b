/**
 * Checks of numbers that enter the library from callers: each names the argument and value.
 * @module
 */

import { ArgumentError } from "./errors.ts";

/**
 * Shows any value a caller passed in an error message: BigInts marked as such, NaN and
 * Infinity as words, strings quoted, arrays item by item, typed arrays and objects by kind
 * (`JSON.stringify` throws on BigInt and hides NaN).
 */
export function showValue(value: unknown): string {
  if (typeof value === "bigint") return `${value}n (a BigInt)`;
  if (typeof value === "string") return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(showValue).join(", ")}]`;
  if (ArrayBuffer.isView(value)) return `a ${value.constructor.name}`;
  if (value === null) return "null";
  return typeof value === "object" ? "an object" : String(value);
}

/**
 * Checks that `value` is a byte count or offset TypeScript and the core agree on: an integer
 * number in [min, 2^53). Throws an {@link ArgumentError} naming `what` and the value.
 */
export function requireByteCount(what: string, value: unknown, min = 0): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < min) {
    throw new ArgumentError(
      `${what} must be an integer number in [${min}, 2^53), got ${showValue(value)}`,
    );
  }
  return value;
}
