/**
 * WGSL for mulMat with ggml's arithmetic (`mulMat(a, b, { ggml: true })`) on the k-quant
 * weights q4_K, q5_K and q6_K: the bits of ggml_vec_dot_q4_K_q8_K, _q5_K_q8_K and _q6_K_q8_K
 * of ggml-cpu's x86 AVX2 code (arch/x86/quants.c; there is no AVX-512 variant, so ggml's AVX-512
 * build gives the same bits), at every column count.
 *
 * As ggml, each column of S1 is first quantized per super-block of 256 to q8_K
 * (quantize_row_q8_K_ref, which x86 uses; zig/quant.zig's quantize_q8_K): `max` is the first
 * element of largest magnitude (signed), iscale = -127 / max, the quants
 * min(127, iscale * x rounded half to even) (nearest_int), d = 1 / iscale, and bsums the sums of
 * each 16 quants; an all-zero super-block has d and quants 0. Then per weight row the dot is,
 * super-block after super-block in order:
 * - 8 integer lanes `sumi`, exact (integer sums do not depend on their order; each lane's value
 *   is below 2^24 in magnitude, so its conversion to f32 is exact too). With e the element index
 *   in the super-block and s(e) its 6-bit (q4_K, q5_K) or signed 8-bit (q6_K) scale:
 *   - q4_K, q5_K: lane l sums s(e) * w_e * y_e over e = 32c + 4l + t (c = 0..7, t = 0..3): the
 *     _mm256_maddubs_epi16 / _mm256_madd_epi16 lanes over each 32 bytes of nibbles (low nibbles
 *     elements 64j..64j+31, high ones 64j+32..64j+63), with q5_K's fifth bit from qh bit c;
 *   - q6_K: lane l sums s(e) * q_e * y_e over e = 32c + 4l + t with q_e the unsigned 6-bit value
 *     (0..63), less q8sclsub's lane 32 * (bsums[2l] * s[2l] + bsums[2l+1] * s[2l+1]);
 * - acc_l = fma(d, sumi_l, acc_l), one rounding (_mm256_fmadd_ps; `fma_exact`), with
 *   d = y.d * f16(x.d) rounded to f32;
 * - q4_K beside it 4 lanes acc_m_t = fma(dmin, prod_t, acc_m_t) (_mm_fmadd_ps), dmin =
 *   -y.d * f16(x.dmin) and prod_t = mins[2t] * (bsums[4t] + bsums[4t+1]) + mins[2t+1] *
 *   (bsums[4t+2] + bsums[4t+3]) (_mm_hadd_epi16 then _mm_madd_epi16);
 * - q5_K instead summs = fma(dmin, prod_0 + prod_1 + prod_2 + prod_3, summs) (GCC contracts
 *   ggml's `summs += dmin * isum`);
 * and the result is hsum_float_8(acc) = ((acc0 + acc4) + (acc2 + acc6)) + ((acc1 + acc5) +
 * (acc3 + acc7)), plus for q4_K ((acc_m0 + acc_m2) + (acc_m1 + acc_m3)) and for q5_K summs.
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
 * Exact for finite activations whose super-blocks' iscale is finite (a super-block whose largest
 * magnitude is below 127 / FLT_MAX, or that holds an infinity or NaN, has no checked result).
 * @module
 */

import type { Tensor } from "../../tensor.ts";
import { type Kernel, matmulGrid } from "./kernels.ts";
import { DECODE_ROWS, EXACT_COLUMNS, EXACT_ROWS } from "./shader_matmul_exact.ts";
import { weightBindings } from "./shader_quant.ts";
import { EXACT_WGSL } from "./wgsl_exact.ts";
import { matmulPrologue, PARAMS_WGSL } from "./wgsl_common.ts";

/** The k-quant weight dtypes this kernel takes. */
export type ExactKQuantDType = "q4_K" | "q5_K" | "q6_K";

