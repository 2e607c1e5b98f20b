/**
 * The WebGPU backend's own contract: transfers (including writes that do not cover whole words),
 * plans and their checks, copies between backends, reported bad input, limits and disposal.
 * Op numerics are in backend_ops_test.ts. Skipped, visibly, when Deno finds no adapter.
 */

import assert from "node:assert/strict";
import { closeSharedWebGpuTest, sharedWebGpu } from "./gpu.ts";
import { checkReadInto } from "./read_into.ts";
import { samePlanOtherWeights, unplacedTensor } from "./plan_identity.ts";
import {
  add,
  allocTensors,
  Context,
  CpuBackend,
  DisposedError,
  getRows,
  GGUFFile,
  GraftError,
  Graph,
  mean,
  mul,
  mulMat,
  OutOfBoundsError,
  OutOfSpaceError,
  PlacementError,
  reshape,
  rmsNorm,
  scale,
  ShapeError,
  silu,
  softmax,
  StalePlanError,
  transpose,
  view,
  writeTensorsGGUF,
} from "../mod.ts";
import { WebGpuBackend } from "../src/backend/webgpu/backend.ts";
import { grid } from "../src/backend/webgpu/kernels.ts";

const gpu = await sharedWebGpu();
const cpu = new CpuBackend({ threads: 2 });
globalThis.addEventListener("unload", () => {
  cpu.dispose();
});

function test(name: string, fn: (gpu: WebGpuBackend) => Promise<void> | void): void {
  Deno.test({
    name: `webgpu: ${name}`,
    ignore: gpu === null,
    sanitizeResources: false,
    sanitizeOps: false,
    fn: () => fn(gpu!),
  });
}

test("getTensorIntoAsync reads into the caller's array", (gpu) => checkReadInto(gpu));

test("reports its name, adapter and storage alignment", (gpu) => {
  assert.equal(gpu.name, "webgpu");
  assert.equal(gpu.alignment, gpu.device.limits.minStorageBufferOffsetAlignment);
  console.log(`webgpu adapter: ${gpu.adapterInfo.description || gpu.adapterInfo.vendor}`);
  using buffer = gpu.allocBuffer(10);
  assert.equal(buffer.size, 10);
  assert.equal(buffer.alignment, gpu.alignment);
});

test("places tensors at aligned offsets", (gpu) => {
  const ctx = new Context();
  const tensors = [ctx.newTensor("f16", [3]), ctx.newTensor("f32", [5]), ctx.newTensor("i32", [1])];
  using _buffer = allocTensors(gpu, tensors);
  for (const t of tensors) assert.equal(t.placement!.offset % gpu.alignment, 0);
});

test("round-trips f32, f16 and i32 data, odd lengths included", async (gpu) => {
  const ctx = new Context();
  const f32 = ctx.newTensor("f32", [7]);
  const f16 = ctx.newTensor("f16", [5]);
  const i32 = ctx.newTensor("i32", [3]);
  using _buffer = allocTensors(gpu, ctx.tensors);
  gpu.setTensor(f32, new Float32Array([1, -2, 3.5, 4, 5, 6, 7]));
  gpu.setTensor(f16, new Float16Array([0.5, 1, 1.5, 2, -65504]));
  await gpu.setTensorAsync(i32, new Int32Array([-1, 0, 2 ** 31 - 1]));
  assert.deepEqual(await gpu.getTensorAsync(f32), new Float32Array([1, -2, 3.5, 4, 5, 6, 7]));
  assert.deepEqual(await gpu.getTensorAsync(f16), new Float16Array([0.5, 1, 1.5, 2, -65504]));
  assert.deepEqual(await gpu.getTensorAsync(i32), new Int32Array([-1, 0, 2 ** 31 - 1]));
});

test("partial writes and reads keep the bytes around them", async (gpu) => {
  const ctx = new Context();
  const t = ctx.newTensor("f16", [9]);
  using _buffer = allocTensors(gpu, [t]);
  gpu.setTensor(t, new Float16Array([1, 2, 3, 4, 5, 6, 7, 8, 9]));
  // Element 1 alone: half of a word, patched on the device.
  gpu.setTensor(t, new Float16Array([-2]), 2);
  // Elements 3..5: a half word, a whole word.
  gpu.setTensor(t, new Float16Array([-4, -5, -6]), 6);
  assert.deepEqual(
    await gpu.getTensorAsync(t),
    new Float16Array([1, -2, 3, -4, -5, -6, 7, 8, 9]),
  );
  assert.deepEqual(await gpu.getTensorAsync(t, 2, 6), new Float16Array([-2, 3, -4]));
});

