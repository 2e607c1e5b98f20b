/**
 * GRAPH_COMPUTE on Graft's server: a ggml graph as llama.cpp's client sends it becomes a Graft
 * graph on the client's CPU backend, computed in the client's own memory.
 *
 * The plan: every wire tensor already has its address (the client's allocator placed it), so
 * no planning is done here. A tensor that is not computed by this graph — an input (op NONE),
 * a view (VIEW, RESHAPE, PERMUTE, TRANSPOSE: ggml computes nothing for them), or any tensor not
 * in the node list — becomes a Graft input placed at its own address with its own shape and
 * strides; a view's aliasing is then just two tensors over the same bytes. A computed node is
 * rebuilt with Graft's op builder from its translated sources (so Graft's shape and dtype checks
 * run on hostile input), must come out with the dtype and shape ggml declared, and is placed at
 * its address with ggml's strides. Ops that write another tensor's memory (CPY, SET_ROWS) write
 * it through Graft's own `cpy`/`setRows`. A ggml op that Graft builds from several ops (GLU:
 * activation then product) gets its intermediates in a scratch buffer of the graph's own.
 * The core validates every node again when the plan is made (`zig/validate.zig`), and checks
 * indices of get_rows/set_rows when it runs.
 * @module
 */

import type { CpuPlan } from "../../backend/cpu/plan.ts";
import type { CpuBuffer } from "../../backend/cpu/buffer.ts";
import { type DType, DTYPES } from "../../dtype.ts";
import { Graph } from "../../graph.ts";
import { add, div, mul, repeat, scale, sqr, sqrt, sub } from "../../ops/elementwise.ts";
import { flashAttnExt } from "../../ops/attention.ts";
import { cont, cpy, getRows, setRows } from "../../ops/copy.ts";
import { glu, type GluKind } from "../../ops/glu.ts";
import { concat, diagMaskInf, padCircular, padExt } from "../../ops/indexing.ts";
import {
  conv2d,
  conv2dDw,
  type ConvOptions,
  convTranspose1d,
  convTranspose2d,
  im2col,
} from "../../ops/conv.ts";
import { interpolate, type InterpolateMode } from "../../ops/interpolate.ts";
import { pool1d, pool2d, type PoolOp } from "../../ops/pool.ts";
import { topK } from "../../ops/sort.ts";
import { countEqual } from "../../ops/reduce_rows.ts";
import { reshape } from "../../ops/view.ts";
import { acc, set, type ViewOptions } from "../../ops/view_write.ts";
import { mulMat } from "../../ops/matmul.ts";
import { norm, rmsNorm, softmax } from "../../ops/norm.ts";
import { sumRows } from "../../ops/reduce_rows.ts";
import { rope, type RopeMode } from "../../ops/rope.ts";
import * as unary from "../../ops/unary.ts";
import { gelu, relu, silu } from "../../ops/elementwise.ts";
import { type Dims, formatShape, Tensor } from "../../tensor.ts";
import { type OpCode, type OpInfo, type OpName, OPS } from "../../op.ts";
import {
  GGML_OP_COUNT,
  GGML_OP_PARAMS,
  GgmlGluOp,
  GgmlOp,
  type GgmlOpName,
  ggmlOpName,
  GgmlUnaryOp,
  GRAFT_TO_GGML,
  type GraftToGgml,
  readGgmlOpParam,
} from "../ggml_ops.ts";
import type { RpcGraph, RpcTensor } from "../protocol.ts";
import { type ClientSession, refuse, wireDType, wireNbytes } from "./session.ts";

/** The most nodes one GRAPH_COMPUTE may carry (a large llama graph has a few thousand). */
export const GRAPH_NODES_MAX = 1 << 16;
/** The most tensors one GRAPH_COMPUTE may carry. */
export const GRAPH_TENSORS_MAX = 1 << 16;

/** A translated graph with its plan, kept for GRAPH_RECOMPUTE. */
export interface CompiledGraph extends Disposable {
  /** The Graft graph (null when the ggml graph computes nothing: views only). */
  readonly graph: Graph | null;
  /** Its plan on the client's backend. */
  readonly plan: CpuPlan | null;
  /** Wire op names of the computed nodes, for logs. */
  readonly ops: ReadonlySet<string>;
  /** Frees the plan and the scratch buffer. */
  dispose(): void;
}

