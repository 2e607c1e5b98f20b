/**
 * WGSL for mulMat with ggml's arithmetic (`mulMat(a, b, { ggml: true })`) on the k-quant
 * weights q4_K, q5_K and q6_K: the bits of ggml-cpu's mul_mat in its x86 AVX2 build, which
 * takes one of two arithmetics by the number of columns of S1 per batch (src1->ne[1]):
 * - below {@link TILED_MIN_COLUMNS}: ggml_vec_dot_q4_K_q8_K, _q5_K_q8_K and _q6_K_q8_K per
 *   element (arch/x86/quants.c, its `__AVX2__` branches; there is no AVX-512 one);
 * - from {@link TILED_MIN_COLUMNS} on: the tiled matmul (ggml-cpu/tiled/, GGML_CPU_TILED_MM, on
 *   by default; tiled_run_microtile_avx2), for weights in a plain buffer (llama.cpp's repacked
 *   ones take other kernels).
 * ggml's AVX-512 build gave the same bits on every k-quant case of
 * tests/fixtures/ggml_exact_dots.json.
 *
 * As ggml, each column of S1 is first quantized per super-block of 256 to q8_K
 * (quantize_row_q8_K_ref, which x86 uses; zig/quant.zig's quantize_q8_K): `max` is the first
 * element of largest magnitude (signed), iscale = -127 / max, the quants
 * min(127, iscale * x rounded half to even) (nearest_int), d = 1 / iscale, and bsums the sums of
 * each 16 quants; an all-zero super-block has d and quants 0. Both arithmetics then take the
 * same exact integers of each super-block. With e the element index in the super-block, s(e)
 * its 6-bit (q4_K, q5_K) or signed 8-bit (q6_K) scale, w_e its quant (q4_K: 4 bits, q5_K: 5,
 * q6_K: the 6-bit value less 32) and y_e the activation's:
 * - 8 lanes `sumi_l` = sum of s(e) * w_e * y_e over e = 32c + 4l + t (c = 0..7, t = 0..3):
 *   vec_dot's _mm256_maddubs_epi16 / _mm256_madd_epi16 lanes over each 32 bytes of quants
 *   (q6_K's -32 as q8sclsub's lane 32 * (bsums[2l] * s[2l] + bsums[2l+1] * s[2l+1])); each is
 *   below 2^24 in magnitude, so its conversion to f32 is exact;
 * - q4_K, q5_K: 4 lanes prod_t = mins[2t] * (bsums[4t] + bsums[4t+1]) + mins[2t+1] *
 *   (bsums[4t+2] + bsums[4t+3]) (_mm_hadd_epi16 then _mm_madd_epi16).
 * Integer sums do not depend on their order, so any order computes them.
 *
 * vec_dot, super-block after super-block in order:
 * - acc_l = fma(d, sumi_l, acc_l), one rounding (_mm256_fmadd_ps; `fma_exact`), with
 *   d = y.d * f16(x.d) rounded to f32;
 * - q4_K beside it acc_m_t = fma(dmin, prod_t, acc_m_t) (_mm_fmadd_ps), dmin = -y.d * f16(x.dmin);
 * - q5_K instead summs = fma(dmin, prod_0 + prod_1 + prod_2 + prod_3, summs) (GCC contracts
 *   ggml's `summs += dmin * isum`);
 * and the result is hsum_float_8(acc) = ((acc0 + acc4) + (acc2 + acc6)) + ((acc1 + acc5) +
 * (acc3 + acc7)), plus for q4_K ((acc_m0 + acc_m2) + (acc_m1 + acc_m3)) and for q5_K summs.
 *
 * The tiled matmul, super-block (256-element slab) after super-block in order, one chain from 0:
 * - s1 = the sum of the 8 lanes (may pass 2^24: converted to the nearest f32, ties to even, as
 *   _mm256_cvtepi32_ps), s2 = the sum of the 4 min lanes (exact in f32);
 * - res = f16(x.d) * f32(s1) rounded (_mm256_mul_ps); q4_K, q5_K: res = fma(-f16(x.dmin), s2,
 *   res) (_mm256_fnmadd_ps, one rounding);
 * - out = fma(res, y.d, out) (_mm256_fmadd_ps).
 *
 * The threads are laid out as shader_matmul_exact.ts's (one thread an element of D: a
 * workgroup of {@link DECODE_ROWS} rows by 1 column or {@link EXACT_ROWS} rows by
 * {@link EXACT_COLUMNS} columns), each running its 8 lane chains over the row's super-blocks in
 * registers. K is walked in chunks of {@link superBlocksPerChunk} super-blocks of every column:
 * each thread quantizes one 16-element group of the chunk into workgroup memory in two steps
 * (its group's largest magnitude; then the super-block's from its 16 groups in order, which
 * keeps ggml's first-largest rule, and its group's quants and bsum), then every thread runs its
 * chains over the chunk.
 *
 * With `mulMat`'s `repack` option (params[1] = 2) a q4_K product that llama.cpp's CPU backend
 * computes with its repacked kernels (`repackTakes` of shader_matmul_exact.ts) sums in the order
 * of ggml_gemv_q4_K_8x8_q8_K and ggml_gemm_q4_K_8x8_q8_K (ggml-cpu's arch/x86/repack.cpp) instead.
 * ggml's forward_mul_mat quantizes each batch's columns in groups of 4 with
 * ggml_quantize_mat_q8_K_4x8 and runs the gemm on them, the last N % 4 columns with
 * quantize_row_q8_K and the gemv. The 4x8 quantizer gives quantize_row_q8_K_ref's d and quants
 * except where a super-block's largest magnitude appears with both signs and the negative one
 * comes first: it then takes the positive one, which negates d, every quant and every bsum, and
 * so (the products below being of those with unsigned weight values) none of the result's bits.
 * With sumi_j = sc_j * (the integer dot of sub-block j, 32 elements), mins_j = m_j * (the sum of
 * its activation quants), d = f16(x.d) * y.d and dmin = f16(x.dmin) * y.d (each rounded once,
 * _mm256_mul_ps), super-block after super-block in order:
 * - the gemv: acc = fma(f32(sum of the 8 sumi_j), d, acc) (the sum may pass 2^24: converted to
 *   the nearest f32, ties to even, as _mm256_cvtepi32_ps), accm = fma(f32(sum of the 8 mins_j),
 *   dmin, accm);
 * - the gemm, per pair p = 0..3 of sub-blocks: acc = fma(f32(sumi_2p + sumi_2p+1), d, acc) and
 *   accm = fma(f32(mins_2p + mins_2p+1), dmin, accm) (below 2^24, exact);
 * and the result is acc - accm. The int16 sums of both (maddubs pairs, then 16 products of a
 * 4-bit weight and an activation quant) stay below 2^15 in magnitude. The AVX-512 branches of
 * the gemm take the same steps (the gemv has none). Every other node with params[1] = 2
 * computes as with 1.
 *
 * Exact for finite activations whose super-blocks' iscale is finite (a super-block whose largest
 * magnitude is below 127 / FLT_MAX, or that holds an infinity or NaN, has no checked result).
 * @module
 */

