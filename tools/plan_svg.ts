/**
 * Writes SVG memory timelines of the demo transformer block and a 2-layer GPT-2 decoder to
 * bench/out/, and prints each plan's report and the file written.
 *
 *   deno task plan:svg
 * @module
 */

import { planGraph } from "../mod.ts";
import { buildBlock, DEFAULT_BLOCK } from "../demo/block.ts";
import { planToSvg } from "../src/viz/timeline_svg.ts";
import { buildGpt2, GPT2_SMALL } from "../bench/planner_perf.ts";

const OUT_DIR = "bench/out";

const graphs = [
  { name: "block", graph: buildBlock(DEFAULT_BLOCK).graph },
  { name: "gpt2_2l_seq128", graph: buildGpt2({ ...GPT2_SMALL, layers: 2 }).graph },
];

Deno.mkdirSync(OUT_DIR, { recursive: true });
for (const { name, graph } of graphs) {
  const plan = planGraph(graph);
  const path = `${OUT_DIR}/plan_${name}.svg`;
  Deno.writeTextFileSync(path, planToSvg(plan, { title: name }));
  console.log(plan.report());
  console.log(`wrote ${path}`);
}
