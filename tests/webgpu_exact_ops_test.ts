/**
 * rms_norm, soft_max (scale and an f32 causal mask), silu and rope on the shared WebGPU device
 * give ggml-cpu's AVX2 bits, as the CPU backend does (`CpuBackend({ simd: "avx2" })`):
 * - Every case of tests/ggml_exact_ops.ts: rms_norm and rms_norm * weight, silu and silu * g
 *   (ggml's swiglu), soft_max, and SmolLM2's rope at every position 0..8191; the output's SHA-256
 *   equals ggml's AVX2 digest in tests/fixtures/ggml_exact_ops.json. All 26 cases are bit for bit
 *   on lavapipe; on a mismatch the message counts the elements that differ from the CPU's.
 * - rms_norm over 2000 rows of 576 and of 37, each row scaled by its own power of two (2^-20 to
 *   2^19), against the CPU's AVX2 kernel on the same inputs: bit for bit.
 * - silu over 2^16 seeded values in [-110, 110] (exp's overflow and underflow ranges, subnormal
 *   exps) with row lengths 1000 (full vectors of 8: ggml_v_silu) and 999 (7 per row through the
 *   scalar tail: glibc's expf), and soft_max over rows of 1 to 41 and 1000 elements with
 *   differences down to -160, with and without a mask, against the CPU's AVX2 kernels on the same
 *   inputs: bit for bit.
 * Skipped, visibly, when Deno finds no adapter (and the CPU comparisons where this CPU does not
 * run the AVX2 kernels).
 */

import assert from "node:assert/strict";
import {
  allocTensors,
  Context,
  CpuBackend,
  Graph,
  rmsNorm,
  silu,
  simdLevels,
  softmax,
  type Tensor,
} from "../mod.ts";
import type { Backend } from "../src/backend/backend.ts";
import { closeSharedWebGpuTest, sharedWebGpu } from "./gpu.ts";
import { bitDiff, digest, exactCases, graftOutput, seeded } from "./ggml_exact_ops.ts";

const gpu = await sharedWebGpu();
const avx2 = simdLevels().includes("avx2");

const fixture = JSON.parse(
  Deno.readTextFileSync(new URL("./fixtures/ggml_exact_ops.json", import.meta.url)),
) as { cases: Record<string, Record<string, string>> };

/** A graph's output computed on `backend` from `data` (one array per input, in order). */
async function compute(
  backend: Backend,
  build: (ctx: Context) => { inputs: Tensor[]; output: Tensor },
  data: Float32Array[],
): Promise<Float32Array> {
  const ctx = new Context();
  const { inputs, output } = build(ctx);
  const graph = Graph.build(output);
  using _memory = allocTensors(backend, [...ctx.tensors, ...graph.leafs, ...graph.nodes]);
  inputs.forEach((t, k) => backend.setTensor(t, data[k]!));
  backend.graphCompute(graph);
  return await backend.getTensorAsync(output) as Float32Array;
}

Deno.test({
  name: "webgpu exact ops: rms_norm, silu, swiglu, soft_max, rope hash as ggml's AVX2 outputs",
  ignore: gpu === null,
  async fn(): Promise<void> {
    const cases = exactCases();
    assert.equal(cases.length, 26);
    const wrong: string[] = [];
    for (const c of cases) {
      const got = await compute(gpu!, c.build, c.inputs as Float32Array[]);
      if (await digest(got) === fixture.cases[c.name]!.avx2) continue;
      if (!avx2) {
        wrong.push(`${c.name}: not ggml's digest`);
        continue;
      }
      const { count, first } = bitDiff(got, graftOutput(c, 1, "avx2"));
      wrong.push(`${c.name}: ${count}/${got.length} differ from the CPU's, first at ${first}`);
    }
    assert.deepEqual(wrong, []);
  },
});

