/**
 * Writes SVG memory timelines (`planToSvg`: tensors named, axes in steps and bytes, a legend of
 * ops) to bench/out/ and prints each plan's report and the file written.
 *
 *   deno task plan:svg                       the demo block and a 2-layer GPT-2 decoder
 *   deno task plan:svg --model PATH          a GGUF model's one-token graph (--tokens N for N)
 *   deno task plan:svg --model smollm2       the cached SmolLM2 (deno task model:fetch)
 *   ... [--out DIR] [--width PX] [--height PX]
 * @module
 */

import { parseArgs } from "node:util";
import { type Graph, planGraph, planToSvg } from "../mod.ts";
import { buildBlock, DEFAULT_BLOCK } from "../demo/block.ts";
import { gpt2Graph, modelSubject } from "./viz_graphs.ts";
import { SMOLLM2_PATH } from "./model_cache.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    model: { type: "string" },
    tokens: { type: "string", default: "1" },
    out: { type: "string", default: "bench/out" },
    width: { type: "string", default: "1400" },
    height: { type: "string", default: "700" },
  },
  allowPositionals: false,
});

function draw(name: string, graph: Graph): void {
  const plan = planGraph(graph);
  const path = `${values.out}/plan_${name}.svg`;
  const size = { width: Number(values.width), height: Number(values.height) };
  Deno.writeTextFileSync(path, planToSvg(plan, { title: name, ...size }));
  console.log(plan.report());
  console.log(`wrote ${path}`);
}

Deno.mkdirSync(values.out, { recursive: true });
if (values.model !== undefined) {
  const path = values.model === "smollm2" ? SMOLLM2_PATH : values.model;
  using subject = modelSubject(path, Number(values.tokens));
  draw(subject.name, subject.graph);
} else {
  draw("block", buildBlock(DEFAULT_BLOCK).graph);
  const gpt2 = gpt2Graph(2);
  draw(gpt2.name, gpt2.graph);
}
