/**
 * WGSL that reads bf16 and ggml's block-quantized weights where they lie: the storage binding
 * holds the tensor's raw GGUF bytes, bound as `array<u32>`, and shaders decode them. Blocks of
 * 18, 22, 34 or 210 bytes do not start on words, so fields are fetched through byte-addressed
 * helpers that join two words where a field straddles them; a tensor may therefore start at any
 * byte (a view of row r starts r whole blocks in).
 *
 * Each dtype gets two decoders over its source binding `S0`:
 * - `W_value(a, j)`: element j of the block at byte `a` (getRows, and the tiled mulMat's
 *   loads): only the scale and quant bits of that element are read.
 * - `W_chunk(a, c, n, &w)`: the 32 consecutive elements of chunk c of that block (the block
 *   itself for the 32-element types, one of the eight 32-element sub-blocks of a k-quant), its
 *   scales read once and its quants a word at a time (the matrix-vector mulMat).
 *
 * The arithmetic is `zig/quant.zig`'s dequantize_row_*, operation for operation (scale products
 * formed first, integers converted exactly), so a decoded value equals `dequantize`'s unless
 * the device contracts a multiply and an add into a fused multiply-add (q4_1, q5_1 and the
 * k-quants' `d * q - m`), which WGSL allows.
 *
 * Layouts (ggml-common.h): see `zig/quant.zig`.
 * @module
 */

import { type DType, DTYPES, WEIGHT_DTYPES as TABLE_WEIGHT_DTYPES } from "../../dtype.ts";
import { isQuantDType, type QuantDType } from "../../quant.ts";
import { matmulPrologue, PARAMS_WGSL, tensorBindings } from "./wgsl_common.ts";

/** The dtypes whose `weight` trait the dtype table sets. */
type TableWeight = { [K in DType]: (typeof DTYPES)[K]["weight"] extends true ? K : never }[DType];

/**
 * The dtypes WebGPU's getRows and mulMat take as src0 (`S0`) as raw bytes: the table's weight
 * dtypes that `dequantize` reads (bf16 and the block types; q8_1 and q8_K are no weights).
 * Derived from the table, so a new weight dtype fails to compile until it has a decoder below.
 */
export const WEIGHT_DTYPES: readonly WeightDType[] = TABLE_WEIGHT_DTYPES.filter((
  dtype,
): dtype is WeightDType => isQuantDType(dtype));

/** A dtype of {@link WEIGHT_DTYPES}. */
export type WeightDType = Extract<TableWeight, QuantDType>;

/** True when WebGPU's getRows and mulMat decode `dtype` in their shaders. */
export function isWeightDType(dtype: DType): dtype is WeightDType {
  return (WEIGHT_DTYPES as readonly DType[]).includes(dtype);
}

/** Output rows of the matrix-vector kernel's workgroup. */
export const MATVEC_ROWS = 4;
/** src1 columns of the matrix-vector kernel's workgroup. */
export const MATVEC_COLS = 8;
/** mulMat with at most this many src1 columns takes the matrix-vector kernel; more, the tiles. */
export const MATVEC_MAX_N = 16;
const MATVEC_THREADS = 64;

// Byte-addressed reads of S0 (any byte b, fields straddling two words included), through
// S0_word: S0 may share its binding with another tensor (see wgsl_common.ts).
const BYTES_WGSL = `
fn S0_u8(b: u32) -> u32 {
  return (S0_word(b >> 2u) >> ((b & 3u) * 8u)) & 0xffu;
}
fn S0_u16(b: u32) -> u32 {
  let s = (b & 3u) * 8u;
  if (s == 24u) {
    return (S0_word(b >> 2u) >> 24u) | ((S0_word((b >> 2u) + 1u) & 0xffu) << 8u);
  }
  return (S0_word(b >> 2u) >> s) & 0xffffu;
}
fn S0_u32(b: u32) -> u32 {
  let s = (b & 3u) * 8u;
  let lo = S0_word(b >> 2u);
  if (s == 0u) {
    return lo;
  }
  return (lo >> s) | (S0_word((b >> 2u) + 1u) << (32u - s));
}
fn S0_f16(b: u32) -> f32 {
  return f16_to_f32(S0_u16(b));
}
// Byte t (0..3) of word q as a signed integer.
fn i8_of(q: u32, t: u32) -> i32 {
  return bitcast<i32>(q << (24u - 8u * t)) >> 24u;
}
`;

