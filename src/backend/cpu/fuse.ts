/**
 * Node fusion for the CPU plan: two nodes whose intermediate result nobody else reads become one
 * core node, which saves writing that result and reading it back (a full pass over memory) and
 * one barrier between the threads. Pairs fused:
 * - `mul(silu(x), y)` (either operand order, one shape) -> core `silu_mul(x, y)`;
 * - `mul(rmsNorm(x), g)` with `g` a row broadcast over `x`'s rows -> core `rms_norm_mul(x, g)`.
 *
 * The fused kernels do the two nodes' arithmetic with the same roundings, so results are bitwise
 * those of the unfused pair. The intermediate (the silu or rmsNorm result) is not written.
 * A pair is fused only when the intermediate is not a graph output and has exactly one consumer
 * (no view of it either), and when running the first node's work at the second node's place is
 * safe: no node in between writes the memory of `x`, and the result either does not overlap `x`
 * or aliases it exactly (element i reads x[i] before it writes dst[i]).
 * @module
 */

import type { Graph } from "../../graph.ts";
import { CoreOp, isViewOp, Op } from "../../op.ts";
import type { Tensor } from "../../tensor.ts";
import { type TableEntry, tensorEntry } from "./node_table.ts";

/** Core op codes of fused nodes (`zig/node.zig`); never graph ops. */
export const FusedOp = {
  siluMul: CoreOp.silu_mul,
  rmsNormMul: CoreOp.rms_norm_mul,
} as const;

/** What fusion needs to know about where tensors live. */
export interface FusionMemory {
  /** Whether the memory of `a`'s owner and of `b`'s owner overlap. */
  overlaps(a: Tensor, b: Tensor): boolean;
  /** The native address of a tensor's first element. */
  addressOf(tensor: Tensor): bigint;
}

function sameShape(a: Tensor, b: Tensor): boolean {
  return a.ne.every((n, d) => n === b.ne[d]);
}

function sameLayout(a: Tensor, b: Tensor): boolean {
  return sameShape(a, b) && a.nb.every((n, d) => n === b.nb[d]);
}

/** Whether `g` is a gain row for `x`: the same row length, its other extents dividing x's. */
function isRowGain(g: Tensor, x: Tensor): boolean {
  return g.dtype === "f32" && g.ne[0] === x.ne[0] &&
    [1, 2, 3].every((d) => x.ne[d]! % g.ne[d]! === 0);
}

/**
 * The node table entries for `graph`'s compute nodes in order, fused where allowed. Each
 * fused entry stands at the second node's place and lists both nodes in `fused`.
 */
export function fuseNodes(graph: Graph, memory: FusionMemory): TableEntry[] {
  const uses = new Map<Tensor, number>();
  for (const node of graph.nodes) {
    for (const source of node.src) uses.set(source, (uses.get(source) ?? 0) + 1);
  }
  const outputs = new Set(graph.outputs);
  const order = graph.nodes.filter((t) => !isViewOp(t.op));
  const position = new Map(order.map((t, i) => [t, i]));
  const absorbed = new Set<Tensor>();
  const fusedAt = new Map<Tensor, TableEntry>();

  // x is read at the consumer's place instead of the producer's: nothing in between may write
  // it, and the consumer's result must leave it alone or alias it exactly.
  const movable = (producer: Tensor, consumer: Tensor, x: Tensor): boolean => {
    const from = position.get(producer)!;
    const to = position.get(consumer)!;
    for (let i = from + 1; i < to; i++) {
      if (memory.overlaps(order[i]!, x)) return false;
    }
    if (!memory.overlaps(consumer, x)) return true;
    return sameLayout(consumer, x) && memory.addressOf(consumer) === memory.addressOf(x);
  };

  for (const consumer of order) {
    // The fused kernels are f32 only; a mul may also take an f16 src0 (ggml's f16 x f32).
    if (consumer.op !== Op.mul || consumer.src.some((s) => s.dtype !== "f32")) continue;
    if (consumer.dtype !== "f32") continue;
    for (const side of [0, 1]) {
      const inner = consumer.src[side]!;
      const other = consumer.src[1 - side]!;
      if (inner === other || outputs.has(inner) || uses.get(inner) !== 1) continue;
      if (absorbed.has(inner) || fusedAt.has(inner) || !position.has(inner)) continue;
      const x = inner.src[0]!;
      if (inner.op === Op.silu && sameShape(other, inner) && movable(inner, consumer, x)) {
        fusedAt.set(consumer, {
          tensor: consumer,
          coreOp: FusedOp.siluMul,
          src: [x, other],
          params: [],
          fused: [inner, consumer],
        });
      } else if (
        inner.op === Op.rmsNorm && isRowGain(other, inner) && movable(inner, consumer, x)
      ) {
        fusedAt.set(consumer, {
          tensor: consumer,
          coreOp: FusedOp.rmsNormMul,
          src: [x, other],
          params: inner.params,
          fused: [inner, consumer],
        });
      } else continue;
      absorbed.add(inner);
      break;
    }
  }
  return order.filter((t) => !absorbed.has(t)).map((t) => fusedAt.get(t) ?? tensorEntry(t));
}
