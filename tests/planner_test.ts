/**
 * Memory planner tests. Property tests on hundreds of random DAGs check, for both strategies:
 * (a) no two tensors live at the same step overlap in memory, except a tensor and the source it
 * overwrote in place; (b) the planned graph computes bit for bit what the unplanned graph
 * (every tensor its own block) computes; (c) peak >= lower bound; (d) the measured size is the
 * size used when replayed. Unit tests pin each in-place rule, the unsafe cases included.
 */

import nodeAssert from "node:assert/strict";
import {
  acc,
  add,
  allocGraph,
  allocTensors,
  type BackendBuffer,
  Context,
  CpuBackend,
  cpy,
  getRows,
  Graph,
  liveAllocations,
  mean,
  type MemoryPlan,
  mul,
  mulMat,
  Op,
  permute,
  planGraph,
  type PlanStrategy,
  repeat,
  reshape,
  rmsNorm,
  scale,
  set,
  silu,
  softmax,
  sum,
  type Tensor,
  view,
} from "../mod.ts";
import { inPlaceRule } from "../internal.ts";
import { randomDag } from "./random_dag.ts";
import { planToSvg } from "../src/viz/timeline_svg.ts";
import { buildGpt2 } from "../bench/planner_perf.ts";
import { randomValues } from "../demo/block.ts";

const RANDOM_DAGS = 300;
/** Fewer with threads: spinning barriers are slow on machines with few free cores. */
const RANDOM_DAGS_THREADED = 40;

function assert(condition: unknown, message?: string): asserts condition {
  nodeAssert.ok(condition, message);
}

function assertEquals<T>(actual: T, expected: T, message?: string): void {
  nodeAssert.deepStrictEqual(actual, expected, message);
}

function assertThrows(fn: () => unknown, text: string): void {
  nodeAssert.throws(fn, (e: unknown) => e instanceof Error && e.message.includes(text));
}
const STRATEGIES: readonly PlanStrategy[] = ["greedy", "offline"];

// ---------------------------------------------------------------------------------------------
// Checks shared by the property tests.

/**
 * (a) An oracle independent of the planner: a tensor is live from its first step to the last
 * step that touches its memory (itself, a view of it, a cpy into it; outputs: the end). Two
 * tensors live at one step must not share a byte unless one overwrote the other in place.
 */
function assertNoLiveOverlap(plan: MemoryPlan): void {
  const steps: Tensor[] = plan.graphs.flatMap((g) => [...g.nodes]);
  const first = new Map<number, number>();
  const last = new Map<number, number>();
  steps.forEach((node, step) => {
    if (!first.has(node.id)) first.set(node.id, step);
    for (const t of [node, ...node.src]) last.set(t.memoryOwner.id, step);
    if (node.isOutput) last.set(node.memoryOwner.id, Infinity);
  });
  const blocks = plan.blocks;
  for (let i = 0; i < blocks.length; i++) {
    const x = blocks[i]!;
    assert(x.offset + x.size <= plan.size, `${x.tensor.label} ends past the plan's size`);
    assertEquals(x.offset % plan.alignment, 0);
    for (let j = i + 1; j < blocks.length; j++) {
      const y = blocks[j]!;
      const xs = first.get(x.tensor.id)!, xe = last.get(x.tensor.id)!;
      const ys = first.get(y.tensor.id)!, ye = last.get(y.tensor.id)!;
      const liveTogether = xs <= ye && ys <= xe;
      const shareBytes = x.offset < y.offset + y.size && y.offset < x.offset + x.size;
      if (!liveTogether || !shareBytes) continue;
      const inPlace = xe === ys && y.tensor.src[0]?.memoryOwner === x.tensor &&
        inPlaceRule(y.tensor.op).safe && x.offset === y.offset;
      assert(inPlace, `${x.tensor.label} and ${y.tensor.label} are live together and overlap`);
    }
  }
}

function bits(cpu: CpuBackend, t: Tensor): Uint32Array {
  const data = cpu.getTensor(t);
  return new Uint32Array(data.buffer, data.byteOffset, data.byteLength / 4);
}

