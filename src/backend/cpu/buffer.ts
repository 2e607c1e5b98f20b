/**
 * CPU buffers: memory allocated by the Zig core, freed by `dispose()` (a finalizer is only a
 * backstop).
 * @module
 */

import { DisposedError } from "../../errors.ts";
import { requireByteCount } from "../../args.ts";
import { check, type NativeCore } from "../../core/core.ts";
import type { BackendBuffer } from "../backend.ts";
import type { CpuBackend } from "./backend.ts";

/** Tensor offsets in CPU buffers are 64-byte aligned (one cache line, one zmm register). */
export const CPU_ALIGNMENT = 64;

const buffers = new FinalizationRegistry<{ lib: NativeCore; handle: number }>((held) => {
  // A backstop only: buffers should be disposed explicitly.
  held.lib.graft_buffer_free(held.handle);
});

/** Memory allocated by the Zig core. */
export class CpuBuffer implements BackendBuffer {
  /** The backend that made the plan. */
  readonly backend: CpuBackend;
  readonly size: number;
  readonly alignment: number = CPU_ALIGNMENT;
  /** Native handle. */
  readonly handle: number;
  /** Native address of byte 0. */
  readonly address: bigint;
  #disposed = false;
  #writeGeneration = 0;
  readonly #lib: NativeCore;

  /** Use {@link CpuBackend.allocBuffer}. */
  constructor(backend: CpuBackend, lib: NativeCore, size: number) {
    // A size above 2^53 would reach the core wrapped (2^64 + 4096 became a 4 KiB buffer).
    requireByteCount("allocBuffer: size", size, 1);
    const handle = new Uint32Array(1);
    const address = new BigUint64Array(1);
    check(lib, lib.graft_buffer_alloc(BigInt(size), handle, address), "allocBuffer");
    this.backend = backend;
    this.size = size;
    this.handle = handle[0]!;
    this.address = address[0]!;
    this.#lib = lib;
    buffers.register(this, { lib, handle: this.handle }, this);
  }

  /** True once disposed. */
  get disposed(): boolean {
    return this.#disposed;
  }

  /**
   * Counts the writes into this buffer made through its backend: `setTensor`,
   * `setTensorAsync`, tensor copies into it, and computes of plans whose graph writes into a
   * leaf here (a `cpy` into it). Plans with prepacked weights compare it to know when to pack
   * them again. Memory written by other means (raw FFI on {@link address}) is not counted:
   * call {@link markWritten} after such a write.
   */
  get writeGeneration(): number {
    return this.#writeGeneration;
  }

  /**
   * Records a write into this buffer, so that every plan that prepacked weights from it packs
   * them again before its next compute. The backend calls it for its own writes; call it after
   * writing the memory by any other means.
   */
  markWritten(): void {
    this.#writeGeneration++;
  }

  /**
   * Frees the memory. While a compute that uses the buffer runs, the core refuses and this
   * throws a BusyError, leaving the buffer alive: await the compute (`synchronize()`) first.
   */
  dispose(): void {
    if (this.#disposed) throw new DisposedError("CpuBuffer.dispose: buffer already disposed");
    // The core frees first: a refusal (busy) leaves the buffer usable and disposable later.
    check(this.#lib, this.#lib.graft_buffer_free(this.handle), "CpuBuffer.dispose");
    this.#disposed = true;
    buffers.unregister(this);
  }

  /** Disposes unless already disposed (for `using`). */
  [Symbol.dispose](): void {
    if (!this.#disposed) this.dispose();
  }
}
