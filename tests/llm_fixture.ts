/**
 * llama.cpp's greedy runs as the LLM tests read them (tests/fixtures/llm/*.json, written by
 * tools/llm_fixtures.sh from the pinned build), and the one check every backend's test makes
 * against them: teacher forcing along llama.cpp's ids with its logits, then Graft's own greedy
 * decoding. Shared by tests/llm_test.ts, tests/llm_requant_test.ts and tests/webgpu_llm_test.ts.
 * Also the requantized models those fixtures were recorded from, made again from the cached Q4_1
 * file.
 * @module
 */

import assert from "node:assert/strict";
import { type LLM, quantizeGGUF } from "../mod.ts";
import { SMOLLM2_PATH } from "../tools/model_cache.ts";

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

/**
 * The tensor types Graft's quantizer gives SmolLM2 for each type mix it is requantized to
 * (tools/llm_requant_fixtures.sh records llama.cpp's runs of the same files). Its rows of 576 take
 * no k-quant, so the k-quants are the ffn_down tensors (rows of 1536); q4_0's q6_K embeddings fall
 * back to q8_0 for the same reason.
 */
export const REQUANT_MIXES = {
  q4_K_M: { q5_0: 166, f32: 61, q4_K: 16, q8_0: 15, q6_K: 14 },
  q5_K_M: { q5_1: 166, f32: 61, q5_K: 16, q8_0: 15, q6_K: 14 },
  q4_0: { q4_0: 210, f32: 61, q8_0: 1 },
} as const;

/** A type mix of {@link REQUANT_MIXES}. */
export type RequantMix = keyof typeof REQUANT_MIXES;

async function sha256Hex(path: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", await Deno.readFile(path));
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * SmolLM2 requantized from the cached Q4_1 file to `type` by `quantizeGGUF` (2 s), written into
 * `dir`; checks its tensor types and, given the fixture recorded from it, its sha256 (so a
 * change in the quantizer shows as such and not as a model mismatch). Returns its path.
 */
export async function requantizedSmolLM2(
  type: RequantMix,
  dir: string,
  fixture?: LlamaFixture,
): Promise<string> {
  const path = `${dir}/SmolLM2-135M-Instruct.${type.toUpperCase()}-from-Q4_1.gguf`;
  // The warning says requantizing loses more than quantizing f32 weights: meant here.
  const summary = await quantizeGGUF(SMOLLM2_PATH, path, { type, onWarning: (): void => {} });
  assert.deepEqual(summary.counts, REQUANT_MIXES[type]);
  if (fixture) {
    assert.equal(
      await sha256Hex(path),
      fixture.source.model_sha256,
      `Graft's ${type} file is not the one the fixture was recorded from (the quantizer ` +
        `changed?): check it against llama-quantize with tools/llm_requant_fixtures.sh ${type}`,
    );
  }
  return path;
}