function fillLeafs(cpu: CpuBackend, graphs: readonly Graph[], seed: number): void {
  const seen = new Set<Tensor>();
  let k = 0;
  for (const g of graphs) {
    for (const leaf of g.leafs) {
      if (seen.has(leaf)) continue;
      seen.add(leaf);
      cpu.setTensor(leaf, randomValues(leaf.nelements, seed * 1009 + k++, 0.5));
    }
  }
}

/** Computes a fresh copy of the DAG of `seed`, planned (`strategy`) or unplanned (null). */
function computeDag(
  cpu: CpuBackend,
  seed: number,
  strategy: PlanStrategy | null,
): { outputs: Uint32Array[]; plan: MemoryPlan | null } {
  const dag = randomDag({ seed, nodes: 8 + (seed % 50) });
  using _inputs = allocTensors(cpu, dag.graph.leafs);
  let plan: MemoryPlan | null = null;
  let memory: BackendBuffer;
  if (strategy === null) {
    memory = allocTensors(cpu, dag.graph.nodes);
  } else {
    plan = planGraph(dag.graph, { strategy, alignment: cpu.alignment });
    memory = plan.allocate(cpu);
    // (d) the buffer is exactly the measured size, and the plan reaches it.
    assertEquals(memory.size, plan.size);
    assertEquals(Math.max(...plan.blocks.map((b) => b.offset + b.reserved)), plan.size);
  }
  using _memory = memory;
  fillLeafs(cpu, [dag.graph], seed);
  cpu.graphCompute(dag.graph);
  return { outputs: dag.outputs.map((t) => bits(cpu, t)), plan };
}

// ---------------------------------------------------------------------------------------------
// Property tests.

function checkRandomDags(threads: number, seeds: number, firstSeed: number): void {
  using cpu = new CpuBackend({ threads });
  for (let seed = firstSeed; seed < firstSeed + seeds; seed++) {
    const expected = computeDag(cpu, seed, null).outputs;
    for (const strategy of STRATEGIES) {
      const { outputs, plan } = computeDag(cpu, seed, strategy);
      assertEquals(outputs, expected, `seed ${seed} ${strategy}: outputs differ`);
      assertNoLiveOverlap(plan!);
      assert(plan!.peak >= plan!.lowerBound, `seed ${seed} ${strategy}: peak below the bound`);
      assert(plan!.peak <= plan!.naiveSize);
    }
  }
}

Deno.test("planGraph() on random DAGs: no live overlap, same results, peak >= lower bound", () => {
  checkRandomDags(1, RANDOM_DAGS, 1);
});

Deno.test("planGraph() on random DAGs computed by several threads: same results", () => {
  // Threads split rows; in-place kernels must still read each element before writing it.
  checkRandomDags(2, RANDOM_DAGS_THREADED, 10001);
});

Deno.test("planGraph() keeps the smaller strategy, whose offsets use exactly the measured size", () => {
  for (let seed = 1; seed <= RANDOM_DAGS; seed++) {
    const dag = randomDag({ seed, nodes: 20 + (seed % 200), sizes: "realistic" });
    const plan = planGraph(dag.graph);
    const { greedy, offline } = plan.strategySizes;
    assertEquals(plan.size, Math.min(greedy!, offline!));
    assert(plan.lowerBound <= plan.size);
    assertNoLiveOverlap(plan);
    // (d) the size measured is the size the recorded offsets use.
    for (const strategy of STRATEGIES) {
      const single = planGraph(dag.graph, { strategy });
      assertEquals(single.size, single.strategySizes[strategy]);
      assertEquals(Math.max(...single.blocks.map((b) => b.offset + b.reserved)), single.size);
    }
  }
});