// get_scale_min_k4 of q4_K and q5_K: sub-block c's 6-bit scale and min (12 bytes at a + 4).
const SCALE_MIN_K4 = `
fn scale_min_k4(a: u32, c: u32) -> vec2<u32> {
  let s = a + 4u;
  if (c < 4u) {
    return vec2<u32>(S0_u8(s + c) & 63u, S0_u8(s + c + 4u) & 63u);
  }
  let q = S0_u8(s + c + 4u);
  return vec2<u32>(
    (q & 0xfu) | ((S0_u8(s + c - 4u) >> 6u) << 4u),
    (q >> 4u) | ((S0_u8(s + c) >> 6u) << 4u),
  );
}
`;

/** Decoders of each weight dtype: `W_value` and `W_chunk` (see the module comment). */
const decoders: Readonly<Record<WeightDType, string>> = {
  bf16: `
fn W_value(a: u32, j: u32) -> f32 {
  return bitcast<f32>(S0_u16(a) << 16u);
}
// a is the chunk's first element; n of its 32 elements lie inside the row.
fn W_chunk(a: u32, c: u32, n: u32, w: ptr<function, array<f32, 32>>) {
  for (var l = 0u; l < 32u; l = l + 1u) {
    (*w)[l] = select(0.0, bitcast<f32>(S0_u16(a + 2u * l) << 16u), l < n);
  }
}`,
  q8_0: `
fn W_value(a: u32, j: u32) -> f32 {
  return f32(i8_of(S0_u8(a + 2u + j), 0u)) * S0_f16(a);
}
fn W_chunk(a: u32, c: u32, n: u32, w: ptr<function, array<f32, 32>>) {
  let d = S0_f16(a);
  for (var i = 0u; i < 8u; i = i + 1u) {
    let q = S0_u32(a + 2u + 4u * i);
    for (var t = 0u; t < 4u; t = t + 1u) {
      (*w)[4u * i + t] = f32(i8_of(q, t)) * d;
    }
  }
}`,
  q4_0: `
fn W_value(a: u32, j: u32) -> f32 {
  let q = S0_u8(a + 2u + (j & 15u));
  let v = select(q & 0xfu, q >> 4u, j >= 16u);
  return f32(i32(v) - 8) * S0_f16(a);
}
fn W_chunk(a: u32, c: u32, n: u32, w: ptr<function, array<f32, 32>>) {
  let d = S0_f16(a);
  for (var i = 0u; i < 4u; i = i + 1u) {
    let q = S0_u32(a + 2u + 4u * i);
    for (var t = 0u; t < 4u; t = t + 1u) {
      let b = (q >> (8u * t)) & 0xffu;
      (*w)[4u * i + t] = f32(i32(b & 0xfu) - 8) * d;
      (*w)[16u + 4u * i + t] = f32(i32(b >> 4u) - 8) * d;
    }
  }
}`,
  q4_1: `
fn W_value(a: u32, j: u32) -> f32 {
  let q = S0_u8(a + 4u + (j & 15u));
  let v = select(q & 0xfu, q >> 4u, j >= 16u);
  return f32(v) * S0_f16(a) + S0_f16(a + 2u);
}
// The product d * q alone: the matmuls add the min times the activations' block sum as ggml.
fn W_scaled(a: u32, j: u32) -> f32 {
  let q = S0_u8(a + 4u + (j & 15u));
  return f32(select(q & 0xfu, q >> 4u, j >= 16u)) * S0_f16(a);
}
fn W_min(a: u32) -> f32 {
  return S0_f16(a + 2u);
}
// d * q without the min (see W_scaled).
fn W_chunk(a: u32, c: u32, n: u32, w: ptr<function, array<f32, 32>>) {
  let d = S0_f16(a);
  for (var i = 0u; i < 4u; i = i + 1u) {
    let q = S0_u32(a + 4u + 4u * i);
    for (var t = 0u; t < 4u; t = t + 1u) {
      let b = (q >> (8u * t)) & 0xffu;
      (*w)[4u * i + t] = f32(b & 0xfu) * d;
      (*w)[16u + 4u * i + t] = f32(b >> 4u) * d;
    }
  }
}`,
  q5_0: `
fn W_value(a: u32, j: u32) -> f32 {
  let q = S0_u8(a + 6u + (j & 15u));
  let v = select(q & 0xfu, q >> 4u, j >= 16u) | (((S0_u32(a + 2u) >> j) & 1u) << 4u);
  return f32(i32(v) - 16) * S0_f16(a);
}
fn W_chunk(a: u32, c: u32, n: u32, w: ptr<function, array<f32, 32>>) {
  let d = S0_f16(a);
  let qh = S0_u32(a + 2u);
  for (var i = 0u; i < 4u; i = i + 1u) {
    let q = S0_u32(a + 6u + 4u * i);
    for (var t = 0u; t < 4u; t = t + 1u) {
      let j = 4u * i + t;
      let b = (q >> (8u * t)) & 0xffu;
      let lo = (b & 0xfu) | (((qh >> j) & 1u) << 4u);
      let hi = (b >> 4u) | (((qh >> (j + 16u)) & 1u) << 4u);
      (*w)[j] = f32(i32(lo) - 16) * d;
      (*w)[16u + j] = f32(i32(hi) - 16) * d;
    }
  }
}`,
  q5_1: `
fn W_value(a: u32, j: u32) -> f32 {
  let q = S0_u8(a + 8u + (j & 15u));
  let v = select(q & 0xfu, q >> 4u, j >= 16u) | (((S0_u32(a + 4u) >> j) & 1u) << 4u);
  return f32(v) * S0_f16(a) + S0_f16(a + 2u);
}
fn W_scaled(a: u32, j: u32) -> f32 {
  let q = S0_u8(a + 8u + (j & 15u));
  let v = select(q & 0xfu, q >> 4u, j >= 16u) | (((S0_u32(a + 4u) >> j) & 1u) << 4u);
  return f32(v) * S0_f16(a);
}
fn W_min(a: u32) -> f32 {
  return S0_f16(a + 2u);
}
// d * q without the min (see q4_1's W_scaled).
fn W_chunk(a: u32, c: u32, n: u32, w: ptr<function, array<f32, 32>>) {
  let d = S0_f16(a);
  let qh = S0_u32(a + 4u);
  for (var i = 0u; i < 4u; i = i + 1u) {
    let q = S0_u32(a + 8u + 4u * i);
    for (var t = 0u; t < 4u; t = t + 1u) {
      let j = 4u * i + t;
      let b = (q >> (8u * t)) & 0xffu;
      let lo = (b & 0xfu) | (((qh >> j) & 1u) << 4u);
      let hi = (b >> 4u) | (((qh >> (j + 16u)) & 1u) << 4u);
      (*w)[j] = f32(lo) * d;
      (*w)[16u + j] = f32(hi) * d;
    }
  }
}`,
  // Sub-block c (elements 32c..32c+31): nibbles of qs[32 * (c / 2) ..], low for even c.
  q4_K: `${SCALE_MIN_K4}
fn W_value(a: u32, j: u32) -> f32 {
  let c = j / 32u;
  let sm = scale_min_k4(a, c);
  let q = (S0_u8(a + 16u + 32u * (c / 2u) + (j & 31u)) >> ((c & 1u) * 4u)) & 0xfu;
  return S0_f16(a) * f32(sm.x) * f32(q) - S0_f16(a + 2u) * f32(sm.y);
}
fn W_chunk(a: u32, c: u32, n: u32, w: ptr<function, array<f32, 32>>) {
  let sm = scale_min_k4(a, c);
  let d1 = S0_f16(a) * f32(sm.x);
  let m1 = S0_f16(a + 2u) * f32(sm.y);
  let base = a + 16u + 32u * (c / 2u);
  let shift = (c & 1u) * 4u;
  for (var i = 0u; i < 8u; i = i + 1u) {
    let q = S0_u32(base + 4u * i);
    for (var t = 0u; t < 4u; t = t + 1u) {
      (*w)[4u * i + t] = d1 * f32((q >> (8u * t + shift)) & 0xfu) - m1;
    }
  }
}`,
  // As q4_K, qs at byte 48, and bit c of qh[l] (bytes 16..47) adds 16.
  q5_K: `${SCALE_MIN_K4}
fn W_value(a: u32, j: u32) -> f32 {
  let c = j / 32u;
  let l = j & 31u;
  let sm = scale_min_k4(a, c);
  let low = (S0_u8(a + 48u + 32u * (c / 2u) + l) >> ((c & 1u) * 4u)) & 0xfu;
  let q = low | (((S0_u8(a + 16u + l) >> c) & 1u) << 4u);
  return S0_f16(a) * f32(sm.x) * f32(q) - S0_f16(a + 2u) * f32(sm.y);
}
fn W_chunk(a: u32, c: u32, n: u32, w: ptr<function, array<f32, 32>>) {
  let sm = scale_min_k4(a, c);
  let d1 = S0_f16(a) * f32(sm.x);
  let m1 = S0_f16(a + 2u) * f32(sm.y);
  let base = a + 48u + 32u * (c / 2u);
  let shift = (c & 1u) * 4u;
  for (var i = 0u; i < 8u; i = i + 1u) {
    let q = S0_u32(base + 4u * i);
    let h = S0_u32(a + 16u + 4u * i);
    for (var t = 0u; t < 4u; t = t + 1u) {
      let v = ((q >> (8u * t + shift)) & 0xfu) | (((h >> (8u * t + c)) & 1u) << 4u);
      (*w)[4u * i + t] = d1 * f32(v) - m1;
    }
  }
}`,
  // Sub-block c: half h = c / 4 (ql at 64h, qh at 128 + 32h, scales at 192 + 8h), quarter
  // r = c % 4: nibbles of ql[32 * (r % 2) + l] (high for r >= 2), bits 2r of qh[l], and the
  // signed scales 2r (l < 16) and 2r + 1; d at byte 208.
  q6_K: `
fn q6_scale(a: u32, c: u32, l: u32) -> f32 {
  let s = a + 192u + 8u * (c / 4u) + 2u * (c % 4u) + l / 16u;
  return S0_f16(a + 208u) * f32(i8_of(S0_u8(s), 0u));
}
fn W_value(a: u32, j: u32) -> f32 {
  let c = j / 32u;
  let l = j & 31u;
  let r = c % 4u;
  let low = (S0_u8(a + 64u * (c / 4u) + 32u * (r & 1u) + l) >> ((r >> 1u) * 4u)) & 0xfu;
  let high = (S0_u8(a + 128u + 32u * (c / 4u) + l) >> (2u * r)) & 3u;
  return q6_scale(a, c, l) * f32(i32(low | (high << 4u)) - 32);
}
fn W_chunk(a: u32, c: u32, n: u32, w: ptr<function, array<f32, 32>>) {
  let r = c % 4u;
  let ds0 = q6_scale(a, c, 0u);
  let ds1 = q6_scale(a, c, 16u);
  let ql = a + 64u * (c / 4u) + 32u * (r & 1u);
  let qh = a + 128u + 32u * (c / 4u);
  let shift = (r >> 1u) * 4u;
  for (var i = 0u; i < 8u; i = i + 1u) {
    let q = S0_u32(ql + 4u * i);
    let h = S0_u32(qh + 4u * i);
    for (var t = 0u; t < 4u; t = t + 1u) {
      let v = ((q >> (8u * t + shift)) & 0xfu) | (((h >> (8u * t + 2u * r)) & 3u) << 4u);
      (*w)[4u * i + t] = select(ds0, ds1, i >= 4u) * f32(i32(v) - 32);
    }
  }
}`,
};

