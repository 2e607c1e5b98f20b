/**
 * WebGPU's mulMat with ggml's arithmetic (`mulMat(a, b, { ggml: true })`) on q8_0, q4_0, q4_1,
 * q5_0 and q5_1 weights (src/backend/webgpu/shader_matmul_exact.ts) against ggml's and the CPU backend's bits:
 * - every quantized case of tests/fixtures/ggml_exact_dots.json (ggml's own mul_mat results for
 *   q4_1, q8_0, q5_0 and q5_1, 1 to 5 columns, from ggml_exact_dots_cases.ts's generator) bit for bit;
 * - larger shapes against `CpuBackend({ simd: "avx2" })` with the same option, bit for bit:
 *   20, 24 and 64 columns (prefill) and one column (decode), row counts that are no multiple of
 *   a workgroup's 32 or 64 rows, rows longer than one chunk of blocks of either kernel (as many
 *   blocks as the workgroup has rows), broadcast batches, weights at a byte offset
 *   that is no multiple of 4, and activations with all-zero blocks, tiny blocks and blocks of
 *   very different magnitudes.
 * Every element is bit-exact: there is no tolerance (activation blocks holding an infinity or
 * NaN, whose quantization the CPU takes from ggml's scalar reference, are not covered).
 * Skipped, visibly, when Deno finds no adapter or the CPU has no AVX2 build.
 */

import assert from "node:assert/strict";
import { closeSharedWebGpuTest, computeOnGpu, exactGpuTests, sharedWebGpu } from "./gpu.ts";
import {
  assertBits,
  build,
  buildQuantShape,
  type CaseGraph,
  cases,
  computeOnCpuAvx2 as onCpu,
  fixtureBits,
  K_QUANTS,
  label,
  type QuantShape,
  quantShapeLabel,
} from "./ggml_exact_dots_cases.ts";
import { rowBytes } from "../src/dtype.ts";
import { Rng } from "./reference.ts";

const gpu = await sharedWebGpu();
const test = exactGpuTests(gpu, "webgpu exact quant");

// The k-quant cases run on shader_matmul_exact_k.ts's kernel: webgpu_exact_kquant_test.ts; the
// repacked ones (src0 in ggml's CPU_REPACK buffer) in webgpu_exact_repack_test.ts.
for (
  const c of cases.filter((c) => c.kind === "quant" && !K_QUANTS.includes(c.type) && !c.repack)
) {
  test(`${label(c)} equals ggml's mul_mat bit for bit`, false, async (gpu) => {
    assertBits(await computeOnGpu(gpu, build(c, true)), fixtureBits(c.bits), label(c));
  });
}

type Dtype = "q8_0" | "q4_0" | "q4_1" | "q5_0" | "q5_1";

/** Activations: normal-ish values whose blocks of 32 differ in magnitude, some all zero. */
function activations(rng: Rng, count: number): Float32Array {
  const out = new Float32Array(count);
  for (let block = 0; block * 32 < count; block++) {
    const kind = rng.int(16);
    const scale = kind === 0 ? 0 : kind === 1 ? 1e-6 : 2 ** (rng.int(12) - 6);
    for (let i = block * 32; i < Math.min(count, block * 32 + 32); i++) {
      out[i] = scale * (rng.next() + rng.next() + rng.next() - 1.5);
    }
  }
  return out;
}

type Shape = QuantShape & { dtype: Dtype };
const shapeLabel = quantShapeLabel;
const buildShape = (s: Shape, seed: number): CaseGraph => buildQuantShape(s, seed, activations);

const shapes: Shape[] = [
  // Prefill: the many-column kernel, partial column tiles, K over one chunk (32 blocks).
  { dtype: "q4_1", k: 576, m: 75, n: 24 },
  { dtype: "q4_1", k: 1536, m: 41, n: 64 },
  { dtype: "q4_1", k: 224, m: 33, n: 21 },
  { dtype: "q8_0", k: 576, m: 75, n: 24 },
  { dtype: "q8_0", k: 1536, m: 37, n: 64 },
  { dtype: "q4_0", k: 576, m: 75, n: 20 },
  { dtype: "q4_0", k: 1536, m: 31, n: 64 },
  // Decode: the one-column kernel, K over one chunk (64 blocks).
  { dtype: "q4_1", k: 576, m: 1536, n: 1 },
  { dtype: "q4_1", k: 8224, m: 35, n: 1 },
  { dtype: "q8_0", k: 8224, m: 33, n: 1 },
  { dtype: "q4_0", k: 1536, m: 97, n: 1 },
  // Broadcast batches, and weights at an offset that is no multiple of 4.
  { dtype: "q8_0", k: 96, m: 35, n: 9, batches: [2, 4] },
  { dtype: "q4_0", k: 96, m: 35, n: 1, batches: [1, 3] },
  { dtype: "q4_1", k: 160, m: 19, n: 24, batches: [3, 3] },
  { dtype: "q8_0", k: 96, m: 21, n: 1, skipRows: 1 },
  { dtype: "q4_0", k: 96, m: 21, n: 40, skipRows: 3 },
  // q5_0 and q5_1 (22- and 24-byte blocks): prefill, decode, batches, q5_0 at an unaligned offset.
  { dtype: "q5_0", k: 576, m: 75, n: 24 },
  { dtype: "q5_0", k: 1536, m: 97, n: 1 },
  { dtype: "q5_0", k: 96, m: 21, n: 9, skipRows: 1, batches: [2, 2] },
  { dtype: "q5_1", k: 1536, m: 41, n: 64 },
  { dtype: "q5_1", k: 576, m: 1536, n: 1 },
  { dtype: "q5_1", k: 96, m: 35, n: 3, batches: [1, 3] },
];

for (const [i, s] of shapes.entries()) {
  test(`${shapeLabel(s)} equals the CPU's AVX2 build bit for bit`, true, async (gpu) => {
    if (s.skipRows) {
      assert.notEqual((s.skipRows * rowBytes(s.dtype, s.k)) % 4, 0, "choose an unaligned offset");
    }
    const want = onCpu(buildShape(s, 0x51 + i));
    const got = await computeOnGpu(gpu, buildShape(s, 0x51 + i));
    assertBits(got, new Uint32Array(want.buffer, want.byteOffset, want.length), shapeLabel(s));
  });
}

closeSharedWebGpuTest();
