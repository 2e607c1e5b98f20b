/**
 * k-quant models against llama.cpp: SmolLM2-135M-Instruct requantized to Q4_K_M and Q5_K_M, made
 * here from the cached Q4_1 file by Graft's quantizer (`quantizeGGUF`, as `deno task gguf quantize
 * ... --type q4_K_M`) in a temporary directory. SmolLM2's rows of 576 take no k-quant, so the
 * k-quants are its ffn_down tensors (rows of 1536): Q4_K_M has 16 q4_K and 14 q6_K of them and
 * q5_0 elsewhere, Q5_K_M 16 q5_K and 14 q6_K and q5_1 elsewhere, both q8_0 for attn_v and the
 * embeddings. tools/llm_kquant_fixtures.sh made the same files, checked that llama.cpp's
 * `llama-quantize --allow-requantize` writes the same bytes, and recorded llama.cpp's greedy runs
 * of them (tests/fixtures/llm/smollm2_<type>_greedy[_avx2].json, flash attention and weight
 * repacking off). Each test first checks the file's sha256 against the fixture's, so a change in
 * the quantizer shows as such and not as a model mismatch.
 *
 * With ggml's arithmetic (the default), the k-quant products compute as ggml's x86 code does
 * (tests/ggml_exact_dots_test.ts): vec_dot_q4_K_q8_K, vec_dot_q5_K_q8_K and vec_dot_q6_K_q8_K
 * below 8 columns (decoding), its tiled k-quant matmul from 8 on (prefill), so on every prompt
 * llama.cpp's top-8 logits along its greedy ids hold within 1e-6 (the fixture's printed digits)
 * and Graft's own greedy ids equal llama.cpp's for 32 steps, against the fixture of the kernels'
 * SIMD level.
 * Skipped when the Q4_1 file is not cached (`deno task model:fetch`).
 */

import { CpuBackend, LLM } from "../mod.ts";
import { SMOLLM2_PATH, smolLM2Cached } from "../tools/model_cache.ts";
import {
  assertMatchesLlama,
  KQUANT_MIXES,
  type KQuantMix,
  llamaFixtureFor,
  requantizedSmolLM2,
} from "./llm_fixture.ts";

const ignore = !smolLM2Cached();
if (ignore) {
  console.log(`llm_kquant_test: ${SMOLLM2_PATH} is missing (deno task model:fetch): skipped`);
}

const STEPS = 32;

for (const type of Object.keys(KQUANT_MIXES) as KQuantMix[]) {
  Deno.test({
    name: `llm ${type}: llama.cpp's logits and greedy ids on SmolLM2 requantized to ${type}`,
    ignore,
    async fn(): Promise<void> {
      using cpu = new CpuBackend({ threads: 2 });
      const want = llamaFixtureFor(`smollm2_${type}_greedy`, cpu.simd);
      if (!want) {
        console.log(
          `no llama.cpp fixture for the ${cpu.simd} kernels (GRAFT_LLAMA_SIMD=${cpu.simd} ` +
            `tools/llm_kquant_fixtures.sh ${type} records it): checked against nothing`,
        );
        return;
      }
      const dir = await Deno.makeTempDir({ prefix: `graft-${type}-` });
      try {
        const path = await requantizedSmolLM2(type, dir, want);
        using llm = await LLM.load(path, { backend: cpu, nCtx: 256 });
        const report: string[] = [];
        for (const c of want.cases) {
          report.push(await assertMatchesLlama(llm, want, c, STEPS, true));
        }
        console.log(
          `${type}, ${cpu.simd} kernels against llama.cpp's ${cpu.simd} build:\n${
            report.join("\n")
          }`,
        );
      } finally {
        await Deno.remove(dir, { recursive: true });
      }
    },
  });
}
