// DOT export: every tensor and edge appears once, names are escaped, views and outputs are
// marked, and a schedule boxes its splits and labels the copies between backends; toDot adds
// sizes, backend fills, planned offsets and in-place reuse edges (checked against the plan).
import assert from "node:assert/strict";
import {
  add,
  allocTensors,
  type Backend,
  Context,
  CpuBackend,
  Graph,
  graphToDot,
  mulMat,
  planGraph,
  reshape,
  Schedule,
  silu,
  type Tensor,
  toDot,
} from "../mod.ts";
import { demoBlockSubject, modelSubject } from "../tools/viz_graphs.ts";
import { SMOLLM2_PATH, smolLM2Cached } from "../tools/model_cache.ts";

function count(text: string, pattern: RegExp): number {
  return [...text.matchAll(pattern)].length;
}

Deno.test("graphToDot draws every tensor and edge, escapes names, marks views and outputs", () => {
  const ctx = new Context();
  const w = ctx.newTensor("f32", [8, 6], 'w "gate"\\up');
  const x = ctx.newTensor("f32", [8, 4], "x");
  const h = silu(mulMat(w, x));
  const out = add(reshape(h, [24]), reshape(h, [24]));
  const graph = Graph.build(out);
  const dot = graphToDot(graph, { title: "tiny" });
  assert.match(dot, /^digraph graft \{\n/);
  assert.ok(dot.endsWith("}\n"));
  for (const t of [...graph.leafs, ...graph.nodes]) {
    assert.equal(count(dot, new RegExp(`^\\s*t${t.id} \\[`, "gm")), 1, `${t.label} drawn once`);
  }
  const edges = graph.nodes.reduce((sum, n) => sum + n.src.length, 0);
  assert.equal(count(dot, /->/g), edges);
  assert.ok(dot.includes('label="w \\"gate\\"\\\\up\\nf32 [8, 6]"'), "quotes and backslashes");
  assert.equal(count(dot, /shape=ellipse/g), graph.leafs.length);
  // The two reshapes are views: dashed boxes, dashed edges from the memory they share.
  assert.equal(count(dot, /style="rounded,dashed"/g), 2);
  assert.equal(count(dot, /-> t\d+ \[style="dashed"\]/g), 2);
  assert.equal(count(dot, /penwidth=2.5/g), 1);
  assert.match(dot, /label="tiny";/);
  assert.ok(!dot.includes("cluster"), "no groups or clusters unless asked");
});

Deno.test("Schedule.toDot boxes each split, fills by backend and labels the copies", () => {
  using a = new CpuBackend({ threads: 1, name: "a" });
  using b = new CpuBackend({ threads: 1, name: "b" });
  const ctx = new Context();
  const x = ctx.newTensor("f32", [16, 4], "x");
  const w1 = ctx.newTensor("f32", [16, 16], "w1");
  const w2 = ctx.newTensor("f32", [16, 16], "w2");
  const y = mulMat(w2, silu(mulMat(w1, x)));
  using _a = allocTensors(a, [x, w1]);
  using _b = allocTensors(b, [w2]);
  using s = Schedule.create(Graph.build(y), { backends: [b, a] });
  const dot = s.toDot();
  assert.equal(count(dot, /subgraph cluster_\d+ \{/g), s.splits.length);
  for (const split of s.splits) {
    assert.ok(dot.includes(`label="split ${split.index} ${split.backend.name}"`));
  }
  // One crossing (silu's result into b), drawn as one red edge with its size.
  const crossings = s.splits.flatMap((sp) => sp.inputs);
  assert.equal(count(dot, /label="copy \d+ B"/g), crossings.length);
  assert.ok(dot.includes(`label="copy ${16 * 4 * 4} B"`));
  // Legend: one entry per backend.
  assert.equal(count(dot, /legend_\d+ \[label="[ab]"/g), 2);
});

Deno.test("toDot(graph, plan) sizes every tensor, gives planned offsets and draws in-place reuse", () => {
  const ctx = new Context();
  const x = ctx.newTensor("f32", [1024], "x");
  const s1 = silu(x);
  const s2 = silu(s1);
  const graph = Graph.build(add(s2, x));
  const plan = planGraph(graph);
  const dot = toDot(graph, plan);
  assert.match(dot, /^digraph graft \{\n/);
  for (const t of [...graph.leafs, ...graph.nodes]) {
    assert.equal(count(dot, new RegExp(`^\\s*t${t.id} \\[`, "gm")), 1, `${t.label} drawn once`);
  }
  // Every tensor here is 4 KiB, and each label says so.
  assert.equal(count(dot, /\\n4\.00 KiB/g), graph.leafs.length + graph.nodes.length);
  for (const block of plan.blocks) {
    assert.ok(dot.includes(`\\n@${block.offset} (block ${block.block})"`), block.tensor.label);
  }
  const inPlace = plan.blocks.filter((b) => b.inPlaceOf !== null);
  assert.ok(inPlace.length >= 1, "silu over silu runs in place");
  assert.equal(count(dot, /label="in place"/g), inPlace.length);
  for (const b of inPlace) {
    assert.ok(dot.includes(`t${b.inPlaceOf!.id} -> t${b.tensor.id} [label="in place"`));
  }
  // Data edges are still one per source; the reuse edges do not rank the layout.
  const edges = graph.nodes.reduce((sum, n) => sum + n.src.length, 0);
  assert.equal(count(dot, /->/g), edges + inPlace.length);
  assert.equal(count(dot, /constraint=false/g), inPlace.length);
  assert.match(dot, /memory plan 4\.00 KiB/);
  // Nothing placed: no backend fills, no legend.
  assert.ok(!dot.includes("fillcolor"));
});

Deno.test("toDot(graph) fills placed tensors by their buffer's backend", () => {
  using cpu = new CpuBackend({ threads: 1 });
  const ctx = new Context();
  const w = ctx.newTensor("f32", [8, 8], "w");
  const x = ctx.newTensor("f32", [8, 2], "x");
  using _memory = allocTensors(cpu, [w, x]);
  const dot = toDot(Graph.build(silu(mulMat(w, x))));
  assert.equal(count(dot, /fillcolor=/g), 2 + 1, "two leafs and the legend entry");
  assert.equal(count(dot, /legend_\d+ \[label="cpu"/g), 1);
});

Deno.test("toDot(schedule, plan) boxes splits, sizes copies, never reuses memory across backends", () => {
  using split = demoBlockSubject(true);
  const plan = planGraph(split.graph);
  const dot = toDot(split.schedule, plan);
  const { splits } = split.schedule;
  assert.ok(splits.length >= 2);
  assert.equal(count(dot, /subgraph cluster_\d+ \{/g), splits.length);
  assert.equal(count(dot, /subgraph cluster_legend \{/g), 1);
  const crossings = splits.reduce((sum, s) => sum + s.inputs.length, 0);
  assert.ok(count(dot, /label="copy \d+\.\d+ KiB"/g) >= crossings);
  assert.equal(count(dot, /legend_\d+ \[label="cpu2?"/g), 2);
  const backend = (t: Tensor): Backend => split.schedule.assignment.get(t)!.backend;
  const sameBackend = plan.blocks.filter((b) =>
    b.inPlaceOf !== null && backend(b.inPlaceOf) === backend(b.tensor)
  );
  assert.equal(count(dot, /label="in place"/g), sameBackend.length);
  assert.ok(sameBackend.length < plan.blocks.filter((b) => b.inPlaceOf).length);
});

Deno.test("graph:dot subjects: a GGUF model's one-token graph, named as llama.cpp names it", {
  ignore: !smolLM2Cached(),
}, () => {
  using model = modelSubject(SMOLLM2_PATH, 1, 256);
  const plan = planGraph(model.graph);
  const dot = toDot(model.schedule, plan);
  assert.equal(count(dot, /^\s*t\d+ \[/gm), model.graph.nodes.length + model.graph.leafs.length);
  assert.ok(dot.includes('label="split 0 cpu"'));
  assert.ok(dot.includes("kq_soft_max-0"), "llama.cpp's node names");
  assert.ok(dot.includes("in place"));
});

Deno.test("graph:dot subjects: the demo block on one backend has one split and a plan", () => {
  using block = demoBlockSubject(false);
  assert.equal(block.schedule.splits.length, 1);
  const dot = toDot(block.schedule, planGraph(block.graph));
  assert.ok(dot.includes('label="split 0 cpu"'));
  assert.ok(!dot.includes("copy"));
});
