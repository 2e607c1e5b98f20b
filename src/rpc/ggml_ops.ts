/**
 * ggml's op numbers, unary and GLU sub-ops, type ids and per-op `op_params` layouts, for the ggml
 * version behind RPC protocol 7.0.0 (llama.cpp as vendored by llama-cpp-python 0.3.36, whose
 * `ggml-rpc.h` asserts `GGML_OP_COUNT == 101`). The numbers are `enum ggml_op`,
 * `enum ggml_unary_op` and `enum ggml_glu_op` of that version's `ggml.h`, in order; the layouts
 * are what that version's `ggml.c` builders store with `ggml_set_op_params*`.
 *
 * Two directions use this file: the RPC client encodes Graft nodes as ggml nodes
 * ({@link GRAFT_TO_GGML}, {@link encodeGgmlOp}), and a server decodes ggml nodes into Graft ops
 * ({@link GGML_OP_PARAMS}, {@link readGgmlOpParam}). Names here are stable: add, never rename.
 * @module
 */

import { type DType, DTYPES } from "../dtype.ts";
import { type OpName, opName } from "../op.ts";
import type { Tensor } from "../tensor.ts";

/** `enum ggml_op` of this ggml version: name to number. */
export const GgmlOp = {
  NONE: 0,
  DUP: 1,
  ADD: 2,
  ADD_ID: 3,
  ADD1: 4,
  ACC: 5,
  SUB: 6,
  MUL: 7,
  DIV: 8,
  SQR: 9,
  SQRT: 10,
  LOG: 11,
  SIN: 12,
  COS: 13,
  SUM: 14,
  SUM_ROWS: 15,
  CUMSUM: 16,
  MEAN: 17,
  ARGMAX: 18,
  COUNT_EQUAL: 19,
  REPEAT: 20,
  REPEAT_BACK: 21,
  CONCAT: 22,
  SILU_BACK: 23,
  NORM: 24,
  RMS_NORM: 25,
  RMS_NORM_BACK: 26,
  GROUP_NORM: 27,
  L2_NORM: 28,
  MUL_MAT: 29,
  MUL_MAT_ID: 30,
  OUT_PROD: 31,
  SCALE: 32,
  SET: 33,
  CPY: 34,
  CONT: 35,
  RESHAPE: 36,
  VIEW: 37,
  PERMUTE: 38,
  TRANSPOSE: 39,
  GET_ROWS: 40,
  GET_ROWS_BACK: 41,
  SET_ROWS: 42,
  DIAG: 43,
  DIAG_MASK_INF: 44,
  DIAG_MASK_ZERO: 45,
  SOFT_MAX: 46,
  SOFT_MAX_BACK: 47,
  ROPE: 48,
  ROPE_BACK: 49,
  CLAMP: 50,
  CONV_TRANSPOSE_1D: 51,
  IM2COL: 52,
  IM2COL_BACK: 53,
  IM2COL_3D: 54,
  COL2IM_1D: 55,
  CONV_2D: 56,
  CONV_3D: 57,
  CONV_2D_DW: 58,
  CONV_TRANSPOSE_2D: 59,
  POOL_1D: 60,
  POOL_2D: 61,
  POOL_2D_BACK: 62,
  UPSCALE: 63,
  PAD: 64,
  PAD_REFLECT_1D: 65,
  ROLL: 66,
  ARANGE: 67,
  TIMESTEP_EMBEDDING: 68,
  ARGSORT: 69,
  TOP_K: 70,
  LEAKY_RELU: 71,
  TRI: 72,
  FILL: 73,
  FLASH_ATTN_EXT: 74,
  FLASH_ATTN_BACK: 75,
  SSM_CONV: 76,
  SSM_SCAN: 77,
  WIN_PART: 78,
  WIN_UNPART: 79,
  GET_REL_POS: 80,
  ADD_REL_POS: 81,
  RWKV_WKV6: 82,
  GATED_LINEAR_ATTN: 83,
  RWKV_WKV7: 84,
  SOLVE_TRI: 85,
  GATED_DELTA_NET: 86,
  LIGHTNING_INDEXER: 87,
  DSV4_HC_COMB: 88,
  DSV4_HC_PRE: 89,
  DSV4_HC_POST: 90,
  UNARY: 91,
  MAP_CUSTOM1: 92,
  MAP_CUSTOM2: 93,
  MAP_CUSTOM3: 94,
  CUSTOM: 95,
  CROSS_ENTROPY_LOSS: 96,
  CROSS_ENTROPY_LOSS_BACK: 97,
  OPT_STEP_ADAMW: 98,
  OPT_STEP_SGD: 99,
  GLU: 100,
} as const;

