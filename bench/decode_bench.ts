/**
 * `deno bench` group `decode SmolLM2-135M Q4_1`: one decode step of the cached SmolLM2 GGUF on the
 * CPU, the step a chat pays per generated token: Graft's `LLM.eval` of one token (its logits)
 * against node-llama-cpp's evaluation of one token in a context of the same size and threads
 * (llama.cpp underneath; the group's baseline), fed the same token ids. Only the step is timed
 * (`b.start()`/`b.end()`); each side's history is reset, untimed, whenever it reaches
 * {@link WINDOW} positions, so every step attends over 1 to WINDOW cached positions.
 *
 * node-llama-cpp runs in a node process of its own (bench/peers/node_llama_cpp_decode.mjs), so
 * its step also pays one short line each way over a pipe (tens of microseconds against
 * milliseconds). Without node or node-llama-cpp, Graft runs alone with a message saying how to get
 * them; `deno task bench:llm` compares prefill, decode and peak RSS with llama.cpp's own
 * llama-bench as well. The group is skipped, with how to fetch the model, when it is not cached
 * (`deno task model:fetch`).
 * @module
 */

import { CpuBackend, LLM } from "../mod.ts";
import { SMOLLM2_PATH, smolLM2Cached } from "../tools/model_cache.ts";
import { startNodeLlamaCppDecoder } from "./peers/node_llama_cpp_decode.ts";

/** Cache positions a run of steps fills before the untimed reset. */
const WINDOW = 64;
/** Positions each side's context holds. */
const N_CTX = 256;

const group = "decode SmolLM2-135M Q4_1";
if (!smolLM2Cached()) {
  console.warn(`${group}: skipped, ${SMOLLM2_PATH} is not cached (deno task model:fetch)`);
} else {
  const llm = await LLM.load(SMOLLM2_PATH, { backend: "cpu", nCtx: N_CTX });
  const threads = llm.backend instanceof CpuBackend ? llm.backend.threads : 1;
  const peer = await startNodeLlamaCppDecoder(SMOLLM2_PATH, threads, N_CTX);
  globalThis.addEventListener("unload", () => llm.dispose());
  // A fixed prompt's tokens, cycled, so both sides decode the same ids.
  const ids = llm.tokenize("The quick brown fox jumps over the lazy dog.");
  if (typeof peer === "string") {
    console.warn(`${group}: node-llama-cpp skipped (${peer}); Graft alone`);
  } else {
    // The server ends when its stdin closes; the process does not wait for it.
    globalThis.addEventListener("unload", () => void peer.close());
    let next = 0, filled = 0;
    Deno.bench({
      name: `node-llama-cpp ${peer.version}, 1 token (CPU, ${threads} threads)`,
      group,
      baseline: true,
      fn: async (b): Promise<void> => {
        if (filled >= WINDOW) {
          await peer.reset();
          filled = 0;
        }
        const id = ids[next++ % ids.length]!;
        b.start();
        await peer.step(id);
        b.end();
        filled++;
      },
    });
  }
  let next = 0;
  Deno.bench({
    name: `graft LLM.eval, 1 token (CPU, ${threads} threads)`,
    group,
    baseline: typeof peer === "string",
    fn: async (b): Promise<void> => {
      if (llm.nPast >= WINDOW) llm.reset();
      const id = ids[next++ % ids.length]!;
      b.start();
      await llm.eval([id]);
      b.end();
    },
  });
}