/** ggml ops that compute nothing: their tensor is its source's memory. */
const VIEW_OPS: ReadonlySet<number> = new Set([
  GgmlOp.NONE,
  GgmlOp.RESHAPE,
  GgmlOp.VIEW,
  GgmlOp.PERMUTE,
  GgmlOp.TRANSPOSE,
]);

const UNARY: Readonly<Record<number, (a: Tensor) => Tensor>> = {
  [GgmlUnaryOp.ABS]: unary.abs,
  [GgmlUnaryOp.SGN]: unary.sgn,
  [GgmlUnaryOp.NEG]: unary.neg,
  [GgmlUnaryOp.STEP]: unary.step,
  [GgmlUnaryOp.TANH]: unary.tanh,
  [GgmlUnaryOp.ELU]: unary.elu,
  [GgmlUnaryOp.RELU]: relu,
  [GgmlUnaryOp.SIGMOID]: unary.sigmoid,
  [GgmlUnaryOp.GELU]: gelu,
  [GgmlUnaryOp.GELU_QUICK]: unary.geluQuick,
  [GgmlUnaryOp.SILU]: silu,
  [GgmlUnaryOp.HARDSWISH]: unary.hardSwish,
  [GgmlUnaryOp.HARDSIGMOID]: unary.hardSigmoid,
  [GgmlUnaryOp.EXP]: unary.exp,
  [GgmlUnaryOp.GELU_ERF]: unary.geluErf,
  [GgmlUnaryOp.FLOOR]: unary.floor,
  [GgmlUnaryOp.CEIL]: unary.ceil,
  [GgmlUnaryOp.ROUND]: unary.round,
  [GgmlUnaryOp.TRUNC]: unary.trunc,
};

const GLU_KINDS: Readonly<Record<number, GluKind>> = {
  [GgmlGluOp.REGLU]: "reglu",
  [GgmlGluOp.GEGLU]: "geglu",
  [GgmlGluOp.SWIGLU]: "swiglu",
  [GgmlGluOp.GEGLU_ERF]: "gegluErf",
  [GgmlGluOp.GEGLU_QUICK]: "gegluQuick",
};

const ROPE_MODES: Readonly<Record<number, RopeMode>> = { 0: "normal", 2: "neox" };

/** What a builder gets: the node, its translated sources, and a placed tensor at its address. */
interface BuildContext {
  readonly node: RpcTensor;
  readonly field: string;
  /** Source `i` (required). */
  src(i: number): Tensor;
  /** Source `i`, or undefined where the slot is empty. */
  optional(i: number): Tensor | undefined;
  /** The node's own memory as an input tensor (the destination of a CONT or DUP). */
  self(): Tensor;
  /** op_params field `name` of the node's op. */
  param(name: string): number;
}

type Builder = (c: BuildContext) => Tensor;

function noSourcesFrom(c: BuildContext, first: number): void {
  for (let i = first; i < c.node.src.length; i++) {
    if (c.node.src[i] !== 0n) refuse(`${c.field}.src[${i}]`, "this op takes no such source");
  }
}

/**
 * The most window taps one POOL node may read (output elements x kernel area): a pool's kernel
 * may exceed its input (the windows then lie mostly in padding, skipped one tap at a time), so
 * a small output could otherwise cost 2^40 steps. A real pool reads far fewer.
 */
const POOL_TAPS_MAX = 2 ** 32;

/**
 * What POOL_1D and POOL_2D check alike: one source, contiguous (ggml-cpu pools rows at nb[1]
 * steps, and planes at nb[2], as if it were), ggml_op_pool's code, and a window of `area` taps
 * within POOL_TAPS_MAX for the whole output. Returns the pool op.
 */
function poolChecks(c: BuildContext, area: number): PoolOp {
  noSourcesFrom(c, 1);
  const op = POOL_OPS[c.param("op")];
  if (op === undefined) {
    refuse(`${c.field}.op_params`, `${ggmlOpName(c.node.op)} op ${c.param("op")}`);
  }
  if (!c.src(0).isContiguous) refuse(c.field, "pooling of a non-contiguous tensor");
  const taps = c.node.ne.reduce((a, b) => a * b, 1) * area;
  if (taps > POOL_TAPS_MAX) {
    refuse(
      `${c.field}.op_params`,
      `${ggmlOpName(c.node.op)} reading ${taps} window taps (at most 2^32)`,
    );
  }
  return op;
}

/** ggml_op_pool's codes. */
const POOL_OPS: Readonly<Record<number, PoolOp>> = { 0: "max", 1: "avg" };

