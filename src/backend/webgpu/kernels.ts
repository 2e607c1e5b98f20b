/**
 * Chooses the WGSL kernel for each compute node: the shader (and its cache key), the tensors it
 * binds, its parameters and its workgroup grid.
 * @module
 */

import { DTYPES, holdsRawBytes } from "../../dtype.ts";
import { GraftError, LimitError, Status } from "../../errors.ts";
import { Op, opName } from "../../op.ts";
import type { Tensor } from "../../tensor.ts";
import { cpyShader, getRowsShader, setRowsShader } from "./shader_copy.ts";
import {
  type BinaryKind,
  binaryShader,
  repeatShader,
  unaryExpressions,
  type UnaryKind,
  unaryShader,
} from "./shader_elementwise.ts";
import { MATMUL_TILE, matmulShader } from "./shader_matmul.ts";
import { exactQuantKernel } from "./shader_matmul_exact.ts";
import { exactKQuantKernel } from "./shader_matmul_exact_k.ts";
import { f16ExactTakes, matmulF16ExactKernel } from "./shader_matmul_f16_exact.ts";
import { type RowKind, rowShader, sumShader } from "./shader_rows.ts";
import { ropeShader } from "./shader_rope.ts";
import { indexingKernel } from "./kernels_indexing.ts";
import { convTransposeShader, im2colShader } from "./shader_conv.ts";
import { poolShader } from "./shader_pool.ts";
import { type InterpolateKind, interpolateShader, timestepShader } from "./shader_interpolate.ts";
import { viewWriteKernel } from "./shader_view_write.ts";
import { groupNormShader, l2NormShader } from "./shader_group_norm.ts";
import { ATTENTION_DK_MAX, ATTENTION_DV_PER_THREAD, flashAttnShader } from "./shader_attention.ts";
import {
  isWeightDType,
  MATVEC_COLS,
  MATVEC_MAX_N,
  MATVEC_ROWS,
  matvecShader,
} from "./shader_quant.ts";
import { WORKGROUP_SIZE } from "./wgsl_common.ts";
import { mathExpressions, type MathKind, mathShader } from "./shader_unary.ts";
import {
  countEqualShader,
  cumsumShader,
  type RowReduceKind,
  rowReduceShader,
} from "./shader_reduce_rows.ts";

/** Workgroups per grid dimension (WebGPU's default maxComputeWorkgroupsPerDimension). */
export const GROUPS_MAX = 65535;

/** How to compute one node. */
export interface Kernel {
  /** Pipeline cache key: equal keys have equal shaders. */
  readonly key: string;
  /** Builds the WGSL (only on a cache miss). */
  readonly source: () => string;
  /** Destination first, then the sources, bound at bindings 1, 2, ... */
  readonly tensors: readonly Tensor[];
  /** Also binds the backend's status word after the tensors. */
  readonly status: boolean;
  /** `P.u.x`: the items of a flat kernel, the rows of a row kernel. */
  readonly count: number;
  /** `P.f`, then `P.g`: op parameters (at most 8). */
  readonly floats: readonly number[];
  readonly workgroups: readonly [number, number, number];
  /**
   * Which of `tensors` the uniform slot describes, in slot order (default: all of them). A
   * kernel with five tensors leaves out its contiguous destination, whose byte offset then goes
   * to `P.u.y`.
   */
  readonly described?: readonly number[];
  /** `P.u.z`, `P.u.w`: extra u32 parameters. */
  readonly uints?: readonly number[];
}

/** A grid of `groups` workgroups folded into two dimensions. */
export function grid(groups: number, what: string): [number, number, number] {
  const x = Math.min(groups, GROUPS_MAX);
  const y = Math.ceil(groups / x);
  if (y > GROUPS_MAX) {
    throw new LimitError(Status.limitReached, `webgpu: ${what} needs ${groups} workgroups`);
  }
  return [x, y, 1];
}

/**
 * The grid of a mulMat `node` over tiles of `rows` x `cols` of D: one workgroup per tile and
 * batch (the three products' kernels share it).
 */
