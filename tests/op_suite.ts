/**
 * The test-backend-ops-style op suite (shared by `op_suite_test.ts`, CPU, and
 * `op_suite_webgpu_test.ts`, WebGPU): cases of (op, dtype, shapes with odd sizes, views,
 * permuted and broadcast inputs), each built twice in step, as a graph and as a float64
 * reference (`reference.ts`); and one probe per op of the op table, which builds the op for a
 * given dtype so that the suite can check the table's `support` declarations both ways.
 *
 * Tolerances, per result dtype (`Tolerance`: every element within atol + rtol |want|, and the
 * normalized squared error below nmse):
 * - exact ops (abs, sgn, neg, step, clamp, floor, ceil, round, trunc, max/min, argmax,
 *   countEqual): bit-identical;
 * - a few f32 roundings (hardSigmoid, hardSwish, scale with bias, sqr, sqrt): 4 f32 ulps and
 *   an absolute 6e-8 where a result cancels to near 0;
 * - transcendental f32 (tanh, elu, sigmoid, geluErf, geluQuick, exp, log, sin, cos): rtol 1e-5,
 *   atol 1e-7 (TOL_ACTIVATION);
 * - sums (sumRows, cumsum): TOL_REDUCTION;
 * - any f16 result: one f16 ulp (rtol 2^-10, the reference rounds once from f64, the kernel
 *   from f32) and an atol of the smallest f16 subnormal.
 * Another backend against the CPU: NMSE (ggml's measure) at most `gpuNmse`: 0 for exact ops,
 * 1e-10 for a few roundings, 1e-9 for transcendental f32 (WGSL's exp, tanh, log, sin and cos
 * are a few ulps), 1e-6 for f16 results (a one-ulp difference of an f16 is 2.4e-7 relative).
 * @module
 */

import {
  abs,
  acc,
  add,
  allocTensors,
  arange,
  argmax,
  argsort,
  type Backend,
  ceil,
  clamp,
  concat,
  cont,
  Context,
  convTranspose1d,
  convTranspose2d,
  cos,
  countEqual,
  cpy,
  cumsum,
  diagMaskInf,
  div,
  elu,
  exp,
  fill,
  flashAttnExt,
  floor,
  gelu,
  geluErf,
  geluQuick,
  getRows,
  Graph,
  groupNorm,
  hardSigmoid,
  hardSwish,
  im2col,
  interpolate,
  l2Norm,
  leakyRelu,
  log,
  maxRows,
  mean,
  minRows,
  mul,
  mulMat,
  neg,
  norm,
  pad,
  padCircular,
  padReflect1d,
  permute,
  pool1d,
  pool2d,
  relu,
  repeat,
  repeatBack,
  rmsNorm,
  roll,
  rope,
  round,
  scale,
  set,
  set1d,
  set2d,
  setRows,
  sgn,
  type Shape,
  sigmoid,
  silu,
  sin,
  softmax,
  sqr,
  sqrt,
  step,
  sub,
  sum,
  sumRows,
  tanh,
  type Tensor,
  type TensorData,
  timestepEmbedding,
  topK,
  transpose,
  tri,
  trunc,
} from "../mod.ts";
import { type DType, DTYPES, holdsRawBytes } from "../src/dtype.ts";
import { DTypeError } from "../src/errors.ts";
import { type OpInfo, type OpName, OPS, type OpSupport } from "../src/op.ts";
import { unplacedOwners } from "../src/alloc/alloc_tensors.ts";
import {
  type Dims4,
  F32_ULP,
  forEachIndex,
  refPermute,
  RefTensor,
  refTranspose,
  roundF16,
  TOL_ACTIVATION,
  TOL_EXACT,
  TOL_REDUCTION,
  type Tolerance,
} from "./reference.ts";

/** A graph tensor and its float64 reference, built in step. */
export interface Arg {
  readonly t: Tensor;
  readonly r: RefTensor;
}

/** Seeded inputs of one case: the same case gives the same data on every backend. */
export class Inputs {
  readonly ctx = new Context();
  readonly data = new Map<Tensor, TensorData>();
  #state: number;

  constructor(seed: string) {
    let h = 2166136261;
    for (const ch of seed) h = Math.imul(h ^ ch.charCodeAt(0), 16777619);
    this.#state = h >>> 0;
  }

  /** Uniform in [0, 1) (mulberry32). */
  next(): number {
    this.#state = (this.#state + 0x6d2b79f5) >>> 0;
    let t = this.#state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  /** Values of magnitude in [lo, hi], either sign (only positive with `positive`). */
  float(dtype: "f32" | "f16", shape: readonly number[], lo = 0.1, hi = 1, positive = false): Arg {
    const t = this.ctx.newTensor(dtype, shape as Shape);
    const values = Array.from({ length: t.nelements }, () => {
      const magnitude = lo + (hi - lo) * this.next();
      return positive || this.next() < 0.5 ? magnitude : -magnitude;
    });
    return this.#set(t, values);
  }

  /** A 1-d tensor holding `values` (rounded to the dtype). */
  fixed(dtype: "f32" | "f16" | "i32", values: readonly number[]): Arg {
    return this.#set(this.ctx.newTensor(dtype, [values.length]), values);
  }

  /** i32 values in [0, max). */
  ints(shape: readonly number[], max: number): Arg {
    const t = this.ctx.newTensor("i32", shape as Shape);
    const values = Array.from({ length: t.nelements }, () => Math.floor(this.next() * max));
    return this.#set(t, values);
  }

  #set(t: Tensor, values: readonly number[]): Arg {
    const data = t.dtype === "f32"
      ? new Float32Array(values)
      : t.dtype === "f16"
      ? new Float16Array(values)
      : Int32Array.from(values);
    this.data.set(t, data);
    return { t, r: RefTensor.of(t.ne, Float64Array.from(data as ArrayLike<number>)) };
  }
}

/** Transposed graph tensor and reference. */
export function T(a: Arg): Arg {
  return { t: transpose(a.t), r: refTranspose(a.r) };
}

/** Permuted graph tensor and reference (ggml's permute: source dim i goes to axes[i]). */
export function P(a: Arg, axes: Dims4): Arg {
  return { t: permute(a.t, axes), r: refPermute(a.r, axes) };
}

/** One suite case. */
export interface SuiteCase {
  readonly name: string;
  readonly op: OpName;
  readonly build: (inputs: Inputs) => { out: Tensor; ref: RefTensor };
  readonly tol: Tolerance;
  readonly gpuNmse: number;
}