/** A ggml op's name. */
export type GgmlOpName = keyof typeof GgmlOp;

/** `GGML_OP_COUNT` of this ggml version (ggml-rpc.h asserts it for protocol 7.0.0). */
export const GGML_OP_COUNT = 101;

/** `enum ggml_unary_op` (op_params[0] of a `GGML_OP_UNARY` node). */
export const GgmlUnaryOp = {
  ABS: 0,
  SGN: 1,
  NEG: 2,
  STEP: 3,
  TANH: 4,
  ELU: 5,
  RELU: 6,
  SIGMOID: 7,
  GELU: 8,
  GELU_QUICK: 9,
  SILU: 10,
  HARDSWISH: 11,
  HARDSIGMOID: 12,
  EXP: 13,
  EXPM1: 14,
  SOFTPLUS: 15,
  GELU_ERF: 16,
  XIELU: 17,
  FLOOR: 18,
  CEIL: 19,
  ROUND: 20,
  TRUNC: 21,
} as const;

/** A ggml unary op's name. */
export type GgmlUnaryOpName = keyof typeof GgmlUnaryOp;

/** `GGML_UNARY_OP_COUNT`. */
export const GGML_UNARY_OP_COUNT = 22;

/** `enum ggml_glu_op` (op_params[0] of a `GGML_OP_GLU` node). */
export const GgmlGluOp = {
  REGLU: 0,
  GEGLU: 1,
  SWIGLU: 2,
  SWIGLU_OAI: 3,
  GEGLU_ERF: 4,
  GEGLU_QUICK: 5,
  SWIGLU_CLAMP: 6,
} as const;

/** A ggml GLU op's name. */
export type GgmlGluOpName = keyof typeof GgmlGluOp;

/** `GGML_GLU_OP_COUNT`. */
export const GGML_GLU_OP_COUNT = 7;

/** `GGML_TYPE_COUNT` of this ggml version (the server refuses type ids at or above it). */
export const GGML_TYPE_COUNT = 43;

/** `GGML_MAX_OP_PARAMS / sizeof(int32_t)`: op_params slots of a tensor. */
export const GGML_OP_PARAMS_SLOTS = 16;

const dtypeByGgmlType = new Map<number, DType>(
  (Object.keys(DTYPES) as DType[]).map((name) => [DTYPES[name].ggmlType, name]),
);

/** The Graft dtype of a ggml type id, or null where Graft has none (from the dtype table). */
export function ggmlTypeToDType(type: number): DType | null {
  return dtypeByGgmlType.get(type) ?? null;
}

/** The ggml type id of a Graft dtype (the dtype table's `ggmlType`). */
export function dtypeToGgmlType(dtype: DType): number {
  return DTYPES[dtype].ggmlType;
}

/** One field of a ggml op's `op_params`: its name, int32 slot and how the slot is read. */
export interface GgmlOpParam {
  /** The name ggml's builder gives it (`eps`, `n_dims`, `freq_base`...). */
  readonly name: string;
  /** The int32 slot in `op_params` (byte offset = 4 × slot). */
  readonly slot: number;
  /** i32: the slot as int32; f32: the slot's bits as float32. */
  readonly type: "i32" | "f32";
}

function i32(name: string, slot: number): GgmlOpParam {
  return { name, slot, type: "i32" };
}
function f32(name: string, slot: number): GgmlOpParam {
  return { name, slot, type: "f32" };
}

/**
 * Stride, padding and dilation of a 2D convolution: the first six fields of ggml_im2col and of
 * the direct convolutions.
 */