import type { Tensor } from "../../tensor.ts";
import { type Kernel, matmulGrid } from "./kernels.ts";
import {
  asksGgml,
  DECODE_ROWS,
  EXACT_COLUMNS,
  EXACT_ROWS,
  exactMatmulHead,
  repackTakes,
} from "./shader_matmul_exact.ts";
import { weightBindings } from "./shader_quant.ts";
import { EXACT_WGSL } from "./wgsl_exact.ts";
import { PARAMS_WGSL } from "./wgsl_common.ts";

/** The k-quant weight dtypes this kernel takes. */
export type ExactKQuantDType = "q4_K" | "q5_K" | "q6_K";

const DTYPES: readonly ExactKQuantDType[] = ["q4_K", "q5_K", "q6_K"];

/**
 * From this many columns of S1 (per batch: ggml's src1->ne[1]) ggml computes k-quant products
 * with its tiled matmul (ggml-cpu/tiled, ggml_tiled_min_batch), below with vec_dot.
 */
export const TILED_MIN_COLUMNS = 8;

/** Elements a thread quantizes: one of the super-block's 16 bsums groups. */
const GROUP = 16;

function isExactKQuant(dtype: string): dtype is ExactKQuantDType {
  return (DTYPES as readonly string[]).includes(dtype);
}

