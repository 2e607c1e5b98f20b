/** What a user expects of planning: described leafs, re-planning, reused intermediates. */

import assert from "node:assert/strict";
import {
  add,
  allocGraph,
  allocTensors,
  type Backend,
  type BackendBuffer,
  Context,
  CpuBackend,
  Graph,
  liveAllocations,
  mul,
  mulMat,
  PlacementError,
  planGraph,
  scale,
  ShapeError,
  silu,
} from "../mod.ts";
import { assertNothingLive } from "./leaks.ts";

const baseline = liveAllocations();

function chain(
  ctx: Context,
): {
  x: ReturnType<Context["newTensor"]>;
  a: ReturnType<typeof silu>;
  y: ReturnType<typeof scale>;
} {
  const x = ctx.newTensor("f32", [256], "x");
  const a = silu(x);
  a.name = "a";
  const b = scale(a, 3);
  b.name = "b";
  const y = scale(b, 2);
  y.name = "y";
  return { x, a, y };
}

Deno.test("describe() lists the leafs by name and names every source", () => {
  const ctx = new Context();
  const w = ctx.newTensor("f32", [4, 3], "w");
  const x = ctx.newTensor("f32", [4, 2], "x");
  const b = ctx.newTensor("f32", [3, 2], "b");
  const y = add(silu(mulMat(w, x)), b);
  const text = Graph.build(y).describe();
  assert.match(text, /^leaf0 input w \(f32 \[4, 3\]\)$/m);
  assert.match(text, /^leaf2 input b /m);
  assert.match(text, /^node0 mulMat .* <- leaf0 w, leaf1 x$/m);
  assert.match(text, /^node2 add .* <- node1, leaf2 b$/m);
});

Deno.test("planGraph after allocGraph plans the graph again (was: 0 tensors)", () => {
  using cpu = new CpuBackend({ threads: 1 });
  const ctx = new Context();
  const { x, y } = chain(ctx);
  const graph = Graph.build(y);
  const before = planGraph(graph, { alignment: cpu.alignment });
  using _inputs = allocTensors(cpu, [x]);
  const memory = allocGraph(cpu, graph);
  const after = planGraph(graph, { alignment: cpu.alignment });
  assert.equal(after.blocks.length, before.blocks.length);
  assert.ok(after.blocks.length > 0);
  assert.equal(after.size, before.size);
  // Allocating again while the first buffer lives is refused; after disposing it, it works.
  assert.throws(() => allocGraph(cpu, graph), PlacementError);
  memory.dispose();
  using again = allocGraph(cpu, graph);
  cpu.setTensor(x, new Float32Array(256).fill(1));
  cpu.graphCompute(graph);
  assert.ok(Math.abs(cpu.getTensor(y)[0]! - 6 / (1 + Math.exp(-1))) < 1e-5);
  assert.equal(again.size, before.size);
});

Deno.test("reading an intermediate whose memory was reused is refused, naming keep", () => {
  using cpu = new CpuBackend({ threads: 1 });
  const ctx = new Context();
  const { x, a, y } = chain(ctx);
  const graph = Graph.build(y);
  using _inputs = allocTensors(cpu, [x]);
  {
    using _memory = allocGraph(cpu, graph);
    cpu.setTensor(x, new Float32Array(256).fill(1));
    cpu.graphCompute(graph);
    // a's memory went to b (in place) and then y: it used to read back y's values silently.
    assert.throws(
      () => cpu.getTensor(a),
      (e: unknown) =>
        e instanceof PlacementError && /keep/.test(e.message) && /\ba\b/.test(e.message),
    );
    assert.ok(Math.abs(cpu.getTensor(y)[0]! - 6 / (1 + Math.exp(-1))) < 1e-5, "outputs read");
  }
  // Asked for at plan time, it is kept and reads its own values.
  const kept = allocGraph(cpu, graph, { keep: new Set([a]) });
  try {
    cpu.graphCompute(graph);
    assert.ok(Math.abs(cpu.getTensor(a)[0]! - 1 / (1 + Math.exp(-1))) < 1e-6);
  } finally {
    kept.dispose();
  }
});

Deno.test("allocTensors frees its buffer when placing fails halfway (was: leaked)", () => {
  using cpu = new CpuBackend({ threads: 1 });
  // A backend whose buffers report less room than asked: the second tensor cannot be placed.
  const short: Backend = Object.create(cpu, {
    allocBuffer: {
      value: (size: number): BackendBuffer => {
        const real = cpu.allocBuffer(size);
        return Object.create(real, {
          size: { value: size - 64 },
          dispose: { value: () => real.dispose() },
          disposed: { get: () => real.disposed },
        });
      },
    },
  });
  const ctx = new Context();
  const p = ctx.newTensor("f32", [16], "p");
  const q = ctx.newTensor("f32", [16], "q");
  assert.throws(() => allocTensors(short, [p, q]), ShapeError);
  assert.equal(p.placement, null, "the tensor placed first lost its memory again");
  assert.equal(liveAllocations().buffers, baseline.buffers, "the buffer was freed");
});

Deno.test("reading an intermediate a fused CPU plan never writes is refused", () => {
  using cpu = new CpuBackend({ threads: 1 });
  const ctx = new Context();
  const x = ctx.newTensor("f32", [64], "x");
  const gate = ctx.newTensor("f32", [64], "gate");
  const s = silu(x);
  s.name = "s";
  const y = mul(s, gate);
  const graph = Graph.build(y);
  using _memory = allocTensors(cpu, [x, gate, s, y]);
  cpu.setTensor(x, new Float32Array(64).fill(1));
  cpu.setTensor(gate, new Float32Array(64).fill(2));
  {
    using plan = cpu.graphPlanCreate(graph); // fuses mul(silu(x), gate): s is never written
    cpu.graphPlanCompute(plan);
    assert.throws(() => cpu.getTensor(s), /computed inside .* fuse: false/);
  }
  using unfused = cpu.graphPlanCreate(graph, { fuse: false });
  cpu.graphPlanCompute(unfused);
  assert.ok(Math.abs(cpu.getTensor(s)[0]! - 1 / (1 + Math.exp(-1))) < 1e-6);
});

Deno.test("planner fixes: nothing native is left alive", () => assertNothingLive(baseline));
