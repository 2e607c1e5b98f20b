/**
 * What every backend's plan checks before a compute: that the graph it is given is the one it
 * was made for, in the same memory. The full identity (see `Graph.identity`) is taken once,
 * at plan creation; a compute costs O(1) per buffer: tensors move only by `unplace()`, which
 * counts per buffer (see `unplaceEpoch`), and only a changed count makes the plan look again.
 * @module
 */

import { StalePlanError } from "../errors.ts";
import type { Graph } from "../graph.ts";
import { type Tensor, unplaceEpoch } from "../tensor.ts";
import type { BackendBuffer } from "./backend.ts";

interface Placed {
  tensor: Tensor;
  buffer: BackendBuffer;
  offset: number;
}

/** A plan's record of the graph and placement it was made for. */
export class PlanIdentity {
  /** The graph the plan was made for. */
  readonly graph: Graph;
  /** `graph.identity()` when the plan was made. */
  readonly identity: string;
  readonly #placed: readonly Placed[];
  readonly #epochs = new Map<BackendBuffer, number>();

  /** Records `graph` as it is placed now; every tensor must have memory. */
  constructor(graph: Graph) {
    this.graph = graph;
    this.identity = graph.identity();
    const placed: Placed[] = [];
    for (const tensor of [...graph.leafs, ...graph.nodes]) {
      const where = tensor.placement;
      if (!where) continue; // the backend's own checks reject unplaced tensors
      placed.push({ tensor, buffer: where.buffer, offset: where.offset });
      this.#epochs.set(where.buffer, unplaceEpoch(where.buffer));
    }
    this.#placed = placed;
  }

  /**
   * Throws StalePlanError unless `graph` (default: the plan's own) is the graph the plan was
   * made for, in the same memory.
   */
  check(verb: string, graph?: Graph): void {
    if (graph && graph !== this.graph && graph.identity() !== this.identity) {
      throw new StalePlanError(
        `${verb}: the plan was made for another graph or placement (identity ` +
          `${this.identity.slice(0, 16)}, given ${graph.identity().slice(0, 16)}): ops, ` +
          `dtypes, shapes, strides, params and every tensor's buffer and offset must match; ` +
          `create a plan for this graph`,
      );
    }
    let moved = false;
    for (const [buffer, epoch] of this.#epochs) {
      if (unplaceEpoch(buffer) !== epoch) moved = true;
    }
    if (!moved) return;
    // Something left one of our buffers: look at our tensors (rare, so O(n) is fine here).
    for (const { tensor, buffer, offset } of this.#placed) {
      const now = tensor.placement;
      if (!now || now.buffer !== buffer || now.offset !== offset) {
        throw new StalePlanError(
          `${verb}: ${tensor.label} was ${now ? "moved" : "unplaced"} since the plan was made; ` +
            `create the plan again`,
        );
      }
    }
    for (const buffer of this.#epochs.keys()) this.#epochs.set(buffer, unplaceEpoch(buffer));
  }
}
