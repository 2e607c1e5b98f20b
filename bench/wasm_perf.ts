/**
 * The WebAssembly backend's speed in this Deno (V8, as Chromium): sgemm n=512 and the demo's
 * transformer block, one thread, against the native CPU backend on one thread (AVX2) in the
 * same run. One line per case, as bench:cpu prints them:
 *   perf <case> graft=<value><unit> <peer>=<value><unit> ratio=<graft/peer>
 * Run with `deno task bench:wasm`.
 * @module
 */

import {
  allocTensors,
  Context,
  type CoreBackend,
  CpuBackend,
  Graph,
  mulMat,
  planGraph,
  WasmBackend,
} from "../mod.ts";
import { blockData, buildBlock, setBlockInputs } from "../demo/block.ts";
import { compare } from "./timing.ts";
import { PerfReport } from "./perf_line.ts";

const perf = new PerfReport();

/** A compute function for an n x n x n sgemm on `backend`, and its cleanup. */
function sgemm(backend: CoreBackend, n: number): { run: () => void; [Symbol.dispose](): void } {
  const ctx = new Context();
  const a = ctx.newTensor("f32", [n, n]);
  const b = ctx.newTensor("f32", [n, n]);
  const c = mulMat(a, b);
  const graph = Graph.build(c);
  const memory = allocTensors(backend, [a, b, ...graph.nodes]);
  const data = new Float32Array(n * n).map((_, i) => ((i * 7919) % 1000) / 1000 - 0.5);
  backend.setTensor(a, data);
  backend.setTensor(b, data);
  const plan = backend.graphPlanCreate(graph);
  return {
    run: () => backend.graphPlanCompute(plan),
    [Symbol.dispose]: () => {
      plan.dispose();
      memory.dispose();
    },
  };
}

/** The demo block (default size) on `backend`, weights prepacked. */
function block(backend: CoreBackend): { run: () => void; [Symbol.dispose](): void } {
  const built = buildBlock();
  const weights = allocTensors(backend, built.ctx.tensors);
  const activations = planGraph(built.graph, { alignment: backend.alignment }).allocate(backend);
  setBlockInputs(built, blockData(built.config));
  const plan = backend.graphPlanCreate(built.graph, { prepackWeights: true });
  return {
    run: () => backend.graphPlanCompute(plan),
    [Symbol.dispose]: () => {
      plan.dispose();
      activations.dispose();
      weights.dispose();
    },
  };
}

using wasm = await WasmBackend.create();
using cpu = new CpuBackend({ threads: 1, simd: "avx2" });
{
  const n = 512;
  using w = sgemm(wasm, n);
  using c = sgemm(cpu, n);
  const [tw, tc] = compare(w.run, c.run);
  const gflops = (t: number): number => (2 * n ** 3) / t / 1e9;
  perf.report(`wasm_sgemm_n${n}_1t`, gflops(tw), "cpu_avx2_1t", gflops(tc), "GFLOP/s");
}
{
  using w = block(wasm);
  using c = block(cpu);
  const [tw, tc] = compare(w.run, c.run);
  perf.report("wasm_block_1t", tw * 1e3, "cpu_avx2_1t", tc * 1e3, "ms");
}
