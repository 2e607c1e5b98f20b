/**
 * Shape and indexing ops, as ggml defines them: `concat`, `pad` / `padExt` (zeros),
 * `padCircular` (wrapped around),
 * `padReflect1d`, `roll`, `repeatBack`, the triangular masks `tri` and `diagMaskInf`, `fill`
 * and `arange`. The moving ops copy elements bit for bit (f32, f16 and i32 alike), so their
 * results are exact on every backend.
 * @module
 */

import type { DType } from "../dtype.ts";
import { ShapeError } from "../errors.ts";
import { Op, type OpCode } from "../op.ts";
import { type Dims, formatShape, Tensor } from "../tensor.ts";
import { showValue } from "../args.ts";
import { requireDType, requireFinite } from "./check.ts";

/** The dtypes the element-moving ops take (and return). */
const MOVED: readonly DType[] = ["f32", "f16", "i32"];

/** Largest whole-number param: params travel as f32, exact up to 2^24. */
const PARAM_INT_MAX = 2 ** 24;

/** A whole-number argument in [min, max]; a ShapeError names the op, the argument and value. */
function requireInt(op: string, name: string, value: unknown, min: number, max: number): number {
  if (
    typeof value !== "number" || !Number.isInteger(value) || value < min || value > max ||
    Math.abs(value) > PARAM_INT_MAX
  ) {
    throw new ShapeError(
      `${op}: ${name} must be a whole number in [${min}, ${Math.min(max, PARAM_INT_MAX)}], ` +
        `got ${showValue(value)}`,
    );
  }
  return value;
}

/**
 * `a` and `b` joined along `dim` (ggml_concat): every other dimension must match, and both
 * have one dtype (f32, f16 or i32). Any strides.
 *
 * @example
 * ```ts
 * import { concat, Context } from "../../mod.ts";
 * const ctx = new Context();
 * const y = concat(ctx.newTensor("f32", [4, 3]), ctx.newTensor("f32", [4, 2]), 1);
 * console.log(y.ne); // [4, 5, 1, 1]
 * ```
 */
export function concat(a: Tensor, b: Tensor, dim: number): Tensor {
  requireDType("concat", a, MOVED);
  requireDType("concat", b, [a.dtype]);
  requireInt("concat", "dim", dim, 0, 3);
  const ne = [...a.ne] as [number, number, number, number];
  for (let d = 0; d < 4; d++) {
    if (d === dim) {
      ne[d] = a.ne[d]! + b.ne[d]!;
    } else if (a.ne[d] !== b.ne[d]) {
      throw new ShapeError(
        `concat: ${formatShape(a.ne)} and ${formatShape(b.ne)} differ in dim ${d}, ` +
          `not only in dim ${dim}`,
      );
    }
  }
  return new Tensor({ dtype: a.dtype, ne, op: Op.concat, src: [a, b], params: [dim] });
}

/** Zeros before (`left`) and after (`right`) each dimension, for {@link padExt}. */
export interface PadAmounts {
  /** Elements added before each dimension (default 0 each). */
  readonly left?: readonly [number, number, number, number];
  /** Elements added after each dimension (default 0 each). */
  readonly right?: readonly [number, number, number, number];
}

/**
 * `a` with zeros added after each dimension (ggml_pad): `[x, y] -> [x, y, 0, 0]` for `p0 = 2`.
 *
 * @example
 * ```ts
 * import { Context, pad } from "../../mod.ts";
 * const ctx = new Context();
 * console.log(pad(ctx.newTensor("f32", [3, 2]), [1, 2, 0, 0]).ne); // [4, 4, 1, 1]
 * ```
 */
export function pad(a: Tensor, after: readonly [number, number, number, number]): Tensor {
  return padWith("pad", a, { right: after });
}

/**
 * `a` with zeros before and after each dimension (ggml_pad_ext); f32, f16 or i32, any strides.
 *
 * @example
 * ```ts
 * import { Context, padExt } from "../../mod.ts";
 * const ctx = new Context();
 * const y = padExt(ctx.newTensor("f32", [3, 2]), { left: [1, 0, 0, 0], right: [2, 1, 0, 0] });
 * console.log(y.ne); // [6, 3, 1, 1]
 * ```
 */
export function padExt(a: Tensor, amounts: PadAmounts): Tensor {
  return padWith("padExt", a, amounts);
}