const DTYPES: readonly ExactKQuantDType[] = ["q4_K", "q5_K", "q6_K"];

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

// q4_K and q5_K: d and dmin (the first two f16s), the 6-bit scales and mins (12 bytes at 4,
// unpacked as ggml's utmp words), and the mins' products with the bsums pairs.
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
      sumi[l] = sumi[l] + s_lo * byte_dot((w & 0x0f0f0f0fu)${fifth("2u * j")}, yq[y]) +
        s_hi * byte_dot(((w >> 4u) & 0x0f0f0f0fu)${fifth("2u * j + 1u")}, yq[y + 8u]);
    }
  }`;
}

// acc_l = fma(d, sumi_l, acc_l) for the 8 lanes.
const LANE_FMAS = `
  for (var l = 0u; l < 8u; l = l + 1u) {
    (*acc)[l] = fma_exact(d, f32(sumi[l]), (*acc)[l]);
  }`;

/**
 * Per weight type: `super_block(a, s, &acc, &accm)` adds the block at byte `a` times the
 * chunk's quantized super-block `s` to the 8 lane accumulators `acc` and (q4_K: all 4 lanes;
 * q5_K: x, ggml's summs) the min accumulators `accm`.
 */
const SUPER_BLOCK_WGSL: Readonly<Record<ExactKQuantDType, string>> = {
  q4_K: `${SCALES_MINS}
fn super_block(a: u32, s: u32, acc: ptr<function, array<f32, 8>>, accm: ptr<function, vec4<f32>>) {
  let d = yd[s] * S0_f16(a);
  let dmin = -yd[s] * S0_f16(a + 2u);
  var sc: vec2<u32>;
  var prod: vec4<i32>;
  scales_mins(a, s, &sc, &prod);
  for (var t = 0u; t < 4u; t = t + 1u) {
    (*accm)[t] = fma_exact(dmin, f32(prod[t]), (*accm)[t]);
  }
  var sumi: array<i32, 8>;
  ${nibbleLanes(16)}
  ${LANE_FMAS}
}`,
  q5_K: `${SCALES_MINS}
fn super_block(a: u32, s: u32, acc: ptr<function, array<f32, 8>>, accm: ptr<function, vec4<f32>>) {
  let d = yd[s] * S0_f16(a);
  let dmin = -yd[s] * S0_f16(a + 2u);
  var sc: vec2<u32>;
  var prod: vec4<i32>;
  scales_mins(a, s, &sc, &prod);
  (*accm).x = fma_exact(dmin, f32(prod.x + prod.y + prod.z + prod.w), (*accm).x);
  var sumi: array<i32, 8>;
  ${nibbleLanes(48, 16)}
  ${LANE_FMAS}
}`,
  // ql (128 bytes) at 0, qh (64) at 128, the 16 signed scales at 192, d at 208. Element
  // 128j + 32k + b (b < 32) is nibble k / 2 of ql byte 64j + 32(k % 2) + b with bits 2k, 2k + 1
  // of qh byte 32j + b above it, and has scale 8j + 2k + b / 16.
  q6_K: `
