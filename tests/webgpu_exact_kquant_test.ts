/**
 * WebGPU's mulMat with ggml's arithmetic (`mulMat(a, b, { ggml: true })`) on q4_K, q5_K and q6_K
 * weights (src/backend/webgpu/shader_matmul_exact_k.ts) against ggml's and the CPU backend's
 * bits:
 * - every k-quant case of tests/fixtures/ggml_exact_dots_avx2.json (ggml's AVX2 build's own
 *   mul_mat results, random super-blocks and activations with outliers, from
 *   ggml_exact_dots_cases.ts's generator) bit for bit;
 * - larger shapes against `CpuBackend({ simd: "avx2" })` with the same option, bit for bit:
 *   7 columns (ggml's vec_dot arithmetic), 8, 9, 20, 24 and 64 (its tiled matmul's) and one
 *   column (decode), row counts that are no multiple of a workgroup's 32 or 64 rows, rows longer
 *   than one chunk of super-blocks of either kernel (4 a column in decode, 2 in prefill),
 *   broadcast batches, q6_K weights (210-byte blocks) at byte offsets that are no multiple of 4,
 *   and activations with all-zero super-blocks, tiny ones, super-blocks of very different
 *   magnitudes and ones whose largest magnitude appears twice with opposite signs.
 * Every element is bit-exact: there is no tolerance (activation super-blocks holding an infinity
 * or NaN, or whose largest magnitude is so small that 127 over it overflows, are not covered:
 * ggml's nearest_int then reads the bits of an infinity or NaN).
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
  wanted,
} from "./ggml_exact_dots_cases.ts";
import { rowBytes } from "../src/dtype.ts";
import { Rng } from "./reference.ts";

const gpu = await sharedWebGpu();
const test = exactGpuTests(gpu, "webgpu exact k-quant");

// The repacked cases (src0 in ggml's CPU_REPACK buffer) run in webgpu_exact_repack_test.ts.
const fixtureCases = cases.filter((c) =>
  c.kind === "quant" && K_QUANTS.includes(c.type) && !c.repack
);
test("the fixture has k-quant cases of every type", false, () => {
  for (const type of K_QUANTS) {
    assert.ok(fixtureCases.some((c) => c.type === type), `no ${type} case`);
  }
  return Promise.resolve();
});

for (const c of fixtureCases) {
  test(`${label(c)} equals ggml's AVX2 mul_mat bit for bit`, false, async (gpu) => {
    assertBits(await computeOnGpu(gpu, build(c, true)), fixtureBits(wanted(c, "avx2")), label(c));
  });
}

type Dtype = "q4_K" | "q5_K" | "q6_K";

/**
 * Activations: normal-ish values whose super-blocks of 256 differ in magnitude; some all zero,
 * some tiny, some half zero, some with their largest magnitude twice, with opposite signs.
 */
function activations(rng: Rng, count: number): Float32Array {
  const out = new Float32Array(count);
  for (let block = 0; block * 256 < count; block++) {
    const kind = rng.int(12);
    const scale = kind === 0 ? 0 : kind === 1 ? 1e-6 : 2 ** (rng.int(16) - 8);
    const start = block * 256, end = Math.min(count, start + 256);
    for (let i = start; i < end; i++) {
      out[i] = kind === 2 && i % 2 === 0 ? 0 : scale * (rng.next() + rng.next() + rng.next() - 1.5);
    }
    if (kind === 3 && end - start > 1) {
      const [i, j] = [start + rng.int(end - start), start + rng.int(end - start)];
      out[i] = 2 * scale;
      out[j] = -2 * scale;
    }
  }
  return out;
}

type Shape = QuantShape & { dtype: Dtype };
const shapeLabel = quantShapeLabel;
const buildShape = (s: Shape, seed: number): CaseGraph => buildQuantShape(s, seed, activations);

const shapes: Shape[] = [];
for (const dtype of ["q4_K", "q5_K", "q6_K"] as const) {
  shapes.push(
    // Prefill: the many-column kernel, partial column tiles, K over one chunk (2 super-blocks).
    { dtype, k: 1536, m: 75, n: 24 },
    { dtype, k: 1280, m: 41, n: 64 },
    { dtype, k: 256, m: 33, n: 20 },
    // Either side of ggml's switch from vec_dot to its tiled matmul (8 columns).
    { dtype, k: 1024, m: 45, n: 7 },
    { dtype, k: 768, m: 29, n: 8 },
    // Decode: the one-column kernel, K over one chunk (4 super-blocks).
    { dtype, k: 1536, m: 97, n: 1 },
    { dtype, k: 2304, m: 65, n: 1 },
    // Broadcast batches.
    { dtype, k: 512, m: 35, n: 9, batches: [2, 4] },
    { dtype, k: 768, m: 19, n: 1, batches: [1, 3] },
  );
}
// q6_K's rows of an odd number of super-blocks end 2 bytes past a word.
shapes.push(
  { dtype: "q6_K", k: 768, m: 21, n: 1, skipRows: 1 },
  { dtype: "q6_K", k: 256, m: 37, n: 24, skipRows: 3, batches: [2, 2] },
);

for (const [i, s] of shapes.entries()) {
  test(`${shapeLabel(s)} equals the CPU's AVX2 build bit for bit`, true, async (gpu) => {
    if (s.skipRows) {
      assert.notEqual((s.skipRows * rowBytes(s.dtype, s.k)) % 4, 0, "choose an unaligned offset");
    }
    const want = onCpu(buildShape(s, 0x6b + i));
    const got = await computeOnGpu(gpu, buildShape(s, 0x6b + i));
    assertBits(got, new Uint32Array(want.buffer, want.byteOffset, want.length), shapeLabel(s));
  });
}

closeSharedWebGpuTest();
