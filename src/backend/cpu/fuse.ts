/**
 * Node fusion for the CPU plan: two nodes whose intermediate result nobody else reads become one
 * core node, which saves writing that result and reading it back (a full pass over memory) and
 * one barrier between the threads. Pairs fused:
 * - `mul(silu(x), y)` (either operand order, one shape) -> core `silu_mul(x, y)`;
 * - `mul(rmsNorm(x), g)` with `g` a row broadcast over `x`'s rows -> core `rms_norm_mul(x, g)`;
 * - conv2d's `mulMat(weights, transpose(reshape(im2col(kernel, image, planar))))` -> core
 *   `conv_2d(weights, image)`: an implicit GEMM that unfolds the image while it packs it, so
 *   the unfolded image (9 times the image for a 3x3 kernel) is never written nor read back.
 *
 * The fused kernels do the two nodes' arithmetic with the same roundings, so results are bitwise
 * those of the unfused pair (conv_2d: the same products, summed in another blocking, so within
 * f32 rounding of the pair). The intermediate (the silu or rmsNorm result) is not written.
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
  conv2d: CoreOp.conv_2d,
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
 * conv2d's product (src/ops/conv.ts): `mulMat(weights, transpose(reshape(cols)))` with `cols` a
 * planar 2D im2col into f32, each link read only by the next; returns the im2col and the
 * fused node's params (im2col's stride, padding, dilation, then KW and KH).
 */
function convOf(
  product: Tensor,
  readOnce: (t: Tensor) => boolean,
): { im2col: Tensor; params: number[] } | null {
  if (product.op !== Op.mulMat || product.dtype !== "f32") return null;
  const fields = product.src[1]!;
  if (fields.op !== Op.transpose || !readOnce(fields)) return null;
  const flat = fields.src[0]!;
  if (flat.op !== Op.reshape || !readOnce(flat)) return null;
  const cols = flat.src[0]!;
  if (cols.op !== Op.im2col || cols.dtype !== "f32" || !readOnce(cols)) return null;
  const [s0, s1, p0, p1, d0, d1, is2D, planar] = cols.params;
  if (is2D !== 1 || planar !== 1) return null;
  const kernel = cols.src[0]!;
  const weights = product.src[0]!;
  const taps = cols.ne[2];
  // The weights are the kernel as [IC*KH*KW, OC], the fields [IC*KH*KW, OW*OH, N].
  if (weights.ne[0] !== taps || weights.ne[2] !== 1 || weights.ne[3] !== 1) return null;
  if (flat.ne[0] !== cols.ne[0] * cols.ne[1] || flat.ne[1] !== taps) return null;
  return {
    im2col: cols,
    params: [s0!, s1!, p0!, p1!, d0!, d1!, kernel.ne[0], kernel.ne[1]],
  };
}

/** Whether a tensor of `graph` is read by exactly one node and is no graph output. */
function readOnceIn(graph: Graph): (t: Tensor) => boolean {
  const uses = new Map<Tensor, number>();
  for (const node of graph.nodes) {
    for (const source of node.src) uses.set(source, (uses.get(source) ?? 0) + 1);
  }
  const outputs = new Set(graph.outputs);
  return (t) => !outputs.has(t) && uses.get(t) === 1;
}

/**
 * The im2col nodes of `graph` that a CPU plan fuses into their conv2d product (core
 * `conv_2d`), each mapped to that product, judged from the graph alone: the plan also asks that
 * no node in between writes the image's memory and that the product does not overlap it, which
 * a memory plan that keeps the image live until the product (`allocGraph` with this map, see
 * `CpuBackend.fusedAway`) gives. An im2col whose image a node in between writes (into a view
 * of it) is left out.
 */
export function convFusedAway(graph: Graph): Map<Tensor, Tensor> {
  const readOnce = readOnceIn(graph);
  const order = graph.nodes.filter((t) => !isViewOp(t.op));
  const position = new Map(order.map((t, i) => [t, i]));
  const out = new Map<Tensor, Tensor>();
  for (const consumer of order) {
    const conv = convOf(consumer, readOnce);
    if (!conv) continue;
    const from = position.get(conv.im2col);
    const to = position.get(consumer)!;
    if (from === undefined) continue;
    const image = conv.im2col.src[1]!.memoryOwner;
    let written = consumer.memoryOwner === image;
    for (let i = from + 1; i < to && !written; i++) written = order[i]!.memoryOwner === image;
    if (!written) out.set(conv.im2col, consumer);
  }
  return out;
}

/**
 * The node table entries for `graph`'s compute nodes in order, fused where allowed. Each
 * fused entry stands at the second node's place and lists both nodes in `fused`.
 */
export function fuseNodes(graph: Graph, memory: FusionMemory): TableEntry[] {
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

  // An intermediate (a view, the im2col, the silu or rmsNorm) read only by the next step of
  // its chain, and no graph output.
  const readOnce = readOnceIn(graph);
  for (const consumer of order) {
    const conv = convOf(consumer, readOnce);
    if (conv && !absorbed.has(conv.im2col) && !fusedAt.has(conv.im2col)) {
      const image = conv.im2col.src[1]!;
      // The image is read at the product's place; the product never writes over it.
      if (movable(conv.im2col, consumer, image) && !memory.overlaps(consumer, image)) {
        fusedAt.set(consumer, {
          tensor: consumer,
          coreOp: FusedOp.conv2d,
          src: [consumer.src[0]!, image],
          params: conv.params,
          fused: [conv.im2col, consumer],
        });
        absorbed.add(conv.im2col);
        continue;
      }
    }
    // The fused kernels are f32 only; a mul may also take an f16 src0 (ggml's f16 x f32).
    if (consumer.op !== Op.mul || consumer.src.some((s) => s.dtype !== "f32")) continue;
    if (consumer.dtype !== "f32") continue;
    for (const side of [0, 1]) {
      const inner = consumer.src[side]!;
      const other = consumer.src[1 - side]!;
      if (inner === other || !readOnce(inner)) continue;
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
