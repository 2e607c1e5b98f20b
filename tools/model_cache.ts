/**
 * Where `deno task model:fetch` (scripts/model_fetch.sh) keeps the SmolLM2 GGUF the tests and
 * benchmarks read: `$GRAFT_MODEL_CACHE`, else `~/.cache/graft/models`, as that script resolves it.
 * @module
 */

/** The cached SmolLM2-135M-Instruct Q4_1 GGUF's path (the file may be missing). */
export const SMOLLM2_PATH: string = `${
  Deno.env.get("GRAFT_MODEL_CACHE") ?? `${Deno.env.get("HOME")}/.cache/graft/models`
}/SmolLM2-135M-Instruct.Q4_1.gguf`;

/** True when the SmolLM2 GGUF is in the cache. */
export function smolLM2Cached(): boolean {
  try {
    return Deno.statSync(SMOLLM2_PATH).isFile;
  } catch {
    return false;
  }
}
