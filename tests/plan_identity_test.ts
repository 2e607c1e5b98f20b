/** A plan is valid only for the graph and placement it was made for (CPU; WebGPU in its file). */

import assert from "node:assert/strict";
import {
  allocTensors,
  Context,
  CpuBackend,
  Graph,
  liveAllocations,
  reshape,
  scale,
} from "../mod.ts";
import { assertNothingLive } from "./leaks.ts";
import { samePlanOtherWeights, unplacedTensor } from "./plan_identity.ts";

// Loads the library outside any test, so its resource is not reported as a test's leak.
const baseline = liveAllocations();

Deno.test("cpu: a plan for mulMat(w1, x) refuses mulMat(w2, x) of the same shapes", async () => {
  using cpu = new CpuBackend({ threads: 1 });
  await samePlanOtherWeights(cpu);
});

Deno.test("cpu: after unplace() or a new placement an old plan is stale", async () => {
  using cpu = new CpuBackend({ threads: 1 });
  await unplacedTensor(cpu);
});

Deno.test("graph hashes tell exact dtypes and exact params apart", () => {
  const ctx = new Context();
  // The old hash took one character of the dtype name: f32 and i32 collided ("3").
  const f32 = Graph.build(reshape(ctx.newTensor("f32", [4, 2]), [8]));
  const i32 = Graph.build(reshape(ctx.newTensor("i32", [4, 2]), [8]));
  assert.notEqual(f32.hash, i32.hash);
  // The old hash took params as integers of millionths: 1e-7 and 2e-7 collided.
  const x = ctx.newTensor("f32", [4]);
  assert.notEqual(Graph.build(scale(x, 1e-7)).hash, Graph.build(scale(x, 2e-7)).hash);
  assert.equal(Graph.build(scale(x, 0.5)).hash, Graph.build(scale(x, 0.5)).hash);
});

Deno.test("a graph's tensors and node lists cannot be changed after a plan saw them", () => {
  const ctx = new Context();
  const x = ctx.newTensor("f32", [4, 2]);
  const graph = Graph.build(scale(x, 2));
  assert.throws(() => (x.ne as unknown as number[])[0] = 8, TypeError);
  assert.throws(() => (graph.nodes as unknown as unknown[]).push(x), TypeError);
  assert.throws(() => (graph.nodes[0]!.params as unknown as number[])[0] = 3, TypeError);
});

Deno.test("an identical graph object with the same placement is accepted", () => {
  using cpu = new CpuBackend({ threads: 1 });
  const ctx = new Context();
  const x = ctx.newTensor("f32", [4]);
  const y = scale(x, 2);
  using _memory = allocTensors(cpu, [x, y]);
  const graph = Graph.build(y);
  using plan = cpu.graphPlanCreate(graph);
  cpu.graphPlanCompute(plan, Graph.build(y)); // a second Graph of the same tensors
});

Deno.test("plan identity: nothing native is left alive", () => assertNothingLive(baseline));