export function matmulGrid(node: Tensor, rows: number, cols: number): [number, number, number] {
  const [a, b] = node.src as [Tensor, Tensor];
  const x = Math.ceil(a.ne[1] / rows);
  const y = Math.ceil(b.ne[1] / cols);
  const batches = b.ne[2] * b.ne[3];
  if (x > GROUPS_MAX || y > GROUPS_MAX || batches > GROUPS_MAX) {
    throw new LimitError(
      Status.limitReached,
      `webgpu: mulMat ${node.label} needs a ${x}x${y}x${batches} workgroup grid`,
    );
  }
  return [x, y, batches];
}

const binaryKinds: Partial<Record<number, BinaryKind>> = {
  [Op.add]: "add",
  [Op.sub]: "sub",
  [Op.mul]: "mul",
  [Op.div]: "div",
};

/** Ops with a WGSL expression in shader_unary.ts, by op code. */
const mathKinds: Partial<Record<number, MathKind>> = Object.fromEntries(
  (Object.keys(mathExpressions) as MathKind[]).map((kind) => [Op[kind], kind]),
);

const rowReduceKinds: Partial<Record<number, RowReduceKind>> = {
  [Op.sumRows]: "sumRows",
  [Op.maxRows]: "maxRows",
  [Op.minRows]: "minRows",
  [Op.argmax]: "argmax",
};

/** The f32 or f16 source of a float op; anything else is no kernel here. */
function requireFloat(node: Tensor, a: Tensor): void {
  if (a.dtype !== "f32" && a.dtype !== "f16") {
    throw new GraftError(`webgpu: ${opName(node.op)} ${node.label} does not take ${a.dtype}`);
  }
}

/** The kernels of ggml's unary math, row reductions and scans (codes 25-69), or null. */
function mathKernel(node: Tensor): Kernel | null {
  const a = node.src[0];
  const math = mathKinds[node.op];
  if (math && a) {
    requireFloat(node, a);
    const key = `math:${math}:${a.dtype}`;
    return flat(key, () => mathShader(math, a.dtype), node, [a], node.params);
  }
  const reduce = rowReduceKinds[node.op];
  if (reduce && a) {
    requireFloat(node, a);
    return {
      key: `rowReduce:${reduce}:${a.dtype}`,
      source: () => rowReduceShader(reduce, a.dtype),
      tensors: [node, a],
      status: false,
      count: a.nrows,
      floats: [],
      workgroups: grid(a.nrows, `${opName(node.op)} ${node.label}`),
    };
  }
  if (node.op === Op.cumsum && a) {
    requireFloat(node, a);
    const kernel = flat(`cumsum:${a.dtype}`, () => cumsumShader(a.dtype), node, [a]);
    return {
      ...kernel,
      count: a.nrows,
      workgroups: grid(Math.ceil(a.nrows / WORKGROUP_SIZE), `cumsum ${node.label}`),
    };
  }
  if (node.op === Op.countEqual && a) {
    return {
      key: "countEqual",
      source: countEqualShader,
      tensors: [node, ...node.src.slice(0, 2)],
      status: false,
      count: a.nelements,
      floats: [],
      workgroups: [1, 1, 1],
    };
  }
  return null;
}

/** Ops with a WGSL expression in shader_elementwise.ts, by op code. */
const unaryKinds: Partial<Record<number, UnaryKind>> = Object.fromEntries(
  (Object.keys(unaryExpressions) as UnaryKind[]).map((kind) => [Op[kind], kind]),
);

function flat(
  key: string,
  source: () => string,
  node: Tensor,
  sources: readonly Tensor[],
  floats: readonly number[] = [],
): Kernel {
  const count = node.nelements;
  return {
    key,
    source,
    tensors: [node, ...sources],
    status: false,
    count,
    floats,
    workgroups: grid(Math.ceil(count / WORKGROUP_SIZE), `${opName(node.op)} ${node.label}`),
  };
}

