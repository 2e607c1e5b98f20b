/**
 * The analysis both planning strategies share: one timeline over the graphs' nodes, the last
 * step at which each tensor's memory is touched (through itself, a view or a cpy), in-place
 * decisions, and the resulting blocks: one interval of steps and one size per piece of memory.
 *
 * Semantics of several graphs: they run one after another on a single timeline (graph 0's
 * nodes, then graph 1's, ...). A tensor's memory is live from the first step that computes it
 * to the last step of any graph that reads or writes it, so a tensor one graph computes and a
 * later graph reads stays live in between. Graph outputs (`isOutput`; with `keep`, only those
 * in it) and everything their views share stay live until the end of the last graph; all other
 * tensors are freed after their last use, so later graphs reuse the memory of earlier graphs'
 * intermediates.
 * @module
 */

import type { Graph } from "../graph.ts";
import { Op } from "../op.ts";
import type { Tensor } from "../tensor.ts";
import type { BackendBuffer } from "../backend/backend.ts";
import { identicalAlias, inPlaceRule, sameLayout } from "./inplace.ts";

/** Every step and block the planner considers, in arrays indexed by block number. */
export interface Lifetimes {
  /** The nodes of every graph, in run order; index = step. */
  readonly timeline: readonly Tensor[];
  /** Tensors the plan gives memory, in definition order, and the block each one uses. */
  readonly tensors: readonly Tensor[];
  readonly tensorBlock: Int32Array;
  /** Step at which each tensor is computed first, and its own last use. */
  readonly tensorFirst: Int32Array;
  readonly tensorLast: Int32Array;
  /** Block intervals [start, end] in steps (inclusive) and sizes in bytes (aligned). */
  readonly blockStart: Int32Array;
  readonly blockEnd: Int32Array;
  readonly blockSize: Float64Array;
  readonly blockPinned: Uint8Array;
  readonly blockCount: number;
  /** For each tensor, the tensor whose memory it took over in place (an owner), or null. */
  readonly inPlaceOf: readonly (Tensor | null)[];
  /** Nodes computed inside a later node (the `fused` argument's, in the timeline): no memory. */
  readonly fusedAway: readonly Tensor[];
}

/** True for tensors the planner gives memory: computed, owning memory, not yet placed. */
export function isPlannable(t: Tensor): boolean {
  return t.viewSource === null && t.op !== Op.none &&
    (t.placement === null || placedByPlanner(t));
}

/** The buffer a memory plan placed each tensor in (see {@link markPlanned}). */
const plannedIn = new WeakMap<Tensor, BackendBuffer>();

/**
 * Records that a memory plan placed `t`: planning the graph again plans `t` again (the
 * planner's own placements are not the user's pins), and placing a new plan moves it once its
 * old buffer is disposed.
 */
export function markPlanned(t: Tensor, buffer: BackendBuffer): void {
  plannedIn.set(t, buffer);
}

/** True when `t`'s memory is where a memory plan put it. */
export function placedByPlanner(t: Tensor): boolean {
  const buffer = plannedIn.get(t);
  return buffer !== undefined && t.placement?.buffer === buffer;
}

function alignUp(size: number, alignment: number): number {
  return Math.ceil(Math.max(size, 1) / alignment) * alignment;
}

/** Bytes a block of a tensor reserves, as the Zig allocator rounds it. */
export function reservedSize(t: Tensor, alignment: number): number {
  return alignUp(t.nbytes, alignment);
}

/** Memory owners numbered densely, with the last step touching each and whether it is kept. */
interface Uses {
  /** Memory owner -> dense number. */
  index: Map<number, number>;
  /** Per owner number: last step touching it. */
  last: number[];
  /** Per owner number: 1 when an output keeps it to the end. */
  pinned: number[];
  /** Per owner number: 1 when it is some graph's output (read after that graph). */
  output: Uint8Array;
  /** Per step: the owner number of the node's own memory. */
  stepOwner: Int32Array;
}

function ownerOf(t: Tensor): Tensor {
  return t.viewSource === null ? t : t.memoryOwner;
}

// Every occurrence of a node touches its own memory owner (a write, or for a view nothing
// yet, which is harmless: a view comes before its consumers) and its sources' owners (reads;
// cpy's second source is the memory it writes). A fused-away node reads its sources at the
// step of the node it is computed in.
function collectUses(
  timeline: readonly Tensor[],
  graphEnd: Int32Array,
  keep: ReadonlySet<Tensor> | undefined,
  readAt: ReadonlyMap<Tensor, number>,
): Uses {
  const index = new Map<number, number>();
  const last: number[] = [];
  const pinned: number[] = [];
  const stepOwner = new Int32Array(timeline.length);
  const touch = (owner: Tensor, step: number): number => {
    let n = index.get(owner.id);
    if (n === undefined) {
      n = last.length;
      index.set(owner.id, n);
      last.push(step);
      pinned.push(0);
    } else {
      last[n] = Math.max(last[n] as number, step);
    }
    return n;
  };
  for (let step = 0; step < timeline.length; step++) {
    const node = timeline[step] as Tensor;
    const own = touch(ownerOf(node), step);
    stepOwner[step] = own;
    if (keep ? keep.has(node) : node.isOutput) pinned[own] = 1;
    const src = node.src;
    const reads = readAt.get(node) ?? step;
    for (let i = 0; i < src.length; i++) touch(ownerOf(src[i] as Tensor), reads);
  }
  // An output that is not kept is still read after its graph (a scheduler copies it to
  // another backend then): it lives at least to its graph's last step, and no node of that
  // graph may overwrite it in place.
  const output = new Uint8Array(last.length);
  for (let step = 0; step < timeline.length; step++) {
    const node = timeline[step] as Tensor;
    if (!node.isOutput) continue;
    const own = stepOwner[step] as number;
    output[own] = 1;
    last[own] = Math.max(last[own] as number, graphEnd[step] as number);
  }
  return { index, last, pinned, output, stepOwner };
}

