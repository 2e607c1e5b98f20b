/**
 * Automatic backend assignment, in numbered passes like ggml's scheduler. Every decision keeps
 * its reason, so a schedule can explain itself.
 *
 * 1. Leafs stay where their memory is.
 * 2. Pinned nodes: user overrides, and nodes that use a weight (mulMat's and getRows' first
 *    operand, a broadcast second operand of add/mul such as a norm gain) go where it lives.
 * 3. The backends before the last in priority order (accelerators) expand down, then up, over
 *    unpinned nodes, so a run of nodes between two of its pinned nodes stays with it instead of
 *    ping-ponging. The last backend (usually the CPU) does not expand: it is the fallback.
 * 4. Remaining nodes follow their sources (most source bytes, ties to the previous node's
 *    backend), else the first backend that supports the op. A node that a backend would have
 *    taken (by expansion or by its sources) but whose `supportsOp` refused it is a fallback:
 *    its assignment names the backends that lack it, and the schedule's report says so.
 * 5. Views and `cpy` go where their memory is.
 * @module
 */

import type { Backend } from "../backend/backend.ts";
import { GraftError, PlacementError } from "../errors.ts";
import type { Graph } from "../graph.ts";
import { Op, opInfo, opName } from "../op.ts";
import type { Tensor } from "../tensor.ts";

/** Why a node was put on its backend. */
export type AssignmentReason =
  | "leaf memory"
  | "memory owner"
  | "user override"
  | "manual cut"
  | "weight lives here"
  | "expanded from neighbour"
  | "follows sources"
  | "first backend that supports the op"
  | "fallback: a preferred backend lacks the op";

/** One tensor's backend and the reason. */
export interface Assignment {
  /** The backend that computes (or holds) the tensor. */
  backend: Backend;
  /** Why. */
  reason: AssignmentReason;
  /**
   * For a fallback: the backends that would have computed the node (by expansion or by its
   * sources) but whose `supportsOp` refused it.
   */
  lacking?: readonly Backend[];
}

/** Options of {@link assignBackends}. */
export interface AssignOptions {
  /** Backends in priority order: accelerators first, the fallback (CPU) last. */
  backends: readonly Backend[];
  /** Nodes the user pins to a backend. */
  overrides?: ReadonlyMap<Tensor, Backend>;
}

/** True when `backend` can compute `tensor`. */
export function supports(backend: Backend, tensor: Tensor): boolean {
  return backend.supportsOp(tensor);
}

function leafBackend(leaf: Tensor, backends: readonly Backend[]): Backend {
  const placement = leaf.placement;
  if (!placement) {
    throw new PlacementError(
      `schedule: input ${leaf.label} is on no backend: give it memory (allocTensors) first`,
    );
  }
  const backend = placement.buffer.backend;
  if (!backends.includes(backend)) {
    throw new PlacementError(
      `schedule: input ${leaf.label} lives on ${backend.name}, which is not among the ` +
        `scheduled backends (${backends.map((b) => b.name).join(", ")})`,
    );
  }
  return backend;
}

/** The leaf behind `tensor` (through views), if it is one. */
function leafOwner(tensor: Tensor): Tensor | null {
  const owner = tensor.memoryOwner;
  return owner.op === Op.none ? owner : null;
}

/** The weight a node uses, if any: the operand that is model state rather than data flow. */
function weightOf(node: Tensor): Tensor | null {
  const [a, b] = node.src;
  if ((node.op === Op.mulMat || node.op === Op.getRows) && a) return leafOwner(a);
  const broadcast = (node.op === Op.add || node.op === Op.mul) && a && b &&
    b.nelements < a.nelements;
  return broadcast ? leafOwner(b) : null;
}

/** True for nodes that are memory, not work: views and cpy (which writes its destination). */
export function followsMemory(node: Tensor): boolean {
  return node.viewSource !== null;
}

/** Assigns every leaf and node of `graph` to a backend, with the reason for each. */
export function assignBackends(graph: Graph, options: AssignOptions): Map<Tensor, Assignment> {
  const { backends } = options;
  if (backends.length === 0) throw new GraftError("schedule: give at least one backend");
  const assigned = assignLeafs(graph, backends);
  const work = graph.nodes.filter((n) => !followsMemory(n));
  pinNodes(work, assigned, options);
  const expanders = new Set(backends.slice(0, -1));
  // Per node, the backends that wanted it but lack it (passes 3 and 4).
  const declined = new Map<Tensor, Set<Backend>>();
  expand(work, assigned, expanders, declined);
  expand([...work].reverse(), assigned, expanders, declined);
  let previous: Backend | null = null;
  for (const node of work) {
    if (!assigned.has(node)) {
      const chosen = followSources(node, assigned, backends, previous, declined);
      const lacking = [...(declined.get(node) ?? [])];
      assigned.set(
        node,
        lacking.length > 0
          ? {
            backend: chosen.backend,
            reason: "fallback: a preferred backend lacks the op",
            lacking,
          }
          : chosen,
      );
    }
    previous = assigned.get(node)!.backend;
  }
  assignMemoryFollowers(graph, assigned);
  return assigned;
}

