/**
 * Rotary position embedding: ggml's `ggml_rope_ext` without YaRN (ext_factor 0, attn_factor 1).
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
}

function f32Finite(value: number): boolean {
  return typeof value === "number" && Number.isFinite(Math.fround(value));
}

/**
 * Rotates each head of `a` by its token's position, as ggml's CPU `rope` in f32: `a` is f32
 * `[headDim, nHeads, nTokens, ne3]` (ggml order), `positions` i32 `[nTokens]` (any values, one
 * per token, shared by every head and by dim 3). For pair k, `theta = freqScale * pos *
 * theta_scale^k` with `theta_scale = freqBase^(-2/nDims)` and the power taken by repeated f32
 * multiplication (ggml's recurrence); the pair becomes `(x0 cos - x1 sin, x0 sin + x1 cos)`.
 * Dimensions from `nDims` on are copied. `a` may be non-contiguous; the result is contiguous.
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
  requireDType("rope", a, ["f32"]);
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
  const freqScale = options.freqScale ?? 1;
  if (!f32Finite(freqScale)) {
    throw new ArgumentError(`rope: freqScale must be a finite f32, got ${freqScale}`);
  }
  return new Tensor({
    dtype: "f32",
    ne: a.ne,
    op: Op.rope,
    src: [a, positions],
    params: [nDims, MODE_CODES[mode], freqBase, freqScale],
  });
}
