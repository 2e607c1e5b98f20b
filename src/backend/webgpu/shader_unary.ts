/**
 * WGSL for ggml's unary math ops (abs ... trunc, `src/ops/unary.ts`) and silu, f32 or f16 in and
 * out (f16 computed in f32). One thread per element, the source read through its strides. Each
 * expression follows the CPU kernel (`zig/kernels/unary.zig`): the same comparisons, so step,
 * sgn, hardSigmoid and clamp give the CPU's values on NaN too where the adapter keeps NaN.
 *
 * silu gives ggml-cpu's AVX2 bits (ggml_vec_silu_f32, `zig/kernels/elementwise.zig`): each row's
 * full vectors of 8 through ggml_v_silu, its last ne0 % 8 elements through ggml_silu_f32 with
 * glibc's expf (`GGML_EXP_WGSL`), so llama.cpp's swiglu (silu, then mul) is ggml's too.
 * @module
 */

import type { DType } from "../../dtype.ts";
import { flatKernel, PARAMS_WGSL, tensorBindings } from "./wgsl_common.ts";
import { EXACT_WGSL, GGML_EXP_WGSL } from "./wgsl_exact.ts";

/** Helpers the expressions call: roundf and erfc, which WGSL lacks. */
const HELPERS_WGSL = `
// C's roundf: halves away from zero (WGSL's round goes to even). x - trunc(x) is exact.
fn round_away(x: f32) -> f32 {
  let t = trunc(x);
  return select(t, t + sign(x), abs(x - t) >= 0.5);
}

// erfc, Numerical Recipes' erfcc (fractional error < 1.2e-7), as the CPU's.
fn erfc_nr(z: f32) -> f32 {
  let a = abs(z);
  let t = 1.0 / (1.0 + 0.5 * a);
  let p = -a * a - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 +
    t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 +
    t * (-0.82215223 + t * 0.17087277))))))));
  let r = t * exp(p);
  return select(2.0 - r, r, z >= 0.0);
}
`;

/** silu of element x at i0 in a row of n, as ggml_vec_silu_f32 splits the row. */
const SILU_WGSL = `${EXACT_WGSL}${GGML_EXP_WGSL}
fn silu_row(x: f32, i0: u32, n: u32) -> f32 {
  if (i0 < n - n % 8u) {
    return ggml_v_silu(x);
  }
  return ggml_silu_f32(x);
}
`;

/** Each op's WGSL expression of `x` at coordinates `c` (params in `P.f`), by op-table name. */
export const mathExpressions = {
  silu: "silu_row(x, c.x, P.t[0].ne.x)",
  abs: "abs(x)",
  sgn: "select(select(0.0, -1.0, x < 0.0), 1.0, x > 0.0)",
  neg: "-x",
  step: "select(0.0, 1.0, x > 0.0)",
  // tanh(±15) is ±1 in f32; the clamp keeps an exp-based tanh from overflowing to NaN.
  tanh: "tanh(clamp(x, -15.0, 15.0))",
  elu: "select(exp(x) - 1.0, x, x > 0.0)",
  leakyRelu: "select(0.0, x, x > 0.0) + P.f.x * select(0.0, x, x < 0.0)",
  sigmoid: "1.0 / (1.0 + exp(-x))",
  hardSigmoid: "min(1.0, max(0.0, (x + 3.0) / 6.0))",
  hardSwish: "x * min(1.0, max(0.0, (x + 3.0) / 6.0))",
  geluErf: "0.5 * x * erfc_nr(-x * 0.70710678118654752)",
  geluQuick: "x * (1.0 / (1.0 + exp(-1.702 * x)))",
  exp: "exp(x)",
  log: "log(x)",
  sin: "sin(x)",
  cos: "cos(x)",
  // ggml's MAX(MIN(x, max), min) with C's comparison macros.
  clamp: "select(P.f.x, select(P.f.y, x, x < P.f.y), select(P.f.y, x, x < P.f.y) > P.f.x)",
  floor: "floor(x)",
  ceil: "ceil(x)",
  round: "round_away(x)",
  trunc: "trunc(x)",
} as const;

/** A unary math op's name. */
export type MathKind = keyof typeof mathExpressions;

/** `D = f(S0)` element by element, D and S0 of `dtype` (f32 or f16). */
export function mathShader(kind: MathKind, dtype: DType): string {
  return `${PARAMS_WGSL}
${tensorBindings(dtype, [dtype])}
${kind === "silu" ? SILU_WGSL : HELPERS_WGSL}
${
    flatKernel(`  let c = coords(0u, i);
  let x = S0_f32(at(1u, c));
  D_set_f32(at(0u, c), ${mathExpressions[kind]});`)
  }`;
}