/** A few f32 roundings; the floor covers results that cancel to near 0 (scale with bias). */
const TOL_ROUNDINGS: Tolerance = { nmse: 1e-12, rtol: 4 * F32_ULP, atol: 6e-8 };
const TOL_F16: Tolerance = { nmse: 1e-6, rtol: 2 ** -10, atol: 2 ** -24 };
const NMSE_EXACT = 0;
const NMSE_ROUNDINGS = 1e-10;
const NMSE_TRANSCENDENTAL = 1e-9;
const NMSE_F16 = 1e-6;

/** The reference of an elementwise op: f(x) in f64, rounded to f16 for an f16 result. */
function mapRef(a: RefTensor, f: (x: number) => number, dtype: DType): RefTensor {
  const values = a.values().map(f);
  if (dtype === "f16") values.forEach((v, i) => values[i] = roundF16(v));
  return RefTensor.of(a.ne, values);
}

// ---- float64 references with ggml-cpu's definitions ----

/** erf by its Taylor series (|z| < 3: terms small enough that f64 keeps ~12 digits). */
function erfSeries(z: number): number {
  let term = z;
  let total = z;
  for (let n = 1; n < 200; n++) {
    term *= -z * z / n;
    const next = term / (2 * n + 1);
    total += next;
    if (Math.abs(next) < 1e-17 * Math.abs(total)) break;
  }
  return 2 / Math.sqrt(Math.PI) * total;
}

/** erfc for z >= 3 by its continued fraction (Lentz's form evaluated backwards). */
function erfcFraction(z: number): number {
  let f = 0;
  for (let k = 60; k >= 1; k--) f = (k / 2) / (z + f);
  return Math.exp(-z * z) / Math.sqrt(Math.PI) / (z + f);
}

export function refErfc(z: number): number {
  if (Number.isNaN(z)) return NaN;
  if (z >= 3) return erfcFraction(z);
  if (z <= -3) return 2 - erfcFraction(-z);
  return 1 - erfSeries(z);
}

function hardSigmoidRef(x: number): number {
  const t = (x + 3) / 6;
  const low = t > 0 ? t : 0;
  return low < 1 ? low : 1;
}

/** C's roundf: halves away from zero. */
function roundRef(x: number): number {
  if (!Number.isFinite(x)) return x;
  const t = Math.trunc(x);
  return Math.abs(x - t) >= 0.5 ? t + Math.sign(x) : t;
}

interface UnarySpec {
  readonly build: (a: Tensor) => Tensor;
  readonly ref: (x: number) => number;
  readonly exact: boolean;
  readonly transcendental: boolean;
  /** Input magnitudes [lo, hi] and sign where the op is well-conditioned. */
  readonly lo: number;
  readonly hi: number;
  readonly positive?: boolean;
}

const SLOPE = 0.0625;
const CLAMP_MIN = -0.5;
const CLAMP_MAX = 0.75;

function spec(
  build: (a: Tensor) => Tensor,
  ref: (x: number) => number,
  kind: "exact" | "roundings" | "transcendental",
  lo = 0.1,
  hi = 1,
  positive = false,
): UnarySpec {
  return {
    build,
    ref,
    exact: kind === "exact",
    transcendental: kind === "transcendental",
    lo,
    hi,
    positive,
  };
}

/** The unary math ops of codes 25-45, with their ggml definitions in f64. */
export const UNARY_MATH: Partial<Record<OpName, UnarySpec>> = {
  abs: spec(abs, Math.abs, "exact"),
  sgn: spec(sgn, (x) => x > 0 ? 1 : x < 0 ? -1 : 0, "exact"),
  neg: spec(neg, (x) => -x, "exact"),
  step: spec(step, (x) => x > 0 ? 1 : 0, "exact"),
  tanh: spec(tanh, Math.tanh, "transcendental", 0.1, 4),
  elu: spec(elu, (x) => x > 0 ? x : Math.expm1(x), "transcendental", 0.1, 4),
  leakyRelu: spec(
    (a) => leakyRelu(a, SLOPE),
    (x) => (x > 0 ? x : 0) + SLOPE * (x < 0 ? x : 0),
    "exact", // the slope is a power of two
  ),
  sigmoid: spec(sigmoid, (x) => 1 / (1 + Math.exp(-x)), "transcendental", 0.1, 8),
  hardSigmoid: spec(hardSigmoid, hardSigmoidRef, "roundings", 0.1, 5),
  hardSwish: spec(hardSwish, (x) => x * hardSigmoidRef(x), "roundings", 0.1, 5),
  geluErf: spec(geluErf, (x) => 0.5 * x * refErfc(-x / Math.SQRT2), "transcendental", 0.1, 4),
  geluQuick: spec(geluQuick, (x) => x / (1 + Math.exp(-1.702 * x)), "transcendental", 0.1, 4),
  exp: spec(exp, Math.exp, "transcendental", 0.1, 8),
  log: spec(log, Math.log, "transcendental", 0.1, 100, true),
  sin: spec(sin, Math.sin, "transcendental", 0.1, 3),
  cos: spec(cos, Math.cos, "transcendental", 0.1, 3),
  clamp: spec(
    (a) => clamp(a, CLAMP_MIN, CLAMP_MAX),
    (x) => {
      const low = x < CLAMP_MAX ? x : CLAMP_MAX;
      return low > CLAMP_MIN ? low : CLAMP_MIN;
    },
    "exact",
  ),
  floor: spec(floor, Math.floor, "exact", 0.1, 6),
  ceil: spec(ceil, Math.ceil, "exact", 0.1, 6),
  round: spec(round, roundRef, "exact", 0.1, 6),
  trunc: spec(trunc, Math.trunc, "exact", 0.1, 6),
};

function tolFor(dtype: DType, s: UnarySpec): { tol: Tolerance; gpuNmse: number } {
  if (dtype === "f16") return { tol: s.exact ? TOL_EXACT : TOL_F16, gpuNmse: NMSE_F16 };
  if (s.exact) return { tol: TOL_EXACT, gpuNmse: NMSE_EXACT };
  if (s.transcendental) return { tol: TOL_ACTIVATION, gpuNmse: NMSE_TRANSCENDENTAL };
  return { tol: TOL_ROUNDINGS, gpuNmse: NMSE_ROUNDINGS };
}

