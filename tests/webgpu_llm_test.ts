/**
 * SmolLM2 on the WebGPU backend (lavapipe, a software Vulkan, in CI) against llama.cpp: on the
 * short fixture prompts, the logits of llama.cpp's AVX2 build (tests/fixtures/llm/
 * smollm2_greedy_avx2.json) along its greedy ids, within the fixture's printed precision, and
 * its greedy ids from WebGPU's own free-running greedy decoding (32 steps). Every kernel on
 * llama's graph computes as ggml-cpu's AVX2 build does, bit for bit (tests/webgpu_exact*_test.ts;
 * fused multiply-adds emulated where the driver does not fuse), so the logits are llama.cpp's.
 *
 * The same holds for the prompts' prefill (long prompts, teacher forced a few steps), for layers
 * split between an AVX2 CPU backend and WebGPU, and for SmolLM2 requantized to the k-quant mixes
 * Q4_K_M and Q5_K_M (tests/llm_requant_test.ts's models and fixtures). Flash attention is not
 * ggml's arithmetic on WebGPU (its fused kernel sums in its own order), so that test follows the
 * CPU's flash-attention ids teacher forced, where a step may go the other way only where the
 * CPU's own top two are within NEAR_TIE. Skipped without a WebGPU adapter or without the cached model.
 */

import assert from "node:assert/strict";
import { CpuBackend, LLM } from "../mod.ts";
import { SMOLLM2_PATH, smolLM2Cached } from "../tools/model_cache.ts";
import { assertMatchesLlama, readLlamaFixture, requantizedSmolLM2 } from "./llm_fixture.ts";
import { closeSharedWebGpuTest, sharedWebGpu, WEBGPU_LLM_NEAR_TIE as NEAR_TIE } from "./gpu.ts";

const gpu = await sharedWebGpu();
const haveModel = smolLM2Cached();
if (!haveModel) console.log(`webgpu_llm_test: ${SMOLLM2_PATH} is missing: skipped`);

const STEPS = 32;

const SHORT = readLlamaFixture("smollm2_greedy.json")!.cases.filter((c) =>
  c.prompt_ids.length <= 10
);

function topTwo(row: Float32Array): [number, number] {
  let first = 0, second = 1;
  if (row[second]! > row[first]!) [first, second] = [second, first];
  for (let i = 2; i < row.length; i++) {
    if (row[i]! > row[first]!) [first, second] = [i, first];
    else if (row[i]! > row[second]!) second = i;
  }
  return [first, second];
}

/** `steps` greedy ids after `prompt` on `cpu` (from its cache's state) and each step's logits. */
async function cpuGreedy(
  cpu: LLM,
  prompt: number[],
  steps: number,
): Promise<{ ids: number[]; rows: Float32Array[] }> {
  let logits = await cpu.eval(prompt);
  const ids: number[] = [];
  const rows: Float32Array[] = [];
  for (let step = 0; step < steps; step++) {
    const [first] = topTwo(logits);
    ids.push(first);
    rows.push(logits.slice());
    if (step < steps - 1) logits = await cpu.eval([first]);
  }
  return { ids, rows };
}

/** llama.cpp's AVX2 build's greedy runs (tools/llm_fixtures.sh). */
const avx2 = readLlamaFixture("smollm2_greedy_avx2.json")!;

Deno.test({
  name: `webgpu llm: llama.cpp's AVX2 logits and greedy ids, short prompts (${STEPS} steps)`,
  ignore: gpu === null || !haveModel,
  async fn(): Promise<void> {
    using web = await LLM.load(SMOLLM2_PATH, { backend: gpu!, nCtx: 64, kvBucket: 64 });
    const short = avx2.cases.filter((c) => c.prompt_ids.length <= 10);
    assert.ok(short.length >= 2, "the fixture has short prompts");
    const report: string[] = [];
    for (const c of short) report.push(await assertMatchesLlama(web, avx2, c, STEPS, true));
    console.log(`WebGPU against llama.cpp's AVX2 build:\n${report.join("\n")}`);
  },
});

Deno.test({
  name: "webgpu llm: llama.cpp's AVX2 logits after the long prompts (prefill of 37 to 164 tokens)",
  ignore: gpu === null || !haveModel,
  async fn(): Promise<void> {
    // Prefill takes the many-column kernels (tinyBLAS's order for attention); decoding is the
    // short prompts' test's. All 32 steps of all six prompts were measured equal once (3 min).
    using web = await LLM.load(SMOLLM2_PATH, { backend: gpu!, nCtx: 256 });
    const long = avx2.cases.filter((c) => c.prompt_ids.length > 10);
    assert.ok(long.length >= 3, "the fixture has long prompts");
    const report: string[] = [];
    for (const c of long) report.push(await assertMatchesLlama(web, avx2, c, 2, false));
    console.log(`WebGPU against llama.cpp's AVX2 build:\n${report.join("\n")}`);
  },
});

