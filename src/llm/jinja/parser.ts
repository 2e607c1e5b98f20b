/**
 * Template parser: tokens to statements. Operator precedence follows Jinja (and llama.cpp's
 * engine): ternary < or < and < not < comparison/in < `+ - ~` < `* / %` < `is` < `|` < call/member.
 * @module
 */

import type { Expr, Stmt } from "./ast.ts";
import { errorAt } from "./error.ts";
import type { Token, TokenType } from "./lexer.ts";

/** Parses the tokens of a template into its statements. */
export function parse(tokens: readonly Token[], source: string): Stmt[] {
  return new Parser(tokens, source).program();
}

class Parser {
  private i = 0;
  constructor(private readonly tokens: readonly Token[], private readonly source: string) {}

  program(): Stmt[] {
    const body: Stmt[] = [];
    while (this.i < this.tokens.length) {
      const s = this.statement();
      if (s) body.push(s);
    }
    return body;
  }

  private peek(n = 0): Token | undefined {
    return this.tokens[this.i + n];
  }

  private fail(reason: string, tok?: Token): never {
    const t = tok ?? this.peek();
    throw errorAt(this.source, t ? t.pos : this.source.length, reason);
  }

  private describe(t: Token | undefined): string {
    return t ? `'${t.value}'` : "end of template";
  }

  private expect(type: TokenType, what: string): Token {
    const t = this.peek();
    if (!t || t.type !== type) this.fail(`expected ${what}, got ${this.describe(t)}`);
    this.i++;
    return t;
  }

  private is(type: TokenType, value?: string): boolean {
    const t = this.peek();
    return t !== undefined && t.type === type && (value === undefined || t.value === value);
  }

  private isWord(word: string, n = 0): boolean {
    const t = this.peek(n);
    return t !== undefined && t.type === "identifier" && t.value === word;
  }

  private expectWord(word: string): Token {
    if (!this.isWord(word)) this.fail(`expected '${word}', got ${this.describe(this.peek())}`);
    return this.tokens[this.i++]!;
  }

  private statement(): Stmt | null {
    const t = this.peek()!;
    switch (t.type) {
      case "text":
        this.i++;
        return { kind: "text", pos: t.pos, text: t.value };
      case "comment":
        this.i++;
        return null;
      case "open_expression": {
        this.i++;
        const expr = this.expression();
        this.expect("close_expression", "'}}'");
        return { kind: "output", pos: t.pos, expr };
      }
      case "open_statement":
        return this.blockStatement();
      default:
        return this.fail(`unexpected ${this.describe(t)}`);
    }
  }

  /** Statements up to one of the `{% word %}` tags in `ends`; leaves the `{%` of that tag. */
  private bodyUntil(ends: readonly string[]): Stmt[] {
    const body: Stmt[] = [];
    for (;;) {
      const t = this.peek();
      if (!t) {
        this.fail(`unexpected end of template, expected ${ends.map((e) => `'${e}'`).join(" or ")}`);
      }
      if (t.type === "open_statement") {
        const w = this.peek(1);
        if (w && w.type === "identifier" && ends.includes(w.value)) return body;
      }
      const s = this.statement();
      if (s) body.push(s);
    }
  }

  private endTag(word: string): void {
    this.expect("open_statement", "'{%'");
    this.expectWord(word);
    this.expect("close_statement", "'%}'");
  }

  private blockStatement(): Stmt {
    this.expect("open_statement", "'{%'");
    const kw = this.peek();
    if (!kw || kw.type !== "identifier") {
      return this.fail(`expected a statement name, got ${this.describe(kw)}`);
    }
    this.i++;
    switch (kw.value) {
      case "if":
        return this.ifStatement(kw.pos);
      case "for":
        return this.forStatement(kw.pos);
      case "set":
        return this.setStatement(kw.pos);
      case "macro":
        return this.macroStatement(kw.pos);
      case "break":
      case "continue":
        this.expect("close_statement", "'%}'");
        return { kind: kw.value, pos: kw.pos };
      case "filter": {
        const name = this.expect("identifier", "a filter name").value;
        let args: Expr[] = [];
        let kwargs: Array<[string, Expr]> = [];
        if (this.is("open_paren")) ({ args, kwargs } = this.callArgs());
        this.expect("close_statement", "'%}'");
        const body = this.bodyUntil(["endfilter"]);
        this.endTag("endfilter");
        return { kind: "filter", pos: kw.pos, name, args, kwargs, body };
      }
      case "generation": {
        this.expect("close_statement", "'%}'");
        const body = this.bodyUntil(["endgeneration"]);
        this.endTag("endgeneration");
        return { kind: "block", pos: kw.pos, body };
      }
      default:
        if (/^(end\w+|else|elif)$/.test(kw.value)) {
          return this.fail(`unexpected '${kw.value}' (no open block it could close)`, kw);
        }
        return this.fail(`unknown statement '${kw.value}'`, kw);
    }
  }

