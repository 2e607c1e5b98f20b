/**
 * Micro-benchmark of mulMat's repacked order (params[1] = 2, dot_repack.zig) against ggml's plain
 * order (params[1] = 1) on SmolLM2-like q4_0 / q4_K shapes, decode (1 column) and prefill (128),
 * one process, best of several runs each, alternating. `deno run --allow-all bench/repack_bench.ts`
 * Each graph holds PRODUCTS products of their own weights (as a model's layers), so the time per
 * product is the kernel's and not one graphCompute's fixed cost (about 40 us here, more than a
 * SmolLM2-sized decode product takes), and the weights come from memory, not from the cache.
 * @module
 */
import { allocTensors, Context, CpuBackend, Graph, mulMat, quantize } from "../mod.ts";
import type { QuantDType } from "../src/quant.ts";

const shapes: [number, number][] = [[576, 576], [576, 1536], [1536, 576]];
const threads = Number(Deno.env.get("THREADS") ?? "1");
/** Products per graph: 30 SmolLM2-sized weight matrices (15 MB of q4_0) outgrow the L2 cache. */
const PRODUCTS = 30;
using cpu = new CpuBackend({ threads });
for (const dtype of ["q4_0", "q4_K"] as QuantDType[]) {
  for (const [k, m] of shapes) {
    if (dtype === "q4_K" && k % 256 !== 0) continue;
    for (const n of [1, 128]) {
      const times: Record<string, number> = { plain: Infinity, repack: Infinity };
      const runs: [string, () => void][] = [];
      for (const repack of [false, true]) {
        const ctx = new Context();
        const b = ctx.newTensor("f32", [k, n]);
        const weights = Array.from({ length: PRODUCTS }, () => ctx.newTensor(dtype, [k, m]));
        const graph = Graph.build(...weights.map((a) => mulMat(a, b, { ggml: true, repack })));
        const mem = allocTensors(cpu, [...ctx.tensors, ...graph.leafs, ...graph.nodes]);
        for (const a of weights) {
          const w = new Float32Array(k * m).map(() => Math.random() * 0.2 - 0.1);
          cpu.setTensor(a, quantize(w, dtype));
        }
        cpu.setTensor(b, new Float32Array(k * n).map(() => Math.random() * 2 - 1));
        runs.push([repack ? "repack" : "plain", () => cpu.graphCompute(graph)]);
        void mem;
      }
      const reps = n === 1 ? 20 : 2;
      for (let round = 0; round < 7; round++) {
        for (const [name, run] of runs) {
          const t0 = performance.now();
          for (let i = 0; i < reps; i++) run();
          times[name] = Math.min(times[name]!, (performance.now() - t0) / reps / PRODUCTS);
        }
      }
      console.log(
        `${dtype} ${m}x${k} n=${n} threads=${threads}: plain ${
          (times.plain! * 1e3).toFixed(1)
        } us, ` +
          `repack ${(times.repack! * 1e3).toFixed(1)} us (${
            (times.plain! / times.repack!).toFixed(2)
          }x)`,
      );
    }
  }
}
