/**
 * The memory planner: gives every computed tensor of one or more graphs an offset in a single
 * buffer, reusing memory in place and after last use, and sized exactly by measuring first.
 *
 * 1. {@link analyzeLifetimes} walks the nodes in run order: views and cpy share their source's
 *    memory, a node takes over its first source's memory when {@link inPlaceRule} and the
 *    layout allow and nothing reads that memory later, and every other node starts a block
 *    live until its memory's last use (outputs: until the end).
 * 2. Two strategies place the blocks: "greedy" replays ggml-alloc's walk through the Zig
 *    best-fit allocator in measure mode; "offline" packs the known intervals, biggest first.
 *    The smaller plan is kept.
 * 3. {@link allocGraph} allocates one buffer of the plan's size and places each tensor.
 * @module
 */

import type { Backend, BackendBuffer } from "../backend/backend.ts";
import { GraftError, PlacementError } from "../errors.ts";
import type { Graph } from "../graph.ts";
import { opName } from "../op.ts";
import { clearOverwritten, markOverwritten } from "./reuse.ts";
import type { Tensor } from "../tensor.ts";
import { type BlockOffsets, planGreedy } from "./greedy.ts";
import {
  analyzeLifetimes,
  type Lifetimes,
  markPlanned,
  placedByPlanner,
  reservedSize,
} from "./lifetimes.ts";
import { planOffline } from "./offline.ts";

/** Default offset alignment: the CPU backend's (one cache line). */
export const DEFAULT_PLAN_ALIGNMENT = 64;

/** How blocks are placed: "auto" plans both ways and keeps the smaller. */
export type PlanStrategy = "greedy" | "offline";

/** Options of {@link planGraph} and {@link allocGraph}. */
export interface PlanOptions {
  /** Offset alignment (a power of two). Default: the backend's, else 64. */
  alignment?: number;
  /** Force one strategy; default "auto" (the smaller plan). */
  strategy?: PlanStrategy | "auto";
  /**
   * The tensors kept to the end of the last graph: never overwritten, readable after a compute.
   * Default: every graph's outputs. A scheduler passes the final outputs only, so results one
   * split hands to a later split are freed after their last use there; add an intermediate to
   * read it after a compute (one whose memory is reused is refused on read, naming this option).
   */
  keep?: ReadonlySet<Tensor>;
  /**
   * Nodes the backend computes inside a later node, each mapped to that node (a fused pair's
   * intermediate, see `Backend.fusedAway`): they get no memory, and what they read stays live
   * until that node. `allocGraph` asks the backend; default none.
   */
  fused?: ReadonlyMap<Tensor, Tensor>;
}

/** Where one tensor lives in a plan, and when. */
export interface PlanBlock {
  /** The planned tensor. */
  readonly tensor: Tensor;
  /** Byte offset in the planned buffer. */
  readonly offset: number;
  /** Bytes the tensor uses (`tensor.nbytes`). */
  readonly size: number;
  /** Bytes its block reserves (aligned; shared with in-place neighbours). */
  readonly reserved: number;
  /** Step (index into the run of all graphs' nodes) that computes it first. */
  readonly firstUse: number;
  /** Last step that touches its memory (the end of the run for outputs). */
  readonly lastUse: number;
  /** The tensor whose memory it overwrote in place (its source's memory owner), or null. */
  readonly inPlaceOf: Tensor | null;
  /** Block number: tensors sharing memory in place share it. */
  readonly block: number;
}

/**
 * A memory plan: offsets for every computed tensor of some graphs, in one buffer of `size`.
 *
 * @example
 * ```ts
 * import { add, Context, Graph, silu } from "../../mod.ts";
 * import { planGraph } from "./planner.ts";
 * const ctx = new Context();
 * const x = ctx.newTensor("f32", [1024]);
 * const y = add(silu(silu(x)), x);
 * const plan = planGraph(Graph.build(y));
 * console.log(plan.size, plan.lowerBound); // 4096 4096: both silus and add share one block
 * ```
 */