/** Super-blocks of each column a workgroup quantizes at once: one 16-element group a thread. */
export function superBlocksPerChunk(columns: number): number {
  const rows = columns === 1 ? DECODE_ROWS : EXACT_ROWS;
  return rows / (256 / GROUP);
}

// The integer dot of 4 unsigned weight bytes (each below 64) with 4 signed activation quants.
const BYTE_DOT = `
fn byte_dot(w: u32, y: u32) -> i32 {
  return i32(w & 0xffu) * i8_of(y, 0u) + i32((w >> 8u) & 0xffu) * i8_of(y, 1u) +
    i32((w >> 16u) & 0xffu) * i8_of(y, 2u) + i32(w >> 24u) * i8_of(y, 3u);
}
// Unsigned byte i (0..7) of the 8 bytes in v.
fn byte_of(v: vec2<u32>, i: u32) -> i32 {
  return i32((v[i / 4u] >> (8u * (i % 4u))) & 0xffu);
}`;

// q4_K and q5_K: the 6-bit scales and mins (12 bytes at 4, unpacked as ggml's utmp words) and
// the min lanes prod_t, the mins' products with the bsums pairs.
const SCALES_MINS = `
fn scales_mins(a: u32, s: u32, sc: ptr<function, vec2<u32>>, prod: ptr<function, vec4<i32>>) {
  let u0 = S0_u32(a + 4u);
  let u1 = S0_u32(a + 8u);
  let u2 = S0_u32(a + 12u);
  *sc = vec2<u32>(u0 & 0x3f3f3f3fu, (u2 & 0x0f0f0f0fu) | (((u0 >> 6u) & 0x03030303u) << 4u));
  let mn = vec2<u32>(
    u1 & 0x3f3f3f3fu,
    ((u2 >> 4u) & 0x0f0f0f0fu) | (((u1 >> 6u) & 0x03030303u) << 4u),
  );
  let bs = s * 16u;
  for (var t = 0u; t < 4u; t = t + 1u) {
    (*prod)[t] = byte_of(mn, 2u * t) * (ybs[bs + 4u * t] + ybs[bs + 4u * t + 1u]) +
      byte_of(mn, 2u * t + 1u) * (ybs[bs + 4u * t + 2u] + ybs[bs + 4u * t + 3u]);
  }
}`;

// q4_K's and q5_K's lanes: 4 runs of 32 bytes of nibbles from byte `qs` of the block, with
// q5_K's fifth bits from the 32 bytes at `qh` (bit 2j of byte b for element 64j + b, bit 2j + 1
// for element 64j + 32 + b).
function nibbleLanes(qs: number, qh?: number): string {
  const fifth = (bit: string): string =>
    qh === undefined ? "" : ` | (((h >> (${bit})) & 0x01010101u) << 4u)`;
  return `
  for (var j = 0u; j < 4u; j = j + 1u) {
    let s_lo = byte_of(sc, 2u * j);
    let s_hi = byte_of(sc, 2u * j + 1u);
    for (var l = 0u; l < 8u; l = l + 1u) {
      let w = S0_u32(a + ${qs}u + 32u * j + 4u * l);
      ${qh === undefined ? "" : `let h = S0_u32(a + ${qh}u + 4u * l);`}
      let y = s * 64u + 16u * j + l;
      (*sumi)[l] = (*sumi)[l] + s_lo * byte_dot((w & 0x0f0f0f0fu)${fifth("2u * j")}, yq[y]) +
        s_hi * byte_dot(((w >> 4u) & 0x0f0f0f0fu)${fifth("2u * j + 1u")}, yq[y + 8u]);
    }
  }`;
}

/**
 * Per weight type: `super_block(a, s, &sumi, &prod)` reads the block at byte `a` and the chunk's
 * quantized super-block `s`, leaves in sumi the 8 integer lanes of ggml's AVX2 vec_dot and
 * (q4_K, q5_K) in prod the 4 mins·bsums lanes, and returns the block's d and dmin as f32.
 */
