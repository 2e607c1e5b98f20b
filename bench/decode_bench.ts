/**
 * `deno bench` group `decode SmolLM2-135M Q4_1`: one decode step of the cached SmolLM2 GGUF on the
 * CPU (`LLM.eval` of one token, the next token's logits), the step a chat pays per generated
 * token. Only the eval is timed (`b.start()`/`b.end()`); the cache is reset, untimed, whenever it
 * reaches {@link WINDOW} positions, so every step attends over 1 to WINDOW cached positions.
 *
 * Graft is alone in this group: its llama.cpp peers (llama-bench, node-llama-cpp) run as
 * processes of their own under `deno task bench:llm` (bench/llm_perf.ts), which compares decode
 * (tg64) and prefill tokens/s and peak RSS with them. The group is skipped, with how to fetch the
 * model, when it is not cached (`deno task model:fetch`).
 * @module
 */

import { LLM } from "../mod.ts";
import { SMOLLM2_PATH, smolLM2Cached } from "../tools/model_cache.ts";

/** Cache positions a run of steps fills before the untimed reset. */
const WINDOW = 64;

const group = "decode SmolLM2-135M Q4_1";
if (!smolLM2Cached()) {
  console.warn(`${group}: skipped, ${SMOLLM2_PATH} is not cached (deno task model:fetch)`);
} else {
  const llm = await LLM.load(SMOLLM2_PATH, { backend: "cpu", nCtx: 256 });
  globalThis.addEventListener("unload", () => llm.dispose());
  // A fixed prompt's tokens, cycled, so every run decodes the same ids.
  const ids = llm.tokenize("The quick brown fox jumps over the lazy dog.");
  let next = 0;
  Deno.bench({
    name: `graft LLM.eval, 1 token (CPU)`,
    group,
    baseline: true,
    fn: async (b): Promise<void> => {
      if (llm.nPast >= WINDOW) llm.reset();
      const id = ids[next++ % ids.length]!;
      b.start();
      await llm.eval([id]);
      b.end();
    },
  });
}