/** Every case of the suite. */
export const CASES: SuiteCase[] = [];

function unaryCase(
  op: OpName,
  s: UnarySpec,
  dtype: "f32" | "f16",
  label: string,
  source: (i: Inputs) => Arg,
): void {
  CASES.push({
    name: `${op} ${dtype} ${label}`,
    op,
    build: (i) => {
      const a = source(i);
      return { out: s.build(a.t), ref: mapRef(a.r, s.ref, dtype) };
    },
    ...tolFor(dtype, s),
  });
}

for (const [name, s] of Object.entries(UNARY_MATH) as [OpName, UnarySpec][]) {
  for (const dtype of ["f32", "f16"] as const) {
    const f = (i: Inputs, shape: number[]): Arg => i.float(dtype, shape, s.lo, s.hi, s.positive);
    unaryCase(name, s, dtype, "[1037, 3]", (i) => f(i, [1037, 3]));
    unaryCase(name, s, dtype, "[1]", (i) => f(i, [1]));
    unaryCase(name, s, dtype, "transposed [7, 33]", (i) => T(f(i, [33, 7])));
    unaryCase(name, s, dtype, "permuted [7, 5, 3, 2]", (i) => P(f(i, [7, 5, 3, 2]), [2, 0, 3, 1]));
  }
}

// Outputs of 16 MiB and more are written with streaming stores (zig/kernels/common.zig): one
// case each for kernels/unary.zig and elementwise.zig's unary path, with a ragged row end.
const STREAMED: readonly number[] = [4 * 1024 * 1024 + 5];
unaryCase("exp", UNARY_MATH.exp!, "f32", "streamed [4194309]", (i) => i.float("f32", STREAMED));
unaryCase(
  "scale",
  spec((a) => scale(a, 0.5), (x) => x * 0.5, "exact"),
  "f32",
  "streamed [4194309]",
  (i) => i.float("f32", STREAMED),
);

// Halves and near-halves for round (away from zero), floor, ceil and trunc, both signs.
const ROUNDING_EDGES = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -0.49999997, 3, -3, 0.25];
for (const op of ["round", "floor", "ceil", "trunc"] as const) {
  const s = UNARY_MATH[op]!;
  unaryCase(op, s, "f32", "halves", (i) => i.fixed("f32", ROUNDING_EDGES));
}

/**
 * NaN and infinities as ggml's CPU backend defines each op (checked on the CPU only: WGSL
 * leaves NaN and infinities to the implementation).
 */
export const SPECIALS = [NaN, Infinity, -Infinity, 0, -0, 1, -1];

// Existing unary ops in f16 (and scale with bias), the same way.
const EXISTING_UNARY: Partial<Record<OpName, UnarySpec>> = {
  sqr: spec(sqr, (x) => x * x, "roundings"),
  sqrt: spec(sqrt, Math.sqrt, "roundings", 0.1, 1, true),
  relu: spec(relu, (x) => x > 0 ? x : 0, "exact"),
  silu: spec(silu, (x) => x / (1 + Math.exp(-x)), "transcendental"),
  gelu: spec(gelu, (x) => {
    const y = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    return 0.5 * x * (1 + Math.tanh(y));
  }, "transcendental"),
  scale: spec((a) => scale(a, 0.37, -0.25), (x) => x * 0.37 - 0.25, "roundings"),
};
for (const [name, s] of Object.entries(EXISTING_UNARY) as [OpName, UnarySpec][]) {
  for (const dtype of ["f32", "f16"] as const) {
    const f = (i: Inputs, shape: number[]): Arg => i.float(dtype, shape, s.lo, s.hi, s.positive);
    unaryCase(name, s, dtype, "[1037, 3]", (i) => f(i, [1037, 3]));
    unaryCase(name, s, dtype, "permuted [7, 5, 3, 2]", (i) => P(f(i, [7, 5, 3, 2]), [2, 0, 3, 1]));
  }
}

// ---- binary ops: every broadcast form ggml allows ----

const BINARY = {
  add: [add, (x: number, y: number) => x + y],
  sub: [sub, (x: number, y: number) => x - y],
  mul: [mul, (x: number, y: number) => x * y],
  div: [div, (x: number, y: number) => x / y],
} as const;

/** src0's shape: every dimension has a proper divisor other than 1 (or is 1 itself). */
const BROADCAST_A: Dims4 = [6, 4, 3, 2];

/**
 * ggml_can_repeat allows src1.ne[d] to be any divisor of src0.ne[d]: for each dimension take
 * src0's extent, 1, or a proper divisor (3^4 - 1 forms besides equal shapes, all listed).
 */
export function broadcastForms(): Dims4[] {
  const choices = BROADCAST_A.map((n) => [...new Set([n, 1, n === 6 ? 3 : n === 4 ? 2 : 1])]);
  const forms: Dims4[] = [];
  for (const a of choices[0]!) {
    for (const b of choices[1]!) {
      for (const c of choices[2]!) for (const d of choices[3]!) forms.push([a, b, c, d]);
    }
  }
  return forms;
}

function binaryRef(a: RefTensor, b: RefTensor, f: (x: number, y: number) => number): RefTensor {
  const out = new Float64Array(a.count);
  forEachIndex(a.ne, (i0, i1, i2, i3, k) => {
    const y = b.at(i0 % b.ne[0], i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3]);
    out[k] = Math.fround(f(a.at(i0, i1, i2, i3), y));
  });
  return new RefTensor(a.ne, out);
}

