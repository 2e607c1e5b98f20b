/**
 * WebGPU's mulMat in the order of llama.cpp's repacked q4_0 / q4_K kernels (mulMat's `repack`
 * option, params[1] = 2: src/backend/webgpu/shader_matmul_exact.ts and shader_matmul_exact_k.ts),
 * bit for bit:
 * - every repacked case of tests/fixtures/ggml_exact_dots_avx2.json (ggml's AVX2 build's own
 *   mul_mat with src0 in its CPU_REPACK buffer: q4_0 and q4_K, 1 to 13, 20 and 64 columns, a
 *   src1 batch), against ggml's bits, and the emulation below against them too;
 * - against `CpuBackend({ simd: "avx2" })` with the same option (the shapes of the next item, and
 *   11-block rows with 2 batches at 1 to 64 columns), and the emulation against it too;
 * - against an emulation of ggml's AVX2 steps in this file ({@link reference}: every f32 rounding
 *   by Math.fround, every fused multiply-add rounded once):
 *   q4_0 (ggml_gemv / ggml_gemm_q4_0_8x8_q8_0) and q4_K (ggml_gemv / ggml_gemm_q4_K_8x8_q8_K) at
 *   1 to 13, 20 and 64 columns (the gemm on each batch's groups of 4 columns, the gemv on the
 *   rest), rows of an odd number of blocks, row counts that are multiples of 8 but of no
 *   workgroup's 32 or 64, rows longer than one chunk of either kernel, broadcast batches, and
 *   q4_K super-blocks whose gemv sum passes 2^24 (rounded to the nearest f32 as
 *   _mm256_cvtepi32_ps does);
 * - nodes with params[1] = 2 that llama.cpp does not repack (other weight types, q4_0 / q4_K
 *   weights whose row count is no multiple of 8 or that have batches) give the bits of
 *   params[1] = 1.
 * The emulation quantizes q8_K by quantize_row_q8_K_ref's rule, as the kernel does; ggml's
 * ggml_quantize_mat_q8_K_4x8 (the gemm's columns) takes the opposite sign for a super-block whose
 * largest magnitude appears with both signs, the negative first (some of the activations here),
 * which negates d and every quant and bsum and so changes no product's bits (the CPU
 * comparisons, whose kernel takes the 4x8 rule, cover such super-blocks).
 * Every element is bit-exact: there is no tolerance (activations holding an infinity or NaN are
 * not covered). Skipped, visibly, when Deno finds no adapter (the CPU comparisons also where the
 * CPU has no AVX2 build).
 */

import assert from "node:assert/strict";
import { Context, mulMat, quantize, type Tensor } from "../mod.ts";
import { closeSharedWebGpuTest, computeOnGpu, exactGpuTests, sharedWebGpu } from "./gpu.ts";
import {
  assertBits,
  build,
  type CaseGraph,
  casesAvx2,
  computeOnCpuAvx2,
  fixtureBits,
  label,
} from "./ggml_exact_dots_cases.ts";
import { decodeF16, fmaF32Exact, Rng, roundF16 } from "./reference.ts";

const gpu = await sharedWebGpu();
const test = exactGpuTests(gpu, "webgpu exact repack");

/** mulMat with ggml's arithmetic in the repacked kernels' order (params[1] = 2). */
function repackMulMat(a: Tensor, b: Tensor): Tensor {
  return mulMat(a, b, { ggml: true, repack: true });
}

// ---------------------------------------------------------------------------------------------
// The emulation of ggml's steps.

/** a * b + c of f32 values rounded once to f32 (_mm256_fmadd_ps). */
const fma = fmaF32Exact;

