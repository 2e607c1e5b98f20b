/**
 * The chat-template engine's error: every lexer, parser and runtime failure, and
 * `raise_exception(...)`, carries the template position (line:col) it happened at.
 * @module
 */

import { GraftError } from "../../errors.ts";

/**
 * A chat template that cannot be parsed or rendered; the message starts with `line:col` of the
 * template position and says what is wrong.
 *
 * @example
 * ```ts
 * import { ChatTemplate, TemplateError } from "@graft/graft";
 * try {
 *   new ChatTemplate("{{ raise_exception('no') }}").render([]);
 * } catch (e) {
 *   if (e instanceof TemplateError) console.log(e.message); // "1:4: no"
 * }
 * ```
 */
export class TemplateError extends GraftError {
  /** The error class name. */
  override name = "TemplateError";
  /** 1-based line of the template position. */
  readonly line: number;
  /** 1-based column of the template position. */
  readonly column: number;
  /** What is wrong, without the position. */
  readonly reason: string;

  /** An error at `line:col` of the template. */
  constructor(line: number, column: number, reason: string) {
    super(`${line}:${column}: ${reason}`);
    this.line = line;
    this.column = column;
    this.reason = reason;
  }
}

/** Maps a source offset to a 1-based line and column. */
export function positionOf(source: string, offset: number): { line: number; column: number } {
  let line = 1;
  let lineStart = 0;
  const end = Math.min(offset, source.length);
  for (let i = 0; i < end; i++) {
    if (source.charCodeAt(i) === 10) {
      line++;
      lineStart = i + 1;
    }
  }
  return { line, column: end - lineStart + 1 };
}

/** A TemplateError at a source offset. */
export function errorAt(source: string, offset: number, reason: string): TemplateError {
  const { line, column } = positionOf(source, offset);
  return new TemplateError(line, column, reason);
}

/** A failure inside a builtin; the runtime turns it into a TemplateError at the node's position. */
export class EvalFault extends Error {}
