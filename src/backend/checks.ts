/** Checks every backend makes on tensor reads, writes and copies. */

import { OutOfBoundsError, ShapeError } from "../errors.ts";
import { Op } from "../op.ts";
import { formatShape, type Tensor } from "../tensor.ts";
import { sameDims } from "../ops/check.ts";

/** Tensor copies are raw bytes: both tensors need the same dtype, shape and strides. */
export function requireSameLayout(verb: string, src: Tensor, dst: Tensor): void {
  if (src.dtype !== dst.dtype || !sameDims(src.ne, dst.ne) || !sameDims(src.nb, dst.nb)) {
    throw new ShapeError(
      `${verb}: layouts differ: ${src.dtype} ${formatShape(src.ne)} strides ${src.nb.join(",")} ` +
        `vs ${dst.dtype} ${formatShape(dst.ne)} strides ${dst.nb.join(",")}`,
    );
  }
}

/** Reads and writes stay within the tensor: bytes [offset, offset + size) of its memory. */
export function requireTensorRange(
  verb: string,
  tensor: Tensor,
  offset: number,
  size: number,
): void {
  if (
    !Number.isInteger(offset) || !Number.isInteger(size) || offset < 0 || size < 0 ||
    offset + size > tensor.nbytes
  ) {
    throw new OutOfBoundsError(
      `${verb}: bytes [${offset}, ${offset + size}) are outside ${tensor.label} ` +
        `(${tensor.nbytes} bytes)`,
    );
  }
}

/** Whether a compute node writes into a leaf's memory (a `cpy` into a leaf or a view of one). */
export function writesLeaf(node: Tensor): boolean {
  return node.memoryOwner !== node && node.memoryOwner.op === Op.none;
}
