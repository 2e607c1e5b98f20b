/** The backend interface: buffer types, weights over several buffers, required supportsOp. */

import assert from "node:assert/strict";
import {
  add,
  allocTensors,
  allocWeights,
  ArgumentError,
  type Backend,
  Context,
  CpuBackend,
  Graph,
  liveAllocations,
  mulMat,
  PlacementError,
  WasmBackend,
} from "../mod.ts";
import { assertNothingLive } from "./leaks.ts";
import { checkReadInto } from "./read_into.ts";

const baseline = liveAllocations();

Deno.test("the CPU buffer type: host memory, 64-byte alignment, a maximum size", () => {
  using cpu = new CpuBackend({ threads: 1, maxBufferSize: 1 << 20 });
  const type = cpu.bufferType;
  assert.equal(type.name, "cpu");
  assert.equal(type.alignment, 64);
  assert.equal(type.hostVisible, true);
  assert.equal(type.maxSize, 1 << 20);
  const t = new Context().newTensor("f32", [7, 3]);
  assert.equal(type.allocSize(t), 84);
  assert.throws(() => cpu.allocBuffer((1 << 20) + 1), ArgumentError);
  assert.throws(() => new CpuBackend({ maxBufferSize: 2 ** 60 }), ArgumentError);
});

Deno.test("weights larger than one buffer span several, each tensor whole", () => {
  // A model of 5 x 384 KiB on a backend whose buffers stop at 1 MiB: 3 buffers (2 + 2 + 1).
  using cpu = new CpuBackend({ threads: 1, maxBufferSize: 1 << 20 });
  const ctx = new Context();
  const weights = Array.from({ length: 5 }, (_, i) => ctx.newTensor("f32", [384, 256], `w${i}`));
  assert.throws(() => allocTensors(cpu, weights), PlacementError, "one buffer cannot hold them");
  using set = allocWeights(cpu, weights);
  assert.equal(set.buffers.length, 3);
  for (const w of weights) {
    const where = w.placement!;
    assert.ok(set.buffers.includes(where.buffer));
    assert.ok(where.offset + w.nbytes <= where.buffer.size, `${w.label} lies in one buffer`);
  }
  // Graphs compute across them: each product reads its weight from its own buffer.
  const x = ctx.newTensor("f32", [384, 2], "x");
  const outs = weights.map((w) => mulMat(w, x));
  const total = outs.slice(1).reduce((sum, o) => add(sum, o), outs[0]!);
  const graph = Graph.build(total);
  using _memory = allocTensors(cpu, [x, ...graph.nodes]);
  weights.forEach((w, i) => cpu.setTensor(w, new Float32Array(384 * 256).fill(i + 1)));
  cpu.setTensor(x, new Float32Array(768).fill(1));
  cpu.graphCompute(graph);
  assert.equal(cpu.getTensor(total)[0], 384 * (1 + 2 + 3 + 4 + 5));
});

Deno.test("a tensor larger than the buffer type allows is named; nothing stays allocated", () => {
  using cpu = new CpuBackend({ threads: 1, maxBufferSize: 1 << 16 });
  const ctx = new Context();
  const small = ctx.newTensor("f32", [1024], "small");
  const huge = ctx.newTensor("f32", [1 << 15], "huge");
  assert.throws(() => allocWeights(cpu, [small, huge]), /huge .* more than one cpu buffer holds/);
  assert.equal(small.placement, null);
  assert.equal(liveAllocations().buffers, baseline.buffers);
});

Deno.test("every backend answers supportsOp (the interface requires it)", () => {
  using cpu = new CpuBackend({ threads: 1 });
  const backend: Backend = cpu;
  const ctx = new Context();
  const y = mulMat(ctx.newTensor("f32", [4, 3]), ctx.newTensor("f32", [4, 2]));
  assert.equal(backend.supportsOp(y), true);
});

Deno.test("getTensorIntoAsync reads into the caller's array on the CPU and WASM backends", async () => {
  using cpu = new CpuBackend({ threads: 2 });
  await checkReadInto(cpu);
  using wasm = await WasmBackend.create();
  await checkReadInto(wasm);
});

Deno.test("backend interface: nothing native is left alive", () => assertNothingLive(baseline));
