/**
 * Runs a small graph on the CPU backend of every kernel build this CPU has, with 1 and 2
 * threads, for tests that compare each build's result with a reference.
 * @module
 */

import assert from "node:assert/strict";
import { allocTensors, type Context, CpuBackend, Graph, simdLevels, type Tensor } from "../mod.ts";

const SIMD_LEVELS = simdLevels();

/**
 * Computes the graph of `output` on a fresh backend of each kernel build with 1 and 2 threads
 * (output poisoned before each run; `build` makes fresh tensors for each build); asserts the
 * two thread counts agree bitwise and returns each build's result (builds may differ: their
 * vector widths sum in other orders).
 */
export function compute(
  build: () => { ctx: Context; inputs: [Tensor, ArrayBufferView][]; output: Tensor },
): [string, Float32Array][] {
  const results: [string, Float32Array][] = [];
  for (const simd of SIMD_LEVELS) {
    using cpu = new CpuBackend({ simd, threads: 1 });
    const { ctx, inputs, output } = build();
    const graph = Graph.build(output);
    using _memory = allocTensors(cpu, [...ctx.tensors, ...graph.leafs, ...graph.nodes]);
    let first: Float32Array | undefined;
    for (const threads of [1, 2]) {
      if (cpu.threads !== threads) cpu.setThreads(threads);
      cpu.setTensor(output, new Uint8Array(output.nbytes).fill(0xff));
      for (const [t, data] of inputs) cpu.setTensor(t, data);
      cpu.graphCompute(graph);
      const got = cpu.getTensor(output) as Float32Array;
      assert.ok(got instanceof Float32Array);
      if (first === undefined) first = got;
      else {
        assert.deepEqual(
          new Uint8Array(got.buffer),
          new Uint8Array(first.buffer),
          `${simd}: 2 threads differ from 1`,
        );
      }
    }
    results.push([simd, first!]);
  }
  return results;
}
