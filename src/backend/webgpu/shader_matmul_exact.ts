/**
 * WGSL for mulMat with ggml's arithmetic (`mulMat(a, b, { ggml: true })`) on q8_0, q4_0 and
 * q4_1 weights: the bits of the CPU backend's AVX2 build, which are ggml's (zig/kernels/
 * gemv_quant.zig, ggml_vec_dot_q8_0_q8_0 / _q4_0_q8_0 / _q4_1_q8_1 of ggml-cpu's x86 AVX2
 * code), at every column count.
 *
 * As ggml, each column of S1 is first quantized per block of 32 (q8_1 for q4_1 weights, q8_0
 * otherwise; zig/quant.zig's quantize_activation_block): d = absmax / 127 kept as f16, the
 * quants x * (127 / absmax) rounded half to even, and q8_1's s = d * (sum of the quants) as f16
 * (d unrounded). Then per weight row the dot is, block after block in order:
 * - 8 lanes, lane j the exact integer sum of the block's elements 4j..4j+3 (weight quant times
 *   activation quant; q4 nibbles: low ones are elements 0-15, high ones 16-31), converted to f32
 *   (exact: |sum| < 2^17);
 * - acc_j = fma(d_w * d_a, lane_j, acc_j) with the scale product rounded first and the
 *   multiply-add rounded once (_mm256_fmadd_ps; `fma_exact`, lavapipe's `fma()` being unfused);
 * - for q4_1 beside it summs = fma(m_w, s_a, summs) (GCC contracts ggml's `summs += m * s`);
 * and the result is hsum_float_8(acc) = ((acc0 + acc4) + (acc2 + acc6)) + ((acc1 + acc5) +
 * (acc3 + acc7)), plus summs for q4_1. ggml's AVX2 loops keep one accumulator (no unrolling into
 * several), so each lane is one sequential chain over the blocks: the parallelism is rows,
 * lanes and columns, never blocks.
 *
 * A workgroup of 256 threads computes {@link EXACT_ROWS} rows by 1 or {@link EXACT_COLUMNS}
 * columns of D. Thread t takes row t % 32 and lane t / 32 (so a SIMD group of consecutive
 * threads runs one lane of 8 rows, and the extra summs chains of q4_1 — thread (row, lane)
 * also runs column `lane`'s — fall on whole groups), and holds one accumulator per column.
 * K is walked in chunks of blocks: the workgroup quantizes the chunk of its columns into
 * workgroup memory (a block per thread), then every thread runs its chains over the chunk. At
 * the end the 8 lanes of each (row, column) meet in workgroup memory and one thread sums them in
 * hsum_float_8's order (each partial sum through `opaque`, so the compiler keeps the order).
 *
 * Exact for finite activations; a block of S1 holding an infinity or NaN quantizes here as the
 * finite formula gives (the CPU takes ggml's scalar reference there), so its output's bits,
 * an infinity or NaN either way, may differ.
 * @module
 */

import { LimitError, Status } from "../../errors.ts";
import type { Tensor } from "../../tensor.ts";
import type { Kernel } from "./kernels.ts";
import { weightBindings } from "./shader_quant.ts";
import { EXACT_WGSL } from "./wgsl_exact.ts";
import { PARAMS_WGSL } from "./wgsl_common.ts";

/** The weight dtypes this kernel takes. */
export type ExactQuantDType = "q8_0" | "q4_0" | "q4_1";

const DTYPES: readonly ExactQuantDType[] = ["q8_0", "q4_0", "q4_1"];

/** Output rows of one workgroup. */
export const EXACT_ROWS = 32;
/** Columns of one workgroup when S1 has more than one (decode, one column, takes 1). */
export const EXACT_COLUMNS = 8;
/** ggml's 8 f32 lanes per block. */
const LANES = 8;
const THREADS = EXACT_ROWS * LANES;
/** Workgroups per grid dimension (WebGPU's default maxComputeWorkgroupsPerDimension). */
const GROUPS_MAX = 65535;

function isExactQuant(dtype: string): dtype is ExactQuantDType {
  return (DTYPES as readonly string[]).includes(dtype);
}

/**
 * Each thread's 32-bit word of weight quants for its lane j (elements 4j..4j+3) of the block at
 * byte `a`, and the integer dot of that word with the lane's packed activation quants `y`.
 */
