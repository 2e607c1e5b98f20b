// The SVG memory timeline's structure (not its pixels): one rectangle per planned tensor with its
// name on hover, names drawn inside the rectangles large enough, both axes ticked from 0 with
// their names, a legend with one key per op present and the peak and lower-bound lines, and a
// document whose tags balance. Checked on the demo block, a GPT-2 decoder and, when cached, the
// SmolLM2 one-token graph (`deno task plan:svg --model smollm2`).
import assert from "node:assert/strict";
import { type MemoryPlan, opName, planGraph, planToSvg } from "../mod.ts";
import { buildBlock, DEFAULT_BLOCK } from "../demo/block.ts";
import { gpt2Graph, modelSubject } from "../tools/viz_graphs.ts";
import { SMOLLM2_PATH, smolLM2Cached } from "../tools/model_cache.ts";

function count(text: string, pattern: RegExp): number {
  return [...text.matchAll(pattern)].length;
}

function escapeXml(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;");
}

function checkStructure(plan: MemoryPlan, svg: string, title: string): void {
  assert.ok(svg.startsWith('<svg xmlns="http://www.w3.org/2000/svg"'));
  assert.ok(svg.endsWith("</svg>"));
  for (const tag of ["g", "text", "rect"]) {
    const open = count(svg, new RegExp(`<${tag}[ >]`, "g"));
    const selfClosed = count(svg, new RegExp(`<${tag}[^>]*/>`, "g"));
    assert.equal(open - selfClosed, count(svg, new RegExp(`</${tag}>`, "g")), `<${tag}> balanced`);
  }
  assert.ok(svg.includes(`<text class="title" x="90" y="18">${title} — ${plan.strategy}`));
  // One rectangle per tensor, its tooltip naming it.
  assert.equal(count(svg, /<rect class="t"/g), plan.blocks.length);
  const tips = [...svg.matchAll(/<title>([^<]*)<\/title>/g)].map((m) => m[1]!);
  assert.equal(tips.length, plan.blocks.length);
  plan.blocks.forEach((b, i) => {
    const name = b.tensor.name || `#${b.tensor.id}`;
    assert.ok(tips[i]!.startsWith(escapeXml(name)), `${tips[i]} names ${name}`);
  });
  // Names drawn inside: each is a planned tensor's.
  const names = new Set(plan.blocks.map((b) => escapeXml(b.tensor.name || `#${b.tensor.id}`)));
  for (const m of svg.matchAll(/<text class="name"[^>]*>([^<]*)<\/text>/g)) {
    assert.ok(names.has(m[1]!), `label ${m[1]} is a tensor's name`);
  }
  // Axes: both start at 0, with their titles.
  const xAxis = svg.slice(svg.indexOf('<g class="axis x">'), svg.indexOf('<g class="axis y">'));
  assert.ok(xAxis.includes('text-anchor="middle">0</text>'));
  assert.ok(xAxis.includes("step (node computed, in execution order)"));
  const yAxis = svg.slice(svg.indexOf('<g class="axis y">'), svg.indexOf('<rect class="t"'));
  assert.ok(yAxis.includes('text-anchor="end">0 B</text>'));
  assert.ok(yAxis.includes("offset in the buffer"));
  assert.ok(count(xAxis, /<line /g) >= 2 && count(yAxis, /<line /g) >= 2, "ticks");
  // Legend: the two lines, then one key per op present (at most 24, then "+N more ops").
  const legend = svg.slice(svg.indexOf('<g class="legend">'));
  assert.ok(legend.includes(">peak</text>") && legend.includes(">lower bound</text>"));
  const ops = new Set(plan.blocks.map((b) => b.tensor.op));
  assert.equal(count(legend, /<rect class="key"/g), Math.min(ops.size, 24));
  for (const op of [...ops].slice(0, 24)) {
    const n = plan.blocks.filter((b) => b.tensor.op === op).length;
    if (ops.size <= 24) assert.ok(legend.includes(`>${opName(op)} ×${n}</text>`), opName(op));
  }
  if (ops.size > 24) assert.ok(legend.includes(`+${ops.size - 24} more ops`));
}

Deno.test("planToSvg labels the demo block's timeline: names, axes, legend", () => {
  const plan = planGraph(buildBlock(DEFAULT_BLOCK).graph);
  const svg = planToSvg(plan, { title: "block" });
  checkStructure(plan, svg, "block");
  assert.ok(count(svg, /<text class="name"/g) > 0, "some rectangles are large enough for names");
});

Deno.test("planToSvg escapes names and works for any graph (a GPT-2 decoder)", () => {
  const { graph } = gpt2Graph(1);
  graph.nodes[0]!.name = 'a<b & "c"';
  const plan = planGraph(graph);
  const svg = planToSvg(plan, { title: "gpt2 <1 layer>", width: 900, height: 400 });
  assert.ok(svg.includes("gpt2 &lt;1 layer&gt;"));
  assert.ok(!svg.includes('a<b & "c"'));
  checkStructure(plan, svg, "gpt2 &lt;1 layer&gt;");
});

Deno.test("planToSvg draws a GGUF model's one-token graph", { ignore: !smolLM2Cached() }, () => {
  using model = modelSubject(SMOLLM2_PATH, 1, 256);
  const plan = planGraph(model.graph);
  const svg = planToSvg(plan, { title: model.name });
  checkStructure(plan, svg, model.name);
  assert.ok(svg.includes("<title>kq_soft_max-0 "), "llama.cpp's node names on hover");
});
