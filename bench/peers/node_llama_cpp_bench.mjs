// deno-lint-ignore-file explicit-function-return-type -- plain JavaScript for Node: no types to write
// node-llama-cpp's side of `deno task bench:llm` (bench/llm_perf.ts): pp and tg on the CPU
// (gpu: false), measured as llama-bench measures them (bench/llm_graft.ts does the same for Graft),
// printed as one JSON line on stdout. node-llama-cpp is not a dependency of the repository:
// NODE_LLAMA_CPP_DIR names an install of it (`npm i -E node-llama-cpp@3.21.1` there).
//
//   node bench/peers/node_llama_cpp_bench.mjs MODEL THREADS N_PROMPT N_GEN N_CTX_PP N_CTX_TG REPS SEED [FA]
//
// FA: 1 turns flash attention on (default 0).
import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [model, threads, nPrompt, nGen, nCtxPP, nCtxTG, reps, seed, fa] = process.argv.slice(2);
const dir = process.env.NODE_LLAMA_CPP_DIR;
if (!dir || !model) {
  throw new Error("usage: NODE_LLAMA_CPP_DIR=... node_llama_cpp_bench.mjs MODEL ...");
}
const entry = createRequire(join(dir, "package.json")).resolve("node-llama-cpp");
const { getLlama, LlamaLogLevel } = await import(pathToFileURL(entry).href);

/** mulberry32: the seeded token stream of bench/llm_tokens.ts (Node cannot import its .ts). */
function prng(s) {
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
}

const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const lm = await llama.loadModel({ modelPath: model, gpuLayers: 0 });
const ggml = lm.fileInfo.metadata.tokenizer.ggml;
const nVocab = ggml.tokens.length;
const bos = ggml.add_bos_token === true ? ggml.bos_token_id : undefined;
const random = prng(Number(seed));
/** Uniform ids, as llama-bench's `std::rand() % n_vocab` (a BOS first when the model adds one). */
const token = () => Math.floor(random() * nVocab);

/** One test as llama-bench runs it: its own context, one warmup, then `reps` timed runs. */
async function test(kind, n, nCtx) {
  const context = await lm.createContext({
    contextSize: nCtx,
    batchSize: Math.max(Number(nPrompt), 1),
    threads: { ideal: Number(threads), min: Number(threads) },
    flashAttention: fa === "1",
  });
  const seq = context.getSequence();
  // The logits of the last token are asked for (`generateNext`), as llama-bench's batches do.
  const last = (t) => [t, { generateNext: { token: true } }];
  const pp = (count) => {
    const ids = Array.from(
      { length: count },
      (_, i) => i === 0 && bos !== undefined ? bos : token(),
    );
    return seq.controlledEvaluate([...ids.slice(0, -1), last(ids.at(-1))]);
  };
  const tg = async (count) => {
    let t = bos ?? token();
    for (let i = 0; i < count; i++) {
      await seq.controlledEvaluate([last(t)]);
      t = token();
    }
  };
  const run = kind === "pp" ? pp : tg;
  await seq.clearHistory();
  await run(kind === "pp" ? n : 1); // warmup
  const samples = [];
  for (let r = 0; r < Number(reps); r++) {
    await seq.clearHistory();
    const start = performance.now();
    await run(n);
    samples.push(n / ((performance.now() - start) / 1000));
  }
  const info = { n_ctx: context.contextSize, batch: context.batchSize };
  await context.dispose();
  return { samples_ts: samples, ...info };
}

const out = {
  version: JSON.parse(
    (await import("node:fs")).readFileSync(join(entry, "../../package.json"), "utf8"),
  ).version,
  pp: Number(nPrompt) > 0 ? await test("pp", Number(nPrompt), Number(nCtxPP)) : undefined,
  tg: Number(nGen) > 0 ? await test("tg", Number(nGen), Number(nCtxTG)) : undefined,
};
await lm.dispose();
await llama.dispose();
console.log(JSON.stringify(out));
