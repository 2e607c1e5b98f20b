/**
 * Random f32 graphs for testing and benchmarking planners: random ops (add, mul, scale, silu,
 * rmsNorm, softmax, mulMat, cont, cpy; sum to merge stray branches), views (view, reshape, permute, transpose), fan-out,
 * skip connections and several outputs. The same seed builds the same graph, so two copies can
 * be given memory two ways and compared.
 * @module
 */

import { Context } from "../src/context.ts";
import { Graph } from "../src/graph.ts";
import { add, mul, scale, silu } from "../src/ops/elementwise.ts";
import { sum } from "../src/ops/reduce.ts";
import { rmsNorm, softmax } from "../src/ops/norm.ts";
import { mulMat } from "../src/ops/matmul.ts";
import { cont, cpy } from "../src/ops/copy.ts";
import { permute, reshape, transpose, view } from "../src/ops/view.ts";
import { Op } from "../src/op.ts";
import type { Tensor } from "../src/tensor.ts";

/** Options of {@link randomDag}. */
export interface RandomDagOptions {
  /** Seed of the generator (any 32-bit integer). */
  seed: number;
  /** Ops and views to create; the graph keeps those the outputs need (most of them). */
  nodes: number;
  /** "small": dims up to 16, for compute tests; "realistic": dims up to 512, for benchmarks. */
  sizes?: "small" | "realistic";
  /** Extra outputs besides the last node. Default: 0-3, chosen by the seed. */
  extraOutputs?: number;
}

/** A random graph and its inputs. */
export interface RandomDag {
  graph: Graph;
  ctx: Context;
  outputs: Tensor[];
}

/** Recent tensors an op picks its inputs from most of the time (keeps intervals local). */
const RECENT_WINDOW = 6;
/** Chance an input is an older tensor instead: a skip connection or distant fan-out. */
const SKIP_CHANCE = 0.08;
/** How far back (in tensors) a skip connection reaches at most. */
const SKIP_WINDOW = 256;
/** Chance an input is the oldest recent tensor nothing reads yet, so few branches dangle. */
const UNCONSUMED_CHANCE = 0.6;
/** How far back (in computed tensors) an unread tensor is still picked up. */
const UNCONSUMED_LOOKBACK = 16;

const DIMS = {
  small: { inner: [4, 8, 16], rows: [1, 2, 3, 5, 8], batch: [1, 1, 2, 3], elementsMax: 4096 },
  realistic: {
    inner: [64, 128, 256, 512],
    rows: [32, 64, 128],
    batch: [1, 1, 2, 4],
    elementsMax: 1 << 19,
  },
} as const;

/** mulberry32: a small, fast, well-mixed 32-bit generator. */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return (): number => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

type Builder = (a: Tensor) => Tensor | null;

/**
 * Builds a random DAG.
 *
 * @example
 * ```ts
 * import { randomDag } from "./random_dag.ts";
 * const dag = randomDag({ seed: 7, nodes: 50 });
 * console.log(dag.graph.nodes.length > 0); // true
 * ```
 */
