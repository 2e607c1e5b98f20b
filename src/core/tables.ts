/**
 * The load-time check of the core's tables against TypeScript's: op codes (`CoreOp` in
 * `src/op.ts`), the dtype traits (`src/dtype.ts`) and status codes (`src/errors.ts`). The
 * library reports its tables as text (`zig/tables.zig`); any difference is a clear error when
 * the library loads, instead of a graph computed with the wrong op or read with the wrong size.
 * @module
 */

import { DTYPE_NAMES, DTYPES } from "../dtype.ts";
import { Status } from "../errors.ts";
import { CoreOp } from "../op.ts";

/** camelCase -> snake_case: the core's spelling of a status name. */
function snake(name: string): string {
  return name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

/** The table text the core must report, built from TypeScript's tables (same line format). */
export function expectedTables(): string {
  const lines: string[] = [];
  for (const [name, code] of Object.entries(CoreOp)) lines.push(`op ${name} ${code}`);
  for (const name of DTYPE_NAMES) {
    const t = DTYPES[name];
    lines.push(
      `dtype ${name} ${t.code} ${t.blockSize} ${t.blockBytes} ${t.ggmlType} ${t.weight ? 1 : 0}`,
    );
  }
  for (const [name, code] of Object.entries(Status)) lines.push(`status ${snake(name)} ${code}`);
  return lines.join("\n") + "\n";
}

function parse(text: string): Map<string, string> {
  const entries = new Map<string, string>();
  for (const line of text.split("\n")) {
    const [kind, name, ...values] = line.trim().split(/\s+/);
    if (!kind || !name) continue;
    entries.set(`${kind} ${name}`, values.join(" "));
  }
  return entries;
}

/**
 * The differences between the core's tables and the expected ones, one line each (empty when
 * they agree): entries missing on either side and entries whose values differ.
 */
export function compareTables(native: string, expected: string = expectedTables()): string[] {
  const have = parse(native);
  const want = parse(expected);
  const problems: string[] = [];
  for (const [key, value] of want) {
    const got = have.get(key);
    if (got === undefined) problems.push(`${key}: missing in the library (TypeScript: ${value})`);
    else if (got !== value) problems.push(`${key}: library ${got}, TypeScript ${value}`);
  }
  for (const [key, value] of have) {
    if (!want.has(key)) problems.push(`${key}: only in the library (${value})`);
  }
  return problems;
}