const LANE_WGSL: Readonly<Record<ExactQuantDType, string>> = {
  q8_0: `
fn lane_word(a: u32, lane: u32) -> u32 {
  return S0_u32(a + 2u + 4u * lane);
}
fn lane_dot(x: u32, y: u32) -> i32 {
  return i8_of(x, 0u) * i8_of(y, 0u) + i8_of(x, 1u) * i8_of(y, 1u) +
    i8_of(x, 2u) * i8_of(y, 2u) + i8_of(x, 3u) * i8_of(y, 3u);
}`,
  q4_0: `
fn lane_word(a: u32, lane: u32) -> u32 {
  return (S0_u32(a + 2u + 4u * (lane & 3u)) >> (4u * (lane >> 2u))) & 0x0f0f0f0fu;
}
// The nibbles less 8 (q4_0's quants).
fn lane_dot(x: u32, y: u32) -> i32 {
  return (i32(x & 0xfu) - 8) * i8_of(y, 0u) + (i32((x >> 8u) & 0xfu) - 8) * i8_of(y, 1u) +
    (i32((x >> 16u) & 0xfu) - 8) * i8_of(y, 2u) + (i32(x >> 24u) - 8) * i8_of(y, 3u);
}`,
  q4_1: `
fn lane_word(a: u32, lane: u32) -> u32 {
  return (S0_u32(a + 4u + 4u * (lane & 3u)) >> (4u * (lane >> 2u))) & 0x0f0f0f0fu;
}
fn lane_dot(x: u32, y: u32) -> i32 {
  return i32(x & 0xfu) * i8_of(y, 0u) + i32((x >> 8u) & 0xfu) * i8_of(y, 1u) +
    i32((x >> 16u) & 0xfu) * i8_of(y, 2u) + i32(x >> 24u) * i8_of(y, 3u);
}`,
};

/**
 * The kernel for weights of `dtype` and `columns` (1 or {@link EXACT_COLUMNS}) columns of S1
 * per workgroup.
 */