/** Pass 1: every leaf stays on the backend its memory is on. */
export function assignLeafs(graph: Graph, backends: readonly Backend[]): Map<Tensor, Assignment> {
  const assigned = new Map<Tensor, Assignment>();
  for (const leaf of graph.leafs) {
    assigned.set(leaf, { backend: leafBackend(leaf, backends), reason: "leaf memory" });
  }
  return assigned;
}

/** Pass 5: views and cpy go where their memory is, once every other node is assigned. */
export function assignMemoryFollowers(graph: Graph, assigned: Map<Tensor, Assignment>): void {
  for (const node of graph.nodes) {
    if (followsMemory(node)) assigned.set(node, memoryAssignment(node, assigned));
  }
}

function pinNodes(work: Tensor[], assigned: Map<Tensor, Assignment>, o: AssignOptions): void {
  for (const node of work) {
    const override = o.overrides?.get(node);
    if (override) {
      if (!supports(override, node)) {
        throw new GraftError(
          `schedule: ${opName(node.op)} ${node.label} is pinned to ${override.name}, which ` +
            `does not support it`,
        );
      }
      assigned.set(node, { backend: override, reason: "user override" });
      continue;
    }
    const weight = weightOf(node);
    const backend = weight ? assigned.get(weight)?.backend : undefined;
    if (backend && supports(backend, node)) {
      assigned.set(node, { backend, reason: "weight lives here" });
    }
  }
}

function expand(
  order: Tensor[],
  assigned: Map<Tensor, Assignment>,
  expanders: Set<Backend>,
  declined: Map<Tensor, Set<Backend>>,
): void {
  let current: Backend | null = null;
  for (const node of order) {
    const known = assigned.get(node);
    if (known) {
      current = expanders.has(known.backend) ? known.backend : null;
    } else if (current && supports(current, node)) {
      assigned.set(node, { backend: current, reason: "expanded from neighbour" });
    } else if (current) {
      decline(declined, node, current);
    }
  }
}

function decline(declined: Map<Tensor, Set<Backend>>, node: Tensor, backend: Backend): void {
  let set = declined.get(node);
  if (!set) declined.set(node, set = new Set());
  set.add(backend);
}

function followSources(
  node: Tensor,
  assigned: Map<Tensor, Assignment>,
  backends: readonly Backend[],
  previous: Backend | null,
  declined: Map<Tensor, Set<Backend>>,
): Assignment {
  const bytes = new Map<Backend, number>();
  for (const source of node.src) {
    const backend = sourceBackend(source, assigned);
    if (backend) bytes.set(backend, (bytes.get(backend) ?? 0) + source.nbytes);
  }
  // The fewest bytes to copy in wins; on a tie, the backend of the previous node (no new
  // split), then the earlier source (the sort is stable).
  const ranked = [...bytes.entries()].sort((a, b) =>
    b[1] - a[1] || Number(b[0] === previous) - Number(a[0] === previous)
  ).map(([b]) => b);
  for (const backend of ranked) {
    if (supports(backend, node)) return { backend, reason: "follows sources" };
    decline(declined, node, backend);
  }
  for (const backend of backends) {
    if (supports(backend, node)) return { backend, reason: "first backend that supports the op" };
    decline(declined, node, backend);
  }
  throw new GraftError(
    `schedule: no backend supports ${opName(node.op)} ${node.label} ` +
      `(tried ${backends.map((b) => b.name).join(", ")})`,
  );
}

/** Where a source's memory is, looking through views (which are assigned last). */
function sourceBackend(source: Tensor, assigned: Map<Tensor, Assignment>): Backend | undefined {
  let t = source;
  while (t.viewSource && !assigned.has(t)) t = t.viewSource;
  return assigned.get(t)?.backend;
}

function memoryAssignment(node: Tensor, assigned: Map<Tensor, Assignment>): Assignment {
  const backend = sourceBackend(node.viewSource!, assigned)!;
  if (opInfo(node.op).core !== null && !supports(backend, node)) {
    throw new GraftError(
      `schedule: ${opName(node.op)} into ${
        node.viewSource!.label
      } must run on ${backend.name}, where its ` +
        `destination lives, and ${backend.name} does not support it`,
    );
  }
  return { backend, reason: "memory owner" };
}