Deno.test("planGraph() over several graphs: later graphs reuse earlier intermediates", () => {
  using cpu = new CpuBackend({ threads: 2 });
  const build = (): { graphs: Graph[]; outs: Tensor[]; ctx: Context } => {
    const ctx = new Context();
    const x = ctx.newTensor("f32", [256, 4]);
    const w = ctx.newTensor("f32", [256, 256]);
    const first = silu(mulMat(w, silu(mulMat(w, x))));
    const g1 = Graph.build(first);
    // The second graph reads the first's output as a leaf, as a scheduler's split does.
    const second = add(mulMat(w, silu(mulMat(w, first))), x);
    const g2 = Graph.buildWithInputs([second], new Set([first]));
    return { graphs: [g1, g2], outs: [first, second], ctx };
  };
  const run = (planned: boolean): Uint32Array[] => {
    const { graphs, outs, ctx } = build();
    using _inputs = allocTensors(cpu, ctx.tensors);
    using memory = planned
      ? allocGraph(cpu, graphs)
      : allocTensors(cpu, graphs.flatMap((g) => [...g.nodes]));
    if (planned) {
      const plan = planGraph(build().graphs);
      assertEquals(memory.size, plan.size);
      assertNoLiveOverlap(plan);
      // Intermediates of graph 1 (16 KiB each) are reused by graph 2: fewer bytes than naive.
      assert(plan.size < plan.naiveSize / 2, plan.report());
    }
    fillLeafs(cpu, graphs, 7);
    for (const g of graphs) cpu.graphCompute(g);
    return outs.map((t) => bits(cpu, t));
  };
  assertEquals(run(true), run(false));
});

Deno.test("planGraph() on GPT-2 shapes: within 5% of the lower bound, under a third of naive", () => {
  const { graph } = buildGpt2();
  const plan = planGraph(graph);
  assert(plan.peak / plan.lowerBound <= 1.05, plan.report());
  assert(plan.peak * 3 <= plan.naiveSize, plan.report());
  assertNoLiveOverlap(plan);
});

Deno.test("allocGraph() on a small GPT-2 computes what the unplanned graph computes", () => {
  using cpu = new CpuBackend({ threads: 2 });
  const config = { layers: 2, dim: 64, heads: 4, seq: 16, ffn: 256 };
  const run = (planned: boolean): Uint32Array => {
    const { graph, ctx } = buildGpt2(config);
    using _inputs = allocTensors(cpu, ctx.tensors);
    using _memory = planned ? allocGraph(cpu, graph) : allocTensors(cpu, graph.nodes);
    fillLeafs(cpu, [graph], 3);
    cpu.graphCompute(graph);
    return bits(cpu, graph.outputs[0]!);
  };
  assertEquals(run(true), run(false));
});

// Tests never time things (a noisy machine fails them at random): `deno task bench:planner`
// reports this graph's planning time (random_10k, ms=, against its 50 ms budget).
Deno.test("planGraph() plans a 10k-node graph with no live overlap and peak >= lower bound", () => {
  const { graph } = randomDag({ seed: 10000, nodes: 10000, sizes: "realistic" });
  const plan = planGraph(graph);
  assertNoLiveOverlap(plan);
  assert(plan.peak >= plan.lowerBound && plan.peak <= plan.naiveSize);
});

// ---------------------------------------------------------------------------------------------
// In-place rules, one by one.

function blockOf(plan: MemoryPlan, t: Tensor): { offset: number; inPlaceOf: Tensor | null } {
  const block = plan.blocks.find((b) => b.tensor === t);
  assert(block, `${t.label} is not planned`);
  return block;
}

function inPlaceOf(outputs: Tensor[], t: Tensor): Tensor | null {
  return blockOf(planGraph(Graph.build(...outputs)), t).inPlaceOf;
}

Deno.test("in place: unary and binary elementwise ops take over their only src0", () => {
  const ctx = new Context();
  const x = ctx.newTensor("f32", [64, 4]);
  const b = ctx.newTensor("f32", [64]);
  const p = mulMat(ctx.newTensor("f32", [64, 64]), x);
  const s = silu(p);
  const a = add(s, b);
  const out = scale(a, 2);
  const plan = planGraph(Graph.build(out));
  assertEquals(blockOf(plan, s).inPlaceOf, p);
  assertEquals(blockOf(plan, a).inPlaceOf, s);
  assertEquals(blockOf(plan, out).inPlaceOf, a);
  assertEquals(plan.blockCount, 1);
});

