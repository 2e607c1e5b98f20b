/**
 * The backend interface: the reference design's verbs. A backend owns a memory space (buffers)
 * and runs graphs whose tensors live in it. Optional verbs say so in their JSDoc.
 * @module
 */

import type { DType, TensorData } from "../dtype.ts";
import type { Graph } from "../graph.ts";
import type { Tensor } from "../tensor.ts";

/**
 * What a backend's buffers are like (ggml's buffer type): the alignment of tensor offsets, the
 * largest buffer the device allows, whether the host can address the memory directly, and how
 * many bytes a tensor takes in such a buffer.
 */
export interface BufferType {
  /** A short name: "cpu", "webgpu". */
  readonly name: string;
  /** Alignment of tensor offsets within a buffer. */
  readonly alignment: number;
  /** The largest buffer one allocation may make, in bytes (see `allocWeights` for more). */
  readonly maxSize: number;
  /** True when the memory is the host's (reads and writes need no device round trip). */
  readonly hostVisible: boolean;
  /** Bytes `tensor` takes in a buffer of this type (its footprint, plus any padding). */
  allocSize(tensor: Tensor): number;
}

/** A block of a backend's memory that tensors are placed in. */
export interface BackendBuffer extends Disposable {
  /** The backend whose memory this is. */
  readonly backend: Backend;
  /** Size in bytes. */
  readonly size: number;
  /** Alignment the backend needs for tensor offsets. */
  readonly alignment: number;
  /** True once disposed. */
  readonly disposed: boolean;
  /**
   * Optional: a count that changes whenever the buffer is written through its backend. Where
   * present, schedules copy a leaf out of this buffer only after it changed. Absent: every
   * compute copies.
   */
  readonly writeGeneration?: number;
  /** Frees the memory; tensors placed in it can no longer be used. */
  dispose(): void;
}

/** The file behind a {@link MappedBuffer}, as the OS reported it when mapping. */
export interface MappedFile {
  /** The path mapped. */
  readonly path: string;
  /** The file's size in bytes (the buffer's size). */
  readonly size: number;
  /** Device number, as `Deno.FileInfo.dev`. */
  readonly dev: number;
  /** Inode number, as `Deno.FileInfo.ino`. */
  readonly ino: number;
}

/**
 * A read-only buffer whose memory is a whole file mapped into memory (see
 * {@link Backend.mapFile}): tensors are placed at their byte offsets in the file, nothing is
 * copied, and pages are read from the file (or the page cache) as they are first used. Writing
 * into it is a `ReadOnlyError`.
 */
export interface MappedBuffer extends BackendBuffer {
  /** Always true: the memory is the file's, mapped read-only. */
  readonly readOnly: true;
  /** The file mapped. */
  readonly file: MappedFile;
  /**
   * The alignment a tensor of `dtype` needs at its offset in this buffer for the backend's
   * kernels to read it in place; a tensor that misses it must be copied into a buffer of its
   * own instead.
   */
  alignmentFor(dtype: DType): number;
  /** Asks the OS to start reading bytes [offset, offset + length) in now (madvise WILLNEED). */
  prefetch(offset?: number, length?: number): void;
}

/** A graph prepared for repeated computation on one backend. */
export interface GraphPlan extends Disposable {
  /** The graph it was made for (computes check its identity: structure and placement). */
  readonly graph: Graph;
  /** Bytes of scratch memory the plan holds. */
  readonly workSize: number;
  /** Frees the plan. */
  dispose(): void;
}

/** A compute backend (CPU, WebGPU, ...). */
export interface Backend extends Disposable {
  /** A short name: "cpu", "webgpu". */
  readonly name: string;
  /** What this backend's buffers are like: alignment, maximum size, host visibility. */
  readonly bufferType: BufferType;
  /** Allocates `size` bytes (at most `bufferType.maxSize`) of this backend's memory. */
  allocBuffer(size: number): BackendBuffer;
  /**
   * Optional: maps the file at `path` read-only as a buffer of this backend, with no copy (host
   * backends: the CPU). Backends without it have weights streamed into their buffers.
   */
  mapFile?(path: string | URL): MappedBuffer;
  /** Alignment of tensor offsets within this backend's buffers. */
  readonly alignment: number;
  /** Writes `data` into the tensor's memory, starting `offset` bytes in. */
  setTensor(tensor: Tensor, data: ArrayBufferView, offset?: number): void;
  /**
   * Optional: reads the tensor's bytes (from `offset`, `size` bytes; default all) as its dtype,
   * synchronously. Only backends whose memory the host reads without waiting have it (CPU);
   * every backend has {@link getTensorAsync}.
   */
  getTensor?(tensor: Tensor, offset?: number, size?: number): TensorData;
  /** Like {@link setTensor}; completes in order with other async work. */
  setTensorAsync(tensor: Tensor, data: ArrayBufferView, offset?: number): Promise<void>;
  /** Like {@link getTensor}; completes in order with other async work. */
  getTensorAsync(tensor: Tensor, offset?: number, size?: number): Promise<TensorData>;
  /**
   * Reads all of `tensor` into `into` (its dtype's typed array, or bytes: exactly the tensor's
   * size); completes in order with other async work. For outputs read every step (a model's
   * logits): the caller's array is reused instead of a new one each read.
   */
  getTensorIntoAsync(tensor: Tensor, into: ArrayBufferView): Promise<void>;
  /** Waits for all queued work of this backend. */
  synchronize(): Promise<void>;
  /**
   * Copies `src` (on any backend) into `dst` on this backend; same layout required. Resolves
   * when the copy is done (a copy from another device waits for its read).
   */
  cpyTensorFrom(src: Tensor, dst: Tensor): Promise<void>;
  /** Copies `src` on this backend into `dst` (on any backend); same layout required. */
  cpyTensorTo(src: Tensor, dst: Tensor): Promise<void>;
  /** Prepares a graph whose tensors all live on this backend. */
  graphPlanCreate(graph: Graph): GraphPlan;
  /** Computes a plan; with `graph`, first checks the plan was made for it. */
  graphPlanCompute(plan: GraphPlan, graph?: Graph): void;
  /** Frees a plan (same as `plan.dispose()`). */
  graphPlanFree(plan: GraphPlan): void;
  /**
   * Whether this backend can compute `tensor`'s op with its dtypes, layout and sizes. The
   * scheduler asks it of every node and falls back to another backend where the answer is no.
   */
  supportsOp(tensor: Tensor): boolean;
  /**
   * The nodes of `graphs` whose result this backend's plans compute inside a later node and
   * never write (a fused pair's intermediate), each mapped to that node. `allocGraph` gives them
   * no memory and keeps their sources live until that node. Optional: none by default.
   */
  fusedAway?(graphs: readonly Graph[]): ReadonlyMap<Tensor, Tensor>;
  /** Plans, computes and frees: for one-off graphs. */
  graphCompute(graph: Graph): void;
  /** Frees the backend's native resources. */
  dispose(): void;
}
