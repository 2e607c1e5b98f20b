/**
 * Template evaluator: runs parsed statements against a context of variables and returns the
 * rendered text. Lenient like llama.cpp's engine: a missing variable or attribute is undefined,
 * which prints as nothing and is false.
 * @module
 */

import type { Expr, Stmt } from "./ast.ts";
import { applyFilter, runTest } from "./filters.ts";
import { globalFunctions } from "./globals.ts";
import { getAttribute } from "./methods.ts";
import { compareValues, contains, iterate } from "./ops.ts";
import { errorAt, EvalFault, TemplateError } from "./error.ts";
import {
  type CallArgs,
  type DictKey,
  dictKey,
  equals,
  isNumber,
  JCallable,
  type JDict,
  JFloat,
  JUndefined,
  numberOf,
  printValue,
  toStr,
  truthy,
  typeName,
  UNDEFINED,
  type Value,
} from "./value.ts";

class Scope {
  readonly vars: Map<string, Value> = new Map();
  constructor(readonly parent: Scope | null) {}

  lookup(name: string): Value {
    if (this.vars.has(name)) return this.vars.get(name)!;
    return this.parent ? this.parent.lookup(name) : UNDEFINED;
  }
}

class BreakSignal {}
class ContinueSignal {}

/** Renders `body` (parsed from `source`) with the given variables. */
export function render(
  body: readonly Stmt[],
  source: string,
  vars: ReadonlyMap<string, Value>,
  now: Date = new Date(),
): string {
  const globals = new Scope(null);
  for (const [k, v] of globalFunctions(now)) globals.vars.set(k, v);
  const top = new Scope(globals);
  for (const [k, v] of vars) top.vars.set(k, v);
  const out: string[] = [];
  new Evaluator(source).block(body, top, out);
  return out.join("");
}

class Evaluator {
  constructor(private readonly source: string) {}

  private fault(pos: number, reason: string): TemplateError {
    return errorAt(this.source, pos, reason);
  }

  block(body: readonly Stmt[], scope: Scope, out: string[]): void {
    for (const s of body) this.stmt(s, scope, out);
  }

  private stmt(s: Stmt, scope: Scope, out: string[]): void {
    switch (s.kind) {
      case "text":
        out.push(s.text);
        return;
      case "output":
        printValue(this.expr(s.expr, scope), out);
        return;
      case "if":
        this.block(truthy(this.expr(s.cond, scope)) ? s.body : s.otherwise, scope, out);
        return;
      case "for":
        this.forLoop(s, scope, out);
        return;
      case "set": {
        let value: Value;
        if (s.value) value = this.expr(s.value, scope);
        else {
          const inner: string[] = [];
          this.block(s.body, scope, inner);
          value = inner.join("");
        }
        this.assign(s.target, value, scope);
        return;
      }
      case "macro":
        scope.vars.set(s.name, this.macro(s, scope));
        return;
      case "break":
        throw new BreakSignal();
      case "continue":
        throw new ContinueSignal();
      case "block":
        this.block(s.body, scope, out);
        return;
      case "filter": {
        const inner: string[] = [];
        this.block(s.body, scope, inner);
        const call = this.callArgs(s.args, s.kwargs, scope);
        try {
          printValue(applyFilter(s.name, inner.join(""), call), out);
        } catch (e) {
          if (e instanceof EvalFault) throw this.fault(s.pos, e.message);
          throw e;
        }
        return;
      }
    }
  }

  private assign(target: Expr, value: Value, scope: Scope): void {
    if (target.kind === "name") {
      scope.vars.set(target.name, value);
    } else if (target.kind === "member") {
      const obj = this.expr(target.object, scope);
      if (!(obj instanceof Map)) {
        throw this.fault(target.pos, `cannot set attribute '${target.name}' on ${typeName(obj)}`);
      }
      obj.set(target.name, value);
    } else if (target.kind === "tuple") {
      const items = this.unpack(value, target.items.length, target.pos);
      target.items.forEach((t, i) => this.assign(t, items[i]!, scope));
    } else {
      throw this.fault(target.pos, "cannot assign to this expression");
    }
  }

  private unpack(value: Value, n: number, pos: number): Value[] {
    if (!Array.isArray(value) || value.length !== n) {
      throw this.fault(pos, `cannot unpack ${typeName(value)} into ${n} names`);
    }
    return value;
  }

