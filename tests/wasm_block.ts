/**
 * Child process of tests/wasm_test.ts, run without --allow-ffi: computes the demo's transformer
 * block on `defaultBackend()` (which must fall back to WebAssembly) and prints, as one JSON line
 * on stdout, the backend it got, the FFI permission it saw, the output and its error against
 * the float64 reference.
 */

import { allocTensors, defaultBackend, planGraph, WasmBackend } from "../mod.ts";
import { blockData, buildBlock, setBlockInputs } from "../demo/block.ts";
import { referenceBlock, relativeError } from "../demo/block_reference.ts";

const config = { dim: 64, heads: 4, seq: 9, ffn: 176, eps: 1e-5 };

async function main(): Promise<void> {
  const ffi = (await Deno.permissions.query({ name: "ffi" })).state;
  const live = (): number => {
    const counts = WasmBackend.liveAllocations();
    return counts.buffers + counts.pools + counts.plans + counts.allocators;
  };
  let output: number[];
  let backendInfo: { kind: string; simd: string; threads: number };
  {
    using backend = await defaultBackend();
    backendInfo = {
      kind: backend instanceof WasmBackend ? "wasm" : "cpu",
      simd: backend.simd,
      threads: backend.threads,
    };
    const block = buildBlock(config);
    const data = blockData(config);
    using _weights = allocTensors(backend, block.ctx.tensors);
    const memory = planGraph(block.graph, { alignment: backend.alignment });
    using _activations = memory.allocate(backend);
    setBlockInputs(block, data);
    using plan = backend.graphPlanCreate(block.graph, { prepackWeights: true });
    backend.graphPlanCompute(plan);
    output = Array.from(backend.getTensor(block.output) as Float32Array);
    // A second compute from the prepacked weights gives the same bits.
    backend.graphPlanCompute(plan);
    const again = backend.getTensor(block.output) as Float32Array;
    if (!again.every((v, i) => Object.is(v, output[i]))) throw new Error("recompute differs");
  }
  const error = relativeError(output, referenceBlock(config, blockData(config)));
  console.log(JSON.stringify({ ffi, backend: backendInfo, error, live: live(), output }));
}

await main();