function rows(kind: RowKind, node: Tensor, sources: readonly Tensor[], eps: number): Kernel {
  const a = sources[0]!;
  return {
    key: `rows:${kind}`,
    source: () => rowShader(kind),
    tensors: [node, ...sources],
    status: false,
    count: a.nrows,
    floats: [eps],
    workgroups: grid(a.nrows, `${opName(node.op)} ${node.label}`),
  };
}

// bf16 and quantized weights with few src1 columns (token generation) take the matrix-vector
// kernel, which decodes each weight once per column tile; more columns take the tiles. A node
// asking for ggml's arithmetic on q8_0/q4_0/q4_1/q5_0/q5_1 weights takes shader_matmul_exact.ts's
// kernel, on q4_K/q5_K/q6_K weights shader_matmul_exact_k.ts's, on f16 weights
// shader_matmul_f16_exact.ts's (all ggml-cpu's AVX2 order, bit for bit).
function matmul(node: Tensor): Kernel {
  const exact = exactQuantKernel(node) ?? exactKQuantKernel(node);
  if (exact) return exact;
  if (f16ExactTakes(node)) return matmulF16ExactKernel(node);
  const [a, b] = node.src as [Tensor, Tensor];
  const vector = isWeightDType(a.dtype) && b.ne[1] <= MATVEC_MAX_N;
  const [rows, cols] = vector ? [MATVEC_ROWS, MATVEC_COLS] : [MATMUL_TILE, MATMUL_TILE];
  const workgroups = matmulGrid(node, rows, cols);
  const dtype = a.dtype;
  return {
    key: vector ? `mulMatVec:${dtype}` : `mulMat:${dtype}`,
    source: vector && isWeightDType(dtype) ? () => matvecShader(dtype) : () => matmulShader(dtype),
    tensors: [node, a, b],
    status: false,
    count: 0,
    floats: [],
    workgroups,
  };
}

// One item per position and rotated pair, and one per copied element of each row (see
// shader_rope.ts). P.f: nDims, ggml's theta_scale (powf(freqBase, -2.0f/nDims), rounded as the CPU's), freqScale, extFactor;
// P.g: the scale of cos and sin (attnFactor, times YaRN's 1 + 0.1 logf(1/freqScale) when
// extFactor is not 0) and YaRN's corr dims. The mode, dtype and frequency factors select the
// shader.
function rope(node: Tensor): Kernel {
  const [a, positions, factors] = node.src as [Tensor, Tensor, Tensor | undefined];
  const [nDims, mode, freqBase, freqScale, extFactor, attnFactor, betaFast, betaSlow, nCtxOrig] =
    node.params as number[] as [
      number,
      number,
      number,
      number,
      number,
      number,
      number,
      number,
      number,
    ];
  const f = Math.fround;
  const thetaScale = f(Math.pow(f(freqBase), f(-2 / nDims)));
  // ggml_rope_yarn_corr_dims and rope_yarn's magnitude, in f32 as ggml (logf as the rounded log).
  const corrDim = (nRot: number): number =>
    f(
      f(nDims * f(Math.log(f(f(nCtxOrig) / f(f(f(nRot) * 2) * f(Math.PI)))))) /
        f(2 * f(Math.log(f(freqBase)))),
    );
  const start = Math.floor(corrDim(betaFast)), end = Math.ceil(corrDim(betaSlow));
  const low = 0 > start ? 0 : start, high = nDims - 1 < end ? nDims - 1 : end;
  // 1.0f + 0.1f*logf(...), which GCC contracts: the product is exact in f64, so one f64 sum
  // rounded to f32 is the fused result (but for a double rounding).
  const yarn = f(Math.fround(0.1) * f(Math.log(f(1 / f(freqScale)))) + 1);
  const mscale = f(extFactor) !== 0 ? f(f(attnFactor) * yarn) : f(attnFactor);
  const count = (nDims / 2) * a.ne[2] * a.ne[3] + a.nrows * (a.ne[0] - nDims);
  const kind = mode === 2 ? "neox" : "normal";
  const dtype = node.dtype as "f32" | "f16";
  return {
    key: `rope:${kind}:${dtype}:${factors ? "factors" : "plain"}`,
    source: () => ropeShader(kind, dtype, factors !== undefined),
    tensors: factors ? [node, a, positions, factors] : [node, a, positions],
    status: false,
    count,
    floats: [nDims, thetaScale, f(freqScale), f(extFactor), mscale, low, high],
    workgroups: grid(Math.ceil(count / WORKGROUP_SIZE), `rope ${node.label}`),
  };
}