/**
 * Declarations for a kernel whose destination is f32 and whose sources are weights of `dtype`
 * (`S0`, decoded) and then `rest` (plain dtypes, `S1`, ...), with the decoders.
 */
export function weightBindings(dtype: WeightDType, rest: readonly DType[]): string {
  // S0 is declared as an f32 binding (a bare array<u32>); its typed accessors go unused.
  return `${tensorBindings("f32", ["f32", ...rest])}
${BYTES_WGSL}
${decoders[dtype]}`;
}

/**
 * WGSL for element `k` of row (m, i2, i3) of the weights bound as tensor 1 (`S0`), as an
 * expression over WGSL names `k` and `rest` (`m, i2, i3`).
 */
export function weightLoad(dtype: WeightDType, k: string, rest: string): string {
  const size = DTYPES[dtype].blockSize;
  return size === 1
    ? `W_value(at(1u, vec4<u32>(${k}, ${rest})), 0u)`
    : `W_value(at(1u, vec4<u32>((${k}) / ${size}u, ${rest})), (${k}) % ${size}u)`;
}

/**
 * mulMat D[m, n] = sum_k S0[k, m] * S1[k, n] per batch for few columns n: a workgroup of 64
 * threads computes {@link MATVEC_ROWS} rows by {@link MATVEC_COLS} columns of D. The threads
 * split K in chunks of 32 elements; each decodes its chunk of each row once (`W_chunk`) and
 * dots it with every column's 32 values of S1. A tree reduction in workgroup memory then sums
 * the threads' partial dots. Batches broadcast S0 as ggml does.
 */