test("getTensor is refused: reads are asynchronous", (gpu) => {
  const ctx = new Context();
  const t = ctx.newTensor("f32", [4]);
  using _buffer = allocTensors(gpu, [t]);
  assert.throws(() => gpu.getTensor(t), (e: unknown) => {
    return e instanceof GraftError && /getTensorAsync/.test(e.message);
  });
});

test("rejects out-of-range transfers and tensors of other backends", async (gpu) => {
  const ctx = new Context();
  const t = ctx.newTensor("f32", [4]);
  const onCpu = ctx.newTensor("f32", [4]);
  const unplaced = ctx.newTensor("f32", [4]);
  using _buffer = allocTensors(gpu, [t]);
  using _cpuBuffer = allocTensors(cpu, [onCpu]);
  assert.throws(() => gpu.setTensor(t, new Float32Array(5)), OutOfBoundsError);
  assert.throws(() => gpu.setTensor(t, new Float32Array(1), 14), OutOfBoundsError);
  await assert.rejects(gpu.getTensorAsync(t, 0, 20), OutOfBoundsError);
  assert.throws(() => gpu.setTensor(onCpu, new Float32Array(4)), PlacementError);
  assert.throws(() => gpu.setTensor(unplaced, new Float32Array(4)), PlacementError);
  await assert.rejects(gpu.setTensorAsync(onCpu, new Float32Array(4)), PlacementError);
});

test("a plan computes again with new inputs and checks its graph", async (gpu) => {
  const ctx = new Context();
  const a = ctx.newTensor("f32", [3]);
  const b = ctx.newTensor("f32", [3]);
  const graph = Graph.build(mul(add(a, b), b));
  using _buffer = allocTensors(gpu, [...ctx.tensors, ...graph.nodes]);
  using plan = gpu.graphPlanCreate(graph);
  assert.ok(plan.workSize > 0);
  for (const k of [1, 2, 3]) {
    gpu.setTensor(a, new Float32Array([k, 2 * k, 3 * k]));
    gpu.setTensor(b, new Float32Array([2, 2, 2]));
    gpu.graphPlanCompute(plan, graph);
    assert.deepEqual(
      await gpu.getTensorAsync(graph.outputs[0]!),
      new Float32Array([(k + 2) * 2, (2 * k + 2) * 2, (3 * k + 2) * 2]),
    );
  }
  const other = Graph.build(add(a, a));
  using _more = allocTensors(gpu, other.nodes);
  assert.throws(() => gpu.graphPlanCompute(plan, other), StalePlanError);
  const onCpu = new Context().newTensor("f32", [3]);
  const cpuGraph = Graph.build(add(onCpu, onCpu));
  using _cpuBuffer = allocTensors(cpu, [onCpu, ...cpuGraph.nodes]);
  using cpuPlan = cpu.graphPlanCreate(cpuGraph);
  assert.throws(() => gpu.graphPlanCompute(cpuPlan), StalePlanError);
});

test("freed plans and plans over disposed buffers are refused", (gpu) => {
  const ctx = new Context();
  const a = ctx.newTensor("f32", [3]);
  const graph = Graph.build(add(a, a));
  const buffer = allocTensors(gpu, [...ctx.tensors, ...graph.nodes]);
  const plan = gpu.graphPlanCreate(graph);
  gpu.graphPlanFree(plan);
  assert.throws(() => gpu.graphPlanCompute(plan), DisposedError);
  assert.throws(() => plan.dispose(), DisposedError);
  const again = gpu.graphPlanCreate(graph);
  buffer.dispose();
  assert.throws(() => gpu.graphPlanCompute(again), StalePlanError);
  assert.throws(() => buffer.dispose(), DisposedError);
  again.dispose();
});

test("views are free: a plan dispatches only compute nodes", async (gpu) => {
  const ctx = new Context();
  const x = ctx.newTensor("f32", [4, 6]);
  const y = add(transpose(x), reshape(view(x, [24], {}), [6, 4]));
  const graph = Graph.build(y);
  using _buffer = allocTensors(gpu, [...ctx.tensors, ...graph.nodes]);
  using plan = gpu.graphPlanCreate(graph);
  assert.equal(plan.nodeCount, 1);
  const data = Float32Array.from({ length: 24 }, (_, i) => i);
  gpu.setTensor(x, data);
  gpu.graphPlanCompute(plan);
  const out = await gpu.getTensorAsync(y);
  // out[i0, i1] = x[i1, i0] + x_flat[i1 * 6 + i0], x[i, j] at j * 4 + i.
  for (let i1 = 0; i1 < 4; i1++) {
    for (let i0 = 0; i0 < 6; i0++) {
      assert.equal(out[i1 * 6 + i0], data[i0 * 4 + i1]! + data[i1 * 6 + i0]!);
    }
  }
});

