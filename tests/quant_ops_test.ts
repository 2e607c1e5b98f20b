/**
 * Tensors of quantized weights and the CPU ops that take them: getRows of bf16, q8_0, q4_0,
 * q4_1, q5_0 and q5_1 rows equals `dequantize` bit for bit; mulMat with such a src0 and an f32
 * src1 is within ggml's test-backend-ops tolerance (normalized mean squared error <= 5e-4) of a
 * float64 product of the dequantized weights. Every case runs on each kernel build the CPU has,
 * with 1 and 2 threads (bitwise equal). Raw-byte setTensor/getTensor, and the DTypeErrors of
 * ops that do not take quantized tensors.
 */

import assert from "node:assert/strict";
import { assertNothingLive } from "./leaks.ts";
import {
  add,
  allocTensors,
  cont,
  Context,
  CpuBackend,
  cpy,
  dequantize,
  DTypeError,
  DTYPES,
  getRows,
  isQuantDType,
  liveAllocations,
  mulMat,
  type QuantDType,
  quantize,
  rmsNorm,
  ShapeError,
  transpose,
  WebGpuBackend,
  WEIGHT_DTYPES,
} from "../mod.ts";
import { refMulMatBatched, Rng } from "./reference.ts";
import { compute } from "./compute_builds.ts";

// Loads the library outside any test, so its resource is not reported as a test's leak.
const baseline = liveAllocations();

/** The dtypes getRows and mulMat take as src0 besides f32 and f16 (the table's weight trait). */
const QUANT_WEIGHTS = WEIGHT_DTYPES.filter((d): d is QuantDType => isQuantDType(d));

/** The cases' row lengths are in units of 32; a 256-element k-quant's are 8 times longer. */
function rowUnit(dtype: QuantDType): number {
  return Math.max(32, DTYPES[dtype].blockSize) / 32;
}

/**
 * From this many columns of src1 on, quantized weights are dequantized into the f32 GEMM
 * (zig/kernels/mul_mat_quant.zig's gemm_columns_min); below it src1 is quantized per block.
 */
const GEMM_COLUMNS_MIN = 20;

/** ggml's test-backend-ops bound for mul_mat. */
const NMSE_MAX = 5e-4;

function randoms(rng: Rng, count: number): Float32Array {
  const out = new Float32Array(count);
  for (let i = 0; i < count; i++) out[i] = rng.next() * 2 - 1;
  return out;
}

for (const dtype of QUANT_WEIGHTS) {
  Deno.test(`getRows of ${dtype} rows equals dequantize exactly`, () => {
    const rng = new Rng(0x51ed + dtype.length);
    for (const ne0 of [32, 64, 96, 288].map((k) => k * rowUnit(dtype))) {
      const rows = 7, batches = 3, picks = 5;
      const bytes = quantize(randoms(rng, ne0 * rows * batches), dtype);
      const chosen = new Int32Array(picks * batches);
      for (let i = 0; i < chosen.length; i++) chosen[i] = Math.floor(rng.next() * rows);
      const results = compute(() => {
        const ctx = new Context();
        const table = ctx.newTensor(dtype, [ne0, rows, batches]);
        const indices = ctx.newTensor("i32", [picks, batches]);
        const output = getRows(table, indices);
        return { ctx, inputs: [[table, bytes], [indices, chosen]], output };
      });
      const all = dequantize(bytes, dtype);
      const want = new Float32Array(ne0 * picks * batches);
      for (let b = 0; b < batches; b++) {
        for (let n = 0; n < picks; n++) {
          const row = chosen[b * picks + n]!;
          const from = (b * rows + row) * ne0;
          want.set(all.subarray(from, from + ne0), (b * picks + n) * ne0);
        }
      }
      for (const [simd, got] of results) {
        assert.deepEqual(
          new Uint8Array(got.buffer),
          new Uint8Array(want.buffer),
          `${simd} ${dtype} ne0=${ne0}: getRows differs from dequantize`,
        );
      }
    }
  });
}

interface MulMatCase {
  k: number;
  m: number;
  n: number;
  batchA: [number, number];
  batchB: [number, number];
  transposedB?: boolean;
}

