/**
 * WGSL for ggml's unary math ops (abs ... trunc, `src/ops/unary.ts`), f32 or f16 in and out
 * (f16 computed in f32). One thread per element, the source read through its strides. Each
 * expression follows the CPU kernel (`zig/kernels/unary.zig`): the same comparisons, so step,
 * sgn, hardSigmoid and clamp give the CPU's values on NaN too where the adapter keeps NaN.
 * @module
 */

import type { DType } from "../../dtype.ts";
import { flatKernel, PARAMS_WGSL, tensorBindings } from "./wgsl_common.ts";

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

/** Each op's WGSL expression of `x` (params in `P.f`), by op-table name. */
export const mathExpressions = {
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
${HELPERS_WGSL}
${
    flatKernel(`  let c = coords(0u, i);
  let x = S0_f32(at(1u, c));
  D_set_f32(at(0u, c), ${mathExpressions[kind]});`)
  }`;
}