  private ifStatement(pos: number): Stmt {
    const cond = this.expression();
    this.expect("close_statement", "'%}'");
    const body = this.bodyUntil(["elif", "else", "endif"]);
    this.expect("open_statement", "'{%'");
    const w = this.tokens[this.i++]!;
    let otherwise: Stmt[] = [];
    if (w.value === "elif") {
      otherwise = [this.ifStatement(w.pos)];
      return { kind: "if", pos, cond, body, otherwise };
    }
    if (w.value === "else") {
      this.expect("close_statement", "'%}'");
      otherwise = this.bodyUntil(["endif"]);
      this.expect("open_statement", "'{%'");
      this.expectWord("endif");
    }
    this.expect("close_statement", "'%}'");
    return { kind: "if", pos, cond, body, otherwise };
  }

  private forStatement(pos: number): Stmt {
    const targets = [this.expect("identifier", "a loop variable").value];
    while (this.is("comma")) {
      this.i++;
      targets.push(this.expect("identifier", "a loop variable").value);
    }
    this.expectWord("in");
    const iterable = this.ternaryFree();
    let filter: Expr | null = null;
    if (this.isWord("if")) {
      this.i++;
      filter = this.expression();
    }
    this.expect("close_statement", "'%}'");
    const body = this.bodyUntil(["else", "endfor"]);
    let otherwise: Stmt[] = [];
    this.expect("open_statement", "'{%'");
    if (this.isWord("else")) {
      this.i++;
      this.expect("close_statement", "'%}'");
      otherwise = this.bodyUntil(["endfor"]);
      this.expect("open_statement", "'{%'");
    }
    this.expectWord("endfor");
    this.expect("close_statement", "'%}'");
    return { kind: "for", pos, targets, iterable, filter, body, otherwise };
  }

  private setStatement(pos: number): Stmt {
    let target = this.primaryWithMembers();
    if (this.is("comma")) {
      const items = [target];
      while (this.is("comma")) {
        this.i++;
        items.push(this.primaryWithMembers());
      }
      target = { kind: "tuple", pos: target.pos, items };
    }
    if (this.is("equals")) {
      this.i++;
      const value = this.expression();
      this.expect("close_statement", "'%}'");
      return { kind: "set", pos, target, value, body: [] };
    }
    this.expect("close_statement", "'%}' or '='");
    const body = this.bodyUntil(["endset"]);
    this.endTag("endset");
    return { kind: "set", pos, target, value: null, body };
  }

  private macroStatement(pos: number): Stmt {
    const name = this.expect("identifier", "a macro name").value;
    this.expect("open_paren", "'('");
    const params: Array<[string, Expr | null]> = [];
    while (!this.is("close_paren")) {
      const p = this.expect("identifier", "a parameter name").value;
      let def: Expr | null = null;
      if (this.is("equals")) {
        this.i++;
        def = this.expression();
      }
      params.push([p, def]);
      if (!this.is("comma")) break;
      this.i++;
    }
    this.expect("close_paren", "')'");
    this.expect("close_statement", "'%}'");
    const body = this.bodyUntil(["endmacro"]);
    this.endTag("endmacro");
    return { kind: "macro", pos, name, params, body };
  }

