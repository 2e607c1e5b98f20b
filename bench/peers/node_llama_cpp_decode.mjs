// node-llama-cpp as a decode-step server for bench/decode_bench.ts: loads MODEL on the CPU
// (gpu: false) with a context of N_CTX positions and THREADS threads, prints "ready", then answers
// each line of stdin with one line of stdout:
//   "e ID"  evaluate the one token ID at the next position, its logits computed (a decode step,
//           as bench/peers/node_llama_cpp_bench.mjs's tg does) -> "ok"
//   "r"     clear the context's history -> "ok"
// and exits when stdin closes. NODE_LLAMA_CPP_DIR names an install of node-llama-cpp.
//
//   node bench/peers/node_llama_cpp_decode.mjs MODEL THREADS N_CTX
import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { createInterface } from "node:readline";

const [model, threads, nCtx] = process.argv.slice(2);
const dir = process.env.NODE_LLAMA_CPP_DIR;
if (!dir || !nCtx) {
  throw new Error("usage: NODE_LLAMA_CPP_DIR=... node_llama_cpp_decode.mjs MODEL THREADS N_CTX");
}
const entry = createRequire(join(dir, "package.json")).resolve("node-llama-cpp");
const { getLlama, LlamaLogLevel } = await import(pathToFileURL(entry).href);

const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const lm = await llama.loadModel({ modelPath: model, gpuLayers: 0 });
const context = await lm.createContext({
  contextSize: Number(nCtx),
  batchSize: 1,
  threads: { ideal: Number(threads), min: Number(threads) },
  flashAttention: false,
});
const seq = context.getSequence();
process.stdout.write("ready\n");

for await (const line of createInterface({ input: process.stdin })) {
  if (line === "r") {
    await seq.clearHistory();
  } else if (line.startsWith("e ")) {
    await seq.controlledEvaluate([[Number(line.slice(2)), { generateNext: { token: true } }]]);
  } else {
    throw new Error(`unknown command ${JSON.stringify(line)}`);
  }
  process.stdout.write("ok\n");
}
await context.dispose();
await lm.dispose();
await llama.dispose();