for (const [name, [op, f]] of Object.entries(BINARY) as [OpName, typeof BINARY.add][]) {
  for (const form of broadcastForms()) {
    CASES.push({
      name: `${name} f32 [${BROADCAST_A}] by [${form}]`,
      op: name,
      build: (i) => {
        const a = i.float("f32", [...BROADCAST_A]);
        const b = i.float("f32", [...form]);
        return { out: op(a.t, b.t), ref: binaryRef(a.r, b.r, f) };
      },
      tol: TOL_EXACT, // one f32 operation, the reference rounds the f64 result to f32 once
      gpuNmse: NMSE_ROUNDINGS,
    });
  }
  // f16 (both operands f16, computed in f32, rounded once): equal shapes, a row, a scalar and
  // a partial repeat in every dimension.
  for (const form of [BROADCAST_A, [6, 1, 1, 1], [1, 1, 1, 1], [3, 2, 3, 1]] as Dims4[]) {
    CASES.push({
      name: `${name} f16 [${BROADCAST_A}] by [${form}]`,
      op: name,
      build: (i) => {
        const a = i.float("f16", [...BROADCAST_A]);
        const b = i.float("f16", [...form]);
        const ref = binaryRef(a.r, b.r, f);
        return { out: op(a.t, b.t), ref: mapRef(ref, (x) => x, "f16") };
      },
      tol: TOL_F16,
      gpuNmse: NMSE_F16,
    });
  }
  // Broadcast with views: a permuted src0 and a transposed src1.
  CASES.push({
    name: `${name} f32 permuted [6, 4, 3, 2] by transposed [6, 4]`,
    op: name,
    build: (i) => {
      const a = P(i.float("f32", [3, 6, 2, 4]), [2, 0, 3, 1]);
      const b = T(i.float("f32", [4, 6]));
      return { out: op(a.t, b.t), ref: binaryRef(a.r, b.r, f) };
    },
    tol: TOL_EXACT,
    gpuNmse: NMSE_ROUNDINGS,
  });
}

// ---- row reductions and scans ----

function rowsRef(a: RefTensor, f: (row: number[]) => number, dtype: DType): RefTensor {
  const [n0, n1, n2, n3] = a.ne;
  const out: number[] = [];
  for (let i3 = 0; i3 < n3; i3++) {
    for (let i2 = 0; i2 < n2; i2++) {
      for (let i1 = 0; i1 < n1; i1++) {
        const row = Array.from({ length: n0 }, (_, i0) => a.at(i0, i1, i2, i3));
        const v = f(row);
        out.push(dtype === "f16" ? roundF16(v) : dtype === "f32" ? Math.fround(v) : v);
      }
    }
  }
  return RefTensor.of([1, n1, n2, n3], out);
}

const firstMax = (row: number[]): number => {
  let best = -Infinity;
  let at = 0;
  row.forEach((x, i) => {
    if (x > best) [best, at] = [x, i];
  });
  return at;
};

const ROW_OPS = {
  sumRows: [sumRows, (row: number[]) => row.reduce((s, x) => s + x, 0)],
  maxRows: [maxRows, (row: number[]) => row.reduce((m, x) => x > m ? x : m, -Infinity)],
  minRows: [minRows, (row: number[]) => row.reduce((m, x) => x < m ? x : m, Infinity)],
} as const;

const ROW_SHAPES: { label: string; make: (i: Inputs, dtype: "f32" | "f16") => Arg }[] = [
  { label: "[1031, 3]", make: (i, d) => i.float(d, [1031, 3]) },
  { label: "[1]", make: (i, d) => i.float(d, [1]) },
  { label: "[7, 5, 3, 2]", make: (i, d) => i.float(d, [7, 5, 3, 2]) },
  { label: "transposed [7, 33]", make: (i, d) => T(i.float(d, [33, 7])) },
  { label: "permuted [5, 7, 3]", make: (i, d) => P(i.float(d, [7, 3, 5]), [1, 2, 0, 3]) },
];

for (const [name, [op, f]] of Object.entries(ROW_OPS) as [OpName, typeof ROW_OPS.sumRows][]) {
  const sums = name === "sumRows";
  for (const dtype of ["f32", "f16"] as const) {
    for (const shape of ROW_SHAPES) {
      CASES.push({
        name: `${name} ${dtype} ${shape.label}`,
        op: name,
        build: (i) => {
          const a = shape.make(i, dtype);
          return { out: op(a.t), ref: rowsRef(a.r, f, dtype) };
        },
        tol: dtype === "f16" ? TOL_F16 : sums ? TOL_REDUCTION : TOL_EXACT,
        gpuNmse: dtype === "f16" ? NMSE_F16 : sums ? NMSE_TRANSCENDENTAL : NMSE_EXACT,
      });
    }
  }
}

for (const dtype of ["f32", "f16"] as const) {
  for (const shape of ROW_SHAPES) {
    CASES.push({
      name: `argmax ${dtype} ${shape.label}`,
      op: "argmax",
      build: (i) => {
        const a = shape.make(i, dtype);
        const ref = rowsRef(a.r, firstMax, "i32");
        return { out: argmax(a.t), ref: RefTensor.of([ref.ne[1], ref.ne[2], ref.ne[3]], ref.data) };
      },
      tol: TOL_EXACT,
      gpuNmse: NMSE_EXACT,
    });
    CASES.push({
      name: `cumsum ${dtype} ${shape.label}`,
      op: "cumsum",
      build: (i) => {
        const a = shape.make(i, dtype);
        const out = new Float64Array(a.r.count);
        let total = 0;
        forEachIndex(a.r.ne, (i0, i1, i2, i3, k) => {
          if (i0 === 0) total = 0;
          total += a.r.at(i0, i1, i2, i3);
          out[k] = dtype === "f16" ? roundF16(total) : Math.fround(total);
        });
        return { out: cumsum(a.t), ref: new RefTensor(a.r.ne, out) };
      },
      tol: dtype === "f16" ? TOL_F16 : TOL_REDUCTION,
      gpuNmse: dtype === "f16" ? NMSE_F16 : NMSE_TRANSCENDENTAL,
    });
  }
}
// Ties: argmax takes the first of equal maxima (ggml_vec_argmax_f32).
CASES.push({
  name: "argmax f32 ties",
  op: "argmax",
  build: (i) => {
    const a = i.fixed("f32", [1, 3, -2, 3, 3, 0.5, 2, 3, -7]);
    return { out: argmax(a.t), ref: RefTensor.of([1], [1]) };
  },
  tol: TOL_EXACT,
  gpuNmse: NMSE_EXACT,
});

for (const shape of [[1031, 3], [1], [7, 5, 3, 2]]) {
  CASES.push({
    name: `countEqual i32 -> i64 [${shape}]`,
    op: "countEqual",
    build: (i) => {
      const a = i.ints(shape, 3);
      const b = i.ints(shape, 3);
      const av = a.r.values(), bv = b.r.values();
      const count = av.filter((x, k) => x === bv[k]).length;
      return { out: countEqual(a.t, b.t), ref: RefTensor.of([1], [count]) };
    },
    tol: TOL_EXACT,
    gpuNmse: NMSE_EXACT,
  });
}
CASES.push({
  name: "countEqual i32 -> i64 transposed [7, 33]",
  op: "countEqual",
  build: (i) => {
    const a = T(i.ints([33, 7], 2));
    const b = i.ints([7, 33], 2);
    const av = a.r.values(), bv = b.r.values();
    const count = av.filter((x, k) => x === bv[k]).length;
    return { out: countEqual(a.t, b.t), ref: RefTensor.of([1], [count]) };
  },
  tol: TOL_EXACT,
  gpuNmse: NMSE_EXACT,
});

