/**
 * Row reductions and scans (ggml_sum_rows, ggml_argmax, max and min along rows,
 * ggml_count_equal, ggml_cumsum). Rows are `ne[0]`; every other dimension is kept.
 * @module
 */

import { ShapeError } from "../errors.ts";
import { Op, type OpCode } from "../op.ts";
import { formatShape, Tensor } from "../tensor.ts";
import { requireDType, sameDims } from "./check.ts";

function perRow(op: OpCode, name: string, a: Tensor): Tensor {
  requireDType(name, a, ["f32", "f16"]);
  return new Tensor({ dtype: a.dtype, ne: [1, a.ne[1], a.ne[2], a.ne[3]], op, src: [a] });
}

/**
 * The sum of each row: shape `[1, ne1, ne2, ne3]`, `a`'s dtype (accumulated in f64).
 *
 * @example
 * ```ts
 * import { Context, sumRows } from "../../mod.ts";
 * const ctx = new Context();
 * console.log(sumRows(ctx.newTensor("f32", [10, 4])).ne); // [1, 4, 1, 1]
 * ```
 */
export function sumRows(a: Tensor): Tensor {
  return perRow(Op.sumRows, "sumRows", a);
}

/** The largest value of each row (NaN ignored; a row of NaN gives -Infinity). */
export function maxRows(a: Tensor): Tensor {
  return perRow(Op.maxRows, "maxRows", a);
}

/** The smallest value of each row (NaN ignored; a row of NaN gives +Infinity). */
export function minRows(a: Tensor): Tensor {
  return perRow(Op.minRows, "minRows", a);
}

/**
 * The index of each row's largest value (the first one on ties; NaN never wins), as i32 of
 * shape `[ne1, ne2, ne3, 1]` (ggml_argmax, which takes matrices: `[ne1]`).
 */
export function argmax(a: Tensor): Tensor {
  requireDType("argmax", a, ["f32", "f16"]);
  if (a.ne[0] > 0x7fffffff) {
    throw new ShapeError(`argmax: rows of ${a.ne[0]} elements overflow an i32 index`);
  }
  return new Tensor({ dtype: "i32", ne: [a.ne[1], a.ne[2], a.ne[3], 1], op: Op.argmax, src: [a] });
}

/**
 * How many elements of `a` and `b` (i32, one shape) are equal, as an i64 `[1]` tensor
 * (ggml_count_equal's dtype). i64 data travels as raw bytes: read the result with
 * `new BigInt64Array(bytes.buffer, bytes.byteOffset, 1)[0]`.
 *
 * @example
 * ```ts
 * import { Context, countEqual } from "../../mod.ts";
 * const ctx = new Context();
 * const n = countEqual(ctx.newTensor("i32", [8]), ctx.newTensor("i32", [8]));
 * console.log(n.dtype); // "i64"
 * ```
 */
export function countEqual(a: Tensor, b: Tensor): Tensor {
  requireDType("countEqual", a, ["i32"]);
  requireDType("countEqual", b, ["i32"]);
  if (!sameDims(a.ne, b.ne)) {
    throw new ShapeError(`countEqual: shapes ${formatShape(a.ne)} and ${formatShape(b.ne)} differ`);
  }
  return new Tensor({ dtype: "i64", ne: [1, 1, 1, 1], op: Op.countEqual, src: [a, b] });
}

/** Running sums along each row (ggml_cumsum): `a`'s shape and dtype, accumulated in f64. */
export function cumsum(a: Tensor): Tensor {
  requireDType("cumsum", a, ["f32", "f16"]);
  return new Tensor({ dtype: a.dtype, ne: a.ne, op: Op.cumsum, src: [a] });
}
