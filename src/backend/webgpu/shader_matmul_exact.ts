/**
 * WGSL for mulMat with ggml's arithmetic (`mulMat(a, b, { ggml: true })`) on q8_0, q4_0, q4_1,
 * q5_0 and q5_1 weights: the bits of the CPU backend's AVX2 build, which are ggml's (zig/kernels/
 * gemv_quant.zig, ggml_vec_dot_q8_0_q8_0 / _q4_0_q8_0 / _q4_1_q8_1 of ggml-cpu's x86 AVX2
 * code), at every column count.
 *
 * As ggml, each column of S1 is first quantized per block of 32 (q8_1 for q4_1 and q5_1 weights, q8_0
 * otherwise; zig/quant.zig's quantize_activation_block): d = absmax / 127 kept as f16, the
 * quants x * (127 / absmax) rounded half to even, and q8_1's s = d * (sum of the quants) as f16
 * (d unrounded). Then per weight row the dot is, block after block in order:
 * - 8 lanes, lane j the exact integer sum of the block's elements 4j..4j+3 (weight quant times
 *   activation quant; q4 nibbles: low ones are elements 0-15, high ones 16-31), converted to f32
 *   (exact: |sum| < 2^17);
 * - acc_j = fma(d_w * d_a, lane_j, acc_j), the multiply-add rounded once (_mm256_fmadd_ps;
 *   `fma_exact`, lavapipe's `fma()` being unfused; the scale product of two f16 values is
 *   exact);
 * - for q4_1 and q5_1 beside it summs = fma(m_w, s_a, summs) (GCC contracts ggml's `summs += m * s`),
 *   here `m_w * s_a + summs`: the product of two f16 values is exact in f32 (at most 22
 *   significant bits, far from f32's range limits), so fused or not it rounds once;
 * and the result is hsum_float_8(acc) = ((acc0 + acc4) + (acc2 + acc6)) + ((acc1 + acc5) +
 * (acc3 + acc7)), plus summs for q4_1 and q5_1. ggml's AVX2 loops keep one accumulator (no unrolling into
 * several), so each lane is one sequential chain over the blocks: the parallelism is rows and
 * columns, never blocks.
 *
 * One thread computes one element of D, its 8 lane chains and its summs chain in registers (so
 * the blocks of a row stream through one thread, and every load of a weight block serves all
 * 8 lanes): a workgroup of {@link DECODE_ROWS} rows by 1 column (decode) or {@link EXACT_ROWS}
 * rows by {@link EXACT_COLUMNS} columns, thread t taking row t % rows and column t / rows.
 * K is walked in chunks of as many blocks as the workgroup has rows: the workgroup quantizes
 * the chunk of its columns into workgroup memory (a block per thread), then every thread runs
 * its chains over the chunk. At the end each thread sums its 8 lanes in hsum_float_8's order
 * (each partial sum through `opaque`, so the compiler keeps the order).
 *
 * With `mulMat`'s `repack` option (params[1] = 2) a q4_0 product that llama.cpp's CPU backend
 * computes with its repacked kernels ({@link repackTakes}: ggml_gemv_q4_0_8x8_q8_0 and
 * ggml_gemm_q4_0_8x8_q8_0 of ggml-cpu's arch/x86/repack.cpp, through
 * gemv_q4_b32_8x8_q8_0_lut_avx / gemm_q4_b32_8x8_q8_0_lut_avx, the same steps in their AVX2 and
 * AVX-512 branches) sums in their order instead. The activations quantize as above
 * (ggml_quantize_mat_q8_0_4x8, which takes the groups of 4 columns the gemm reads, computes
 * quantize_row_q8_0's d and quants). Then per element one chain over the blocks in order,
 * acc = fma(f32(isum_b), d_w * d_a, acc) (_mm256_fmadd_ps), isum_b the block's exact integer
 * dot (the 8 lanes summed: |isum_b| <= 32 * 8 * 127 < 2^15, and maddubs' int16 pairs stay
 * below 2^12) and d_w * d_a exact (two f16 values); the result is acc. The gemm (groups of 4
 * columns) and the gemv (the rest) take the same steps. Every other node with params[1] = 2
 * computes as with 1.
 *
 * Exact for finite activations. A block of S1 holding an infinity or NaN quantizes here by the
 * same formula (the CPU takes ggml's scalar reference there, ggml's vector code having no
 * defined result): the outputs it reaches are then not checked against the CPU's.
 * @module
 */