Deno.test({
  name: "webgpu llm: layers split between an AVX2 CPU backend and WebGPU give llama.cpp's logits",
  ignore: gpu === null || !haveModel,
  async fn(): Promise<void> {
    // Both backends compute as ggml's AVX2 build, and the split's copies are exact.
    using cpu = new CpuBackend({ simd: "avx2", threads: 2 });
    using split = await LLM.load(SMOLLM2_PATH, {
      backend: cpu,
      nCtx: 32,
      kvBucket: 32,
      gpuLayers: 3,
      gpuBackend: gpu!,
    });
    assert.equal(split.split?.from, 27);
    console.log(await assertMatchesLlama(split, avx2, avx2.cases[0]!, 8, false));
  },
});

Deno.test({
  name: "webgpu llm: k-quant models (SmolLM2 requantized to Q4_K_M, Q5_K_M) give llama.cpp's " +
    "AVX2 logits and greedy ids",
  ignore: gpu === null || !haveModel,
  async fn(): Promise<void> {
    // Decode takes vec_dot's order, a prefill of 8 or more tokens ggml's tiled k-quant matmul
    // (shader_matmul_exact_k.ts): a short prompt's decoding and a long prompt's prefill.
    const dir = await Deno.makeTempDir({ prefix: "graft-webgpu-kquant-" });
    try {
      const report: string[] = [];
      for (const type of ["q4_K_M", "q5_K_M"] as const) {
        const want = readLlamaFixture(`smollm2_${type}_greedy_avx2.json`)!;
        const path = await requantizedSmolLM2(type, dir, want);
        // The fixtures are llama.cpp's --no-repack runs.
        using web = await LLM.load(path, { backend: gpu!, nCtx: 256, repack: false });
        const short = want.cases.find((c) => c.prompt_ids.length <= 10)!;
        const long = want.cases.find((c) => c.prompt_ids.length > 100)!;
        report.push(`${type} ${await assertMatchesLlama(web, want, short, 16, true)}`);
        report.push(`${type} ${await assertMatchesLlama(web, want, long, 2, false)}`);
        await Deno.remove(path);
      }
      console.log(`WebGPU against llama.cpp's AVX2 build:\n${report.join("\n")}`);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

/**
 * `other` follows `cpu` over the first short prompt: `steps` greedy ids of the CPU, then one
 * evaluation of the prompt and those ids on `other` with every position's logits, whose argmax
 * must be the CPU's id (or within NEAR_TIE of it); then one more token through `other`'s
 * decoding plan.
 */
async function assertFollowsCpu(other: LLM, cpu: LLM, what: string, steps = 8): Promise<void> {
  const c = SHORT[0]!;
  const { ids, rows } = await cpuGreedy(cpu, c.prompt_ids, steps);
  const V = other.hparams.nVocab;
  const all = await other.eval([...c.prompt_ids, ...ids.slice(0, -1)], { allLogits: true });
  const p = c.prompt_ids.length;
  for (let step = 0; step < steps; step++) {
    const [first] = topTwo(all.subarray((p - 1 + step) * V, (p + step) * V));
    const gap = rows[step]![ids[step]!]! - rows[step]![first]!;
    assert.ok(
      first === ids[step] || gap <= NEAR_TIE,
      `step ${step}: ${what} picks ${first}, ${gap} below the CPU's ${ids[step]}`,
    );
  }
  // One more token through the decode plan (one token wide).
  const next = await other.eval([ids[steps - 1]!]);
  assert.equal(next.length, V);
  assert.equal(other.nPast, p + steps);
}

Deno.test({
  name: "webgpu llm: flash attention (flashAttn) on WebGPU follows the CPU's flash attention",
  ignore: gpu === null || !haveModel,
  async fn(): Promise<void> {
    const options = { nCtx: 32, kvBucket: 32, flashAttn: true };
    using cpu = await LLM.load(SMOLLM2_PATH, { threads: 2, ...options });
    using web = await LLM.load(SMOLLM2_PATH, { backend: gpu!, ...options });
    await assertFollowsCpu(web, cpu, "WebGPU");
  },
});

closeSharedWebGpuTest();
