/** The kernel build a CPU backend runs: the option, GRAFT_CPU, or the CPU's best. */

import assert from "node:assert/strict";
import { CpuBackend, GraftError, liveAllocations, simdLevels } from "../mod.ts";
import { assertNothingLive } from "./leaks.ts";
import { denoEval } from "./child.ts";

// Loads the library outside any test, so its resource is not reported as a test's leak.
const baseline = liveAllocations();

const canRun = Deno.permissions.querySync({ name: "run" }).state === "granted";

/** Runs a script in a fresh Deno with GRAFT_CPU set; returns its JSON output. */
async function withGraftCpu(value: string, body: string): Promise<unknown> {
  const mod = new URL("../mod.ts", import.meta.url).href;
  const script = `import * as graft from ${JSON.stringify(mod)};\n${body}`;
  const output = await denoEval(script, { GRAFT_CPU: value });
  assert.equal(output.code, 0, `the subprocess exits cleanly: ${output.stderr}`);
  return JSON.parse(output.stdout);
}

const report = `
const r = (f) => { try { return f(); } catch (e) { return { error: e.name, message: e.message }; } };
const made = r(() => { const cpu = new graft.CpuBackend({ threads: 1 }); const s = cpu.simd; cpu.dispose(); return s; });
const explicit = r(() => { const cpu = new graft.CpuBackend({ threads: 1, simd: "avx512" }); cpu.dispose(); return "avx512"; });
console.log(JSON.stringify({ levels: r(() => graft.simdLevels()), made, explicit }));
`;

Deno.test({
  name: "GRAFT_CPU=avx2 caps the kernel build at AVX2; an explicit avx512 is then refused",
  ignore: !canRun || !simdLevels().includes("avx2"),
  fn: async () => {
    const result = await withGraftCpu("avx2", report) as {
      levels: string[];
      made: string;
      explicit: { error: string; message: string };
    };
    assert.deepEqual(result.levels, ["avx2"]);
    assert.equal(result.made, "avx2");
    assert.equal(result.explicit.error, "GraftError");
    assert.match(result.explicit.message, /GRAFT_CPU=avx2/);
  },
});

Deno.test({
  name: "an unknown GRAFT_CPU value is an error naming it and the choices",
  ignore: !canRun,
  fn: async () => {
    const result = await withGraftCpu("avx9", report) as { made: { message: string } };
    assert.match(result.made.message, /GRAFT_CPU="avx9".*auto, avx2, avx512/);
  },
});

Deno.test("an unknown simd option is an error naming it", () => {
  assert.throws(
    // @ts-expect-error: a caller without types can pass any string
    () => new CpuBackend({ threads: 1, simd: "sse" }),
    (e: unknown) => e instanceof GraftError && /simd="sse"/.test(e.message),
  );
});

Deno.test("by default the backend runs the best build this process allows", () => {
  using cpu = new CpuBackend({ threads: 1 });
  assert.equal(cpu.simd, simdLevels().at(-1));
});

Deno.test("simd: nothing native is left alive", () => assertNothingLive(baseline));