import type { Tensor } from "../../tensor.ts";
import { type Kernel, matmulGrid } from "./kernels.ts";
import { weightBindings } from "./shader_quant.ts";
import { EXACT_WGSL } from "./wgsl_exact.ts";
import { matmulPrologue, PARAMS_WGSL } from "./wgsl_common.ts";

/** The weight dtypes this kernel takes. */
export type ExactQuantDType = "q8_0" | "q4_0" | "q4_1" | "q5_0" | "q5_1";

const DTYPES: readonly ExactQuantDType[] = ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1"];

/** Output rows of a workgroup when S1 has more than one column. */
export const EXACT_ROWS = 32;
/** Columns of a workgroup when S1 has more than one. */
export const EXACT_COLUMNS = 8;
/** Output rows of a workgroup when S1 has one column (decode). */
export const DECODE_ROWS = 64;
/** ggml's 8 f32 lanes per block. */
const LANES = 8;

function isExactQuant(dtype: string): dtype is ExactQuantDType {
  return (DTYPES as readonly string[]).includes(dtype);
}

/**
 * True when `node` (a mulMat) asks for ggml's arithmetic: params[1] = 1 (`mulMat`'s `ggml`
 * option) or 2 (its `repack` option, which computes as 1 wherever {@link repackTakes} is false).
 */
export function asksGgml(node: Tensor): boolean {
  return node.params[1] === 1 || node.params[1] === 2;
}

/**
 * True when `node` (a mulMat) takes llama.cpp's repacked q4_0 / q4_K kernels: params[1] = 2,
 * and where llama.cpp's CPU backend (x86 with AVX2) moves the weights into its CPU_REPACK buffer
 * and computes the product there (ggml_repack_get_optimal_repack_type, extra_buffer_type::
 * supports_op and forward_mul_mat in ggml-cpu/repack.cpp): q4_0 or q4_K weights of 2 dimensions
 * whose row count is a multiple of 8, f32 activations of at most 3 dimensions, in rows of
 * adjacent f32s as every exact kernel here reads them.
 */
export function repackTakes(node: Tensor): boolean {
  const [a, b] = node.src as [Tensor, Tensor];
  return node.params[1] === 2 && (a.dtype === "q4_0" || a.dtype === "q4_K") &&
    a.ne[1] % 8 === 0 && a.ne[2] === 1 && a.ne[3] === 1 && b.ne[3] === 1 && b.nb[0] === 4;
}

// Lane words of a block's 4- or 5-bit values from its nibbles at byte `qs` (low nibbles are
// elements 0-15, high ones 16-31), with q5's fifth bits (bits 0-3 of h to bit 4 of bytes 0-3)
// from the word at byte `qh`.
function packedLanes(qs: number, qh?: number): string {
  const fifth = (shift: string): string =>
    qh === undefined ? "" : ` | spread_fifth((qh >> (${shift})) & 0xfu)`;
  return `${
    qh === undefined ? "" : `
fn spread_fifth(h: u32) -> u32 {
  return ((h & 1u) << 4u) | ((h & 2u) << 11u) | ((h & 4u) << 18u) | ((h & 8u) << 25u);
}`
  }
fn packed_lanes(a: u32, x: ptr<function, array<u32, 8>>) {
  ${qh === undefined ? "" : `let qh = S0_u32(a + ${qh}u);`}
  for (var l = 0u; l < 4u; l = l + 1u) {
    let q = S0_u32(a + ${qs}u + 4u * l);
    (*x)[l] = (q & 0x0f0f0f0fu)${fifth("4u * l")};
    (*x)[l + 4u] = ((q >> 4u) & 0x0f0f0f0fu)${fifth("16u + 4u * l")};
  }
}`;
}

