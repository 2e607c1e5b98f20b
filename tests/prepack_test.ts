// Prepacked weights (`graphPlanCreate(graph, { prepackWeights: true })`): results bitwise equal
// to a plan that packs on every compute, a weight written after a compute is packed again before
// the next, and a weight the graph itself writes is never prepacked.
import assert from "node:assert/strict";
import {
  allocGraph,
  allocTensors,
  Context,
  CpuBackend,
  cpy,
  Graph,
  liveAllocations,
  mulMat,
  permute,
  silu,
  type Tensor,
  type TensorDType,
} from "../mod.ts";
import { blockData, buildBlock, DEFAULT_BLOCK, setBlockInputs } from "../demo/block.ts";
import { assertNothingLive } from "./leaks.ts";

// Loads the library outside any test, so its resource is not reported as a test's leak.
const baseline = liveAllocations();

const THREADS = [1, 2, 3];

/** Deterministic values in [-1, 1): f32, or f16 bit patterns of magnitudes in [2^-5, 2). */
function values(dtype: TensorDType, count: number, seed: number): ArrayBufferView {
  let state = seed >>> 0 || 1;
  const next = (): number => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return (state >>> 0) / 2 ** 32;
  };
  if (dtype === "f16") {
    const out = new Uint16Array(count);
    for (let i = 0; i < count; i++) {
      const sign = next() < 0.5 ? 0x8000 : 0;
      const exponent = 10 + Math.floor(next() * 6);
      out[i] = sign | (exponent << 10) | Math.floor(next() * 1024);
    }
    return out;
  }
  const out = new Float32Array(count);
  for (let i = 0; i < count; i++) out[i] = next() * 2 - 1;
  return out;
}

