/**
 * Resampling and embeddings of ggml's neural-network set: interpolate (upscale) and
 * timestepEmbedding.
 * @module
 */

import { ArgumentError } from "../errors.ts";
import { Op } from "../op.ts";
import { type Shape, toDims } from "../context.ts";
import { Tensor } from "../tensor.ts";
import { requireDType } from "./check.ts";

/** How {@link interpolate} samples: the nearest element, or bilinear or bicubic in dims 0-1. */
export type InterpolateMode = "nearest" | "bilinear" | "bicubic";

const MODE_CODES: Readonly<Record<InterpolateMode, number>> = {
  nearest: 0,
  bilinear: 1,
  bicubic: 2,
};

/** Options of {@link interpolate}. */
export interface InterpolateOptions {
  /** Default "nearest". */
  mode?: InterpolateMode;
  /** Bilinear and bicubic: corners map to corners (scale (ne-1)/(src-1), no half-pixel offset). */
  alignCorners?: boolean;
}

/**
 * ggml_interpolate (ggml_upscale_ext): `a` (f32) resampled to `shape`. Nearest takes element
 * `i / (shape/ne)` in every dim; bilinear mixes the four pixels around
 * `(i + 0.5) / scale - 0.5` in dims 0-1 (edges clamped) and takes dims 2-3 nearest; bicubic
 * mixes the 4x4 pixels around the same point with ggml's cubic convolution weights (alpha
 * -0.75, as PyTorch; edges clamped).
 *
 * @example
 * ```ts
 * import { Context, interpolate } from "../../mod.ts";
 * const ctx = new Context();
 * const x = ctx.newTensor("f32", [16, 16, 64]);
 * console.log(interpolate(x, [32, 32, 64], { mode: "bilinear" }).ne); // [32, 32, 64, 1]
 * ```
 */
export function interpolate(a: Tensor, shape: Shape, options: InterpolateOptions = {}): Tensor {
  requireDType("interpolate", a, ["f32"]);
  const mode = options.mode ?? "nearest";
  if (!Object.hasOwn(MODE_CODES, mode)) {
    throw new ArgumentError(`interpolate: mode must be nearest, bilinear or bicubic, got ${mode}`);
  }
  if (options.alignCorners && mode === "nearest") {
    throw new ArgumentError("interpolate: alignCorners needs the bilinear or bicubic mode");
  }
  const ne = toDims(shape);
  const code = MODE_CODES[mode] + (options.alignCorners ? 256 : 0);
  return new Tensor({ dtype: "f32", ne, op: Op.interpolate, src: [a], params: [code] });
}

/**
 * ggml_timestep_embedding: f32 timesteps `[N]` -> f32 `[dim, N]`, the sinusoidal embedding of
 * diffusion models: `cos(t * f_j)` then `sin(t * f_j)` for `f_j = maxPeriod^(-j / (dim/2))`, and
 * a 0 at the end of an odd `dim`.
 *
 * @example
 * ```ts
 * import { Context, timestepEmbedding } from "../../mod.ts";
 * const ctx = new Context();
 * const t = ctx.newTensor("f32", [4]);
 * console.log(timestepEmbedding(t, 320).ne); // [320, 4, 1, 1]
 * ```
 */
export function timestepEmbedding(timesteps: Tensor, dim: number, maxPeriod = 10000): Tensor {
  requireDType("timestepEmbedding", timesteps, ["f32"]);
  for (const [name, value] of [["dim", dim], ["maxPeriod", maxPeriod]] as const) {
    if (!Number.isInteger(value) || value < 1 || value > 1 << 24) {
      throw new ArgumentError(
        `timestepEmbedding: ${name} must be an integer in [1, 2^24], got ${value}`,
      );
    }
  }
  if (timesteps.ne[1] !== 1 || timesteps.ne[2] !== 1 || timesteps.ne[3] !== 1) {
    throw new ArgumentError(
      `timestepEmbedding: timesteps must be one-dimensional, got [${timesteps.ne.join(", ")}]`,
    );
  }
  return new Tensor({
    dtype: "f32",
    ne: [dim, timesteps.ne[0], 1, 1],
    op: Op.timestepEmbedding,
    src: [timesteps],
    params: [dim, maxPeriod],
  });
}
