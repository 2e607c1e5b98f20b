/**
 * No call order crashes the process: disposing buffers, plans and backends while an
 * asynchronous compute uses them, handles that come back after many cycles, an uncaught
 * exception while a compute runs.
 */

import assert from "node:assert/strict";
import {
  allocTensors,
  BusyError,
  Context,
  CpuBackend,
  DisposedError,
  Graph,
  liveAllocations,
  mulMat,
  StalePlanError,
  type Tensor,
} from "../mod.ts";
import { assertNothingLive } from "./leaks.ts";
import { denoEval } from "./child.ts";

// Loads the library outside any test, so its resource is not reported as a test's leak.
const baseline = liveAllocations();

/** A matrix product big enough that an async compute of it is still running a tick later. */
function bigProduct(n = 768): { graph: Graph; w: Tensor; x: Tensor; y: Tensor } {
  const ctx = new Context();
  const w = ctx.newTensor("f32", [n, n], "w");
  const x = ctx.newTensor("f32", [n, n], "x");
  const y = mulMat(w, x);
  return { graph: Graph.build(y), w, x, y };
}

const tick = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 0));

Deno.test("a buffer disposed while a compute writes it: BusyError, and it stays usable", async () => {
  using cpu = new CpuBackend({ threads: 1 });
  const { graph, w, x, y } = bigProduct();
  const buffer = allocTensors(cpu, [w, x, y]);
  cpu.setTensor(w, new Float32Array(768 * 768).fill(1));
  cpu.setTensor(x, new Float32Array(768 * 768).fill(2));
  using plan = cpu.graphPlanCreate(graph);
  const computing = cpu.graphPlanComputeAsync(plan);
  await tick(); // the compute is on its worker now (or done)
  let refused = false;
  try {
    buffer.dispose();
  } catch (error) {
    assert.ok(error instanceof BusyError, String(error));
    refused = true;
  }
  await computing;
  if (refused) {
    assert.equal(buffer.disposed, false);
    assert.equal(cpu.getTensor(y)[0], 1536);
    buffer.dispose();
  }
  assert.equal(buffer.disposed, true);
});

Deno.test("a buffer disposed before a queued compute runs: the compute rejects, no signal", async () => {
  using cpu = new CpuBackend({ threads: 1 });
  const { graph, w, x, y } = bigProduct(64);
  const buffer = allocTensors(cpu, [w, x, y]);
  using plan = cpu.graphPlanCreate(graph);
  const computing = cpu.graphPlanComputeAsync(plan);
  buffer.dispose(); // the compute has not started: nothing holds the buffer yet
  await assert.rejects(computing, StalePlanError);
});

Deno.test("a plan disposed right after its async compute was asked for: DisposedError, freed", async () => {
  using cpu = new CpuBackend({ threads: 1 });
  const { graph, w, x, y } = bigProduct(64);
  using _buffer = allocTensors(cpu, [w, x, y]);
  for (let round = 0; round < 50; round++) {
    const plan = cpu.graphPlanCreate(graph);
    const computing = cpu.graphPlanComputeAsync(plan);
    plan.dispose(); // before the queued compute starts: freed now, the compute rejects
    assert.equal(plan.disposed, true);
    await assert.rejects(computing, DisposedError);
  }
  assert.equal(liveAllocations().plans, 0, "every plan was freed (the old code leaked them)");
});

Deno.test("a plan disposed while it computes: BusyError, then it frees after the compute", async () => {
  using cpu = new CpuBackend({ threads: 1 });
  const { graph, w, x, y } = bigProduct();
  using _buffer = allocTensors(cpu, [w, x, y]);
  const plan = cpu.graphPlanCreate(graph);
  const computing = cpu.graphPlanComputeAsync(plan);
  await tick();
  let refused = false;
  try {
    plan.dispose();
  } catch (error) {
    assert.ok(error instanceof BusyError, String(error));
    refused = true;
  }
  await computing;
  if (refused) plan.dispose();
  assert.equal(plan.disposed, true);
});

