/**
 * The RPC backend: a device of a llama.cpp `ggml-rpc-server` (or Graft's own RPC server) used
 * as a Graft backend over TCP, in ggml RPC protocol 7.0.0 (`src/rpc/protocol.ts`).
 *
 * Every verb becomes protocol commands queued in order on one connection, as llama.cpp's own
 * client does: writes and computes return at once and go out in order; reads
 * (`getTensorAsync`) and `synchronize()` resolve once everything queued before them is done.
 * Buffers are allocated on the server (ALLOC_BUFFER), tensors are sent as ggml's packed
 * `rpc_tensor` with their server addresses, graphs as ggml graphs with Graft's ops mapped onto
 * that version's op numbers (`src/rpc/ggml_ops.ts`); ops with no ggml equivalent are refused by
 * `supportsOp` and stay on a local backend. The protocol has no failure replies: a server that
 * refuses a command closes the connection, which shows as an RpcConnectionError.
 * @module
 */

import { DTYPES, dtypeSize, type TensorData, typedView } from "../../dtype.ts";
import {
  ArgumentError,
  DisposedError,
  OutOfSpaceError,
  PlacementError,
  RpcConnectionError,
  RpcProtocolError,
  StalePlanError,
  Status,
} from "../../errors.ts";
import type { Graph } from "../../graph.ts";
import { isViewOp, Op, type OpName, opName } from "../../op.ts";
import type { Tensor } from "../../tensor.ts";
import type { Backend, BackendBuffer, BufferType, GraphPlan } from "../backend.ts";
import {
  requireSameLayout,
  requireTensorData,
  requireTensorRange,
  requireWholeTensorArray,
  writesLeaf,
} from "../checks.ts";
import { PlanIdentity } from "../plan_identity.ts";
import { requireReadable } from "../../alloc/reuse.ts";
import { encodeGgmlOp, GgmlGluOp, GgmlOp, GRAFT_TO_GGML } from "../../rpc/ggml_ops.ts";
import {
  emptyRpcTensor,
  fnv1a64,
  packAllocBufferRequest,
  packBufferClearRequest,
  packCopyTensorRequest,
  packGetAllocSizeRequest,
  packGetTensorRange,
  packGetTensorRequest,
  packGraph,
  packInitTensorRequest,
  packMemsetTensorRequest,
  packSetTensorHashRequest,
  packU32,
  packU64,
  RPC_HASH_THRESHOLD,
  RPC_TENSOR_SIZE,
  RpcCmd,
  type RpcTensor,
  SET_TENSOR_HEADER_SIZE,
  unpackAllocBufferResponse,
  unpackDeviceMemoryResponse,
  unpackU32,
  unpackU64,
  unpackU8,
} from "../../rpc/protocol.ts";
import { RpcConnection, type RpcServerVersion } from "./connection.ts";

/** Options of {@link RpcBackend.connect}. */
export interface RpcBackendOptions {
  /** The server's device index (default 0; `deviceCount` says how many it has). */
  device?: number;
  /**
   * Milliseconds one command may take, from its turn on the connection to its reply (default
   * 60000). A graph compute has no reply: its time is counted in the next command that waits.
   */
  timeoutMs?: number;
}

/** ggml's `GGML_TENSOR_FLAG_COMPUTE`: ggml-cpu skips graph nodes without it. */
const GGML_TENSOR_FLAG_COMPUTE = 16;
const U32_MAX = 0xffff_ffff;

/** The server's handle and base address of a buffer, once ALLOC_BUFFER has answered. */
export interface RpcRemoteBuffer {
  /** The server's buffer handle (`remote_ptr`). */
  ptr: bigint;
  /** The buffer's base address in the server's memory (BUFFER_GET_BASE). */
  base: bigint;
}

/** A buffer in the server's memory. Use {@link RpcBackend.allocBuffer}. */
export class RpcBuffer implements BackendBuffer {
  readonly backend: RpcBackend;
  readonly size: number;
  readonly alignment: number;
  /** Set once the server allocated it (commands queued after the allocation see it). */
  remote: RpcRemoteBuffer | null = null;
  /** Why the server did not allocate it, once known. */
  failure: Error | null = null;
  #disposed = false;
  #writeGeneration = 0;
  readonly #onDispose: (buffer: RpcBuffer) => void;

  /** Use {@link RpcBackend.allocBuffer}. */
  constructor(
    backend: RpcBackend,
    size: number,
    alignment: number,
    onDispose: (buffer: RpcBuffer) => void,
  ) {
    this.backend = backend;
    this.size = size;
    this.alignment = alignment;
    this.#onDispose = onDispose;
  }

  get disposed(): boolean {
    return this.#disposed;
  }

  /** Counts writes queued into this buffer through its backend (see BackendBuffer). */
  get writeGeneration(): number {
    return this.#writeGeneration;
  }

  /** Records a write into this buffer. */
  markWritten(): void {
    this.#writeGeneration++;
  }

