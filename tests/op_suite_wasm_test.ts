/**
 * The op suite's cases on the WebAssembly backend (the same Zig core built for wasm32 with
 * SIMD128), for the ops of issue 16's last round: acc and set, padCircular, bicubic
 * interpolate, f16 x f32 binary ops and countEqual's i64 result. Each case against its float64
 * reference with the case's tolerance, as `op_suite_test.ts` does on the CPU backend.
 */

import { WasmBackend } from "../src/backend/wasm/backend.ts";
import { CASES, Inputs, runGraph } from "./op_suite.ts";
import { assertClose, RefTensor } from "./reference.ts";

const wasm = await WasmBackend.create();
globalThis.addEventListener("unload", () => wasm.dispose());

const CHOSEN = /^(acc|set|set1d|set2d|padCircular|countEqual) |bicubic| f16 by f32 |by f32 -> /;

for (const c of CASES.filter((c) => CHOSEN.test(c.name))) {
  Deno.test(`op suite wasm: ${c.name}`, async () => {
    const inputs = new Inputs(c.name);
    const { out, ref } = c.build(inputs);
    const got = await runGraph(wasm, inputs, out);
    assertClose(RefTensor.of(ref.ne, got), ref, c.tol, `wasm ${c.name}`);
  });
}