Deno.test("in place: acc and set take over their src0 (ggml's _inplace forms), never src1", () => {
  const ctx = new Context();
  const x = ctx.newTensor("f32", [64, 4]);
  const b = ctx.newTensor("f32", [8, 2]);
  const s = silu(x);
  const accumulated = acc(s, b, { offset: 64 * 4 });
  const written = set(scale(accumulated, 2), b);
  const out = scale(written, 3);
  const plan = planGraph(Graph.build(out));
  assertEquals(blockOf(plan, accumulated).inPlaceOf, s);
  assertEquals(blockOf(plan, written).inPlaceOf?.op, Op.scale);
  const source = silu(ctx.newTensor("f32", [64, 4]));
  const y = set(silu(x), source);
  assertEquals(inPlaceOf([y], y), y.src[0]); // src0, never src1 (of the same layout)
});

Deno.test("in place: binary ops never take over src1", () => {
  const ctx = new Context();
  const x = ctx.newTensor("f32", [64, 4]);
  const p = silu(x);
  const y = add(x, p); // p is src1
  assertEquals(inPlaceOf([y], y), null);
});

Deno.test("in place: only the last consumer of a parent may take it over", () => {
  const ctx = new Context();
  const x = ctx.newTensor("f32", [64, 4]);
  const p = silu(x);
  const first = scale(p, 2);
  const second = scale(p, 3);
  const out = add(first, second);
  const graph = Graph.build(out);
  const plan = planGraph(graph);
  // Depth-first order: p, first, second, out. first runs while second still needs p.
  assert(graph.nodes.indexOf(first) < graph.nodes.indexOf(second));
  assertEquals(blockOf(plan, first).inPlaceOf, null);
  assertEquals(blockOf(plan, second).inPlaceOf, p);
});

Deno.test("in place: a parent whose view is read later is not taken over", () => {
  const ctx = new Context();
  const x = ctx.newTensor("f32", [64, 4]);
  const p = silu(x);
  const v = view(p, [64, 2], { offset: 64 * 4 * 2 });
  const s = scale(p, 2);
  const readsView = silu(v);
  const out = add(s, repeat(readsView, s));
  const graph = Graph.build(out);
  assert(graph.nodes.indexOf(readsView) > graph.nodes.indexOf(s), "the view is read after s");
  assertEquals(blockOf(planGraph(graph), s).inPlaceOf, null);
});

Deno.test("in place: through a whole-tensor view at offset 0, not a partial one", () => {
  const ctx = new Context();
  const x = ctx.newTensor("f32", [64, 4]);
  const p = silu(x);
  const r = silu(reshape(p, [256]));
  assertEquals(inPlaceOf([r], r), p);
  const q = silu(x);
  const tail = silu(view(q, [64, 2], { offset: 64 * 4 * 2 }));
  assertEquals(inPlaceOf([tail], tail), null);
});

Deno.test("in place: layouts must match (no permuted source, no other dtype or shape)", () => {
  const ctx = new Context();
  const x = ctx.newTensor("f32", [64, 4]);
  const p = silu(x);
  const t = silu(permute(p, [1, 0, 2, 3])); // strided source, contiguous result
  assertEquals(inPlaceOf([t], t), null);
  const m = mean(silu(x)); // [1, 4] from [64, 4]
  assertEquals(inPlaceOf([m], m), null);
  const table = silu(ctx.newTensor("f32", [8, 16]));
  const rows = getRows(table, ctx.newTensor("i32", [16]));
  assertEquals(inPlaceOf([rows], rows), null);
});

Deno.test("in place: never for mulMat, getRows, repeat, sum, mean, even with equal layouts", () => {
  for (const op of [Op.mulMat, Op.getRows, Op.repeat, Op.sum, Op.mean, Op.cpy]) {
    assertEquals(inPlaceRule(op).safe, false);
  }
  const ctx = new Context();
  const x = ctx.newTensor("f32", [16, 16]);
  const p = silu(x);
  const square = mulMat(ctx.newTensor("f32", [16, 16]), p); // [16, 16], same layout as p
  assertEquals(inPlaceOf([square], square), null);
  const one = silu(ctx.newTensor("f32", [1]));
  const total = sum(one); // [1] from [1]: same layout, still refused
  assertEquals(inPlaceOf([total], total), null);
  const same = silu(ctx.newTensor("f32", [16, 2]));
  const tiled = repeat(same, same);
  assertEquals(inPlaceOf([tiled], tiled), null);
});

