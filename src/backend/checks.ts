/** Checks every backend makes on tensor reads, writes and copies. */

import { ArgumentError, DTypeError, OutOfBoundsError, ShapeError } from "../errors.ts";
import { DTYPES, dtypeSize, typedArrayName } from "../dtype.ts";
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

/**
 * Data written into a tensor is its dtype's typed array, or raw bytes (a Uint8Array or a
 * DataView): a Float32Array written into an f16 tensor used to be copied as raw bytes, making
 * garbage of every value. Throws DTypeError naming the tensor, the expected and the given class.
 */
export function requireTensorData(verb: string, tensor: Tensor, data: unknown): void {
  if (!ArrayBuffer.isView(data)) {
    throw new ArgumentError(
      `${verb}: data for ${tensor.label} must be a typed array, got ${
        data === null ? "null" : typeof data
      }`,
    );
  }
  if (data instanceof Uint8Array || data instanceof DataView) return;
  if (DTYPES[tensor.dtype].quantized) {
    throw new DTypeError(
      `${verb}: ${tensor.label} holds ${tensor.dtype} blocks: pass their raw bytes as a ` +
        `Uint8Array (quantize() makes them), got a ${data.constructor.name}`,
    );
  }
  // Unsigned integer arrays carry raw bits (a Uint16Array of f16 bit patterns, say).
  const raw = data instanceof Uint16Array || data instanceof Uint32Array;
  const elementBytes = (data as unknown as { BYTES_PER_ELEMENT: number }).BYTES_PER_ELEMENT;
  if (raw && dtypeSize[tensor.dtype] % elementBytes === 0) return;
  const expected = typedArrayName(tensor.dtype);
  if (data.constructor.name !== expected) {
    throw new DTypeError(
      `${verb}: ${tensor.label} holds ${tensor.dtype}: pass a ${expected} (or a Uint8Array of ` +
        `raw bytes), got a ${data.constructor.name}`,
    );
  }
}

/**
 * A whole-tensor read into the caller's array (`getTensorIntoAsync`): an array of the tensor's
 * dtype (or raw bytes) with exactly its bytes.
 */
export function requireWholeTensorArray(verb: string, tensor: Tensor, into: unknown): void {
  requireTensorData(verb, tensor, into);
  const bytes = (into as ArrayBufferView).byteLength;
  if (bytes !== tensor.nbytes) {
    throw new ArgumentError(
      `${verb}: ${tensor.label} is ${tensor.nbytes} bytes, the array ${bytes}`,
    );
  }
}

/** Whether a compute node writes into a leaf's memory (a `cpy` into a leaf or a view of one). */
export function writesLeaf(node: Tensor): boolean {
  return node.memoryOwner !== node && node.memoryOwner.op === Op.none;
}
