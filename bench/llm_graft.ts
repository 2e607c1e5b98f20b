/**
 * Graft's side of `deno task bench:llm` (bench/llm_perf.ts), in a process of its own so that its
 * peak RSS is the model's and not the driver's. Measures as llama-bench does
 * (tools/llama-bench/llama-bench.cpp): each test on a fresh context (here a fresh LLM) of its own
 * size (N_CTX_PP, N_CTX_TG: what llama.cpp allocates for it, see bench/peers/llama_bench_cli.ts), one warmup, then REPS timed runs, each from an empty cache (the reset is not timed):
 *
 * - pp: N_PROMPT tokens in one eval (llama-bench: one batch of n_prompt, last token's logits);
 * - tg: N_GEN evals of one token each (llama-bench: one decode per token, its logits); the warmup
 *   is one token, as llama-bench's.
 *
 * Tokens are uniform random ids (bench/llm_tokens.ts), a BOS first when the GGUF says
 * `add_bos_token`, as llama-bench's. Prints one JSON line: `{"pp":{"samples_ts":[...]},"tg":...}`.
 *
 *   deno run --allow-ffi --allow-env --allow-read bench/llm_graft.ts \
 *     MODEL THREADS N_PROMPT N_GEN N_CTX_PP N_CTX_TG REPS SEED [FA] [DEPTH] [REPACK]
 *
 * FA: 1 runs the model with flash attention (`LLMLoadOptions.flashAttn`; default 0). DEPTH
 * (llama-bench's `-d`, default 0): each run starts after that many tokens were evaluated, as a
 * prompt (BOS first), untimed. REPACK: 0 computes q4_0/q4_K weights as llama.cpp's `--no-repack`
 * (`LLMLoadOptions.repack`; default 1, as llama-bench's `--repack 1`).
 * @module
 */

import { LLM } from "../src/llm/llm.ts";
import { GGUFFile } from "../src/gguf/file.ts";
import { type GGUFArray, metadataValue } from "../src/gguf/reader.ts";
import { arrayLength } from "../src/gguf/lazy_array.ts";
import { tokenStream } from "./llm_tokens.ts";

const [model, threads, nPrompt, nGen, nCtxPP, nCtxTG, reps, seed, fa, depthArg, repack] = Deno.args;
const depth = Number(depthArg ?? 0);
if (seed === undefined) {
  throw new Error("usage: llm_graft.ts MODEL THREADS N_PROMPT N_GEN N_CTX_PP N_CTX_TG REPS SEED");
}

/** The vocabulary size and the BOS to lead with (undefined when the model adds none). */
function vocab(path: string): { nVocab: number; bos: number | undefined } {
  using file = GGUFFile.open(path);
  const tokens = metadataValue(file.header, "tokenizer.ggml.tokens") as GGUFArray;
  const addBos = metadataValue(file.header, "tokenizer.ggml.add_bos_token") === true;
  const bos = metadataValue(file.header, "tokenizer.ggml.bos_token_id");
  return { nVocab: arrayLength(tokens), bos: addBos ? Number(bos) : undefined };
}

const { nVocab, bos } = vocab(model!);
const next = tokenStream(Number(seed), nVocab);
/** `count` tokens as llama-bench draws a batch from an empty cache: BOS (if any) first. */
const draw = (count: number): number[] =>
  Array.from({ length: count }, (_, i) => i === 0 && bos !== undefined ? bos : next());

async function pp(llm: LLM, n: number): Promise<void> {
  await llm.eval(draw(n));
}

async function tg(llm: LLM, n: number): Promise<void> {
  let token = bos ?? next();
  for (let i = 0; i < n; i++) {
    await llm.eval([token]);
    token = next();
  }
}

/** One test: a fresh LLM of `nCtx`, a warmup of `warmup` tokens, then the runs' tokens/s. */
async function test(
  run: (llm: LLM, n: number) => Promise<void>,
  n: number,
  warmup: number,
  nCtx: number,
): Promise<{ samples_ts: number[]; n_ctx: number }> {
  using llm = await LLM.load(model!, {
    threads: Number(threads),
    nCtx,
    backend: "cpu",
    flashAttn: fa === "1",
    repack: repack !== "0",
  });
  llm.reset();
  await run(llm, warmup);
  const samples: number[] = [];
  for (let r = 0; r < Number(reps); r++) {
    llm.reset();
    if (depth > 0) await pp(llm, depth); // the context a run starts from, untimed
    const start = performance.now();
    await run(llm, n);
    samples.push(n / ((performance.now() - start) / 1000));
    if (llm.nPast !== depth + n) {
      throw new Error(`${depth} + ${n} tokens evaluated but nPast is ${llm.nPast}`);
    }
  }
  return { samples_ts: samples, n_ctx: nCtx };
}

const out = {
  pp: Number(nPrompt) > 0
    ? await test(pp, Number(nPrompt), Number(nPrompt), Number(nCtxPP))
    : undefined,
  tg: Number(nGen) > 0 ? await test(tg, Number(nGen), 1, Number(nCtxTG)) : undefined,
};
console.log(JSON.stringify(out));