export function exactQuantShader(dtype: ExactQuantDType, columns: number): string {
  const C = columns;
  // Blocks of a chunk: one per thread and column, so each thread quantizes at most one.
  const B = THREADS / C;
  const minTerm = dtype === "q4_1";
  // After the chunks, yq holds the lanes' accumulators and ys the summs chains.
  const words = Math.max(B * C * LANES, C * LANES * EXACT_ROWS);
  return `${PARAMS_WGSL}
${weightBindings(dtype, ["f32"])}
${EXACT_WGSL}
${LANE_WGSL[dtype]}
const ROWS = ${EXACT_ROWS}u;
const C = ${C}u;
const B = ${B}u;
// Chunk blocks' packed activation quants (8 words a block, columns apart by B blocks), their
// d and (q8_1) s as f32.
var<workgroup> yq: array<u32, ${words}>;
var<workgroup> yd: array<f32, ${B * C}>;
var<workgroup> ys: array<f32, ${B * C}>;

// Block j of column c of the chunk from the 32 f32s at byte x of S1: quantize_activation_block.
fn quantize_block(c: u32, j: u32, x: u32) {
  var amax = 0.0;
  for (var e = 0u; e < 32u; e = e + 1u) {
    amax = max(amax, abs(S1_f32(x + 4u * e)));
  }
  let id = select(0.0, 127.0 / amax, amax != 0.0);
  var sum = 0;
  for (var w = 0u; w < 8u; w = w + 1u) {
    var word = 0u;
    for (var t = 0u; t < 4u; t = t + 1u) {
      let q = i32(round(S1_f32(x + 16u * w + 4u * t) * id));
      sum = sum + q;
      word = word | ((bitcast<u32>(q) & 0xffu) << (8u * t));
    }
    yq[(c * B + j) * 8u + w] = word;
  }
  let d = amax / 127.0;
  yd[c * B + j] = f16_to_f32(f32_to_f16(d));
  ${minTerm ? "ys[c * B + j] = f16_to_f32(f32_to_f16(d * f32(sum)));" : ""}
}

@compute @workgroup_size(${THREADS})
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let K = P.t[1].ne.x;
  let M = P.t[1].ne.y;
  let N = P.t[2].ne.y;
  let nb0 = P.t[1].nb.x;
  let i2 = wid.z % P.t[2].ne.z;
  let i3 = wid.z / P.t[2].ne.z;
  let a2 = i2 / (P.t[2].ne.z / P.t[1].ne.z);
  let a3 = i3 / (P.t[2].ne.w / P.t[1].ne.w);
  let m0 = wid.x * ROWS;
  let n0 = wid.y * C;
  let nc = min(C, N - n0);
  let row = lid % ROWS;
  let lane = lid / ROWS;
  let m = m0 + row;
  let rb = at(1u, vec4<u32>(0u, min(m, M - 1u), a2, a3));
  let blocks = K / 32u;
  var acc: array<f32, ${C}>;
  for (var c = 0u; c < C; c = c + 1u) {
    acc[c] = 0.0;
  }
  var summs = 0.0;
  for (var b0 = 0u; b0 < blocks; b0 = b0 + B) {
    let nbk = min(B, blocks - b0);
    workgroupBarrier();
    let qc = lid / B;
    let qj = lid % B;
    if (qc < nc && qj < nbk) {
      quantize_block(qc, qj, at(2u, vec4<u32>((b0 + qj) * 32u, n0 + qc, i2, i3)));
    }
    workgroupBarrier();
    if (m < M) {
      for (var j = 0u; j < nbk; j = j + 1u) {
        let a = rb + (b0 + j) * nb0;
        let x = lane_word(a, lane);
        let dx = S0_f16(a);
        for (var c = 0u; c < C; c = c + 1u) {
          if (c < nc) {
            let xy = f32(lane_dot(x, yq[(c * B + j) * 8u + lane]));
            acc[c] = fma_exact(dx * yd[c * B + j], xy, acc[c]);
          }
        }
        ${
    minTerm
      ? `if (lane < nc) {
          summs = fma_exact(S0_f16(a + 2u), ys[lane * B + j], summs);
        }`
      : ""
  }
      }
    }
  }
  workgroupBarrier();
  for (var c = 0u; c < C; c = c + 1u) {
    yq[(c * 8u + lane) * ROWS + row] = bitcast<u32>(acc[c]);
  }
  ${minTerm ? "if (lane < C) { ys[lane * ROWS + row] = summs; }" : ""}
  workgroupBarrier();
  if (lane < nc && m < M) {
    let base = lane * 8u * ROWS + row;
    var v: array<f32, 8>;
    for (var i = 0u; i < 8u; i = i + 1u) {
      v[i] = bitcast<f32>(yq[base + i * ROWS]);
    }
    // hsum_float_8: the high half onto the low one, then lanes 2-3 onto 0-1, then lane 1 onto 0.
    let h0 = opaque(v[0] + v[4]);
    let h1 = opaque(v[1] + v[5]);
    let h2 = opaque(v[2] + v[6]);
    let h3 = opaque(v[3] + v[7]);
    let sum = opaque(opaque(h0 + h2) + opaque(h1 + h3));
    D_set_f32(at(0u, vec4<u32>(m, n0 + lane, i2, i3)), ${
    minTerm ? "sum + ys[lane * ROWS + row]" : "sum"
  });
  }
}`;
}

/**
 * The kernel of a mulMat node that asks for ggml's arithmetic (params[1] = 1, see
 * `mulMat`'s `ggml` option) with q8_0, q4_0 or q4_1 weights and S1 rows of adjacent f32s (the
 * CPU's gemv_quant.zig path); null for any other node, which keeps the other kernels.
 */
export function exactQuantKernel(node: Tensor): Kernel | null {
  const [a, b] = node.src as [Tensor, Tensor];
  if (node.params[1] !== 1 || !isExactQuant(a.dtype) || b.nb[0] !== 4) return null;
  const columns = b.ne[1] === 1 ? 1 : EXACT_COLUMNS;
  const x = Math.ceil(a.ne[1] / EXACT_ROWS);
  const y = Math.ceil(b.ne[1] / columns);
  const batches = b.ne[2] * b.ne[3];
  if (x > GROUPS_MAX || y > GROUPS_MAX || batches > GROUPS_MAX) {
    throw new LimitError(
      Status.limitReached,
      `webgpu: mulMat ${node.label} needs a ${x}x${y}x${batches} workgroup grid`,
    );
  }
  const dtype = a.dtype;
  return {
    key: `mulMatExact:${dtype}:${columns}`,
    source: () => exactQuantShader(dtype, columns),
    tensors: [node, a, b],
    status: false,
    count: 0,
    floats: [],
    workgroups: [x, y, batches],
  };
}
