/**
 * A context creates the input tensors of a computation and remembers them, so they can be
 * given memory together (`allocTensors(backend, ctx.tensors)`).
 * @module
 */

import type { TensorDType } from "./dtype.ts";
import { ShapeError } from "./errors.ts";
import { type Dims, Tensor } from "./tensor.ts";
import { showValue } from "./args.ts";

/** A shape with 1 to 4 dimensions, `ne[0]` first. */
export type Shape =
  | readonly [number]
  | readonly [number, number]
  | readonly [number, number, number]
  | readonly [number, number, number, number];

/** Pads a 1-4 dimensional shape to four dimensions. */
export function toDims(shape: readonly number[]): Dims {
  if (!Array.isArray(shape) || shape.length < 1 || shape.length > 4) {
    throw new ShapeError(`a shape has 1 to 4 dimensions, got ${showValue(shape)}`);
  }
  return [shape[0] ?? 1, shape[1] ?? 1, shape[2] ?? 1, shape[3] ?? 1];
}

/**
 * Creates and tracks input tensors (weights, activations, constants).
 *
 * @example
 * ```ts
 * import { Context } from "./context.ts";
 * const ctx = new Context();
 * const w = ctx.newTensor("f32", [768, 3072], "w_up");
 * console.log(ctx.tensors.length); // 1
 * ```
 */
export class Context {
  readonly #tensors: Tensor[] = [];

  /** Creates an input tensor of the given dtype and shape (ggml order). */
  newTensor(dtype: TensorDType, shape: Shape, name = ""): Tensor {
    const tensor = new Tensor({ dtype, ne: toDims(shape), name });
    this.#tensors.push(tensor);
    return tensor;
  }

  /** Every tensor this context created, in creation order. */
  get tensors(): readonly Tensor[] {
    return this.#tensors;
  }
}
