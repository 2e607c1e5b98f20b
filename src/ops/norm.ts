/**
 * Row-wise normalisations: layer norm (without affine), RMS norm and softmax.
 * @module
 */

import { ArgumentError, ShapeError } from "../errors.ts";
import { Op } from "../op.ts";
import { formatShape, Tensor } from "../tensor.ts";
import { requireDType, requireFinite } from "./check.ts";

/** Each row: `(x - mean) / sqrt(variance + eps)`. A NaN or an infinity makes its whole row NaN. */
export function norm(a: Tensor, eps = 1e-5): Tensor {
  requireDType("norm", a, ["f32"]);
  requireFinite("norm", "eps", eps);
  return new Tensor({ dtype: "f32", ne: a.ne, op: Op.norm, src: [a], params: [eps] });
}

/**
 * Each row: `x / sqrt(mean(x^2) + eps)`. A NaN makes its row NaN; an infinity makes the scale 0,
 * so infinite elements give NaN and finite ones 0 (as ggml).
 */
export function rmsNorm(a: Tensor, eps = 1e-6): Tensor {
  requireDType("rmsNorm", a, ["f32"]);
  requireFinite("rmsNorm", "eps", eps);
  return new Tensor({ dtype: "f32", ne: a.ne, op: Op.rmsNorm, src: [a], params: [eps] });
}

/** Options of {@link softmax}. */
export interface SoftmaxOptions {
  /** Added to each row after scaling, `[ne0, >= ne1]` (e.g. a causal mask of 0 and -Infinity). */
  mask?: Tensor;
  /** Multiplies the input before the mask (attention's `1/sqrt(head_dim)`). Default 1. */
  scale?: number;
  /**
   * ALiBi (ggml_soft_max_ext's max_bias, >= 0): the mask of the rows in dim 2 index h (the
   * head) is multiplied by ggml's slope for h of ne[2] heads. Needs a mask. Default 0 (slope 1).
   */
  maxBias?: number;
}

/**
 * Each row: `softmax(x * scale + slope * mask)` (ggml_soft_max_ext; slope is 1 unless `maxBias`
 * gives ALiBi's per-head slopes). A row that the mask hides entirely (all -Inf) becomes
 * zeros; a NaN or +Inf in a row makes the whole row NaN (as ggml's CPU backend).
 *
 * @example
 * ```ts
 * import { Context, softmax } from "../../mod.ts";
 * const ctx = new Context();
 * const scores = ctx.newTensor("f32", [16, 16, 4]);
 * const mask = ctx.newTensor("f32", [16, 16]);
 * const p = softmax(scores, { mask, scale: 0.125 });
 * ```
 */
export function softmax(a: Tensor, options: SoftmaxOptions = {}): Tensor {
  requireDType("softmax", a, ["f32"]);
  const scale = options.scale ?? 1;
  requireFinite("softmax", "scale", scale);
  const maxBias = options.maxBias ?? 0;
  requireFinite("softmax", "maxBias", maxBias);
  if (maxBias < 0) throw new ArgumentError(`softmax: maxBias must be >= 0, got ${maxBias}`);
  if (maxBias > 0 && !options.mask) {
    throw new ArgumentError(`softmax: maxBias ${maxBias} needs a mask (ALiBi scales the mask)`);
  }
  const src = [a];
  if (options.mask) {
    const mask = options.mask;
    requireDType("softmax", mask, ["f32"]);
    if (
      mask.ne[0] !== a.ne[0] || mask.ne[1] < a.ne[1] || a.ne[2] % mask.ne[2] !== 0 ||
      a.ne[3] % mask.ne[3] !== 0
    ) {
      throw new ShapeError(
        `softmax: mask ${formatShape(mask.ne)} does not fit input ${formatShape(a.ne)} ` +
          `(mask.ne[0] == ne[0], mask.ne[1] >= ne[1], dims 2-3 must divide)`,
      );
    }
    src.push(mask);
  }
  // maxBias 0 leaves its slot unset (0 in the node table): the same node as before ALiBi.
  const params = maxBias > 0 ? [scale, maxBias] : [scale];
  return new Tensor({ dtype: "f32", ne: a.ne, op: Op.softmax, src, params });
}