/** ggml_scale_mode's codes (the low byte of UPSCALE's mode). */
const SCALE_MODES: Readonly<Record<number, InterpolateMode>> = {
  0: "nearest",
  1: "bilinear",
  2: "bicubic",
};
/** GGML_SCALE_FLAG_ALIGN_CORNERS. */
const SCALE_ALIGN_CORNERS = 1 << 8;

/**
 * `t`'s values rounded to f16 and back, in scratch: what ggml-cpu multiplies when a
 * convolution's kernel is f16 (it unfolds or permutes the f32 input into f16 first).
 */
function throughF16(t: Tensor): Tensor {
  const half = cpy(t, new Tensor({ dtype: "f16", ne: t.ne }));
  return cpy(half, new Tensor({ dtype: "f32", ne: t.ne }));
}

/** Stride, padding and dilation of CONV_2D and CONV_2D_DW (ggml_conv_2d_direct's fields). */
function convOptions(c: BuildContext): ConvOptions {
  return {
    stride: [c.param("s0"), c.param("s1")],
    padding: [c.param("p0"), c.param("p1")],
    dilation: [c.param("d0"), c.param("d1")],
  };
}

/**
 * ACC and SET: ggml_acc_impl's and ggml_set_impl's byte strides and offset; Graft's acc and
 * set check that the view lies inside src0 and does not overlap itself (ggml computes an
 * overlapping view in its threads' order: refused). The in-place forms copy nothing from src0:
 * their result must be src0's memory, where Graft's copy of src0 onto itself is no copy.
 */
function viewWrite(c: BuildContext, write: typeof acc): Tensor {
  noSourcesFrom(c, 2);
  const inplace = c.param("inplace");
  if (inplace !== 0 && inplace !== 1) refuse(`${c.field}.op_params`, `inplace ${inplace}`);
  const a = c.src(0);
  if (inplace === 1) {
    const at = a.placement;
    const self = c.self().placement;
    if (!at || !self || at.buffer !== self.buffer || at.offset !== self.offset) {
      refuse(c.field, "an in-place ACC or SET must lie on its src0");
    }
  }
  const view: ViewOptions = {
    nb1: c.param("nb1"),
    nb2: c.param("nb2"),
    nb3: c.param("nb3"),
    offset: c.param("offset"),
  };
  return write(a, c.src(1), view);
}

