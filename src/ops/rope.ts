/**
 * Rotary position embedding: ggml's `ggml_rope_ext` (normal and neox modes, YaRN, frequency
 * factors, f32 and f16 input).
 * @module
 */

import { ArgumentError, ShapeError } from "../errors.ts";
import { Op } from "../op.ts";
import { formatShape, Tensor } from "../tensor.ts";
import { requireDType } from "./check.ts";

/** How {@link rope} pairs the dimensions it rotates. */
export type RopeMode = "normal" | "neox";

/** ggml's mode numbers (GGML_ROPE_TYPE_NORMAL and GGML_ROPE_TYPE_NEOX). */
const MODE_CODES: Readonly<Record<RopeMode, number>> = { normal: 0, neox: 2 };

/** Largest n_ctx_orig: ggml's op_params slot is an int32. */
const N_CTX_ORIG_MAX = 2 ** 31 - 1;

/** Options of {@link rope}. */
export interface RopeOptions {
  /** Dimensions rotated, from the start of each head: even, 2 to `a.ne[0]`; the rest pass through. */
  nDims: number;
  /**
   * `"normal"` rotates adjacent pairs `(x[2k], x[2k+1])` (LLaMA); `"neox"` rotates
   * `(x[k], x[k + nDims/2])` (GPT-NeoX, Qwen, Phi...).
   */
  mode: RopeMode;
  /** Base of the frequencies, `theta_k = pos * freqBase^(-2k/nDims)`. Default 10000. */
  freqBase?: number;
  /** Multiplies every angle (linear position interpolation). Default 1. */
  freqScale?: number;
  /**
   * YaRN's extrapolation mix (ggml's ext_factor): 0 (default) turns YaRN off; otherwise pair k's
   * angle mixes `freqScale * theta` and `theta` by `ramp(k) * extFactor`, and cos and sin grow
   * by `1 + 0.1 ln(1 / freqScale)`. llama.cpp passes 1 for YaRN models.
   */
  extFactor?: number;
  /** Multiplies cos and sin (ggml's attn_factor, YaRN's attention scale). Default 1. */
  attnFactor?: number;
  /** YaRN's high-frequency bound, in rotations over nCtxOrig (ggml's beta_fast). Default 32. */
  betaFast?: number;
  /** YaRN's low-frequency bound, in rotations over nCtxOrig (ggml's beta_slow). Default 1. */
  betaSlow?: number;
  /**
   * The context the model was trained with (ggml's n_ctx_orig), which places YaRN's ramp: an
   * integer from 0 to 2^31 - 1. Default 0 (used only with extFactor != 0).
   */
  nCtxOrig?: number;
  /**
   * Per-pair divisors of the angle (ggml_rope_ext's src2, Llama 3's `rope_freqs.weight`): an
   * f32 vector of at least nDims/2 elements; pair k's angle is `theta_k / freqFactors[k]`.
   */
  freqFactors?: Tensor;
}

function f32Finite(value: number): boolean {
  return typeof value === "number" && Number.isFinite(Math.fround(value));
}

/**
 * Rotates each head of `a` by its token's position, as ggml's CPU `rope` (`ggml_rope_ext`): `a`
 * is f32 or f16 `[headDim, nHeads, nTokens, ne3]` (ggml order), `positions` i32 `[nTokens]` (any
 * values, one per token, shared by every head and by dim 3). For pair k, `theta = pos *
 * theta_scale^k / freqFactors[k]` with `theta_scale = freqBase^(-2/nDims)` and the power taken
 * by repeated f32 multiplication (ggml's recurrence); the angle is `freqScale * theta` (with
 * YaRN's mix when `extFactor` is not 0) and cos and sin are scaled by `attnFactor` (and YaRN's
 * magnitude); the pair becomes `(x0 cos - x1 sin, x0 sin + x1 cos)`, computed in f32. Dimensions
 * from `nDims` on are copied. `a` may be non-contiguous; the result is contiguous, of `a`'s
 * dtype. The defaults compute ggml_rope_ext with YaRN off.
 *
 * @example
 * ```ts
 * import { Context, rope } from "../../mod.ts";
 * const ctx = new Context();
 * const q = ctx.newTensor("f32", [128, 32, 7]);
 * const pos = ctx.newTensor("i32", [7]);
 * const rotated = rope(q, pos, { nDims: 128, mode: "normal" });
 * ```
 */
