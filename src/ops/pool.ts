/**
 * Pooling (ggml_pool_1d, ggml_pool_2d): the maximum or the mean of each window.
 * @module
 */

import { ArgumentError, ShapeError } from "../errors.ts";
import { Op } from "../op.ts";
import { formatShape, Tensor } from "../tensor.ts";
import { requireDType } from "./check.ts";

/** The pooling operation: the window's maximum or its mean. */
export type PoolOp = "max" | "avg";

/** Options of {@link pool1d} and {@link pool2d}: per spatial dim (x, then y in 2D). */
export interface PoolOptions {
  /** Step between windows (>= 1). Default: the kernel size (windows side by side). */
  stride?: number | readonly [number, number];
  /** Input positions added on each side, skipped in the window (>= 0, below the kernel). */
  padding?: number | readonly [number, number];
}

function pair(value: number | readonly [number, number]): [number, number] {
  return typeof value === "number" ? [value, value] : [value[0], value[1]];
}

function check(op: string, name: string, value: number, min: number): void {
  if (!Number.isInteger(value) || value < min || value > 1 << 20) {
    throw new ArgumentError(`${op}: ${name} must be an integer in [${min}, 2^20], got ${value}`);
  }
}

function pooled(
  name: string,
  a: Tensor,
  op: PoolOp,
  kernel: [number, number],
  options: PoolOptions,
  dims: 1 | 2,
): Tensor {
  requireDType(name, a, ["f32", "f16"]);
  if (op !== "max" && op !== "avg") {
    throw new ArgumentError(`${name}: op must be max or avg, got ${op}`);
  }
  const stride = pair(options.stride ?? kernel);
  const padding = pair(options.padding ?? 0);
  const ne: [number, number, number, number] = [...a.ne];
  for (let d = 0; d < dims; d++) {
    check(name, "kernel", kernel[d]!, 1);
    check(name, "stride", stride[d]!, 1);
    check(name, "padding", padding[d]!, 0);
    if (padding[d]! >= kernel[d]!) {
      throw new ArgumentError(
        `${name}: padding ${padding[d]} must be below the kernel ${kernel[d]}`,
      );
    }
    ne[d] = Math.floor((a.ne[d]! + 2 * padding[d]! - kernel[d]!) / stride[d]!) + 1;
    if (ne[d]! < 1) {
      throw new ShapeError(`${name}: input ${formatShape(a.ne)} is smaller than the window`);
    }
  }
  const code = op === "max" ? 0 : 1;
  return new Tensor({
    dtype: "f32",
    ne,
    op: dims === 1 ? Op.pool1d : Op.pool2d,
    src: [a],
    params: dims === 1
      ? [code, kernel[0], stride[0], padding[0]]
      : [code, kernel[0], kernel[1], stride[0], stride[1], padding[0], padding[1]],
  });
}

/**
 * ggml_pool_1d over dim 0 of `a` (f32 or f16) -> f32 `[OW, ...]`, OW = (W + 2p - k) / s + 1.
 * Positions in the padding are skipped: the mean divides by the window's positions inside.
 *
 * @example
 * ```ts
 * import { Context, pool1d } from "../../mod.ts";
 * const ctx = new Context();
 * const x = ctx.newTensor("f32", [100, 8]);
 * console.log(pool1d(x, "max", 2).ne); // [50, 8, 1, 1]
 * ```
 */
export function pool1d(a: Tensor, op: PoolOp, kernel: number, options: PoolOptions = {}): Tensor {
  const stride = options.stride ?? kernel;
  const padding = options.padding ?? 0;
  if (typeof stride !== "number" || typeof padding !== "number") {
    throw new ArgumentError("pool1d: stride and padding are single numbers");
  }
  return pooled("pool1d", a, op, [kernel, 1], { stride: [stride, 1], padding: [padding, 0] }, 1);
}

/**
 * ggml_pool_2d over dims 0 and 1 of `a` (f32 or f16, `[W, H, C, N]`) -> f32 `[OW, OH, C, N]`.
 * Positions in the padding are skipped; the mean divides by the whole window (k0 * k1, padding
 * counted), as ggml.
 *
 * @example
 * ```ts
 * import { Context, pool2d } from "../../mod.ts";
 * const ctx = new Context();
 * const x = ctx.newTensor("f32", [56, 56, 64]);
 * console.log(pool2d(x, "max", [3, 3], { stride: 2, padding: 1 }).ne); // [28, 28, 64, 1]
 * ```
 */
export function pool2d(
  a: Tensor,
  op: PoolOp,
  kernel: number | readonly [number, number],
  options: PoolOptions = {},
): Tensor {
  return pooled("pool2d", a, op, pair(kernel), options, 2);
}