/**
 * `a` padded circularly before and after each dimension (ggml_pad_ext_circular; ggml_pad_circular
 * pads after only): a pad repeats the far side of `a`, as on a torus, again and again when it
 * is longer than `a`. f32, f16 or i32, any strides.
 *
 * @example
 * ```ts
 * import { Context, padCircular } from "../../mod.ts";
 * const ctx = new Context();
 * // [a, b, c] -> [c, a, b, c, a]
 * const y = padCircular(ctx.newTensor("f32", [3]), { left: [1, 0, 0, 0], right: [1, 0, 0, 0] });
 * console.log(y.ne); // [5, 1, 1, 1]
 * ```
 */
export function padCircular(a: Tensor, amounts: PadAmounts): Tensor {
  return padWith("padCircular", a, amounts, Op.padCircular);
}

function padWith(op: string, a: Tensor, amounts: PadAmounts, code: OpCode = Op.pad): Tensor {
  requireDType(op, a, MOVED);
  const params: number[] = [];
  const ne = [0, 0, 0, 0] as [number, number, number, number];
  for (let d = 0; d < 4; d++) {
    const left = requireInt(op, `left[${d}]`, amounts.left?.[d] ?? 0, 0, PARAM_INT_MAX);
    const right = requireInt(op, `right[${d}]`, amounts.right?.[d] ?? 0, 0, PARAM_INT_MAX);
    params.push(left, right);
    ne[d] = a.ne[d]! + left + right;
  }
  return new Tensor({ dtype: a.dtype, ne, op: code, src: [a], params });
}

/**
 * `a` padded in dim 0 by reflection (ggml_pad_reflect_1d): `[a, b, c, d]` with `p0 = p1 = 1`
 * gives `[b, a, b, c, d, c]`. Each pad must be shorter than the row.
 *
 * @example
 * ```ts
 * import { Context, padReflect1d } from "../../mod.ts";
 * const ctx = new Context();
 * console.log(padReflect1d(ctx.newTensor("f32", [4, 2]), 1, 2).ne); // [7, 2, 1, 1]
 * ```
 */
export function padReflect1d(a: Tensor, p0: number, p1: number): Tensor {
  requireDType("padReflect1d", a, MOVED);
  requireInt("padReflect1d", "p0", p0, 0, a.ne[0] - 1);
  requireInt("padReflect1d", "p1", p1, 0, a.ne[0] - 1);
  const ne: Dims = [a.ne[0] + p0 + p1, a.ne[1], a.ne[2], a.ne[3]];
  return new Tensor({ dtype: a.dtype, ne, op: Op.padReflect1d, src: [a], params: [p0, p1] });
}

/**
 * `a` rotated by `shifts` in each dimension (ggml_roll): element `i` of the result is element
 * `(i - shift) mod ne` of `a`. Each `|shift|` must be below its dimension's size.
 *
 * @example
 * ```ts
 * import { Context, roll } from "../../mod.ts";
 * const ctx = new Context();
 * console.log(roll(ctx.newTensor("f32", [5, 3]), [2, -1, 0, 0]).ne); // [5, 3, 1, 1]
 * ```
 */
export function roll(a: Tensor, shifts: readonly [number, number, number, number]): Tensor {
  requireDType("roll", a, MOVED);
  const params = [0, 1, 2, 3].map((d) =>
    requireInt("roll", `shifts[${d}]`, shifts[d], 1 - a.ne[d]!, a.ne[d]! - 1)
  );
  return new Tensor({ dtype: a.dtype, ne: a.ne, op: Op.roll, src: [a], params });
}

/**
 * The backward of `repeat` (ggml_repeat_back): sums every tile of `a` into `shape`, each of
 * `a`'s dimensions a multiple of `shape`'s. f32 or f16 (summed in f64 on the CPU).
 *
 * @example
 * ```ts
 * import { Context, repeatBack } from "../../mod.ts";
 * const ctx = new Context();
 * console.log(repeatBack(ctx.newTensor("f32", [6, 4]), [3, 2, 1, 1]).ne); // [3, 2, 1, 1]
 * ```
 */
export function repeatBack(a: Tensor, shape: readonly [number, number, number, number]): Tensor {
  requireDType("repeatBack", a, ["f32", "f16"]);
  for (let d = 0; d < 4; d++) {
    const n = requireInt("repeatBack", `shape[${d}]`, shape[d], 1, a.ne[d]!);
    if (a.ne[d]! % n !== 0) {
      throw new ShapeError(
        `repeatBack: shape ${showValue(shape)} does not tile ${formatShape(a.ne)} ` +
          `(dim ${d}: ${a.ne[d]} is not a multiple of ${n})`,
      );
    }
  }
  return new Tensor({
    dtype: a.dtype,
    ne: [...shape] as unknown as Dims,
    op: Op.repeatBack,
    src: [a],
  });
}