Deno.test({
  name: "webgpu exact ops: rms_norm of 2000 rows of assorted scales is the CPU's AVX2 rms_norm",
  ignore: gpu === null || !avx2,
  async fn(): Promise<void> {
    using cpu = new CpuBackend({ threads: 1, simd: "avx2" });
    for (const [ne0, ne1] of [[576, 2000], [37, 2000]] as const) {
      // Each row scaled by its own power of two, 2^-20 to 2^19 (with eps 1e-5 in play).
      const x = seeded(ne0 * ne1, 31 + ne0, 4).map((v, i) =>
        v * 2 ** ((Math.floor(i / ne0) % 40) - 20)
      );
      const build = (ctx: Context): { inputs: Tensor[]; output: Tensor } => {
        const a = ctx.newTensor("f32", [ne0, ne1]);
        return { inputs: [a], output: rmsNorm(a, 1e-5) };
      };
      const got = await compute(gpu!, build, [x]);
      const want = await compute(cpu, build, [x]);
      const { count, first } = bitDiff(got, want);
      assert.equal(count, 0, `rows of ${ne0}: ${count} differ, first at ${first}`);
    }
  },
});

/** `count` seeded values in [-110, 110] with exp's edge cases spread over them. */
function siluInputs(count: number): Float32Array {
  const x = seeded(count, 77, 110);
  const edges = [0, -0, 88.5, -88.5, 88.72, -88.73, 103.9, -103.9, 104, -104, 87.3, -87.4, 1e-30];
  edges.forEach((v, i) => x[(i * 997) % count] = v);
  // A third of them small, where silu is nearly x / 2.
  for (let i = 1; i < count; i += 3) x[i] = x[i]! / 64;
  return x;
}

Deno.test({
  name: "webgpu exact ops: silu of full vectors and of row tails is the CPU's AVX2 silu",
  ignore: gpu === null || !avx2,
  async fn(): Promise<void> {
    using cpu = new CpuBackend({ threads: 1, simd: "avx2" });
    for (const ne0 of [1000, 999, 7]) {
      const ne1 = Math.floor(65536 / ne0);
      const x = siluInputs(ne0 * ne1);
      const build = (ctx: Context): { inputs: Tensor[]; output: Tensor } => {
        const a = ctx.newTensor("f32", [ne0, ne1]);
        return { inputs: [a], output: silu(a) };
      };
      const got = await compute(gpu!, build, [x]);
      const want = await compute(cpu, build, [x]);
      const { count, first } = bitDiff(got, want);
      assert.equal(count, 0, `rows of ${ne0}: ${count} differ, first silu(${x[first]})`);
    }
  },
});

Deno.test({
  name: "webgpu exact ops: soft_max of rows of 1 to 41 and 1000 is the CPU's AVX2 soft_max",
  ignore: gpu === null || !avx2,
  async fn(): Promise<void> {
    using cpu = new CpuBackend({ threads: 1, simd: "avx2" });
    for (const ne0 of [1, 2, 7, 8, 9, 15, 16, 17, 33, 41, 1000]) {
      for (const masked of [false, true]) {
        const [ne1, ne2] = [5, 3];
        // Logits in [-160, 160] times 1/2: differences past -104 (0 exps) and subnormal ones.
        const x = seeded(ne0 * ne1 * ne2, 1000 + ne0, 160);
        const mask = Float32Array.from(
          { length: ne0 * ne1 },
          (_, i) => (i % ne0 > ne0 - ne1 + Math.floor(i / ne0) ? -Infinity : (i % 3) - 1),
        );
        const build = (ctx: Context): { inputs: Tensor[]; output: Tensor } => {
          const a = ctx.newTensor("f32", [ne0, ne1, ne2]);
          const m = ctx.newTensor("f32", [ne0, ne1]);
          return {
            inputs: masked ? [a, m] : [a],
            output: softmax(a, masked ? { mask: m, scale: 0.5 } : { scale: 0.5 }),
          };
        };
        const data = masked ? [x, mask] : [x];
        const got = await compute(gpu!, build, data);
        const want = await compute(cpu, build, data);
        const { count, first } = bitDiff(got, want);
        assert.equal(
          count,
          0,
          `rows of ${ne0}${masked ? ", masked" : ""}: ${count} differ, first at ${first}`,
        );
      }
    }
  },
});

closeSharedWebGpuTest();