Deno.test("a backend disposed with async work in flight: BusyError, nothing torn down", async () => {
  const cpu = new CpuBackend({ threads: 2 });
  const { graph, w, x, y } = bigProduct(128);
  using _buffer = allocTensors(cpu, [w, x, y]);
  using plan = cpu.graphPlanCreate(graph);
  const computing = cpu.graphPlanComputeAsync(plan);
  assert.throws(() => cpu.dispose(), BusyError);
  assert.throws(() => cpu.setThreads(1), BusyError);
  await computing;
  assert.equal(cpu.disposed, false);
  cpu.dispose();
});

Deno.test("setThreads with a bad count leaves the pool running", () => {
  using cpu = new CpuBackend({ threads: 2 });
  for (const bad of [0, -1, 1.5, NaN, 65]) {
    assert.throws(() => cpu.setThreads(bad), /threads must be an integer in 1\.\.64/);
    assert.equal(cpu.threads, 2);
  }
  const { graph, w, x, y } = bigProduct(8);
  using _buffer = allocTensors(cpu, [w, x, y]);
  cpu.graphCompute(graph); // the old code destroyed the pool first: this failed
});

Deno.test("handles never come back: a plan over a freed buffer stays stale past 10,000 cycles", () => {
  using cpu = new CpuBackend({ threads: 1 });
  const { graph, w, x, y } = bigProduct(8);
  const buffer = allocTensors(cpu, [w, x, y]);
  using plan = cpu.graphPlanCreate(graph);
  const handle = (buffer as unknown as { handle: number }).handle;
  buffer.dispose();
  // 13-bit generations wrapped after 8,190 cycles: the freed handle came back, the plan passed
  // its check and computed on unmapped memory (SIGSEGV).
  const seen = new Set<number>();
  for (let cycle = 0; cycle < 10_000; cycle++) {
    const other = cpu.allocBuffer(64);
    const otherHandle = (other as unknown as { handle: number }).handle;
    assert.notEqual(otherHandle, handle, `cycle ${cycle} handed the freed handle out again`);
    assert.ok(!seen.has(otherHandle), `cycle ${cycle} repeated handle ${otherHandle}`);
    seen.add(otherHandle);
    other.dispose();
  }
  assert.throws(() => cpu.graphPlanCompute(plan), StalePlanError);
});

Deno.test({
  name: "an uncaught exception while a compute runs ends the process with that exception",
  ignore: Deno.permissions.querySync({ name: "run" }).state !== "granted",
  fn: async () => {
    const mod = new URL("../mod.ts", import.meta.url).href;
    const script = `
      import * as g from ${JSON.stringify(mod)};
      const cpu = new g.CpuBackend({ threads: 2 });
      const ctx = new g.Context();
      const w = ctx.newTensor("f32", [1024, 1024]);
      const x = ctx.newTensor("f32", [1024, 1024]);
      const y = g.mulMat(w, x);
      const graph = g.Graph.build(y);
      g.allocTensors(cpu, [w, x, y]);
      const plan = cpu.graphPlanCreate(graph);
      for (let i = 0; i < 4; i++) cpu.graphPlanComputeAsync(plan);
      setTimeout(() => { throw new Error("boom from the test"); }, 0);
    `;
    for (const safe of ["0", "1"]) {
      const output = await denoEval(script, { GRAFT_SAFE: safe });
      assert.equal(output.signal, null, `GRAFT_SAFE=${safe}: killed by ${output.signal}`);
      assert.equal(
        output.code,
        1,
        `GRAFT_SAFE=${safe}: exit code ${output.code}: ${output.stderr}`,
      );
      assert.match(output.stderr, /boom from the test/);
    }
  },
});

Deno.test("lifecycle: nothing native is left alive", () => assertNothingLive(baseline));