const SUPER_BLOCK_WGSL: Readonly<Record<ExactKQuantDType, string>> = {
  q4_K: `${SCALES_MINS}
fn super_block(a: u32, s: u32, sumi: ptr<function, array<i32, 8>>, prod: ptr<function, vec4<i32>>) -> vec2<f32> {
  var sc: vec2<u32>;
  scales_mins(a, s, &sc, prod);
  ${nibbleLanes(16)}
  return vec2<f32>(S0_f16(a), S0_f16(a + 2u));
}`,
  q5_K: `${SCALES_MINS}
fn super_block(a: u32, s: u32, sumi: ptr<function, array<i32, 8>>, prod: ptr<function, vec4<i32>>) -> vec2<f32> {
  var sc: vec2<u32>;
  scales_mins(a, s, &sc, prod);
  ${nibbleLanes(48, 16)}
  return vec2<f32>(S0_f16(a), S0_f16(a + 2u));
}`,
  // ql (128 bytes) at 0, qh (64) at 128, the 16 signed scales at 192, d at 208. Element
  // 128j + 32k + b (b < 32) is nibble k / 2 of ql byte 64j + 32(k % 2) + b with bits 2k, 2k + 1
  // of qh byte 32j + b above it, and has scale 8j + 2k + b / 16.
  q6_K: `
fn super_block(a: u32, s: u32, sumi: ptr<function, array<i32, 8>>, prod: ptr<function, vec4<i32>>) -> vec2<f32> {
  var sc: array<u32, 4>;
  for (var i = 0u; i < 4u; i = i + 1u) {
    sc[i] = S0_u32(a + 192u + 4u * i);
  }
  let bs = s * 16u;
  for (var l = 0u; l < 8u; l = l + 1u) {
    // q8sclsub's lane: the scales' products with bsums 2l and 2l + 1, times 32.
    (*sumi)[l] = -32 * (ybs[bs + 2u * l] * i8_of(sc[l / 2u], (2u * l) % 4u) +
      ybs[bs + 2u * l + 1u] * i8_of(sc[l / 2u], (2u * l + 1u) % 4u));
  }
  for (var j = 0u; j < 2u; j = j + 1u) {
    for (var l = 0u; l < 8u; l = l + 1u) {
      let w0 = S0_u32(a + 64u * j + 4u * l);
      let w1 = S0_u32(a + 64u * j + 32u + 4u * l);
      let h = S0_u32(a + 128u + 32u * j + 4u * l);
      let y = s * 64u + 32u * j + l;
      // Scales 8j + 2k + l / 4 of words 2j and 2j + 1: byte 2k + l / 4 of that pair.
      let half = l / 4u;
      (*sumi)[l] = (*sumi)[l] +
        i8_of(sc[2u * j], half) * byte_dot((w0 & 0x0f0f0f0fu) | ((h & 0x03030303u) << 4u), yq[y]) +
        i8_of(sc[2u * j], 2u + half) *
          byte_dot((w1 & 0x0f0f0f0fu) | (((h >> 2u) & 0x03030303u) << 4u), yq[y + 8u]) +
        i8_of(sc[2u * j + 1u], half) *
          byte_dot(((w0 >> 4u) & 0x0f0f0f0fu) | (((h >> 4u) & 0x03030303u) << 4u), yq[y + 16u]) +
        i8_of(sc[2u * j + 1u], 2u + half) *
          byte_dot(((w1 >> 4u) & 0x0f0f0f0fu) | (((h >> 6u) & 0x03030303u) << 4u), yq[y + 24u]);
    }
  }
  return vec2<f32>(S0_f16(a + 208u), 0.0);
}`,
};

/**
 * ggml's arithmetics of a k-quant product (see the module comment): vec_dot's, its tiled
 * matmul's, and (q4_K) its repacked kernels'.
 */
export type KQuantOrder = "vec" | "tiled" | "repack";