test("copies tensors to and from the CPU and within the device", async (gpu) => {
  const ctx = new Context();
  const [g1, g2, c1, c2] = [0, 1, 2, 3].map(() => ctx.newTensor("f32", [5, 3]));
  using _g = allocTensors(gpu, [g1!, g2!]);
  using _c = allocTensors(cpu, [c1!, c2!]);
  const data = Float32Array.from({ length: 15 }, (_, i) => i * 1.5 - 4);
  cpu.setTensor(c1!, data);
  await gpu.cpyTensorFrom(c1!, g1!); // cpu -> webgpu
  await gpu.cpyTensorTo(g1!, g2!); // webgpu -> webgpu, copyBufferToBuffer
  await gpu.cpyTensorTo(g2!, c2!); // webgpu -> cpu
  assert.deepEqual(cpu.getTensor(c2!), data);
  await cpu.cpyTensorTo(c2!, g1!); // the CPU backend's side of the same copy
  await cpu.cpyTensorFrom(g1!, c1!);
  assert.deepEqual(cpu.getTensor(c1!), data);
});

test("copies odd-length f16 tensors within the device", async (gpu) => {
  const ctx = new Context();
  const a = ctx.newTensor("f16", [7]);
  const b = ctx.newTensor("f16", [7]);
  using _buffer = allocTensors(gpu, ctx.tensors);
  gpu.setTensor(a, new Float16Array([1, 2, 3, 4, 5, 6, 7]));
  await gpu.cpyTensorFrom(a, b);
  assert.deepEqual(await gpu.getTensorAsync(b), new Float16Array([1, 2, 3, 4, 5, 6, 7]));
});

test("tensor copies need the same layout and placed tensors", async (gpu) => {
  const ctx = new Context();
  const a = ctx.newTensor("f32", [4, 3]);
  const b = ctx.newTensor("f32", [3, 4]);
  const h = ctx.newTensor("f16", [4, 3]);
  const unplaced = ctx.newTensor("f32", [4, 3]);
  using _buffer = allocTensors(gpu, [a, b, h]);
  assert.throws(() => gpu.cpyTensorFrom(a, b), ShapeError);
  assert.throws(() => gpu.cpyTensorTo(a, h), ShapeError);
  assert.throws(() => gpu.cpyTensorTo(transpose(b), a), ShapeError);
  await assert.rejects(gpu.cpyTensorFrom(unplaced, a), PlacementError);
  await assert.rejects(gpu.cpyTensorTo(a, unplaced), PlacementError);
});

test("a getRows index out of range is reported by synchronize", async (gpu) => {
  const ctx = new Context();
  const table = ctx.newTensor("f32", [2, 3]);
  const indices = ctx.newTensor("i32", [2]);
  const rows = getRows(table, indices);
  const graph = Graph.build(rows);
  using _buffer = allocTensors(gpu, [...ctx.tensors, ...graph.nodes]);
  gpu.setTensor(table, new Float32Array([1, 2, 3, 4, 5, 6]));
  gpu.setTensor(indices, new Int32Array([2, 3]));
  gpu.graphCompute(graph);
  await assert.rejects(gpu.synchronize(), OutOfBoundsError);
  await gpu.synchronize(); // the report is cleared
  gpu.setTensor(indices, new Int32Array([2, 0]));
  gpu.graphCompute(graph);
  assert.deepEqual(await gpu.getTensorAsync(rows), new Float32Array([5, 6, 1, 2]));
});

test("row kernels fold grids wider than 65535 workgroups", async (gpu) => {
  assert.deepEqual(grid(70000, "test"), [65535, 2, 1]);
  const ctx = new Context();
  const x = ctx.newTensor("f32", [2, 70001]);
  const graph = Graph.build(mean(x));
  using _buffer = allocTensors(gpu, [x, ...graph.nodes]);
  const data = Float32Array.from({ length: 2 * 70001 }, (_, i) => i % 7);
  gpu.setTensor(x, data);
  gpu.graphCompute(graph);
  const out = await gpu.getTensorAsync(graph.outputs[0]!);
  for (const row of [0, 1, 65535, 65536, 70000]) {
    assert.equal(out[row], (data[2 * row]! + data[2 * row + 1]!) / 2);
  }
});