  /** A full expression, with a trailing `if ... else ...`. */
  expression(): Expr {
    const a = this.or();
    if (this.isWord("if")) {
      const t = this.tokens[this.i++]!;
      const cond = this.or();
      let otherwise: Expr | null = null;
      if (this.isWord("else")) {
        this.i++;
        otherwise = this.expression();
      }
      return { kind: "ternary", pos: t.pos, cond, then: a, otherwise };
    }
    return a;
  }

  /** An expression without a trailing ternary (a for loop's iterable, before its `if`). */
  private ternaryFree(): Expr {
    return this.or();
  }

  private or(): Expr {
    let left = this.and();
    while (this.isWord("or")) {
      const t = this.tokens[this.i++]!;
      left = { kind: "binary", pos: t.pos, op: "or", left, right: this.and() };
    }
    return left;
  }

  private and(): Expr {
    let left = this.not();
    while (this.isWord("and")) {
      const t = this.tokens[this.i++]!;
      left = { kind: "binary", pos: t.pos, op: "and", left, right: this.not() };
    }
    return left;
  }

  private not(): Expr {
    if (this.isWord("not")) {
      const t = this.tokens[this.i++]!;
      return { kind: "unary", pos: t.pos, op: "not", operand: this.not() };
    }
    return this.comparison();
  }

  private comparison(): Expr {
    let left = this.additive();
    for (;;) {
      const t = this.peek();
      if (!t) return left;
      let op: string | null = null;
      if (t.type === "comparison") {
        op = t.value;
        this.i++;
      } else if (this.isWord("in")) {
        op = "in";
        this.i++;
      } else if (this.isWord("not") && this.isWord("in", 1)) {
        op = "not in";
        this.i += 2;
      }
      if (op === null) return left;
      left = { kind: "binary", pos: t.pos, op, left, right: this.additive() };
    }
  }

  private additive(): Expr {
    let left = this.multiplicative();
    while (this.is("additive")) {
      const t = this.tokens[this.i++]!;
      left = { kind: "binary", pos: t.pos, op: t.value, left, right: this.multiplicative() };
    }
    return left;
  }

  private multiplicative(): Expr {
    let left = this.unary();
    while (this.is("multiplicative")) {
      const t = this.tokens[this.i++]!;
      left = { kind: "binary", pos: t.pos, op: t.value, left, right: this.unary() };
    }
    return left;
  }

  private unary(): Expr {
    if (this.is("unary")) {
      const t = this.tokens[this.i++]!;
      return { kind: "unary", pos: t.pos, op: t.value, operand: this.unary() };
    }
    return this.testExpr();
  }

  private testExpr(): Expr {
    let value = this.filterExpr();
    while (this.isWord("is")) {
      const t = this.tokens[this.i++]!;
      let negate = false;
      if (this.isWord("not")) {
        this.i++;
        negate = true;
      }
      const nameTok = this.peek();
      if (!nameTok || nameTok.type !== "identifier") this.fail("expected a test name after 'is'");
      this.i++;
      const args: Expr[] = [];
      if (this.is("open_paren")) {
        const call = this.callArgs();
        args.push(...call.args);
      } else if (
        this.peek() && ["string", "number"].includes(this.peek()!.type) ||
        (this.peek()?.type === "identifier" && !["and", "or", "else", "if", "is", "not", "in"]
          .includes(this.peek()!.value))
      ) {
        // `x is divisibleby 3`, `x is sameas none`: one argument without parentheses.
        args.push(this.primaryWithMembers());
      }
      value = { kind: "test", pos: t.pos, value, name: nameTok.value, negate, args };
    }
    return value;
  }

  private filterExpr(): Expr {
    let value = this.primaryWithMembers();
    while (this.is("pipe")) {
      const t = this.tokens[this.i++]!;
      const name = this.expect("identifier", "a filter name").value;
      let args: Expr[] = [];
      let kwargs: Array<[string, Expr]> = [];
      if (this.is("open_paren")) ({ args, kwargs } = this.callArgs());
      value = { kind: "filter", pos: t.pos, value, name, args, kwargs };
    }
    return value;
  }

