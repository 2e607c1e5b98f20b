/**
 * Template lexer. Follows llama.cpp's common/jinja lexer, whitespace rules included: a single
 * trailing newline of the source is dropped, `lstrip_blocks` and `trim_blocks` are on (as
 * llama.cpp sets them for chat templates), and `-` on a tag strips the whitespace beside it.
 * @module
 */

import { errorAt } from "./error.ts";

/** Token kinds. */
export type TokenType =
  | "text"
  | "comment"
  | "open_statement"
  | "close_statement"
  | "open_expression"
  | "close_expression"
  | "open_paren"
  | "close_paren"
  | "open_curly"
  | "close_curly"
  | "open_square"
  | "close_square"
  | "comma"
  | "dot"
  | "colon"
  | "pipe"
  | "comparison"
  | "additive"
  | "multiplicative"
  | "equals"
  | "unary"
  | "string"
  | "number"
  | "identifier";

/** One token: its kind, its text (string literals unescaped) and its source offset. */
export interface Token {
  type: TokenType;
  value: string;
  pos: number;
}

const ESCAPES: Readonly<Record<string, string>> = {
  n: "\n",
  t: "\t",
  r: "\r",
  b: "\b",
  f: "\f",
  v: "\v",
  "\\": "\\",
  "'": "'",
  '"': '"',
};

const TABLE: ReadonlyArray<readonly [string, TokenType]> = [
  ["{%-", "open_statement"],
  ["-%}", "close_statement"],
  ["{{-", "open_expression"],
  ["-}}", "close_expression"],
  ["{%", "open_statement"],
  ["%}", "close_statement"],
  ["{{", "open_expression"],
  ["}}", "close_expression"],
  ["(", "open_paren"],
  [")", "close_paren"],
  ["{", "open_curly"],
  ["}", "close_curly"],
  ["[", "open_square"],
  ["]", "close_square"],
  [",", "comma"],
  [".", "dot"],
  [":", "colon"],
  ["|", "pipe"],
  ["<=", "comparison"],
  [">=", "comparison"],
  ["==", "comparison"],
  ["!=", "comparison"],
  ["<", "comparison"],
  [">", "comparison"],
  ["+", "additive"],
  ["-", "additive"],
  ["~", "additive"],
  ["*", "multiplicative"],
  ["/", "multiplicative"],
  ["%", "multiplicative"],
  ["=", "equals"],
];

const isSpace = (c: string): boolean =>
  c === " " || c === "\t" || c === "\n" || c === "\r" || c === "\v" || c === "\f";
const isDigit = (c: string): boolean => c >= "0" && c <= "9";
const isWord = (c: string): boolean =>
  (c >= "a" && c <= "z") || (c >= "A" && c <= "Z") || isDigit(c) || c === "_";

function lstripChars(s: string): string {
  let i = 0;
  while (i < s.length && " \t\r\n".includes(s[i]!)) i++;
  return s.slice(i);
}

function rstripChars(s: string): string {
  let i = s.length;
  while (i > 0 && " \t\r\n".includes(s[i - 1]!)) i--;
  return s.slice(0, i);
}

/**
 * Splits a template into tokens. Returns the tokens and the normalized source (newlines as `\n`,
 * a single trailing newline dropped) whose offsets the tokens carry.
 */