/** ggml_tri's triangles (`enum ggml_tri_type`): which elements keep their value. */
export const TriType = {
  /** Column >= row. */
  upperDiag: 0,
  /** Column > row. */
  upper: 1,
  /** Column <= row. */
  lowerDiag: 2,
  /** Column < row. */
  lower: 3,
} as const;

/** One of {@link TriType}'s names. */
export type TriKind = keyof typeof TriType;

/**
 * `a` with every element outside a triangle set to 0 (ggml_tri): element (column i0, row i1)
 * keeps its value where the triangle holds it. f32, f16 or i32; rows of one matrix must be as
 * long as it has rows (ggml asserts `ne0 == ne1`).
 *
 * @example
 * ```ts
 * import { Context, tri } from "../../mod.ts";
 * const ctx = new Context();
 * console.log(tri(ctx.newTensor("f32", [4, 4]), "lowerDiag").ne); // [4, 4, 1, 1]
 * ```
 */
export function tri(a: Tensor, kind: TriKind): Tensor {
  requireDType("tri", a, MOVED);
  if (!Object.hasOwn(TriType, kind)) {
    throw new ShapeError(
      `tri: kind must be one of ${Object.keys(TriType).join(", ")}, got ${showValue(kind)}`,
    );
  }
  if (a.ne[0] !== a.ne[1]) {
    throw new ShapeError(`tri: ${a.label} is not square (ne0 ${a.ne[0]} != ne1 ${a.ne[1]})`);
  }
  return new Tensor({ dtype: a.dtype, ne: a.ne, op: Op.tri, src: [a], params: [TriType[kind]] });
}

/**
 * The causal mask (ggml_diag_mask_inf): element (column i, row j) becomes -inf where
 * `i > nPast + j`, every other element keeps its value. f32 or f16.
 *
 * @example
 * ```ts
 * import { Context, diagMaskInf } from "../../mod.ts";
 * const ctx = new Context();
 * console.log(diagMaskInf(ctx.newTensor("f32", [6, 4]), 2).ne); // [6, 4, 1, 1]
 * ```
 */
export function diagMaskInf(a: Tensor, nPast: number): Tensor {
  requireDType("diagMaskInf", a, ["f32", "f16"]);
  requireInt("diagMaskInf", "nPast", nPast, 0, PARAM_INT_MAX);
  return new Tensor({ dtype: a.dtype, ne: a.ne, op: Op.diagMaskInf, src: [a], params: [nPast] });
}

/**
 * A tensor of `a`'s shape and dtype (f32 or f16) with every element `value` (ggml_fill; f16
 * rounds it to nearest even).
 *
 * @example
 * ```ts
 * import { Context, fill } from "../../mod.ts";
 * const ctx = new Context();
 * console.log(fill(ctx.newTensor("f16", [3]), 0.5).dtype); // "f16"
 * ```
 */
export function fill(a: Tensor, value: number): Tensor {
  requireDType("fill", a, ["f32", "f16"]);
  if (typeof value !== "number" || Number.isNaN(value)) {
    throw new ShapeError(`fill: value must be a number, got ${showValue(value)}`);
  }
  return new Tensor({ dtype: a.dtype, ne: a.ne, op: Op.fill, src: [a], params: [value] });
}

/**
 * `[start, start + step, ...]` below `stop` as f32 (ggml_arange): `ceil((stop - start) / step)`
 * elements computed in f32, each `start + step * i`. An op without sources.
 *
 * @example
 * ```ts
 * import { arange } from "../../mod.ts";
 * console.log(arange(0, 5, 2).ne); // [3, 1, 1, 1]
 * ```
 */
export function arange(start: number, stop: number, step: number): Tensor {
  requireFinite("arange", "start", start);
  requireFinite("arange", "stop", stop);
  requireFinite("arange", "step", step);
  const [a, b, s] = [Math.fround(start), Math.fround(stop), Math.fround(step)];
  const steps = Math.ceil(Math.fround(Math.fround(b - a) / s));
  if (!(steps >= 1) || !Number.isSafeInteger(steps)) {
    throw new ShapeError(
      `arange: start ${start}, stop ${stop}, step ${step} make ${steps} elements ` +
        `(stop must lie after start in the direction of step)`,
    );
  }
  return new Tensor({
    dtype: "f32",
    ne: [steps, 1, 1, 1],
    op: Op.arange,
    src: [],
    params: [start, stop, step],
  });
}