const CONV_2D_PARAMS: readonly GgmlOpParam[] = [
  i32("s0", 0),
  i32("s1", 1),
  i32("p0", 2),
  i32("p1", 3),
  i32("d0", 4),
  i32("d1", 5),
];

/**
 * The `op_params` layouts of ggml ops, from this version's `ggml.c` builders. An op absent here,
 * or with an empty list, takes no params. VIEW stores a `size_t` byte offset in slots 0-1 (low
 * word first, little endian): `offset_lo`/`offset_hi`.
 */
export const GGML_OP_PARAMS: Readonly<Partial<Record<GgmlOpName, readonly GgmlOpParam[]>>> = {
  ADD: [],
  SUB: [],
  MUL: [],
  DIV: [],
  MUL_MAT: [],
  GET_ROWS: [],
  SET_ROWS: [],
  CPY: [],
  CONT: [],
  RESHAPE: [],
  TRANSPOSE: [],
  REPEAT: [],
  REPEAT_BACK: [],
  SUM: [],
  SUM_ROWS: [],
  MEAN: [],
  ARGMAX: [],
  CUMSUM: [],
  SQR: [],
  SQRT: [],
  LOG: [],
  SIN: [],
  COS: [],
  NORM: [f32("eps", 0)],
  RMS_NORM: [f32("eps", 0)],
  L2_NORM: [f32("eps", 0)],
  GROUP_NORM: [i32("n_groups", 0), f32("eps", 1)],
  SCALE: [f32("s", 0), f32("b", 1)],
  VIEW: [i32("offset_lo", 0), i32("offset_hi", 1)],
  PERMUTE: [i32("axis0", 0), i32("axis1", 1), i32("axis2", 2), i32("axis3", 3)],
  SOFT_MAX: [f32("scale", 0), f32("max_bias", 1)],
  ROPE: [
    i32("n_past", 0),
    i32("n_dims", 1),
    i32("mode", 2),
    i32("n_ctx", 3),
    i32("n_ctx_orig", 4),
    f32("freq_base", 5),
    f32("freq_scale", 6),
    f32("ext_factor", 7),
    f32("attn_factor", 8),
    f32("beta_fast", 9),
    f32("beta_slow", 10),
    i32("section0", 11),
    i32("section1", 12),
    i32("section2", 13),
    i32("section3", 14),
  ],
  CLAMP: [f32("min", 0), f32("max", 1)],
  LEAKY_RELU: [f32("negative_slope", 0)],
  UNARY: [i32("op", 0)],
  GLU: [i32("op", 0), i32("swapped", 1), f32("alpha", 2), f32("limit", 3)],
  FLASH_ATTN_EXT: [f32("scale", 0), f32("max_bias", 1), f32("logit_softcap", 2), i32("prec", 3)],
  CONCAT: [i32("dim", 0)],
  PAD: [
    i32("lp0", 0),
    i32("rp0", 1),
    i32("lp1", 2),
    i32("rp1", 3),
    i32("lp2", 4),
    i32("rp2", 5),
    i32("lp3", 6),
    i32("rp3", 7),
    i32("circular", 8),
  ],
  PAD_REFLECT_1D: [i32("p0", 0), i32("p1", 1)],
  ROLL: [i32("shift0", 0), i32("shift1", 1), i32("shift2", 2), i32("shift3", 3)],
  ARGSORT: [i32("order", 0)],
  // ggml_top_k stores no params in this version: k is the result's ne[0].
  TOP_K: [],
  COUNT_EQUAL: [],
  ADD_ID: [],
  // ggml_acc_impl / ggml_set_impl: the view's byte strides and offset (size_t stored as int32),
  // and whether the result is a view of src0 (the _inplace forms: src0 is not copied first).
  ACC: [i32("nb1", 0), i32("nb2", 1), i32("nb3", 2), i32("offset", 3), i32("inplace", 4)],
  SET: [i32("nb1", 0), i32("nb2", 1), i32("nb3", 2), i32("offset", 3), i32("inplace", 4)],
  // ggml_conv_2d_direct and ggml_conv_2d_dw_direct.
  CONV_2D: CONV_2D_PARAMS,
  CONV_2D_DW: CONV_2D_PARAMS,
  TRI: [i32("type", 0)],
  DIAG_MASK_INF: [i32("n_past", 0)],
  FILL: [f32("c", 0)],
  ARANGE: [f32("start", 0), f32("stop", 1), f32("step", 2)],
  TIMESTEP_EMBEDDING: [i32("dim", 0), i32("max_period", 1)],
  // ggml_im2col: the 2D convolution's fields, then whether it is 2D.
  IM2COL: [...CONV_2D_PARAMS, i32("is_2D", 6)],
  CONV_TRANSPOSE_1D: [i32("s0", 0), i32("p0", 1), i32("d0", 2)],
  CONV_TRANSPOSE_2D: [i32("stride", 0)],
  POOL_1D: [i32("op", 0), i32("k0", 1), i32("s0", 2), i32("p0", 3)],
  POOL_2D: [
    i32("op", 0),
    i32("k0", 1),
    i32("k1", 2),
    i32("s0", 3),
    i32("s1", 4),
    i32("p0", 5),
    i32("p1", 6),
  ],
  UPSCALE: [i32("mode", 0)],
};

