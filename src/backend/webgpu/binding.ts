/**
 * Where a tensor is bound: storage bindings must start at multiples of the device's
 * minStorageBufferOffsetAlignment and span whole words, while tensors (views above all) may
 * start anywhere. So a tensor is bound from the aligned offset at or below it, and its byte
 * offset within the binding goes to the shader in the uniform block.
 * @module
 */

import { dtypeSize, holdsRawBytes } from "../../dtype.ts";
import { LimitError, PlacementError, Status } from "../../errors.ts";
import type { Tensor } from "../../tensor.ts";
import type { WebGpuBuffer } from "./buffer.ts";

/** A storage binding range and the tensor's offset inside it. */
export interface TensorBinding {
  readonly buffer: WebGpuBuffer;
  /** Byte offset of the binding in the buffer (aligned). */
  readonly offset: number;
  /** Bytes bound (a multiple of 4). */
  readonly size: number;
  /** Byte offset of the tensor's first element within the binding. */
  readonly relative: number;
}

/**
 * The binding of a tensor placed at `offset` of `buffer`. Elements must be naturally aligned
 * (f32 and i32 on 4 bytes, f16 on 2), since shaders address words and half words; bf16 and
 * block-quantized tensors may start at any byte (their shaders fetch bytes from words), so a
 * view of row r of a q4_0 matrix, r * 18 bytes in per block of its rows, binds as it is.
 */
export function tensorBinding(
  tensor: Tensor,
  buffer: WebGpuBuffer,
  offset: number,
  alignment: number,
  maxSize: number,
  verb: string,
): TensorBinding {
  const size = holdsRawBytes(tensor.dtype) ? 1 : dtypeSize[tensor.dtype];
  if (offset % size !== 0 || tensor.nb.some((stride) => stride % size !== 0)) {
    throw new PlacementError(
      `${verb}: ${tensor.label} at byte ${offset} with strides ${tensor.nb.join(",")} is not ` +
        `aligned to its ${size}-byte elements, which WebGPU shaders need`,
    );
  }
  const start = Math.floor(offset / alignment) * alignment;
  const relative = offset - start;
  const bound = Math.ceil((relative + tensor.nbytes) / 4) * 4;
  if (bound > maxSize) {
    throw new LimitError(
      Status.limitReached,
      `${verb}: ${tensor.label} spans ${bound} bytes, more than the device's ` +
        `maxStorageBufferBindingSize (${maxSize})`,
    );
  }
  return { buffer, offset: start, size: bound, relative };
}