export class MemoryPlan {
  /** The graphs planned, in run order. */
  readonly graphs: readonly Graph[];
  /** Bytes of buffer the plan needs (the chosen strategy's peak). */
  readonly size: number;
  /** Same as {@link size}: the highest byte any block reaches. */
  readonly peak: number;
  /** The most bytes live at one step: no placement of these blocks can use less. */
  readonly lowerBound: number;
  /** Bytes if every planned tensor had its own block (no reuse at all). */
  readonly naiveSize: number;
  /** The strategy whose offsets the plan uses. */
  readonly strategy: PlanStrategy;
  /** Peak of each strategy that was run. */
  readonly strategySizes: Readonly<Partial<Record<PlanStrategy, number>>>;
  /** Offset alignment of every block. */
  readonly alignment: number;
  /** One entry per planned tensor, in order of first use. */
  readonly blocks: readonly PlanBlock[];
  /** Steps in the run (nodes of all graphs, views included). */
  readonly steps: number;
  /** Distinct memory blocks (tensors minus in-place takeovers). */
  readonly blockCount: number;
  /** Milliseconds planning took. */
  readonly planMs: number;
  readonly #life: Lifetimes;
  readonly #offsets: Float64Array;
  readonly #offsetById: Map<number, number>;

  /** Use {@link planGraph}. */
  constructor(init: {
    graphs: readonly Graph[];
    life: Lifetimes;
    chosen: BlockOffsets;
    strategy: PlanStrategy;
    strategySizes: Partial<Record<PlanStrategy, number>>;
    alignment: number;
    planMs: number;
  }) {
    const life = init.life;
    this.graphs = init.graphs;
    this.#life = life;
    this.#offsets = init.chosen.offsets;
    this.size = init.chosen.size;
    this.peak = init.chosen.size;
    this.strategy = init.strategy;
    this.strategySizes = init.strategySizes;
    this.alignment = init.alignment;
    this.lowerBound = lowerBound(life);
    this.steps = life.timeline.length;
    this.blockCount = life.blockCount;
    this.planMs = init.planMs;
    this.#offsetById = new Map();
    const blocks: PlanBlock[] = [];
    let naive = 0;
    life.tensors.forEach((tensor, i) => {
      const block = life.tensorBlock[i] as number;
      const offset = this.#offsets[block] as number;
      this.#offsetById.set(tensor.id, offset);
      naive += reservedSize(tensor, init.alignment);
      blocks.push({
        tensor,
        offset,
        size: tensor.nbytes,
        reserved: life.blockSize[block] as number,
        firstUse: life.tensorFirst[i] as number,
        lastUse: life.tensorLast[i] as number,
        inPlaceOf: life.inPlaceOf[i] ?? null,
        block,
      });
    });
    this.blocks = blocks;
    this.naiveSize = naive;
  }

  /** The planned offset of `tensor`, or undefined if the plan does not place it. */
  offsetOf(tensor: Tensor): number | undefined {
    return this.#offsetById.get(tensor.id);
  }

  /**
   * Places every planned tensor in `buffer` (at least {@link size} bytes) at its planned offset.
   * As in ggml-alloc, the real buffer replays the offsets the measure pass recorded rather than
   * walking an allocator again: a bounded allocator's best fit can pick differently once the
   * free tail of the buffer is finite, and the recorded offsets are what the size was measured
   * for.
   */
  place(buffer: BackendBuffer): void {
    if (buffer.size < this.size) {
      throw new PlacementError(
        `MemoryPlan.place: the plan needs ${this.size} bytes, the buffer has ${buffer.size}`,
      );
    }
    if (buffer.alignment % this.alignment !== 0 && this.alignment % buffer.alignment !== 0) {
      throw new PlacementError(
        `MemoryPlan.place: plan alignment ${this.alignment} does not suit the buffer's ` +
          `${buffer.alignment}`,
      );
    }
    for (const block of this.blocks) {
      const where = block.tensor.placement;
      if (!where) continue;
      if (!placedByPlanner(block.tensor)) {
        throw new PlacementError(
          `MemoryPlan.place: ${block.tensor.label} was given memory after planning; plan again`,
        );
      }
      if (!where.buffer.disposed) {
        throw new PlacementError(
          `MemoryPlan.place: ${block.tensor.label} is still placed by an earlier plan in a live ` +
            `buffer of ${where.buffer.size} bytes; dispose that buffer first`,
        );
      }
    }
    // A fused-away node an earlier plan placed in a buffer since disposed keeps no stale
    // memory (the backend computes it inside another node, and nothing may read it).
    for (const t of this.#life.fusedAway) {
      if (t.placement?.buffer.disposed && placedByPlanner(t)) t.unplace();
    }
    for (const block of this.blocks) {
      // A tensor an earlier plan placed in a buffer since disposed moves to this one.
      if (block.tensor.placement) block.tensor.unplace();
      clearOverwritten(block.tensor);
      block.tensor.place(buffer, block.offset);
      markPlanned(block.tensor, buffer);
    }
    markReused(this.blocks);
  }

