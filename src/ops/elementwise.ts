/**
 * Elementwise ops: binary ops with ggml broadcasting (the second operand repeats to the first's
 * shape; f32 or f16, both operands of one dtype or an f16 first with an f32 second), unary activations and scale (f32 or f16, the result in the source's dtype,
 * computed in f32) and repeat (f32, f16 or i32, bits copied).
 * @module
 */

import { Op, type OpCode } from "../op.ts";
import { type Dims, Tensor } from "../tensor.ts";
import { DTypeError } from "../errors.ts";
import { requireDType, requireFinite, requireRepeatable } from "./check.ts";

/** Options of the binary ops ({@link add}, {@link sub}, {@link mul}, {@link div}). */
export interface BinaryOptions {
  /**
   * The result's dtype (default `a`'s). An f16 `a` with an f32 `b` may give f32 (ggml_add_cast;
   * ggml-cpu's binary-ops.cpp computes f16 x f32 into f16 or f32); otherwise it is `a`'s.
   */
  readonly dtype?: "f32" | "f16";
}

function binary(op: OpCode, name: string, a: Tensor, b: Tensor, options: BinaryOptions): Tensor {
  requireDType(name, a, ["f32", "f16"]);
  // ggml-cpu: both f32, both f16, or an f16 src0 with an f32 src1 (never f32 with f16).
  requireDType(name, b, a.dtype === "f16" ? ["f16", "f32"] : ["f32"]);
  requireRepeatable(name, b, a);
  const dtype = options.dtype ?? a.dtype;
  const mixed = a.dtype === "f16" && b.dtype === "f32";
  if (dtype !== a.dtype && !mixed) {
    throw new DTypeError(
      `${name}: a ${dtype} result needs an f16 a and an f32 b, got ${a.dtype} and ${b.dtype}`,
    );
  }
  return new Tensor({ dtype, ne: a.ne, op, src: [a, b] });
}

function unary(op: OpCode, name: string, a: Tensor, params: number[] = []): Tensor {
  requireDType(name, a, ["f32", "f16"]);
  return new Tensor({ dtype: a.dtype, ne: a.ne, op, src: [a], params });
}

/**
 * `a + b`; `b` is repeated to `a`'s shape (each of `a`'s dimensions a multiple of `b`'s). Both
 * f32, both f16, or an f16 `a` with an f32 `b` (see {@link BinaryOptions} for the result).
 *
 * @example
 * ```ts
 * import { Context, add } from "../../mod.ts";
 * const ctx = new Context();
 * const y = add(ctx.newTensor("f32", [8, 4]), ctx.newTensor("f32", [8, 1]));
 * console.log(y.ne); // [8, 4, 1, 1]
 * ```
 */
export function add(a: Tensor, b: Tensor, options: BinaryOptions = {}): Tensor {
  return binary(Op.add, "add", a, b, options);
}

/** `a - b`, broadcasting `b` like {@link add}. */
export function sub(a: Tensor, b: Tensor, options: BinaryOptions = {}): Tensor {
  return binary(Op.sub, "sub", a, b, options);
}

/** `a * b` elementwise, broadcasting `b` like {@link add}. */
export function mul(a: Tensor, b: Tensor, options: BinaryOptions = {}): Tensor {
  return binary(Op.mul, "mul", a, b, options);
}

/** `a / b` elementwise, broadcasting `b` like {@link add}. */
export function div(a: Tensor, b: Tensor, options: BinaryOptions = {}): Tensor {
  return binary(Op.div, "div", a, b, options);
}

/**
 * `a * factor + bias` (ggml_scale and ggml_scale_bias); with bias 0 a plain multiply, so -0
 * stays -0.
 *
 * @example
 * ```ts
 * import { Context, scale } from "../../mod.ts";
 * const ctx = new Context();
 * const y = scale(ctx.newTensor("f32", [8]), 0.5, 1); // x / 2 + 1
 * ```
 */
export function scale(a: Tensor, factor: number, bias = 0): Tensor {
  requireFinite("scale", "factor", factor);
  requireFinite("scale", "bias", bias);
  return unary(Op.scale, "scale", a, [factor, bias]);
}

/** `a * a` elementwise (IEEE: NaN stays NaN, both infinities give +Inf). */
export function sqr(a: Tensor): Tensor {
  return unary(Op.sqr, "sqr", a);
}

/** Square root elementwise (IEEE: negative values and NaN give NaN, -0 gives -0). */
export function sqrt(a: Tensor): Tensor {
  return unary(Op.sqrt, "sqrt", a);
}

/**
 * GELU, tanh approximation (as ggml). As ggml's CPU backend: 0 for x <= -10 (so -Inf gives 0),
 * x for x >= 10 (+Inf gives +Inf), NaN stays NaN.
 */
export function gelu(a: Tensor): Tensor {
  return unary(Op.gelu, "gelu", a);
}

/** SiLU: `x * sigmoid(x)`, computed as ggml does, `x / (1 + e^-x)`: NaN and -Inf give NaN. */
export function silu(a: Tensor): Tensor {
  return unary(Op.silu, "silu", a);
}

/** ReLU: `(x > 0) ? x : 0` as ggml, so NaN and -0 give +0. */
export function relu(a: Tensor): Tensor {
  return unary(Op.relu, "relu", a);
}

/** Tiles `a` to `shape`: each dimension of `shape` must be a multiple of `a`'s. */
export function repeat(a: Tensor, shape: Tensor | Dims): Tensor {
  const ne = shape instanceof Tensor ? shape.ne : shape;
  requireDType("repeat", a, ["f32", "f16", "i32"]);
  requireRepeatable("repeat", a, new Tensor({ dtype: a.dtype, ne }));
  return new Tensor({ dtype: a.dtype, ne, op: Op.repeat, src: [a] });
}