  /** Queues BUFFER_CLEAR: every byte of the buffer set to `value`. */
  clear(value = 0): void {
    if (this.#disposed) throw new DisposedError("RpcBuffer.clear: buffer is disposed");
    this.backend.clearBuffer(this, value);
  }

  /** Queues FREE_BUFFER; tensors placed in it can no longer be used. */
  dispose(): void {
    if (this.#disposed) throw new DisposedError("RpcBuffer.dispose: buffer already disposed");
    this.#disposed = true;
    this.#onDispose(this);
  }

  /** Disposes unless already disposed (for `using`). */
  [Symbol.dispose](): void {
    if (!this.#disposed) this.dispose();
  }
}

/**
 * A graph prepared for an RPC backend: its identity, checked on every compute. The server
 * keeps the last graph it computed; computing the same plan again sends GRAPH_RECOMPUTE.
 */
export class RpcPlan implements GraphPlan {
  /** The graph the plan was made for. */
  readonly graph: Graph;
  /** No local scratch memory: the server plans its own. */
  readonly workSize = 0;
  /** The graph and placement the plan was made for. */
  readonly identity: PlanIdentity;
  /** The backend that made it. */
  readonly backend: RpcBackend;
  /** True once freed. */
  disposed = false;
  /**
   * The server buffers the graph uses, each with one of its tensors (for messages): a compute
   * checks these, not every tensor (the identity check catches tensors that moved).
   */
  readonly buffers: ReadonlyMap<RpcBuffer, Tensor>;
  /** The buffers its nodes write that outlive it (a KV cache): a compute marks them written. */
  readonly writes: readonly RpcBuffer[];
  readonly #onDispose: (plan: RpcPlan) => void;

  /** Use {@link RpcBackend.graphPlanCreate}. */
  constructor(backend: RpcBackend, graph: Graph, onDispose: (plan: RpcPlan) => void) {
    this.backend = backend;
    this.graph = graph;
    this.identity = new PlanIdentity(graph);
    const buffers = new Map<RpcBuffer, Tensor>();
    for (const t of [...graph.leafs, ...graph.nodes]) {
      const buffer = backend.bufferOf(t, "graphPlanCreate");
      if (!buffers.has(buffer)) buffers.set(buffer, t);
    }
    this.buffers = buffers;
    this.writes = [
      ...new Set(graph.nodes.filter(writesLeaf).map((n) => backend.bufferOf(n, "graphPlanCreate"))),
    ];
    this.#onDispose = onDispose;
  }

  /** Frees the plan (the server's copy of the graph is replaced by the next compute). */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.#onDispose(this);
  }

  /** Same as {@link dispose}. */
  [Symbol.dispose](): void {
    this.dispose();
  }
}

/**
 * A backend on a device of a ggml RPC server. Connect with {@link RpcBackend.connect}; results
 * are read with `getTensorAsync` (there is no synchronous read).
 *
 * @example
 * ```ts ignore
 * import { add, allocTensors, Context, Graph, RpcBackend } from "@graft/graft";
 * // A server started with: ggml-rpc-server -H 127.0.0.1 -p 50052
 * using rpc = await RpcBackend.connect("127.0.0.1:50052");
 * const ctx = new Context();
 * const a = ctx.newTensor("f32", [3]);
 * const b = ctx.newTensor("f32", [3]);
 * const c = add(a, b);
 * const graph = Graph.build(c);
 * using buffer = allocTensors(rpc, [a, b, ...graph.nodes]);
 * rpc.setTensor(a, new Float32Array([1, 2, 3]));
 * rpc.setTensor(b, new Float32Array([10, 20, 30]));
 * rpc.graphCompute(graph);
 * console.log(await rpc.getTensorAsync(c)); // Float32Array [11, 22, 33]
 * ```
 */
export class RpcBackend implements Backend {
  /** `RPC<device>[<host:port>]`, as llama.cpp names the buffer type. */
  readonly name: string;
  /** The server's "host:port". */
  readonly endpoint: string;
  /** The server's device this backend runs on. */
  readonly device: number;
  /** How many devices the server has. */
  readonly deviceCount: number;
  /** The protocol version the server announced. */
  readonly serverVersion: RpcServerVersion;
  readonly alignment: number;
  /**
   * The server device's buffers: its alignment and maximum size; not host visible. A tensor
   * takes its bytes (a CPU server pads nothing; `getAllocSize` asks the server).
   */
  readonly bufferType: BufferType;
  readonly #connection: RpcConnection;
  #disposed = false;
  /** An error of work fired without a promise to report it (writes, computes). */
  #pending: Error | null = null;
  /** The plan the server holds as its last graph: computing it again is GRAPH_RECOMPUTE. */
  #lastPlan: RpcPlan | null = null;
  /** The plan `graphCompute` keeps for the graph it was last given. */
  #oneOff: RpcPlan | null = null;
  /** Tensors INIT_TENSOR was sent for (see {@link setTensor}). */
  #initialized = new WeakSet<Tensor>();
  #packed = new WeakMap<
    Tensor,
    { buffer: BackendBuffer; offset: number; name: string; bytes: Uint8Array }
  >();
  /** GRAPH_COMPUTE and GRAPH_RECOMPUTE commands sent, for tests and reports. */
  readonly stats = { graphComputes: 0, graphRecomputes: 0, hashHits: 0, hashMisses: 0 };

  private constructor(
    connection: RpcConnection,
    device: number,
    deviceCount: number,
    alignment: number,
    maxSize: number,
  ) {
    this.#connection = connection;
    this.endpoint = connection.endpoint;
    this.device = device;
    this.deviceCount = deviceCount;
    this.serverVersion = connection.version;
    this.alignment = alignment;
    this.name = `RPC${device}[${connection.endpoint}]`;
    this.bufferType = {
      name: this.name,
      alignment,
      maxSize,
      hostVisible: false,
      allocSize: (tensor: Tensor): number => tensor.nbytes,
    };
  }

  /**
   * Connects to the RPC server at `endpoint` ("host:port"), checks its protocol version and
   * asks its device count, alignment and maximum buffer size. Rejects with RpcConnectionError
   * (refused, another protocol version), RpcTimeoutError, or ArgumentError for a device index
   * the server does not have.
   */
  static async connect(endpoint: string, options: RpcBackendOptions = {}): Promise<RpcBackend> {
    const device = options.device ?? 0;
    const timeoutMs = options.timeoutMs ?? 60_000;
    if (!Number.isInteger(device) || device < 0 || device > U32_MAX) {
      throw new ArgumentError(`RpcBackend.connect: device must be a u32, got ${device}`);
    }
    if (!(timeoutMs > 0)) {
      throw new ArgumentError(`RpcBackend.connect: timeoutMs must be positive, got ${timeoutMs}`);
    }
    const connection = await RpcConnection.open(endpoint, timeoutMs);
    try {
      const count = unpackU32(
        "device_count",
        await connection.enqueue(
          "DEVICE_COUNT",
          () => connection.call(RpcCmd.DEVICE_COUNT, new Uint8Array(0), 4),
        ),
      );
      if (device >= count) {
        throw new ArgumentError(
          `RpcBackend.connect: ${endpoint} has ${count} device(s), no device ${device}`,
        );
      }
      const ask = async (cmd: typeof RpcCmd.GET_ALIGNMENT | typeof RpcCmd.GET_MAX_SIZE) =>
        unpackU64(
          "size",
          await connection.enqueue(
            "GET_ALIGNMENT",
            () => connection.call(cmd, packU32("device", device), 8),
          ),
        );
      const alignment = Number(await ask(RpcCmd.GET_ALIGNMENT));
      const maxSize = await ask(RpcCmd.GET_MAX_SIZE);
      if (alignment < 1 || (alignment & (alignment - 1)) !== 0) {
        throw new RpcConnectionError(`RPC ${endpoint}: alignment ${alignment} is not a power of 2`);
      }
      const max = maxSize > BigInt(Number.MAX_SAFE_INTEGER)
        ? Number.MAX_SAFE_INTEGER
        : Number(maxSize);
      return new RpcBackend(connection, device, count, alignment, max);
    } catch (error) {
      connection.close();
      throw error;
    }
  }

  #alive(verb: string): void {
    if (this.#disposed) throw new DisposedError(`RpcBackend.${verb}: backend is disposed`);
  }

  /** Runs `task` in order; its failure is reported by the next synchronize or read. */
  #fire(label: string, task: () => Promise<void>): void {
    this.#connection.enqueue(label, task).catch((error: Error) => {
      this.#pending ??= error;
    });
  }

  #takePending(): void {
    const error = this.#pending;
    if (error) {
      this.#pending = null;
      throw error;
    }
  }

  /**
   * Allocates `size` bytes on the server (queued; the handle arrives before any later command
   * runs). A server that cannot allocate answers with a null handle: the commands that use the
   * buffer then fail with OutOfSpaceError.
   */
  allocBuffer(size: number): RpcBuffer {
    this.#alive("allocBuffer");
    if (!Number.isSafeInteger(size) || size <= 0) {
      throw new ArgumentError(
        `RpcBackend.allocBuffer: size must be a positive integer, got ${size}`,
      );
    }
    if (size > this.bufferType.maxSize) {
      throw new OutOfSpaceError(
        Status.outOfSpace,
        `RpcBackend.allocBuffer: ${size} bytes exceed ${this.name}'s max buffer size ` +
          `(${this.bufferType.maxSize})`,
        size,
      );
    }
    const buffer = new RpcBuffer(this, size, this.alignment, (b) => this.#freeBuffer(b));
    const c = this.#connection;
    this.#fire("ALLOC_BUFFER", async () => {
      const reply = unpackAllocBufferResponse(
        await c.call(
          RpcCmd.ALLOC_BUFFER,
          packAllocBufferRequest({ device: this.device, size: BigInt(size) }),
          16,
        ),
      );
      if (reply.remotePtr === 0n) {
        buffer.failure = new OutOfSpaceError(
          Status.outOfSpace,
          `RpcBackend.allocBuffer: ${this.name} could not allocate ${size} bytes`,
          size,
        );
        throw buffer.failure;
      }
      // A buffer smaller than asked, or one whose addresses would wrap, would put tensors where
      // the server has no memory: refused here rather than sent on.
      if (reply.remoteSize < BigInt(size)) {
        buffer.failure = new RpcProtocolError(
          "ALLOC_BUFFER.reply.remote_size",
          8,
          `the server gave ${reply.remoteSize} bytes for ${size} asked`,
        );
        throw buffer.failure;
      }
      const base = unpackU64(
        "base",
        await c.call(RpcCmd.BUFFER_GET_BASE, packU64("remote_ptr", reply.remotePtr), 8),
      );
      if (base === 0n || base + BigInt(size) > 0xffff_ffff_ffff_ffffn) {
        buffer.failure = new RpcProtocolError(
          "BUFFER_GET_BASE.reply.base_ptr",
          0,
          `base 0x${base.toString(16)} cannot hold ${size} bytes`,
        );
        throw buffer.failure;
      }
      buffer.remote = { ptr: reply.remotePtr, base };
    });
    return buffer;
  }

  #freeBuffer(buffer: RpcBuffer): void {
    // The server's stored graph may point into this buffer: never recompute it after a free.
    this.#lastPlan = null;
    if (this.#disposed || this.#connection.closed) return;
    const c = this.#connection;
    this.#fire("FREE_BUFFER", async () => {
      if (!buffer.remote) return;
      await c.call(RpcCmd.FREE_BUFFER, packU64("remote_ptr", buffer.remote.ptr), null);
    });
  }

  /** Queues BUFFER_CLEAR (see {@link RpcBuffer.clear}). */
  clearBuffer(buffer: RpcBuffer, value: number): void {
    this.#alive("clearBuffer");
    if (!Number.isInteger(value) || value < 0 || value > 255) {
      throw new ArgumentError(`RpcBuffer.clear: value must be a byte, got ${value}`);
    }
    buffer.markWritten();
    const c = this.#connection;
    this.#fire("BUFFER_CLEAR", async () => {
      const remote = this.#remoteOf(buffer, "clear");
      await c.call(
        RpcCmd.BUFFER_CLEAR,
        packBufferClearRequest({ remotePtr: remote.ptr, value }),
        null,
      );
    });
  }

  /** The buffer of this backend holding `tensor`; throws if it has no memory here. */
  bufferOf(tensor: Tensor, verb: string): RpcBuffer {
    const placement = tensor.placement;
    if (!placement) throw new PlacementError(`${verb}: ${tensor.label} has no memory`);
    const buffer = placement.buffer;
    if (!(buffer instanceof RpcBuffer) || buffer.backend !== this) {
      throw new PlacementError(
        `${verb}: ${tensor.label} lives on ${buffer.backend.name}, not on ${this.name}`,
      );
    }
    if (buffer.disposed) {
      throw new DisposedError(`${verb}: the buffer holding ${tensor.label} was disposed`);
    }
    return buffer;
  }

  #remoteOf(buffer: RpcBuffer, verb: string): RpcRemoteBuffer {
    if (buffer.remote) return buffer.remote;
    throw buffer.failure ??
      new PlacementError(`${verb}: the server never allocated this ${this.name} buffer`);
  }

  /**
   * `tensor` packed as the protocol carries it (see {@link #rpcTensor}), kept while the tensor
   * stays in the same buffer at the same offset under the same name: a decoding step writes the
   * same inputs and reads the same logits every token. Run inside a queued task.
   */
  #packedTensor(tensor: Tensor, verb: string): Uint8Array {
    const at = tensor.placement;
    const kept = this.#packed.get(tensor);
    if (
      kept && at && kept.buffer === at.buffer && kept.offset === at.offset &&
      kept.name === tensor.name
    ) {
      return kept.bytes;
    }
    const bytes = packInitTensorRequest(this.#rpcTensor(tensor, verb));
    if (at) {
      this.#packed.set(tensor, { buffer: at.buffer, offset: at.offset, name: tensor.name, bytes });
    }
    return bytes;
  }

  /**
   * `tensor` as the protocol carries it: its server buffer and address, shape, strides, op and
   * params, sources and view source by id. Run inside a queued task (buffer handles known).
   */
  #rpcTensor(tensor: Tensor, verb: string): RpcTensor {
    const t = emptyRpcTensor();
    t.id = BigInt(tensor.id);
    t.type = DTYPES[tensor.dtype].ggmlType;
    const placement = tensor.placement;
    if (placement) {
      const buffer = this.bufferOf(tensor, verb);
      const remote = this.#remoteOf(buffer, verb);
      t.buffer = remote.ptr;
      t.data = remote.base + BigInt(placement.offset);
    }
    for (let d = 0; d < 4; d++) {
      t.ne[d] = tensor.ne[d]!;
      t.nb[d] = tensor.nb[d]!;
    }
    if (tensor.op !== Op.none) {
      const encoded = encodeGgmlOp(tensor);
      if (!encoded) {
        throw new PlacementError(
          `${verb}: ${opName(tensor.op)} (${tensor.label}) has no ggml op in RPC protocol 7.0.0`,
        );
      }
      t.op = encoded.op;
      t.opParams = encoded.opParams;
    }
    tensor.src.forEach((s, i) => t.src[i] = BigInt(s.id));
    if (tensor.viewSource) {
      // ggml's view_src is the tensor that owns the memory, never a view of it.
      t.viewSrc = BigInt(tensor.memoryOwner.id);
      t.viewOffs = BigInt(tensor.offsetInOwner);
    }
    t.name = tensor.name;
    return t;
  }

  /**
   * Queues the write. Data above 10 MiB is first offered by its FNV-1a hash (SET_TENSOR_HASH:
   * a server started with a cache directory may have it already), then sent if the server
   * lacks it. Quantized tensors whose rows are not a multiple of 512 are first announced
   * with INIT_TENSOR, as llama.cpp's client does (a CUDA server pads them).
   */
  setTensor(tensor: Tensor, data: ArrayBufferView, offset = 0): void {
    this.#write("setTensor", tensor, data, offset).catch((error: Error) => {
      this.#pending ??= error;
    });
  }

  setTensorAsync(tensor: Tensor, data: ArrayBufferView, offset = 0): Promise<void> {
    try {
      return this.#write("setTensorAsync", tensor, data, offset);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  // Throws the argument errors at once; returns the queued write.
  #write(verb: string, tensor: Tensor, data: ArrayBufferView, offset: number): Promise<void> {
    requireTensorData(verb, tensor, data);
    this.#alive(verb);
    const buffer = this.bufferOf(tensor, verb);
    requireTensorRange(verb, tensor, offset, data.byteLength);
    // The caller may reuse its array once this returns: send a copy.
    const bytes = new Uint8Array(data.byteLength);
    bytes.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
    buffer.markWritten();
    const c = this.#connection;
    // A view's rows are its owner's (weights fused into one tensor): the owner is announced.
    const owner = tensor.memoryOwner;
    const init = DTYPES[owner.dtype].quantized && owner.ne[0] % 512 !== 0 &&
      !this.#initialized.has(owner);
    if (init) this.#initialized.add(owner);
    return c.enqueue("SET_TENSOR", async () => {
      if (init) {
        const o = this.#rpcTensor(owner, verb);
        await c.call(RpcCmd.INIT_TENSOR, packInitTensorRequest(o), null);
      }
      let cacheFlag = 0;
      if (bytes.byteLength > RPC_HASH_THRESHOLD) {
        const hash = fnv1a64(bytes);
        const t = this.#rpcTensor(tensor, verb);
        const req = packSetTensorHashRequest({ tensor: t, offset: BigInt(offset), hash });
        if (unpackU8("result", await c.call(RpcCmd.SET_TENSOR_HASH, req, 1)) !== 0) {
          this.stats.hashHits++;
          return;
        }
        this.stats.hashMisses++;
        cacheFlag = 1;
      }
      const header = new Uint8Array(SET_TENSOR_HEADER_SIZE);
      const view = new DataView(header.buffer);
      header.set(this.#packedTensor(tensor, verb));
      view.setUint8(RPC_TENSOR_SIZE, cacheFlag);
      view.setBigUint64(RPC_TENSOR_SIZE + 1, BigInt(offset), true);
      // Held: it goes out with the next command that is not (a decode step's compute).
      await c.send(RpcCmd.SET_TENSOR, [header, bytes], true);
    });
  }

  /** Queues MEMSET_TENSOR: `size` bytes (default: to the end) from `offset` set to `value`. */
  memsetTensor(tensor: Tensor, value: number, offset = 0, size?: number): void {
    this.#alive("memsetTensor");
    const buffer = this.bufferOf(tensor, "memsetTensor");
    const length = size ?? tensor.nbytes - offset;
    requireTensorRange("memsetTensor", tensor, offset, length);
    if (!Number.isInteger(value) || value < 0 || value > 255) {
      throw new ArgumentError(`memsetTensor: value must be a byte, got ${value}`);
    }
    buffer.markWritten();
    const c = this.#connection;
    this.#fire("MEMSET_TENSOR", async () => {
      const req = packMemsetTensorRequest({
        tensor: this.#rpcTensor(tensor, "memsetTensor"),
        offset: BigInt(offset),
        size: BigInt(length),
        value,
      });
      await c.call(RpcCmd.MEMSET_TENSOR, req, null);
    });
  }

  /** Always throws: the server's memory is read with `getTensorAsync`. */
  getTensor(tensor: Tensor, _offset?: number, _size?: number): TensorData {
    throw new PlacementError(
      `RpcBackend.getTensor: ${tensor.label} is on ${this.name}; use ` +
        "`await backend.getTensorAsync(tensor)`",
    );
  }

  /** GET_TENSOR, after everything queued before it; rejects with an earlier queued failure. */
  async getTensorAsync(tensor: Tensor, offset = 0, size?: number): Promise<TensorData> {
    this.#alive("getTensorAsync");
    requireReadable("getTensorAsync", tensor);
    this.bufferOf(tensor, "getTensorAsync");
    const length = size ?? tensor.nbytes - offset;
    requireTensorRange("getTensorAsync", tensor, offset, length);
    const c = this.#connection;
    const bytes = await c.enqueue("GET_TENSOR", async () => {
      const req = packGetTensorRequest({
        tensor: this.#rpcTensor(tensor, "getTensorAsync"),
        offset: BigInt(offset),
        size: BigInt(length),
      });
      return await c.call(RpcCmd.GET_TENSOR, req, length);
    });
    this.#takePending();
    const count = Math.floor(length / dtypeSize[tensor.dtype]);
    return typedView(tensor.dtype, bytes.buffer as ArrayBuffer, count);
  }

  /**
   * Reads all of `tensor` into `into` (an array of exactly its bytes), as
   * {@link getTensorAsync} without allocating: for outputs read every step (a model's logits).
   * Should the connection fail, `into` may hold part of the bytes.
   *
   * @example
   * ```ts ignore
   * const logits = new Float32Array(out.nelements);
   * await rpc.getTensorIntoAsync(out, logits);
   * ```
   */
  async getTensorIntoAsync(tensor: Tensor, into: ArrayBufferView): Promise<void> {
    this.#alive("getTensorIntoAsync");
    requireReadable("getTensorIntoAsync", tensor);
    this.bufferOf(tensor, "getTensorIntoAsync");
    requireWholeTensorArray("getTensorIntoAsync", tensor, into);
    const bytes = new Uint8Array(into.buffer, into.byteOffset, into.byteLength);
    const c = this.#connection;
    await c.enqueue("GET_TENSOR", async () => {
      const range = packGetTensorRange(0n, BigInt(bytes.byteLength));
      await c.send(RpcCmd.GET_TENSOR, [this.#packedTensor(tensor, "getTensorIntoAsync"), range]);
      await c.receiveInto(RpcCmd.GET_TENSOR, bytes);
    });
    this.#takePending();
  }

  /** Waits for all queued work; rejects with the first failure among it. */
  async synchronize(): Promise<void> {
    this.#alive("synchronize");
    await this.#connection.drain();
    this.#takePending();
    if (this.#connection.failure) throw this.#connection.failure;
  }

  /** The server device's free and total memory (GET_DEVICE_MEMORY), in bytes. */
  async getDeviceMemory(): Promise<{ free: number; total: number }> {
    this.#alive("getDeviceMemory");
    const c = this.#connection;
    const rsp = unpackDeviceMemoryResponse(
      await c.enqueue(
        "GET_DEVICE_MEMORY",
        () => c.call(RpcCmd.GET_DEVICE_MEMORY, packU32("device", this.device), 16),
      ),
    );
    return { free: Number(rsp.free), total: Number(rsp.total) };
  }

  /** Bytes the server's buffer type gives `tensor` (GET_ALLOC_SIZE; at least its nbytes). */
  async getAllocSize(tensor: Tensor): Promise<number> {
    this.#alive("getAllocSize");
    const c = this.#connection;
    const size = await c.enqueue("GET_ALLOC_SIZE", async () => {
      // Unplaced tensors are described without an address, as llama.cpp's client does.
      const describe = (t: Tensor): RpcTensor =>
        t.placement ? this.#rpcTensor(t, "getAllocSize") : this.#describe(t);
      const req = packGetAllocSizeRequest({
        device: this.device,
        tensor: describe(tensor),
        srcs: tensor.src.map(describe),
      });
      return unpackU64("alloc_size", await c.call(RpcCmd.GET_ALLOC_SIZE, req, 8));
    });
    return Math.max(Number(size), tensor.nbytes);
  }

  #describe(tensor: Tensor): RpcTensor {
    const t = emptyRpcTensor();
    t.id = BigInt(tensor.id);
    t.type = DTYPES[tensor.dtype].ggmlType;
    for (let d = 0; d < 4; d++) {
      t.ne[d] = tensor.ne[d]!;
      t.nb[d] = tensor.nb[d]!;
    }
    const encoded = tensor.op === Op.none ? null : encodeGgmlOp(tensor);
    if (encoded) {
      t.op = encoded.op;
      t.opParams = encoded.opParams;
    }
    return t;
  }

  cpyTensorFrom(src: Tensor, dst: Tensor): Promise<void> {
    try {
      requireSameLayout("cpyTensorFrom", src, dst);
      const from = src.placement?.buffer;
      if (!from) throw new PlacementError(`cpyTensorFrom: ${src.label} has no memory`);
      if (from instanceof RpcBuffer && from.backend === this) {
        return this.#copyRemote(src, dst, "cpyTensorFrom");
      }
      return from.backend.getTensorAsync(src).then((data) =>
        this.setTensorAsync(dst, new Uint8Array(data.buffer, data.byteOffset, data.byteLength))
      );
    } catch (error) {
      return Promise.reject(error);
    }
  }

  cpyTensorTo(src: Tensor, dst: Tensor): Promise<void> {
    try {
      requireSameLayout("cpyTensorTo", src, dst);
      const to = dst.placement?.buffer;
      if (!to) throw new PlacementError(`cpyTensorTo: ${dst.label} has no memory`);
      if (to instanceof RpcBuffer && to.backend === this) {
        return this.#copyRemote(src, dst, "cpyTensorTo");
      }
      return this.getTensorAsync(src).then((data) =>
        to.backend.setTensorAsync(
          dst,
          new Uint8Array(data.buffer, data.byteOffset, data.byteLength),
        )
      );
    } catch (error) {
      return Promise.reject(error);
    }
  }

  // COPY_TENSOR within the server; a server that declines (result 0) gets the bytes resent.
  async #copyRemote(src: Tensor, dst: Tensor, verb: string): Promise<void> {
    this.#alive(verb);
    this.bufferOf(src, verb);
    this.bufferOf(dst, verb).markWritten();
    const c = this.#connection;
    const done = await c.enqueue("COPY_TENSOR", async () => {
      const req = packCopyTensorRequest({
        src: this.#rpcTensor(src, verb),
        dst: this.#rpcTensor(dst, verb),
      });
      return unpackU8("result", await c.call(RpcCmd.COPY_TENSOR, req, 1)) !== 0;
    });
    if (!done) {
      const data = await this.getTensorAsync(src);
      await this.setTensorAsync(dst, new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
    }
  }

  /**
   * Whether this backend can send `tensor`'s op: a ggml op of the same meaning exists in RPC
   * protocol 7.0.0 (`GRAFT_TO_GGML`), every shape and stride fits the protocol's u32 fields,
   * and the dtypes and layouts are ones ggml-cpu's kernels take for that op. ggml-cpu asserts
   * (and so aborts the server) on rows that are not contiguous for most ops, and computes some
   * unary ops wrongly on non-contiguous inputs, so only the ops ggml walks by strides (copies,
   * matrix products, row gathers and scatters, norms, softmax, rope, attention) take strided
   * operands, and those only with contiguous rows; every other op needs contiguous operands.
   */
  supportsOp(tensor: Tensor): boolean {
    const name = opName(tensor.op) as OpName;
    if (!GRAFT_TO_GGML[name]) return false;
    for (const t of [tensor, ...tensor.src]) {
      if (t.ne.some((n) => n > U32_MAX) || t.nb.some((n) => n > U32_MAX)) return false;
    }
    if (isViewOp(tensor.op)) return true;
    const src = tensor.src;
    const rows = (...ts: (Tensor | undefined)[]): boolean =>
      ts.every((t) => t === undefined || t.nb[0] === DTYPES[t.dtype].blockBytes);
    const f32 = (...ts: (Tensor | undefined)[]): boolean =>
      ts.every((t) => t === undefined || t.dtype === "f32");
    switch (name) {
      case "cpy":
      case "cont":
        return ["f32", "f16", "i32", "q8_0", "q4_0"].includes(tensor.dtype) &&
          (src[0]!.dtype === tensor.dtype || f32(src[0]) || src[0]!.dtype === "f16");
      case "mulMat":
        return f32(src[1]) && rows(src[0], src[1]);
      case "getRows":
        return src[1]!.dtype === "i32" && (f32(tensor) || src[0]!.dtype === "i32") &&
          rows(src[0]) && src[1]!.isContiguous;
      case "setRows":
        return f32(src[0]) && (f32(tensor) || tensor.dtype === "f16") && rows(src[0], tensor) &&
          src[1]!.dtype === "i32";
      case "rmsNorm":
      case "norm":
        return f32(tensor, src[0]) && rows(src[0]);
      case "softmax":
        return f32(tensor, src[0]) && rows(src[0], src[1]) &&
          (src[1] === undefined || f32(src[1]) || src[1].dtype === "f16");
      case "rope":
        // ggml-cpu reads the frequency factors (src2) as adjacent floats.
        return (f32(tensor, src[0]) || tensor.dtype === "f16") && src[1]!.dtype === "i32" &&
          rows(src[0]) && (src[2] === undefined || src[2].nb[0] === 4);
      case "flashAttnExt":
        // ggml-cpu reads the mask as f16.
        return src.slice(0, 3).every((s) => s.dtype === "f32" || s.dtype === "f16") &&
          rows(...src) && (src[3] === undefined || src[3].dtype === "f16");
      case "argsort":
        return f32(src[0]) && src[0]!.isContiguous;
      case "countEqual":
        // ggml-cpu's count_equal splits its row index wrongly for ne[2] or ne[3] above 1
        // (ops.cpp: i02 = (ir - i03*ne03)/ne01): only matrices count right there.
        return src.every((t) => t.isContiguous && t.ne[2] === 1 && t.ne[3] === 1);
      case "padCircular":
        // ggml-cpu wraps with (i - lp + ne) % ne: a left pad longer than its dim reads outside.
        return f32(tensor, src[0]) && src[0]!.isContiguous &&
          [0, 1, 2, 3].every((d) => tensor.params[2 * d]! <= src[0]!.ne[d]!);
      case "set":
        // ggml-cpu's set: f32 and i32.
        return (f32(tensor) || tensor.dtype === "i32") && src[0]!.isContiguous && rows(src[1]);
      case "im2col": {
        // ggml-cpu reads a 2D image's rows as ne[0] adjacent floats (iih * IW + iiw); Graft's
        // planar layout has no ggml form.
        const image = src[1]!;
        return tensor.params[7] === 0 && f32(image) && rows(image) &&
          (tensor.params[6] === 0 || image.nb[1] === image.ne[0] * 4);
      }
      default:
        return f32(tensor, ...src) && [tensor, ...src].every((t) => t.isContiguous);
    }
  }

  graphPlanCreate(graph: Graph): RpcPlan {
    this.#alive("graphPlanCreate");
    for (const node of graph.nodes) {
      if (!GRAFT_TO_GGML[opName(node.op) as OpName]) {
        throw new PlacementError(
          `graphPlanCreate: ${opName(node.op)} (${node.label}) has no ggml op in RPC protocol ` +
            "7.0.0; schedule it on a local backend",
        );
      }
    }
    return new RpcPlan(this, graph, (plan) => {
      if (this.#lastPlan === plan) this.#lastPlan = null;
    });
  }

  /**
   * Queues the plan's graph: GRAPH_COMPUTE with the whole graph, or GRAPH_RECOMPUTE when the
   * server's last graph on this connection is this plan's (the server keeps it).
   */
  graphPlanCompute(plan: GraphPlan, graph?: Graph): void {
    this.#alive("graphPlanCompute");
    if (!(plan instanceof RpcPlan) || plan.backend !== this) {
      throw new StalePlanError("graphPlanCompute: the plan was made by another backend");
    }
    if (plan.disposed) throw new DisposedError("graphPlanCompute: the plan was freed");
    plan.identity.check("graphPlanCompute", graph);
    const g = plan.graph;
    for (const [buffer, tensor] of plan.buffers) {
      if (buffer.disposed) {
        throw new DisposedError(
          `graphPlanCompute: the buffer holding ${tensor.label} was disposed`,
        );
      }
    }
    for (const buffer of plan.writes) buffer.markWritten();
    if (g.nodes.length === 0) return;
    const c = this.#connection;
    if (this.#lastPlan === plan) {
      this.stats.graphRecomputes++;
      this.#fire("GRAPH_RECOMPUTE", async () => {
        await c.call(RpcCmd.GRAPH_RECOMPUTE, packU32("device", this.device), null);
      });
      return;
    }
    this.#lastPlan = plan;
    this.stats.graphComputes++;
    this.#fire("GRAPH_COMPUTE", async () => {
      await c.call(RpcCmd.GRAPH_COMPUTE, this.#serializeGraph(g), null);
    });
  }

  // ggml's serialize_graph: node ids in order, then every tensor they reach once, with the
  // number of graph nodes that use it (ggml-cpu's fusion checks read it).
  #serializeGraph(graph: Graph): Uint8Array {
    const glus = swigluPairs(graph);
    const nodes = graph.nodes.filter((n) => !glus.silus.has(n));
    const srcOf = (t: Tensor): readonly Tensor[] => {
      const gate = glus.gates.get(t);
      return gate ? [gate, t.src[1]!] : t.src;
    };
    const useCount = new Map<Tensor, number>();
    for (const node of nodes) {
      for (const s of srcOf(node)) useCount.set(s, (useCount.get(s) ?? 0) + 1);
    }
    const tensors: RpcTensor[] = [];
    const seen = new Set<Tensor>();
    const add = (t: Tensor): void => {
      if (seen.has(t)) return;
      seen.add(t);
      const src = srcOf(t);
      for (const s of src) add(s);
      if (t.viewSource) add(t.memoryOwner);
      const r = this.#rpcTensor(t, "graphCompute");
      if (src !== t.src) {
        r.op = GgmlOp.GLU;
        r.opParams = new Int32Array(r.opParams.length);
        r.opParams[0] = GgmlGluOp.SWIGLU;
        r.src.fill(0n);
        src.forEach((s, i) => r.src[i] = BigInt(s.id));
      }
      r.useCount = useCount.get(t) ?? 0;
      if (t.op !== Op.none) r.flags = GGML_TENSOR_FLAG_COMPUTE;
      tensors.push(r);
    };
    for (const node of nodes) add(node);
    return packGraph({
      device: this.device,
      nodes: nodes.map((n) => BigInt(n.id)),
      tensors,
    });
  }

  graphPlanFree(plan: GraphPlan): void {
    plan.dispose();
  }

  /**
   * Computes a graph. The plan is kept for the next call: the same graph in the same memory
   * computed again is a GRAPH_RECOMPUTE (nothing but the device index goes over the wire).
   */
  graphCompute(graph: Graph): void {
    this.#alive("graphCompute");
    const kept = this.#oneOff;
    if (!kept || kept.graph !== graph || kept.identity.identity !== graph.identity()) {
      kept?.dispose();
      this.#oneOff = this.graphPlanCreate(graph);
    }
    this.graphPlanCompute(this.#oneOff!, graph);
  }

  /** True once disposed. */
  get disposed(): boolean {
    return this.#disposed;
  }

  /**
   * Closes the connection at once: work still queued is dropped (await `synchronize()` first).
   * The server frees this connection's buffers when it sees the connection close.
   */
  dispose(): void {
    if (this.#disposed) throw new DisposedError("RpcBackend.dispose: already disposed");
    this.#disposed = true;
    this.#oneOff?.dispose();
    this.#connection.close();
  }

  /** Disposes unless already disposed (for `using`). */
  [Symbol.dispose](): void {
    if (!this.#disposed) this.dispose();
  }
}

/**
 * The `mul(silu(gate), up)` pairs of `graph` that go to the server as one ggml GLU node
 * (SWIGLU, split form: `ggml_swiglu_split(gate, up)`), as llama.cpp sends a gated FFN: one node
 * and one barrier fewer for ggml-cpu, same bits (its swiglu is silu then the product). Only where
 * the silu feeds that product alone and is no output, so nothing reads the node left out, and
 * where ggml's GLU takes the operands: f32, same shape, contiguous.
 */
function swigluPairs(graph: Graph): { gates: Map<Tensor, Tensor>; silus: Set<Tensor> } {
  const uses = new Map<Tensor, number>();
  for (const node of graph.nodes) {
    for (const s of node.src) uses.set(s, (uses.get(s) ?? 0) + 1);
  }
  const gates = new Map<Tensor, Tensor>();
  const silus = new Set<Tensor>();
  const plain = (t: Tensor): boolean => t.dtype === "f32" && t.isContiguous;
  for (const node of graph.nodes) {
    const [silu, up] = node.src;
    if (node.op !== Op.mul || !silu || !up || silu.op !== Op.silu) continue;
    const gate = silu.src[0]!;
    // isOutput: an output of this graph or of any other built over it (someone reads it).
    if (uses.get(silu) !== 1 || silu.isOutput || silu.viewSource) continue;
    const same = [gate, up, silu, node].every((t) =>
      plain(t) && t.ne.every((n, d) => n === node.ne[d])
    );
    if (!same) continue;
    gates.set(node, gate);
    silus.add(silu);
  }
  return { gates, silus };
}