/** Reads op_params field `name` of ggml op `op` from 16 int32 slots; throws on a name not in the layout. */
export function readGgmlOpParam(op: GgmlOpName, opParams: Int32Array, name: string): number {
  const field = GGML_OP_PARAMS[op]?.find((f) => f.name === name);
  if (!field) throw new RangeError(`ggml op ${op} has no op_params field ${name}`);
  const bits = opParams[field.slot] ?? 0;
  return field.type === "i32" ? bits : i32BitsToF32(bits);
}

const f32Scratch = new Float32Array(1);
const i32Scratch = new Int32Array(f32Scratch.buffer);

/** The float32 whose bits are the int32 `bits`. */
export function i32BitsToF32(bits: number): number {
  i32Scratch[0] = bits;
  return f32Scratch[0]!;
}

/** The int32 holding the bits of `value` rounded to float32. */
export function f32ToI32Bits(value: number): number {
  f32Scratch[0] = value;
  return i32Scratch[0]!;
}

/**
 * How one Graft op becomes one ggml node: the ggml op, the unary sub-op where it is UNARY, which
 * ggml op_params field each Graft param fills (by position in the op table's `params`; null:
 * Graft-only, not sent), and ggml fields Graft has no param for, with the value ggml's own
 * builder gives them.
 */
export interface GraftToGgml {
  /** The ggml op. */
  readonly op: GgmlOpName;
  /** For UNARY: the unary op (op_params[0]). */
  readonly unary?: GgmlUnaryOpName;
  /** ggml field per Graft param, by the Graft param's position; null for Graft-only params. */
  readonly params?: readonly (string | null)[];
  /** ggml fields Graft has no param for: [field, value]. */
  readonly fixed?: readonly (readonly [string, number])[];
  /**
   * For params that are not a field each (acc and set: element strides split in two f32
   * slots, ggml's byte strides): writes the ggml fields from the node through `set`.
   */
  readonly encode?: (tensor: Tensor, set: (field: string, value: number) => void) => void;
}

/** ggml_acc's and ggml_set's fields from Graft's acc and set params (see src/ops/view_write.ts). */
function viewWriteFields(tensor: Tensor, set: (field: string, value: number) => void): void {
  const size = DTYPES[tensor.dtype].blockBytes;
  const p = tensor.params;
  ["nb1", "nb2", "nb3", "offset"].forEach((field, i) => {
    set(field, ((p[2 * i] ?? 0) + (p[2 * i + 1] ?? 0) * 2 ** 24) * size);
  });
  // Graft's result has memory of its own (the planner may share src0's: memcpy onto itself).
  set("inplace", 0);
}

function unary(name: GgmlUnaryOpName): GraftToGgml {
  return { op: "UNARY", unary: name };
}

