/**
 * ggml's unary math ops: each takes an f32 or f16 tensor of any layout and gives a contiguous
 * tensor of its shape and dtype (f16 computed in f32 and rounded once). Each is defined as
 * ggml-cpu defines it (vec.h, unary-ops.cpp), including what NaN gives where that is not NaN.
 * @module
 */

import { Op, type OpCode } from "../op.ts";
import { Tensor } from "../tensor.ts";
import { ShapeError } from "../errors.ts";
import { requireDType, requireFinite } from "./check.ts";

function unaryMath(op: OpCode, name: string, a: Tensor, params: number[] = []): Tensor {
  requireDType(name, a, ["f32", "f16"]);
  return new Tensor({ dtype: a.dtype, ne: a.ne, op, src: [a], params });
}

/**
 * `|x|` elementwise.
 *
 * @example
 * ```ts
 * import { abs, Context } from "../../mod.ts";
 * const ctx = new Context();
 * const y = abs(ctx.newTensor("f16", [7, 3]));
 * console.log(y.dtype); // "f16"
 * ```
 */
export function abs(a: Tensor): Tensor {
  return unaryMath(Op.abs, "abs", a);
}

/** The sign: 1 for x > 0, -1 for x < 0, 0 for ±0 and NaN (ggml's comparisons). */
export function sgn(a: Tensor): Tensor {
  return unaryMath(Op.sgn, "sgn", a);
}

/** `-x` elementwise. */
export function neg(a: Tensor): Tensor {
  return unaryMath(Op.neg, "neg", a);
}

/** 1 where x > 0, else 0 (NaN gives 0). */
export function step(a: Tensor): Tensor {
  return unaryMath(Op.step, "step", a);
}

/** Hyperbolic tangent. */
export function tanh(a: Tensor): Tensor {
  return unaryMath(Op.tanh, "tanh", a);
}

/** ELU: x for x > 0, else e^x - 1 (expm1). */
export function elu(a: Tensor): Tensor {
  return unaryMath(Op.elu, "elu", a);
}

/** Leaky ReLU: x for x > 0, `slope * x` for x < 0 (ggml_leaky_relu). */
export function leakyRelu(a: Tensor, slope: number): Tensor {
  requireFinite("leakyRelu", "slope", slope);
  return unaryMath(Op.leakyRelu, "leakyRelu", a, [slope]);
}

/** The logistic function `1 / (1 + e^-x)`. */
export function sigmoid(a: Tensor): Tensor {
  return unaryMath(Op.sigmoid, "sigmoid", a);
}

/** `min(1, max(0, (x + 3) / 6))`; NaN gives 0 (fmaxf). */
export function hardSigmoid(a: Tensor): Tensor {
  return unaryMath(Op.hardSigmoid, "hardSigmoid", a);
}

/** `x * hardSigmoid(x)`. */
export function hardSwish(a: Tensor): Tensor {
  return unaryMath(Op.hardSwish, "hardSwish", a);
}

/** GELU, exact form: `0.5 x (1 + erf(x / sqrt 2))` (ggml_gelu_erf). */
export function geluErf(a: Tensor): Tensor {
  return unaryMath(Op.geluErf, "geluErf", a);
}

/** Quick GELU: `x * sigmoid(1.702 x)` (ggml_gelu_quick). */
export function geluQuick(a: Tensor): Tensor {
  return unaryMath(Op.geluQuick, "geluQuick", a);
}

/** `e^x` elementwise. */
export function exp(a: Tensor): Tensor {
  return unaryMath(Op.exp, "exp", a);
}

/** Natural logarithm (negative values give NaN, 0 gives -Infinity). */
export function log(a: Tensor): Tensor {
  return unaryMath(Op.log, "log", a);
}

/** Sine (radians). */
export function sin(a: Tensor): Tensor {
  return unaryMath(Op.sin, "sin", a);
}

/** Cosine (radians). */
export function cos(a: Tensor): Tensor {
  return unaryMath(Op.cos, "cos", a);
}

/**
 * Each element limited to [min, max], as ggml: `MAX(MIN(x, max), min)` with C's comparison
 * macros, so NaN gives max.
 */
export function clamp(a: Tensor, min: number, max: number): Tensor {
  requireFinite("clamp", "min", min);
  requireFinite("clamp", "max", max);
  if (!(min <= max)) throw new ShapeError(`clamp: min ${min} is above max ${max}`);
  return unaryMath(Op.clamp, "clamp", a, [min, max]);
}

/** Rounds toward -Infinity. */
export function floor(a: Tensor): Tensor {
  return unaryMath(Op.floor, "floor", a);
}

/** Rounds toward +Infinity. */
export function ceil(a: Tensor): Tensor {
  return unaryMath(Op.ceil, "ceil", a);
}

/** Rounds to the nearest integer, halves away from zero (C's roundf). */
export function round(a: Tensor): Tensor {
  return unaryMath(Op.round, "round", a);
}

/** Rounds toward zero. */
export function trunc(a: Tensor): Tensor {
  return unaryMath(Op.trunc, "trunc", a);
}
