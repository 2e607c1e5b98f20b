/**
 * llama.cpp's greedy runs as the LLM tests read them (tests/fixtures/llm/*.json, written by
 * tools/llm_fixtures.sh from the pinned build), and the one check every backend's test makes
 * against them: teacher forcing along llama.cpp's ids with its logits, then Graft's own greedy
 * decoding. Shared by tests/llm_test.ts, tests/llm_kquant_test.ts and tests/webgpu_llm_test.ts.
 * @module
 */

import assert from "node:assert/strict";
import type { LLM } from "../mod.ts";

/** One prompt's greedy run by llama.cpp (see the fixture's `semantics`). */
export interface LlamaCase {
  name: string;
  prompt_ids: number[];
  /** Greedy ids with end-of-generation ids masked (--ignore-eos). */
  ids: number[];
  /** Per step, the chosen logit minus the best other non-EOG logit. */
  margins: number[];
  /** Per step, the 8 highest logits as [id, logit]. */
  top: [number, number][][];
}

/** A fixture file: where it came from and its cases. */
export interface LlamaFixture {
  source: { eog_ids: number[]; model_sha256: string };
  cases: LlamaCase[];
}

/** tests/fixtures/llm/`name`, or null when the file is not there. */
export function readLlamaFixture(name: string): LlamaFixture | null {
  try {
    return JSON.parse(
      Deno.readTextFileSync(new URL(`./fixtures/llm/${name}`, import.meta.url)),
    ) as LlamaFixture;
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return null;
    throw error;
  }
}

/**
 * The fixture `base` recorded by llama.cpp's build of the SIMD level `simd` (the CPU backend's):
 * `base.json` from the AVX-512 build, `base_avx2.json` from the AVX2 one (its f16 sums and exps run
 * on 8 lanes, so its logits differ in the last bits, then more). Null when not recorded.
 */
export function llamaFixtureFor(base: string, simd: string): LlamaFixture | null {
  return readLlamaFixture(simd === "avx512" ? `${base}.json` : `${base}_avx2.json`);
}

/** The index of the largest logit, skipping `skip` (the lowest index on exact ties). */
export function argmax(logits: Float32Array, skip: readonly number[] = []): number {
  let best = -1;
  for (let i = 0; i < logits.length; i++) {
    if (skip.includes(i)) continue;
    if (best < 0 || logits[i]! > logits[best]!) best = i;
  }
  return best;
}

/**
 * `llm`'s run of `c` against llama.cpp's: teacher forcing (the prompt in one batch, then llama.cpp's
 * ids a token at a time, as llama.cpp ran) for `steps`, every recorded top-8 logit within 1e-6
 * (the fixture prints nine digits); with `freeRunning` also greedy decoding of its own
 * (end-of-generation ids masked, as the fixture's --ignore-eos run), whose ids may leave
 * llama.cpp's only where llama.cpp's top two are within 0.05. Returns a line for the report.
 */
export async function assertMatchesLlama(
  llm: LLM,
  fixture: LlamaFixture,
  c: LlamaCase,
  steps: number,
  freeRunning: boolean,
): Promise<string> {
  llm.reset();
  let logits = await llm.eval(c.prompt_ids);
  let worst = 0;
  for (let step = 0; step < steps; step++) {
    for (const [id, value] of c.top[step]!) {
      worst = Math.max(worst, Math.abs(logits[id]! - value));
    }
    if (step < steps - 1) logits = await llm.eval([c.ids[step]!]);
  }
  assert.ok(worst <= 1e-6, `${c.name}: a top-8 logit off by ${worst} in ${steps} steps`);
  if (!freeRunning) return `${c.name}: logits within ${worst.toExponential(1)} (${steps} steps)`;
  llm.reset();
  logits = await llm.eval(c.prompt_ids);
  let diverged = -1;
  for (let step = 0; step < steps; step++) {
    const id = argmax(logits, fixture.source.eog_ids);
    if (id !== c.ids[step]) {
      diverged = step;
      break;
    }
    if (step < steps - 1) logits = await llm.eval([id]);
  }
  assert.ok(
    diverged < 0 || c.margins[diverged]! < 0.05,
    `${c.name}: greedy id ${diverged} differs where llama.cpp's margin is ${c.margins[diverged]}`,
  );
  return `${c.name}: logits within ${worst.toExponential(1)}, ` +
    (diverged < 0
      ? `${steps} greedy ids equal`
      : `ids equal to step ${diverged} (margin ${c.margins[diverged]})`);
}
