/**
 * WebGPU device memory: one GPUBuffer per backend buffer, usable as storage and as a copy
 * source and destination. Tensors sit at offsets aligned to the device's storage binding
 * alignment, so each can be bound at its own offset.
 * @module
 */

import { DisposedError, GraftError, OutOfSpaceError, Status } from "../../errors.ts";
import type { Backend, BackendBuffer } from "../backend.ts";

/** The GPUBuffer size for `size` bytes: whole words, since bindings and copies are in words. */
export function deviceSize(size: number): number {
  return Math.ceil(size / 4) * 4;
}

/** A block of device memory. Use {@link WebGpuBackend.allocBuffer}. */
export class WebGpuBuffer implements BackendBuffer {
  readonly backend: Backend;
  readonly size: number;
  readonly alignment: number;
  /** The device buffer (its size is `size` rounded up to 4 bytes). */
  readonly gpuBuffer: GPUBuffer;
  #disposed = false;
  #writeGeneration = 0;

  /** Use {@link WebGpuBackend.allocBuffer}. */
  constructor(backend: Backend, device: GPUDevice, size: number, alignment: number) {
    if (!Number.isInteger(size) || size <= 0) {
      throw new GraftError(`allocBuffer: size must be a positive integer, got ${size}`);
    }
    if (deviceSize(size) > device.limits.maxBufferSize) {
      throw new OutOfSpaceError(
        Status.outOfSpace,
        `allocBuffer: ${size} bytes exceed the device's maxBufferSize ` +
          `(${device.limits.maxBufferSize})`,
      );
    }
    this.backend = backend;
    this.size = size;
    this.alignment = alignment;
    this.gpuBuffer = device.createBuffer({
      size: deviceSize(size),
      usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
      label: `graft buffer ${size}`,
    });
  }

  get disposed(): boolean {
    return this.#disposed;
  }

  /**
   * Counts the writes into this buffer queued through its backend: `setTensor`, tensor copies
   * into it, and computes of plans whose graph writes into a leaf here (a `cpy` into it).
   * Schedules compare it to skip copying leafs that did not change.
   */
  get writeGeneration(): number {
    return this.#writeGeneration;
  }

  /** Records a write into this buffer; the backend calls it for its own writes. */
  markWritten(): void {
    this.#writeGeneration++;
  }

  dispose(): void {
    if (this.#disposed) throw new DisposedError("WebGpuBuffer.dispose: buffer already disposed");
    this.#disposed = true;
    // Work already submitted that uses the buffer still completes (WebGPU defers the free).
    this.gpuBuffer.destroy();
  }

  /** Disposes unless already disposed (for `using`). */
  [Symbol.dispose](): void {
    if (!this.#disposed) this.dispose();
  }
}
