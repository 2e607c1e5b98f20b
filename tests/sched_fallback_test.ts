/**
 * The scheduler's supportsOp fallback (issue 16, item 3): in a graph whose nodes a preferred
 * backend computes, one op it lacks runs on the CPU instead, with copies across both ways, the
 * rest stays where it was, the result equals a CPU-only run, and the schedule's report and
 * explanation name the fallback and the backend that lacks the op. Once with a CPU backend that
 * refuses topK standing in for an accelerator (runs everywhere), once with WebGPU (skipped,
 * visibly, without an adapter) told to refuse topK for the test.
 */

import assert from "node:assert/strict";
import { closeSharedWebGpuTest, sharedWebGpu } from "./gpu.ts";
import {
  add,
  allocTensors,
  arange,
  type Backend,
  Context,
  CpuBackend,
  getRows,
  Graph,
  Op,
  scale,
  Schedule,
  type Tensor,
  type TensorData,
  topK,
} from "../mod.ts";
import { Rng } from "./reference.ts";

/** A CPU backend that lacks topK: the preferred backend of the CPU-only case. */
class NoTopKCpu extends CpuBackend {
  override supportsOp(tensor: Tensor): boolean {
    return tensor.op !== Op.topK && super.supportsOp(tensor);
  }
}

interface Case {
  ctx: Context;
  x: Tensor;
  table: Tensor;
  bias: Tensor;
  picks: Tensor;
  out: Tensor;
}

/** x -> scale -> topK -> getRows(table) -> add(bias): topK in the middle of the chain. */
function buildCase(): Case {
  const ctx = new Context();
  const x = ctx.newTensor("f32", [37], "x");
  const table = ctx.newTensor("f32", [16, 37], "table");
  const bias = ctx.newTensor("f32", [16, 5], "bias");
  const picks = topK(scale(x, 1.5), 5); // [5] i32
  const rows = getRows(table, picks); // [16, 5]
  const out = add(rows, bias);
  return { ctx, x, table, bias, picks, out };
}

function data(seed: number): Float32Array[] {
  const rng = new Rng(seed);
  return [rng.f32(37), rng.f32(16 * 37), rng.f32(16 * 5)];
}

function setInputs(backend: Backend, c: Case, values: Float32Array[]): void {
  [c.x, c.table, c.bias].forEach((t, i) => backend.setTensor(t, values[i]!));
}

/** The CPU-only result. */
function cpuOnly(values: Float32Array[]): TensorData {
  using cpu = new CpuBackend({ threads: 1 });
  const c = buildCase();
  const graph = Graph.build(c.out);
  using _m = allocTensors(cpu, [...c.ctx.tensors, ...graph.nodes]);
  setInputs(cpu, c, values);
  cpu.graphCompute(graph);
  return cpu.getTensor(c.out);
}

/** Schedules the case with every input on `preferred` and checks the fallback. */
async function checkFallback(preferred: Backend, cpu: CpuBackend): Promise<void> {
  const values = data(11);
  const expected = cpuOnly(values);
  const c = buildCase();
  using _inputs = allocTensors(preferred, c.ctx.tensors);
  setInputs(preferred, c, values);
  using schedule = Schedule.create(Graph.build(c.out), { backends: [preferred, cpu] });
  // topK runs on the CPU, the rest on the preferred backend: three splits, copies both ways.
  const topKNode = schedule.graph.nodes.find((n) => n.op === Op.topK)!;
  const assigned = schedule.assignment.get(topKNode)!;
  assert.equal(assigned.backend, cpu);
  assert.equal(assigned.reason, "fallback: a preferred backend lacks the op");
  assert.deepEqual(assigned.lacking, [preferred]);
  for (const n of schedule.graph.nodes) {
    if (n.op !== Op.topK) assert.equal(schedule.assignment.get(n)!.backend, preferred, n.label);
  }
  assert.deepEqual(schedule.splits.map((s) => s.backend), [preferred, cpu, preferred]);
  assert.equal(schedule.splits[1]!.inputs.length, 1, "the scaled x crosses to the CPU");
  assert.equal(schedule.splits[1]!.inputs[0]!.copy.nbytes, 37 * 4);
  assert.equal(schedule.splits[2]!.inputs.length, 1, "topK's indices cross back");
  assert.equal(schedule.splits[2]!.inputs[0]!.copy.nbytes, 5 * 4);
  const report = schedule.report();
  assert.match(
    report,
    new RegExp(`fallback: topK .* runs on ${cpu.name}: ${preferred.name} lacks it`),
    report,
  );
  assert.match(
    schedule.explain(),
    new RegExp(
      `topK .*: ${cpu.name} \\(fallback: a preferred backend lacks the op: ` +
        `${preferred.name} lacks it\\)`,
    ),
  );
  const stats = await schedule.compute();
  assert.equal(stats.bytesCopied, (37 + 5) * 4);
  // The moved ops are exact and scale/add one f32 rounding each: equal bits everywhere.
  assert.deepEqual(await schedule.getOutput(c.out), expected);
}

Deno.test("an op the preferred backend lacks runs on the CPU, copies both ways, report says so", async () => {
  using preferred = new NoTopKCpu({ threads: 1, name: "accel" });
  using cpu = new CpuBackend({ threads: 2, name: "cpu" });
  assert.equal(preferred.supportsOp(buildCase().picks), false);
  await checkFallback(preferred, cpu);
});

const gpu = await sharedWebGpu();

Deno.test({
  name: "webgpu: a graph with an op WebGPU is made to lack runs it on the CPU, the rest on WebGPU",
  ignore: gpu === null,
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const device = gpu!;
    using cpu = new CpuBackend({ threads: 2 });
    // WebGPU has every op of this graph; for the test it refuses topK. The shared backend is
    // one object (buffers know it by identity), so its method is replaced, then restored.
    const original = device.supportsOp.bind(device);
    assert.ok(original(buildCase().picks), "WebGPU does have topK");
    device.supportsOp = (t: Tensor): boolean => t.op !== Op.topK && original(t);
    try {
      await checkFallback(device, cpu);
    } finally {
      delete (device as { supportsOp?: unknown }).supportsOp;
    }
    assert.ok(device.supportsOp(buildCase().picks));
  },
});

/** A CPU backend that lacks add. */
class NoAddCpu extends CpuBackend {
  override supportsOp(tensor: Tensor): boolean {
    return tensor.op !== Op.add && super.supportsOp(tensor);
  }
}

Deno.test("a sourceless op (arange) is computed, not taken for an input, and crosses as a result", async () => {
  using preferred = new NoAddCpu({ threads: 1, name: "accel" });
  using cpu = new CpuBackend({ threads: 1, name: "cpu" });
  const ctx = new Context();
  const x = ctx.newTensor("f32", [5], "x");
  const out = add(x, arange(0, 5, 1));
  using _x = allocTensors(preferred, [x]);
  preferred.setTensor(x, new Float32Array([10, 20, 30, 40, 50]));
  using schedule = Schedule.create(Graph.build(out), { backends: [preferred, cpu] });
  // arange runs on the preferred backend; add falls back to the CPU and copies both inputs.
  assert.deepEqual(schedule.splits.map((s) => s.backend), [preferred, cpu]);
  assert.equal(schedule.splits[1]!.inputs.length, 2);
  assert.match(schedule.report(), /fallback: add .* runs on cpu: accel lacks it/);
  for (let run = 0; run < 2; run++) {
    await schedule.compute();
    assert.deepEqual(await schedule.getOutput(out), new Float32Array([10, 21, 32, 43, 54]));
  }
});

closeSharedWebGpuTest();
