/**
 * Writes a graph as Graphviz DOT (and SVG when Graphviz's `dot` is on PATH): every tensor with
 * its size, filled by backend, the schedule's splits boxed, the copies between backends in red,
 * each planned tensor's offset and the in-place reuse edges of its memory plan (`toDot`).
 *
 *   deno task graph:dot                      the demo block on one CPU backend, with its memory plan
 *   deno task graph:dot --split              the demo block split over two backends (as
 *                                            demo:split), its splits and copies
 *   deno task graph:dot --model PATH         a GGUF model's one-token graph (--tokens N for N)
 *   deno task graph:dot --model smollm2      the cached SmolLM2 (deno task model:fetch)
 *   ... [--out DIR]                          default bench/out
 *
 * Prints the files written.
 * @module
 */

import { parseArgs } from "node:util";
import { planGraph, toDot } from "../mod.ts";
import { demoBlockSubject, modelSubject, type VizSubject } from "./viz_graphs.ts";
import { SMOLLM2_PATH } from "./model_cache.ts";

const USAGE = "usage: graph_dot.ts [--split] [--model PATH|smollm2] [--tokens N] [--out DIR]";

/** The subject the options ask for. */
export function subjectFor(values: {
  model?: string;
  tokens?: string;
  split?: boolean;
}): VizSubject {
  if (values.model !== undefined) {
    const path = values.model === "smollm2" ? SMOLLM2_PATH : values.model;
    const tokens = Number(values.tokens ?? "1");
    if (!Number.isInteger(tokens) || tokens < 1) throw new Error(`--tokens: ${values.tokens}`);
    return modelSubject(path, tokens);
  }
  return demoBlockSubject(values.split === true);
}

/** Runs `dot -Tsvg`; false when Graphviz is not installed. */
async function renderSvg(dotPath: string, svgPath: string): Promise<boolean> {
  try {
    const run = await new Deno.Command("dot", { args: ["-Tsvg", dotPath, "-o", svgPath] })
      .output();
    if (!run.success) throw new Error(`dot failed: ${new TextDecoder().decode(run.stderr)}`);
    return true;
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return false;
    throw error;
  }
}

async function main(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      model: { type: "string" },
      tokens: { type: "string" },
      split: { type: "boolean" },
      out: { type: "string", default: "bench/out" },
    },
    allowPositionals: false,
  });
  using subject = subjectFor(values);
  // A memory plan is one buffer's: it describes a graph on one backend. A split graph gets a
  // buffer per backend when it runs, so its picture shows the splits and copies without one.
  const plan = subject.schedule.splits.length === 1 ? planGraph(subject.graph) : undefined;
  await Deno.mkdir(values.out, { recursive: true });
  const dotPath = `${values.out}/graph_${subject.name}.dot`;
  await Deno.writeTextFile(dotPath, toDot(subject.schedule, plan));
  console.log(`wrote ${dotPath} (${subject.graph.nodes.length} nodes)`);
  const svgPath = dotPath.replace(/\.dot$/, ".svg");
  if (await renderSvg(dotPath, svgPath)) console.log(`wrote ${svgPath}`);
  else console.log(`no Graphviz \`dot\` on PATH: render with dot -Tsvg ${dotPath} -o ${svgPath}`);
  return 0;
}

if (import.meta.main) {
  try {
    Deno.exit(await main(Deno.args));
  } catch (error) {
    console.error(`${USAGE}\n${error instanceof Error ? error.message : String(error)}`);
    Deno.exit(2);
  }
}