fn super_block(a: u32, s: u32, acc: ptr<function, array<f32, 8>>, accm: ptr<function, vec4<f32>>) {
  let d = yd[s] * S0_f16(a + 208u);
  var sc: array<u32, 4>;
  for (var i = 0u; i < 4u; i = i + 1u) {
    sc[i] = S0_u32(a + 192u + 4u * i);
  }
  let bs = s * 16u;
  var sumi: array<i32, 8>;
  for (var l = 0u; l < 8u; l = l + 1u) {
    // q8sclsub's lane: the scales' products with bsums 2l and 2l + 1, times 32.
    sumi[l] = -32 * (ybs[bs + 2u * l] * i8_of(sc[l / 2u], (2u * l) % 4u) +
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
      sumi[l] = sumi[l] +
        i8_of(sc[2u * j], half) * byte_dot((w0 & 0x0f0f0f0fu) | ((h & 0x03030303u) << 4u), yq[y]) +
        i8_of(sc[2u * j], 2u + half) *
          byte_dot((w1 & 0x0f0f0f0fu) | (((h >> 2u) & 0x03030303u) << 4u), yq[y + 8u]) +
        i8_of(sc[2u * j + 1u], half) *
          byte_dot(((w0 >> 4u) & 0x0f0f0f0fu) | (((h >> 4u) & 0x03030303u) << 4u), yq[y + 16u]) +
        i8_of(sc[2u * j + 1u], 2u + half) *
          byte_dot(((w1 >> 4u) & 0x0f0f0f0fu) | (((h >> 6u) & 0x03030303u) << 4u), yq[y + 24u]);
    }
  }
  ${LANE_FMAS}
}`,
};

/** What the result adds to hsum_float_8(acc): q4_K's acc_m reduced, q5_K's summs. */
const MIN_TERM: Readonly<Record<ExactKQuantDType, string>> = {
  // _mm_movehl_ps then _mm_movehdup_ps: (m0 + m2) + (m1 + m3).
  q4_K: " + opaque(opaque(accm.x + accm.z) + opaque(accm.y + accm.w))",
  q5_K: " + accm.x",
  q6_K: "",
};

/**
 * The kernel for weights of `dtype` and `columns` (1 or {@link EXACT_COLUMNS}) columns of S1
 * per workgroup.
 */
export function exactKQuantShader(dtype: ExactKQuantDType, columns: number): string {
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
${matmulPrologue("R", "C")}
  let nb0 = P.t[1].nb.x;
  let nc = min(C, N - n0);
  let row = lid % R;
  let col = lid / R;
  let m = m0 + row;
  let rb = at(1u, vec4<u32>(0u, min(m, M - 1u), a2, a3));
  let blocks = K / 256u;
  var acc: array<f32, 8>;
  for (var l = 0u; l < 8u; l = l + 1u) {
    acc[l] = 0.0;
  }
  var accm = vec4<f32>(0.0);
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
        super_block(rb + (b0 + j) * nb0, col * S + j, &acc, &accm);
      }
    }
  }
  if (m < M && col < nc) {
    // hsum_float_8: the high half onto the low one, then lanes 2-3 onto 0-1, then lane 1 onto 0.
    let h0 = opaque(acc[0] + acc[4]);
    let h1 = opaque(acc[1] + acc[5]);
    let h2 = opaque(acc[2] + acc[6]);
    let h3 = opaque(acc[3] + acc[7]);
    let sum = opaque(opaque(h0 + h2) + opaque(h1 + h3));
    D_set_f32(at(0u, vec4<u32>(m, n0 + col, i2, i3)), sum${MIN_TERM[dtype]});
  }
}`;
}

/**
 * The kernel of a mulMat node that asks for ggml's arithmetic (params[1] = 1, see `mulMat`'s
 * `ggml` option) with q4_K, q5_K or q6_K weights and S1 rows of adjacent f32s; null for any
 * other node, which keeps the other kernels.
 */
export function exactKQuantKernel(node: Tensor): Kernel | null {
  const [a, b] = node.src as [Tensor, Tensor];
  if (node.params[1] !== 1 || !isExactKQuant(a.dtype) || b.nb[0] !== 4) return null;
  const columns = b.ne[1] === 1 ? 1 : EXACT_COLUMNS;
  const workgroups = matmulGrid(node, columns === 1 ? DECODE_ROWS : EXACT_ROWS, columns);
  const dtype = a.dtype;
  return {
    key: `mulMatExactK:${dtype}:${columns}`,
    source: () => exactKQuantShader(dtype, columns),
    tensors: [node, a, b],
    status: false,
    count: 0,
    floats: [],
    workgroups,
  };
}