// The repacked kernels' q4_K super-block: the integer dots of its 4 pairs of sub-blocks times
// their scales (pairs) and of their mins times the activations' sums (prod, from
// scales_mins), and the block's d and dmin.
const REPACK_SUPER_BLOCK = `
fn super_block_pairs(a: u32, s: u32, pairs: ptr<function, vec4<i32>>, prod: ptr<function, vec4<i32>>) -> vec2<f32> {
  var sc: vec2<u32>;
  scales_mins(a, s, &sc, prod);
  for (var j = 0u; j < 4u; j = j + 1u) {
    var lo = 0;
    var hi = 0;
    for (var l = 0u; l < 8u; l = l + 1u) {
      let w = S0_u32(a + 16u + 32u * j + 4u * l);
      let y = s * 64u + 16u * j + l;
      lo = lo + byte_dot(w & 0x0f0f0f0fu, yq[y]);
      hi = hi + byte_dot((w >> 4u) & 0x0f0f0f0fu, yq[y + 8u]);
    }
    (*pairs)[j] = byte_of(sc, 2u * j) * lo + byte_of(sc, 2u * j + 1u) * hi;
  }
  return vec2<f32>(S0_f16(a), S0_f16(a + 2u));
}`;

// The repacked kernels' steps of a super-block: the gemv's one step of each chain, or the
// gemm's one step per pair of sub-blocks (the chains in acc[0] and accm.x).
const REPACK_ACCUMULATE = `${REPACK_SUPER_BLOCK}
fn accumulate_repack(a: u32, s: u32, gemm: bool, acc: ptr<function, array<f32, 8>>, accm: ptr<function, vec4<f32>>) {
  var pairs: vec4<i32>;
  var prod = vec4<i32>(0);
  let dm = super_block_pairs(a, s, &pairs, &prod);
  let d = opaque(dm.x * yd[s]);
  let dmin = opaque(dm.y * yd[s]);
  if (gemm) {
    for (var p = 0u; p < 4u; p = p + 1u) {
      (*acc)[0] = fma_exact(f32(pairs[p]), d, (*acc)[0]);
      (*accm).x = fma_exact(f32(prod[p]), dmin, (*accm).x);
    }
  } else {
    (*acc)[0] = fma_exact(f32_rne(pairs.x + pairs.y + pairs.z + pairs.w), d, (*acc)[0]);
    (*accm).x = fma_exact(f32(prod.x + prod.y + prod.z + prod.w), dmin, (*accm).x);
  }
}`;

/**
 * `accumulate(a, s, &acc, &accm)`: the super-block's part of the dot in one of ggml's
 * arithmetics (see the module comment). "vec": the 8 lane chains in acc and the min chains in
 * accm. "tiled": the one chain in acc[0]. "repack": `accumulate_repack(a, s, gemm, ...)`.
 */
function accumulate(dtype: ExactKQuantDType, order: KQuantOrder): string {
  if (order === "repack") return REPACK_ACCUMULATE;
  const tiled = order === "tiled";
  const minTerm = dtype === "q4_K" || dtype === "q5_K";
  const head = `
fn accumulate(a: u32, s: u32, acc: ptr<function, array<f32, 8>>, accm: ptr<function, vec4<f32>>) {
  var sumi: array<i32, 8>;
  var prod = vec4<i32>(0);
  let dm = super_block(a, s, &sumi, &prod);`;
  if (tiled) {
    return `${head}
  var s1 = 0;
  for (var l = 0u; l < 8u; l = l + 1u) {
    s1 = s1 + sumi[l];
  }
  // d * s1 (_mm256_mul_ps); q4_K, q5_K: less dmin * s2 (_mm256_fnmadd_ps); then into the chain
  // times y.d (_mm256_fmadd_ps).
  var res = opaque(dm.x * f32_rne(s1));
  ${minTerm ? "res = fma_exact(-dm.y, f32(prod.x + prod.y + prod.z + prod.w), res);" : ""}
  (*acc)[0] = fma_exact(res, yd[s], (*acc)[0]);
}`;
  }
  const mins = dtype === "q4_K"
    ? `for (var t = 0u; t < 4u; t = t + 1u) {
    (*accm)[t] = fma_exact(dmin, f32(prod[t]), (*accm)[t]);
  }`
    : "(*accm).x = fma_exact(dmin, f32(prod.x + prod.y + prod.z + prod.w), (*accm).x);";
  return `${head}
  let d = yd[s] * dm.x;
  ${
    minTerm
      ? `let dmin = -yd[s] * dm.y;
  ${mins}`
      : ""
  }
  for (var l = 0u; l < 8u; l = l + 1u) {
    (*acc)[l] = fma_exact(d, f32(sumi[l]), (*acc)[l]);
  }
}`;
}

