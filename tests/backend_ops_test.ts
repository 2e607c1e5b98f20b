/**
 * Op-by-op comparison of every available backend with the CPU backend (one thread), as ggml's
 * test-backend-ops: each case builds a small graph twice from the same seeded random inputs,
 * computes it on the backend under test and on the reference, and compares the outputs by
 * normalized squared error against a per-op tolerance. Shapes are odd (1, 7, 33, 1000+) and many
 * sources are views (transposed, permuted, strided), so every kernel's stride handling runs.
 * WebGPU cases are skipped, visibly, when Deno finds no adapter.
 */

import { nmseOf } from "./op_suite.ts";
import assert from "node:assert/strict";
import { closeSharedWebGpuTest, sharedWebGpu } from "./gpu.ts";
import {
  add,
  allocGraph,
  allocTensors,
  type Backend,
  cont,
  Context,
  cpy,
  div,
  gelu,
  getRows,
  Graph,
  mean,
  mul,
  mulMat,
  norm,
  permute,
  relu,
  repeat,
  reshape,
  rmsNorm,
  rope,
  scale,
  setRows,
  type Shape,
  silu,
  softmax,
  sqr,
  sqrt,
  sub,
  sum,
  type Tensor,
  type TensorData,
  transpose,
  view,
} from "../mod.ts";
import { unplacedOwners } from "../src/alloc/alloc_tensors.ts";
import { CpuBackend } from "../src/backend/cpu/backend.ts";
import { WasmBackend } from "../src/backend/wasm/backend.ts";

/** Copies and gathers move bits: any difference is a bug. */
const NMSE_EXACT = 0;
/** One IEEE operation per element (WGSL allows 2.5 ulp for division and sqrt). */
const NMSE_ELEMENTWISE = 1e-10;
/** exp-based activations: WGSL's exp is a few ulp, the CPU's about 1. */
const NMSE_TRANSCENDENTAL = 1e-9;
/** Reductions: f32 (compensated) sums on the device against f64 on the CPU. */
const NMSE_REDUCE = 1e-9;
/** Row norms and softmax: a reduction, then a scale of every element. */
const NMSE_NORM = 1e-8;
/** rope: the angles are the CPU's bits; cos and sin (polynomials on the device) within an ulp or two. */
const NMSE_ROPE = 1e-12;
/**
 * rope with frequency factors or YaRN: the device's division (2.5 ulp) and fma (fused or not)
 * may move an angle by an ulp or two, which is up to 5e-4 at position 4095: an NMSE of 1e-9.
 */
const NMSE_ROPE_YARN = 1e-9;
/** f16 results: a one-ulp difference of an f16 is 2.4e-7 relative. */
const NMSE_F16 = 1e-6;
/** Matrix products: f32 dot products summed in another order than the CPU's. */
const NMSE_MATMUL = 1e-7;

/** Seeded inputs: the same case gives the same data on every backend. */
class Inputs {
  readonly ctx = new Context();
  readonly data = new Map<Tensor, TensorData>();
  #state: number;

  constructor(seed: string) {
    let h = 2166136261;
    for (const ch of seed) h = Math.imul(h ^ ch.charCodeAt(0), 16777619);
    this.#state = h >>> 0;
  }

  // mulberry32
  #next(): number {
    this.#state = (this.#state + 0x6d2b79f5) >>> 0;
    let t = this.#state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  /** Non-zero values in ±[0.1, 1] (only positive with `positive`). */
  float(dtype: "f32" | "f16", shape: Shape, positive = false): Tensor {
    const t = this.ctx.newTensor(dtype, shape);
    const values = Array.from({ length: t.nelements }, () => {
      const magnitude = 0.1 + 0.9 * this.#next();
      return positive || this.#next() < 0.5 ? magnitude : -magnitude;
    });
    this.data.set(t, dtype === "f32" ? new Float32Array(values) : new Float16Array(values));
    return t;
  }

  f32(shape: Shape, positive = false): Tensor {
    return this.float("f32", shape, positive);
  }

  /** A tensor holding `values` exactly (as far as the dtype allows). */
  fixed(dtype: "f32" | "f16", values: readonly number[]): Tensor {
    const t = this.ctx.newTensor(dtype, [values.length]);
    this.data.set(t, dtype === "f32" ? new Float32Array(values) : new Float16Array(values));
    return t;
  }