  private forLoop(s: Extract<Stmt, { kind: "for" }>, scope: Scope, out: string[]): void {
    let items: Value[];
    try {
      items = iterate(this.expr(s.iterable, scope));
    } catch (e) {
      if (e instanceof EvalFault) throw this.fault(s.iterable.pos, e.message);
      throw e;
    }
    const bind = (iter: Scope, item: Value): void => {
      if (s.targets.length === 1) iter.vars.set(s.targets[0]!, item);
      else {
        const parts = this.unpack(item, s.targets.length, s.pos);
        s.targets.forEach((t, i) => iter.vars.set(t, parts[i]!));
      }
    };
    if (s.filter) {
      const filter = s.filter;
      items = items.filter((item) => {
        const f = new Scope(scope);
        bind(f, item);
        return truthy(this.expr(filter, f));
      });
    }
    if (items.length === 0) {
      this.block(s.otherwise, scope, out);
      return;
    }
    const n = items.length;
    for (let i = 0; i < n; i++) {
      const iter = new Scope(scope);
      bind(iter, items[i]!);
      const loop: JDict = new Map<DictKey, Value>([
        ["index", i + 1],
        ["index0", i],
        ["revindex", n - i],
        ["revindex0", n - i - 1],
        ["first", i === 0],
        ["last", i === n - 1],
        ["length", n],
        ["previtem", i > 0 ? items[i - 1]! : UNDEFINED],
        ["nextitem", i < n - 1 ? items[i + 1]! : UNDEFINED],
        [
          "cycle",
          new JCallable("cycle", (c) => c.args.length ? c.args[i % c.args.length]! : UNDEFINED),
        ],
      ]);
      iter.vars.set("loop", loop);
      try {
        this.block(s.body, iter, out);
      } catch (e) {
        if (e instanceof BreakSignal) break;
        if (e instanceof ContinueSignal) continue;
        throw e;
      }
    }
  }

  private macro(s: Extract<Stmt, { kind: "macro" }>, defScope: Scope): JCallable {
    return new JCallable(s.name, (c: CallArgs) => {
      const local = new Scope(defScope);
      s.params.forEach(([name, def], i) => {
        let v: Value;
        if (c.kwargs.has(name)) v = c.kwargs.get(name)!;
        else if (i < c.args.length) v = c.args[i]!;
        else v = def ? this.expr(def, local) : UNDEFINED;
        local.vars.set(name, v);
      });
      local.vars.set("varargs", c.args.slice(s.params.length));
      const out: string[] = [];
      this.block(s.body, local, out);
      return out.join("");
    });
  }

  expr(e: Expr, scope: Scope): Value {
    try {
      return this.evaluate(e, scope);
    } catch (err) {
      if (err instanceof EvalFault) throw this.fault(e.pos, err.message);
      throw err;
    }
  }

  private callArgs(args: Expr[], kwargs: Array<[string, Expr]>, scope: Scope): CallArgs {
    return {
      args: args.map((a) => this.expr(a, scope)),
      kwargs: new Map(kwargs.map(([k, v]) => [k, this.expr(v, scope)])),
    };
  }

  private evaluate(e: Expr, scope: Scope): Value {
    switch (e.kind) {
      case "literal":
        return e.float && typeof e.value === "number" ? new JFloat(e.value) : e.value;
      case "name":
        return scope.lookup(e.name);
      case "list":
      case "tuple":
        return e.items.map((x) => this.expr(x, scope));
      case "dict": {
        const d: JDict = new Map();
        for (const [k, v] of e.entries) d.set(dictKey(this.expr(k, scope)), this.expr(v, scope));
        return d;
      }
      case "member":
        return getAttribute(this.expr(e.object, scope), e.name);
      case "index":
        return this.index(this.expr(e.object, scope), this.expr(e.index, scope));
      case "slice":
        return this.slice(
          this.expr(e.object, scope),
          e.start ? this.expr(e.start, scope) : null,
          e.stop ? this.expr(e.stop, scope) : null,
          e.step ? this.expr(e.step, scope) : null,
        );
      case "call": {
        const callee = this.expr(e.callee, scope);
        const call = this.callArgs(e.args, e.kwargs, scope);
        if (!(callee instanceof JCallable)) {
          const what = e.callee.kind === "name" ? `'${e.callee.name}'` : typeName(callee);
          throw new EvalFault(`${what} is not callable`);
        }
        return callee.fn(call);
      }
      case "filter": {
        const v = this.expr(e.value, scope);
        const call = this.callArgs(e.args, e.kwargs, scope);
        return applyFilter(e.name, v, call);
      }
      case "test": {
        const v = this.expr(e.value, scope);
        const r = runTest(e.name, v, e.args.map((a) => this.expr(a, scope)));
        return e.negate ? !r : r;
      }
      case "unary": {
        const v = this.expr(e.operand, scope);
        if (e.op === "not") return !truthy(v);
        if (typeof v === "number") return e.op === "-" ? -v : v;
        if (v instanceof JFloat) return e.op === "-" ? new JFloat(-v.value) : v;
        throw new EvalFault(`unary ${e.op} on ${typeName(v)}`);
      }
      case "binary":
        return this.binary(e, scope);
      case "ternary":
        if (truthy(this.expr(e.cond, scope))) return this.expr(e.then, scope);
        return e.otherwise ? this.expr(e.otherwise, scope) : UNDEFINED;
    }
  }

