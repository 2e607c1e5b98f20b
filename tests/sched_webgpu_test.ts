// The scheduler across the CPU and WebGPU, the pairing it exists for: the demo block with its
// attention weights on the GPU and the MLP on the CPU, planned buffers per backend, compared
// with a CPU-only run. Skipped, with a message, where Deno finds no WebGPU adapter.
import assert from "node:assert/strict";
import { sharedWebGpu } from "./gpu.ts";
import { allocGraph, allocTensors, CpuBackend, Op, Schedule } from "../mod.ts";
import { blockData, buildBlock, DEFAULT_BLOCK, setBlockInputs } from "../demo/block.ts";
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