  private callArgs(): { args: Expr[]; kwargs: Array<[string, Expr]> } {
    this.expect("open_paren", "'('");
    const args: Expr[] = [];
    const kwargs: Array<[string, Expr]> = [];
    while (!this.is("close_paren")) {
      if (this.is("identifier") && this.peek(1)?.type === "equals") {
        const name = this.tokens[this.i]!.value;
        this.i += 2;
        kwargs.push([name, this.expression()]);
      } else {
        args.push(this.expression());
      }
      if (!this.is("comma")) break;
      this.i++;
    }
    this.expect("close_paren", "')' or ','");
    return { args, kwargs };
  }

  private primaryWithMembers(): Expr {
    let e = this.primary();
    for (;;) {
      const t = this.peek();
      if (!t) return e;
      if (t.type === "dot") {
        this.i++;
        const name = this.expect("identifier", "an attribute name").value;
        e = { kind: "member", pos: t.pos, object: e, name };
      } else if (t.type === "open_square") {
        this.i++;
        e = this.subscript(e, t.pos);
      } else if (t.type === "open_paren") {
        const { args, kwargs } = this.callArgs();
        e = { kind: "call", pos: e.pos, callee: e, args, kwargs };
      } else {
        return e;
      }
    }
  }

  private subscript(object: Expr, pos: number): Expr {
    const parts: Array<Expr | null> = [null];
    let colons = 0;
    while (!this.is("close_square")) {
      if (this.is("colon")) {
        this.i++;
        colons++;
        if (colons > 2) this.fail("too many ':' in a slice");
        parts.push(null);
      } else {
        if (parts[colons] !== null) this.fail("expected ':' or ']'");
        parts[colons] = this.expression();
      }
    }
    this.expect("close_square", "']'");
    if (colons === 0) {
      if (parts[0] === null) this.fail("empty subscript");
      return { kind: "index", pos, object, index: parts[0]! };
    }
    return {
      kind: "slice",
      pos,
      object,
      start: parts[0] ?? null,
      stop: parts[1] ?? null,
      step: parts[2] ?? null,
    };
  }

  private primary(): Expr {
    const t = this.peek();
    if (!t) return this.fail("unexpected end of template, expected an expression");
    switch (t.type) {
      case "string": {
        this.i++;
        let value = t.value;
        while (this.is("string")) value += this.tokens[this.i++]!.value; // 'a' 'b' is 'ab'
        return { kind: "literal", pos: t.pos, value };
      }
      case "number": {
        this.i++;
        const float = t.value.includes(".");
        return { kind: "literal", pos: t.pos, value: Number(t.value), float };
      }
      case "identifier": {
        this.i++;
        switch (t.value) {
          case "true":
          case "True":
            return { kind: "literal", pos: t.pos, value: true };
          case "false":
          case "False":
            return { kind: "literal", pos: t.pos, value: false };
          case "none":
          case "None":
            return { kind: "literal", pos: t.pos, value: null };
        }
        return { kind: "name", pos: t.pos, name: t.value };
      }
      case "open_paren": {
        this.i++;
        if (this.is("close_paren")) {
          this.i++;
          return { kind: "tuple", pos: t.pos, items: [] };
        }
        const first = this.expression();
        if (this.is("comma")) {
          const items = [first];
          while (this.is("comma")) {
            this.i++;
            if (this.is("close_paren")) break;
            items.push(this.expression());
          }
          this.expect("close_paren", "')'");
          return { kind: "tuple", pos: t.pos, items };
        }
        this.expect("close_paren", "')'");
        return first;
      }
      case "open_square": {
        this.i++;
        const items: Expr[] = [];
        while (!this.is("close_square")) {
          items.push(this.expression());
          if (!this.is("comma")) break;
          this.i++;
        }
        this.expect("close_square", "']' or ','");
        return { kind: "list", pos: t.pos, items };
      }
      case "open_curly": {
        this.i++;
        const entries: Array<[Expr, Expr]> = [];
        while (!this.is("close_curly")) {
          const k = this.expression();
          this.expect("colon", "':'");
          entries.push([k, this.expression()]);
          if (!this.is("comma")) break;
          this.i++;
        }
        this.expect("close_curly", "'}' or ','");
        return { kind: "dict", pos: t.pos, entries };
      }
      default:
        return this.fail(`unexpected ${this.describe(t)}, expected an expression`);
    }
  }
}