// ---- mixed f16/f32 binary ops (ggml-cpu's binary-ops.cpp: f16 src0, f32 src1) ----

for (const [name, [op, f]] of Object.entries(BINARY) as [OpName, typeof BINARY.add][]) {
  for (const dtype of ["f16", "f32"] as const) {
    for (const form of [BROADCAST_A, [6, 1, 1, 1], [1, 1, 1, 1], [3, 2, 3, 1]] as Dims4[]) {
      CASES.push({
        name: `${name} f16 by f32 -> ${dtype} [${BROADCAST_A}] by [${form}]`,
        op: name,
        build: (i) => {
          const a = i.float("f16", [...BROADCAST_A]);
          const b = i.float("f32", [...form]);
          const ref = binaryRef(a.r, b.r, f); // one f32 operation of exact inputs
          return { out: op(a.t, b.t, { dtype }), ref: mapRef(ref, (x) => x, dtype) };
        },
        tol: dtype === "f16" ? TOL_F16 : TOL_EXACT,
        gpuNmse: dtype === "f16" ? NMSE_F16 : NMSE_ROUNDINGS,
      });
    }
  }
  CASES.push({
    name: `${name} f16 permuted by f32 transposed -> f16`,
    op: name,
    build: (i) => {
      const a = P(i.float("f16", [3, 6, 2, 4]), [2, 0, 3, 1]);
      const b = T(i.float("f32", [4, 6]));
      return { out: op(a.t, b.t), ref: mapRef(binaryRef(a.r, b.r, f), (x) => x, "f16") };
    },
    tol: TOL_F16,
    gpuNmse: NMSE_F16,
  });
}

// An f16 silu times an f32 gate into f32: not fused on the CPU (its fused kernel is f32 only).
CASES.push({
  name: "mul f16 silu by f32 -> f32 (no silu_mul fusion)",
  op: "mul",
  build: (i) => {
    const a = i.float("f16", [37, 3]);
    const b = i.float("f32", [37, 3]);
    const s = mapRef(a.r, (x) => x / (1 + Math.exp(-x)), "f16");
    const out = mul(silu(a.t), b.t, { dtype: "f32" });
    return { out, ref: binaryRef(s, b.r, (x, y) => x * y) };
  },
  tol: TOL_F16, // silu rounds to f16 first
  gpuNmse: NMSE_F16,
});

// ---- acc and set into views (ggml_acc, ggml_set, set_1d, set_2d) ----

/** A view of a contiguous `[ne]` tensor: element strides nb1-nb3 and an element offset. */
interface ViewCase {
  readonly label: string;
  readonly a: Dims4;
  readonly b: Dims4;
  readonly nb: readonly [number, number, number];
  readonly offset: number;
  /** Build b transposed (a non-contiguous source). */
  readonly transposed?: boolean;
}

const VIEW_CASES: readonly ViewCase[] = [
  { label: "rows 1-2, columns 2-6", a: [9, 5, 1, 1], b: [5, 2, 1, 1], nb: [9, 45, 45], offset: 11 },
  { label: "whole tensor", a: [7, 3, 2, 1], b: [7, 3, 2, 1], nb: [7, 21, 42], offset: 0 },
  { label: "1d run at the end", a: [33, 1, 1, 1], b: [5, 1, 1, 1], nb: [33, 33, 33], offset: 28 },
  {
    label: "3d block, every other row",
    a: [8, 6, 3, 2],
    b: [3, 3, 2, 2],
    nb: [16, 48, 144],
    offset: 9,
  },
  {
    label: "transposed source",
    a: [10, 7, 1, 1],
    b: [4, 3, 1, 1],
    nb: [10, 70, 70],
    offset: 21,
    transposed: true,
  },
];

function viewWriteRef(
  a: RefTensor,
  b: RefTensor,
  c: ViewCase,
  add: boolean,
  dtype: DType,
): RefTensor {
  const out = a.values();
  forEachIndex(b.ne, (i0, i1, i2, i3) => {
    const k = c.offset + i0 + i1 * c.nb[0] + i2 * c.nb[1] + i3 * c.nb[2];
    const v = add ? out[k]! + b.at(i0, i1, i2, i3) : b.at(i0, i1, i2, i3);
    out[k] = dtype === "f16" ? roundF16(v) : dtype === "f32" ? Math.fround(v) : v;
  });
  return new RefTensor(a.ne, out);
}

for (const c of VIEW_CASES) {
  for (const [name, dtypes] of [["acc", ["f32", "f16"]], ["set", ["f32", "f16", "i32"]]] as const) {
    for (const dtype of dtypes) {
      CASES.push({
        name: `${name} ${dtype} [${c.a}] <- [${c.b}] ${c.label}`,
        op: name,
        build: (i) => {
          const make = (shape: readonly number[]): Arg =>
            dtype === "i32" ? i.ints(shape, 1000) : i.float(dtype, shape);
          const a = make(c.a);
          const b = c.transposed ? T(make([c.b[1], c.b[0], c.b[2], c.b[3]])) : make(c.b);
          const size = dtype === "f16" ? 2 : 4;
          const view = {
            nb1: c.nb[0] * size,
            nb2: c.nb[1] * size,
            nb3: c.nb[2] * size,
            offset: c.offset * size,
          };
          const out = name === "acc" ? acc(a.t, b.t, view) : set(a.t, b.t, view);
          return { out, ref: viewWriteRef(a.r, b.r, c, name === "acc", dtype) };
        },
        // acc: one f32 addition of exact inputs, rounded once; set moves bits.
        tol: dtype === "f16" && name === "acc" ? TOL_F16 : TOL_EXACT,
        gpuNmse: dtype === "f16" && name === "acc" ? NMSE_F16 : NMSE_EXACT,
      });
    }
  }
}
CASES.push({
  name: "set1d f32 [20] <- [6] at element 3",
  op: "set",
  build: (i) => {
    const a = i.float("f32", [20]);
    const b = i.float("f32", [6]);
    const c: ViewCase = {
      label: "",
      a: [20, 1, 1, 1],
      b: [6, 1, 1, 1],
      nb: [20, 20, 20],
      offset: 3,
    };
    return { out: set1d(a.t, b.t, 12), ref: viewWriteRef(a.r, b.r, c, false, "f32") };
  },
  tol: TOL_EXACT,
  gpuNmse: NMSE_EXACT,
});
CASES.push({
  name: "set2d f16 [9, 6] <- [4, 3] columns 1-4 of rows 2-4",
  op: "set",
  build: (i) => {
    const a = i.float("f16", [9, 6]);
    const b = i.float("f16", [4, 3]);
    const c: ViewCase = {
      label: "",
      a: [9, 6, 1, 1],
      b: [4, 3, 1, 1],
      nb: [9, 54, 54],
      offset: 19,
    };
    return { out: set2d(a.t, b.t, 18, 38), ref: viewWriteRef(a.r, b.r, c, false, "f16") };
  },
  tol: TOL_EXACT,
  gpuNmse: NMSE_EXACT,
});