// The block's d alone (its first f16), or d and m (its first two).
const D_ONLY = "return vec2<f32>(S0_f16(a), 0.0);";
const D_AND_M = `let h = S0_u32(a);
  return vec2<f32>(f16_to_f32(h & 0xffffu), f16_to_f32(h >> 16u));`;

// A lane's integer dot: the weight bytes' values (masked, less `bias`) times the activation
// quants.
function laneDot(mask: number, bias: number): string {
  const value = (k: number): string => `(i32((x >> ${8 * k}u) & ${mask}u) - ${bias})`;
  return `
fn lane_dot(x: u32, y: u32) -> i32 {
  return ${[0, 1, 2, 3].map((k) => `${value(k)} * i8_of(y, ${k}u)`).join(" +\n    ")};
}`;
}

function packedBlock(lanes: string, scales: string, dot: string): string {
  return `${lanes}
fn block_lanes(a: u32, x: ptr<function, array<u32, 8>>) -> vec2<f32> {
  packed_lanes(a, x);
  ${scales}
}${dot}`;
}

/**
 * Per weight type: `block_lanes(a, &x)` reads the block at byte `a`, leaves in x[j] the
 * 32-bit word of lane j's weight quants (elements 4j..4j+3, as 4 bytes: q4 nibbles and q5 values
 * unpacked) and returns its d and (q4_1, q5_1) m; `lane_dot(x, y)` is the lane's integer dot with
 * the packed activation quants `y` (q4_0's quants are the nibbles less 8, q5_0's the five-bit
 * values less 16).
 */
const LANE_WGSL: Readonly<Record<ExactQuantDType, string>> = {
  q8_0: `
fn block_lanes(a: u32, x: ptr<function, array<u32, 8>>) -> vec2<f32> {
  for (var l = 0u; l < 8u; l = l + 1u) {
    (*x)[l] = S0_u32(a + 2u + 4u * l);
  }
  ${D_ONLY}
}
fn lane_dot(x: u32, y: u32) -> i32 {
  return i8_of(x, 0u) * i8_of(y, 0u) + i8_of(x, 1u) * i8_of(y, 1u) +
    i8_of(x, 2u) * i8_of(y, 2u) + i8_of(x, 3u) * i8_of(y, 3u);
}`,
  q4_0: packedBlock(packedLanes(2), D_ONLY, laneDot(0xf, 8)),
  q4_1: packedBlock(packedLanes(4), D_AND_M, laneDot(0xf, 0)),
  q5_0: packedBlock(packedLanes(6, 2), D_ONLY, laneDot(0x1f, 16)),
  q5_1: packedBlock(packedLanes(8, 4), D_AND_M, laneDot(0x1f, 0)),
};

/**
 * The start of an exact kernel's main, shared with shader_matmul_exact_k.ts: the matmul
 * prologue for R x C threads, this thread's row `m` (`rb` its weight row's byte offset, clamped
 * into S0) and column `col` of at most `nc`, `blocks` weight blocks of `blockSize` elements per
 * row, and ggml's 8 lane accumulators `acc` at 0.
 */
export function exactMatmulHead(blockSize: number): string {
  return `${matmulPrologue("R", "C")}
  let nb0 = P.t[1].nb.x;
  let nc = min(C, N - n0);
  let row = lid % R;
  let col = lid / R;
  let m = m0 + row;
  let rb = at(1u, vec4<u32>(0u, min(m, M - 1u), a2, a3));
  let blocks = K / ${blockSize}u;
  var acc: array<f32, 8>;
  for (var l = 0u; l < 8u; l = l + 1u) {
    acc[l] = 0.0;
  }`;
}

// The repacked kernels' step: the block's integer dot, then one fused step of the chain acc[0].
const REPACK_STEP = `let isum = ${
  Array.from({ length: LANES }, (_, l) => `lane_dot(x[${l}], yq[y + ${l}u])`).join(" +\n          ")
};
        acc[0] = fma_exact(f32(isum), dd, acc[0]);`;