/** Round half to even (_mm256_round_ps, nearest_int). */
function rne(x: number): number {
  const r = Math.round(x);
  return r - x === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** An activation row quantized: quants, and per block (q8_0) or super-block (q8_K) d. */
interface Quantized {
  q: Int32Array;
  d: Float64Array;
}

/** quantize_row_q8_0 (= ggml_quantize_mat_q8_0_4x8's rows): d kept as f16. */
function quantizeQ8_0(x: Float32Array): Quantized {
  const q = new Int32Array(x.length), d = new Float64Array(x.length / 32);
  for (let b = 0; b < d.length; b++) {
    let amax = 0;
    for (let i = 0; i < 32; i++) amax = Math.max(amax, Math.abs(x[32 * b + i]!));
    const id = amax === 0 ? 0 : Math.fround(127 / amax);
    for (let i = 0; i < 32; i++) q[32 * b + i] = rne(Math.fround(x[32 * b + i]! * id));
    d[b] = roundF16(Math.fround(amax / 127));
  }
  return { q, d };
}

/** quantize_row_q8_K_ref: the first element of largest magnitude sets iscale = -127 / max. */
function quantizeQ8_K(x: Float32Array): Quantized {
  const q = new Int32Array(x.length), d = new Float64Array(x.length / 256);
  for (let b = 0; b < d.length; b++) {
    let amax = 0, max = 0;
    for (let i = 0; i < 256; i++) {
      const v = x[256 * b + i]!;
      if (Math.abs(v) > amax) [amax, max] = [Math.abs(v), v];
    }
    if (amax === 0) continue;
    const iscale = Math.fround(-127 / max);
    for (let i = 0; i < 256; i++) {
      q[256 * b + i] = Math.min(127, rne(Math.fround(iscale * x[256 * b + i]!)));
    }
    d[b] = Math.fround(1 / iscale);
  }
  return { q, d };
}

/** One q4_0 weight row's element `e` of block `b` (nibble less 8) and the blocks' d. */
function q4_0Row(bytes: Uint8Array, at: number, blocks: number): { w: Int32Array; d: number[] } {
  const w = new Int32Array(32 * blocks), d: number[] = [];
  for (let b = 0; b < blocks; b++) {
    const p = at + 18 * b;
    d.push(decodeF16(bytes[p]! | (bytes[p + 1]! << 8)));
    for (let i = 0; i < 16; i++) {
      w[32 * b + i] = (bytes[p + 2 + i]! & 15) - 8;
      w[32 * b + 16 + i] = (bytes[p + 2 + i]! >> 4) - 8;
    }
  }
  return { w, d };
}

/** One q4_K weight row: nibbles, and per super-block d, dmin, the 8 scales and mins. */
interface Q4KRow {
  w: Int32Array;
  d: number[];
  dmin: number[];
  sc: number[][];
  m: number[][];
}

function q4_KRow(bytes: Uint8Array, at: number, blocks: number): Q4KRow {
  const row: Q4KRow = { w: new Int32Array(256 * blocks), d: [], dmin: [], sc: [], m: [] };
  for (let b = 0; b < blocks; b++) {
    const p = at + 144 * b;
    row.d.push(decodeF16(bytes[p]! | (bytes[p + 1]! << 8)));
    row.dmin.push(decodeF16(bytes[p + 2]! | (bytes[p + 3]! << 8)));
    const s = (i: number): number => bytes[p + 4 + i]!;
    const sc: number[] = [], m: number[] = [];
    for (let j = 0; j < 8; j++) {
      // get_scale_min_k4
      sc.push(j < 4 ? s(j) & 63 : (s(j + 4) & 15) | ((s(j - 4) >> 6) << 4));
      m.push(j < 4 ? s(j + 4) & 63 : (s(j + 4) >> 4) | ((s(j) >> 6) << 4));
    }
    row.sc.push(sc);
    row.m.push(m);
    for (let pair = 0; pair < 4; pair++) {
      for (let i = 0; i < 32; i++) {
        const byte = bytes[p + 16 + 32 * pair + i]!;
        row.w[256 * b + 64 * pair + i] = byte & 15;
        row.w[256 * b + 64 * pair + 32 + i] = byte >> 4;
      }
    }
  }
  return row;
}

/** Sum of w[i] * q[i] for i in [from, from + count). */
function idot(w: Int32Array, q: Int32Array, from: number, count: number): number {
  let s = 0;
  for (let i = from; i < from + count; i++) s += w[i]! * q[i]!;
  return s;
}

/** A repack shape: dtype weights [k, m] (2-D) times f32 [k, n, batches]. */
interface Shape {
  dtype: "q4_0" | "q4_K";
  k: number;
  m: number;
  n: number;
  batches?: number;
}

/**
 * ggml's AVX2 repacked product of `weights` (raw blocks, [k, m]) and `x` ([k, n, batches]):
 * ggml_gemm_* on each batch's columns below n - n % 4, ggml_gemv_* on the rest.
 */
function reference(s: Shape, weights: Uint8Array, x: Float32Array): Float32Array {
  const batches = s.batches ?? 1;
  const out = new Float32Array(s.m * s.n * batches);
  const rowBytes = s.dtype === "q4_0" ? 18 * s.k / 32 : 144 * s.k / 256;
  const rows = Array.from(
    { length: s.m },
    (_, r) =>
      s.dtype === "q4_0"
        ? q4_0Row(weights, r * rowBytes, s.k / 32)
        : q4_KRow(weights, r * rowBytes, s.k / 256),
  );
  for (let c = 0; c < s.n * batches; c++) {
    const col = x.subarray(c * s.k, (c + 1) * s.k);
    const gemm = c % s.n < s.n - s.n % 4;
    if (s.dtype === "q4_0") {
      const a = quantizeQ8_0(col);
      for (let r = 0; r < s.m; r++) {
        const { w, d } = rows[r] as { w: Int32Array; d: number[] };
        let acc = 0;
        for (let b = 0; b < s.k / 32; b++) {
          acc = fma(idot(w, a.q, 32 * b, 32), Math.fround(d[b]! * a.d[b]!), acc);
        }
        out[c * s.m + r] = acc;
      }
      continue;
    }
    const a = quantizeQ8_K(col);
    for (let r = 0; r < s.m; r++) {
      const row = rows[r] as Q4KRow;
      let acc = 0, accm = 0;
      for (let b = 0; b < s.k / 256; b++) {
        const d = Math.fround(row.d[b]! * a.d[b]!);
        const dmin = Math.fround(row.dmin[b]! * a.d[b]!);
        const sumi: number[] = [], mins: number[] = [];
        for (let j = 0; j < 8; j++) {
          sumi.push(row.sc[b]![j]! * idot(row.w, a.q, 256 * b + 32 * j, 32));
          let bsum = 0;
          for (let i = 0; i < 32; i++) bsum += a.q[256 * b + 32 * j + i]!;
          mins.push(row.m[b]![j]! * bsum);
        }
        if (gemm) {
          for (let p = 0; p < 4; p++) {
            acc = fma(sumi[2 * p]! + sumi[2 * p + 1]!, d, acc);
            accm = fma(mins[2 * p]! + mins[2 * p + 1]!, dmin, accm);
          }
        } else {
          // The integer sums may pass 2^24: Math.fround rounds them to nearest, ties to even.
          acc = fma(Math.fround(sumi.reduce((t, v) => t + v)), d, acc);
          accm = fma(mins.reduce((t, v) => t + v), dmin, accm);
        }
      }
      out[c * s.m + r] = Math.fround(acc - accm);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Inputs.

/** An f16's bits with a magnitude in [2^lo, 2^(lo + 1)). */
function f16Bits(rng: Rng, lo: number): number {
  return ((lo + 15) << 10) | rng.int(1024);
}

/**
 * Raw weight blocks: random nibbles and scale bytes under small f16 scales; a quarter of the
 * q4_K super-blocks all ones (scales and mins 63, nibbles 15), which with positive activations
 * make the gemv's integer sum pass 2^24.
 */
function weightBytes(rng: Rng, s: Shape): Uint8Array {
  const bytes = new Uint8Array((s.dtype === "q4_0" ? 18 * s.k / 32 : 144 * s.k / 256) * s.m);
  const block = s.dtype === "q4_0" ? 18 : 144;
  for (let p = 0; p < bytes.length; p += block) {
    const dBits = f16Bits(rng, -10 - rng.int(4));
    bytes[p] = dBits & 0xff;
    bytes[p + 1] = dBits >> 8;
    const full = s.dtype === "q4_K" && rng.int(4) === 0;
    let from = 2;
    if (s.dtype === "q4_K") {
      const mBits = f16Bits(rng, -11 - rng.int(4));
      bytes[p + 2] = mBits & 0xff;
      bytes[p + 3] = mBits >> 8;
      from = 4;
    }
    for (let i = from; i < block; i++) bytes[p + i] = full ? 0xff : rng.int(256);
  }
  return bytes;
}

/**
 * Activations per block of `size`: normal-ish values of different magnitudes; some blocks all
 * zero, some tiny, some all positive, some whose largest magnitude appears with both signs.
 */
function activations(rng: Rng, count: number, size: number): Float32Array {
  const out = new Float32Array(count);
  for (let start = 0; start < count; start += size) {
    const kind = rng.int(10);
    const scale = kind === 0 ? 0 : kind === 1 ? 1e-6 : 2 ** (rng.int(12) - 6);
    for (let i = start; i < start + size; i++) {
      const v = rng.next() + rng.next() + rng.next() - 1.5;
      out[i] = scale * (kind === 2 ? 1 + Math.abs(v) : v);
    }
    if (kind === 3) {
      out[start + rng.int(size / 2)] = -2 * scale;
      out[start + size / 2 + rng.int(size / 2)] = 2 * scale;
    }
  }
  return out;
}

function shapeLabel(s: Shape): string {
  return `${s.dtype} [${s.k}, ${s.m}] x [${s.k}, ${s.n}, ${s.batches ?? 1}]`;
}

/** The shape's graph (params[1] = `params`), its raw weights and activations. */
function buildShape(
  s: Shape,
  seed: number,
  params: 1 | 2 = 2,
): CaseGraph & { weights: Uint8Array; x: Float32Array } {
  const rng = new Rng(seed);
  const weights = weightBytes(rng, s);
  const x = activations(rng, s.k * s.n * (s.batches ?? 1), s.dtype === "q4_0" ? 32 : 256);
  const ctx = new Context();
  const a = ctx.newTensor(s.dtype, [s.k, s.m]);
  const b = ctx.newTensor("f32", [s.k, s.n, s.batches ?? 1]);
  return {
    ctx,
    inputs: [[a, weights], [b, new Uint8Array(x.buffer)]],
    output: params === 2 ? repackMulMat(a, b) : mulMat(a, b, { ggml: true }),
    weights,
    x,
  };
}

// The repacked cases of tests/fixtures/ggml_exact_dots_avx2.json: ggml's AVX2 build's mul_mat
// of src0 [k, m] in its CPU_REPACK buffer and src1 [k, n, batch] (ggml_exact_dots_cases.ts's
// `build` regenerates the inputs and asks for `repack`).
const repackCases = casesAvx2.filter((c) => c.repack === true);

test("the AVX2 fixture has repacked q4_0 and q4_K cases", false, () => {
  for (const type of ["q4_0", "q4_K"]) {
    assert.ok(repackCases.some((c) => c.type === type), `no repacked ${type} case`);
  }
  return Promise.resolve();
});

for (const c of repackCases) {
  test(`${label(c)} equals ggml's AVX2 mul_mat bit for bit`, false, async (gpu) => {
    const s: Shape = {
      dtype: c.type as Shape["dtype"],
      k: c.k,
      m: c.m,
      n: c.n,
      batches: c.batch ?? 1,
    };
    const built = build(c, true);
    const [[, weights], [, x]] = built.inputs as [[Tensor, Uint8Array], [Tensor, Uint8Array]];
    const want = fixtureBits(c.bits);
    // The emulation first: it states ggml's steps.
    assertBits(
      reference(s, weights, new Float32Array(x.buffer, x.byteOffset, x.byteLength / 4)),
      want,
      `${label(c)}: the emulation`,
    );
    assertBits(await computeOnGpu(gpu, built), want, label(c));
  });
}

const shapes: Shape[] = [];
for (const dtype of ["q4_0", "q4_K"] as const) {
  const block = dtype === "q4_0" ? 32 : 256;
  // Every column count to 13 (gemm and gemv columns in every mix), rows of 7 blocks.
  for (let n = 1; n <= 13; n++) shapes.push({ dtype, k: 7 * block, m: 40, n });
  shapes.push(
    // Prefill: longer rows than a chunk, row counts past a workgroup's.
    { dtype, k: (dtype === "q4_0" ? 40 : 5) * block, m: 72, n: 20 },
    { dtype, k: 9 * block, m: 104, n: 64 },
    // Decode over rows longer than the one-column kernel's chunk.
    { dtype, k: (dtype === "q4_0" ? 72 : 6) * block, m: 136, n: 1 },
    // Batches: each batch's columns split into the gemm's groups of 4 and the gemv's rest.
    { dtype, k: 3 * block, m: 8, n: 6, batches: 3 },
    { dtype, k: 5 * block, m: 16, n: 1, batches: 2 },
  );
}

test("the emulation's fma rounds once", false, () => {
  // (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 lies halfway between two f32s; adding 2^-60 rounds to
  // that tie in f64, but the exact sum is above (or below) it.
  const a = 1 + 2 ** -12;
  assert.equal(fma(a, a, 2 ** -60), 1 + 2 ** -11 + 2 ** -23);
  assert.equal(fma(a, a, -(2 ** -60)), 1 + 2 ** -11);
  assert.equal(fma(a, a, 0), 1 + 2 ** -11);
  assert.equal(fma(-a, a, -(2 ** -60)), -(1 + 2 ** -11 + 2 ** -23));
  return Promise.resolve();
});

for (const [i, s] of shapes.entries()) {
  test(`${shapeLabel(s)} equals ggml's repacked steps bit for bit`, false, async (gpu) => {
    const built = buildShape(s, 0x7e + i);
    const want = reference(s, built.weights, built.x);
    assertBits(await computeOnGpu(gpu, built), want, shapeLabel(s));
  });
}

// The CPU backend's AVX2 build with the same option (zig/kernels/dot_repack.zig, which quantizes
// q8_K with the 4x8 quantizer's sign rule): the shapes above, and batches at more column counts.
const cpuShapes: Shape[] = [...shapes];
for (const dtype of ["q4_0", "q4_K"] as const) {
  const block = dtype === "q4_0" ? 32 : 256;
  for (const n of [1, 2, 3, 4, 5, 7, 8, 9, 13, 20, 64]) {
    cpuShapes.push({ dtype, k: 11 * block, m: 56, n, batches: 2 });
  }
}
for (const [i, s] of cpuShapes.entries()) {
  test(`${shapeLabel(s)} equals the CPU's AVX2 build bit for bit`, true, async (gpu) => {
    const want = computeOnCpuAvx2(buildShape(s, 0x300 + i));
    const built = buildShape(s, 0x300 + i);
    assertBits(reference(s, built.weights, built.x), want, `${shapeLabel(s)}: the emulation`);
    assertBits(await computeOnGpu(gpu, built), want, shapeLabel(s));
  });
}

/** Products llama.cpp does not repack: params[1] = 2 gives params[1] = 1's bits. */
interface PlainCase {
  dtype: "q8_0" | "q4_1" | "q5_K" | "q6_K" | "f16" | "q4_0" | "q4_K";
  k: number;
  m: number;
  n: number;
  /** Weights with this many batches (not 2-D, so not repacked). */
  batches?: number;
}

const plain: PlainCase[] = [
  { dtype: "q8_0", k: 256, m: 40, n: 9 },
  { dtype: "q4_1", k: 256, m: 40, n: 1 },
  { dtype: "q5_K", k: 512, m: 40, n: 9 },
  { dtype: "q6_K", k: 512, m: 40, n: 3 },
  { dtype: "f16", k: 256, m: 40, n: 5 },
  // Row counts that are no multiple of 8.
  { dtype: "q4_0", k: 256, m: 36, n: 5 },
  { dtype: "q4_K", k: 512, m: 44, n: 9 },
  { dtype: "q4_K", k: 512, m: 44, n: 1 },
  // Weights with batches.
  { dtype: "q4_0", k: 256, m: 16, n: 5, batches: 2 },
  { dtype: "q4_K", k: 256, m: 16, n: 9, batches: 2 },
];

function buildPlain(c: PlainCase, params: 1 | 2): CaseGraph {
  const rng = new Rng(0x91 + c.k + c.m + c.n);
  const batches = c.batches ?? 1;
  const weights = new Float32Array(c.k * c.m * batches);
  for (let i = 0; i < weights.length; i++) weights[i] = rng.uniform() * 0.1;
  const x = activations(rng, c.k * c.n * batches, 256);
  const ctx = new Context();
  const a = ctx.newTensor(c.dtype, [c.k, c.m, batches]);
  const b = ctx.newTensor("f32", [c.k, c.n, batches]);
  const bytes = c.dtype === "f16"
    ? new Uint8Array(Float16Array.from(weights).buffer)
    : quantize(weights, c.dtype);
  return {
    ctx,
    inputs: [[a, bytes], [b, new Uint8Array(x.buffer)]],
    output: params === 2 ? repackMulMat(a, b) : mulMat(a, b, { ggml: true }),
  };
}

for (const c of plain) {
  const name = `${c.dtype} [${c.k}, ${c.m}, ${c.batches ?? 1}] x [${c.k}, ${c.n}]`;
  test(`${name}: params 2 computes as params 1`, false, async (gpu) => {
    const one = await computeOnGpu(gpu, buildPlain(c, 1));
    const two = await computeOnGpu(gpu, buildPlain(c, 2));
    assertBits(two, one, name);
  });
}

closeSharedWebGpuTest();