  /** i32 values in [0, max). */
  indices(shape: Shape, max: number): Tensor {
    const t = this.ctx.newTensor("i32", shape);
    const values = Array.from({ length: t.nelements }, () => Math.floor(this.#next() * max));
    this.data.set(t, new Int32Array(values));
    return t;
  }

  /** An i32 tensor holding `values`. */
  ints(values: readonly number[]): Tensor {
    const t = this.ctx.newTensor("i32", [values.length]);
    this.data.set(t, Int32Array.from(values));
    return t;
  }

  /** A causal mask (0 or -inf) whose first row is fully masked when `hideFirst`. */
  mask(shape: Shape, hideFirst: boolean): Tensor {
    const t = this.ctx.newTensor("f32", shape);
    const [columns, rows] = [t.ne[0], t.nrows];
    const values = new Float32Array(t.nelements);
    for (let r = 0; r < rows; r++) {
      for (let c = 0; c < columns; c++) {
        const hidden = c > (r % t.ne[1]) + columns - t.ne[1] || (hideFirst && r === 0);
        values[r * columns + c] = hidden ? -Infinity : 0;
      }
    }
    this.data.set(t, values);
    return t;
  }

  /** An uninitialised-by-op destination filled with random data (what cpy does not write). */
  dest(dtype: "f32" | "f16" | "i32", shape: Shape): Tensor {
    return dtype === "i32" ? this.indices(shape, 1000) : this.float(dtype, shape);
  }
}

interface OpCase {
  readonly name: string;
  readonly nmse: number;
  readonly build: (inputs: Inputs) => Tensor;
  /** Gives the graph memory with the planner, which runs ops in place where it may. */
  readonly planned?: boolean;
}

const T = (a: Tensor): Tensor => transpose(a);

const cases: OpCase[] = [];
function define(
  name: string,
  nmse: number,
  build: (inputs: Inputs) => Tensor,
  planned = false,
): void {
  cases.push({ name, nmse, build, planned });
}

// Binary ops with broadcasting and views.
const binaries = { add, sub, mul, div } as const;
for (const [name, op] of Object.entries(binaries)) {
  define(`${name} [7, 33]`, NMSE_ELEMENTWISE, (i) => op(i.f32([7, 33]), i.f32([7, 33])));
  define(
    `${name} [1031, 3] by [1031]`,
    NMSE_ELEMENTWISE,
    (i) => op(i.f32([1031, 3]), i.f32([1031])),
  );
  define(
    `${name} [33, 7, 3, 2] by [33, 1, 3, 1]`,
    NMSE_ELEMENTWISE,
    (i) => op(i.f32([33, 7, 3, 2]), i.f32([33, 1, 3, 1])),
  );
  define(`${name} [1] by [1]`, NMSE_ELEMENTWISE, (i) => op(i.f32([1]), i.f32([1])));
  define(
    `${name} transposed [7, 33] by scalar`,
    NMSE_ELEMENTWISE,
    (i) => op(T(i.f32([33, 7])), i.f32([1, 1])),
  );
  define(
    `${name} [33, 7] by transposed [33, 7]`,
    NMSE_ELEMENTWISE,
    (i) => op(i.f32([33, 7]), T(i.f32([7, 33]))),
  );
}

// Unary ops.
const unaries = {
  scale: (a: Tensor) => scale(a, -0.37),
  sqr,
  gelu,
  silu,
  relu,
} as const;
for (const [name, op] of Object.entries(unaries)) {
  const nmse = name === "gelu" || name === "silu" ? NMSE_TRANSCENDENTAL : NMSE_ELEMENTWISE;
  define(`${name} [1037, 3]`, nmse, (i) => op(i.f32([1037, 3])));
  define(`${name} [1]`, nmse, (i) => op(i.f32([1])));
  define(`${name} transposed [7, 33]`, nmse, (i) => op(T(i.f32([33, 7]))));
  define(
    `${name} permuted [7, 5, 3, 2]`,
    nmse,
    (i) => op(permute(i.f32([7, 5, 3, 2]), [2, 0, 3, 1])),
  );
}
define("gelu wide range", NMSE_TRANSCENDENTAL, (i) => gelu(scale(i.f32([1001]), 12)));
define("sqrt [1037, 3]", NMSE_ELEMENTWISE, (i) => sqrt(i.f32([1037, 3], true)));
define("sqrt transposed [7, 33]", NMSE_ELEMENTWISE, (i) => sqrt(T(i.f32([33, 7], true))));

// Reductions.
define("sum [1]", NMSE_REDUCE, (i) => sum(i.f32([1])));
define("sum [1001, 7]", NMSE_REDUCE, (i) => sum(i.f32([1001, 7])));
define(
  "sum [33, 65, 3] permuted",
  NMSE_REDUCE,
  (i) => sum(permute(i.f32([33, 65, 3]), [1, 2, 0, 3])),
);
define("mean [1000, 5, 2]", NMSE_REDUCE, (i) => mean(i.f32([1000, 5, 2])));
define("mean [1]", NMSE_REDUCE, (i) => mean(i.f32([1])));
define("mean transposed [7, 33]", NMSE_REDUCE, (i) => mean(T(i.f32([33, 7]))));

// repeat.
define(
  "repeat [7, 1, 3] to [14, 5, 3, 2]",
  NMSE_EXACT,
  (i) => repeat(i.f32([7, 1, 3]), [14, 5, 3, 2]),
);
define("repeat [1] to [33, 7]", NMSE_EXACT, (i) => repeat(i.f32([1]), [33, 7, 1, 1]));
define(
  "repeat transposed [5, 7] to [10, 21]",
  NMSE_EXACT,
  (i) => repeat(T(i.f32([7, 5])), [10, 21, 1, 1]),
);

// mulMat.
define("mulMat f32 [33, 7] x [33, 5]", NMSE_MATMUL, (i) => mulMat(i.f32([33, 7]), i.f32([33, 5])));
define(
  "mulMat f32 [64, 64] x [64, 64]",
  NMSE_MATMUL,
  (i) => mulMat(i.f32([64, 64]), i.f32([64, 64])),
);
define(
  "mulMat f32 [1031, 65] x [1031, 33]",
  NMSE_MATMUL,
  (i) => mulMat(i.f32([1031, 65]), i.f32([1031, 33])),
);
define(
  "mulMat f32 matrix-vector [1000, 129] x [1000, 1]",
  NMSE_MATMUL,
  (i) => mulMat(i.f32([1000, 129]), i.f32([1000])),
);
define("mulMat f32 [1] x [1]", NMSE_MATMUL, (i) => mulMat(i.f32([1]), i.f32([1])));
define(
  "mulMat f16 [33, 7] x [33, 5]",
  NMSE_MATMUL,
  (i) => mulMat(i.float("f16", [33, 7]), i.f32([33, 5])),
);
define(
  "mulMat f16 [257, 70] x [257, 9]",
  NMSE_MATMUL,
  (i) => mulMat(i.float("f16", [257, 70]), i.f32([257, 9])),
);
define(
  "mulMat batch broadcast [17, 9, 2, 1] x [17, 5, 6, 2]",
  NMSE_MATMUL,
  (i) => mulMat(i.f32([17, 9, 2, 1]), i.f32([17, 5, 6, 2])),
);
define(
  "mulMat transposed b [33, 7] x T[5, 33]",
  NMSE_MATMUL,
  (i) => mulMat(i.f32([33, 7]), T(i.f32([5, 33]))),
);
define(
  "mulMat transposed a T[70, 33] x [33, 66]",
  NMSE_MATMUL,
  (i) => mulMat(T(i.f32([70, 33])), i.f32([33, 66])),
);
define(
  "mulMat f16 permuted heads",
  NMSE_MATMUL,
  (i) =>
    mulMat(
      permute(i.float("f16", [16, 3, 9]), [0, 2, 1, 3]),
      permute(i.f32([16, 3, 11]), [0, 2, 1, 3]),
    ),
);

// cpy and cont.
define(
  "cpy f32 -> f16 [1001, 3]",
  NMSE_EXACT,
  (i) => cpy(i.f32([1001, 3]), i.dest("f16", [1001, 3])),
);
define(
  "cpy f16 -> f32 [1001, 3]",
  NMSE_EXACT,
  (i) => cpy(i.float("f16", [1001, 3]), i.dest("f32", [1001, 3])),
);
define(
  "cpy f16 -> f16 odd [7, 3]",
  NMSE_EXACT,
  (i) => cpy(i.float("f16", [7, 3]), i.dest("f16", [7, 3])),
);
define(
  "cpy f32 -> f32 reshaped [33, 6] to [66, 3]",
  NMSE_EXACT,
  (i) => cpy(i.f32([33, 6]), i.dest("f32", [66, 3])),
);
define(
  "cpy f32 -> f16 into transposed view",
  NMSE_EXACT,
  (i) => cpy(i.f32([7, 33]), T(i.dest("f16", [33, 7]))),
);
define("cpy f32 -> f16 into a row window", NMSE_EXACT, (i) => {
  const cache = i.dest("f16", [33, 10]);
  return cpy(i.f32([33, 3]), view(cache, [33, 3], { offset: 33 * 2 * 5, nb: cache.nb }));
});
// setRows: the KV cache writes (rows at positions into f32 and f16 caches, a transposed cache).
define("setRows f32 [64, 3] into [64, 10] at 7, 2, 9", NMSE_EXACT, (i) => {
  return setRows(i.dest("f32", [64, 10]), i.f32([64, 3]), i.ints([7, 2, 9]));
});
define("setRows f32 -> f16 [33, 2, 3] batched into [33, 5, 3]", NMSE_EXACT, (i) => {
  return setRows(
    i.dest("f16", [33, 5, 3]),
    i.f32([33, 2, 3]),
    reshape(i.ints([4, 0, 1, 2, 3, 3]), [2, 3]),
  );
});
define("setRows f32 -> f16 into a transposed cache [10, 33] (columns)", NMSE_EXACT, (i) => {
  return setRows(T(i.dest("f16", [10, 33])), i.f32([33, 4]), i.ints([0, 9, 4, 5]));
});
// Ties between two halves (round to even), the overflow threshold, subnormals and specials.
const HALF_EDGES = [
  1 + 2 ** -11,
  1 + 3 * 2 ** -11,
  -(1 + 2 ** -11),
  2049,
  2051,
  65504,
  65519.99,
  65520,
  -65520,
  2 ** -14,
  2 ** -15 + 2 ** -25,
  2 ** -24,
  2 ** -25,
  2 ** -25 + 2 ** -40,
  3 * 2 ** -25,
  2 ** -26,
  1e-30,
  -0,
  Infinity,
  -Infinity,
  NaN,
  3.14159,
  -1e5,
];
define(
  "cpy f32 -> f16 rounding edges",
  NMSE_EXACT,
  (i) => cpy(i.fixed("f32", HALF_EDGES), i.dest("f16", [HALF_EDGES.length])),
);
define(
  "cpy f16 -> f32 subnormals and specials",
  NMSE_EXACT,
  (i) => cpy(i.fixed("f16", HALF_EDGES), i.dest("f32", [HALF_EDGES.length])),
);
define(
  "cpy i32 -> i32 [7, 5]",
  NMSE_EXACT,
  (i) => cpy(i.indices([7, 5], 99), i.dest("i32", [7, 5])),
);
define(
  "cont permuted f32 [7, 5, 3, 2]",
  NMSE_EXACT,
  (i) => cont(permute(i.f32([7, 5, 3, 2]), [3, 1, 0, 2])),
);
define("cont transposed f16 [33, 7]", NMSE_EXACT, (i) => cont(T(i.float("f16", [33, 7]))));
define("cont strided rows [1, 7]", NMSE_EXACT, (i) => {
  const a = i.f32([3, 7]);
  return cont(view(a, [1, 7], { offset: 4, nb: a.nb }));
});

// getRows.
define(
  "getRows f32 [33, 100] by [7]",
  NMSE_EXACT,
  (i) => getRows(i.f32([33, 100]), i.indices([7], 100)),
);
define(
  "getRows f16 [1025, 9] by [33]",
  NMSE_EXACT,
  (i) => getRows(i.float("f16", [1025, 9]), i.indices([33], 9)),
);
define(
  "getRows batched [17, 10, 3] by [5, 3]",
  NMSE_EXACT,
  (i) => getRows(i.f32([17, 10, 3]), i.indices([5, 3], 10)),
);
define(
  "getRows f16 odd rows [7, 4] by [1]",
  NMSE_EXACT,
  (i) => getRows(i.float("f16", [7, 4]), i.indices([1], 4)),
);

// Row norms.
for (const [name, op] of [["norm", norm], ["rmsNorm", rmsNorm]] as const) {
  define(`${name} [1031, 3]`, NMSE_NORM, (i) => op(i.f32([1031, 3])));
  define(`${name} [7, 33]`, NMSE_NORM, (i) => op(i.f32([7, 33])));
  define(`${name} [1, 4]`, NMSE_NORM, (i) => op(i.f32([1, 4])));
  define(`${name} transposed [33, 7]`, NMSE_NORM, (i) => op(T(i.f32([7, 33]))));
}

// softmax.
define("softmax [33, 7] scale 0.5", NMSE_NORM, (i) => softmax(i.f32([33, 7]), { scale: 0.5 }));
define("softmax [1025, 3]", NMSE_NORM, (i) => softmax(scale(i.f32([1025, 3]), 20)));
define("softmax [1]", NMSE_NORM, (i) => softmax(i.f32([1])));
define(
  "softmax masked [33, 7] mask [33, 9]",
  NMSE_NORM,
  (i) => softmax(i.f32([33, 7]), { mask: i.mask([33, 9], true), scale: 0.125 }),
);
define(
  "softmax mask broadcast [16, 16, 4] mask [16, 16]",
  NMSE_NORM,
  (i) => softmax(i.f32([16, 16, 4]), { mask: i.mask([16, 16], false) }),
);
define("softmax transposed [7, 33]", NMSE_NORM, (i) => softmax(T(i.f32([33, 7]))));

// rope: positions up to 4095 (and negative), nDims below the head size, a permuted input.
const POSITIONS = [0, 4095, 17, -3, 1];
for (const mode of ["normal", "neox"] as const) {
  define(`rope ${mode} [96, 3, 5] nDims 64`, NMSE_ROPE, (i) => {
    return rope(i.f32([96, 3, 5]), i.ints(POSITIONS), { nDims: 64, mode });
  });
  define(`rope ${mode} [128, 3, 5, 2] base 1e6 scale 0.25`, NMSE_ROPE, (i) => {
    const options = { nDims: 128, mode, freqBase: 1e6, freqScale: 0.25 };
    return rope(i.f32([128, 3, 5, 2]), i.ints(POSITIONS), options);
  });
  define(`rope ${mode} permuted [64, 3, 5] nDims 48`, NMSE_ROPE, (i) => {
    const a = permute(i.f32([64, 5, 3]), [0, 2, 1, 3]);
    return rope(a, i.ints(POSITIONS), { nDims: 48, mode, freqBase: 100000 });
  });
}

// rope as ggml_rope_ext: YaRN (as llama.cpp runs a factor-4 extension of a 4096 context),
// frequency factors (Llama 3's rope_freqs), f16 input and result, odd head sizes.
const YARN = { extFactor: 1, attnFactor: 0.9, betaFast: 32, betaSlow: 1, nCtxOrig: 4096 };
const FACTORS = (n: number): number[] => Array.from({ length: n }, (_, k) => 1 + (k % 7) * 1.25);
for (const mode of ["normal", "neox"] as const) {
  define(`rope ${mode} YaRN [64, 3, 5, 2] scale 0.25`, NMSE_ROPE_YARN, (i) => {
    const options = { nDims: 64, mode, freqBase: 10000, freqScale: 0.25, ...YARN };
    return rope(i.f32([64, 3, 5, 2]), i.ints(POSITIONS), options);
  });
  define(`rope ${mode} YaRN ext 0.5 [70, 3, 5] nDims 38`, NMSE_ROPE_YARN, (i) => {
    const options = { nDims: 38, mode, freqBase: 1e6, freqScale: 0.125, ...YARN, extFactor: 0.5 };
    return rope(i.f32([70, 3, 5]), i.ints(POSITIONS), options);
  });
  define(`rope ${mode} frequency factors [64, 3, 5] base 500000`, NMSE_ROPE_YARN, (i) => {
    const freqFactors = i.fixed("f32", FACTORS(32));
    const options = { nDims: 64, mode, freqBase: 500000, freqScale: 1, freqFactors };
    return rope(i.f32([64, 3, 5]), i.ints(POSITIONS), options);
  });
  define(`rope ${mode} f16 [38, 3, 5, 2] nDims 26 YaRN, factors`, NMSE_F16, (i) => {
    const freqFactors = i.fixed("f32", FACTORS(13));
    const options = { nDims: 26, mode, freqBase: 10000, freqScale: 0.25, ...YARN, freqFactors };
    return rope(i.float("f16", [38, 3, 5, 2]), i.ints(POSITIONS), options);
  });
  define(`rope ${mode} f16 permuted [64, 3, 5]`, NMSE_F16, (i) => {
    const a = permute(i.float("f16", [64, 5, 3]), [0, 2, 1, 3]);
    return rope(a, i.ints(POSITIONS), { nDims: 64, mode, attnFactor: 1.5 });
  });
}

// Chains the planner runs in place (dst over src0): every kernel must read before it writes.
define("in place: add, scale, silu, rmsNorm, softmax [1031, 5]", NMSE_NORM, (i) => {
  const x = i.f32([1031, 5]);
  return softmax(rmsNorm(silu(scale(add(x, i.f32([1031])), 3))), { scale: 2 });
}, true);
define("in place: mul, gelu, norm, cont [33, 7]", NMSE_NORM, (i) => {
  const x = i.f32([33, 7]);
  return cont(norm(gelu(mul(x, x))));
}, true);
define("in place: scale, rope neox [96, 3, 5] nDims 64", NMSE_ROPE, (i) => {
  const q = scale(i.f32([96, 3, 5]), 2);
  return scale(rope(q, i.ints(POSITIONS), { nDims: 64, mode: "neox" }), 0.5);
}, true);

/** Output bytes as f32 (f16 widened, i32 converted) for comparison. */
function widen(data: TensorData): Float64Array {
  return Float64Array.from(data as ArrayLike<number>);
}

async function runCase(backend: Backend, c: OpCase): Promise<Float64Array> {
  const inputs = new Inputs(c.name);
  const out = c.build(inputs);
  const graph = Graph.build(out);
  using _inputs = allocTensors(backend, inputs.ctx.tensors);
  // The reference keeps every node in its own memory, so in-place mistakes cannot cancel out.
  // A graph of one cpy has no node that owns memory.
  using _nodes = c.planned && backend !== reference
    ? allocGraph(backend, graph)
    : unplacedOwners(graph.nodes).length > 0
    ? allocTensors(backend, graph.nodes)
    : null;
  for (const [tensor, data] of inputs.data) await backend.setTensorAsync(tensor, data);
  backend.graphCompute(graph);
  const result = await backend.getTensorAsync(out);
  await backend.synchronize();
  return widen(result);
}

const reference = new CpuBackend({ threads: 1 });

const backends: { name: string; backend: Backend | null }[] = [
  { name: "cpu", backend: new CpuBackend() },
  { name: "webgpu", backend: await sharedWebGpu() },
  { name: "wasm", backend: await WasmBackend.create() },
];

globalThis.addEventListener("unload", () => {
  reference.dispose();
  // The shared WebGPU backend closes in the file's last test (tests/gpu.ts).
  backends[0]!.backend?.dispose();
  backends[2]!.backend?.dispose();
});

for (const { name, backend } of backends) {
  for (const c of cases) {
    Deno.test({
      name: `${name}: ${c.name}`,
      ignore: backend === null,
      sanitizeResources: false,
      sanitizeOps: false,
      fn: async () => {
        const expected = await runCase(reference, c);
        const actual = await runCase(backend!, c);
        assert.equal(actual.length, expected.length);
        const error = nmseOf(actual, expected);
        assert.ok(
          error <= c.nmse,
          `${name} ${c.name}: NMSE ${error} > ${c.nmse}\nactual ${actual.slice(0, 8).join(", ")}` +
            `\nexpected ${expected.slice(0, 8).join(", ")}`,
        );
      },
    });
  }
}

Deno.test("backend_ops: the suite covers every op of the foundation set", () => {
  const covered = new Set(cases.map((c) => c.name.split(" ")[0]));
  for (
    const op of [
      "add",
      "sub",
      "mul",
      "div",
      "scale",
      "sqr",
      "sqrt",
      "sum",
      "mean",
      "repeat",
      "mulMat",
      "cpy",
      "cont",
      "getRows",
      "norm",
      "rmsNorm",
      "softmax",
      "gelu",
      "silu",
      "relu",
      "rope",
    ]
  ) {
    assert.ok(covered.has(op), `no case for ${op}`);
  }
});

closeSharedWebGpuTest();
