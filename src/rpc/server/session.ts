/**
 * One client's state on Graft's RPC server: its buffers (by the ids the server gave out), what it
 * has allocated against its cap, the last graph it computed (for GRAPH_RECOMPUTE), and the
 * checks that turn a tensor of a message into a byte range inside one of its buffers. Every
 * number from the wire is a u64 and is compared as a bigint, so no sum can wrap.
 * @module
 */

import { CpuBackend } from "../../backend/cpu/backend.ts";
import { CPU_ALIGNMENT, type CpuBuffer } from "../../backend/cpu/buffer.ts";
import { check, loadNativeLibrary, type NativeCore } from "../../core/core.ts";
import { type DType, DTYPES } from "../../dtype.ts";
import { RpcProtocolError } from "../../errors.ts";
import { ggmlTypeToDType } from "../ggml_ops.ts";
import type { RpcTensor } from "../protocol.ts";
import type { CompiledGraph } from "./translate.ts";

/**
 * Each buffer gets its own window of the address space the client sees: buffer id `n` starts
 * at `n << BUFFER_ADDRESS_SHIFT`. Clients never learn a native address, and an address names
 * its buffer unambiguously.
 */
export const BUFFER_ADDRESS_SHIFT = 40n;
/** The largest buffer one ALLOC_BUFFER may make: the size of an address window. */
export const BUFFER_SIZE_MAX = (1n << BUFFER_ADDRESS_SHIFT) - 1n;
/** The most buffers one client may hold at once. */
export const BUFFERS_PER_CLIENT_MAX = 65536;

/** A buffer a client allocated. */
export interface ClientBuffer {
  /** The handle the client uses (ALLOC_BUFFER's remote_ptr). */
  readonly id: bigint;
  /** The address of its byte 0 as the client sees it (BUFFER_GET_BASE). */
  readonly base: bigint;
  /** Its size in bytes, as the client asked. */
  readonly size: bigint;
  /** The native memory (at least one byte, even for a zero-size request). */
  readonly memory: CpuBuffer;
}

/** A tensor of a message resolved against a client's buffers. */
export interface ResolvedTensor {
  /** The buffer its data lies in. */
  readonly buffer: ClientBuffer;
  /** Byte offset of its data in the buffer. */
  readonly offset: bigint;
  /** Its footprint in bytes (ggml_nbytes). */
  readonly nbytes: bigint;
  /** Its Graft dtype. */
  readonly dtype: DType;
}

/** The error every refused message throws: the connection is closed with this reason. */
export function refuse(field: string, message: string): never {
  throw new RpcProtocolError(field, -1, message);
}

/**
 * ggml_nbytes of a wire tensor, in bigints: 0 when a dimension is 0 (ggml's empty tensor);
 * otherwise a row's blocks plus the outer strides. Throws on a row that is not whole blocks.
 */
export function wireNbytes(t: RpcTensor, dtype: DType, field: string): bigint {
  const { blockSize, blockBytes } = DTYPES[dtype];
  if (t.ne.some((n) => n === 0)) return 0n;
  if (t.ne[0] % blockSize !== 0) {
    refuse(field, `${dtype} rows hold blocks of ${blockSize}; ne[0] = ${t.ne[0]}`);
  }
  let bytes = blockSize === 1
    ? BigInt(t.ne[0] - 1) * BigInt(t.nb[0]) + BigInt(blockBytes)
    : BigInt(t.ne[0] / blockSize) * BigInt(t.nb[0]);
  for (let d = 1; d < 4; d++) bytes += BigInt(t.ne[d]! - 1) * BigInt(t.nb[d]!);
  return bytes;
}

/** The Graft dtype of a wire tensor's ggml type; refuses types Graft has no layout for. */
export function wireDType(t: RpcTensor, field: string): DType {
  const dtype = ggmlTypeToDType(t.type);
  if (dtype === null) refuse(`${field}.type`, `ggml type ${t.type} is not one Graft stores`);
  return dtype;
}

/**
 * The memory all clients of one server share (the device memory GET_DEVICE_MEMORY reports):
 * every session counts its buffers here as well as against its own cap.
 */