/**
 * Graft ops with a ggml node of the same meaning (params and source order as ggml's builder).
 * Ops absent here have none in this ggml version (maxRows, minRows), or one whose semantics
 * differ (argmax: ggml takes the last of tied maxima, and a NaN restarts its scan; topK: ggml
 * leaves the order of the k indices open and swaps the first two), and stay on a local backend.
 * The RPC backend's `supportsOp` narrows the rest to what ggml-cpu computes alike.
 */
export const GRAFT_TO_GGML: Readonly<Partial<Record<OpName, GraftToGgml>>> = {
  none: { op: "NONE" },
  add: { op: "ADD" },
  sub: { op: "SUB" },
  mul: { op: "MUL" },
  div: { op: "DIV" },
  scale: { op: "SCALE", params: ["s", "b"] },
  sqr: { op: "SQR" },
  sqrt: { op: "SQRT" },
  sum: { op: "SUM" },
  mean: { op: "MEAN" },
  repeat: { op: "REPEAT" },
  // prepack and ggml are Graft's kernel choices; ggml's mul_mat has no params.
  mulMat: { op: "MUL_MAT", params: [null, null] },
  cpy: { op: "CPY" },
  getRows: { op: "GET_ROWS" },
  norm: { op: "NORM", params: ["eps"] },
  rmsNorm: { op: "RMS_NORM", params: ["eps"] },
  softmax: { op: "SOFT_MAX", params: ["scale", "max_bias"] },
  gelu: unary("GELU"),
  silu: unary("SILU"),
  relu: unary("RELU"),
  cont: { op: "CONT" },
  // ggml_rope_ext's fields one for one; the frequency factors are src2, as ggml's.
  rope: {
    op: "ROPE",
    params: [
      "n_dims",
      "mode",
      "freq_base",
      "freq_scale",
      "ext_factor",
      "attn_factor",
      "beta_fast",
      "beta_slow",
      "n_ctx_orig",
    ],
  },
  setRows: { op: "SET_ROWS" },
  abs: unary("ABS"),
  sgn: unary("SGN"),
  neg: unary("NEG"),
  step: unary("STEP"),
  tanh: unary("TANH"),
  elu: unary("ELU"),
  leakyRelu: { op: "LEAKY_RELU", params: ["negative_slope"] },
  sigmoid: unary("SIGMOID"),
  hardSigmoid: unary("HARDSIGMOID"),
  hardSwish: unary("HARDSWISH"),
  geluErf: unary("GELU_ERF"),
  geluQuick: unary("GELU_QUICK"),
  exp: unary("EXP"),
  log: { op: "LOG" },
  sin: { op: "SIN" },
  cos: { op: "COS" },
  clamp: { op: "CLAMP", params: ["min", "max"] },
  floor: unary("FLOOR"),
  ceil: unary("CEIL"),
  round: unary("ROUND"),
  trunc: unary("TRUNC"),
  sumRows: { op: "SUM_ROWS" },
  cumsum: { op: "CUMSUM" },
  concat: { op: "CONCAT", params: ["dim"] },
  pad: { op: "PAD", params: ["lp0", "rp0", "lp1", "rp1", "lp2", "rp2", "lp3", "rp3"] },
  padReflect1d: { op: "PAD_REFLECT_1D", params: ["p0", "p1"] },
  roll: { op: "ROLL", params: ["shift0", "shift1", "shift2", "shift3"] },
  repeatBack: { op: "REPEAT_BACK" },
  // Graft's order codes are ggml_sort_order's (0 ascending, 1 descending).
  argsort: { op: "ARGSORT", params: ["order"] },
  // Graft's TriType numbers are ggml_tri_type's.
  tri: { op: "TRI", params: ["type"] },
  diagMaskInf: { op: "DIAG_MASK_INF", params: ["n_past"] },
  arange: { op: "ARANGE", params: ["start", "stop", "step"] },
  fill: { op: "FILL", params: ["c"] },
  view: { op: "VIEW" },
  reshape: { op: "RESHAPE" },
  permute: { op: "PERMUTE", params: ["axis0", "axis1", "axis2", "axis3"] },
  transpose: { op: "TRANSPOSE" },
  flashAttnExt: { op: "FLASH_ATTN_EXT", params: ["scale", "max_bias", "logit_softcap"] },
  l2Norm: { op: "L2_NORM", params: ["eps"] },
  groupNorm: { op: "GROUP_NORM", params: ["n_groups", "eps"] },
  timestepEmbedding: { op: "TIMESTEP_EMBEDDING", params: ["dim", "max_period"] },
  // Both i32, the count i64 (ggml_count_equal).
  countEqual: { op: "COUNT_EQUAL" },
  acc: { op: "ACC", encode: viewWriteFields },
  set: { op: "SET", encode: viewWriteFields },
  // Graft's planar layout has no ggml form (supportsOp keeps it local).
  im2col: { op: "IM2COL", params: ["s0", "s1", "p0", "p1", "d0", "d1", "is_2D", null] },
  // Graft's pool codes are ggml_op_pool's (0 max, 1 avg).
  pool1d: { op: "POOL_1D", params: ["op", "k0", "s0", "p0"] },
  pool2d: { op: "POOL_2D", params: ["op", "k0", "k1", "s0", "s1", "p0", "p1"] },
  // Graft's mode codes are ggml_scale_mode's, with GGML_SCALE_FLAG_ALIGN_CORNERS (256).
  interpolate: { op: "UPSCALE", params: ["mode"] },
  // ggml_conv_transpose_1d asserts p0 = 0 and d0 = 1: Graft's convTranspose1d.
  convTranspose1d: { op: "CONV_TRANSPOSE_1D", params: ["s0"], fixed: [["p0", 0], ["d0", 1]] },
  convTranspose2d: { op: "CONV_TRANSPOSE_2D", params: ["stride"] },
  // ggml_pad_ext_circular: ggml_pad_ext with the circular flag.
  padCircular: {
    op: "PAD",
    params: ["lp0", "rp0", "lp1", "rp1", "lp2", "rp2", "lp3", "rp3"],
    fixed: [["circular", 1]],
  },
};