/**
 * Weight types whose products quantize the activations to q8 blocks of 32 first, as ggml's CPU
 * backend does (q8_0, or q8_1 for q4_1/q5_1: the same quants); the CPU backend computes them so,
 * and these shaders follow it, so both backends pick the same greedy tokens. (bf16 and the
 * k-quants multiply f32 activations here.)
 */
export function quantizesActivations(dtype: DType): boolean {
  return dtype === "q8_0" || dtype === "q4_0" || dtype === "q4_1" || dtype === "q5_0" ||
    dtype === "q5_1";
}

/**
 * WGSL: x as its q8 block quantizes it (the block's largest magnitude `amax`): d = amax / 127
 * stored as f16, the quant x·(127 / amax) rounded half to even (WGSL's round), ggml's x86 code.
 */
export const ACT_Q8_WGSL = `
fn act_q8(x: f32, amax: f32) -> f32 {
  if (amax == 0.0) {
    return 0.0;
  }
  return round(x * (127.0 / amax)) * f16_to_f32(f32_to_f16(amax / 127.0));
}
// q8_1's s of a block whose quants sum to \`sum\`: d (unrounded) times the sum, stored as f16
// (zig/quant.zig quantize_activation_block, as ggml's quantize_row_q8_1).
fn act_q8_s(amax: f32, sum: f32) -> f32 {
  return f16_to_f32(f32_to_f16((amax / 127.0) * sum));
}
fn act_q8_int(x: f32, amax: f32) -> f32 {
  if (amax == 0.0) {
    return 0.0;
  }
  return round(x * (127.0 / amax));
}`;

