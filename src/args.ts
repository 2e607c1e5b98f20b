/**
 * Checks of numbers that enter the library from callers: each names the argument and value.
 * @module
 */

import { ArgumentError } from "./errors.ts";

/**
 * Checks that `value` is a byte count or offset TypeScript and the core agree on: an integer
 * number in [min, 2^53). Throws an {@link ArgumentError} naming `what` and the value.
 */
export function requireByteCount(what: string, value: unknown, min = 0): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < min) {
    const shown = typeof value === "bigint" ? `${value}n (a BigInt)` : String(value);
    throw new ArgumentError(
      `${what} must be an integer number in [${min}, 2^53), got ${shown}`,
    );
  }
  return value;
}