  /** Allocates one buffer of {@link size} bytes on `backend` and places every tensor in it. */
  allocate(backend: Backend): BackendBuffer {
    if (this.blocks.length === 0) {
      throw new GraftError("MemoryPlan.allocate: no tensor of the graphs needs memory");
    }
    const buffer = backend.allocBuffer(this.size);
    try {
      this.place(buffer);
    } catch (error) {
      buffer.dispose();
      throw error;
    }
    return buffer;
  }

  /** A readable summary: sizes, bound, strategy, reuse and the biggest blocks. */
  report(): string {
    const mib = (n: number): string => `${(n / 1048576).toFixed(2)} MiB`;
    const inPlace = this.blocks.filter((b) => b.inPlaceOf !== null).length;
    const computed = this.#life.timeline.filter((t) => !t.isView).length;
    const sizes = Object.entries(this.strategySizes).map(([k, v]) => `${k} ${v}`).join(", ");
    const lines = [
      `memory plan: ${this.graphs.length} graph(s), ${this.steps} steps ` +
      `(${computed} computed), ${this.blocks.length} tensors in ${this.blockCount} blocks ` +
      `(${inPlace} in place)`,
      `  strategy     ${this.strategy} (${sizes})`,
      `  size         ${this.size} bytes (${mib(this.size)})`,
      `  lower bound  ${this.lowerBound} bytes (size/lower ${ratio(this.size, this.lowerBound)})`,
      `  naive        ${this.naiveSize} bytes (every tensor its own block; ` +
      `${ratio(this.naiveSize, this.size)}x the plan)`,
      `  planned in   ${this.planMs.toFixed(2)} ms`,
    ];
    const biggest = [...this.blocks].sort((a, b) => b.size - a.size).slice(0, REPORT_BIGGEST);
    lines.push(`  biggest tensors:`);
    for (const b of biggest) {
      lines.push(
        `    ${b.tensor.label} ${opName(b.tensor.op)} @${b.offset} ${b.size} bytes ` +
          `steps ${b.firstUse}-${b.lastUse}${
            b.inPlaceOf ? ` in place of ${b.inPlaceOf.label}` : ""
          }`,
      );
    }
    return lines.join("\n");
  }
}

/**
 * Records which planned tensors have their memory written by a later tensor of the plan (an
 * in-place takeover, or a block placed over theirs after their last use): reading one after a
 * compute would return the later tensor's bytes, so backends refuse it (see
 * `requireReadable`). Keep a tensor with the `keep` option, or make it an output, to read it.
 */
function markReused(blocks: readonly PlanBlock[]): void {
  const byOffset = [...blocks].sort((a, b) => a.offset - b.offset);
  for (let i = 0; i < byOffset.length; i++) {
    const a = byOffset[i]!;
    const aEnd = a.offset + a.reserved;
    for (let j = i + 1; j < byOffset.length && byOffset[j]!.offset < aEnd; j++) {
      const b = byOffset[j]!;
      // Live blocks never overlap: of two overlapping ones, the later reuses the earlier.
      const [earlier, later] = a.firstUse <= b.firstUse ? [a, b] : [b, a];
      if (earlier.tensor !== later.tensor) overwritten(earlier.tensor, later.tensor);
    }
  }
  // Within one block (in-place chains) the later tensor takes over the earlier one's memory.
  for (const block of blocks) {
    if (block.inPlaceOf) overwritten(block.inPlaceOf, block.tensor);
  }
}

/**
 * Marks `earlier` unreadable unless it is an output of its graph: a graph's outputs are read by
 * whoever built it (a schedule copies its splits' outputs to the next split before any later
 * graph of the plan runs), intermediates are not.
 */
function overwritten(earlier: Tensor, later: Tensor): void {
  if (!earlier.isOutput) markOverwritten(earlier, later);
}

/** Tensors listed in {@link MemoryPlan.report}. */
export const REPORT_BIGGEST = 5;

function ratio(a: number, b: number): string {
  return b === 0 ? "1.000" : (a / b).toFixed(3);
}