// An i32 converted to the nearest f32, ties to even (_mm256_cvtepi32_ps): WGSL leaves the
// rounding of an inexact conversion to the device (lavapipe's is this one). The multiple of 256
// below x (at most 24 significant bits: exact) plus the rest (0..255: exact), in one correctly
// rounded addition.
const F32_RNE = `
fn f32_rne(x: i32) -> f32 {
  let hi = x & -256;
  return opaque(f32(hi)) + opaque(f32(x - hi));
}`;

// vec_dot's result: hsum_float_8 (the high half onto the low one, then lanes 2-3 onto 0-1, then
// lane 1 onto 0), plus q4_K's acc_m reduced or q5_K's summs.
const HSUM = `let h0 = opaque(acc[0] + acc[4]);
    let h1 = opaque(acc[1] + acc[5]);
    let h2 = opaque(acc[2] + acc[6]);
    let h3 = opaque(acc[3] + acc[7]);
    let sum = opaque(opaque(h0 + h2) + opaque(h1 + h3));`;

/** What the result adds to hsum_float_8(acc): q4_K's acc_m reduced, q5_K's summs. */
const MIN_TERM: Readonly<Record<ExactKQuantDType, string>> = {
  // _mm_movehl_ps then _mm_movehdup_ps: (m0 + m2) + (m1 + m3).
  q4_K: " + opaque(opaque(accm.x + accm.z) + opaque(accm.y + accm.w))",
  q5_K: " + accm.x",
  q6_K: "",
};

/**
 * The kernel for weights of `dtype` and `columns` (1 or {@link EXACT_COLUMNS}) columns of S1
 * per workgroup, summing in ggml's `order` ("repack" for q4_K only).
 */
