/**
 * What the CPU benchmarks share: seeded random data and a one-output graph planned on the CPU
 * backend with its memory (bench/cpu_perf.ts's `perf` lines, bench/cpu_bench.ts's `deno bench`
 * groups).
 * @module
 */

import {
  allocTensors,
  type BackendBuffer,
  type CpuBackend,
  type CpuPlan,
  Graph,
  type Tensor,
} from "../mod.ts";

/** `count` values uniform in [-0.5, 0.5) from a linear congruential generator seeded by `seed`. */
export function random(count: number, seed: number): Float32Array {
  const out = new Float32Array(count);
  let s = seed;
  for (let i = 0; i < count; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = s / 4294967296 - 0.5;
  }
  return out;
}

/** A one-output graph on the CPU backend with its memory, inputs filled with random data. */
export class Case implements Disposable {
  /** The plan `run` computes. */
  readonly plan: CpuPlan;
  readonly #buffers: BackendBuffer[];
  /** Builds the graph of `output`, gives it and `inputs` memory and fills the inputs. */
  constructor(readonly cpu: CpuBackend, inputs: Tensor[], output: Tensor) {
    const graph = Graph.build(output);
    this.#buffers = [allocTensors(cpu, inputs), allocTensors(cpu, graph.nodes)];
    inputs.forEach((t, i) => {
      const data = random(t.nelements, i + 1);
      cpu.setTensor(t, t.dtype === "f16" ? new Float16Array(data) : data);
    });
    this.plan = cpu.graphPlanCreate(graph);
  }
  /** Computes the graph once (one native call). */
  run = (): void => this.cpu.graphPlanCompute(this.plan);
  /** Frees the plan and the memory. */
  [Symbol.dispose](): void {
    this.plan.dispose();
    for (const b of this.#buffers) b.dispose();
  }
}
