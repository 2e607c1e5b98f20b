/**
 * The token stream both sides of `deno task bench:llm` feed: llama-bench draws its prompt and
 * generation tokens with `std::rand() % n_vocab` (a BOS first when the model adds one), so the
 * benchmark draws uniform ids from a seeded mulberry32, the same in bench/llm_graft.ts and
 * bench/peers/node_llama_cpp_bench.mjs.
 * @module
 */

/** A seeded generator of token ids in [0, nVocab). */
export function tokenStream(seed: number, nVocab: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return Math.floor((((t ^ (t >>> 14)) >>> 0) / 2 ** 32) * nVocab);
  };
}
