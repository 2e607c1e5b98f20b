/**
 * The op table: every op a tensor can be the result of, once. Each row says the op's code and
 * name, how many sources and which params it takes, whether it is a view (memory only, never
 * computed), which core op computes it, and whether it may run in place. The core's own op
 * numbering (`zig/node.zig`, `Op`) is mirrored in {@link CoreOp} and checked against the
 * library when it loads (`src/core/tables.ts`), so the two sides cannot drift apart silently.
 * @module
 */

import { type DType, DTYPES } from "./dtype.ts";

/**
 * The core's op codes, by the core's names (`zig/node.zig`, `Op`). Graph ops map onto these
 * through the `core` column of the op table; the fused ops are emitted only by the CPU plan
 * builder (`src/backend/cpu/fuse.ts`).
 */
export const CoreOp = {
  add: 1,
  sub: 2,
  mul: 3,
  div: 4,
  scale: 5,
  sqr: 6,
  sqrt: 7,
  sum: 8,
  mean: 9,
  repeat: 10,
  mul_mat: 11,
  cpy: 12,
  get_rows: 13,
  norm: 14,
  rms_norm: 15,
  soft_max: 16,
  gelu: 17,
  silu: 18,
  relu: 19,
  silu_mul: 20,
  rms_norm_mul: 21,
  rope: 23,
  set_rows: 24,
  abs: 25,
  sgn: 26,
  neg: 27,
  step: 28,
  tanh: 29,
  elu: 30,
  leaky_relu: 31,
  sigmoid: 32,
  hard_sigmoid: 33,
  hard_swish: 34,
  gelu_erf: 35,
  gelu_quick: 36,
  exp: 37,
  log: 38,
  sin: 39,
  cos: 40,
  clamp: 41,
  floor: 42,
  ceil: 43,
  round: 44,
  trunc: 45,
  sum_rows: 50,
  argmax: 51,
  max_rows: 52,
  min_rows: 53,
  count_equal: 54,
  cumsum: 55,
  concat: 70,
  pad: 71,
  pad_reflect_1d: 72,
  roll: 73,
  repeat_back: 74,
  argsort: 75,
  top_k: 76,
  tri: 77,
  diag_mask_inf: 78,
  arange: 79,
  fill: 80,
  pad_circular: 85,
  acc: 90,
  set: 91,
  conv_2d: 108,
  flash_attn_ext: 110,
  im2col: 111,
  l2_norm: 112,
  group_norm: 113,
  pool_1d: 114,
  pool_2d: 115,
  interpolate: 116,
  timestep_embedding: 117,
  conv_transpose_1d: 118,
  conv_transpose_2d: 119,
} as const;

/** A core op's name. */
export type CoreOpName = keyof typeof CoreOp;

/** Why an op can or cannot write its result over its first source's memory. */
export interface InPlaceRule {
  /** True when dst may alias src0 exactly (same dtype, shape and strides). */
  readonly safe: boolean;
  /** The kernel property that makes it safe or unsafe (shown in plan reports and tests). */
  readonly reason: string;
}

/** One row of the op table. */
export interface OpInfo {
  /** The graph op's code (a compute op's equals its core op's where it has one of its own). */
  readonly code: number;
  /** Sources the op takes (optional ones counted). */
  readonly arity: number;
  /** The op's parameter slots, in node-table order. */
  readonly params: readonly string[];
  /** The core op that computes it; null for views and inputs (never computed). */
  readonly core: CoreOpName | null;
  /** Whether the result may reuse src0's memory; the reasons come from the Zig kernels. */
  readonly inPlace: InPlaceRule;
  /**
   * The result dtypes each backend computes this op for (its float sources in the same dtype
   * unless the op says otherwise). The op suite (`tests/op_suite_test.ts`) verifies every
   * declared combination and that none is missing; `docs/ops.md` is generated from these lists
   * (`deno task docs:ops`). Views and inputs compute nothing: they list every dtype.
   */
  readonly support: OpSupport;
}

/** Per backend, the result dtypes an op is computed for (see {@link OpInfo.support}). */
export interface OpSupport {
  /** Result dtypes the CPU backend (the Zig core) computes. */
  readonly cpu: readonly DType[];
  /** Result dtypes the WebGPU backend's shaders compute. */
  readonly webgpu: readonly DType[];
}