/**
 * Weight types with a min (q4_1, q5_1): their products take the activations as q8_1, and
 * ggml adds the min times q8_1's f16 \`s\` (d times the block's sum of quants) per block, so
 * the shaders decode d * q alone (\`W_scaled\`, \`W_chunk\`) and add \`W_min\` times that s.
 */
export function hasMinTerm(dtype: DType): boolean {
  return dtype === "q4_1" || dtype === "q5_1";
}

export function matvecShader(dtype: WeightDType): string {
  const rows = MATVEC_ROWS, cols = MATVEC_COLS, threads = MATVEC_THREADS;
  const outputs = rows * cols;
  const size = DTYPES[dtype].blockSize;
  // The chunk's block address and sub-block; bf16 chunks are 32 elements of the row.
  const locate = size === 1
    ? `let a = rb + k0 * nb0;
      let c = 0u;`
    : `let a = rb + (k0 / ${size}u) * nb0;
      let c = (k0 % ${size}u) / 32u;`;
  const quantize = quantizesActivations(dtype);
  const minTerm = hasMinTerm(dtype);
  return `${PARAMS_WGSL}
${weightBindings(dtype, ["f32"])}
${quantize ? ACT_Q8_WGSL : ""}
var<workgroup> red: array<f32, ${outputs * threads}>;

@compute @workgroup_size(${threads})
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
${matmulPrologue(`${rows}u`, `${cols}u`)}
  let nb0 = P.t[1].nb.x;
  let xb0 = P.t[2].nb.x;
  let mc = min(${rows}u, M - m0);
  let nc = min(${cols}u, N - n0);
  var acc: array<f32, ${outputs}>;
  for (var q = 0u; q < ${outputs}u; q = q + 1u) {
    acc[q] = 0.0;
  }
  let chunks = (K + 31u) / 32u;
  for (var ck = lid; ck < chunks; ck = ck + ${threads}u) {
    let k0 = ck * 32u;
    let n = min(32u, K - k0);
    for (var r = 0u; r < mc; r = r + 1u) {
      let rb = at(1u, vec4<u32>(0u, m0 + r, a2, a3));
      ${locate}
      var w: array<f32, 32>;
      W_chunk(a, c, n, &w);
      for (var j = 0u; j < nc; j = j + 1u) {
        let xb = at(2u, vec4<u32>(k0, n0 + j, i2, i3));
        ${
    quantize
      ? `var amax = 0.0;
        for (var l = 0u; l < n; l = l + 1u) {
          amax = max(amax, abs(S1_f32(xb + l * xb0)));
        }`
      : ""
  }
        var s = 0.0;
        ${minTerm ? "var sq = 0.0;" : ""}
        for (var l = 0u; l < n; l = l + 1u) {
          s = s + w[l] * ${
    quantize ? "act_q8(S1_f32(xb + l * xb0), amax)" : "S1_f32(xb + l * xb0)"
  };
          ${minTerm ? "sq = sq + act_q8_int(S1_f32(xb + l * xb0), amax);" : ""}
        }
        ${minTerm ? "s = s + W_min(a) * act_q8_s(amax, sq);" : ""}
        acc[r * ${cols}u + j] = acc[r * ${cols}u + j] + s;
      }
    }
  }
  for (var q = 0u; q < ${outputs}u; q = q + 1u) {
    red[q * ${threads}u + lid] = acc[q];
  }
  workgroupBarrier();
  for (var s = ${threads / 2}u; s > 0u; s = s >> 1u) {
    if (lid < s) {
      for (var q = 0u; q < ${outputs}u; q = q + 1u) {
        red[q * ${threads}u + lid] = red[q * ${threads}u + lid] + red[q * ${threads}u + lid + s];
      }
    }
    workgroupBarrier();
  }
  if (lid < ${outputs}u) {
    let r = lid / ${cols}u;
    let j = lid % ${cols}u;
    if (r < mc && j < nc) {
      D_set_f32(at(0u, vec4<u32>(m0 + r, n0 + j, i2, i3)), red[lid * ${threads}u]);
    }
  }
}`;
}