Deno.test("in place: norms and softmax take over their input", () => {
  const ctx = new Context();
  const x = ctx.newTensor("f32", [64, 4]);
  const p = silu(x);
  const n = rmsNorm(p);
  const s = softmax(n, { mask: ctx.newTensor("f32", [64, 4]), scale: 0.5 });
  const plan = planGraph(Graph.build(s));
  assertEquals(blockOf(plan, n).inPlaceOf, p);
  assertEquals(blockOf(plan, s).inPlaceOf, n);
});

Deno.test("in place: not when another source reads a part of the parent (broadcast alias)", () => {
  const ctx = new Context();
  const x = ctx.newTensor("f32", [64, 4]);
  const p = silu(x);
  const row = view(p, [64], { offset: 64 * 4 }); // row 1 of p, broadcast over p's rows
  const y = add(p, row);
  assertEquals(inPlaceOf([y], y), null);
  // softmax's mask may be the very same elements, not another part of the parent.
  const q = silu(x);
  const same = softmax(q, { mask: view(q, [64, 4]) });
  assertEquals(inPlaceOf([same], same), q);
  const wide = silu(ctx.newTensor("f32", [64, 8]));
  const shifted = softmax(view(wide, [64, 4]), {
    mask: view(wide, [64, 4], { offset: 64 * 4 * 4 }),
  });
  assertEquals(inPlaceOf([shifted], shifted), null);
});

Deno.test("in place: add(p, p) may overwrite p (both sources read the same elements)", () => {
  using cpu = new CpuBackend({ threads: 2 });
  const ctx = new Context();
  const x = ctx.newTensor("f32", [64, 4]);
  const p = silu(x);
  const y = add(p, p);
  const graph = Graph.build(y);
  assertEquals(blockOf(planGraph(graph), y).inPlaceOf, p);
  using _inputs = allocTensors(cpu, ctx.tensors);
  using _memory = allocGraph(cpu, graph);
  const data = randomValues(256, 5);
  cpu.setTensor(x, data);
  cpu.graphCompute(graph);
  const got = cpu.getTensor(y);
  for (let i = 0; i < 256; i++) {
    const v = data[i]!;
    const s = Math.fround(v / (1 + Math.exp(-v)));
    assert(Math.abs(got[i]! - 2 * s) <= 1e-5 * Math.max(1, Math.abs(s)), `element ${i}`);
  }
});

Deno.test("in place: outputs and leafs are never taken over or freed", () => {
  const ctx = new Context();
  const x = ctx.newTensor("f32", [64, 4]);
  const kept = silu(x);
  const after = scale(kept, 2);
  const later = silu(after);
  const plan = planGraph(Graph.build(kept, later));
  assertEquals(blockOf(plan, after).inPlaceOf, null); // kept is an output
  const keptAt = blockOf(plan, kept).offset;
  for (const b of plan.blocks) {
    if (b.tensor !== kept) assert(b.offset >= keptAt + 256 * 4 || b.offset + b.size <= keptAt);
  }
  const fromLeaf = silu(ctx.newTensor("f32", [64]));
  assertEquals(inPlaceOf([fromLeaf], fromLeaf), null); // a leaf is the user's memory
});

Deno.test("cpy into a planned tensor keeps it live and shares its memory", () => {
  using cpu = new CpuBackend({ threads: 2 });
  const run = (planned: boolean): Uint32Array => {
    const ctx = new Context();
    const x = ctx.newTensor("f32", [64, 4]);
    const target = silu(x);
    const early = scale(target, 2); // reads target before the cpy overwrites it
    const copied = cpy(scale(ctx.newTensor("f32", [256]), 3), target);
    const out = add(silu(copied), early);
    const graph = Graph.build(out);
    using _inputs = allocTensors(cpu, ctx.tensors);
    if (planned) {
      const plan = planGraph(graph);
      assertEquals(plan.offsetOf(copied), undefined); // cpy owns no memory
      const step = graph.nodes.indexOf(copied);
      assert(plan.blocks.find((b) => b.tensor === target)!.lastUse >= step);
      assertNoLiveOverlap(plan);
    }
    using _memory = planned ? allocGraph(cpu, graph) : allocTensors(cpu, graph.nodes);
    fillLeafs(cpu, [graph], 11);
    cpu.graphCompute(graph);
    return bits(cpu, out);
  };
  assertEquals(run(true), run(false));
});

