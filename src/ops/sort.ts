/**
 * Sorting ops: `argsort` (the column order of each row) and `topK` (the columns of the k
 * largest), i32 results as ggml's. Sorts are stable: equal values keep column order, and NaN
 * sorts above every number, so every backend returns the same indices.
 * @module
 */

import { ShapeError } from "../errors.ts";
import { Op } from "../op.ts";
import { Tensor } from "../tensor.ts";
import { showValue } from "../args.ts";
import { requireDType } from "./check.ts";

/** ggml_sort_order. */
export type SortOrder = "asc" | "desc";

/** Largest row length: indices are i32. */
const COLUMNS_MAX = 2 ** 31 - 1;

function requireColumns(op: string, a: Tensor): void {
  if (a.ne[0] > COLUMNS_MAX) {
    throw new ShapeError(`${op}: ${a.label} has rows of ${a.ne[0]} > 2^31 - 1 elements`);
  }
}

/**
 * For each row of `a` (f32 or f16), the column indices that sort it (ggml_argsort), as i32 of
 * `a`'s shape: ascending (`"asc"`, the default) or descending.
 *
 * @example
 * ```ts
 * import { argsort, Context } from "../../mod.ts";
 * const ctx = new Context();
 * const order = argsort(ctx.newTensor("f32", [8, 2]), "desc");
 * console.log(order.dtype, order.ne); // "i32" [8, 2, 1, 1]
 * ```
 */
export function argsort(a: Tensor, order: SortOrder = "asc"): Tensor {
  requireDType("argsort", a, ["f32", "f16"]);
  requireColumns("argsort", a);
  if (order !== "asc" && order !== "desc") {
    throw new ShapeError(`argsort: order must be "asc" or "desc", got ${showValue(order)}`);
  }
  return new Tensor({
    dtype: "i32",
    ne: a.ne,
    op: Op.argsort,
    src: [a],
    params: [order === "asc" ? 0 : 1],
  });
}

/**
 * For each row of `a` (f32 or f16), the column indices of its `k` largest values (ggml_top_k),
 * as i32 `[k, ne1, ne2, ne3]`, largest first (ggml leaves the order open; Graft fixes it).
 *
 * @example
 * ```ts
 * import { Context, topK } from "../../mod.ts";
 * const ctx = new Context();
 * console.log(topK(ctx.newTensor("f32", [32, 4]), 5).ne); // [5, 4, 1, 1]
 * ```
 */
export function topK(a: Tensor, k: number): Tensor {
  requireDType("topK", a, ["f32", "f16"]);
  requireColumns("topK", a);
  if (typeof k !== "number" || !Number.isInteger(k) || k < 1 || k > a.ne[0]) {
    throw new ShapeError(`topK: k must be a whole number in [1, ${a.ne[0]}], got ${showValue(k)}`);
  }
  return new Tensor({
    dtype: "i32",
    ne: [k, a.ne[1], a.ne[2], a.ne[3]],
    op: Op.topK,
    src: [a],
    params: [k],
  });
}