const elementwise: InPlaceRule = {
  safe: true,
  // elementwise.zig: dst[i] depends only on src0[i] (and src1 at the broadcast index); each
  // chunk is loaded before the same chunk of dst is stored.
  reason: "each dst element depends only on the src0 element at the same index",
};

const rowRead: InPlaceRule = {
  safe: true,
  // norm.zig reduces the whole row (mean, variance) before scale_row writes it, chunk by chunk
  // at the index it just read; soft_max.zig reads chunk k of src0 before storing chunk k of dst
  // and its last pass reads only dst. Rows are split across threads, never within a row.
  reason: "the kernel reads each row element before writing the same element",
};

const view: InPlaceRule = { safe: false, reason: "a view owns no memory: it is its source's" };

const rowReduction: InPlaceRule = {
  safe: false,
  reason: "a reduction reads a whole row for one dst element",
};

/** Result dtypes (see {@link OpSupport}): the same list on both backends. */
function both(...dtypes: DType[]): OpSupport {
  return { cpu: dtypes, webgpu: dtypes };
}

const F32: OpSupport = both("f32");
const FLOAT: OpSupport = both("f32", "f16");
const I32: OpSupport = both("i32");
const I64: OpSupport = both("i64");
/** Ops that move bits (repeat, cont): every dtype with elements of whole bytes. */
const ELEMENTS: OpSupport = both("f32", "f16", "i32");
/** Views and inputs: memory only, any dtype. */
const ANY: OpSupport = both(...(Object.keys(DTYPES) as DType[]));