/** The most bytes of blocks live at one step (a sweep over start and end events). */
function lowerBound(life: Lifetimes): number {
  const delta = new Float64Array(life.timeline.length + 1);
  for (let b = 0; b < life.blockCount; b++) {
    delta[life.blockStart[b] as number]! += life.blockSize[b] as number;
    delta[(life.blockEnd[b] as number) + 1]! -= life.blockSize[b] as number;
  }
  let live = 0, most = 0;
  for (let s = 0; s < life.timeline.length; s++) {
    live += delta[s] as number;
    most = Math.max(most, live);
  }
  return most;
}

/**
 * Plans memory for `graphs` (run in order, sharing one buffer). Leafs and tensors that already
 * have memory are left alone; views and cpy use their source's memory. With several graphs
 * (the splits of one backend, say) the steps of all of them form one timeline: a tensor lives
 * until the last step of any graph that touches it, outputs of every graph until the end, so
 * later graphs reuse the memory of earlier graphs' intermediates.
 *
 * @example
 * ```ts
 * import { Context, Graph, mulMat, silu } from "../../mod.ts";
 * import { planGraph } from "./planner.ts";
 * const ctx = new Context();
 * const w = ctx.newTensor("f32", [64, 64]);
 * let h = ctx.newTensor("f32", [64, 8]);
 * for (let i = 0; i < 4; i++) h = silu(mulMat(w, h));
 * const plan = planGraph(Graph.build(h));
 * console.log(plan.peak <= plan.naiveSize / 2); // true
 * ```
 */
export function planGraph(graphs: Graph | readonly Graph[], options: PlanOptions = {}): MemoryPlan {
  const started = performance.now();
  const list: readonly Graph[] = Array.isArray(graphs) ? graphs : [graphs as Graph];
  if (list.length === 0) throw new GraftError("planGraph: give at least one graph");
  const alignment = options.alignment ?? DEFAULT_PLAN_ALIGNMENT;
  if (!Number.isInteger(alignment) || alignment < 1 || (alignment & (alignment - 1)) !== 0) {
    throw new GraftError(`planGraph: alignment must be a power of two, got ${alignment}`);
  }
  const wanted = options.strategy ?? "auto";
  const life = analyzeLifetimes(list, alignment, options.keep, options.fused);
  const sizes: Partial<Record<PlanStrategy, number>> = {};
  let chosen: BlockOffsets | null = null;
  let strategy: PlanStrategy = "greedy";
  if (wanted !== "offline") {
    chosen = planGreedy(life, alignment);
    sizes.greedy = chosen.size;
  }
  if (wanted !== "greedy") {
    const offline = planOffline(life);
    sizes.offline = offline.size;
    if (chosen === null || offline.size < chosen.size) {
      chosen = offline;
      strategy = "offline";
    }
  }
  return new MemoryPlan({
    graphs: list,
    life,
    chosen: chosen as BlockOffsets,
    strategy,
    strategySizes: sizes,
    alignment,
    planMs: performance.now() - started,
  });
}

/**
 * Plans `graphs`, allocates one buffer of exactly the plan's size on `backend`, and places every
 * planned tensor in it. Dispose the buffer to free them all.
 *
 * @example
 * ```ts
 * import { allocGraph, allocTensors, Context, CpuBackend, Graph, scale, silu } from "../../mod.ts";
 * using cpu = new CpuBackend({ threads: 1 });
 * const ctx = new Context();
 * const x = ctx.newTensor("f32", [256]);
 * const y = scale(silu(x), 2);
 * const graph = Graph.build(y);
 * using inputs = allocTensors(cpu, ctx.tensors);
 * using memory = allocGraph(cpu, graph);
 * cpu.setTensor(x, new Float32Array(256).fill(1));
 * cpu.graphCompute(graph);
 * console.log(memory.size); // 1024: y overwrote silu(x) in place
 * ```
 */
export function allocGraph(
  backend: Backend,
  graphs: Graph | readonly Graph[],
  options: PlanOptions = {},
): BackendBuffer {
  const list: readonly Graph[] = Array.isArray(graphs) ? graphs : [graphs as Graph];
  const fused = options.fused ?? backend.fusedAway?.(list);
  return planGraph(list, {
    alignment: backend.alignment,
    ...options,
    ...(fused && fused.size > 0 ? { fused } : {}),
  }).allocate(backend);
}
