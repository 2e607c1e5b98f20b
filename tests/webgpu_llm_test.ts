/**
 * SmolLM2 on the WebGPU backend (lavapipe, a software Vulkan, in CI) against the CPU backend:
 * for the short fixture prompts, the CPU's greedy ids over 32 steps, then one WebGPU evaluation
 * of the prompt and those ids with every position's logits (teacher forcing: greedy decoding
 * on WebGPU makes the same ids exactly when each position's argmax is the next id).
 *
 * Both backends quantize each quantized matmul's activations per block to q8 as ggml does (at
 * every token count), with q4_1's min times q8_1's f16 s added per block; the CPU then takes
 * integer block dots, WebGPU f32 products of the decoded values (the same numbers up to f32
 * rounding), and every sum runs in another order. Those rounding differences flip some q8
 * roundings downstream and grow over the 30 layers: measured up to 0.63 apart at the CPU's best
 * logit and 1.5 anywhere in a row (the CPU's own prefill and decode rows differ by up to 1.3).
 * So a step may go the other way only where the CPU's own top two are within NEAR_TIE.
 * Skipped without a WebGPU adapter or without the cached model.
 */

import assert from "node:assert/strict";
import { LLM } from "../mod.ts";
import { SMOLLM2_PATH, smolLM2Cached } from "../tools/model_cache.ts";
import { closeSharedWebGpuTest, sharedWebGpu, WEBGPU_LLM_NEAR_TIE as NEAR_TIE } from "./gpu.ts";

const gpu = await sharedWebGpu();
const haveModel = smolLM2Cached();
if (!haveModel) console.log(`webgpu_llm_test: ${SMOLLM2_PATH} is missing: skipped`);

const STEPS = 32;

interface FixtureCase {
  name: string;
  prompt_ids: number[];
}

const fixture = JSON.parse(
  Deno.readTextFileSync(new URL("./fixtures/llm/smollm2_greedy.json", import.meta.url)),
) as { cases: FixtureCase[] };
const SHORT = fixture.cases.filter((c) => c.prompt_ids.length <= 10);

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

Deno.test({
  name: `webgpu llm: greedy ids of the short prompts equal the CPU's (${STEPS} steps)`,
  ignore: gpu === null || !haveModel,
  async fn(): Promise<void> {
    assert.ok(SHORT.length >= 2, "the fixture has short prompts");
    using cpu = await LLM.load(SMOLLM2_PATH, { threads: 2, nCtx: 64, kvBucket: 64 });
    using web = await LLM.load(SMOLLM2_PATH, { backend: gpu!, nCtx: 64, kvBucket: 64 });
    const report: string[] = [];
    for (const c of SHORT) {
      cpu.reset();
      const { ids, rows } = await cpuGreedy(cpu, c.prompt_ids, STEPS);
      web.reset();
      const V = web.hparams.nVocab;
      const all = await web.eval([...c.prompt_ids, ...ids.slice(0, -1)], { allLogits: true });
      const p = c.prompt_ids.length;
      const flips: string[] = [];
      for (let step = 0; step < STEPS; step++) {
        const row = all.subarray((p - 1 + step) * V, (p + step) * V);
        const [first] = topTwo(row);
        if (first === ids[step]) continue;
        const gap = rows[step]![ids[step]!]! - rows[step]![first]!;
        flips.push(`step ${step} (${first} is ${gap.toFixed(3)} below the CPU's best)`);
        assert.ok(
          gap <= NEAR_TIE,
          `${c.name} step ${step}: WebGPU picks ${first}, ${gap} below the CPU's ${ids[step]}`,
        );
      }
      report.push(`${c.name}: ${flips.length === 0 ? "every step equal" : flips.join(", ")}`);
    }
    console.log(report.join("\n"));
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
  name: "webgpu llm: layers split between the CPU and WebGPU (gpuLayers 3) follow the CPU's ids",
  ignore: gpu === null || !haveModel,
  async fn(): Promise<void> {
    using cpu = await LLM.load(SMOLLM2_PATH, { threads: 2, nCtx: 32, kvBucket: 32 });
    using split = await LLM.load(SMOLLM2_PATH, {
      threads: 2,
      nCtx: 32,
      kvBucket: 32,
      gpuLayers: 3,
      gpuBackend: gpu!,
    });
    assert.equal(split.split?.from, 27);
    await assertFollowsCpu(split, cpu, "the split");
  },
});

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