export function randomDag(options: RandomDagOptions): RandomDag {
  const random = seededRandom(options.seed);
  const dims = DIMS[options.sizes ?? "small"];
  const pick = <T>(list: readonly T[]): T => list[Math.floor(random() * list.length)] as T;
  const ctx = new Context();
  const pool: Tensor[] = [];
  const computed: Tensor[] = [];
  const leaf = (shape: readonly [number, number, number]): Tensor =>
    ctx.newTensor("f32", [shape[0], shape[1], shape[2]]);
  /** Computed tensors no op reads yet, oldest first. */
  const unconsumed = new Set<Tensor>();
  const input = (): Tensor => {
    const r = random();
    if (r < UNCONSUMED_CHANCE) {
      const waiting = computed.slice(-UNCONSUMED_LOOKBACK).find((t) => unconsumed.has(t));
      if (waiting) return waiting;
    }
    if (r < UNCONSUMED_CHANCE + SKIP_CHANCE || pool.length <= RECENT_WINDOW) {
      return pool[Math.max(0, pool.length - 1 - Math.floor(random() * SKIP_WINDOW))] as Tensor;
    }
    return pool[pool.length - 1 - Math.floor(random() * RECENT_WINDOW)] as Tensor;
  };
  for (let i = 0; i < 2; i++) {
    pool.push(leaf([pick(dims.inner), pick(dims.rows), pick(dims.batch)]));
  }

  const builders: readonly [number, Builder][] = [
    [3, (a) => add(a, binaryOperand(a))],
    [3, (a) => mul(a, binaryOperand(a))],
    [2, (a) => scale(a, 0.5 + random())],
    [3, (a) => silu(a)],
    [2, (a) => rmsNorm(a)],
    [2, (a) => softmax(a, random() < 0.5 ? {} : { mask: leaf([a.ne[0], a.ne[1], 1]) })],
    [4, (a) => mulMat(leaf([a.ne[0], pick(dims.inner), 1]), a)],
    [1, (a) => mulMatOfTwo(a)],
    [1, (a) => cont(a)],
    [1, (a) => permute(a, pick(PERMUTATIONS))],
    [1, (a) => transpose(a)],
    [1, (a) => rowView(a)],
    [1, (a) => (a.isContiguous ? reshape(a, [a.ne[0] * a.ne[1], a.ne[2], a.ne[3]]) : null)],
    [1, (a) => copyInto(a)],
  ];
  const totalWeight = builders.reduce((sum, [w]) => sum + w, 0);

  function binaryOperand(a: Tensor): Tensor {
    const r = random();
    if (r < 0.4) {
      const same = pool.slice(-RECENT_WINDOW).filter((t) => t !== a && sameNe(t, a));
      if (same.length > 0) return pick(same);
    }
    if (r < 0.7) return leaf([a.ne[0], 1, 1]);
    return ctx.newTensor("f32", [a.ne[0], a.ne[1], a.ne[2], a.ne[3]]);
  }
  // Attention-like: two computed tensors with a shared inner dim.
  function mulMatOfTwo(b: Tensor): Tensor | null {
    const partners = pool.slice(-RECENT_WINDOW * 2).filter((a) =>
      a !== b && a.ne[0] === b.ne[0] && b.ne[2] % a.ne[2] === 0 && b.ne[3] % a.ne[3] === 0
    );
    return partners.length > 0 ? mulMat(pick(partners), b) : null;
  }
  function rowView(a: Tensor): Tensor | null {
    if (a.ne[1] < 2) return null;
    const first = Math.floor(random() * (a.ne[1] - 1));
    const rows = 1 + Math.floor(random() * (a.ne[1] - first));
    return view(a, [a.ne[0], rows, a.ne[2], a.ne[3]], { nb: a.nb, offset: first * a.nb[1] });
  }
  // cpy into an earlier computed tensor of the same size: it must stay live until then.
  function copyInto(a: Tensor): Tensor | null {
    const targets = computed.slice(-RECENT_WINDOW * 2).filter((b) =>
      b.nelements === a.nelements && b.memoryOwner !== a.memoryOwner &&
      b.memoryOwner.op !== Op.none
    );
    return targets.length > 0 ? cpy(a, pick(targets)) : null;
  }

  const step = (): void => {
    let r = random() * totalWeight;
    let builder = (builders[0] as [number, Builder])[1];
    for (const [weight, b] of builders) {
      r -= weight;
      if (r < 0) {
        builder = b;
        break;
      }
    }
    const made = builder(input());
    if (made === null || made.nelements > dims.elementsMax) return;
    record(made);
    // A tensor leaving the lookback unread joins the newest one (as real nets merge branches
    // with residual adds), so nearly every tensor made is in the graph.
    while (checked < computed.length - UNCONSUMED_LOOKBACK) {
      const leaving = computed[checked++] as Tensor;
      if (!unconsumed.has(leaving)) continue;
      const total = sum(leaving);
      record(total);
      record(add(computed.at(-2) as Tensor, total));
    }
  };
  let checked = 0;
  function record(made: Tensor): void {
    for (const source of made.src) unconsumed.delete(source);
    unconsumed.add(made);
    pool.push(made);
    computed.push(made);
  }
  const extra = options.extraOutputs ?? Math.floor(random() * 4);
  const extras: Tensor[] = [];
  // Grow until the outputs need `nodes` tensors: unreachable branches are not in the graph.
  while (computed.length < options.nodes) step();
  for (let i = 0; i < extra; i++) extras.push(pick(computed));
  let attempts = 0;
  while (reachable([...extras, computed.at(-1) as Tensor]) < options.nodes) {
    for (let i = 0; i < Math.max(1, options.nodes >> 6); i++) step();
    if (++attempts > GROW_ATTEMPTS_MAX) break;
  }
  const outputs = [computed.at(-1) as Tensor, ...extras];
  return { graph: Graph.build(...outputs), ctx, outputs };
}

/** Rounds of growth before a graph smaller than asked is accepted. */
const GROW_ATTEMPTS_MAX = 64;

/** Computed tensors (views included) the outputs depend on; iterative, deep graphs are fine. */
function reachable(outputs: readonly Tensor[]): number {
  const seen = new Set<number>();
  const stack = [...outputs];
  let count = 0;
  while (stack.length > 0) {
    const t = stack.pop() as Tensor;
    if (seen.has(t.id)) continue;
    seen.add(t.id);
    if (t.op !== Op.none) count++;
    for (const s of t.src) stack.push(s);
  }
  return count;
}

const PERMUTATIONS: readonly (readonly [number, number, number, number])[] = [
  [0, 2, 1, 3],
  [1, 0, 2, 3],
  [2, 0, 1, 3],
  [1, 2, 0, 3],
];

function sameNe(a: Tensor, b: Tensor): boolean {
  return a.ne[0] === b.ne[0] && a.ne[1] === b.ne[1] && a.ne[2] === b.ne[2] &&
    a.ne[3] === b.ne[3];
}