// An intermediate src0 (the planner may give acc and set its memory, ggml's _inplace forms).
for (const name of ["acc", "set"] as const) {
  CASES.push({
    name: `${name} f32 over an intermediate (in place)`,
    op: name,
    build: (i) => {
      const x = i.float("f32", [9, 5]);
      const y = i.float("f32", [9, 5]);
      const b = i.float("f32", [5, 2]);
      const c: ViewCase = {
        label: "",
        a: [9, 5, 1, 1],
        b: [5, 2, 1, 1],
        nb: [9, 45, 45],
        offset: 11,
      };
      const sum = binaryRef(x.r, y.r, (p, q) => p + q);
      const view = { nb1: 36, offset: 44 };
      const out = name === "acc" ? acc(add(x.t, y.t), b.t, view) : set(add(x.t, y.t), b.t, view);
      return { out: scale(out, 1), ref: viewWriteRef(sum, b.r, c, name === "acc", "f32") };
    },
    tol: TOL_EXACT,
    gpuNmse: NMSE_EXACT,
  });
}

// ---- circular pad (ggml_pad_ext_circular) ----

const wrap = (i: number, n: number): number => ((i % n) + n) % n;

function padCircularRef(a: RefTensor, left: Dims4, right: Dims4): RefTensor {
  const ne = a.ne.map((n, d) => n + left[d]! + right[d]!) as unknown as Dims4;
  const out = new Float64Array(ne[0] * ne[1] * ne[2] * ne[3]);
  forEachIndex(ne, (i0, i1, i2, i3, k) => {
    out[k] = a.at(
      wrap(i0 - left[0], a.ne[0]),
      wrap(i1 - left[1], a.ne[1]),
      wrap(i2 - left[2], a.ne[2]),
      wrap(i3 - left[3], a.ne[3]),
    );
  });
  return new RefTensor(ne, out);
}

const PAD_CIRCULAR: readonly { label: string; left: Dims4; right: Dims4; permuted: boolean }[] = [
  { label: "dims 0-1", left: [2, 1, 0, 0], right: [3, 2, 0, 0], permuted: false },
  { label: "longer than the source", left: [11, 0, 1, 0], right: [0, 7, 0, 2], permuted: false },
  { label: "permuted source, every dim", left: [1, 2, 1, 1], right: [2, 0, 1, 1], permuted: true },
];
for (const c of PAD_CIRCULAR) {
  for (const dtype of ["f32", "f16", "i32"] as const) {
    CASES.push({
      name: `padCircular ${dtype} ${c.label}`,
      op: "padCircular",
      build: (i) => {
        const make = (shape: readonly number[]): Arg =>
          dtype === "i32" ? i.ints(shape, 1000) : i.float(dtype, shape);
        const a = c.permuted ? P(make([3, 5, 2, 2]), [2, 0, 3, 1]) : make([5, 3, 2, 1]);
        const out = padCircular(a.t, { left: c.left, right: c.right });
        return { out, ref: padCircularRef(a.r, c.left, c.right) };
      },
      tol: TOL_EXACT,
      gpuNmse: NMSE_EXACT,
    });
  }
}

// ---- bicubic interpolate (ggml's GGML_SCALE_MODE_BICUBIC) ----

/** float64 ggml-cpu bicubic upscale: scale factors and positions in f32, as ggml computes them. */
function bicubicRef(a: RefTensor, ne: Dims4, alignCorners: boolean): RefTensor {
  const f = Math.fround;
  const src = a.ne;
  const sf = ne.map((n, d) => f(n / src[d]!));
  let offset = 0.5;
  if (alignCorners) {
    offset = 0;
    for (const d of [0, 1]) if (ne[d]! > 1 && src[d]! > 1) sf[d] = f((ne[d]! - 1) / (src[d]! - 1));
  }
  const alpha = -0.75;
  const w1 = (x: number): number => ((alpha + 2) * x - (alpha + 3)) * x * x + 1;
  const w2 = (x: number): number => ((alpha * x - 5 * alpha) * x + 8 * alpha) * x - 4 * alpha;
  const mix = (p: number[], x: number): number =>
    p[0]! * w2(x + 1) + p[1]! * w1(x) + p[2]! * w1(1 - x) + p[3]! * w2(2 - x);
  const clampTo = (i: number, n: number): number => Math.min(Math.max(i, 0), n - 1);
  const out = new Float64Array(ne[0] * ne[1] * ne[2] * ne[3]);
  forEachIndex(ne, (i0, i1, i2, i3, k) => {
    const j2 = Math.trunc(f(i2 / sf[2]!));
    const j3 = Math.trunc(f(i3 / sf[3]!));
    const y = f(f(f(i1 + offset) / sf[1]!) - offset);
    const x = f(f(f(i0 + offset) / sf[0]!) - offset);
    const [y0, x0] = [Math.floor(y), Math.floor(x)];
    const [dy, dx] = [f(y - y0), f(x - x0)];
    const rows = [-1, 0, 1, 2].map((oy) =>
      mix(
        [-1, 0, 1, 2].map((ox) => a.at(clampTo(x0 + ox, src[0]), clampTo(y0 + oy, src[1]), j2, j3)),
        dx,
      )
    );
    out[k] = mix(rows, dy);
  });
  return new RefTensor(ne, out);
}

/** 16 products of f32 weights summed in f32: a few ulps of the largest term. */
const TOL_BICUBIC: Tolerance = { nmse: 1e-12, rtol: 1e-5, atol: 1e-6 };

