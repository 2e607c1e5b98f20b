/**
 * CPU buffers: memory allocated by the Zig core, or a file mapped read-only by it, freed (or
 * unmapped) by `dispose()` (a finalizer is only a backstop).
 * @module
 */

import { ArgumentError, DisposedError, ReadOnlyError } from "../../errors.ts";
import { requireByteCount, showValue } from "../../args.ts";
import { check, type NativeCore } from "../../core/core.ts";
import { fileUrlToPath } from "../../core/ffi.ts";
import { type DType, DTYPES } from "../../dtype.ts";
import type { Tensor } from "../../tensor.ts";
import type { BackendBuffer, MappedBuffer, MappedFile } from "../backend.ts";
import type { CoreBackend, CpuBackend } from "./backend.ts";

/** Tensor offsets in CPU buffers are 64-byte aligned (one cache line, one zmm register). */
export const CPU_ALIGNMENT = 64;

const buffers = new FinalizationRegistry<{ lib: NativeCore; handle: number }>((held) => {
  // A backstop only: buffers should be disposed explicitly.
  held.lib.graft_buffer_free(held.handle);
});

/** A buffer the core made: its handle and the address of its byte 0. */
interface NativeBuffer {
  handle: number;
  address: bigint;
}

/** Memory allocated by the Zig core (or, for {@link CpuMappedBuffer}, a file it mapped). */
export class CpuBuffer implements BackendBuffer {
  /** The backend that made the plan. */
  readonly backend: CoreBackend;
  readonly size: number;
  readonly alignment: number = CPU_ALIGNMENT;
  /** Native handle. */
  readonly handle: number;
  /** Native address of byte 0. */
  readonly address: bigint;
  /** True when the memory must not be written (a file mapping: {@link CpuMappedBuffer}). */
  readonly readOnly: boolean = false;
  #disposed = false;
  #writeGeneration = 0;
  readonly #lib: NativeCore;

  /**
   * Use {@link CoreBackend.allocBuffer}. `native` is a buffer the core already made (a file
   * mapping); without it, `size` bytes are allocated.
   */
  constructor(backend: CoreBackend, lib: NativeCore, size: number, native?: NativeBuffer) {
    if (!native) {
      // A size above 2^53 would reach the core wrapped (2^64 + 4096 became a 4 KiB buffer).
      requireByteCount("allocBuffer: size", size, 1);
      const handle = new Uint32Array(1);
      const address = new BigUint64Array(1);
      check(lib, lib.graft_buffer_alloc(BigInt(size), handle, address), "allocBuffer");
      native = { handle: handle[0]!, address: address[0]! };
    }
    this.backend = backend;
    this.size = size;
    this.handle = native.handle;
    this.address = native.address;
    this.#lib = lib;
    buffers.register(this, { lib, handle: this.handle }, this);
  }

  /**
   * Throws a ReadOnlyError when this buffer must not be written (a file mapping), naming
   * `tensor` and the verb; a write there would otherwise fault the process.
   */
  requireWritable(verb: string, tensor: Tensor): void {
    if (!this.readOnly) return;
    const from = this instanceof CpuMappedBuffer ? ` mapped from ${this.file.path}` : "";
    throw new ReadOnlyError(
      `${verb}: ${tensor.label} lives in a read-only buffer${from}; mapped weights cannot be ` +
        `written (load them with { mmap: false } for a writable copy)`,
    );
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

/**
 * The kernels' alignment need for a tensor of `dtype` read in place from a mapping: its scalars
 * naturally aligned (f32, i32 and blocks whose size is a multiple of 4: 4 bytes; f16, bf16 and
 * blocks of f16 scales: 2). The kernels read sources with unaligned loads, so this is not
 * needed for correctness today; it keeps every mapped scalar where a typed load may read it.
 * GGUF's data alignment (32 by default) always meets it.
 */
export function mappedAlignment(dtype: DType): number {
  const bytes = DTYPES[dtype].blockBytes;
  return Math.min(4, bytes & -bytes);
}

/**
 * A whole file mapped read-only (PROT_READ, MAP_PRIVATE) by the core: its memory is the file's
 * bytes, read by kernels in place and paged in by the OS on first use. Writing into it is a
 * {@link ReadOnlyError} (`setTensor`, a copy into it, a graph that would write into it);
 * disposing it unmaps the file (refused with a BusyError while a compute reads it). A file
 * truncated while mapped makes reads past its new end fault: do not change a file in use.
 */
export class CpuMappedBuffer extends CpuBuffer implements MappedBuffer {
  override readonly readOnly = true as const;
  override readonly alignment: number = 1;
  readonly file: MappedFile;
  readonly #lib: NativeCore;

  /** Use {@link CpuBackend.mapFile}. */
  constructor(backend: CpuBackend, lib: NativeCore, path: string | URL) {
    const name = path instanceof URL ? fileUrlToPath(path) : path;
    if (typeof name !== "string" || name.length === 0) {
      throw new ArgumentError(
        `mapFile: path must be a non-empty string or a file: URL, got ${showValue(path)}`,
      );
    }
    const bytes = new TextEncoder().encode(name);
    const handle = new Uint32Array(1);
    const out = new BigUint64Array(4);
    check(lib, lib.graft_file_map(bytes, BigInt(bytes.length), handle, out), "mapFile");
    const [address, size, dev, ino] = out;
    super(backend, lib, Number(size!), { handle: handle[0]!, address: address! });
    this.file = { path: name, size: Number(size!), dev: Number(dev!), ino: Number(ino!) };
    this.#lib = lib;
  }

  alignmentFor(dtype: DType): number {
    return mappedAlignment(dtype);
  }

  prefetch(offset = 0, length: number = this.size - offset): void {
    if (this.disposed) throw new DisposedError("prefetch: the mapping was disposed");
    requireByteCount("prefetch: offset", offset);
    requireByteCount("prefetch: length", length);
    check(
      this.#lib,
      this.#lib.graft_buffer_advise(this.handle, BigInt(offset), BigInt(length), 3),
      "prefetch",
    );
  }
}