// ---------------------------------------------------------------------------------------------
// Reports, SVG, errors, leaks.

Deno.test("report() and planToSvg() describe the plan", () => {
  const { graph } = buildGpt2({ layers: 2, dim: 64, heads: 4, seq: 16, ffn: 256 });
  const plan = planGraph(graph);
  const report = plan.report();
  assert(report.includes(`lower bound  ${plan.lowerBound} bytes`), report);
  assert(report.includes(plan.strategy));
  const svg = planToSvg(plan);
  assert(svg.startsWith("<svg"));
  assertEquals(svg.match(/<rect class="t"/g)?.length, plan.blocks.length);
});

Deno.test("planGraph() refuses bad options; place() refuses small buffers", () => {
  const ctx = new Context();
  const y = silu(ctx.newTensor("f32", [16]));
  assertThrows(() => planGraph(Graph.build(y), { alignment: 48 }), "power of two");
  assertThrows(() => planGraph([]), "at least one graph");
  using cpu = new CpuBackend({ threads: 1 });
  const plan = planGraph(Graph.build(y));
  using small = cpu.allocBuffer(plan.size / 2);
  assertThrows(() => plan.place(small), "needs");
});

Deno.test("the planner leaks no native allocators or buffers", () => {
  const before = liveAllocations();
  {
    using cpu = new CpuBackend({ threads: 1 });
    const dag = randomDag({ seed: 42, nodes: 40 });
    using _inputs = allocTensors(cpu, dag.graph.leafs);
    using _memory = allocGraph(cpu, dag.graph);
    cpu.graphCompute(dag.graph);
  }
  const after = liveAllocations();
  assertEquals(after.allocators, before.allocators);
  assertEquals(after.buffers, before.buffers);
});

Deno.test("mul() by a broadcast row is planned and computed correctly", () => {
  using cpu = new CpuBackend({ threads: 2 });
  const ctx = new Context();
  const x = ctx.newTensor("f32", [32, 8]);
  const g = ctx.newTensor("f32", [32]);
  const y = mul(rmsNorm(silu(x)), g);
  const graph = Graph.build(y);
  using _inputs = allocTensors(cpu, ctx.tensors);
  using memory = allocGraph(cpu, graph);
  assertEquals(memory.size, 32 * 8 * 4);
  cpu.setTensor(x, randomValues(256, 1));
  cpu.setTensor(g, randomValues(32, 2));
  cpu.graphCompute(graph);
  assert(cpu.getTensor(y).every(Number.isFinite));
});

Deno.test("outputs not kept live to their graph's end, unshared, then free their memory", () => {
  // Graph 0 hands `h` to a later consumer (as a scheduler's split does): without `keep` it is
  // pinned to the end; with `keep` naming only the final output it lives to graph 0's end.
  const ctx = new Context();
  const x = ctx.newTensor("f32", [4096], "x");
  const h = silu(x);
  const tail = scale(h, 2); // the last node of graph 0: must not take over h in place
  const g0 = Graph.buildWithInputs([h, tail], new Set());
  const big = scale(silu(ctx.newTensor("f32", [4096], "y")), 3);
  const g1 = Graph.build(big);
  const pinned = planGraph([g0, g1]);
  const kept = planGraph([g0, g1], { keep: new Set([big, tail]) });
  nodeAssert.ok(kept.size <= pinned.size, `${kept.size} > ${pinned.size}`);
  const block = (plan: typeof kept, t: Tensor) => plan.blocks.find((b) => b.tensor === t)!;
  nodeAssert.equal(block(kept, tail).inPlaceOf, null, "an exported tensor is never overwritten");
  nodeAssert.ok(block(kept, h).lastUse >= g0.nodes.length - 1, "h lives to graph 0's end");
  nodeAssert.ok(block(kept, h).lastUse < g0.nodes.length + g1.nodes.length - 1, "then frees");
});
