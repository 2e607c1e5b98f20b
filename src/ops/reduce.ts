/**
 * Reductions: the sum of all elements, and the mean of each row.
 * @module
 */

import { Op } from "../op.ts";
import { Tensor } from "../tensor.ts";
import { requireDType } from "./check.ts";

/** The sum of every element of `a`, as a `[1]` tensor. */
export function sum(a: Tensor): Tensor {
  requireDType("sum", a, ["f32"]);
  return new Tensor({ dtype: "f32", ne: [1, 1, 1, 1], op: Op.sum, src: [a] });
}

/** The mean of each row of `a`: shape `[1, ne1, ne2, ne3]`. */
export function mean(a: Tensor): Tensor {
  requireDType("mean", a, ["f32"]);
  return new Tensor({ dtype: "f32", ne: [1, a.ne[1], a.ne[2], a.ne[3]], op: Op.mean, src: [a] });
}