  private index(obj: Value, key: Value): Value {
    if (Array.isArray(obj) || typeof obj === "string") {
      if (typeof key !== "number") {
        if (typeof obj === "string" && typeof key === "string") return getAttribute(obj, key);
        throw new EvalFault(`${typeName(obj)} index must be an integer, got ${typeName(key)}`);
      }
      const xs = typeof obj === "string" ? [...obj] : obj;
      const i = key < 0 ? xs.length + key : key;
      return i >= 0 && i < xs.length ? xs[i]! : UNDEFINED;
    }
    if (obj instanceof Map) {
      const k = dictKey(key);
      if (obj.has(k)) return obj.get(k)!;
      return typeof k === "string" ? getAttribute(obj, k) : UNDEFINED;
    }
    if (obj instanceof JUndefined || obj === null) return UNDEFINED;
    throw new EvalFault(`cannot index ${typeName(obj)}`);
  }

  private slice(obj: Value, start: Value | null, stop: Value | null, step: Value | null): Value {
    const xs: Value[] = typeof obj === "string" ? [...obj] : Array.isArray(obj) ? obj : [];
    if (!Array.isArray(obj) && typeof obj !== "string") {
      if (obj instanceof JUndefined || obj === null) return UNDEFINED;
      throw new EvalFault(`cannot slice ${typeName(obj)}`);
    }
    const asInt = (v: Value | null): number | null => {
      if (v === null || v instanceof JUndefined) return null;
      if (typeof v !== "number") throw new EvalFault("slice indices must be integers");
      return v;
    };
    const n = xs.length;
    const st = asInt(step) ?? 1;
    if (st === 0) throw new EvalFault("slice step cannot be zero");
    const norm = (v: number | null, def: number, lo: number, hi: number): number => {
      if (v === null) return def;
      const x = v < 0 ? v + n : v;
      return Math.min(Math.max(x, lo), hi);
    };
    const out: Value[] = [];
    if (st > 0) {
      const a = norm(asInt(start), 0, 0, n), b = norm(asInt(stop), n, 0, n);
      for (let i = a; i < b; i += st) out.push(xs[i]!);
    } else {
      const a = norm(asInt(start), n - 1, -1, n - 1), b = norm(asInt(stop), -1, -1, n - 1);
      for (let i = a; i > b; i += st) out.push(xs[i]!);
    }
    return typeof obj === "string" ? out.join("") : out;
  }

  private binary(e: Extract<Expr, { kind: "binary" }>, scope: Scope): Value {
    const left = this.expr(e.left, scope);
    if (e.op === "and") return truthy(left) ? this.expr(e.right, scope) : left;
    if (e.op === "or") return truthy(left) ? left : this.expr(e.right, scope);
    const right = this.expr(e.right, scope);
    const op = e.op;
    if (op === "==") return equals(left, right);
    if (op === "!=") return !equals(left, right);
    const nullish = (v: Value): boolean => v === null || v instanceof JUndefined;
    if (nullish(left) || nullish(right)) {
      if (right instanceof JUndefined && (op === "in" || op === "not in")) return op === "not in";
      if (op === "in" || op === "not in") {
        if (!nullish(right)) return contains(right, left) === (op === "in");
      }
      if ((op === "+" || op === "~") && (typeof left === "string" || typeof right === "string")) {
        return (nullish(left) ? "" : toStr(left)) + (nullish(right) ? "" : toStr(right));
      }
      throw new EvalFault(`cannot apply '${op}' to ${typeName(left)} and ${typeName(right)}`);
    }
    if (op === "in") return contains(right, left);
    if (op === "not in") return !contains(right, left);
    if (op === "~") return toStr(left) + toStr(right);
    if (isNumber(left) && isNumber(right)) {
      const a = numberOf(left), b = numberOf(right);
      const float = left instanceof JFloat || right instanceof JFloat;
      switch (op) {
        case "+":
        case "-":
        case "*": {
          const r = op === "+" ? a + b : op === "-" ? a - b : a * b;
          return float ? new JFloat(r) : Math.trunc(r);
        }
        case "/":
          return new JFloat(a / b);
        case "%": {
          const r = a % b;
          return float ? new JFloat(r) : Math.trunc(r);
        }
        default:
          return compareValues(op, left, right);
      }
    }
    if (op === "+") {
      if (Array.isArray(left) && Array.isArray(right)) return [...left, ...right];
      if (typeof left === "string" || typeof right === "string") return toStr(left) + toStr(right);
    }
    if (op === "*") {
      if (typeof left === "string" && typeof right === "number") {
        return left.repeat(Math.max(right, 0));
      }
      if (typeof right === "string" && typeof left === "number") {
        return right.repeat(Math.max(left, 0));
      }
    }
    if (op === "<" || op === ">" || op === "<=" || op === ">=") {
      return compareValues(op, left, right);
    }
    throw new EvalFault(`cannot apply '${op}' to ${typeName(left)} and ${typeName(right)}`);
  }
}