/**
 * ALiBi's m0, m1 and n_head_log2 for `heads` heads (ggml_soft_max_ext, ggml_flash_attn_ext):
 * head h's slope is m0^(h+1) below n_head_log2, else m1^(2(h - n_head_log2) + 1). Without
 * maxBias m0 = m1 = 1, so every slope is exactly 1.
 */
function alibi(maxBias: number, heads: number): [number, number, number] {
  const log2 = 2 ** Math.floor(Math.log2(heads));
  if (!(maxBias > 0)) return [1, 1, log2];
  return [2 ** (-maxBias / log2), 2 ** (-(maxBias / 2) / log2), log2];
}

// One workgroup per query row (shader_attention.ts); the slot describes q, k, v and the mask.
function flashAttn(node: Tensor): Kernel {
  const [q, k, v, mask] = node.src as [Tensor, Tensor, Tensor, Tensor | undefined];
  const [scale, maxBias, softcap] = node.params as [number, number, number];
  if (q.ne[0] > ATTENTION_DK_MAX || v.ne[0] > ATTENTION_DV_PER_THREAD * WORKGROUP_SIZE) {
    throw new LimitError(
      Status.limitReached,
      `webgpu: flashAttnExt ${node.label} has head dims ${q.ne[0]}/${v.ne[0]} (at most ` +
        `${ATTENTION_DK_MAX}/${ATTENTION_DV_PER_THREAD * WORKGROUP_SIZE})`,
    );
  }
  const [m0, m1, log2] = alibi(maxBias, q.ne[2]);
  const maskKey = mask ? mask.dtype : "none";
  const rows = node.nrows;
  return {
    key: `flashAttn:${k.dtype}:${v.dtype}:${maskKey}`,
    source: () => flashAttnShader(k.dtype, v.dtype, mask ? mask.dtype : null),
    tensors: [node, ...node.src],
    status: false,
    count: rows,
    floats: [softcap !== 0 ? scale / softcap : scale, softcap, m0, m1],
    uints: [log2],
    workgroups: grid(rows, `flashAttnExt ${node.label}`),
    described: node.src.map((_, i) => i + 1),
  };
}

/**
 * bf16 and block-quantized tensors enter shaders only as getRows' table and mulMat's weights
 * (src0) of a dtype `shader_quant.ts` decodes, each row's blocks adjacent (nb[0] one block).
 */
function requireDecodable(node: Tensor): void {
  for (const t of [node, ...node.src]) {
    if (!holdsRawBytes(t.dtype)) continue;
    // i64 row indices are read as two words each (shader_copy.ts).
    const rowIndices = (node.op === Op.getRows || node.op === Op.setRows) && t === node.src[1];
    if (rowIndices && t.dtype === "i64") continue;
    // countEqual's i64 count is written as two words (shader_reduce_rows.ts).
    if (node.op === Op.countEqual && t === node && t.dtype === "i64") continue;
    const weights = (node.op === Op.getRows || node.op === Op.mulMat) && t === node.src[0];
    if (!weights || !isWeightDType(t.dtype)) {
      throw new GraftError(
        `webgpu: ${opName(node.op)} ${node.label} does not take ${t.dtype} ${t.label}`,
      );
    }
    if (t.nb[0] !== DTYPES[t.dtype].blockBytes) {
      throw new GraftError(
        `webgpu: ${opName(node.op)} ${node.label} needs the blocks of ${t.label} adjacent ` +
          `(nb[0] = ${DTYPES[t.dtype].blockBytes}, not ${t.nb[0]})`,
      );
    }
  }
}

