/**
 * Records tests/fixtures/ggml_exact_ops.json: the SHA-256 of ggml's output on each case of
 * tests/ggml_exact_ops.ts, for ggml's AVX-512 build and its AVX2 build (their ggml_v_expf differ).
 * Usage: ggml_exact_ops_record.ts <avx512 ggml_exact_ops> <avx2 ggml_exact_ops>. Run by
 * bench/peers/ggml_exact_ops.sh --record.
 * @module
 */
import { digest, exactCases, ggmlOutputs } from "../../tests/ggml_exact_ops.ts";

const [avx512, avx2] = Deno.args;
if (!avx512 || !avx2) throw new Error("usage: ggml_exact_ops_record.ts <avx512 exe> <avx2 exe>");
const cases = exactCases();
const outputs = { avx512: ggmlOutputs(avx512, cases), avx2: ggmlOutputs(avx2, cases) };
const record: Record<string, { avx2: string; avx512: string }> = {};
for (const [k, c] of cases.entries()) {
  record[c.name] = {
    avx2: await digest(outputs.avx2[k]!),
    avx512: await digest(outputs.avx512[k]!),
  };
}
const path = new URL("../../tests/fixtures/ggml_exact_ops.json", import.meta.url);
const json = {
  source: "bench/peers/ggml_exact_ops.sh --record: SHA-256 of ggml-cpu's outputs (llama.cpp " +
    "0.3.36 sdist, commit 0c1e5709; AVX-512 build with GGML_NATIVE on an AVX-512 machine, AVX2 " +
    "build with GGML_NATIVE=OFF GGML_AVX2/FMA/F16C/BMI2) on tests/ggml_exact_ops.ts's cases",
  cases: record,
};
Deno.writeTextFileSync(path, JSON.stringify(json, null, 2) + "\n");
console.log(`wrote ${path.pathname}: ${cases.length} cases`);
