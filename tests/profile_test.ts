// Per-node profiling of a CPU plan: one timing per computed node, views excluded, and a clear
// error when it was not enabled.
import assert from "node:assert/strict";
import {
  allocTensors,
  Context,
  CpuBackend,
  Graph,
  liveAllocations,
  mulMat,
  NativeError,
  permute,
  silu,
} from "../mod.ts";

Deno.test("a profiled plan reports one time per computed node", () => {
  {
    using cpu = new CpuBackend({ threads: 2 });
    const ctx = new Context();
    const w = ctx.newTensor("f32", [33, 17]);
    const x = ctx.newTensor("f32", [33, 5]);
    const y = silu(mulMat(w, x));
    const graph = Graph.build(permute(y, [1, 0, 2, 3]));
    using _inputs = allocTensors(cpu, ctx.tensors);
    using _nodes = allocTensors(cpu, graph.nodes);
    cpu.setTensor(w, new Float32Array(33 * 17).fill(0.5));
    cpu.setTensor(x, new Float32Array(33 * 5).fill(0.25));
    using plan = cpu.graphPlanCreate(graph);
    assert.throws(() => plan.nodeTimings(), NativeError, "not enabled yet");
    plan.enableProfiling();
    cpu.graphPlanCompute(plan);
    const timings = plan.nodeTimings();
    assert.deepEqual(timings.map((t) => t.tensor), [y.src[0], y]);
    for (const t of timings) assert.ok(t.ms >= 0 && Number.isFinite(t.ms));
    plan.enableProfiling(false);
    assert.throws(() => plan.nodeTimings(), NativeError);
  }
  assert.equal(liveAllocations().plans, 0);
});
