/**
 * WGSL for element-wise ops: binary ops with the second source broadcast by repetition, unary
 * activations and scale, and repeat. One thread per destination element; every source is read
 * through its own strides, so views need no copy.
 * @module
 */

import type { DType } from "../../dtype.ts";
import { flatKernel, PARAMS_WGSL, tensorBindings } from "./wgsl_common.ts";

/** Binary ops, by their WGSL operator. */
export type BinaryKind = "add" | "sub" | "mul" | "div";

/** Unary ops (named as in the op table, `src/op.ts`); `scale` multiplies by `P.f.x`. */
export type UnaryKind = keyof typeof unaryExpressions;

const operators: Readonly<Record<BinaryKind, string>> = { add: "+", sub: "-", mul: "*", div: "/" };

/**
 * `D = S0 op S1`, S1's coordinates taken modulo its shape (ggml's repeat broadcast); each
 * operand of its own dtype (default D's), computed in f32.
 */
export function binaryShader(
  kind: BinaryKind,
  dtype: DType = "f32",
  sources: readonly [DType, DType] = [dtype, dtype],
): string {
  return `${PARAMS_WGSL}
${tensorBindings(dtype, sources)}
${
    flatKernel(`  let c = coords(0u, i);
  let a = S0_f32(at(1u, c));
  let b = S1_f32(at(2u, c % P.t[2].ne));
  D_set_f32(at(0u, c), a ${operators[kind]} b);`)
  }`;
}

/**
 * Each unary op's WGSL expression of `x`, by op-table name: the one place a unary op is added
 * to this backend (the kernel table in kernels.ts is derived from it).
 */
export const unaryExpressions = {
  // ggml_scale_bias: x * s + b, fused as the CPU's; with b = 0 a plain multiply (-0 stays -0).
  scale: "select(fma(x, P.f.x, P.f.y), x * P.f.x, P.f.y == 0.0)",
  sqr: "x * x",
  sqrt: "sqrt(x)",
  // As the CPU: x / (1 + e^(-2y)) equals 0.5 x (1 + tanh(y)) without its cancellation.
  // As ggml's CPU gelu: 0 for x <= -10, x for x >= 10.
  gelu: "select(select(x / (1.0 + exp(-2.0 * (0.7978845608028654 * x * (1.0 + 0.044715 * x * " +
    "x)))), x, x >= 10.0), 0.0, x <= -10.0)",
  // ggml's (x > 0) ? x : 0, so NaN and -0 give +0.
  relu: "select(0.0, x, x > 0.0)",
} as const;

/** `D = f(S0)` element by element, D and S0 of `dtype` (f32 or f16, computed in f32). */
export function unaryShader(kind: UnaryKind, dtype: DType = "f32"): string {
  return `${PARAMS_WGSL}
${tensorBindings(dtype, [dtype])}
${
    flatKernel(`  let c = coords(0u, i);
  let x = S0_f32(at(1u, c));
  D_set_f32(at(0u, c), ${unaryExpressions[kind]});`)
  }`;
}

/** `D(c) = S0(c mod S0.ne)`, copied bit for bit (any dtype shared by both). */
export function repeatShader(dtype: DType): string {
  return `${PARAMS_WGSL}
${tensorBindings(dtype, [dtype])}
${
    flatKernel(`  let c = coords(0u, i);
  D_set_bits(at(0u, c), S0_bits(at(1u, c % P.t[1].ne)));`)
  }`;
}