/** The ggml ops Graft's server computes, each as Graft builds it. */
const BUILDERS: Readonly<Partial<Record<GgmlOpName, Builder>>> = {
  ADD: (c) => add(c.src(0), c.src(1)),
  SUB: (c) => sub(c.src(0), c.src(1)),
  MUL: (c) => mul(c.src(0), c.src(1)),
  DIV: (c) => div(c.src(0), c.src(1)),
  SQR: (c) => sqr(c.src(0)),
  SQRT: (c) => sqrt(c.src(0)),
  LOG: (c) => unary.log(c.src(0)),
  SIN: (c) => unary.sin(c.src(0)),
  COS: (c) => unary.cos(c.src(0)),
  SCALE: (c) => scale(c.src(0), c.param("s"), c.param("b")),
  CLAMP: (c) => unary.clamp(c.src(0), c.param("min"), c.param("max")),
  LEAKY_RELU: (c) => unary.leakyRelu(c.src(0), c.param("negative_slope")),
  NORM: (c) => norm(c.src(0), c.param("eps")),
  RMS_NORM: (c) => rmsNorm(c.src(0), c.param("eps")),
  SUM_ROWS: (c) => sumRows(c.src(0)),
  REPEAT: (c) => repeat(c.src(0), c.self().ne),
  CONCAT: (c) => concat(c.src(0), c.src(1), c.param("dim")),
  DIAG_MASK_INF: (c) => diagMaskInf(c.src(0), c.param("n_past")),
  // ggml's mul_mat quantizes the activations per block for quantized weights; `ggml: true` does
  // the same, so the server's products are bitwise those a model computes on ggml's CPU.
  MUL_MAT: (c) => mulMat(c.src(0), c.src(1), { ggml: true }),
  GET_ROWS: (c) => getRows(c.src(0), c.src(1)),
  // ggml_set_rows: src0 the rows, src1 the indices, src2 (and view_src) the target.
  SET_ROWS: (c) => setRows(c.src(2), c.src(0), c.src(1)),
  CPY: (c) => cpy(c.src(0), c.src(1)),
  // CONT and DUP write a fresh tensor of the node's own shape: a copy into its memory.
  CONT: (c) => cpy(c.src(0), c.self()),
  DUP: (c) => cpy(c.src(0), c.self()),
  SOFT_MAX: (c) => {
    noSourcesFrom(c, 2);
    const mask = c.optional(1);
    return softmax(c.src(0), {
      ...(mask ? { mask } : {}),
      scale: c.param("scale"),
      maxBias: c.param("max_bias"),
    });
  },
  ROPE: (c) => {
    noSourcesFrom(c, 3);
    const mode = ROPE_MODES[c.param("mode")];
    if (mode === undefined) refuse(`${c.field}.op_params`, `rope mode ${c.param("mode")}`);
    if (c.node.opParams[15] !== 0) refuse(`${c.field}.op_params`, "rope offsets are not computed");
    const freqFactors = c.optional(2);
    return rope(c.src(0), c.src(1), {
      nDims: c.param("n_dims"),
      mode,
      freqBase: c.param("freq_base"),
      freqScale: c.param("freq_scale"),
      extFactor: c.param("ext_factor"),
      attnFactor: c.param("attn_factor"),
      betaFast: c.param("beta_fast"),
      betaSlow: c.param("beta_slow"),
      nCtxOrig: c.param("n_ctx_orig"),
      ...(freqFactors ? { freqFactors } : {}),
    });
  },
  GLU: (c) => {
    const kind = GLU_KINDS[c.param("op")];
    if (kind === undefined) refuse(`${c.field}.op_params`, `glu op ${c.param("op")}`);
    noSourcesFrom(c, 2);
    const b = c.optional(1);
    const swapped = c.param("swapped") !== 0;
    // ggml swaps the halves of one tensor, or the two tensors of the split form.
    if (b) return swapped ? glu(b, kind, c.src(0)) : glu(c.src(0), kind, b);
    return glu(c.src(0), kind, undefined, { swapped });
  },
  UNARY: (c) => {
    const build = UNARY[c.param("op")];
    if (!build) refuse(`${c.field}.op_params`, `unary op ${c.param("op")}`);
    return build(c.src(0));
  },
  ACC: (c) => viewWrite(c, acc),
  SET: (c) => viewWrite(c, set),
  IM2COL: (c) => {
    noSourcesFrom(c, 2);
    const is2D = c.param("is_2D");
    if (is2D !== 0 && is2D !== 1) refuse(`${c.field}.op_params`, `im2col is_2D ${is2D}`);
    const image = c.src(1);
    // ggml-cpu reads a 2D image's rows as ne[0] adjacent floats, whatever nb[1] says.
    if (is2D === 1 && image.nb[1] !== image.ne[0] * 4) {
      refuse(c.field, "im2col of an image whose rows are not adjacent");
    }
    // A 1D unfolding reads image row -p1 (every element 0 unless p1 is 0); s1 and d1 are
    // unused (ggml_conv_1d sends 0).
    if (is2D === 0 && c.param("p1") !== 0) refuse(`${c.field}.op_params`, "1D im2col with p1");
    const dtype = wireDType(c.node, c.field);
    if (dtype !== "f32" && dtype !== "f16") refuse(c.field, `im2col into ${dtype}`);
    return is2D === 1
      ? im2col(c.src(0), image, { ...convOptions(c), dtype })
      : im2col(c.src(0), image, {
        is2D: false,
        dtype,
        stride: c.param("s0"),
        padding: c.param("p0"),
        dilation: c.param("d0"),
      });
  },
  // ggml_conv_2d_direct: an f16 kernel multiplies f16-rounded input (ggml-cpu's im2col into
  // the kernel's type). Graft's conv2d leaves a view: the node gets a copy of it.
  CONV_2D: (c) => {
    noSourcesFrom(c, 2);
    const kernel = c.src(0);
    const image = kernel.dtype === "f16" ? throughF16(c.src(1)) : c.src(1);
    return cont(conv2d(kernel, image, convOptions(c)));
  },
  // ggml_conv_2d_dw_direct: an f16 kernel is widened to f32 (Graft's f16 product would round
  // the input instead), the input stays f32. Input with contiguous channels (CWHN) is copied to
  // WHCN first; the node's own strides place the result.
  CONV_2D_DW: (c) => {
    noSourcesFrom(c, 2);
    const image = c.src(1);
    const k = c.src(0);
    const kernel = k.dtype === "f16" ? cpy(k, new Tensor({ dtype: "f32", ne: k.ne })) : k;
    return cont(conv2dDw(kernel, image.isContiguous ? image : cont(image), convOptions(c)));
  },
  CONV_TRANSPOSE_1D: (c) => {
    noSourcesFrom(c, 2);
    // ggml_conv_transpose_1d asserts p0 = 0 and d0 = 1; ggml-cpu reads only s0.
    if (c.param("p0") !== 0 || c.param("d0") !== 1) {
      refuse(`${c.field}.op_params`, `conv_transpose_1d p0 ${c.param("p0")}, d0 ${c.param("d0")}`);
    }
    const kernel = c.src(0);
    const input = kernel.dtype === "f16" ? throughF16(c.src(1)) : c.src(1);
    return convTranspose1d(kernel, input, c.param("s0"));
  },
  CONV_TRANSPOSE_2D: (c) => {
    noSourcesFrom(c, 2);
    const kernel = c.src(0);
    const input = kernel.dtype === "f16" ? throughF16(c.src(1)) : c.src(1);
    return convTranspose2d(kernel, input, c.param("stride"));
  },
  POOL_1D: (c) => {
    const op = poolChecks(c, Math.abs(c.param("k0")));
    return pool1d(c.src(0), op, c.param("k0"), {
      stride: c.param("s0"),
      padding: c.param("p0"),
    });
  },
  POOL_2D: (c) => {
    const op = poolChecks(c, Math.abs(c.param("k0")) * Math.abs(c.param("k1")));
    return pool2d(c.src(0), op, [c.param("k0"), c.param("k1")], {
      stride: [c.param("s0"), c.param("s1")],
      padding: [c.param("p0"), c.param("p1")],
    });
  },
  UPSCALE: (c) => {
    noSourcesFrom(c, 1);
    const flags = c.param("mode");
    const mode = SCALE_MODES[flags & ~SCALE_ALIGN_CORNERS];
    // Antialiasing (GGML_SCALE_FLAG_ANTIALIAS) is not Graft's; nearest with aligned corners
    // scales by (ne - 1) / (src - 1) in ggml, which Graft's interpolate does not take.
    if (mode === undefined || (mode === "nearest" && flags !== 0)) {
      refuse(`${c.field}.op_params`, `upscale mode ${flags} (0-2, + 256 for bilinear, bicubic)`);
    }
    return interpolate(c.src(0), c.node.ne, {
      mode,
      alignCorners: (flags & SCALE_ALIGN_CORNERS) !== 0,
    });
  },
  PAD: (c) => {
    noSourcesFrom(c, 1);
    const circular = c.param("circular");
    if (circular !== 0 && circular !== 1) {
      refuse(`${c.field}.op_params`, `pad circular ${circular}`);
    }
    const side = (s: "l" | "r"): [number, number, number, number] =>
      [0, 1, 2, 3].map((d) => c.param(`${s}p${d}`)) as [number, number, number, number];
    const amounts = { left: side("l"), right: side("r") };
    // ggml-cpu wraps with (i - lp + ne) % ne: a longer left pad reads outside src0 there.
    if (circular === 1 && amounts.left.some((p, d) => p > c.src(0).ne[d]!)) {
      refuse(`${c.field}.op_params`, "PAD circular with a left pad longer than its dim");
    }
    return circular === 1 ? padCircular(c.src(0), amounts) : padExt(c.src(0), amounts);
  },
  COUNT_EQUAL: (c) => {
    noSourcesFrom(c, 2);
    // ggml-cpu's count_equal splits its row index wrongly for ne[2] or ne[3] above 1 (ops.cpp:
    // i02 = (ir - i03*ne03)/ne01): what it counts there is not the count. Matrices only.
    const [a, b] = [c.src(0), c.src(1)];
    if (a.ne[2] !== 1 || a.ne[3] !== 1) {
      refuse(c.field, `COUNT_EQUAL of ${formatShape(a.ne)} (ggml-cpu counts matrices only)`);
    }
    return countEqual(a, b);
  },
  // ggml_top_k: k is the result's ne[0]; ggml leaves the order of the k indices open (its CPU
  // swaps the first two), Graft gives them largest first: the same set.
  TOP_K: (c) => {
    noSourcesFrom(c, 1);
    return topK(c.src(0), c.node.ne[0]);
  },
  // ggml_add_id: a [n, used, tokens] + the rows of b [n, experts] that ids [used, tokens]
  // name, one f32 add each: a gather of those rows, then an add.
  ADD_ID: (c) => {
    noSourcesFrom(c, 3);
    const [a, b, ids] = [c.src(0), c.src(1), c.src(2)];
    if (
      ids.dtype !== "i32" || a.ne[0] !== b.ne[0] || a.ne[1] !== ids.ne[0] ||
      a.ne[2] !== ids.ne[1] || a.ne[3] !== 1 || b.ne[2] !== 1 || b.ne[3] !== 1 ||
      ids.ne[2] !== 1 || ids.ne[3] !== 1
    ) {
      refuse(
        c.field,
        `add_id of ${formatShape(a.ne)}, ${formatShape(b.ne)} and ${ids.dtype} ` +
          `${formatShape(ids.ne)}`,
      );
    }
    const flat = reshape(ids.isContiguous ? ids : cont(ids), [ids.ne[0] * ids.ne[1]]);
    return add(a, reshape(getRows(b, flat), [a.ne[0], a.ne[1], a.ne[2]]));
  },
  FLASH_ATTN_EXT: (c) => {
    noSourcesFrom(c, 4);
    const mask = c.optional(3);
    return flashAttnExt(c.src(0), c.src(1), c.src(2), {
      ...(mask ? { mask } : {}),
      scale: c.param("scale"),
      maxBias: c.param("max_bias"),
      softcap: c.param("logit_softcap"),
    });
  },
};