function bits(data: ArrayBufferView): Uint8Array {
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

/** The output of `graph` computed twice by a plain plan and twice by a prepacking plan. */
function computeBoth(cpu: CpuBackend, graph: Graph, output: Tensor): [Uint8Array, Uint8Array] {
  using plain = cpu.graphPlanCreate(graph);
  cpu.graphPlanCompute(plain);
  const want = bits(cpu.getTensor(output));
  using prepacked = cpu.graphPlanCreate(graph, { prepackWeights: true });
  cpu.graphPlanCompute(prepacked);
  const first = bits(cpu.getTensor(output));
  cpu.graphPlanCompute(prepacked);
  const second = bits(cpu.getTensor(output));
  assert.deepEqual(second, first, "a packed compute differs from the packing one");
  return [want, first];
}

Deno.test("a prepacked demo block is bitwise the plain plan's", () => {
  for (const threads of THREADS) {
    using cpu = new CpuBackend({ threads });
    const block = buildBlock(DEFAULT_BLOCK);
    const data = blockData(DEFAULT_BLOCK);
    using _weights = allocTensors(cpu, block.ctx.tensors);
    using _activations = allocGraph(cpu, block.graph);
    setBlockInputs(block, data);
    using plan = cpu.graphPlanCreate(block.graph, { prepackWeights: true });
    assert.ok(plan.prepacked.length > 0, "the block's weights are prepacked");
    plan.dispose();
    const [want, got] = computeBoth(cpu, block.graph, block.output);
    assert.deepEqual(got, want, `threads ${threads}`);
  }
});

interface Product {
  ctx: Context;
  w: Tensor;
  x: Tensor;
  y: Tensor;
  graph: Graph;
}

/** y = silu(w x) with w [k, m] (or its transpose when `transposed`), x [k, n, batches]. */
function product(
  dtype: TensorDType,
  k: number,
  m: number,
  n: number,
  batches = 1,
  transposed = false,
): Product {
  const ctx = new Context();
  const w = transposed ? ctx.newTensor(dtype, [m, k]) : ctx.newTensor(dtype, [k, m]);
  const x = ctx.newTensor("f32", [k, n, batches]);
  const weight = transposed ? permute(w, [1, 0, 2, 3]) : w;
  const y = silu(mulMat(weight, x));
  return { ctx, w, x, y, graph: Graph.build(y) };
}

Deno.test("prepacked odd shapes, f32 and f16 weights, are bitwise the plain plan's", () => {
  const shapes: [number, number, number, number, boolean][] = [
    [300, 70, 37, 1, false],
    [33, 17, 65, 1, false],
    [257, 129, 13, 1, true], // a transposed weight: packed from columns
    [100, 45, 70, 3, false], // batches of x share one weight
    [513, 100, 2, 1, false], // two columns: the dot path, not packed
  ];
  for (const threads of THREADS) {
    using cpu = new CpuBackend({ threads });
    for (const dtype of ["f32", "f16"] as const) {
      for (const [k, m, n, batches, transposed] of shapes) {
        const p = product(dtype, k, m, n, batches, transposed);
        using _inputs = allocTensors(cpu, p.ctx.tensors);
        using _nodes = allocGraph(cpu, p.graph);
        cpu.setTensor(p.w, values(dtype, k * m, k + m));
        cpu.setTensor(p.x, values("f32", k * n * batches, n));
        const [want, got] = computeBoth(cpu, p.graph, p.y);
        assert.deepEqual(got, want, `${dtype} k=${k} m=${m} n=${n} threads=${threads}`);
      }
    }
  }
});

Deno.test("a weight written after a compute is packed again before the next", async () => {
  using cpu = new CpuBackend({ threads: 2 });
  const p = product("f32", 200, 96, 48);
  using _inputs = allocTensors(cpu, p.ctx.tensors);
  using _nodes = allocGraph(cpu, p.graph);
  cpu.setTensor(p.x, values("f32", 200 * 48, 7));
  using plan = cpu.graphPlanCreate(p.graph, { prepackWeights: true });
  assert.equal(plan.prepacked.length, 1);
  using plain = cpu.graphPlanCreate(p.graph);
  const expect = (label: string): void => {
    cpu.graphPlanCompute(plan);
    const got = bits(cpu.getTensor(p.y));
    cpu.graphPlanCompute(plain);
    assert.deepEqual(got, bits(cpu.getTensor(p.y)), label);
  };
  for (let round = 0; round < 3; round++) {
    cpu.setTensor(p.w, values("f32", 200 * 96, 100 + round));
    expect(`setTensor, round ${round}`);
  }
  // The asynchronous verbs, in queue order: the compute sees the write queued before it.
  await cpu.setTensorAsync(p.w, values("f32", 200 * 96, 555));
  const pending = cpu.graphPlanComputeAsync(plan);
  await pending;
  const asyncResult = bits(cpu.getTensor(p.y));
  cpu.graphPlanCompute(plain);
  assert.deepEqual(asyncResult, bits(cpu.getTensor(p.y)), "setTensorAsync");
  // A copy into the weight from another tensor of this backend.
  const other = new Context().newTensor("f32", [200, 96]);
  using _other = allocTensors(cpu, [other]);
  cpu.setTensor(other, values("f32", 200 * 96, 999));
  await cpu.cpyTensorFrom(other, p.w);
  expect("cpyTensorFrom");
  // Memory written behind the backend's back is declared with markWritten.
  cpu.bufferOf(p.w, "test").markWritten();
  expect("markWritten");
});

Deno.test("a weight another plan writes with cpy is packed again", () => {
  using cpu = new CpuBackend({ threads: 2 });
  const p = product("f16", 128, 64, 40);
  const source = p.ctx.newTensor("f32", [128, 64]);
  const write = Graph.build(cpy(source, p.w));
  using _inputs = allocTensors(cpu, p.ctx.tensors);
  using _nodes = allocGraph(cpu, p.graph);
  cpu.setTensor(p.w, values("f16", 128 * 64, 3));
  cpu.setTensor(p.x, values("f32", 128 * 40, 4));
  using plan = cpu.graphPlanCreate(p.graph, { prepackWeights: true });
  using writer = cpu.graphPlanCreate(write);
  using plain = cpu.graphPlanCreate(p.graph);
  cpu.graphPlanCompute(plan);
  const before = bits(cpu.getTensor(p.y));
  cpu.setTensor(source, values("f32", 128 * 64, 5));
  cpu.graphPlanCompute(writer);
  cpu.graphPlanCompute(plan);
  const got = bits(cpu.getTensor(p.y));
  cpu.graphPlanCompute(plain);
  assert.deepEqual(got, bits(cpu.getTensor(p.y)));
  assert.notDeepEqual(got, before, "the new weight changed the result");
});

Deno.test("a weight the graph itself writes with cpy is not prepacked", () => {
  using cpu = new CpuBackend({ threads: 2 });
  const ctx = new Context();
  const w = ctx.newTensor("f32", [64, 48]);
  const fixed = ctx.newTensor("f32", [64, 48]);
  const source = ctx.newTensor("f32", [64, 48]);
  const x = ctx.newTensor("f32", [64, 40]);
  const written = cpy(source, w);
  // The product reads w after the copy wrote it; the other weight is constant.
  const y = mulMat(written, x);
  const z = mulMat(fixed, x);
  const graph = Graph.build(y, z);
  using _inputs = allocTensors(cpu, ctx.tensors);
  using _nodes = allocGraph(cpu, graph);
  cpu.setTensor(w, values("f32", 64 * 48, 1));
  cpu.setTensor(fixed, values("f32", 64 * 48, 2));
  cpu.setTensor(x, values("f32", 64 * 40, 3));
  using plan = cpu.graphPlanCreate(graph, { prepackWeights: true });
  assert.deepEqual(plan.prepacked, [z]);
  using plain = cpu.graphPlanCreate(graph);
  for (let round = 0; round < 3; round++) {
    cpu.setTensor(source, values("f32", 64 * 48, 10 + round));
    cpu.graphPlanCompute(plan);
    const got = [bits(cpu.getTensor(y)), bits(cpu.getTensor(z))];
    cpu.graphPlanCompute(plain);
    assert.deepEqual(got, [bits(cpu.getTensor(y)), bits(cpu.getTensor(z))], `round ${round}`);
  }
});

Deno.test("a prepacking plan counts its packed weights in live plan bytes", () => {
  using cpu = new CpuBackend({ threads: 1 });
  const p = product("f32", 256, 128, 70);
  using _inputs = allocTensors(cpu, p.ctx.tensors);
  using _nodes = allocGraph(cpu, p.graph);
  const before = liveAllocations().planBytes;
  using plain = cpu.graphPlanCreate(p.graph);
  const plainBytes = liveAllocations().planBytes - before;
  using prepacked = cpu.graphPlanCreate(p.graph, { prepackWeights: true });
  const prepackedBytes = liveAllocations().planBytes - before - plainBytes;
  assert.ok(prepackedBytes >= plainBytes + 256 * 128 * 4, `${prepackedBytes} vs ${plainBytes}`);
  assert.equal(plain.prepacked.length, 0);
  assert.equal(prepacked.prepacked.length, 1);
});

Deno.test("prepack_test leaves no native buffers, pools or plans alive", () => {
  assertNothingLive(baseline);
});