test("a block of several ops matches the CPU backend", async (gpu) => {
  const build = (backend: CpuBackend | WebGpuBackend): Promise<Float32Array> => {
    const ctx = new Context();
    const w = ctx.newTensor("f16", [48, 40]);
    const x = ctx.newTensor("f32", [48, 9]);
    const mask = ctx.newTensor("f32", [40, 9]);
    const h = softmax(mulMat(w, rmsNorm(x)), { mask, scale: 0.3 });
    const y = silu(mulMat(transpose(h), transpose(h)));
    const graph = Graph.build(y);
    const buffer = allocTensors(backend, [...ctx.tensors, ...graph.nodes]);
    backend.setTensor(w, Float16Array.from({ length: 48 * 40 }, (_, i) => Math.sin(i) * 0.5));
    backend.setTensor(x, Float32Array.from({ length: 48 * 9 }, (_, i) => Math.cos(i * 0.7)));
    backend.setTensor(
      mask,
      Float32Array.from({ length: 40 * 9 }, (_, i) => (i % 40 > 30 + (i / 40 | 0) ? -Infinity : 0)),
    );
    backend.graphCompute(graph);
    return backend.getTensorAsync(y).then((r) => {
      buffer.dispose();
      return r as Float32Array;
    });
  };
  const [expected, actual] = [await build(cpu), await build(gpu)];
  for (let i = 0; i < expected.length; i++) {
    assert.ok(Math.abs(actual[i]! - expected[i]!) <= 1e-5 * (1 + Math.abs(expected[i]!)));
  }
});

test("buffer sizes beyond the device limit are refused", (gpu) => {
  assert.throws(() => gpu.allocBuffer(gpu.device.limits.maxBufferSize + 4), OutOfSpaceError);
  assert.throws(() => gpu.allocBuffer(0), GraftError);
});

test("disposal: twice is an error, use after dispose is refused", (gpu) => {
  // A backend over the shared device: a second device per process is what made Deno abort
  // at exit now and then (see tests/gpu.ts), and disposing this one leaves the device alive.
  const own = WebGpuBackend.fromDevice(gpu.device, gpu.adapterInfo);
  const buffer = own.allocBuffer(64);
  buffer.dispose();
  assert.throws(() => buffer.dispose(), DisposedError);
  own.dispose();
  assert.throws(() => own.dispose(), DisposedError);
  assert.throws(() => own.allocBuffer(64), DisposedError);
  using alive = gpu.allocBuffer(4); // the shared backend is untouched
  assert.equal(alive.disposed, false);
});

test("a plan for mulMat(w1, x) refuses mulMat(w2, x) of the same shapes", (gpu) =>
  samePlanOtherWeights(gpu));

test("after unplace() or a new placement an old plan is stale", (gpu) => unplacedTensor(gpu));

test("the buffer type and supportsOp say what the device takes", (gpu) => {
  assert.equal(gpu.bufferType.hostVisible, false);
  assert.equal(gpu.bufferType.maxSize, gpu.device.limits.maxBufferSize);
  const ctx = new Context();
  const a = ctx.newTensor("f32", [8, 4]);
  assert.equal(gpu.supportsOp(mulMat(a, ctx.newTensor("f32", [8, 2]))), true);
  assert.equal(gpu.supportsOp(transpose(a)), true, "views need no kernel");
  // An operand past the device's binding limit cannot be bound: the scheduler must fall back.
  const limit = gpu.device.limits.maxStorageBufferBindingSize;
  const rows = Math.ceil(limit / (4 * 1024)) + 1;
  const big = ctx.newTensor("f32", [1024, rows]);
  assert.equal(gpu.supportsOp(scale(big, 2)), false);
});

test("writeTensorsGGUF reads tensors from device buffers into a GGUF file", async (gpu) => {
  const ctx = new Context();
  const w = ctx.newTensor("f32", [64, 3], "w");
  const h = ctx.newTensor("f16", [33], "h"); // odd byte count: not whole words
  using _memory = allocTensors(gpu, [w, h]);
  const values = Float32Array.from({ length: 192 }, (_, i) => i / 3 - 7);
  const halves = Float16Array.from({ length: 33 }, (_, i) => i - 0.5);
  gpu.setTensor(w, values);
  gpu.setTensor(h, halves);
  const path = await Deno.makeTempFile({ suffix: ".gguf" });
  try {
    await writeTensorsGGUF(path, { tensors: [w, h] });
    using file = GGUFFile.open(path);
    assert.deepEqual(file.dequantizeTensor(file.tensor("w")), values);
    assert.deepEqual(file.readTensorData(file.tensor("h")), new Uint8Array(halves.buffer));
  } finally {
    await Deno.remove(path);
  }
});

closeSharedWebGpuTest();