/**
 * A builder for a ggml op that has a Graft op of the same meaning in the client's mapping table
 * (`GRAFT_TO_GGML`) but no builder above: the Graft node is made directly, with the node's own
 * dtype and shape, its sources in ggml's order and its params read from ggml's fields; the
 * core's validation (`zig/validate.zig`) checks its shapes when the plan is made. Fields Graft
 * has no param for must hold ggml's default (fixed) or zero.
 */
function genericBuilder(name: GgmlOpName): Builder | null {
  const entry = (Object.entries(GRAFT_TO_GGML) as [OpName, GraftToGgml][]).find(([graft, m]) =>
    m.op === name && m.unary === undefined && m.encode === undefined && OPS[graft].core !== null
  );
  if (!entry) return null;
  const [graft, mapping] = entry;
  const info: OpInfo = OPS[graft];
  return (c) => {
    const layout = GGML_OP_PARAMS[name] ?? [];
    const used = new Set<number>();
    const params = (mapping.params ?? []).map((field) => {
      if (field === null) return 0;
      used.add(layout.find((f) => f.name === field)!.slot);
      return c.param(field);
    });
    for (const [field, value] of mapping.fixed ?? []) {
      used.add(layout.find((f) => f.name === field)!.slot);
      if (c.param(field) !== value) {
        refuse(`${c.field}.op_params`, `${name} ${field} must be ${value}`);
      }
    }
    c.node.opParams.forEach((bits, slot) => {
      if (!used.has(slot) && bits !== 0) {
        refuse(`${c.field}.op_params[${slot}]`, `${name} takes no value ${bits} there`);
      }
    });
    noSourcesFrom(c, info.arity);
    const src: Tensor[] = [];
    for (let i = 0; i < info.arity; i++) {
      const s = c.optional(i);
      if (s) src.push(s);
    }
    return new Tensor({
      dtype: wireDType(c.node, c.field),
      ne: c.node.ne,
      op: info.code as OpCode,
      src,
      params,
    });
  };
}

