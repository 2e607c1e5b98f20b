// The scheduler across the CPU and WebGPU, the pairing it exists for: the demo block with its
// attention weights on the GPU and the MLP on the CPU, planned buffers per backend, compared
// with a CPU-only run. Skipped, with a message, where Deno finds no WebGPU adapter.
import assert from "node:assert/strict";
import { closeSharedWebGpuTest, sharedWebGpu } from "./gpu.ts";
import {
  add,
  allocGraph,
  allocTensors,
  Context,
  CpuBackend,
  Graph,
  mulMat,
  Op,
  Schedule,
} from "../mod.ts";
import {
  blockData,
  buildBlock,
  DEFAULT_BLOCK,
  randomValues,
  setBlockInputs,
} from "../demo/block.ts";
import { relativeError } from "../demo/block_reference.ts";

/** f32 sums in a different order on the GPU (no f64 in WGSL). */
const BLOCK_TOLERANCE = 1e-5;

const gpu = await sharedWebGpu();

Deno.test({
  name: "the block split across WebGPU and the CPU matches the CPU-only block",
  ignore: gpu === null,
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const accelerator = gpu!;
    using cpu = new CpuBackend({ threads: 2 });
    const data = blockData(DEFAULT_BLOCK);
    const alone = buildBlock(DEFAULT_BLOCK);
    using _aw = allocTensors(cpu, alone.ctx.tensors);
    using _an = allocGraph(cpu, alone.graph);
    setBlockInputs(alone, data);
    cpu.graphCompute(alone.graph);
    const expected = cpu.getTensor(alone.output);

    const block = buildBlock(DEFAULT_BLOCK);
    const w = block.inputs;
    const attention = [w.attnNorm, w.wq, w.wk, w.wv, w.wo];
    using _g = allocTensors(accelerator, attention);
    using _c = allocTensors(cpu, block.ctx.tensors.filter((t) => !attention.includes(t)));
    setBlockInputs(block, data);
    using schedule = Schedule.create(block.graph, {
      backends: [accelerator, cpu],
      allocate: allocGraph,
    });
    assert.deepEqual(schedule.splits.map((s) => s.backend.name), ["webgpu", "cpu"]);
    const stats = await schedule.compute();
    assert.ok(stats.bytesCopied > 0);
    assert.ok(stats.backends["webgpu"] && stats.backends["cpu"]);
    const out = await schedule.getOutput(block.output);
    assert.ok(relativeError(out, expected) < BLOCK_TOLERANCE);

    const attentionEnd = block.graph.nodes.find((n) => n.op === Op.add)!;
    using manual = Schedule.fromCuts(block.graph, [
      { upTo: attentionEnd, backend: accelerator, inputs: [w.x, w.mask] },
      { upTo: block.output, backend: cpu },
    ], allocGraph);
    assert.ok(schedule.splits.length <= manual.splits.length);
    await manual.compute();
    assert.ok(relativeError(await manual.getOutput(block.output), expected) < BLOCK_TOLERANCE);
  },
});

Deno.test({
  name: "leafs cross between WebGPU and the CPU once while unchanged, and again after a write",
  ignore: gpu === null,
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const accelerator = gpu!;
    using cpu = new CpuBackend({ threads: 1 });
    const ctx = new Context();
    const [k, m, n] = [33, 6, 3];
    const onGpu = ctx.newTensor("f32", [k, n], "x_gpu");
    const onCpu = ctx.newTensor("f32", [k, n], "x_cpu");
    const wCpu = ctx.newTensor("f32", [k, m], "w_cpu");
    const wGpu = ctx.newTensor("f32", [k, m], "w_gpu");
    // Each product runs where its weight lives, so each x crosses to the other backend.
    const fromGpu = mulMat(wCpu, onGpu);
    const fromCpu = mulMat(wGpu, onCpu);
    const out = add(fromGpu, fromCpu);
    using _g = allocTensors(accelerator, [onGpu, wGpu]);
    using _c = allocTensors(cpu, [onCpu, wCpu]);
    const wc = randomValues(wCpu.nelements, 1), wg = randomValues(wGpu.nelements, 2);
    let xg = randomValues(onGpu.nelements, 3), xc = randomValues(onCpu.nelements, 4);
    cpu.setTensor(wCpu, wc);
    accelerator.setTensor(wGpu, wg);
    accelerator.setTensor(onGpu, xg);
    cpu.setTensor(onCpu, xc);
    using schedule = Schedule.create(Graph.build(out), { backends: [accelerator, cpu] });
    const crossing = schedule.splits.flatMap((s) => s.inputs);
    const leafs = crossing.map((i) => i.source.name).filter((name) => name.startsWith("x_"));
    assert.deepEqual(leafs.sort(), ["x_cpu", "x_gpu"]);
    const expected = (): number[] => {
      const a = product(wc, xg, k, m, n), b = product(wg, xc, k, m, n);
      return a.map((v, i) => v + b[i]!);
    };
    const check = async (what: string): Promise<void> => {
      const got = await schedule.getOutput(out) as Float32Array;
      const want = expected();
      // f32 on two backends, 33-term sums of values below 1: 1e-5 absolute.
      want.forEach((v, i) => assert.ok(Math.abs(got[i]! - v) < 1e-5, `${what}[${i}]`));
    };
    assert.equal((await schedule.compute()).copiesSkipped, 0);
    await check("first");
    const second = await schedule.compute();
    assert.equal(second.copiesSkipped, 2);
    await check("second");
    xg = randomValues(onGpu.nelements, 5);
    accelerator.setTensor(onGpu, xg);
    assert.equal((await schedule.compute({ profile: true })).copiesSkipped, 1);
    await check("new x on the GPU");
    xc = randomValues(onCpu.nelements, 6);
    cpu.setTensor(onCpu, xc);
    assert.equal((await schedule.compute()).copiesSkipped, 1);
    await check("new x on the CPU");
  },
});

/** out[n][m] = sum_k w[m][k] x[n][k] in f64. */
function product(w: Float32Array, x: Float32Array, k: number, m: number, n: number): number[] {
  const out: number[] = [];
  for (let j = 0; j < n; j++) {
    for (let i = 0; i < m; i++) {
      let sum = 0;
      for (let p = 0; p < k; p++) sum += w[i * k + p]! * x[j * k + p]!;
      out.push(sum);
    }
  }
  return out;
}

closeSharedWebGpuTest();
