// Plan identity checks shared by the CPU test file and the WebGPU one (which runs in its own
// process): a plan computes only the graph and placement it was made for.
import assert from "node:assert/strict";
import {
  allocTensors,
  type Backend,
  Context,
  type Graph,
  Graph as GraphClass,
  mulMat,
  StalePlanError,
  type Tensor,
} from "../mod.ts";

interface Product {
  graph: Graph;
  w: Tensor;
  x: Tensor;
  y: Tensor;
}

function product(ctx: Context, x: Tensor, name: string): Product {
  const w = ctx.newTensor("f32", [8, 4], name);
  const y = mulMat(w, x);
  return { graph: GraphClass.build(y), w, x, y };
}

/**
 * A plan made for mulMat(w1, x) must refuse mulMat(w2, x) of the same shapes (the old
 * structure-only hash accepted it and computed the old graph).
 */
export async function samePlanOtherWeights(backend: Backend): Promise<void> {
  const ctx = new Context();
  const x = ctx.newTensor("f32", [8, 3], "x");
  const first = product(ctx, x, "w1");
  const second = product(ctx, x, "w2");
  using _memory = allocTensors(backend, [x, first.w, first.y, second.w, second.y]);
  await backend.setTensorAsync(x, new Float32Array(24).fill(1));
  await backend.setTensorAsync(first.w, new Float32Array(32).fill(1));
  await backend.setTensorAsync(second.w, new Float32Array(32).fill(2));
  assert.equal(first.graph.hash, second.graph.hash, "the structures are the same");
  assert.notEqual(first.graph.identity(), second.graph.identity(), "the placements are not");
  using plan = backend.graphPlanCreate(first.graph);
  assert.throws(() => backend.graphPlanCompute(plan, second.graph), StalePlanError);
  backend.graphPlanCompute(plan, first.graph);
  assert.deepEqual(Array.from(await backend.getTensorAsync(first.y)), new Array(12).fill(8));
  using secondPlan = backend.graphPlanCreate(second.graph);
  backend.graphPlanCompute(secondPlan, second.graph);
  assert.deepEqual(Array.from(await backend.getTensorAsync(second.y)), new Array(12).fill(16));
}

/** After unplace() (and a new placement) an old plan must not compute from the old address. */
export async function unplacedTensor(backend: Backend): Promise<void> {
  const ctx = new Context();
  const x = ctx.newTensor("f32", [8, 3], "x");
  const { graph, w, y } = product(ctx, x, "w");
  using memory = allocTensors(backend, [x, w, y]);
  using plan = backend.graphPlanCreate(graph);
  backend.graphPlanCompute(plan);
  w.unplace();
  assert.throws(() => backend.graphPlanCompute(plan), (error: unknown) => {
    return error instanceof StalePlanError && /w .*unplaced since the plan was made/.test(
      (error as Error).message,
    );
  });
  using other = backend.allocBuffer(memory.size);
  w.place(other, 0);
  assert.throws(() => backend.graphPlanCompute(plan), /w .*moved since the plan was made/);
  // A new plan over the new placement computes from it.
  await backend.setTensorAsync(x, new Float32Array(24).fill(1));
  await backend.setTensorAsync(w, new Float32Array(32).fill(3));
  using fresh = backend.graphPlanCreate(graph);
  backend.graphPlanCompute(fresh);
  assert.deepEqual(Array.from(await backend.getTensorAsync(y)), new Array(12).fill(24));
  w.unplace();
}