for (
  const [label, from, to, align, permuted] of [
    ["7x5 -> 16x9", [7, 5, 2, 1], [16, 9, 2, 1], false, false],
    ["aligned corners 6x4 -> 11x7", [6, 4, 2, 1], [11, 7, 2, 1], true, false],
    ["down-sampling 12x10 -> 5x3", [12, 10, 1, 1], [5, 3, 1, 1], false, false],
    ["permuted 5x6x3 -> 9x13x6", [5, 6, 3, 1], [9, 13, 6, 1], false, true],
    ["aligned corners, one row 8x1 -> 15x2", [8, 1, 1, 1], [15, 2, 1, 1], true, false],
  ] as [string, Dims4, Dims4, boolean, boolean][]
) {
  CASES.push({
    name: `interpolate bicubic f32 ${label}`,
    op: "interpolate",
    build: (i) => {
      const a = permuted
        ? P(i.float("f32", [from[1], from[2], from[0], from[3]]), [1, 2, 0, 3])
        : i.float("f32", [...from]);
      const out = interpolate(a.t, [...to], { mode: "bicubic", alignCorners: align });
      return { out, ref: bicubicRef(a.r, to, align) };
    },
    tol: TOL_BICUBIC,
    gpuNmse: NMSE_TRANSCENDENTAL,
  });
}

// ---- running a case ----

/** Runs `out`'s graph on `backend` with the case's inputs; the result in logical order. */
export async function runGraph(
  backend: Backend,
  inputs: Inputs,
  out: Tensor,
): Promise<Float64Array> {
  const graph = Graph.build(out);
  // A graph may have no inputs (arange).
  const leaves = inputs.ctx.tensors;
  using _inputs = unplacedOwners(leaves).length > 0 ? allocTensors(backend, leaves) : null;
  using _nodes = unplacedOwners(graph.nodes).length > 0 ? allocTensors(backend, graph.nodes) : null;
  for (const [tensor, data] of inputs.data) await backend.setTensorAsync(tensor, data);
  backend.graphCompute(graph);
  const result = await backend.getTensorAsync(out);
  await backend.synchronize();
  if (out.dtype === "i64") {
    // i64 comes back as raw bytes (see src/dtype.ts); copied, so the words are 8-byte aligned.
    const bytes = new Uint8Array(result.buffer, result.byteOffset, result.byteLength).slice();
    return Float64Array.from(new BigInt64Array(bytes.buffer), Number);
  }
  return Float64Array.from(result as ArrayLike<number>);
}

/** Normalized squared error; a NaN or infinity where the other has another value is infinite. */
export function nmseOf(actual: Float64Array, expected: Float64Array): number {
  let error = 0;
  let norm = 0;
  for (let i = 0; i < expected.length; i++) {
    const [a, e] = [actual[i]!, expected[i]!];
    if (!Number.isFinite(e) || !Number.isFinite(a)) {
      if (!Object.is(a, e) && !(Number.isNaN(a) && Number.isNaN(e))) return Infinity;
      continue;
    }
    error += (a - e) ** 2;
    norm += e * e;
  }
  return norm === 0 ? error : error / norm;
}

// ---- probes: each op of the table built for one dtype ----

/** Dtypes a probe fills with data; block types and bf16 hold zero bytes (valid blocks). */
function probeInput(i: Inputs, dtype: DType, shape: readonly number[]): Tensor {
  if (dtype === "f32" || dtype === "f16") return i.float(dtype, shape).t;
  if (dtype === "i32") return i.ints(shape, 2).t;
  const t = i.ctx.newTensor(dtype, shape as Shape);
  i.data.set(t, new Uint8Array(t.nbytes));
  return t;
}

/** Probe shape: ne[0] one K-quant superblock, so every dtype's blocks fit. */
const PROBE: readonly number[] = [256, 3];

type Probe = (i: Inputs, dtype: DType) => Tensor;

const unaryProbe = (f: (a: Tensor) => Tensor): Probe => (i, d) => f(probeInput(i, d, PROBE));
const binaryProbe = (f: (a: Tensor, b: Tensor) => Tensor): Probe => (i, d) =>
  f(probeInput(i, d, PROBE), probeInput(i, d, PROBE));

/**
 * For each compute op, a graph whose result (or main operand: cpy's and setRows' destination,
 * mulMat's and getRows' src0) is of the given dtype. Views and inputs compute nothing.
 */