/** Why some ggml ops that Graft nearly has are not computed (named in the refusal). */
const NOT_COMPUTED: Readonly<Partial<Record<GgmlOpName, string>>> = {
  ARGMAX: "ggml-cpu keeps the last of tied maxima and restarts its scan after a NaN; " +
    "Graft's argmax keeps the first and skips NaN",
  MUL_MAT_ID: "Graft has no expert-indexed product",
  GET_ROWS_BACK: "Graft has no get_rows backward",
};

/** The ggml op names the server computes (views and inputs aside). */
export const SERVER_OPS: readonly string[] = [
  ...Object.keys(BUILDERS),
  ...(Object.keys(GgmlOp) as GgmlOpName[]).filter((n) =>
    !(n in BUILDERS) && !VIEW_OPS.has(GgmlOp[n]) && genericBuilder(n) !== null
  ),
];

function sameDims(a: Dims, b: readonly number[]): boolean {
  return a[0] === b[0] && a[1] === b[1] && a[2] === b[2] && a[3] === b[3];
}

/** The bytes a wire tensor's elements take when none overlap. */
function denseBytes(t: RpcTensor, dtype: DType): bigint {
  const { blockSize, blockBytes } = DTYPES[dtype];
  const elements = BigInt(t.ne[0]) * BigInt(t.ne[1]) * BigInt(t.ne[2]) * BigInt(t.ne[3]);
  return (elements / BigInt(blockSize)) * BigInt(blockBytes);
}

