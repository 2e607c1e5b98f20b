/**
 * Normalisations of ggml's neural-network set: L2 normalisation of rows and group
 * normalisation over channel groups.
 * @module
 */

import { ArgumentError } from "../errors.ts";
import { Op } from "../op.ts";
import { Tensor } from "../tensor.ts";
import { requireDType, requireFinite } from "./check.ts";

/**
 * Each row divided by its L2 norm (ggml_l2_norm): `x / max(sqrt(sum x^2), eps)`.
 *
 * @example
 * ```ts
 * import { Context, l2Norm } from "../../mod.ts";
 * const ctx = new Context();
 * const x = ctx.newTensor("f32", [128, 16]);
 * console.log(l2Norm(x, 1e-12).ne); // [128, 16, 1, 1]
 * ```
 */
export function l2Norm(a: Tensor, eps = 1e-12): Tensor {
  requireDType("l2Norm", a, ["f32"]);
  requireFinite("l2Norm", "eps", eps);
  return new Tensor({ dtype: "f32", ne: a.ne, op: Op.l2Norm, src: [a], params: [eps] });
}

/**
 * Group normalisation without affine (ggml_group_norm): `a` is `[W, H, C, N]`; the C channels
 * go in `groups` groups of `ceil(C / groups)` (the last may be shorter), and each group of each
 * image is normalised to mean 0 and variance 1 over its W*H*channels elements:
 * `(x - mean) / sqrt(variance + eps)`.
 *
 * @example
 * ```ts
 * import { Context, groupNorm } from "../../mod.ts";
 * const ctx = new Context();
 * const x = ctx.newTensor("f32", [32, 32, 64, 2]); // a U-Net feature map
 * console.log(groupNorm(x, 32, 1e-6).ne); // [32, 32, 64, 2]
 * ```
 */
export function groupNorm(a: Tensor, groups: number, eps = 1e-6): Tensor {
  requireDType("groupNorm", a, ["f32"]);
  requireFinite("groupNorm", "eps", eps);
  if (!Number.isInteger(groups) || groups < 1 || groups > 1 << 24) {
    throw new ArgumentError(`groupNorm: groups must be an integer in [1, 2^24], got ${groups}`);
  }
  return new Tensor({ dtype: "f32", ne: a.ne, op: Op.groupNorm, src: [a], params: [groups, eps] });
}