/**
 * Builds the timeline of `graphs` and decides blocks and in-place reuse. `fused` maps nodes
 * computed inside a later node to that node: they get no block (nor their views), and their
 * sources are read at that node's step.
 */
export function analyzeLifetimes(
  graphs: readonly Graph[],
  alignment: number,
  keep?: ReadonlySet<Tensor>,
  fused?: ReadonlyMap<Tensor, Tensor>,
): Lifetimes {
  const timeline: Tensor[] = [];
  const graphEnd: number[] = [];
  for (const graph of graphs) {
    for (const node of graph.nodes) timeline.push(node);
    const end = timeline.length - 1;
    for (let i = 0; i < graph.nodes.length; i++) graphEnd.push(end);
  }
  const steps = timeline.length;
  const readAt = new Map<Tensor, number>();
  if (fused && fused.size > 0) {
    const stepOf = new Map<Tensor, number>();
    timeline.forEach((node, step) => stepOf.set(node, step));
    for (const [node, into] of fused) {
      const at = stepOf.get(into);
      if (at !== undefined && stepOf.has(node)) readAt.set(node, at);
    }
  }
  const uses = collectUses(timeline, Int32Array.from(graphEnd), keep, readAt);
  const tensors: Tensor[] = [];
  const tensorBlockList: number[] = [];
  const firstList: number[] = [];
  const lastList: number[] = [];
  const inPlaceOf: (Tensor | null)[] = [];
  const starts: number[] = [];
  const ends: number[] = [];
  const sizes: number[] = [];
  const pins: number[] = [];
  /** Owner number -> block number (-1: none yet). */
  const blockOf = new Int32Array(uses.last.length).fill(-1);
  for (let step = 0; step < steps; step++) {
    const node = timeline[step] as Tensor;
    const own = uses.stepOwner[step] as number;
    if (blockOf[own] !== -1 || !isPlannable(node) || readAt.has(node)) continue;
    const pinned = uses.pinned[own] as number;
    const end = pinned ? steps - 1 : uses.last[own] as number;
    const parent = inPlaceParent(node, step, uses, blockOf, ends);
    let block: number;
    if (parent !== null) {
      block = blockOf[uses.index.get(parent.memoryOwner.id) as number] as number;
      ends[block] = Math.max(ends[block] as number, end);
      pins[block] = (pins[block] as number) | pinned;
      sizes[block] = Math.max(sizes[block] as number, reservedSize(node, alignment));
    } else {
      block = starts.length;
      starts.push(step);
      ends.push(end);
      sizes.push(reservedSize(node, alignment));
      pins.push(pinned);
    }
    blockOf[own] = block;
    tensors.push(node);
    tensorBlockList.push(block);
    firstList.push(step);
    lastList.push(end);
    inPlaceOf.push(parent === null ? null : parent.memoryOwner);
  }
  return {
    timeline,
    tensors,
    tensorBlock: Int32Array.from(tensorBlockList),
    tensorFirst: Int32Array.from(firstList),
    tensorLast: Int32Array.from(lastList),
    blockStart: Int32Array.from(starts),
    blockEnd: Int32Array.from(ends),
    blockSize: Float64Array.from(sizes),
    blockPinned: Uint8Array.from(pins),
    blockCount: starts.length,
    inPlaceOf,
    fusedAway: [...readAt.keys()],
  };
}

/**
 * The source whose memory `node` may take over at `step`, or null. All must hold:
 * - the op is safe in place ({@link inPlaceRule}), on its first source only;
 * - that source's memory is the planner's (not a leaf or a tensor placed elsewhere) and no
 *   output keeps it;
 * - `node` is the last step touching it: no later consumer, view consumer or cpy remains;
 * - the source starts at its memory's first byte and has the node's dtype, shape and strides;
 * - no other source of the node reads that memory, unless it reads exactly the same elements
 *   (a broadcast row of the source would be read after being overwritten).
 */
function inPlaceParent(
  node: Tensor,
  step: number,
  uses: Uses,
  blockOf: Int32Array,
  ends: readonly number[],
): Tensor | null {
  if (!inPlaceRule(node.op).safe) return null;
  const parent = node.src[0];
  if (parent === undefined) return null;
  const owner = ownerOf(parent);
  const number = uses.index.get(owner.id) as number;
  const block = blockOf[number] as number;
  if (block === -1 || uses.pinned[number] === 1 || uses.output[number] === 1) return null;
  if (uses.last[number] !== step || ends[block] !== step) return null;
  if (parent.offsetInOwner !== 0 || !sameLayout(node, parent) || !node.isContiguous) return null;
  for (let i = 1; i < node.src.length; i++) {
    const other = node.src[i] as Tensor;
    if (ownerOf(other) === owner && !identicalAlias(parent, other)) return null;
  }
  return parent;
}
