/**
 * Fused attention: ggml's `flash_attn_ext`.
 * @module
 */

import { ArgumentError, ShapeError } from "../errors.ts";
import { Op } from "../op.ts";
import { formatShape, Tensor } from "../tensor.ts";
import { requireDType, requireFinite } from "./check.ts";

/** Options of {@link flashAttnExt}. */
export interface FlashAttnOptions {
  /**
   * Added to the logits, `[nKv, >= T, m2, m3]` f32 or f16 with m2 dividing the heads and m3 the
   * batches (row t is query t's; e.g. a causal mask of 0 and -Infinity). Required with `maxBias`.
   */
  mask?: Tensor;
  /** Multiplies `q . k` (usually `1/sqrt(headDim)`). Default 1. */
  scale?: number;
  /** ALiBi: head h's mask is multiplied by ggml's slope for `maxBias` (>= 0). Default 0 (none). */
  maxBias?: number;
  /** Logit soft-capping: `s -> softcap * tanh(s / softcap)` (>= 0; 0 means none). Default 0. */
  softcap?: number;
}

function rowsContiguous(t: Tensor): boolean {
  return t.nb[0] === (t.dtype === "f16" ? 2 : 4);
}

/**
 * Attention in one op (ggml_flash_attn_ext): for every query row, `softmax(scale * q.K^T +
 * mask) V`, computed tile by tile without materialising the scores. `q` is f32 `[D, T, Hq, B]`,
 * `k` is `[D, nKv, Hkv, Bk]` and `v` `[Dv, nKv, Hkv, Bk]`, f32 or f16, where Hkv divides Hq
 * (grouped-query attention: query head h reads kv head `h / (Hq / Hkv)`) and Bk divides B. The
 * result is f32 `[Dv, Hq, T, B]` (heads before tokens, as ggml: a reshape gives `[Dv*Hq, T]`).
 * Rows (dim 0) of q, k, v and the mask must be contiguous; the other dims may be strided (a
 * permuted view or a slice of a cache). A query row that the mask hides entirely gives zeros.
 *
 * @example
 * ```ts
 * import { Context, flashAttnExt } from "../../mod.ts";
 * const ctx = new Context();
 * const q = ctx.newTensor("f32", [64, 32, 8]); // head dim 64, 32 tokens, 8 heads
 * const k = ctx.newTensor("f16", [64, 128, 2]); // 128 cached positions, 2 kv heads
 * const v = ctx.newTensor("f16", [64, 128, 2]);
 * const mask = ctx.newTensor("f16", [128, 32]);
 * const out = flashAttnExt(q, k, v, { mask, scale: 0.125 });
 * console.log(out.ne); // [64, 8, 32, 1]
 * ```
 */
export function flashAttnExt(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  options: FlashAttnOptions = {},
): Tensor {
  requireDType("flashAttnExt", q, ["f32"]);
  requireDType("flashAttnExt", k, ["f32", "f16"]);
  requireDType("flashAttnExt", v, ["f32", "f16"]);
  const scale = options.scale ?? 1;
  const maxBias = options.maxBias ?? 0;
  const softcap = options.softcap ?? 0;
  requireFinite("flashAttnExt", "scale", scale);
  requireFinite("flashAttnExt", "maxBias", maxBias);
  requireFinite("flashAttnExt", "softcap", softcap);
  if (maxBias < 0) throw new ArgumentError(`flashAttnExt: maxBias must be >= 0, got ${maxBias}`);
  if (softcap < 0) throw new ArgumentError(`flashAttnExt: softcap must be >= 0, got ${softcap}`);
  if (maxBias > 0 && !options.mask) {
    throw new ArgumentError(
      `flashAttnExt: maxBias ${maxBias} needs a mask (ALiBi scales the mask)`,
    );
  }
  const shapes = `q ${formatShape(q.ne)}, k ${formatShape(k.ne)}, v ${formatShape(v.ne)}`;
  if (
    k.ne[0] !== q.ne[0] || v.ne[1] !== k.ne[1] || q.ne[2] % k.ne[2] !== 0 ||
    q.ne[3] % k.ne[3] !== 0 || q.ne[2] % v.ne[2] !== 0 || q.ne[3] % v.ne[3] !== 0
  ) {
    throw new ShapeError(
      `flashAttnExt: ${shapes} do not fit (k.ne[0] == q.ne[0], v.ne[1] == k.ne[1], ` +
        `k's and v's dims 2-3 must divide q's)`,
    );
  }
  for (const [name, t] of [["q", q], ["k", k], ["v", v]] as const) {
    if (!rowsContiguous(t)) {
      throw new ShapeError(`flashAttnExt: ${name} ${t.label} needs contiguous rows (nb[0])`);
    }
  }
  const src = [q, k, v];
  const mask = options.mask;
  if (mask) {
    requireDType("flashAttnExt", mask, ["f32", "f16"]);
    if (
      mask.ne[0] !== k.ne[1] || mask.ne[1] < q.ne[1] || q.ne[2] % mask.ne[2] !== 0 ||
      q.ne[3] % mask.ne[3] !== 0
    ) {
      throw new ShapeError(
        `flashAttnExt: mask ${formatShape(mask.ne)} does not fit ${shapes} ` +
          `(mask.ne[0] == nKv, mask.ne[1] >= T, dims 2-3 must divide q's)`,
      );
    }
    if (!rowsContiguous(mask)) {
      throw new ShapeError(`flashAttnExt: mask ${mask.label} needs contiguous rows (nb[0])`);
    }
    src.push(mask);
  }
  return new Tensor({
    dtype: "f32",
    ne: [v.ne[0], q.ne[2], q.ne[1], q.ne[3]],
    op: Op.flashAttnExt,
    src,
    params: [scale, maxBias, softcap],
  });
}
