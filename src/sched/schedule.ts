/**
 * A schedule runs one graph across several backends: its splits in order, each preceded by the
 * copies of its inputs, with one planned buffer per backend shared by that backend's splits.
 * @module
 */

import type { Backend, BackendBuffer, GraphPlan } from "../backend/backend.ts";
import { allocTensors } from "../alloc/alloc_tensors.ts";
import type { TensorData } from "../dtype.ts";
import { DisposedError, GraftError } from "../errors.ts";
import type { Graph } from "../graph.ts";
import { graphToDot } from "../viz/graph_dot.ts";
import { isViewOp, Op, opName } from "../op.ts";
import type { Tensor } from "../tensor.ts";
import {
  assignBackends,
  assignLeafs,
  assignMemoryFollowers,
  type Assignment,
  type AssignOptions,
  followsMemory,
  supports,
} from "./assign.ts";
import { buildSplits, type Split, type SplitInput, type SplitSet } from "./splits.ts";

/** A hand-marked cut: every node up to and including `upTo` (in graph order) runs on `backend`. */
export interface Cut {
  /** The last node of this split (nodes after the previous cut up to it). */
  upTo: Tensor;
  /** The backend that computes them. */
  backend: Backend;
  /** The tensors that cross into this split; if given, they are checked against the schedule. */
  inputs?: readonly Tensor[];
}

/** Per-backend figures of one {@link Schedule.compute}. */
export interface BackendTimes {
  /** Milliseconds spent copying inputs into this backend. */
  copyMs: number;
  /** Milliseconds computing this backend's splits. */
  computeMs: number;
  /** Bytes copied into this backend. */
  bytesCopied: number;
}

/** What {@link Schedule.compute} measured. */
export interface ComputeStats {
  /** Figures per backend name. */
  backends: Record<string, BackendTimes>;
  /** Bytes copied between backends in all. */
  bytesCopied: number;
  /** Leaf inputs not copied because their source was not written since the last copy. */
  copiesSkipped: number;
}

/** Options of {@link Schedule.compute}. */
export interface ComputeOptions {
  /**
   * Wait for each backend after its copies and after its compute, so that `copyMs` and
   * `computeMs` are what each took (default false: no waits between splits, which is faster).
   */
  profile?: boolean;
}

/**
 * Allocates the memory of a backend's split graphs. `keep` holds the graph's final outputs:
 * other split outputs only need to live until the last split that reads them. `allocGraph`
 * fits this type.
 */
export type SplitAllocator = (
  backend: Backend,
  graphs: Graph[],
  options: { keep: ReadonlySet<Tensor> },
) => BackendBuffer;

const everyTensorItsOwnBlock: SplitAllocator = (backend, graphs) =>
  allocTensors(backend, graphs.flatMap((g) => g.nodes));

/** Options of {@link Schedule.create}. */
export interface ScheduleOptions extends AssignOptions {
  /** How a backend's split graphs get memory (default: every tensor its own block). */
  allocate?: SplitAllocator;
}

/**
 * A graph split across backends.
 *
 * @example
 * ```ts
 * import { allocTensors, Context, CpuBackend, Graph, mulMat, Schedule, silu } from "../../mod.ts";
 * // Two backends (a WebGpuBackend and a CpuBackend, say; two CPU ones here): each weight lives
 * // on one, and every node runs where its weight is.
 * using a = new CpuBackend({ threads: 1, name: "a" });
 * using b = new CpuBackend({ threads: 1, name: "b" });
 * const ctx = new Context();
 * const x = ctx.newTensor("f32", [16, 4], "x");
 * const w1 = ctx.newTensor("f32", [16, 16], "w1");
 * const w2 = ctx.newTensor("f32", [16, 16], "w2");
 * const output = mulMat(w2, silu(mulMat(w1, x)));
 * using _a = allocTensors(a, [x, w1]);
 * using _b = allocTensors(b, [w2]);
 * for (const t of [x, w1]) a.setTensor(t, new Float32Array(t.nelements).fill(0.1));
 * b.setTensor(w2, new Float32Array(w2.nelements).fill(0.1));
 * using schedule = Schedule.create(Graph.build(output), { backends: [b, a] });
 * console.log(schedule.report());
 * await schedule.compute();
 * const out = await schedule.getOutput(output);
 * console.log(out.length); // 64
 * ```
 */