export function exactKQuantShader(
  dtype: ExactKQuantDType,
  columns: number,
  order: KQuantOrder,
): string {
  if (order === "repack" && dtype !== "q4_K") {
    throw new Error(`webgpu: no repacked ${dtype} kernel`);
  }
  const tiled = order === "tiled";
  const repack = order === "repack";
  const C = columns;
  const R = columns === 1 ? DECODE_ROWS : EXACT_ROWS;
  const S = superBlocksPerChunk(columns);
  return `${PARAMS_WGSL}
${weightBindings(dtype, ["f32"])}
${EXACT_WGSL}
const R = ${R}u;
const C = ${C}u;
const S = ${S}u;
// The chunk's quantized super-blocks, column after column (S each): their packed quants (64
// words each), d, and bsums; and the signed largest-magnitude value of each 16-element group.
var<workgroup> yq: array<u32, ${S * C * 64}>;
var<workgroup> yd: array<f32, ${S * C}>;
var<workgroup> ybs: array<i32, ${S * C * 16}>;
var<workgroup> gmax: array<f32, ${S * C * 16}>;
${BYTE_DOT}
${SUPER_BLOCK_WGSL[dtype]}
${tiled || repack ? F32_RNE : ""}
${accumulate(dtype, order)}

// The first of the 16 f32s at byte x of S1 with the largest magnitude (0 if all are zero).
fn group_max(x: u32) -> f32 {
  var amax = 0.0;
  var mx = 0.0;
  for (var e = 0u; e < 16u; e = e + 1u) {
    let v = S1_f32(x + 4u * e);
    if (abs(v) > amax) {
      amax = abs(v);
      mx = v;
    }
  }
  return mx;
}

// Group g of the chunk (16 f32s at byte x of S1), once every group's gmax is known:
// quantize_row_q8_K_ref's quants and bsum of it, and (the first group) its super-block's d.
fn quantize_group(g: u32, x: u32) {
  let sb = g / 16u;
  var amax = 0.0;
  var mx = 0.0;
  for (var i = 0u; i < 16u; i = i + 1u) {
    let v = gmax[sb * 16u + i];
    if (abs(v) > amax) {
      amax = abs(v);
      mx = v;
    }
  }
  let q = sb * 64u + 4u * (g % 16u);
  if (amax == 0.0) {
    for (var w = 0u; w < 4u; w = w + 1u) {
      yq[q + w] = 0u;
    }
    ybs[g] = 0;
    if (g % 16u == 0u) {
      yd[sb] = 0.0;
    }
    return;
  }
  // Through opaque, so that d = 1 / iscale is not rewritten as max / -127.
  let iscale = opaque(-127.0 / mx);
  var sum = 0;
  for (var w = 0u; w < 4u; w = w + 1u) {
    var word = 0u;
    for (var t = 0u; t < 4u; t = t + 1u) {
      let v = min(127, i32(round(iscale * S1_f32(x + 16u * w + 4u * t))));
      sum = sum + v;
      word = word | ((bitcast<u32>(v) & 0xffu) << (8u * t));
    }
    yq[q + w] = word;
  }
  ybs[g] = sum;
  if (g % 16u == 0u) {
    yd[sb] = 1.0 / iscale;
  }
}

@compute @workgroup_size(${R * C})
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
${exactMatmulHead(256)}
  var accm = vec4<f32>(0.0);${
    repack
      ? `
  // forward_mul_mat: the gemm takes each batch's columns below N - N % 4, the gemv the rest
  // (all of them where N is 1: the one-column kernel).
  let gemm = ${columns === 1 ? "false" : "n0 + col < N - N % 4u"};`
      : ""
  }
  // This thread's group of the chunk: column qc, super-block qs, elements 16 qe.. of it.
  let qc = lid / (16u * S);
  let qs = (lid / 16u) % S;
  let qe = lid % 16u;
  for (var b0 = 0u; b0 < blocks; b0 = b0 + S) {
    let nbk = min(S, blocks - b0);
    let quantizes = qc < nc && qs < nbk;
    let x = at(2u, vec4<u32>((b0 + qs) * 256u + 16u * qe, n0 + qc, i2, i3));
    workgroupBarrier();
    if (quantizes) {
      gmax[lid] = group_max(x);
    }
    workgroupBarrier();
    if (quantizes) {
      quantize_group(lid, x);
    }
    workgroupBarrier();
    if (m < M && col < nc) {
      for (var j = 0u; j < nbk; j = j + 1u) {
        ${
    repack
      ? "accumulate_repack(rb + (b0 + j) * nb0, col * S + j, gemm, &acc, &accm);"
      : "accumulate(rb + (b0 + j) * nb0, col * S + j, &acc, &accm);"
  }
      }
    }
  }
  if (m < M && col < nc) {
    ${
    repack
      ? "D_set_f32(at(0u, vec4<u32>(m, n0 + col, i2, i3)), acc[0] - accm.x);"
      : tiled
      ? "D_set_f32(at(0u, vec4<u32>(m, n0 + col, i2, i3)), acc[0]);"
      : `${HSUM}
    D_set_f32(at(0u, vec4<u32>(m, n0 + col, i2, i3)), sum${MIN_TERM[dtype]});`
  }
  }
}`;
}

/**
 * The kernel of a mulMat node that asks for ggml's arithmetic (`asksGgml`: params[1] = 1 or 2,
 * see `mulMat`'s `ggml` and `repack` options) with q4_K, q5_K or q6_K weights and S1 rows of
 * adjacent f32s (q4_K in the repacked kernels' order where `repackTakes`); null for any other
 * node, which keeps the other kernels.
 */
export function exactKQuantKernel(node: Tensor): Kernel | null {
  const [a, b] = node.src as [Tensor, Tensor];
  if (!asksGgml(node) || !isExactKQuant(a.dtype) || b.nb[0] !== 4) return null;
  const columns = b.ne[1] === 1 ? 1 : EXACT_COLUMNS;
  const order: KQuantOrder = repackTakes(node)
    ? "repack"
    : b.ne[1] >= TILED_MIN_COLUMNS
    ? "tiled"
    : "vec";
  const workgroups = matmulGrid(node, columns === 1 ? DECODE_ROWS : EXACT_ROWS, columns);
  const dtype = a.dtype;
  return {
    key: `mulMatExactK:${dtype}:${columns}:${order}`,
    source: () => exactKQuantShader(dtype, columns, order),
    tensors: [node, a, b],
    status: false,
    count: 0,
    floats: [],
    workgroups,
  };
}