/** A Graft input over a wire tensor's bytes (its buffer checked, its extent inside it). */
function placedInput(session: ClientSession, t: RpcTensor, field: string): Tensor {
  const where = session.resolve(t, field);
  const tensor = new Tensor({ dtype: where.dtype, ne: t.ne, nb: t.nb, name: t.name });
  tensor.place(where.buffer.memory, Number(where.offset));
  return tensor;
}

/**
 * Translates a GRAPH_COMPUTE message into a Graft graph and plan on the session's backend.
 * Throws an RpcProtocolError (the connection is closed) for anything it cannot run exactly:
 * unknown op numbers, ids that resolve to nothing, a source computed after its consumer, data
 * outside the client's buffers, shapes Graft's builders refuse.
 */
export function translateGraph(session: ClientSession, message: RpcGraph): CompiledGraph {
  if (message.device !== 0) refuse("graph.device", `device ${message.device} (the server has 1)`);
  if (message.nodes.length > GRAPH_NODES_MAX) {
    refuse("graph.n_nodes", `${message.nodes.length} nodes (at most ${GRAPH_NODES_MAX})`);
  }
  if (message.tensors.length > GRAPH_TENSORS_MAX) {
    refuse("graph.n_tensors", `${message.tensors.length} (at most ${GRAPH_TENSORS_MAX})`);
  }
  const byId = new Map<bigint, { t: RpcTensor; index: number }>();
  message.tensors.forEach((t, index) => {
    if (t.id === 0n) refuse(`graph.tensors[${index}].id`, "0 is no tensor");
    if (!byId.has(t.id)) byId.set(t.id, { t, index });
  });
  const nodeIds = new Set<bigint>();
  for (const [i, id] of message.nodes.entries()) {
    if (id === 0n) continue;
    if (!byId.has(id)) refuse(`graph.nodes[${i}]`, `id 0x${id.toString(16)} is in no tensor`);
    nodeIds.add(id);
  }

  const done = new Map<bigint, Tensor>();
  const computed: Tensor[] = [];
  const ops = new Set<string>();
  // Sources: computed nodes by their translation; anything else as an input over its bytes.
  const tensorOf = (id: bigint, field: string): Tensor => {
    const known = done.get(id);
    if (known) return known;
    const entry = byId.get(id);
    if (!entry) refuse(field, `id 0x${id.toString(16)} is in no tensor`);
    if (nodeIds.has(id) && !VIEW_OPS.has(entry.t.op)) {
      refuse(field, `source 0x${id.toString(16)} is computed after its consumer`);
    }
    const tensor = placedInput(session, entry.t, `graph.tensors[${entry.index}]`);
    done.set(id, tensor);
    return tensor;
  };

  for (const id of message.nodes) {
    if (id === 0n || done.has(id)) continue;
    const { t, index } = byId.get(id)!;
    const field = `graph.tensors[${index}]`;
    if (t.op >= GGML_OP_COUNT) {
      refuse(`${field}.op`, `op number ${t.op} is not a ggml op of protocol 7.0.0`);
    }
    const dtype = wireDType(t, field);
    // ggml skips empty nodes; one with no bytes computes nothing here either.
    const nbytes = wireNbytes(t, dtype, field);
    if (nbytes === 0n) continue;
    // A result that overlaps itself (a zero or short stride) could have any number of elements
    // in a few bytes, and so cost unbounded compute; a dense one is bounded by the client's
    // memory. ggml's own results are always dense.
    if (!VIEW_OPS.has(t.op) && nbytes < denseBytes(t, dtype)) {
      refuse(field, `a computed tensor's elements overlap (strides [${t.nb.join(", ")}])`);
    }
    if (VIEW_OPS.has(t.op)) {
      done.set(id, placedInput(session, t, field));
      continue;
    }
    const name = ggmlOpName(t.op)!;
    const build = BUILDERS[name] ?? genericBuilder(name);
    if (!build) {
      const why = NOT_COMPUTED[name];
      refuse(
        `${field}.op`,
        `ggml op ${name} (${t.op}) is not computed by this server${why ? `: ${why}` : ""}`,
      );
    }
    ops.add(name);
    const context: BuildContext = {
      node: t,
      field,
      src: (s) => {
        const sid = t.src[s] ?? 0n;
        if (sid === 0n) refuse(`${field}.src[${s}]`, `${name} needs source ${s}`);
        return tensorOf(sid, `${field}.src[${s}]`);
      },
      optional: (s) => {
        const sid = t.src[s] ?? 0n;
        return sid === 0n ? undefined : tensorOf(sid, `${field}.src[${s}]`);
      },
      self: () => placedInput(session, t, field),
      param: (p) => readGgmlOpParam(name, t.opParams, p),
    };
    let built: Tensor;
    try {
      built = build(context);
    } catch (error) {
      if (error instanceof Error && error.name === "RpcProtocolError") throw error;
      refuse(field, `${name}: ${error instanceof Error ? error.message : String(error)}`);
    }
    if (DTYPES[built.dtype].ggmlType !== t.type || !sameDims(built.ne, t.ne)) {
      refuse(
        field,
        `${name} computes ${built.dtype} ${formatShape(built.ne)}, the node says type ${t.type} ` +
          `[${t.ne.join(", ")}]`,
      );
    }
    const result = finalPlacement(session, built, t, field);
    done.set(id, result);
    computed.push(result);
  }
  return compile(session, computed, ops);
}