/** A Graft node as a ggml node: ggml op number and the 16 op_params slots. */
export interface GgmlNodeOp {
  /** The ggml op number. */
  readonly op: number;
  /** The 16 int32 op_params slots. */
  readonly opParams: Int32Array;
}

/**
 * The ggml op and op_params of Graft tensor `tensor`, or null when this ggml version has no op
 * of the same meaning (such a node must stay on a local backend).
 */
export function encodeGgmlOp(tensor: Tensor): GgmlNodeOp | null {
  const name = opName(tensor.op) as OpName;
  const mapping = GRAFT_TO_GGML[name];
  if (!mapping) return null;
  const layout = GGML_OP_PARAMS[mapping.op] ?? [];
  const opParams = new Int32Array(GGML_OP_PARAMS_SLOTS);
  const set = (field: string, value: number): void => {
    const spec = layout.find((f) => f.name === field);
    if (!spec) throw new RangeError(`ggml op ${mapping.op} has no op_params field ${field}`);
    opParams[spec.slot] = spec.type === "i32" ? value | 0 : f32ToI32Bits(value);
  };
  if (mapping.unary) opParams[0] = GgmlUnaryOp[mapping.unary];
  for (const [field, value] of mapping.fixed ?? []) set(field, value);
  const fields = mapping.params ?? [];
  for (let i = 0; i < fields.length; i++) {
    const field = fields[i];
    const value = tensor.params[i];
    if (field && value !== undefined) set(field, value);
  }
  mapping.encode?.(tensor, set);
  if (mapping.op === "VIEW") {
    // ggml stores the view's byte offset into its source as a size_t.
    const offset = tensor.viewOffset;
    opParams[0] = offset % 0x1_0000_0000 | 0;
    opParams[1] = Math.floor(offset / 0x1_0000_0000) | 0;
  }
  return { op: GgmlOp[mapping.op], opParams };
}

/** The name of ggml op number `op`, or null outside this version's enum. */
export function ggmlOpName(op: number): GgmlOpName | null {
  return ggmlOpNames[op] ?? null;
}

const ggmlOpNames: readonly GgmlOpName[] = (() => {
  const names: GgmlOpName[] = [];
  for (const [name, code] of Object.entries(GgmlOp)) names[code] = name as GgmlOpName;
  return names;
})();