const MUL_MAT_CASES: MulMatCase[] = [
  { k: 32, m: 1, n: 1, batchA: [1, 1], batchB: [1, 1] },
  { k: 64, m: 7, n: 3, batchA: [1, 1], batchB: [1, 1] },
  { k: 96, m: 5, n: 9, batchA: [2, 1], batchB: [4, 1] },
  { k: 288, m: 13, n: 1, batchA: [1, 1], batchB: [1, 1] },
  { k: 288, m: 11, n: 6, batchA: [1, 2], batchB: [3, 2] },
  { k: 64, m: 9, n: 5, batchA: [1, 1], batchB: [1, 1], transposedB: true },
  // Long rows: the mat-vec kernels' chunks of 16 blocks, then a tail of pairs and one block.
  { k: 1056, m: 9, n: 2, batchA: [1, 1], batchB: [1, 1] },
  // From 20 columns on the weights are dequantized into the f32 GEMM's panels (m past one panel).
  { k: 64, m: 37, n: 40, batchA: [1, 1], batchB: [2, 1] },
  { k: 288, m: 70, n: 33, batchA: [1, 1], batchB: [1, 1], transposedB: true },
];

/** Normalized mean squared error of `got` against the f64 product of `w` and `b` (case `c`). */
function normalizedError(
  got: Float32Array,
  w: Float32Array,
  b: Float32Array,
  c: MulMatCase,
): number {
  const { sum } = refMulMatBatched(w, b, c);
  let error = 0, norm = 0;
  for (let i = 0; i < sum.length; i++) {
    const value = got[i]!;
    if (!Number.isFinite(value)) return Infinity;
    error += (value - sum[i]!) ** 2;
    norm += sum[i]! ** 2;
  }
  return error / norm;
}

for (const dtype of QUANT_WEIGHTS) {
  Deno.test(`mulMat with ${dtype} weights is within NMSE ${NMSE_MAX} of f64`, () => {
    const rng = new Rng(0xabc + dtype.length);
    for (const c of MUL_MAT_CASES.map((c) => ({ ...c, k: c.k * rowUnit(dtype) }))) {
      const label = `${dtype} ${JSON.stringify(c)}`;
      const [a2, a3] = c.batchA, [b2, b3] = c.batchB;
      const aBytes = quantize(randoms(rng, c.k * c.m * a2 * a3), dtype);
      const bValues = randoms(rng, c.k * c.n * b2 * b3);
      // A transposed b is the transpose of an [n, k] tensor: its rows are strided (nb[0] = 4n).
      const bData = c.transposedB ? new Float32Array(c.k * c.n) : bValues;
      if (c.transposedB) {
        for (let i = 0; i < c.n; i++) {
          for (let j = 0; j < c.k; j++) bData[j * c.n + i] = bValues[i * c.k + j]!;
        }
      }
      const results = compute(() => {
        const ctx = new Context();
        const a = ctx.newTensor(dtype, [c.k, c.m, a2, a3]);
        const bInput = c.transposedB
          ? ctx.newTensor("f32", [c.n, c.k])
          : ctx.newTensor("f32", [c.k, c.n, b2, b3]);
        const b = c.transposedB ? transpose(bInput) : bInput;
        return { ctx, inputs: [[a, aBytes], [bInput, bData]], output: mulMat(a, b) };
      });
      const w = dequantize(aBytes, dtype);
      for (const [simd, got] of results) {
        const nmse = normalizedError(got, w, bValues, c);
        assert.ok(nmse <= NMSE_MAX, `${simd} ${label}: NMSE ${nmse} > ${NMSE_MAX}`);
      }
    }
  });
}

/**
 * Weight types whose decode path quantizes src1 to ggml's vec_dot_type and whose dot is, per
 * block, exact integers times scales: the f64 dot of both dequantized rows is the model. (q4_1
 * and q5_1 pair with q8_1, whose f16-rounded block sums enter their min terms: NMSE above.)
 */
const ACTIVATION_OF = [
  ["q8_0", "q8_0"],
  ["q4_0", "q8_0"],
  ["q5_0", "q8_0"],
  ["q4_K", "q8_K"],
  ["q5_K", "q8_K"],
  ["q6_K", "q8_K"],
] as const;