/**
 * Places a node's Graft result at the node's address with ggml's strides. An op that writes
 * another tensor's memory (cpy, setRows: a Graft view of its destination) must have been
 * addressed there by the client too.
 */
function finalPlacement(
  session: ClientSession,
  built: Tensor,
  t: RpcTensor,
  field: string,
): Tensor {
  const where = session.resolve(t, field);
  if (built.viewSource) {
    const at = built.placement;
    if (
      !at || at.buffer !== where.buffer.memory || BigInt(at.offset) !== where.offset ||
      !sameDims(built.nb, t.nb)
    ) {
      refuse(field, "the node's data is not its destination's");
    }
    built.name = t.name;
    return built;
  }
  const result = new Tensor({
    dtype: built.dtype,
    ne: built.ne,
    nb: t.nb,
    op: built.op,
    src: built.src,
    params: built.params,
    name: t.name,
  });
  result.place(where.buffer.memory, Number(where.offset));
  return result;
}

/** Gives intermediates scratch memory, builds the graph and its plan. */
function compile(session: ClientSession, computed: Tensor[], ops: Set<string>): CompiledGraph {
  if (computed.length === 0) {
    return { graph: null, plan: null, ops, dispose: () => {}, [Symbol.dispose]: () => {} };
  }
  const graph = Graph.build(...computed);
  const unplaced = [...graph.leafs, ...graph.nodes].filter((t) =>
    !t.viewSource && t.placement === null
  );
  let scratch: CpuBuffer | null = null;
  let scratchBytes = 0n;
  if (unplaced.length > 0) {
    const align = session.alignment;
    let size = 0;
    const offsets = unplaced.map((t) => {
      const at = Math.ceil(size / align) * align;
      size = at + t.nbytes;
      return at;
    });
    scratchBytes = BigInt(size);
    if (!session.reserve(scratchBytes)) {
      refuse("graph", `scratch of ${size} bytes passes this client's memory cap`);
    }
    try {
      scratch = session.backend.allocBuffer(Math.max(1, size));
    } catch (error) {
      session.release(scratchBytes);
      throw error;
    }
    unplaced.forEach((t, i) => t.place(scratch!, offsets[i]!));
  }
  let plan: CpuPlan;
  try {
    plan = session.backend.graphPlanCreate(graph, { fuse: false });
  } catch (error) {
    scratch?.dispose();
    session.release(scratchBytes);
    refuse("graph", `the core refused the graph: ${(error as Error).message}`);
  }
  // The plan's work memory is the server's too: it counts against the client's cap.
  const workBytes = BigInt(plan.workSize);
  if (!session.reserve(workBytes)) {
    plan.dispose();
    scratch?.dispose();
    session.release(scratchBytes);
    refuse("graph", `a plan needing ${plan.workSize} bytes of work memory passes the memory cap`);
  }
  let disposed = false;
  const dispose = (): void => {
    if (disposed) return;
    disposed = true;
    plan.dispose();
    scratch?.dispose();
    session.release(scratchBytes + workBytes);
  };
  return { graph, plan, ops, dispose, [Symbol.dispose]: dispose };
}
