/**
 * Requantized models against llama.cpp: SmolLM2-135M-Instruct requantized to Q4_K_M, Q5_K_M and
 * Q4_0, made here from the cached Q4_1 file by Graft's quantizer (`quantizeGGUF`, as `deno task
 * gguf quantize ... --type q4_K_M`) in a temporary directory. SmolLM2's rows of 576 take no
 * k-quant, so the k-quants are its ffn_down tensors (rows of 1536): Q4_K_M has 16 q4_K and 14 q6_K
 * of them and q5_0 elsewhere, Q5_K_M 16 q5_K and 14 q6_K and q5_1 elsewhere, both q8_0 for attn_v
 * and the embeddings; Q4_0 is q4_0 but for the q8_0 embeddings. tools/llm_requant_fixtures.sh made
 * the same files, checked that llama.cpp's `llama-quantize --allow-requantize` writes the same
 * bytes, and recorded llama.cpp's greedy runs of them
 * (tests/fixtures/llm/smollm2_<type>_greedy[_repack][_avx2].json, flash attention off). Each test
 * first checks the file's sha256 against the fixture's, so a change in the quantizer shows as
 * such and not as a model mismatch.
 *
 * Two placements of the weights, as llama.cpp has them:
 * - `--no-repack` (`repack: false`): every product as ggml's plain CPU buffers compute it, the
 *   k-quants in the order of vec_dot_q*_K_q8_K below 8 columns (decoding) and of its tiled
 *   k-quant matmul from 8 on (prefill), q4_0 as vec_dot_q4_0_q8_0 (tests/ggml_exact_dots_test.ts);
 * - llama.cpp's default on x86 CPUs with AVX2 and without AMX (`repack: true`, Graft's default):
 *   the q4_0 and q4_K matrices (every one here has a multiple of 8 rows) in the order of ggml's
 *   repacked 8x8 gemv/gemm kernels (CPU_REPACK), the rest as above. Recorded with the harness
 *   placing exactly those tensors in CPU_REPACK; the AVX2 build's fixtures are cross-checked with
 *   a default `llama-completion` run (the AVX-512 build's CLI would take AMX, see
 *   tools/llm_fixtures.sh).
 * Either way, on every prompt llama.cpp's top-8 logits along its greedy ids hold within 1e-6
 * (the fixture's printed digits) and Graft's own greedy ids equal llama.cpp's for 32 steps,
 * against the fixture of the kernels' SIMD level.
 * Skipped when the Q4_1 file is not cached (`deno task model:fetch`).
 */

import { CpuBackend, LLM } from "../mod.ts";
import { SMOLLM2_PATH, smolLM2Cached } from "../tools/model_cache.ts";
import {
  assertMatchesLlama,
  llamaFixtureFor,
  requantizedSmolLM2,
  type RequantMix,
} from "./llm_fixture.ts";

const ignore = !smolLM2Cached();
if (ignore) {
  console.log(`llm_requant_test: ${SMOLLM2_PATH} is missing (deno task model:fetch): skipped`);
}

const STEPS = 32;

const RUNS: { type: RequantMix; repack: boolean }[] = [
  { type: "q4_K_M", repack: false },
  { type: "q5_K_M", repack: false },
  { type: "q4_0", repack: false },
  { type: "q4_K_M", repack: true },
  { type: "q4_0", repack: true },
];

for (const { type, repack } of RUNS) {
  const placement = repack ? "weights repacked (llama.cpp's default)" : "--no-repack";
  Deno.test({
    name: `llm ${type}, ${placement}: llama.cpp's logits and greedy ids on SmolLM2 requantized`,
    ignore,
    async fn(): Promise<void> {
      using cpu = new CpuBackend({ threads: 2 });
      const name = `smollm2_${type}_greedy${repack ? "_repack" : ""}`;
      const want = llamaFixtureFor(name, cpu.simd);
      if (!want) {
        console.log(
          `no llama.cpp fixture ${name} for the ${cpu.simd} kernels (GRAFT_LLAMA_SIMD=${cpu.simd}` +
            `${repack ? " GRAFT_LLAMA_REPACK=1" : ""} tools/llm_requant_fixtures.sh ${type} ` +
            `records it): checked against nothing`,
        );
        return;
      }
      const dir = await Deno.makeTempDir({ prefix: `graft-${type}-` });
      try {
        const path = await requantizedSmolLM2(type, dir, want);
        using llm = await LLM.load(path, { backend: cpu, nCtx: 256, repack });
        const report: string[] = [];
        for (const c of want.cases) {
          report.push(await assertMatchesLlama(llm, want, c, STEPS, true));
        }
        console.log(
          `${type} (${placement}), ${cpu.simd} kernels against llama.cpp's ${cpu.simd} build:\n${
            report.join("\n")
          }`,
        );
      } finally {
        await Deno.remove(dir, { recursive: true });
      }
    },
  });
}