for (const [dtype, activation] of ACTIVATION_OF) {
  Deno.test(`mulMat with ${dtype} weights quantizes src1 to ${activation} as ggml does`, () => {
    // ggml_vec_dot_${dtype}_${activation}: src1 rows become ${activation} blocks, each block's
    // integer dot is scaled by both blocks' scales. Dequantized values of both are exact in f32,
    // so their f64 dot is the model; the kernel sums per-block f32 products, within a few ulps
    // of the row's size.
    const rng = new Rng(0x5eed);
    const decode = MUL_MAT_CASES.filter((c) => !c.transposedB && c.n < GEMM_COLUMNS_MIN);
    for (const c of decode.map((c) => ({ ...c, k: c.k * rowUnit(dtype) }))) {
      const [a2, a3] = c.batchA, [b2, b3] = c.batchB;
      const aBytes = quantize(randoms(rng, c.k * c.m * a2 * a3), dtype);
      const bValues = randoms(rng, c.k * c.n * b2 * b3);
      const results = compute(() => {
        const ctx = new Context();
        const a = ctx.newTensor(dtype, [c.k, c.m, a2, a3]);
        const b = ctx.newTensor("f32", [c.k, c.n, b2, b3]);
        return { ctx, inputs: [[a, aBytes], [b, bValues]], output: mulMat(a, b) };
      });
      const w = dequantize(aBytes, dtype);
      const y = dequantize(quantize(bValues, activation), activation);
      const { sum, magnitude } = refMulMatBatched(w, y, c);
      for (const [simd, got] of results) {
        for (let i = 0; i < sum.length; i++) {
          const m = i % c.m, n = Math.floor(i / c.m) % c.n;
          assert.ok(
            Math.abs(got[i]! - sum[i]!) <= 1e-6 * magnitude[i]! + 1e-30,
            `${simd} ${dtype} ${JSON.stringify(c)} [${m}, ${n}]: ${got[i]} vs ${sum[i]}`,
          );
        }
      }
    }
  });
}

Deno.test("quantized tensors: whole blocks, raw bytes in and out, DTypeErrors elsewhere", () => {
  const ctx = new Context();
  const q = ctx.newTensor("q4_0", [64, 3]);
  assert.equal(q.nbytes, 3 * 2 * 18);
  assert.deepEqual(q.nb, [18, 36, 108, 108]);
  assert.throws(() => ctx.newTensor("q8_0", [33, 2]), ShapeError);
  const x = ctx.newTensor("f32", [64, 3]);
  assert.throws(
    () => add(q, x),
    (e: Error) => e instanceof DTypeError && /add.*q4_0/.test(e.message),
  );
  assert.throws(
    () => rmsNorm(q, 1e-5),
    (e: Error) => e instanceof DTypeError && /rmsNorm.*q4_0/.test(e.message),
  );
  assert.throws(
    () => cont(q),
    (e: Error) => e instanceof DTypeError && /cont.*q4_0/.test(e.message),
  );
  assert.throws(
    () => mulMat(x, q),
    (e: Error) => e instanceof DTypeError && /mulMat.*q4_0/.test(e.message),
  );
  const q81 = ctx.newTensor("q8_1", [32, 2]);
  assert.throws(() => mulMat(q81, ctx.newTensor("f32", [32, 1])), DTypeError);
  assert.throws(() => getRows(q81, ctx.newTensor("i32", [1])), DTypeError);

  using cpu = new CpuBackend({ threads: 1 });
  using _memory = allocTensors(cpu, [q]);
  assert.throws(
    () => cpu.setTensor(q, new Float32Array(27)),
    (e: Error) => e instanceof DTypeError && /q4_0.*Uint8Array.*Float32Array/.test(e.message),
  );
  const bytes = quantize(randoms(new Rng(7), 64 * 3), "q4_0");
  cpu.setTensor(q, bytes);
  const back = cpu.getTensor(q);
  assert.ok(back instanceof Uint8Array);
  assert.deepEqual(back, bytes);
});

Deno.test("the WebGPU backend refuses quantized tensors it has no shader for", () => {
  // WebGPU decodes quantized weights in getRows and mulMat only (tests/webgpu_quant_test.ts);
  // a quantizing cpy stays on the CPU. The dtype check comes before anything needs a device.
  const ctx = new Context();
  const cache = ctx.newTensor("q8_0", [64, 2]);
  const x = ctx.newTensor("f32", [64, 2]);
  const supportsOp = WebGpuBackend.prototype.supportsOp;
  assert.equal(supportsOp.call({} as WebGpuBackend, cpy(x, cache)), false);
  assert.equal(supportsOp.call({} as WebGpuBackend, cpy(cache, x)), false);
});

Deno.test("quant_ops_test leaves no native buffers, pools or plans alive", () => {
  assertNothingLive(baseline);
});
