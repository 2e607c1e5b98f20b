/**
 * Template syntax tree: statements and expressions, each with the source offset it starts at.
 * @module
 */

/** An expression node. */
export type Expr =
  | { kind: "literal"; pos: number; value: string | number | boolean | null; float?: boolean }
  | { kind: "name"; pos: number; name: string }
  | { kind: "list"; pos: number; items: Expr[] }
  | { kind: "tuple"; pos: number; items: Expr[] }
  | { kind: "dict"; pos: number; entries: Array<[Expr, Expr]> }
  | { kind: "member"; pos: number; object: Expr; name: string }
  | { kind: "index"; pos: number; object: Expr; index: Expr }
  | {
    kind: "slice";
    pos: number;
    object: Expr;
    start: Expr | null;
    stop: Expr | null;
    step: Expr | null;
  }
  | { kind: "call"; pos: number; callee: Expr; args: Expr[]; kwargs: Array<[string, Expr]> }
  | {
    kind: "filter";
    pos: number;
    value: Expr;
    name: string;
    args: Expr[];
    kwargs: Array<[string, Expr]>;
  }
  | {
    kind: "test";
    pos: number;
    value: Expr;
    name: string;
    negate: boolean;
    args: Expr[];
  }
  | { kind: "unary"; pos: number; op: string; operand: Expr }
  | { kind: "binary"; pos: number; op: string; left: Expr; right: Expr }
  | { kind: "ternary"; pos: number; cond: Expr; then: Expr; otherwise: Expr | null };

/** A statement node. */
export type Stmt =
  | { kind: "text"; pos: number; text: string }
  | { kind: "output"; pos: number; expr: Expr }
  | { kind: "if"; pos: number; cond: Expr; body: Stmt[]; otherwise: Stmt[] }
  | {
    kind: "for";
    pos: number;
    targets: string[];
    iterable: Expr;
    filter: Expr | null;
    body: Stmt[];
    otherwise: Stmt[];
  }
  | { kind: "set"; pos: number; target: Expr; value: Expr | null; body: Stmt[] }
  | {
    kind: "macro";
    pos: number;
    name: string;
    params: Array<[string, Expr | null]>;
    body: Stmt[];
  }
  | { kind: "break"; pos: number }
  | { kind: "continue"; pos: number }
  | { kind: "block"; pos: number; body: Stmt[] }
  | {
    kind: "filter";
    pos: number;
    name: string;
    args: Expr[];
    kwargs: Array<[string, Expr]>;
    body: Stmt[];
  };
