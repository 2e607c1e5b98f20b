/**
 * WebGPU's mulMat of f16 weights with `{ ggml: true }` (src/backend/webgpu/
 * shader_matmul_f16_exact.ts) gives ggml-cpu's AVX2 bits:
 * - llama's attention products over KV-cache views (K·q from a strided view of the K cache,
 *   V·softmax from the transposed V cache, 3 kv heads broadcast over 9 query heads) equal
 *   ggml's AVX2 build bit for bit on every f16 case of tests/fixtures/ggml_exact_dots_avx2.json
 *   (decode: one column, ggml_vec_dot_f16; 2 to 24 columns: tinyBLAS where it takes the shape,
 *   ggml_vec_dot_f16 where it does not, leftovers of K % 32 included);
 * - prefill-like shapes (5, 24 and 128 tokens over 256 cells; 5 over 75 cells, where tinyBLAS
 *   declines the shape; 24 over 200 cells, K not a whole number of 32-element chunks), f16
 *   weight matrices holding subnormals and large values (K % 32 leftovers, M % 4 != 0) and a
 *   product broadcast over both batch dims equal `CpuBackend({ simd: "avx2" })` bit for bit.
 * No mismatch was measured on lavapipe. The one documented gap: ggml adds the K % 32 leftover
 * products of ggml_vec_dot_f16 in f64, the shader in float-float (about 48 bits), so a result
 * within about 2^-40 (relative) of a point halfway between two floats could round the other way
 * (none in these cases).
 *
 * The routing is checked too: without `ggml: true`, or with a source whose row elements are not
 * adjacent, f16 keeps the tiled kernel. Skipped, visibly, when Deno finds no adapter; the CPU
 * comparisons also where the CPU has no AVX2 build.
 */

import assert from "node:assert/strict";
import { closeSharedWebGpuTest, computeOnGpu, sharedWebGpu } from "./gpu.ts";
import { Context, mulMat, type Shape, simdLevels, transpose } from "../mod.ts";
import {
  assertBits,
  build,
  type CaseGraph,
  casesAvx2,
  computeOnCpuAvx2,
  fixtureBits,
  XorShift,
} from "./ggml_exact_dots_cases.ts";
import type { WebGpuBackend } from "../src/backend/webgpu/backend.ts";
import { kernelFor } from "../src/backend/webgpu/kernels.ts";

const gpu = await sharedWebGpu();
const haveAvx2 = (simdLevels() as string[]).includes("avx2");

type Built = CaseGraph;

/** A kq or kqv case of tests/ggml_exact_dots_cases.ts, with ggml's arithmetic asked for. */
function buildAttention(kind: "kq" | "kqv", nKv: number, n: number, seed: number): Built {
  return build({ kind, type: "f16", k: 64, m: 0, n, n_kv: nKv, seed, bits: "" }, true);
}

/**
 * f16 weights `[k, m, a2, a3]` times f32 `[k, n, b2, b3]`: weights of any finite f16 (subnormals
 * and values up to 65504 among them), activations up to 4 in magnitude, so no sum overflows.
 */
function buildWeights(aNe: Shape, bNe: Shape, seed: number): Built {
  const ctx = new Context();
  const rng = new XorShift(seed);
  const a = ctx.newTensor("f16", aNe);
  const b = ctx.newTensor("f32", bNe);
  const output = mulMat(a, b, { ggml: true });
  const aBytes = new Uint8Array(a.nbytes);
  const h = new Uint16Array(aBytes.buffer);
  for (let i = 0; i < h.length; i++) {
    const r = rng.u32() >>> 16;
    // Exponent 31 (infinities, NaNs) mapped to 30; scaled down often so sums stay moderate.
    const bits = (r & 0x7c00) === 0x7c00 ? r & ~0x0400 : r;
    h[i] = i % 7 === 0 ? bits : (bits & 0x83ff) | ((rng.u32() % 16) << 10);
  }
  const bValues = Float32Array.from({ length: b.nelements }, () => rng.signed() * 4);
  return { ctx, inputs: [[a, aBytes], [b, new Uint8Array(bValues.buffer)]], output };
}

function test(
  name: string,
  fn: (gpu: WebGpuBackend) => Promise<void> | void,
  needsAvx2 = false,
): void {
  Deno.test({
    name: `webgpu: ${name}`,
    ignore: gpu === null || (needsAvx2 && !haveAvx2),
    sanitizeResources: false,
    sanitizeOps: false,
    fn: () => fn(gpu!),
  });
}

test("f16 mulMat with ggml: true equals ggml's AVX2 attention dots bit for bit", async (gpu) => {
  let checked = 0;
  for (const c of casesAvx2) {
    if (c.kind !== "kq" && c.kind !== "kqv") continue;
    const got = await computeOnGpu(gpu, buildAttention(c.kind, c.n_kv, c.n, c.seed));
    assertBits(got, fixtureBits(c.bits), `${c.kind} n_kv=${c.n_kv} n=${c.n}`);
    checked++;
  }
  assert.ok(checked >= 16, `only ${checked} f16 cases in the fixture`);
});

test("f16 attention products of a prefill equal the AVX2 CPU bit for bit", async (gpu) => {
  const shapes: [number, number][] = [[256, 5], [256, 24], [256, 128], [75, 5], [200, 24]];
  for (const [nKv, n] of shapes) {
    for (const kind of ["kq", "kqv"] as const) {
      const seed = 1000 + nKv * 7 + n;
      const want = computeOnCpuAvx2(buildAttention(kind, nKv, n, seed));
      const got = await computeOnGpu(gpu, buildAttention(kind, nKv, n, seed));
      assertBits(got, want, `${kind} n_kv=${nKv} n=${n}`);
    }
  }
}, true);

test("f16 weight matrices and batch broadcasts equal the AVX2 CPU bit for bit", async (gpu) => {
  const shapes: [Shape, Shape][] = [
    [[101, 37], [101, 1]], // one column, 5 leftovers
    [[101, 37], [101, 3]], // tinyBLAS declines (K % 8, M % 4)
    [[40, 12, 2, 2], [40, 6, 4, 4]], // tinyBLAS, K not whole chunks, both batch dims broadcast
    [[576, 64], [576, 20]], // a weight-sized K
  ];
  let seed = 7;
  for (const [aNe, bNe] of shapes) {
    seed++;
    const want = computeOnCpuAvx2(buildWeights(aNe, bNe, seed));
    const got = await computeOnGpu(gpu, buildWeights(aNe, bNe, seed));
    assertBits(got, want, `[${aNe}] x [${bNe}]`);
  }
}, true);

Deno.test("webgpu: f16 mulMat takes the exact kernel only with ggml: true and adjacent elements", () => {
  const ctx = new Context();
  const a = ctx.newTensor("f16", [64, 32]);
  const b = ctx.newTensor("f32", [64, 4]);
  assert.match(kernelFor(mulMat(a, b, { ggml: true })).key, /^mulMatF16Exact:tinyBlas:/);
  assert.match(kernelFor(mulMat(a, ctx.newTensor("f32", [64, 1]), { ggml: true })).key, /vecDot/);
  assert.equal(kernelFor(mulMat(a, b)).key, "mulMat:f16");
  // b's rows as a transposed view: elements 4 columns apart, which the CPU's dot path refuses.
  const bT = transpose(ctx.newTensor("f32", [4, 64]));
  assert.equal(kernelFor(mulMat(a, bT, { ggml: true })).key, "mulMat:f16");
});

closeSharedWebGpuTest();