/**
 * The kernel for weights of `dtype` and `columns` (1 or {@link EXACT_COLUMNS}) columns of S1
 * per workgroup; `repack`: q4_0 in the order of llama.cpp's repacked kernels (one chain).
 */
export function exactQuantShader(dtype: ExactQuantDType, columns: number, repack = false): string {
  const C = columns;
  const R = columns === 1 ? DECODE_ROWS : EXACT_ROWS;
  // Blocks of a chunk: one per thread, so each thread quantizes at most one.
  const B = R;
  const minTerm = dtype === "q4_1" || dtype === "q5_1";
  const lanes = repack ? REPACK_STEP : Array.from(
    { length: LANES },
    (_, l) => `acc[${l}] = fma_exact(dd, f32(lane_dot(x[${l}], yq[y + ${l}u])), acc[${l}]);`,
  ).join("\n        ");
  const result = repack ? "D_set_f32(at(0u, vec4<u32>(m, n0 + col, i2, i3)), acc[0]);" : `\
// hsum_float_8: the high half onto the low one, then lanes 2-3 onto 0-1, then lane 1 onto 0.
    let h0 = opaque(acc[0] + acc[4]);
    let h1 = opaque(acc[1] + acc[5]);
    let h2 = opaque(acc[2] + acc[6]);
    let h3 = opaque(acc[3] + acc[7]);
    let sum = opaque(opaque(h0 + h2) + opaque(h1 + h3));
    D_set_f32(at(0u, vec4<u32>(m, n0 + col, i2, i3)), ${minTerm ? "sum + summs" : "sum"});`;
  return `${PARAMS_WGSL}
${weightBindings(dtype, ["f32"])}
${EXACT_WGSL}
${LANE_WGSL[dtype]}
const R = ${R}u;
const C = ${C}u;
const B = ${B}u;
// The chunk's blocks' packed activation quants (8 words a block, columns apart by B blocks),
// their d and (q8_1) s as f32.
var<workgroup> yq: array<u32, ${B * C * LANES}>;
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

@compute @workgroup_size(${R * C})
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
${exactMatmulHead(32)}
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
    if (m < M && col < nc) {
      for (var j = 0u; j < nbk; j = j + 1u) {
        let a = rb + (b0 + j) * nb0;
        var x: array<u32, 8>;
        let dm = block_lanes(a, &x);
        let yb = col * B + j;
        let y = yb * 8u;
        let dd = dm.x * yd[yb];
        ${lanes}
        ${minTerm ? "summs = dm.y * ys[yb] + summs;" : ""}
      }
    }
  }
  if (m < M && col < nc) {
    ${result}
  }
}`;
}

/**
 * The kernel of a mulMat node that asks for ggml's arithmetic ({@link asksGgml}: params[1] = 1
 * or 2, see `mulMat`'s `ggml` and `repack` options) with q8_0, q4_0, q4_1, q5_0 or q5_1 weights
 * and S1 rows of adjacent f32s (the CPU's gemv_quant.zig path; q4_0 in the repacked kernels'
 * order where {@link repackTakes}); null for any other node, which keeps the other kernels.
 */
export function exactQuantKernel(node: Tensor): Kernel | null {
  const [a, b] = node.src as [Tensor, Tensor];
  if (!asksGgml(node) || !isExactQuant(a.dtype) || b.nb[0] !== 4) return null;
  const columns = b.ne[1] === 1 ? 1 : EXACT_COLUMNS;
  const workgroups = matmulGrid(node, columns === 1 ? DECODE_ROWS : EXACT_ROWS, columns);
  const dtype = a.dtype;
  const repack = repackTakes(node);
  return {
    key: `mulMatExact:${dtype}:${columns}${repack ? ":repack" : ""}`,
    source: () => exactQuantShader(dtype, columns, repack),
    tensors: [node, a, b],
    status: false,
    count: 0,
    floats: [],
    workgroups,
  };
}
