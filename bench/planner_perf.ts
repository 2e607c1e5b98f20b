/**
 * Memory planner benchmark: for the demo transformer block, a 12-layer GPT-2-small decoder
 * (d=768, 12 heads, seq 128, ffn 3072, f32) and random DAGs of 1k and 10k nodes, prints
 *
 *   planner <graph> peak=<bytes> lower=<bytes> ratio=<peak/lower> naive=<bytes> ms=<time>
 *
 * where ms is the median planning time (both strategies, the smaller kept).
 *
 *   deno task bench:planner
 * @module
 */

import {
  add,
  cont,
  Context,
  gelu,
  Graph,
  mul,
  mulMat,
  norm,
  permute,
  planGraph,
  reshape,
  scale,
  softmax,
  type Tensor,
  view,
} from "../mod.ts";
import { buildBlock, DEFAULT_BLOCK } from "../demo/block.ts";
import { randomDag } from "../tests/random_dag.ts";

/** Sizes of a GPT-2 style decoder. */
export interface Gpt2Config {
  layers: number;
  dim: number;
  heads: number;
  seq: number;
  ffn: number;
}

/** GPT-2 small: 12 layers, d=768, 12 heads, ffn 3072; sequence of 128 tokens. */
export const GPT2_SMALL: Gpt2Config = { layers: 12, dim: 768, heads: 12, seq: 128, ffn: 3072 };

/** Times each graph is planned; the median is reported. */
const PLAN_RUNS = 7;

/**
 * A pre-LN GPT-2 decoder: per layer `x += attn(ln1(x))`, `x += mlp(ln2(x))`, layer norm as
 * norm + mul + add, fused qkv projection split by strided views, causal masked softmax, GELU
 * MLP; a final layer norm.
 */
export function buildGpt2(config: Gpt2Config = GPT2_SMALL): { graph: Graph; ctx: Context } {
  const { layers, dim, heads, seq, ffn } = config;
  const headDim = dim / heads;
  const ctx = new Context();
  const f32 = (shape: readonly [number] | readonly [number, number], name: string): Tensor =>
    ctx.newTensor("f32", shape, name);
  const mask = f32([seq, seq], "causal_mask");
  const layerNorm = (t: Tensor, name: string): Tensor =>
    add(mul(norm(t), f32([dim], `${name}_g`)), f32([dim], `${name}_b`));
  const linear = (t: Tensor, inputs: number, outputs: number, name: string): Tensor =>
    add(mulMat(f32([inputs, outputs], `${name}_w`), t), f32([outputs], `${name}_b`));
  let x = f32([dim, seq], "x");
  for (let l = 0; l < layers; l++) {
    const qkv = linear(layerNorm(x, `l${l}_ln1`), dim, 3 * dim, `l${l}_qkv`); // [3d, seq]
    // q, k, v are strided views of qkv: [headDim, heads, seq] at offsets 0, d, 2d.
    const nb = [4, headDim * 4, 3 * dim * 4, 3 * dim * 4 * seq] as const;
    const part = (i: number): Tensor =>
      view(qkv, [headDim, heads, seq], { nb, offset: i * dim * 4 });
    const q = permute(part(0), [0, 2, 1, 3]); // [headDim, seq, heads]
    const k = permute(part(1), [0, 2, 1, 3]);
    const vT = cont(permute(part(2), [1, 2, 0, 3])); // [seq, headDim, heads]
    const scores = scale(mulMat(k, q), 1 / Math.sqrt(headDim)); // [seq_k, seq_q, heads]
    const p = softmax(scores, { mask });
    const kqv = mulMat(vT, p); // [headDim, seq_q, heads]
    const merged = reshape(cont(permute(kqv, [0, 2, 1, 3])), [dim, seq]);
    x = add(x, linear(merged, dim, dim, `l${l}_attn_out`));
    const hidden = gelu(linear(layerNorm(x, `l${l}_ln2`), dim, ffn, `l${l}_fc`));
    x = add(x, linear(hidden, ffn, dim, `l${l}_proj`));
  }
  const out = layerNorm(x, "ln_f");
  out.name = "out";
  return { graph: Graph.build(out), ctx };
}

/** Plans `graph` {@link PLAN_RUNS} times and prints the benchmark line. */
export function benchLine(name: string, graph: Graph): string {
  const times: number[] = [];
  let plan = planGraph(graph);
  for (let i = 0; i < PLAN_RUNS; i++) {
    const started = performance.now();
    plan = planGraph(graph);
    times.push(performance.now() - started);
  }
  times.sort((a, b) => a - b);
  const ms = times[Math.floor(times.length / 2)] as number;
  return `planner ${name} peak=${plan.peak} lower=${plan.lowerBound} ` +
    `ratio=${(plan.peak / plan.lowerBound).toFixed(4)} naive=${plan.naiveSize} ` +
    `ms=${ms.toFixed(2)}` + (name === "random_10k" ? ` budget_ms=${BUDGET_10K_MS}` : "");
}

/** Planning a 10k-node graph should take at most this long (issue #3). */
const BUDGET_10K_MS = 50;

/** The four benchmark graphs, by name. */
export function benchGraphs(): [string, Graph][] {
  return [
    ["block", buildBlock(DEFAULT_BLOCK).graph],
    ["gpt2_12l_seq128", buildGpt2().graph],
    ["random_1k", randomDag({ seed: 1000, nodes: 1000, sizes: "realistic" }).graph],
    ["random_10k", randomDag({ seed: 10000, nodes: 10000, sizes: "realistic" }).graph],
  ];
}

if (import.meta.main) {
  for (const [name, graph] of benchGraphs()) console.log(benchLine(name, graph));
}