/** The kernel computing `node` (a compute node: not a view). */
export function kernelFor(node: Tensor): Kernel {
  requireDecodable(node);
  const src = node.src;
  const binary = binaryKinds[node.op];
  if (binary) {
    const dtype = node.dtype;
    if (dtype !== "f32" && dtype !== "f16") {
      throw new GraftError(`webgpu: ${opName(node.op)} ${node.label} does not take ${dtype}`);
    }
    // An f16 src0 with an f32 src1 (into f16 or f32) as well, as the CPU (binary-ops.cpp).
    const [a, b] = [src[0]!.dtype, src[1]!.dtype];
    const key = `binary:${binary}:${dtype}:${a}:${b}`;
    return flat(key, () => binaryShader(binary, dtype, [a, b]), node, src.slice(0, 2));
  }
  const unary = unaryKinds[node.op];
  if (unary) {
    const dtype = node.dtype;
    if (dtype !== "f32" && dtype !== "f16") {
      throw new GraftError(`webgpu: ${opName(node.op)} ${node.label} does not take ${dtype}`);
    }
    const key = `unary:${unary}:${dtype}`;
    return flat(key, () => unaryShader(unary, dtype), node, src.slice(0, 1), node.params);
  }
  const math = mathKernel(node);
  if (math) return math;
  const indexing = indexingKernel(node);
  if (indexing) return indexing;
  const viewWrite = viewWriteKernel(node);
  if (viewWrite) return viewWrite;
  const a = src[0];
  if (!a) throw new GraftError(`webgpu: ${opName(node.op)} ${node.label} has no source`);
  switch (node.op) {
    case Op.repeat:
      return flat(`repeat:${a.dtype}`, () => repeatShader(a.dtype), node, [a]);
    case Op.cpy:
    case Op.cont:
      return flat(`cpy:${a.dtype}:${node.dtype}`, () => cpyShader(a.dtype, node.dtype), node, [a]);
    case Op.getRows: {
      const index = src[1]!.dtype;
      const kernel = flat(
        `getRows:${a.dtype}:${index}`,
        () => getRowsShader(a.dtype, index),
        node,
        src,
      );
      return { ...kernel, status: true };
    }
    case Op.setRows: {
      const [rows, indices] = src as [Tensor, Tensor];
      return {
        key: `setRows:${node.dtype}:${rows.dtype}:${indices.dtype}`,
        source: () => setRowsShader(node.dtype, rows.dtype, indices.dtype),
        tensors: [node, rows, indices],
        status: true,
        count: rows.nelements,
        floats: [],
        workgroups: grid(Math.ceil(rows.nelements / WORKGROUP_SIZE), `setRows ${node.label}`),
      };
    }
    case Op.sum:
      return {
        key: "sum",
        source: sumShader,
        tensors: [node, a],
        status: false,
        count: a.nelements,
        floats: [],
        workgroups: [1, 1, 1],
      };
    case Op.mean:
      return rows("mean", node, [a], 0);
    case Op.norm:
      return rows("norm", node, [a], node.params[0] ?? 1e-5);
    case Op.rmsNorm:
      return rows("rmsNorm", node, [a], node.params[0] ?? 1e-6);
    case Op.softmax: {
      const kernel = src.length > 1
        ? rows("softmaxMask", node, src.slice(0, 2), node.params[0] ?? 1)
        : rows("softmax", node, [a], node.params[0] ?? 1);
      return { ...kernel, floats: [node.params[0] ?? 1, ...alibi(node.params[1] ?? 0, a.ne[2])] };
    }
    case Op.mulMat:
      return matmul(node);
    case Op.rope:
      return rope(node);
    case Op.flashAttnExt:
      return flashAttn(node);
    case Op.l2Norm:
      return {
        key: "l2Norm",
        source: l2NormShader,
        tensors: [node, a],
        status: false,
        count: a.nrows,
        floats: [node.params[0] ?? 1e-12],
        workgroups: grid(a.nrows, `l2Norm ${node.label}`),
      };
    case Op.groupNorm: {
      const groups = node.params[0] ?? 1;
      const items = groups * a.ne[3];
      return {
        key: "groupNorm",
        source: groupNormShader,
        tensors: [node, a],
        status: false,
        count: items,
        floats: [node.params[1] ?? 1e-6],
        uints: [groups, Math.ceil(a.ne[2] / groups)],
        workgroups: grid(items, `groupNorm ${node.label}`),
      };
    }
    case Op.interpolate: {
      // The CPU's scale factors and pixel offset, in f32 (kernels/interpolate.zig).
      const mode = node.params[0] ?? 0;
      const f = Math.fround;
      const sf = node.ne.map((n, d) => f(n / a.ne[d]!));
      let offset = 0.5;
      if (mode & 256) {
        offset = 0;
        for (const d of [0, 1]) {
          if (node.ne[d]! > 1 && a.ne[d]! > 1) sf[d] = f((node.ne[d]! - 1) / (a.ne[d]! - 1));
        }
      }
      const bits = new Uint32Array(new Float32Array([offset]).buffer)[0]!;
      const kinds: readonly InterpolateKind[] = ["nearest", "bilinear", "bicubic"];
      const kind = kinds[mode & 0xff];
      if (!kind) throw new GraftError(`webgpu: interpolate ${node.label} has mode ${mode}`);
      const kernel = flat(
        `interpolate:${kind}`,
        () => interpolateShader(kind),
        node,
        [a],
        sf,
      );
      return { ...kernel, uints: [bits] };
    }
    case Op.timestepEmbedding: {
      const [dim, maxPeriod] = node.params as [number, number];
      const kernel = flat("timestep", timestepShader, node, [a], [
        Math.fround(Math.log(maxPeriod)),
      ]);
      return { ...kernel, uints: [dim] };
    }
    case Op.convTranspose1d:
    case Op.convTranspose2d: {
      const is2D = node.op === Op.convTranspose2d;
      const kernel = flat(
        `convTranspose:${a.dtype}:${is2D ? 2 : 1}`,
        () => convTransposeShader(a.dtype, is2D),
        node,
        src,
      );
      return { ...kernel, uints: [node.params[0] ?? 1] };
    }
    case Op.pool1d:
    case Op.pool2d: {
      const is2D = node.op === Op.pool2d;
      const p = node.params;
      // (k0, k1, s0, s1) and (p0, p1); 1D has one row per window.
      const [k0, k1, s0, s1, p0, p1] = is2D
        ? [p[1]!, p[2]!, p[3]!, p[4]!, p[5]!, p[6]!]
        : [p[1]!, 1, p[2]!, 1, p[3]!, 0];
      const average = p[0] === 1;
      const kernel = flat(
        `pool:${a.dtype}:${average ? "avg" : "max"}:${is2D ? 2 : 1}`,
        () => poolShader(a.dtype, average, is2D),
        node,
        [a],
        [k0, k1, s0, s1],
      );
      return { ...kernel, uints: [p0, p1] };
    }
    case Op.im2col: {
      // params s0, s1, p0, p1, d0, d1, is2D, planar (shader_conv.ts).
      const [s0, s1, p0, p1, d0, d1, is2D, planar] = node.params as number[];
      const kernel = flat(
        `im2col:${node.dtype}:${is2D ? 2 : 1}:${planar ? "planar" : "ggml"}`,
        () => im2colShader(node.dtype, is2D !== 0, (planar ?? 0) !== 0),
        node,
        src,
        [s0!, s1!, p0!, p1!],
      );
      return { ...kernel, uints: [d0!, d1!] };
    }
    default:
      throw new GraftError(`webgpu: op ${opName(node.op)} is not supported (${node.label})`);
  }
}