/** The op table. Adding an op: a row here, its builder in `src/ops/`, its kernels. */
export const OPS = {
  none: {
    code: 0,
    arity: 0,
    params: [],
    core: null,
    inPlace: { safe: false, reason: "an input computes nothing" },
    support: ANY,
  },
  add: { code: 1, arity: 2, params: [], core: "add", inPlace: elementwise, support: FLOAT },
  sub: { code: 2, arity: 2, params: [], core: "sub", inPlace: elementwise, support: FLOAT },
  mul: { code: 3, arity: 2, params: [], core: "mul", inPlace: elementwise, support: FLOAT },
  div: { code: 4, arity: 2, params: [], core: "div", inPlace: elementwise, support: FLOAT },
  scale: {
    code: 5,
    arity: 1,
    params: ["factor", "bias"],
    core: "scale",
    inPlace: elementwise,
    support: FLOAT,
  },
  sqr: { code: 6, arity: 1, params: [], core: "sqr", inPlace: elementwise, support: FLOAT },
  sqrt: { code: 7, arity: 1, params: [], core: "sqrt", inPlace: elementwise, support: FLOAT },
  sum: {
    code: 8,
    arity: 1,
    params: [],
    core: "sum",
    inPlace: { safe: false, reason: "a reduction reads every src0 element for one dst element" },
    support: F32,
  },
  mean: {
    code: 9,
    arity: 1,
    params: [],
    core: "mean",
    inPlace: { safe: false, reason: "a reduction reads a whole row for one dst element" },
    support: F32,
  },
  repeat: {
    code: 10,
    arity: 1,
    params: [],
    core: "repeat",
    inPlace: { safe: false, reason: "dst element i reads src0 element i mod ne" },
    support: ELEMENTS,
  },
  mulMat: {
    code: 11,
    arity: 2,
    params: ["prepack", "ggml"],
    core: "mul_mat",
    inPlace: {
      safe: false,
      reason: "every dst element reads a whole row of src0 and of src1 (across threads)",
    },
    support: F32,
  },
  cpy: {
    code: 12,
    arity: 2,
    params: [],
    core: "cpy",
    inPlace: { safe: false, reason: "cpy writes its second source's memory, owning none" },
    support: { cpu: ["f32", "f16", "i32", "q8_0", "q4_0"], webgpu: ["f32", "f16", "i32"] },
  },
  getRows: {
    code: 13,
    arity: 2,
    params: [],
    core: "get_rows",
    inPlace: { safe: false, reason: "dst row n reads src0 row indices[n], any row" },
    // f32 rows from every weight dtype; i32 rows from an i32 table (ggml_get_rows).
    support: { cpu: ["f32", "i32"], webgpu: ["f32", "i32"] },
  },
  norm: { code: 14, arity: 1, params: ["eps"], core: "norm", inPlace: rowRead, support: F32 },
  rmsNorm: {
    code: 15,
    arity: 1,
    params: ["eps"],
    core: "rms_norm",
    inPlace: rowRead,
    support: F32,
  },
  softmax: {
    code: 16,
    arity: 2,
    params: ["scale", "maxBias"],
    core: "soft_max",
    inPlace: rowRead,
    support: F32,
  },
  gelu: { code: 17, arity: 1, params: [], core: "gelu", inPlace: elementwise, support: FLOAT },
  silu: { code: 18, arity: 1, params: [], core: "silu", inPlace: elementwise, support: FLOAT },
  relu: { code: 19, arity: 1, params: [], core: "relu", inPlace: elementwise, support: FLOAT },
  // A copy into fresh memory: the core's cpy. Its graph code is its own (22), above every
  // core code that it could be mistaken for (20 and 21 are the core's fused ops).
  cont: {
    code: 22,
    arity: 1,
    params: [],
    core: "cpy",
    // copy.zig uses memmove for the same-layout byte copy, so a cont onto itself is harmless;
    // with any other layout the planner's same-layout check refuses it.
    inPlace: { safe: true, reason: "a same-layout copy is a memmove onto itself" },
    support: ELEMENTS,
  },
  rope: {
    code: 23,
    arity: 3,
    params: [
      "nDims",
      "mode",
      "freqBase",
      "freqScale",
      "extFactor",
      "attnFactor",
      "betaFast",
      "betaSlow",
      "nCtxOrig",
    ],
    core: "rope",
    // rope.zig reads both elements of a rotated pair before writing either, and no other output
    // reads them; dims past nDims are an element-wise copy (ggml_rope_inplace).
    inPlace: {
      safe: true,
      reason: "each output pair depends only on the input pair it overwrites",
    },
    support: FLOAT,
  },
  setRows: {
    code: 24,
    arity: 3,
    params: [],
    core: "set_rows",
    inPlace: { safe: false, reason: "setRows writes its third source's memory, owning none" },
    support: { cpu: ["f32", "f16"], webgpu: ["f32", "f16"] },
  },
  // ggml's unary math, sums along rows, argmax, extremes, count and scan (kernels/unary.zig,
  // kernels/reduce_rows.zig; WGSL in shader_unary.ts, shader_reduce_rows.ts).
  abs: { code: 25, arity: 1, params: [], core: "abs", inPlace: elementwise, support: FLOAT },
  sgn: { code: 26, arity: 1, params: [], core: "sgn", inPlace: elementwise, support: FLOAT },
  neg: { code: 27, arity: 1, params: [], core: "neg", inPlace: elementwise, support: FLOAT },
  step: { code: 28, arity: 1, params: [], core: "step", inPlace: elementwise, support: FLOAT },
  tanh: { code: 29, arity: 1, params: [], core: "tanh", inPlace: elementwise, support: FLOAT },
  elu: { code: 30, arity: 1, params: [], core: "elu", inPlace: elementwise, support: FLOAT },
  leakyRelu: {
    code: 31,
    arity: 1,
    params: ["slope"],
    core: "leaky_relu",
    inPlace: elementwise,
    support: FLOAT,
  },
  sigmoid: {
    code: 32,
    arity: 1,
    params: [],
    core: "sigmoid",
    inPlace: elementwise,
    support: FLOAT,
  },
  hardSigmoid: {
    code: 33,
    arity: 1,
    params: [],
    core: "hard_sigmoid",
    inPlace: elementwise,
    support: FLOAT,
  },
  hardSwish: {
    code: 34,
    arity: 1,
    params: [],
    core: "hard_swish",
    inPlace: elementwise,
    support: FLOAT,
  },
  geluErf: {
    code: 35,
    arity: 1,
    params: [],
    core: "gelu_erf",
    inPlace: elementwise,
    support: FLOAT,
  },
  geluQuick: {
    code: 36,
    arity: 1,
    params: [],
    core: "gelu_quick",
    inPlace: elementwise,
    support: FLOAT,
  },
  exp: { code: 37, arity: 1, params: [], core: "exp", inPlace: elementwise, support: FLOAT },
  log: { code: 38, arity: 1, params: [], core: "log", inPlace: elementwise, support: FLOAT },
  sin: { code: 39, arity: 1, params: [], core: "sin", inPlace: elementwise, support: FLOAT },
  cos: { code: 40, arity: 1, params: [], core: "cos", inPlace: elementwise, support: FLOAT },
  clamp: {
    code: 41,
    arity: 1,
    params: ["min", "max"],
    core: "clamp",
    inPlace: elementwise,
    support: FLOAT,
  },
  floor: { code: 42, arity: 1, params: [], core: "floor", inPlace: elementwise, support: FLOAT },
  ceil: { code: 43, arity: 1, params: [], core: "ceil", inPlace: elementwise, support: FLOAT },
  round: { code: 44, arity: 1, params: [], core: "round", inPlace: elementwise, support: FLOAT },
  trunc: { code: 45, arity: 1, params: [], core: "trunc", inPlace: elementwise, support: FLOAT },
  sumRows: {
    code: 50,
    arity: 1,
    params: [],
    core: "sum_rows",
    inPlace: rowReduction,
    support: FLOAT,
  },
  argmax: {
    code: 51,
    arity: 1,
    params: [],
    core: "argmax",
    inPlace: rowReduction,
    // The result is i32 indices; the sources f32 or f16 (ggml: f32 only).
    support: I32,
  },
  maxRows: {
    code: 52,
    arity: 1,
    params: [],
    core: "max_rows",
    inPlace: rowReduction,
    support: FLOAT,
  },
  minRows: {
    code: 53,
    arity: 1,
    params: [],
    core: "min_rows",
    inPlace: rowReduction,
    support: FLOAT,
  },
  countEqual: {
    code: 54,
    arity: 2,
    params: [],
    core: "count_equal",
    inPlace: { safe: false, reason: "a reduction reads every element for one dst element" },
    // i32 sources; the count is i64, as ggml_count_equal's.
    support: I64,
  },
  cumsum: {
    code: 55,
    arity: 1,
    params: [],
    core: "cumsum",
    // reduce_rows.zig reads element i of a row before writing element i, and never reads an
    // element it has written.
    inPlace: { safe: true, reason: "each row is read element by element ahead of its writes" },
    support: FLOAT,
  },
  // Shape and indexing ops (codes 70-99; kernels/indexing.zig and kernels/sort.zig, WGSL in
  // shader_indexing.ts; builders in src/ops/indexing.ts and src/ops/sort.ts).
  concat: {
    code: 70,
    arity: 2,
    params: ["dim"],
    core: "concat",
    inPlace: { safe: false, reason: "dst is larger than either source" },
    support: { cpu: ["f32", "f16", "i32"], webgpu: ["f32", "f16", "i32"] },
  },
  pad: {
    code: 71,
    arity: 1,
    params: ["lp0", "rp0", "lp1", "rp1", "lp2", "rp2", "lp3", "rp3"],
    core: "pad",
    inPlace: { safe: false, reason: "dst element i reads src0 at i minus the left pads" },
    support: { cpu: ["f32", "f16", "i32"], webgpu: ["f32", "f16", "i32"] },
  },
  padReflect1d: {
    code: 72,
    arity: 1,
    params: ["p0", "p1"],
    core: "pad_reflect_1d",
    inPlace: { safe: false, reason: "dst element i reads src0 elements on both sides of it" },
    support: { cpu: ["f32", "f16", "i32"], webgpu: ["f32", "f16", "i32"] },
  },
  roll: {
    code: 73,
    arity: 1,
    params: ["shift0", "shift1", "shift2", "shift3"],
    core: "roll",
    inPlace: { safe: false, reason: "dst element i reads src0 element i - shift (another row)" },
    support: { cpu: ["f32", "f16", "i32"], webgpu: ["f32", "f16", "i32"] },
  },
  repeatBack: {
    code: 74,
    arity: 1,
    params: [],
    core: "repeat_back",
    inPlace: { safe: false, reason: "each dst element sums src0 elements of every tile" },
    support: { cpu: ["f32", "f16"], webgpu: ["f32", "f16"] },
  },
  argsort: {
    code: 75,
    arity: 1,
    params: ["order"],
    core: "argsort",
    inPlace: { safe: false, reason: "each dst element depends on the whole src0 row" },
    support: { cpu: ["i32"], webgpu: ["i32"] },
  },
  topK: {
    code: 76,
    arity: 1,
    params: ["k"],
    core: "top_k",
    inPlace: { safe: false, reason: "each dst element depends on the whole src0 row" },
    support: { cpu: ["i32"], webgpu: ["i32"] },
  },
  tri: {
    code: 77,
    arity: 1,
    params: ["type"],
    core: "tri",
    // indexing.zig: each element is its own src0 element or a constant.
    inPlace: {
      safe: true,
      reason: "each dst element depends only on the src0 element at its index",
    },
    support: { cpu: ["f32", "f16", "i32"], webgpu: ["f32", "f16", "i32"] },
  },
  diagMaskInf: {
    code: 78,
    arity: 1,
    params: ["nPast"],
    core: "diag_mask_inf",
    // As ggml_diag_mask_inf_inplace: each element is its own src0 element or -inf.
    inPlace: {
      safe: true,
      reason: "each dst element depends only on the src0 element at its index",
    },
    support: { cpu: ["f32", "f16"], webgpu: ["f32", "f16"] },
  },
  arange: {
    code: 79,
    arity: 0,
    params: ["start", "stop", "step"],
    core: "arange",
    inPlace: { safe: false, reason: "arange has no source" },
    support: { cpu: ["f32"], webgpu: ["f32"] },
  },
  fill: {
    code: 80,
    arity: 1,
    params: ["value"],
    core: "fill",
    // As ggml_fill_inplace: src0 gives only the shape; nothing of it is read.
    inPlace: { safe: true, reason: "fill reads no src0 element" },
    support: { cpu: ["f32", "f16"], webgpu: ["f32", "f16"] },
  },
  padCircular: {
    code: 85,
    arity: 1,
    params: ["lp0", "rp0", "lp1", "rp1", "lp2", "rp2", "lp3", "rp3"],
    core: "pad_circular",
    inPlace: { safe: false, reason: "dst element i reads src0 at i minus the left pads, wrapped" },
    support: { cpu: ["f32", "f16", "i32"], webgpu: ["f32", "f16", "i32"] },
  },
  // ggml_acc and ggml_set: src0 with src1 added or written into a view of it. The view's
  // strides and offset are in elements, each split in two f32 slots (low 24 bits, the rest),
  // since params travel as f32 (src/ops/view_write.ts, kernels/view_write.zig).
  acc: {
    code: 90,
    arity: 2,
    params: [
      "nb1Low",
      "nb1High",
      "nb2Low",
      "nb2High",
      "nb3Low",
      "nb3High",
      "offsetLow",
      "offsetHigh",
    ],
    core: "acc",
    // view_write.zig copies src0 into dst (nothing to copy in place), then adds src1 into the
    // view reading only dst: ggml_acc_inplace.
    inPlace: { safe: true, reason: "dst starts as a copy of src0, then only dst is read" },
    support: FLOAT,
  },
  set: {
    code: 91,
    arity: 2,
    params: [
      "nb1Low",
      "nb1High",
      "nb2Low",
      "nb2High",
      "nb3Low",
      "nb3High",
      "offsetLow",
      "offsetHigh",
    ],
    core: "set",
    inPlace: { safe: true, reason: "dst starts as a copy of src0, then only src1 is read" },
    support: ELEMENTS,
  },
  view: { code: 100, arity: 1, params: [], core: null, inPlace: view, support: ANY },
  reshape: { code: 101, arity: 1, params: [], core: null, inPlace: view, support: ANY },
  permute: {
    code: 102,
    arity: 1,
    params: ["axis0", "axis1", "axis2", "axis3"],
    core: null,
    inPlace: view,
    support: ANY,
  },
  transpose: { code: 103, arity: 1, params: [], core: null, inPlace: view, support: ANY },
  // Graph/core ops 110-149: attention, convolution, pooling and the other neural-network ops
  // (src/ops/attention.ts, zig/kernels/attention.zig, shader_attention.ts).
  flashAttnExt: {
    code: 110,
    arity: 4,
    params: ["scale", "maxBias", "softcap"],
    core: "flash_attn_ext",
    // attention.zig reads whole K and V rows for every query row; dst is laid out
    // [DV, heads, tokens] (a permutation of q's), so no source shares its layout anyway.
    inPlace: { safe: false, reason: "each dst row reads every row of K and V" },
    support: { cpu: ["f32"], webgpu: ["f32"] },
  },
  im2col: {
    code: 111,
    arity: 2,
    params: ["s0", "s1", "p0", "p1", "d0", "d1", "is2D", "planar"],
    core: "im2col",
    // conv.zig: a dst row gathers a whole receptive field (of every channel) of src1.
    inPlace: { safe: false, reason: "each dst row reads a window of every src1 channel" },
    support: { cpu: ["f32", "f16"], webgpu: ["f32", "f16"] },
  },
  l2Norm: {
    code: 112,
    arity: 1,
    params: ["eps"],
    core: "l2_norm",
    // group_norm.zig: the row's sum of squares is taken before scale_row writes it, chunk by
    // chunk at the index it just read; rows are split across threads, never within a row.
    inPlace: rowRead,
    support: { cpu: ["f32"], webgpu: ["f32"] },
  },
  groupNorm: {
    code: 113,
    arity: 1,
    params: ["groups", "eps"],
    core: "group_norm",
    // group_norm.zig: one thread owns a whole (group, image); its statistics are taken before
    // the last pass reads each chunk and writes it back at the same index.
    inPlace: {
      safe: true,
      reason: "a group's statistics come first, then each element is read before it is written",
    },
    support: { cpu: ["f32"], webgpu: ["f32"] },
  },
  pool1d: {
    code: 114,
    arity: 1,
    params: ["op", "k0", "s0", "p0"],
    core: "pool_1d",
    // pool.zig: dst row r reads a window of src0 row r; with a stride below the kernel, dst
    // element ox (written) precedes elements that later windows still read.
    inPlace: { safe: false, reason: "overlapping windows read src0 elements after dst writes" },
    support: { cpu: ["f32"], webgpu: ["f32"] },
  },
  pool2d: {
    code: 115,
    arity: 1,
    params: ["op", "k0", "k1", "s0", "s1", "p0", "p1"],
    core: "pool_2d",
    inPlace: { safe: false, reason: "each dst row reads a band of src0 rows" },
    support: { cpu: ["f32"], webgpu: ["f32"] },
  },
  interpolate: {
    code: 116,
    arity: 1,
    params: ["mode"],
    core: "interpolate",
    inPlace: { safe: false, reason: "dst has another shape; each element reads src0 elsewhere" },
    support: { cpu: ["f32"], webgpu: ["f32"] },
  },
  timestepEmbedding: {
    code: 117,
    arity: 1,
    params: ["dim", "maxPeriod"],
    core: "timestep_embedding",
    inPlace: { safe: false, reason: "dst row n ([dim]) is computed from one element of src0" },
    support: { cpu: ["f32"], webgpu: ["f32"] },
  },
  convTranspose1d: {
    code: 118,
    arity: 2,
    params: ["stride"],
    core: "conv_transpose_1d",
    inPlace: { safe: false, reason: "each dst element gathers from every input channel" },
    support: { cpu: ["f32"], webgpu: ["f32"] },
  },
  convTranspose2d: {
    code: 119,
    arity: 2,
    params: ["stride"],
    core: "conv_transpose_2d",
    inPlace: { safe: false, reason: "each dst element gathers from every input channel" },
    support: { cpu: ["f32"], webgpu: ["f32"] },
  },
} as const satisfies Record<string, OpInfo>;

