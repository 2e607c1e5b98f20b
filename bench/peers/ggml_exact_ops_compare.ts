/**
 * Graft's CPU row-wise ops against ggml's, element by element (tests/ggml_exact_ops.ts's cases):
 * prints each case's count of elements whose bits differ. Usage: ggml_exact_ops_compare.ts
 * <ggml_exact_ops executable> [simd level] [threads].
 * @module
 */
import { bitDiff, exactCases, ggmlOutputs, graftOutput } from "../../tests/ggml_exact_ops.ts";
import type { SimdLevel } from "../../mod.ts";

const exe = Deno.args[0];
if (!exe) {
  throw new Error("usage: ggml_exact_ops_compare.ts <ggml_exact_ops executable> [simd] [threads]");
}
const simd = (Deno.args[1] ?? "avx512") as SimdLevel;
const threads = Number(Deno.args[2] ?? 1);
const cases = exactCases();
const want = ggmlOutputs(exe, cases);
let bad = 0;
cases.forEach((c, k) => {
  const got = graftOutput(c, threads, simd);
  const { count, first } = bitDiff(got, want[k]!);
  if (count > 0) bad++;
  const where = count > 0 ? ` first at ${first}: ${got[first]} vs ggml ${want[k]![first]}` : "";
  console.log(`${c.name.padEnd(32)} ${count}/${got.length} differ${where}`);
});
console.log(
  `${simd}, ${threads} thread(s): ${cases.length - bad}/${cases.length} cases bitwise equal`,
);