export function rope(a: Tensor, positions: Tensor, options: RopeOptions): Tensor {
  requireDType("rope", a, ["f32", "f16"]);
  requireDType("rope", positions, ["i32"]);
  if (
    positions.ne[0] !== a.ne[2] || positions.ne[1] !== 1 || positions.ne[2] !== 1 ||
    positions.ne[3] !== 1
  ) {
    throw new ShapeError(
      `rope: positions ${formatShape(positions.ne)} do not fit input ${formatShape(a.ne)} ` +
        `(positions must be [ne2] = [${a.ne[2]}], one per token)`,
    );
  }
  const { nDims, mode }: Partial<RopeOptions> = options ?? {};
  if (
    nDims === undefined || !Number.isInteger(nDims) || nDims < 2 || nDims % 2 !== 0 ||
    nDims > a.ne[0]
  ) {
    throw new ArgumentError(
      `rope: nDims must be an even integer from 2 to ne0 = ${a.ne[0]}, got ${String(nDims)}`,
    );
  }
  if (mode === undefined || !Object.hasOwn(MODE_CODES, mode)) {
    throw new ArgumentError(`rope: mode must be "normal" or "neox", got ${String(mode)}`);
  }
  const freqBase = options.freqBase ?? 10000;
  if (!f32Finite(freqBase) || !(Math.fround(freqBase) > 0)) {
    throw new ArgumentError(`rope: freqBase must be a finite f32 above 0, got ${freqBase}`);
  }
  const finite = (name: keyof RopeOptions, fallback: number): number => {
    const value = options[name] ?? fallback;
    if (typeof value !== "number" || !f32Finite(value)) {
      throw new ArgumentError(`rope: ${name} must be a finite f32, got ${String(value)}`);
    }
    return value;
  };
  const freqScale = finite("freqScale", 1);
  const extFactor = finite("extFactor", 0);
  const attnFactor = finite("attnFactor", 1);
  const betaFast = finite("betaFast", 32);
  const betaSlow = finite("betaSlow", 1);
  const nCtxOrig = options.nCtxOrig ?? 0;
  if (!Number.isInteger(nCtxOrig) || nCtxOrig < 0 || nCtxOrig > N_CTX_ORIG_MAX) {
    throw new ArgumentError(
      `rope: nCtxOrig must be an integer from 0 to ${N_CTX_ORIG_MAX}, got ${String(nCtxOrig)}`,
    );
  }
  const src = [a, positions];
  const factors = options.freqFactors;
  if (factors !== undefined) {
    if (!(factors instanceof Tensor)) {
      throw new ArgumentError(`rope: freqFactors must be a tensor, got ${String(factors)}`);
    }
    requireDType("rope", factors, ["f32"]);
    if (
      factors.ne[0] < nDims / 2 || factors.ne[1] !== 1 || factors.ne[2] !== 1 ||
      factors.ne[3] !== 1
    ) {
      throw new ShapeError(
        `rope: freqFactors ${formatShape(factors.ne)} must be a vector of at least ` +
          `nDims/2 = ${nDims / 2} elements`,
      );
    }
    src.push(factors);
  }
  return new Tensor({
    dtype: a.dtype,
    ne: a.ne,
    op: Op.rope,
    src,
    // nCtxOrig travels as an f32 slot: ggml converts its int to float where it uses it, so the
    // rounded value is the one ggml computes with.
    params: [
      nDims,
      MODE_CODES[mode],
      freqBase,
      freqScale,
      extFactor,
      attnFactor,
      betaFast,
      betaSlow,
      nCtxOrig,
    ],
  });
}