/** An op's name in the table. */
export type OpName = keyof typeof OPS;

/** Every op's code, by name (`Op.mulMat`). */
export const Op: { readonly [K in OpName]: (typeof OPS)[K]["code"] } = Object.fromEntries(
  Object.entries(OPS).map(([name, info]) => [name, info.code]),
) as { readonly [K in OpName]: (typeof OPS)[K]["code"] };

/** An op code. */
export type OpCode = typeof Op[OpName];

const byCode = new Map<number, { name: OpName; info: OpInfo }>(
  (Object.entries(OPS) as [OpName, OpInfo][]).map(([name, info]) => [info.code, { name, info }]),
);

/** The table row of an op code; throws on a code no op has. */
export function opInfo(op: OpCode): OpInfo {
  const row = byCode.get(op);
  if (!row) throw new RangeError(`op code ${op} is not in the op table`);
  return row.info;
}

/** The op's name, as used in error messages and reports. */
export function opName(op: OpCode): string {
  return byCode.get(op)?.name ?? `op${op}`;
}

/** Ops whose result shares its source's memory instead of owning memory. */
export function isViewOp(op: OpCode): boolean {
  return byCode.get(op)?.info.core === null && op !== Op.none;
}

/** The core op code that computes `op` (cont is a cpy into fresh memory). */
export function coreOp(op: OpCode): number {
  const core = opInfo(op).core;
  if (core === null) throw new RangeError(`${opName(op)} is not computed by the core`);
  return CoreOp[core];
}