export class Schedule implements Disposable {
  /** The graph being scheduled. */
  readonly graph: Graph;
  /** The splits, in execution order. */
  readonly splits: readonly Split[];
  /** Every tensor's backend and the reason. */
  readonly assignment: ReadonlyMap<Tensor, Assignment>;
  readonly #set: SplitSet;
  readonly #buffers: BackendBuffer[] = [];
  readonly #plans: GraphPlan[] = [];
  /** Per leaf input: its buffer's write count when it was last copied. */
  readonly #copiedAt = new Map<SplitInput, number>();
  #disposed = false;

  private constructor(graph: Graph, assignment: Map<Tensor, Assignment>, allocate: SplitAllocator) {
    this.graph = graph;
    this.assignment = assignment;
    this.#set = buildSplits(graph, assignment);
    this.splits = this.#set.splits;
    try {
      this.#allocate(allocate);
      for (const split of this.splits) this.#plans.push(split.backend.graphPlanCreate(split.graph));
    } catch (error) {
      this.dispose();
      throw error;
    }
  }

  /** Assigns backends automatically (see `assign.ts`) and builds the splits. */
  static create(graph: Graph, options: ScheduleOptions): Schedule {
    return new Schedule(
      graph,
      assignBackends(graph, options),
      options.allocate ?? everyTensorItsOwnBlock,
    );
  }

  /** Builds the splits from hand-marked cuts (the reference design's manual splits). */
  static fromCuts(graph: Graph, cuts: readonly Cut[], allocate?: SplitAllocator): Schedule {
    const assignment = manualAssignment(graph, cuts);
    const schedule = new Schedule(graph, assignment, allocate ?? everyTensorItsOwnBlock);
    try {
      schedule.#checkDeclaredInputs(cuts);
    } catch (error) {
      schedule.dispose();
      throw error;
    }
    return schedule;
  }