export const PROBES: Partial<Record<OpName, Probe>> = {
  add: binaryProbe(add),
  sub: binaryProbe(sub),
  mul: binaryProbe(mul),
  div: binaryProbe(div),
  scale: unaryProbe((a) => scale(a, 0.5, 0.25)),
  sqr: unaryProbe(sqr),
  sqrt: unaryProbe(sqrt),
  sum: unaryProbe(sum),
  mean: unaryProbe(mean),
  repeat: unaryProbe((a) => repeat(a, [a.ne[0], 6, 2, 1])),
  mulMat: (i, d) => mulMat(probeInput(i, d, PROBE), probeInput(i, "f32", [256, 2])),
  cpy: (i, d) => cpy(probeInput(i, d === "i32" ? "i32" : "f32", PROBE), probeInput(i, d, PROBE)),
  getRows: (i, d) => getRows(probeInput(i, d, PROBE), i.fixed("i32", [2, 0]).t),
  norm: unaryProbe(norm),
  rmsNorm: unaryProbe(rmsNorm),
  softmax: unaryProbe(softmax),
  gelu: unaryProbe(gelu),
  silu: unaryProbe(silu),
  relu: unaryProbe(relu),
  cont: unaryProbe(cont),
  rope: (i, d) =>
    rope(probeInput(i, d, [256, 4, 3]), i.fixed("i32", [0, 5, 9]).t, { nDims: 64, mode: "neox" }),
  setRows: (i, d) =>
    setRows(probeInput(i, d, [256, 4]), probeInput(i, "f32", [256, 2]), i.fixed("i32", [3, 1]).t),
  argmax: unaryProbe(argmax),
  countEqual: binaryProbe(countEqual),
  cumsum: unaryProbe(cumsum),
  sumRows: unaryProbe(sumRows),
  maxRows: unaryProbe(maxRows),
  minRows: unaryProbe(minRows),
};
for (const [name, s] of Object.entries(UNARY_MATH) as [OpName, UnarySpec][]) {
  PROBES[name] = unaryProbe(s.build);
}
// The shape and indexing ops (codes 70-80, src/ops/indexing.ts and sort.ts).
PROBES.concat = (i, d) => concat(probeInput(i, d, PROBE), probeInput(i, d, PROBE), 1);
PROBES.pad = unaryProbe((a) => pad(a, [0, 2, 1, 0]));
PROBES.padReflect1d = unaryProbe((a) => padReflect1d(a, 2, 3));
PROBES.padCircular = unaryProbe((a) => padCircular(a, { left: [3, 1, 0, 0], right: [1, 2, 0, 0] }));
PROBES.acc = (i, d) => {
  const a = probeInput(i, d, PROBE);
  return acc(a, probeInput(i, d, [256, 2]), { offset: a.nb[1] }); // rows 1-2
};
PROBES.set = (i, d) => {
  const a = probeInput(i, d, PROBE);
  return set(a, probeInput(i, d, [256, 2]), { offset: a.nb[1] });
};
PROBES.roll = unaryProbe((a) => roll(a, [3, 1, 0, 0]));
PROBES.repeatBack = (i, d) => repeatBack(probeInput(i, d, [256, 6]), [256, 3, 1, 1]);
PROBES.argsort = unaryProbe(argsort);
PROBES.topK = unaryProbe((a) => topK(a, 5));
PROBES.tri = (i, d) => tri(probeInput(i, d, [256, 256]), "lower"); // square
PROBES.diagMaskInf = unaryProbe((a) => diagMaskInf(a, 1));
PROBES.arange = () => arange(0, 10, 1); // no source: f32 whatever the probe's dtype
PROBES.fill = unaryProbe((a) => fill(a, 0.5));
// The neural-network ops (codes 110-119; ne[0] = 256 so block dtypes fit): the probe's dtype goes to the operand the op's
// dtypes vary on (flashAttnExt's K and V, a convolution's kernel, im2col's result, the pooled
// image); their results are f32 otherwise.
PROBES.flashAttnExt = (i, d) =>
  flashAttnExt(
    probeInput(i, "f32", [256, 4, 2]),
    probeInput(i, d, [256, 8, 2]),
    probeInput(i, d, [256, 8, 2]),
    {
      scale: 0.125,
    },
  );
PROBES.im2col = (i, d) =>
  d === "f32" || d === "f16"
    ? im2col(probeInput(i, "f32", [3, 3, 4, 2]), probeInput(i, "f32", [9, 8, 4]), { dtype: d })
    : im2col(probeInput(i, "f32", [3, 3, 4, 2]), probeInput(i, d, [256, 8, 4]));
PROBES.l2Norm = unaryProbe((a) => l2Norm(a));
PROBES.groupNorm = (i, d) => groupNorm(probeInput(i, d, [256, 8, 4]), 2);
PROBES.pool1d = unaryProbe((a) => pool1d(a, "max", 3));
PROBES.pool2d = (i, d) => pool2d(probeInput(i, d, [256, 8, 4]), "avg", [3, 3]);
PROBES.interpolate = (i, d) =>
  interpolate(probeInput(i, d, [256, 6, 3]), [512, 12, 3], { mode: "bilinear" });
PROBES.timestepEmbedding = (i, d) => timestepEmbedding(probeInput(i, d, [256]), 32);
PROBES.convTranspose1d = (i, d) =>
  convTranspose1d(probeInput(i, d, [256, 5, 4]), probeInput(i, "f32", [10, 4]), 2);
PROBES.convTranspose2d = (i, d) =>
  convTranspose2d(probeInput(i, d, [256, 2, 3, 4]), probeInput(i, "f32", [5, 4, 4]), 2);

/** Every dtype a probe is tried with. */
export const PROBE_DTYPES = Object.keys(DTYPES) as DType[];

/**
 * Checks the op table's `support` declarations of `which` against `backend`: every probe that
 * builds (a builder's DTypeError is a refusal, fine) must run when its result dtype is
 * declared, and must not run (supportsOp false, or compute refusing it) when it is not; every
 * declared dtype must come out of some probe. With `reference` (the CPU), a declared result is
 * also compared with the reference's where that declares it too. Returns the problems found.
 */
export async function checkDeclarations(
  backend: Backend,
  which: keyof OpSupport,
  reference?: Backend,
): Promise<string[]> {
  const problems: string[] = [];
  for (const [name, info] of Object.entries(OPS) as [OpName, OpInfo][]) {
    if (info.core === null) continue; // views and inputs compute nothing
    const probe = PROBES[name];
    if (!probe) {
      problems.push(`${name}: no probe in tests/op_suite.ts`);
      continue;
    }
    const declared = new Set<DType>(info.support[which]);
    const working = new Set<DType>();
    for (const dtype of PROBE_DTYPES) {
      const inputs = new Inputs(`${name}:${dtype}`);
      let out: Tensor;
      try {
        out = probe(inputs, dtype);
      } catch (error) {
        if (error instanceof DTypeError) continue;
        throw error;
      }
      let failure = "";
      let result: Float64Array | null = null;
      if (!backend.supportsOp(out)) {
        failure = "supportsOp is false";
      } else {
        try {
          result = await runGraph(backend, inputs, out);
        } catch (error) {
          failure = (error as Error).message;
        }
      }
      const label = `${name} -> ${out.dtype} (${dtype} probe)`;
      if (declared.has(out.dtype)) {
        if (failure) problems.push(`${label}: declared for ${which} but fails: ${failure}`);
        const refDeclared = (info.support.cpu as readonly DType[]).includes(out.dtype);
        if (
          result && reference && reference !== backend && refDeclared && !holdsRawBytes(out.dtype)
        ) {
          const again = new Inputs(`${name}:${dtype}`); // the same data, a graph of its own
          const expected = await runGraph(reference, again, probe(again, dtype));
          const error = nmseOf(result, expected);
          if (!(error <= PROBE_NMSE)) {
            problems.push(`${label}: NMSE ${error} against the cpu backend`);
          }
        }
      } else if (!failure) {
        problems.push(`${label}: works on ${which} but is not declared`);
      }
      if (!failure) working.add(out.dtype);
    }
    for (const dtype of declared) {
      if (!working.has(dtype)) {
        problems.push(`${name}: ${dtype} declared for ${which}, no probe ran it`);
      }
    }
  }
  return problems;
}

/** Probes against the CPU: loose, it only has to catch a kernel that computes garbage. */
const PROBE_NMSE = 1e-5;
