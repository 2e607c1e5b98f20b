/**
 * Encodes a graph's compute nodes into the core's node table (`zig/node.zig`, `Node`): one
 * fixed 456-byte record per node with the op, params and the address, shape and strides of the
 * destination and up to four sources. Views are not encoded: they are addresses, not work.
 * @module
 */

import { dtypeCode } from "../../dtype.ts";
import { PlacementError } from "../../errors.ts";
import { coreOp, isViewOp, Op, opName } from "../../op.ts";
import type { Tensor } from "../../tensor.ts";

export const NODE_SIZE = 456;
const DESC_SIZE = 80;
const DST_OFFSET = 56;
const SRC_OFFSET = 136;
const SOURCES_MAX = 4;
const PARAMS_OFFSET = 8;
/** Parameter slots of a record (`zig/node.zig`, params_max). */
const PARAMS_MAX = 12;
/** mul_mat's params[0] (a u32 slot): src0 is a constant weight the plan prepacks. */
const PREPACK_FLAG = 1;

/** One record of the node table: the tensor it computes and the core op that computes it. */
export interface TableEntry {
  /** The tensor the record writes (its destination). */
  readonly tensor: Tensor;
  /** The core op code (`zig/node.zig`). */
  readonly coreOp: number;
  /** The sources the core reads, in its order. */
  readonly src: readonly Tensor[];
  /** The op's f32 parameter slots. */
  readonly params: readonly number[];
  /** The graph nodes this record computes: the tensor alone, or a fused pair (fuse.ts). */
  readonly fused: readonly Tensor[];
}

/** The record of one graph node as it is (no fusion). */
export function tensorEntry(tensor: Tensor): TableEntry {
  // cpy's second source and setRows' third are their destination (the node's viewSource, whose
  // memory the core gets as dst): the core reads only the others.
  const src = tensor.viewSource ? tensor.src.filter((s) => s !== tensor.viewSource) : tensor.src;
  return { tensor, coreOp: coreOp(tensor.op), src, params: tensor.params, fused: [tensor] };
}

/** Resolves a placed tensor to its native address. */
export type AddressOf = (tensor: Tensor) => bigint;

/** The tensors of a graph that the core computes (every node but views). */
export function computeNodes(nodes: readonly Tensor[]): Tensor[] {
  return nodes.filter((t) => !isViewOp(t.op));
}

function writeDesc(view: DataView, at: number, tensor: Tensor, address: bigint): void {
  view.setBigUint64(at, address, true);
  for (let d = 0; d < 4; d++) {
    view.setBigInt64(at + 8 + d * 8, BigInt(tensor.ne[d]!), true);
    view.setBigInt64(at + 40 + d * 8, BigInt(tensor.nb[d]!), true);
  }
  view.setUint32(at + 72, dtypeCode[tensor.dtype], true);
}

/**
 * Writes the node table for `nodes` (compute nodes only, in order; tensors, or entries from
 * fuse.ts). The mulMat nodes in `prepack` get the prepack flag: their src0 is a weight the
 * plan may pack once.
 */
export function encodeNodeTable(
  nodes: readonly (Tensor | TableEntry)[],
  addressOf: AddressOf,
  prepack: ReadonlySet<Tensor> = new Set(),
): Uint8Array {
  const table = new Uint8Array(Math.max(1, nodes.length) * NODE_SIZE);
  const view = new DataView(table.buffer);
  nodes.forEach((node, index) => {
    const entry = "coreOp" in node ? node : tensorEntry(node);
    const tensor = entry.tensor;
    const at = index * NODE_SIZE;
    const sources = entry.src;
    if (sources.length > SOURCES_MAX) {
      throw new PlacementError(`${opName(tensor.op)} has ${sources.length} sources (max 4)`);
    }
    if (entry.params.length > PARAMS_MAX) {
      throw new PlacementError(
        `${opName(tensor.op)} has ${entry.params.length} params (max ${PARAMS_MAX})`,
      );
    }
    view.setUint32(at, entry.coreOp, true);
    view.setUint32(at + 4, sources.length, true);
    entry.params.forEach((p, i) => view.setFloat32(at + PARAMS_OFFSET + i * 4, p, true));
    if (prepack.has(tensor)) {
      if (entry.coreOp !== Op.mulMat || (entry.params[0] ?? 0) !== 0) {
        throw new PlacementError(`prepack: ${tensor.label} is not a mulMat without a prepack flag`);
      }
      view.setUint32(at + PARAMS_OFFSET, PREPACK_FLAG, true);
    }
    writeDesc(view, at + DST_OFFSET, tensor, addressOf(tensor));
    sources.forEach((source, i) => {
      writeDesc(view, at + SRC_OFFSET + i * DESC_SIZE, source, addressOf(source));
    });
  });
  return table;
}