export class SharedMemory {
  /** Bytes all clients together may hold. */
  readonly total: bigint;
  /** Bytes held now. */
  used = 0n;
  /** A pool of `total` bytes. */
  constructor(total: number) {
    this.total = BigInt(total);
  }
}

/** Options of {@link ClientSession}. */
export interface ClientSessionOptions {
  /** The server-wide pool (default: a pool of `memoryCap` bytes for this session alone). */
  shared?: SharedMemory;
  /** Bytes this client may hold in buffers at once (ALLOC_BUFFER beyond it gets a null buffer). */
  memoryCap: number;
  /** Threads of this client's CPU backend. */
  threads: number;
}

/** One connection's state. Dispose it when the connection ends: its buffers are freed. */
export class ClientSession implements Disposable {
  /** The client's CPU backend (its own thread pool, so clients never wait on each other's). */
  readonly backend: CpuBackend;
  /** Bytes this client may hold. */
  readonly memoryCap: bigint;
  readonly #buffers = new Map<bigint, ClientBuffer>();
  readonly #lib: NativeCore;
  readonly #shared: SharedMemory;
  #allocated = 0n;
  #nextId = 1n;
  /** The graph of the last GRAPH_COMPUTE, until a buffer it uses is freed. */
  lastGraph: CompiledGraph | null = null;

  /** A session with an empty set of buffers. */
  constructor(options: ClientSessionOptions) {
    this.backend = new CpuBackend({ threads: options.threads });
    this.memoryCap = BigInt(options.memoryCap);
    this.#shared = options.shared ?? new SharedMemory(options.memoryCap);
    this.#lib = loadNativeLibrary();
  }

  /** Bytes held in buffers now (scratch of graphs included). */
  get allocated(): bigint {
    return this.#allocated;
  }

  /** Bytes this client could still allocate: its own cap and the shared pool both bound it. */
  get available(): bigint {
    const own = this.memoryCap - this.#allocated;
    const pool = this.#shared.total - this.#shared.used;
    return own < pool ? own : pool;
  }

  /**
   * Counts `bytes` of server memory against this client's cap and the shared pool; false
   * (nothing counted) when either would be passed.
   */
  reserve(bytes: bigint): boolean {
    if (bytes > this.available) return false;
    this.#allocated += bytes;
    this.#shared.used += bytes;
    return true;
  }

  /** Gives back bytes counted by {@link reserve}. */
  release(bytes: bigint): void {
    this.#allocated -= bytes;
    this.#shared.used -= bytes;
  }

