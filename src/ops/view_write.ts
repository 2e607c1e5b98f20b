/**
 * Writes into a view, as ggml's `ggml_acc` and `ggml_set` (with `ggml_set_1d` and
 * `ggml_set_2d`): the result is `a` with `b` added (acc) or written (set) into the view of `a`
 * that byte strides `nb1`, `nb2`, `nb3` and a byte `offset` describe (`nb0` one element, `b`'s
 * shape). The planner may run them in place (ggml's `_inplace` forms).
 * @module
 */

import { dtypeSize } from "../dtype.ts";
import { ArgumentError, ShapeError } from "../errors.ts";
import { Op, type OpCode } from "../op.ts";
import { formatShape, Tensor } from "../tensor.ts";
import { showValue } from "../args.ts";
import { requireDType } from "./check.ts";

/** The view of `a` that {@link acc} and {@link set} write, in bytes (as ggml's arguments). */
export interface ViewOptions {
  /** Bytes between rows of the view (default: `a`'s `nb[1]`). */
  readonly nb1?: number;
  /** Bytes between planes of the view (default: `a`'s `nb[2]`). */
  readonly nb2?: number;
  /** Bytes between batches of the view (default: `a`'s `nb[3]`). */
  readonly nb3?: number;
  /** Byte offset of the view's first element in `a` (default 0). */
  readonly offset?: number;
}

/** Params travel as f32, exact below 2^24: each value goes as its low 24 bits and the rest. */
const PARAM_SPLIT = 2 ** 24;

function viewWrite(op: OpCode, name: string, a: Tensor, b: Tensor, view: ViewOptions): Tensor {
  requireDType(name, a, op === Op.acc ? ["f32", "f16"] : ["f32", "f16", "i32"]);
  requireDType(name, b, [a.dtype]);
  if (!a.isContiguous) {
    throw new ShapeError(`${name}: ${a.label} must be contiguous (the view's strides are its)`);
  }
  const size = dtypeSize[a.dtype];
  const bytes = [view.nb1 ?? a.nb[1], view.nb2 ?? a.nb[2], view.nb3 ?? a.nb[3], view.offset ?? 0];
  const names = ["nb1", "nb2", "nb3", "offset"];
  const elements = bytes.map((value, k) => {
    if (!Number.isSafeInteger(value) || value < 0 || value % size !== 0) {
      throw new ArgumentError(
        `${name}: ${names[k]} must be a whole number of bytes >= 0, a multiple of the ` +
          `${size}-byte ${a.dtype} element, got ${showValue(value)}`,
      );
    }
    return value / size;
  });
  const nb = [1, elements[0]!, elements[1]!, elements[2]!];
  let last = elements[3]!;
  for (let d = 0; d < 4; d++) last += (b.ne[d]! - 1) * nb[d]!;
  if (last >= a.nelements) {
    throw new ShapeError(
      `${name}: the view of ${formatShape(b.ne)} at byte ${bytes[3]} with strides ` +
        `[${bytes.slice(0, 3).join(", ")}] ends at element ${last}, outside ${a.label} ` +
        `${formatShape(a.ne)} (${a.nelements} elements)`,
    );
  }
  for (let d = 1; d < 4; d++) {
    if (b.ne[d]! > 1 && nb[d]! < b.ne[d - 1]! * nb[d - 1]!) {
      throw new ShapeError(
        `${name}: ${names[d - 1]} = ${bytes[d - 1]} makes the view of ${formatShape(b.ne)} ` +
          `overlap itself (it must be at least ${b.ne[d - 1]! * nb[d - 1]! * size} bytes)`,
      );
    }
  }
  const params = elements.flatMap((v) => [v % PARAM_SPLIT, Math.floor(v / PARAM_SPLIT)]);
  return new Tensor({ dtype: a.dtype, ne: a.ne, op, src: [a, b], params });
}

/**
 * ggml_acc: `a` (contiguous, f32 or f16) with `b` (same dtype, any strides) added into the view
 * of `a` that `view` describes; the view must lie inside `a` and not overlap itself.
 *
 * @example
 * ```ts
 * import { acc, Context } from "../../mod.ts";
 * const ctx = new Context();
 * const a = ctx.newTensor("f32", [8, 4]);
 * // Rows 1-2, columns 2-4 of a: + b.
 * const y = acc(a, ctx.newTensor("f32", [3, 2]), { offset: a.nb[1] + 2 * 4 });
 * console.log(y.ne); // [8, 4, 1, 1]
 * ```
 */
export function acc(a: Tensor, b: Tensor, view: ViewOptions = {}): Tensor {
  return viewWrite(Op.acc, "acc", a, b, view);
}

/**
 * ggml_set: `a` (contiguous; f32, f16 or i32) with `b` (same dtype, any strides) written into
 * the view of `a` that `view` describes; the view must lie inside `a` and not overlap itself.
 *
 * @example
 * ```ts
 * import { Context, set } from "../../mod.ts";
 * const ctx = new Context();
 * const a = ctx.newTensor("f32", [8, 4]);
 * const y = set(a, ctx.newTensor("f32", [8, 2]), { offset: 2 * a.nb[1] }); // rows 2-3
 * console.log(y.ne); // [8, 4, 1, 1]
 * ```
 */
export function set(a: Tensor, b: Tensor, view: ViewOptions = {}): Tensor {
  return viewWrite(Op.set, "set", a, b, view);
}

/**
 * ggml_set_1d: `b`'s elements written into `a` from byte `offset` on, as one run.
 *
 * @example
 * ```ts
 * import { Context, set1d } from "../../mod.ts";
 * const ctx = new Context();
 * const y = set1d(ctx.newTensor("f32", [16]), ctx.newTensor("f32", [4]), 8); // elements 2-5
 * ```
 */
export function set1d(a: Tensor, b: Tensor, offset: number): Tensor {
  if (b.ne[1] !== 1 || b.ne[2] !== 1 || b.ne[3] !== 1) {
    throw new ShapeError(`set1d: ${b.label} ${formatShape(b.ne)} must be one-dimensional`);
  }
  return viewWrite(Op.set, "set1d", a, b, { offset });
}

/**
 * ggml_set_2d: `b`'s rows written into `a` from byte `offset` on, `nb1` bytes apart.
 *
 * @example
 * ```ts
 * import { Context, set2d } from "../../mod.ts";
 * const ctx = new Context();
 * const a = ctx.newTensor("f32", [8, 4]);
 * const y = set2d(a, ctx.newTensor("f32", [2, 3]), a.nb[1], 4); // columns 1-2 of rows 0-2
 * ```
 */
export function set2d(a: Tensor, b: Tensor, nb1: number, offset: number): Tensor {
  if (b.ne[2] !== 1 || b.ne[3] !== 1) {
    throw new ShapeError(`set2d: ${b.label} ${formatShape(b.ne)} must be two-dimensional`);
  }
  return viewWrite(Op.set, "set2d", a, b, { nb1, offset });
}