export function tokenize(source: string): { tokens: Token[]; source: string } {
  let src = source.replace(/\r\n/g, "\n").replace(/\r/g, "\n");
  if (src.endsWith("\n")) src = src.slice(0, -1);
  const tokens: Token[] = [];
  let pos = 0;
  let curlyDepth = 0;
  const at = (i: number): string => src[i] ?? "";
  const nextIs = (chars: string, n = 1): boolean =>
    pos + n < src.length && chars.includes(at(pos + n));

  const consumeWhile = (pred: (c: string) => boolean): string => {
    let out = "";
    while (pos < src.length && pred(at(pos))) {
      if (at(pos) === "\\") {
        pos++;
        if (pos >= src.length) throw errorAt(src, pos, "unexpected end of input after escape");
        const c = at(pos++);
        const e = ESCAPES[c];
        if (e === undefined) throw errorAt(src, pos - 2, `unknown escape character \\${c}`);
        out += e;
        continue;
      }
      out += at(pos++);
    }
    return out;
  };
  const consumeNumeric = (): string => {
    let num = consumeWhile(isDigit);
    if (at(pos) === "." && isDigit(at(pos + 1))) {
      pos++;
      num += "." + consumeWhile(isDigit);
    }
    return num;
  };

  while (pos < src.length) {
    const last = tokens.length === 0 ? "close_statement" : tokens[tokens.length - 1]!.type;
    if (last === "close_statement" || last === "close_expression" || last === "comment") {
      let rstripLast = false;
      let canRemoveNewline = false;
      if (pos > 3) {
        const c0 = at(pos - 3), c1 = at(pos - 2), c2 = at(pos - 1);
        rstripLast = c0 === "-" && (c1 === "%" || c1 === "}" || c1 === "#") && c2 === "}";
        canRemoveNewline = (c1 === "#" || c1 === "%" || c1 === "-") && c2 === "}";
      }
      const start = pos;
      let end = start;
      while (pos < src.length && !(at(pos) === "{" && nextIs("%{#"))) end = ++pos;
      // lstrip_blocks: whitespace between a line start and a block tag goes.
      if (at(pos) === "{" && nextIs("%#-")) {
        let cur = end;
        while (cur > start) {
          const c = at(cur - 1);
          if (cur === 1) {
            end = 0;
            break;
          }
          if (c === "\n") {
            end = cur;
            break;
          }
          if (!isSpace(c)) break;
          cur--;
        }
      }
      let text = src.slice(start, end);
      // trim_blocks: the first newline after a block tag goes.
      if (canRemoveNewline && text.startsWith("\n")) text = text.slice(1);
      if (rstripLast) text = lstripChars(text);
      if (at(pos) === "{" && nextIs("{%#") && nextIs("-", 2)) text = rstripChars(text);
      if (text.length > 0) {
        tokens.push({ type: "text", value: text, pos: start });
        continue;
      }
    }

    if (at(pos) === "{" && nextIs("#")) {
      const start = pos;
      pos += 2;
      let comment = "";
      while (!(at(pos) === "#" && nextIs("}"))) {
        if (pos + 2 >= src.length) throw errorAt(src, start, "missing end of comment tag");
        comment += at(pos++);
      }
      tokens.push({ type: "comment", value: comment, pos: start });
      pos += 2;
      continue;
    }

    if (at(pos) === "-" && (last === "open_expression" || last === "open_statement")) {
      pos++;
      if (pos >= src.length) break;
    }
    while (pos < src.length && isSpace(at(pos))) pos++;
    if (pos >= src.length) break;

    const ch = at(pos);
    const closing = ch === "-" && nextIs("%}");
    if (!closing && (ch === "-" || ch === "+")) {
      const prev = tokens.length === 0 ? "eof" : tokens[tokens.length - 1]!.type;
      if (prev === "text" || prev === "eof") {
        throw errorAt(src, pos, `unexpected character: ${ch}`);
      }
      const binary = prev === "identifier" || prev === "number" || prev === "string" ||
        prev === "close_paren" || prev === "close_square";
      if (!binary) {
        const start = pos++;
        const num = consumeNumeric();
        tokens.push(
          num.length === 0
            ? { type: "unary", value: ch, pos: start }
            : { type: "number", value: ch + num, pos: start },
        );
        continue;
      }
    }

    let matched = false;
    for (const [seq, type] of TABLE) {
      if (seq === "}}" && curlyDepth > 0) continue;
      if (src.startsWith(seq, pos)) {
        tokens.push({ type, value: seq, pos });
        if (type === "open_expression") curlyDepth = 0;
        else if (type === "open_curly") curlyDepth++;
        else if (type === "close_curly") curlyDepth--;
        pos += seq.length;
        matched = true;
        break;
      }
    }
    if (matched) continue;

    if (ch === "'" || ch === '"') {
      const start = pos++;
      const str = consumeWhile((c) => c !== ch);
      if (pos >= src.length) throw errorAt(src, start, "unterminated string literal");
      tokens.push({ type: "string", value: str, pos: start });
      pos++;
      continue;
    }
    if (isDigit(ch)) {
      const start = pos;
      tokens.push({ type: "number", value: consumeNumeric(), pos: start });
      continue;
    }
    if (isWord(ch)) {
      const start = pos;
      tokens.push({ type: "identifier", value: consumeWhile(isWord), pos: start });
      continue;
    }
    throw errorAt(src, pos, `unexpected character: ${ch}`);
  }
  return { tokens, source: src };
}