  /**
   * ALLOC_BUFFER: a new buffer of `size` bytes, or null when it would pass the cap, the size is
   * above {@link BUFFER_SIZE_MAX}, or the client holds too many buffers (ggml's server answers a
   * failed allocation with a null handle, which the client reports).
   */
  alloc(size: bigint): ClientBuffer | null {
    if (size > BUFFER_SIZE_MAX || this.#buffers.size >= BUFFERS_PER_CLIENT_MAX) return null;
    if (!this.reserve(size)) return null;
    let memory: CpuBuffer;
    try {
      memory = this.backend.allocBuffer(Math.max(1, Number(size)));
    } catch {
      this.release(size);
      return null;
    }
    const id = this.#nextId++;
    const buffer = { id, base: id << BUFFER_ADDRESS_SHIFT, size, memory };
    this.#buffers.set(id, buffer);
    return buffer;
  }

  /** The buffer with handle `id`; refuses unknown handles. */
  buffer(id: bigint, field: string): ClientBuffer {
    const buffer = this.#buffers.get(id);
    if (!buffer) refuse(field, `no buffer 0x${id.toString(16)} on this connection`);
    return buffer;
  }

  /** FREE_BUFFER: frees it and forgets the last graph (it may point into it). */
  free(id: bigint): void {
    const buffer = this.buffer(id, "free_buffer.remote_ptr");
    this.dropLastGraph();
    buffer.memory.dispose();
    this.#buffers.delete(id);
    this.release(buffer.size);
  }

  /** Disposes the stored graph's plan and scratch, if any. */
  dropLastGraph(): void {
    this.lastGraph?.dispose();
    this.lastGraph = null;
  }

  /**
   * The buffer and byte range of a wire tensor: its type must be one Graft stores, its buffer
   * one of this client's, and all of its bytes (ggml_nbytes from `data`) inside that buffer.
   */
  resolve(t: RpcTensor, field: string): ResolvedTensor {
    const dtype = wireDType(t, field);
    const buffer = this.buffer(t.buffer, `${field}.buffer`);
    const nbytes = wireNbytes(t, dtype, field);
    if (t.data < buffer.base || t.data - buffer.base > buffer.size) {
      refuse(`${field}.data`, `0x${t.data.toString(16)} is outside its buffer`);
    }
    const offset = t.data - buffer.base;
    if (nbytes > buffer.size - offset) {
      refuse(
        `${field}.data`,
        `${nbytes} bytes at offset ${offset} pass the end of a ${buffer.size}-byte buffer`,
      );
    }
    return { buffer, offset, nbytes, dtype };
  }

  /**
   * The region [data + offset, data + offset + size) of a tensor, checked as ggml's server
   * checks SET_TENSOR and GET_TENSOR: it starts inside the tensor's buffer and ends by the
   * buffer's end (the tensor's own extent is not required).
   */
  region(t: RpcTensor, offset: bigint, size: bigint, field: string): {
    buffer: ClientBuffer;
    at: bigint;
  } {
    wireDType(t, field);
    const buffer = this.buffer(t.buffer, `${field}.buffer`);
    if (t.data < buffer.base || t.data - buffer.base > buffer.size) {
      refuse(`${field}.data`, `0x${t.data.toString(16)} is outside its buffer`);
    }
    const start = t.data - buffer.base;
    if (offset > buffer.size - start || size > buffer.size - start - offset) {
      refuse(
        field,
        `region (offset ${offset}, size ${size}) passes the end of a ${buffer.size}-byte buffer`,
      );
    }
    return { buffer, at: start + offset };
  }

  /** Writes bytes at `at` of a buffer (range already checked). */
  write(buffer: ClientBuffer, at: bigint, bytes: Uint8Array): void {
    if (bytes.byteLength === 0) return;
    check(
      this.#lib,
      this.#lib.graft_buffer_write(buffer.memory.handle, at, bytes, BigInt(bytes.byteLength)),
      "rpc set_tensor",
    );
    buffer.memory.markWritten();
  }

  /** Reads `size` bytes at `at` of a buffer (range already checked). */
  read(buffer: ClientBuffer, at: bigint, size: bigint): Uint8Array {
    const out = new Uint8Array(Number(size));
    if (size === 0n) return out;
    check(
      this.#lib,
      this.#lib.graft_buffer_read(buffer.memory.handle, at, out, size),
      "rpc get_tensor",
    );
    return out;
  }

  /** Sets `size` bytes at `at` to `value` (range already checked). */
  fill(buffer: ClientBuffer, at: bigint, size: bigint, value: number): void {
    if (size === 0n) return;
    check(
      this.#lib,
      this.#lib.graft_buffer_fill(buffer.memory.handle, at, size, value),
      "rpc memset",
    );
    buffer.memory.markWritten();
  }

  /** Copies `size` bytes between buffers (ranges already checked). */
  copy(from: ClientBuffer, fromAt: bigint, to: ClientBuffer, toAt: bigint, size: bigint): void {
    if (size === 0n) return;
    check(
      this.#lib,
      this.#lib.graft_buffer_copy(from.memory.handle, fromAt, to.memory.handle, toAt, size),
      "rpc copy_tensor",
    );
    to.memory.markWritten();
  }

  /** The buffers' alignment, as GET_ALIGNMENT answers. */
  get alignment(): number {
    return CPU_ALIGNMENT;
  }

  /** Frees every buffer and the backend. */
  dispose(): void {
    this.dropLastGraph();
    for (const buffer of this.#buffers.values()) {
      try {
        buffer.memory.dispose();
      } catch {
        // A buffer still busy is freed by its finalizer; the session is going away regardless.
      }
    }
    this.#buffers.clear();
    this.release(this.#allocated);
    this.backend.dispose();
  }

  /** Same as {@link dispose}. */
  [Symbol.dispose](): void {
    this.dispose();
  }
}
