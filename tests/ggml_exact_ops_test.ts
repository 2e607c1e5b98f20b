// Graft's CPU row-wise ops bit for bit against ggml-cpu's (the pinned llama.cpp of
// tools/llama_build.sh): rms_norm, rms_norm * weight (fused), silu, silu * g (fused, ggml's
// swiglu), soft_max with scale and a causal mask, rope (SmolLM2's: head 64, base 100000, every
// position 0..8191), on tests/ggml_exact_ops.ts's seeded cases, for each kernel build (AVX-512 and
// AVX2, against ggml built for each) and 1 and 2 threads.
//
// Without a llama.cpp build (CI) the outputs are checked against the SHA-256 of ggml's outputs in
// tests/fixtures/ggml_exact_ops.json (recorded by bench/peers/ggml_exact_ops.sh --record). With
// the build's ggml_exact_ops executables present (bench/peers/ggml_exact_ops.sh builds them) the
// outputs are also compared element by element with ggml's, computed now.
import assert from "node:assert/strict";
import { type SimdLevel, simdLevels } from "../mod.ts";
import {
  bitDiff,
  digest,
  type ExactCase,
  exactCases,
  ggmlOutputs,
  graftOutput,
} from "./ggml_exact_ops.ts";

const FIXTURE = new URL("./fixtures/ggml_exact_ops.json", import.meta.url);
const fixture = JSON.parse(Deno.readTextFileSync(FIXTURE)) as {
  cases: Record<string, Record<SimdLevel, string>>;
};
const cases = exactCases();
const levels = simdLevels();
const THREADS = [1, 2];

const HARNESS_HASH = Array.from(
  new Uint8Array(
    await crypto.subtle.digest(
      "SHA-256",
      Deno.readFileSync(new URL("../bench/peers/ggml_exact_ops.c", import.meta.url)),
    ),
  ),
  (b) => b.toString(16).padStart(2, "0"),
).join("").slice(0, 12);

/** Where bench/peers/ggml_exact_ops.sh puts the harness built against each ggml build. */
function executable(simd: SimdLevel): string | null {
  let cache: string | undefined;
  try {
    cache = Deno.env.get("GRAFT_CACHE") ?? `${Deno.env.get("HOME")}/.cache/graft`;
  } catch {
    return null;
  }
  const build = simd === "avx512" ? "build-avx512" : "build-avx2";
  // ggml_peer.sh names the binary after its source's SHA-256 (first 12 hex digits).
  const path = `${cache}/llama.cpp-0.3.36/${build}/bin/ggml_exact_ops-${HARNESS_HASH}`;
  try {
    return Deno.statSync(path).isFile ? path : null;
  } catch {
    return null;
  }
}

const OPS = ["rms_norm", "rms_norm_mul", "silu", "swiglu", "soft_max", "rope"];
function opOf(c: ExactCase): string {
  return OPS.filter((op) => c.name.startsWith(op + "_")).sort((a, b) => b.length - a.length)[0]!;
}

Deno.test("every case has a recorded ggml digest for each kernel build", () => {
  for (const c of cases) {
    for (const simd of ["avx2", "avx512"] as const) {
      assert.match(fixture.cases[c.name]?.[simd] ?? "", /^[0-9a-f]{64}$/, `${c.name} ${simd}`);
    }
  }
});

for (const simd of ["avx2", "avx512"] as const) {
  for (const threads of THREADS) {
    Deno.test({
      name: `${simd}, ${threads} thread(s): outputs hash as ggml's (recorded)`,
      ignore: !levels.includes(simd), // this CPU does not run the kernel build
      async fn(): Promise<void> {
        const wrong: string[] = [];
        for (const c of cases) {
          const got = await digest(graftOutput(c, threads, simd));
          if (got !== fixture.cases[c.name]?.[simd]) wrong.push(c.name);
        }
        assert.deepEqual(wrong, [], `ops not bitwise ggml's: ${wrong.join(", ")}`);
      },
    });
  }
}

for (const simd of ["avx2", "avx512"] as const) {
  const exe = executable(simd);
  const why = !levels.includes(simd)
    ? `this CPU does not run the ${simd} kernels`
    : !exe
    ? `no ggml ${simd} build with ggml_exact_ops (run bench/peers/ggml_exact_ops.sh)`
    : "";
  if (why) console.log(`ggml_exact_ops_test: live ${simd} comparison skipped: ${why}`);
  Deno.test({
    name: `${simd}: every element bitwise ggml's, computed now (1 and 2 threads)`,
    ignore: why !== "",
    async fn(): Promise<void> {
      const want = ggmlOutputs(exe!, cases);
      const report: string[] = [];
      for (const [k, c] of cases.entries()) {
        // The recorded digest must still be ggml's (a stale fixture would hide a change).
        assert.equal(
          await digest(want[k]!),
          fixture.cases[c.name]![simd],
          `${c.name}: stale fixture`,
        );
        for (const threads of THREADS) {
          const got = graftOutput(c, threads, simd);
          const { count, first } = bitDiff(got, want[k]!);
          if (count > 0) {
            report.push(
              `${
                opOf(c)
              } ${c.name} (${threads} threads): ${count}/${got.length} differ, first at ` +
                `${first}: ${got[first]} vs ggml ${want[k]![first]}`,
            );
          }
        }
      }
      assert.deepEqual(report, []);
    },
  });
}