  #allocate(allocate: SplitAllocator): void {
    const byBackend = new Map<Backend, Split[]>();
    for (const split of this.splits) {
      byBackend.set(split.backend, [...(byBackend.get(split.backend) ?? []), split]);
    }
    for (const [backend, splits] of byBackend) {
      const copies = splits.flatMap((s) => s.inputs.map((i) => i.copy));
      if (copies.length > 0) this.#buffers.push(allocTensors(backend, copies));
      const graphs = splits.map((s) => s.graph);
      // A backend whose splits only write memory that exists already (cpy into a leaf, views)
      // needs no buffer of its own.
      if (!graphs.some((g) => g.nodes.some((n) => n.placement === null))) continue;
      this.#buffers.push(allocate(backend, graphs, { keep: this.#set.finals }));
    }
  }

  #checkDeclaredInputs(cuts: readonly Cut[]): void {
    for (const cut of cuts) {
      if (!cut.inputs) continue;
      const end = this.result(cut.upTo);
      const split = this.splits.find((s) => s.nodes.includes(end.memoryOwner));
      const copies = new Set(split?.inputs.map((i) => i.copy));
      for (const declared of cut.inputs) {
        const copy = this.#set.local.get(cut.backend)?.get(declared);
        if (!copy || !copies.has(copy)) {
          throw new GraftError(
            `schedule: declared input ${declared.label} does not cross into the split ending ` +
              `at ${cut.upTo.label}`,
          );
        }
      }
    }
  }

  /** The tensor that holds `tensor`'s value after compute (on the backend that computed it). */
  result(tensor: Tensor): Tensor {
    const assigned = this.assignment.get(tensor);
    const local = assigned && this.#set.local.get(assigned.backend)?.get(tensor);
    if (!local) throw new GraftError(`schedule: ${tensor.label} is not in the scheduled graph`);
    return local;
  }

  /** Reads an output's value (from whichever backend computed it). */
  getOutput(tensor: Tensor): Promise<TensorData> {
    const local = this.result(tensor);
    return local.placement!.buffer.backend.getTensorAsync(local);
  }

  /** Reads an output's value into `into` (exactly its bytes), as {@link getOutput} without a new array. */
  getOutputInto(tensor: Tensor, into: ArrayBufferView): Promise<void> {
    const local = this.result(tensor);
    return local.placement!.buffer.backend.getTensorIntoAsync(local, into);
  }

  /**
   * Copies each split's inputs, then computes it, in order, and resolves once every backend
   * has finished. An input that is a leaf (or a view of one) in a buffer that counts its writes
   * (CPU buffers: see `CpuBuffer.writeGeneration`) is copied only when that buffer was written
   * since the last copy, so weights that stay put cross once; memory written behind the
   * backend's back needs `markWritten()`. Backends are not waited on between splits unless
   * `profile` is set: a split's reads from a device already wait for the work before them, and
   * device work overlaps what comes next. Per-backend times are exact only with `profile`.
   */
  async compute(options: ComputeOptions = {}): Promise<ComputeStats> {
    if (this.#disposed) throw new DisposedError("Schedule.compute: schedule is disposed");
    const profile = options.profile ?? false;
    const backends: Record<string, BackendTimes> = {};
    const used = new Set<Backend>();
    let bytesCopied = 0;
    let copiesSkipped = 0;
    for (const [index, split] of this.splits.entries()) {
      used.add(split.backend);
      const times = backends[split.backend.name] ??= { copyMs: 0, computeMs: 0, bytesCopied: 0 };
      const started = performance.now();
      const due = split.inputs.filter((input) => this.#copyDue(input));
      copiesSkipped += split.inputs.length - due.length;
      // All of a split's copies at once: reads back from a device then share one wait.
      const copies = await Promise.allSettled(
        due.map((input) => split.backend.cpyTensorFrom(input.source, input.copy)),
      );
      const failed = copies.find((c): c is PromiseRejectedResult => c.status === "rejected");
      if (failed) {
        for (const input of due) this.#copiedAt.delete(input);
        throw failed.reason;
      }
      for (const input of due) {
        times.bytesCopied += input.copy.nbytes;
        bytesCopied += input.copy.nbytes;
      }
      if (profile) await split.backend.synchronize();
      const copied = performance.now();
      split.backend.graphPlanCompute(this.#plans[index]!, split.graph);
      if (profile) await split.backend.synchronize();
      times.copyMs += copied - started;
      times.computeMs += performance.now() - copied;
    }
    if (!profile) {
      const waited = performance.now();
      for (const backend of used) await backend.synchronize();
      const last = this.splits[this.splits.length - 1];
      if (last) backends[last.backend.name]!.computeMs += performance.now() - waited;
    }
    return { backends, bytesCopied, copiesSkipped };
  }

  // A leaf's copy stays good while its buffer's write count is the one seen at the last copy.
  // The copy itself lives in the schedule's own buffer, which no split writes.
  #copyDue(input: SplitInput): boolean {
    if (!isLeafMemory(input.source)) return true;
    const generation = input.source.placement?.buffer.writeGeneration;
    if (generation === undefined) return true;
    if (this.#copiedAt.get(input) === generation) return false;
    this.#copiedAt.set(input, generation);
    return true;
  }

  /**
   * One line per split: backend, node count, inputs copied in; then one line per node that
   * runs on a fallback backend because a preferred one lacks its op.
   */
  report(): string {
    const splits = this.splits.map((s) => {
      const work = s.nodes.filter((n) => !isViewOp(n.op)).length;
      const bytes = s.inputs.reduce((sum, i) => sum + i.copy.nbytes, 0);
      const inputs = s.inputs.map((i) => `${i.copy.name} (${i.copy.nbytes} B from ${i.from.name})`);
      return `split ${s.index} ${s.backend.name}: ${work} nodes, ${s.inputs.length} inputs ` +
        `${bytes} B${inputs.length ? `: ${inputs.join(", ")}` : ""}`;
    });
    const fallbacks = this.graph.nodes.flatMap((n) => {
      const a = this.assignment.get(n)!;
      return a.lacking
        ? [`fallback: ${opName(n.op)} ${n.label} runs on ${a.backend.name}: ${lackingText(a)}`]
        : [];
    });
    return [...splits, ...fallbacks].join("\n");
  }

  /** One line per node: which backend runs it, and why. */
  explain(): string {
    return this.graph.nodes.map((n, i) => {
      const a = this.assignment.get(n)!;
      const why = a.lacking ? `${a.reason}: ${lackingText(a)}` : a.reason;
      return `node${i} ${opName(n.op)} ${n.label}: ${a.backend.name} (${why})`;
    }).join("\n");
  }

  /**
   * The graph as Graphviz DOT text: a box per split around its nodes, every tensor filled by
   * its backend, and the edges that cross between backends (the copies) in red.
   *
   * @example
   * ```ts
   * import { allocTensors, Context, CpuBackend, Graph, mulMat, Schedule } from "../../mod.ts";
   * using a = new CpuBackend({ threads: 1, name: "a" });
   * using b = new CpuBackend({ threads: 1, name: "b" });
   * const ctx = new Context();
   * const x = ctx.newTensor("f32", [8, 2], "x");
   * const w1 = ctx.newTensor("f32", [8, 8], "w1");
   * const w2 = ctx.newTensor("f32", [8, 8], "w2");
   * using _a = allocTensors(a, [x, w1]);
   * using _b = allocTensors(b, [w2]);
   * using schedule = Schedule.create(Graph.build(mulMat(w2, mulMat(w1, x))), { backends: [b, a] });
   * const path = await Deno.makeTempFile({ suffix: ".dot" });
   * await Deno.writeTextFile(path, schedule.toDot()); // render with: dot -Tsvg
   * ```
   */
  toDot(): string {
    const splitOf = new Map<Tensor, Split>();
    for (const split of this.splits) for (const local of split.nodes) splitOf.set(local, split);
    const backendOf = (t: Tensor): Backend => this.assignment.get(t)!.backend;
    return graphToDot(this.graph, {
      title: `${this.splits.length} splits over ${
        [...new Set(this.splits.map((s) => s.backend.name))].join(", ")
      }`,
      groupOf: (t) => backendOf(t).name,
      clusterOf: (t) => {
        // A view sits with the split that computes its memory; views of leafs with none.
        let local: Tensor | null = t.op === Op.none ? null : this.result(t);
        while (local && !splitOf.has(local)) local = local.viewSource;
        const split = local && splitOf.get(local);
        return split
          ? { id: String(split.index), label: `split ${split.index} ${split.backend.name}` }
          : undefined;
      },
      edgeLabel: (source, consumer) =>
        backendOf(source) === backendOf(consumer) ? undefined : `copy ${source.nbytes} B`,
    });
  }

  /** Frees the plans and the buffers of every split. */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    for (const plan of this.#plans.splice(0)) plan.dispose();
    for (const buffer of this.#buffers.splice(0)) buffer.dispose();
  }

  /** Same as {@link dispose} (for `using`). */
  [Symbol.dispose](): void {
    this.dispose();
  }
}

/** "webgpu lacks it" for a fallback assignment. */
function lackingText(a: Assignment): string {
  return `${(a.lacking ?? []).map((b) => b.name).join(", ")} lacks it`;
}

/** True when `t` is a leaf or a view of one: no node of the schedule computes its memory. */
function isLeafMemory(t: Tensor): boolean {
  let at: Tensor | null = t;
  while (at.viewSource) {
    if (!isViewOp(at.op)) return false;
    at = at.viewSource;
  }
  return at.op === Op.none;
}

/** Backends from hand-marked cuts; views and cpy still go where their memory is. */
export function manualAssignment(graph: Graph, cuts: readonly Cut[]): Map<Tensor, Assignment> {
  if (cuts.length === 0) throw new GraftError("schedule: give at least one cut");
  const assignment = assignLeafs(graph, [...new Set(cuts.map((c) => c.backend))]);
  let cut = 0;
  for (const node of graph.nodes) {
    const current = cuts[cut];
    if (!current) {
      throw new GraftError(
        `schedule: ${node.label} comes after the last cut; end the last cut at the output`,
      );
    }
    if (!followsMemory(node)) {
      if (!supports(current.backend, node)) {
        throw new GraftError(
          `schedule: the cut puts ${opName(node.op)} ${node.label} on ` +
            `${current.backend.name}, which does not support it`,
        );
      }
      assignment.set(node, { backend: current.backend, reason: "manual cut" });
    }
    if (node === current.upTo) cut++;
  }
  assignMemoryFollowers(graph, assignment);
  return assignment;
}
