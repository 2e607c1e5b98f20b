/**
 * The op suite on WebGPU (see `op_suite.ts`): every case computed on WebGPU and on the CPU
 * backend from the same inputs, compared by normalized squared error (ggml's NMSE) against the
 * case's `gpuNmse`; and the op table's WebGPU `support` declarations verified both ways, each
 * declared result also compared with the CPU's. Skipped, visibly, where Deno finds no adapter.
 */

import assert from "node:assert/strict";
import { CpuBackend } from "../src/backend/cpu/backend.ts";
import { closeSharedWebGpuTest, sharedWebGpu } from "./gpu.ts";
import type { Backend } from "../mod.ts";
import { CASES, checkDeclarations, Inputs, nmseOf, runGraph, type SuiteCase } from "./op_suite.ts";

const cpu = new CpuBackend({ threads: 1 });
const gpu = await sharedWebGpu();
globalThis.addEventListener("unload", () => cpu.dispose());

for (const c of CASES) {
  Deno.test({
    name: `op suite webgpu: ${c.name}`,
    ignore: gpu === null,
    sanitizeResources: false,
    sanitizeOps: false,
    fn: async () => {
      const expected = await run(cpu, c);
      const actual = await run(gpu!, c);
      const error = nmseOf(actual, expected);
      assert.ok(
        error <= c.gpuNmse,
        `webgpu ${c.name}: NMSE ${error} > ${c.gpuNmse}\nactual ${actual.slice(0, 8).join(", ")}` +
          `\nexpected ${expected.slice(0, 8).join(", ")}`,
      );
    },
  });
}

/** Builds the case over its seeded inputs (each backend its own graph) and runs it. */
function run(backend: Backend, c: SuiteCase): Promise<Float64Array> {
  const inputs = new Inputs(c.name);
  return runGraph(backend, inputs, c.build(inputs).out);
}

Deno.test({
  name: "op suite webgpu: the op table's webgpu support declarations hold both ways",
  ignore: gpu === null,
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const problems = await checkDeclarations(gpu!, "webgpu", cpu);
    assert.deepEqual(problems, []);
  },
});

closeSharedWebGpuTest();
