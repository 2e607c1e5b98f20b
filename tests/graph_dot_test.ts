// DOT export: every tensor and edge appears once, names are escaped, views and outputs are
// marked, and a schedule boxes its splits and labels the copies between backends.
import assert from "node:assert/strict";
import {
  add,
  allocTensors,
  Context,
  CpuBackend,
  Graph,
  graphToDot,
  mulMat,
  reshape,
  Schedule,
  silu,
} from "../mod.ts";

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
