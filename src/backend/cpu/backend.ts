/**
 * The CPU backend: buffers from the Zig core, a persistent thread pool, and graph plans that
 * compute a whole graph in one FFI call. {@link CoreBackend} is everything but the loading and
 * file mappings, shared with the WebAssembly backend (`src/backend/wasm/backend.ts`), which
 * runs the same core built for wasm32: its addresses are offsets into the instance's memory,
 * and the node table carries them as it carries native addresses.
 * @module
 */

import { dtypeSize, type TensorData, typedView } from "../../dtype.ts";
import {
  ArgumentError,
  BusyError,
  DisposedError,
  PlacementError,
  StalePlanError,
} from "../../errors.ts";
import { check, loadNativeLibrary, type LoadOptions, type NativeCore } from "../../core/core.ts";
import type { Graph } from "../../graph.ts";
import type { Tensor } from "../../tensor.ts";
import type { Backend, BufferType, GraphPlan } from "../backend.ts";
import { isViewOp, opInfo } from "../../op.ts";
import { requireByteCount, showValue } from "../../args.ts";
import {
  requireSameLayout,
  requireTensorData,
  requireTensorRange,
  requireWholeTensorArray,
} from "../checks.ts";
import { requireReadable } from "../../alloc/reuse.ts";
import { CPU_ALIGNMENT, CpuBuffer, CpuMappedBuffer } from "./buffer.ts";
import { CpuPlan, type CpuPlanOptions } from "./plan.ts";
import { convFusedAway } from "./fuse.ts";
import { resolveSimd, type SimdChoice, type SimdLevel, simdLevelName } from "./simd.ts";

/** Options of every backend over the Zig core ({@link CpuBackend}, `WasmBackend`). */
export interface CoreBackendOptions {
  /**
   * Threads that compute graphs (CPU default: 1 per available core, at most 64; the
   * WebAssembly core has one).
   */
  threads?: number;
  /** A name for reports, to tell several backends apart (default "cpu" or "wasm"). */
  name?: string;
  /**
   * The largest buffer {@link CoreBackend.allocBuffer} makes (default and upper bound: the
   * backend's limit, {@link CPU_MAX_BUFFER_SIZE} on the CPU); lower it to hold weights in several
   * smaller buffers.
   */
  maxBufferSize?: number;
}

/** Options of {@link CpuBackend}. */
export interface CpuBackendOptions extends CoreBackendOptions {
  /**
   * Kernel build. Default: the `GRAFT_CPU` environment variable (`auto`, `avx2`, `avx512`),
   * else "auto", the best the CPU runs. An explicit build the CPU (or `GRAFT_CPU`) does not
   * allow is an error.
   */
  simd?: SimdChoice;
  /** Where to load the native library from. */
  library?: LoadOptions;
}

/**
 * What a backend over the Zig core is made of: the loaded core and what differs between the
 * native library and the WebAssembly core.
 */
export interface CoreBinding {
  /** The core's functions (FFI or WebAssembly). */
  readonly core: NativeCore;
  /** The kernel build's level number (1 AVX2, 2 AVX-512, 3 NEON, 4 SIMD128). */
  readonly simdLevel: number;
  /** The class, as errors name it ("CpuBackend", "WasmBackend"; minifiers rename classes). */
  readonly label: string;
  /** The buffer type's name ("cpu", "wasm"). */
  readonly memory: string;
  /** Threads when the options name none. */
  readonly defaultThreads: number;
  /** The most threads the core's pool takes (64 natively, 1 in the WebAssembly core). */
  readonly threadsMax: number;
  /** The largest buffer the core makes. */
  readonly maxBufferSize: number;
}

/** The largest CPU buffer: 2^53 - 1 bytes, the largest size a number holds exactly. */
export const CPU_MAX_BUFFER_SIZE: number = Number.MAX_SAFE_INTEGER;

/** Thread counts a pool takes: the core's threads_max (64 natively). */
function requireThreads(verb: string, threads: unknown, threadsMax: number): void {
  if (
    typeof threads !== "number" || !Number.isInteger(threads) || threads < 1 ||
    threads > threadsMax
  ) {
    throw new ArgumentError(
      `${verb}: threads must be an integer in 1..${threadsMax}, got ${showValue(threads)}`,
    );
  }
}

function defaultThreads(): number {
  try {
    return Math.max(1, Math.min(64, navigator.hardwareConcurrency));
  } catch {
    return 1;
  }
}

/**
 * A backend over the Zig core: its buffers, thread pool and graph plans (a node table written
 * once, one call per graph). {@link CpuBackend} runs it natively through FFI, `WasmBackend` as
 * WebAssembly; make one of those.
 */
export class CoreBackend implements Backend {
  readonly name: string;
  readonly alignment: number = CPU_ALIGNMENT;
  /** Host memory, 64-byte aligned offsets, up to `maxBufferSize` bytes a buffer. */
  readonly bufferType: BufferType;
  readonly #lib: NativeCore;
  readonly #threadsMax: number;
  readonly #label: string;
  #pool = 0;
  #simdLevel = 1;
  #threads = 1;
  #disposed = false;
  #tail: Promise<void> = Promise.resolve();
  #pending = 0;

  /**
   * Starts the thread pool of a loaded core (use {@link CpuBackend} or `WasmBackend`).
   * @ignore
   */
  protected constructor(options: CoreBackendOptions, binding: CoreBinding) {
    this.#label = binding.label;
    this.name = options.name ?? binding.memory;
    const limit = binding.maxBufferSize;
    const maxSize = options.maxBufferSize ?? limit;
    requireByteCount(`${this.#label}: maxBufferSize`, maxSize, 1);
    if (maxSize > limit) {
      throw new ArgumentError(
        `${this.#label}: maxBufferSize ${maxSize} is above the core's limit ${limit}`,
      );
    }
    this.bufferType = {
      name: binding.memory,
      alignment: CPU_ALIGNMENT,
      maxSize,
      hostVisible: true,
      allocSize: (tensor: Tensor): number => tensor.nbytes,
    };
    this.#lib = binding.core;
    this.#simdLevel = binding.simdLevel;
    this.#threadsMax = binding.threadsMax;
    this.#startPool(options.threads ?? binding.defaultThreads);
  }

  /** The kernel build in use. */
  get simd(): SimdLevel {
    return simdLevelName(this.#simdLevel);
  }

  /** Threads computing graphs. */
  get threads(): number {
    return this.#threads;
  }

  /** Restarts the pool with `threads` threads. Plans made before must be made again. */
  setThreads(threads: number): void {
    this.#alive("setThreads");
    this.#idle("setThreads");
    // Validate before tearing the old pool down: a bad count must leave the backend working.
    requireThreads("setThreads", threads, this.#threadsMax);
    check(this.#lib, this.#lib.graft_pool_destroy(this.#pool), "setThreads");
    this.#startPool(threads);
  }

  #startPool(threads: number): void {
    requireThreads(this.#label, threads, this.#threadsMax);
    const handle = new Uint32Array(1);
    check(
      this.#lib,
      this.#lib.graft_pool_create(threads, handle),
      `${this.#label} thread pool`,
    );
    this.#pool = handle[0]!;
    this.#threads = threads;
  }

  #alive(verb: string): void {
    if (this.#disposed) {
      throw new DisposedError(`${this.#label}.${verb}: backend is disposed`);
    }
  }

  #idle(verb: string): void {
    if (this.#pending > 0) {
      throw new BusyError(
        `${this.#label}.${verb}: asynchronous work is in flight; await synchronize() ` +
          "first",
      );
    }
  }

  allocBuffer(size: number): CpuBuffer {
    this.#alive("allocBuffer");
    if (typeof size === "number" && size > this.bufferType.maxSize) {
      throw new ArgumentError(
        `allocBuffer: size ${size} is above this backend's maxBufferSize ` +
          `${this.bufferType.maxSize}; spread the tensors over several buffers (allocWeights)`,
      );
    }
    return new CpuBuffer(this, this.#lib, size);
  }

  /**
   * conv2d's im2col nodes, which CPU plans fuse into their product (core `conv_2d`, an implicit
   * GEMM that never writes the unfolded image): `allocGraph` gives them no memory. A plan made
   * with `fuse: false` needs them placed: plan its memory with `fused: new Map()`.
   *
   * @example
   * ```ts
   * import { allocGraph, Context, conv2d, CpuBackend, Graph } from "../../../mod.ts";
   * using cpu = new CpuBackend();
   * const ctx = new Context();
   * const image = ctx.newTensor("f32", [32, 32, 16]);
   * const kernel = ctx.newTensor("f32", [3, 3, 16, 16]);
   * const graph = Graph.build(conv2d(kernel, image, { padding: 1 }));
   * console.log(cpu.fusedAway([graph]).size); // 1: the im2col, 9x the image, is never stored
   * using memory = allocGraph(cpu, graph); // the image's 64 KiB result, no 576 KiB im2col
   * console.log(memory.size < 9 * 32 * 32 * 16 * 4);
   * ```
   */
  fusedAway(graphs: readonly Graph[]): ReadonlyMap<Tensor, Tensor> {
    return new Map(graphs.flatMap((g) => [...convFusedAway(g)]));
  }

  /**
   * The CPU runs every op of the op table that the core computes, with the dtypes the op
   * builders accept (the core validates each node again when a plan is made).
   */
  supportsOp(tensor: Tensor): boolean {
    if (isViewOp(tensor.op)) return true;
    const info = opInfo(tensor.op);
    // An op that declares its result dtypes (the op table's support column) has kernels for
    // those only; the builders admit no others, but a hand-made tensor might.
    return info.core !== null && (info.support?.cpu.includes(tensor.dtype) ?? true);
  }

  /** The CPU buffer holding `tensor`; throws if it has no memory here. */
  bufferOf(tensor: Tensor, verb: string): CpuBuffer {
    const placement = tensor.placement;
    if (!placement) throw new PlacementError(`${verb}: ${tensor.label} has no memory`);
    const buffer = placement.buffer;
    if (!(buffer instanceof CpuBuffer) || buffer.backend !== this) {
      throw new PlacementError(
        `${verb}: ${tensor.label} lives on ${buffer.backend.name}, not on this ` +
          `${this.bufferType.name} backend`,
      );
    }
    if (buffer.disposed) {
      throw new DisposedError(`${verb}: the buffer holding ${tensor.label} was disposed`);
    }
    return buffer;
  }

  /** Native address of a placed tensor's first element. */
  addressOf(tensor: Tensor): bigint {
    const buffer = this.bufferOf(tensor, "addressOf");
    return buffer.address + BigInt(tensor.placement!.offset);
  }

  setTensor(tensor: Tensor, data: ArrayBufferView, offset = 0): void {
    requireTensorData("setTensor", tensor, data);
    this.#alive("setTensor");
    this.#idle("setTensor");
    const buffer = this.bufferOf(tensor, "setTensor");
    buffer.requireWritable("setTensor", tensor);
    requireTensorRange("setTensor", tensor, offset, data.byteLength);
    const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    const at = BigInt(tensor.placement!.offset + offset);
    check(
      this.#lib,
      this.#lib.graft_buffer_write(buffer.handle, at, bytes, BigInt(bytes.length)),
      "setTensor",
    );
    buffer.markWritten();
  }

  getTensor(tensor: Tensor, offset = 0, size?: number): TensorData {
    this.#alive("getTensor");
    this.#idle("getTensor");
    requireReadable("getTensor", tensor);
    const buffer = this.bufferOf(tensor, "getTensor");
    const length = size ?? tensor.nbytes - offset;
    requireTensorRange("getTensor", tensor, offset, length);
    const out = new ArrayBuffer(length);
    const at = BigInt(tensor.placement!.offset + offset);
    check(
      this.#lib,
      this.#lib.graft_buffer_read(buffer.handle, at, new Uint8Array(out), BigInt(length)),
      "getTensor",
    );
    return typedView(tensor.dtype, out, Math.floor(length / dtypeSize[tensor.dtype]));
  }

  /**
   * Reads the tensor's bytes (from `offset`) into `out`, which must hold `out.byteLength` of
   * them: `getTensor` without allocating, for reads repeated every step (a model's logits).
   */
  getTensorInto(tensor: Tensor, out: ArrayBufferView, offset = 0): void {
    this.#alive("getTensorInto");
    this.#idle("getTensorInto");
    requireReadable("getTensorInto", tensor);
    const buffer = this.bufferOf(tensor, "getTensorInto");
    requireTensorRange("getTensorInto", tensor, offset, out.byteLength);
    const at = BigInt(tensor.placement!.offset + offset);
    const bytes = new Uint8Array(out.buffer, out.byteOffset, out.byteLength);
    check(
      this.#lib,
      this.#lib.graft_buffer_read(buffer.handle, at, bytes, BigInt(out.byteLength)),
      "getTensorInto",
    );
  }

  #enqueue<T>(work: () => Promise<T> | T): Promise<T> {
    this.#pending++;
    // The count drops before the caller's await resumes, so it may use the backend at once.
    const run = async (): Promise<T> => {
      try {
        return await work();
      } finally {
        this.#pending--;
      }
    };
    const result = this.#tail.then(run);
    this.#tail = result.then(() => {}, () => {});
    return result;
  }

  setTensorAsync(tensor: Tensor, data: ArrayBufferView, offset = 0): Promise<void> {
    try {
      requireTensorData("setTensorAsync", tensor, data);
      const buffer = tensor.placement?.buffer;
      if (buffer instanceof CpuBuffer) buffer.requireWritable("setTensorAsync", tensor);
    } catch (error) {
      return Promise.reject(error);
    }
    const copy = new Uint8Array(data.byteLength);
    copy.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
    return this.#enqueue(() => this.#withIdle(() => this.setTensor(tensor, copy, offset)));
  }

  getTensorAsync(tensor: Tensor, offset = 0, size?: number): Promise<TensorData> {
    return this.#enqueue(() => this.#withIdle(() => this.getTensor(tensor, offset, size)));
  }

  getTensorIntoAsync(tensor: Tensor, into: ArrayBufferView): Promise<void> {
    try {
      requireWholeTensorArray("getTensorIntoAsync", tensor, into);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.#enqueue(() => this.#withIdle(() => this.getTensorInto(tensor, into)));
  }

  // Queued work runs when everything before it has finished; it counts itself as pending, so
  // the idle check is lifted while it runs.
  #withIdle<T>(work: () => T): T {
    const pending = this.#pending;
    this.#pending = 0;
    try {
      return work();
    } finally {
      this.#pending = pending;
    }
  }

  synchronize(): Promise<void> {
    return this.#tail;
  }

  cpyTensorFrom(src: Tensor, dst: Tensor): Promise<void> {
    requireSameLayout("cpyTensorFrom", src, dst);
    const srcBuffer = src.placement?.buffer;
    if (srcBuffer instanceof CpuBuffer && srcBuffer.backend === this) {
      this.#copyLocal(src, dst);
      return Promise.resolve();
    }
    if (!srcBuffer) {
      return Promise.reject(new PlacementError(`cpyTensorFrom: ${src.label} has no memory`));
    }
    return srcBuffer.backend.getTensorAsync(src).then((data) => this.setTensor(dst, data));
  }

  cpyTensorTo(src: Tensor, dst: Tensor): Promise<void> {
    requireSameLayout("cpyTensorTo", src, dst);
    const dstBuffer = dst.placement?.buffer;
    if (dstBuffer instanceof CpuBuffer && dstBuffer.backend === this) {
      this.#copyLocal(src, dst);
      return Promise.resolve();
    }
    if (!dstBuffer) {
      return Promise.reject(new PlacementError(`cpyTensorTo: ${dst.label} has no memory`));
    }
    return dstBuffer.backend.setTensorAsync(dst, this.getTensor(src));
  }

  #copyLocal(src: Tensor, dst: Tensor): void {
    this.#idle("cpyTensor");
    const from = this.bufferOf(src, "cpyTensor");
    const to = this.bufferOf(dst, "cpyTensor");
    to.requireWritable("cpyTensor", dst);
    check(
      this.#lib,
      this.#lib.graft_buffer_copy(
        from.handle,
        BigInt(src.placement!.offset),
        to.handle,
        BigInt(dst.placement!.offset),
        BigInt(src.nbytes),
      ),
      "cpyTensor",
    );
    to.markWritten();
  }

  /**
   * Makes a plan for `graph`: its node table and work buffer in native memory.
   *
   * @param graph The graph; every tensor of it must have memory on this backend.
   * @param options `prepackWeights`: pack the matrix products' weights once (see
   *   {@link CpuPlanOptions.prepackWeights}); off by default.
   * @returns The plan, to compute with {@link graphPlanCompute} and dispose.
   */
  graphPlanCreate(graph: Graph, options: CpuPlanOptions = {}): CpuPlan {
    this.#alive("graphPlanCreate");
    return new CpuPlan(this, this.#lib, graph, this.#threads, this.#simdLevel, options);
  }

  #checkPlan(plan: GraphPlan, graph: Graph | undefined): CpuPlan {
    this.#alive("graphPlanCompute");
    if (!(plan instanceof CpuPlan) || plan.backend !== this) {
      throw new StalePlanError("graphPlanCompute: the plan was made by another backend");
    }
    if (plan.disposed) throw new DisposedError("graphPlanCompute: the plan was freed");
    plan.identity.check("graphPlanCompute", graph);
    if (plan.threads !== this.#threads) {
      throw new StalePlanError(
        `graphPlanCompute: the plan was made for ${plan.threads} threads, the backend now has ` +
          `${this.#threads}; create the plan again`,
      );
    }
    return plan;
  }

  graphPlanCompute(plan: GraphPlan, graph?: Graph): void {
    const cpuPlan = this.#checkPlan(plan, graph);
    this.#idle("graphPlanCompute");
    cpuPlan.beforeCompute();
    check(this.#lib, this.#lib.graft_plan_compute(cpuPlan.handle, this.#pool), "graphPlanCompute");
  }

  /** Computes a plan on a Deno worker thread; resolves when done. Queued with other async work. */
  graphPlanComputeAsync(plan: GraphPlan, graph?: Graph): Promise<void> {
    const cpuPlan = this.#checkPlan(plan, graph);
    return this.#enqueue(async () => {
      // The plan may have been freed while this compute waited its turn.
      if (cpuPlan.disposed) {
        throw new DisposedError("graphPlanComputeAsync: the plan was freed before it ran");
      }
      if (this.#disposed) {
        throw new DisposedError("graphPlanComputeAsync: the backend was disposed before it ran");
      }
      // Here, behind the queued writes before it, so that it sees them.
      cpuPlan.beforeCompute();
      const status = await this.#lib.graft_plan_compute_async(cpuPlan.handle, this.#pool);
      check(this.#lib, status, "graphPlanComputeAsync");
    });
  }

  graphPlanFree(plan: GraphPlan): void {
    plan.dispose();
  }

  graphCompute(graph: Graph): void {
    using plan = this.graphPlanCreate(graph);
    this.graphPlanCompute(plan);
  }

  /** Plans and computes without blocking; resolves when done. */
  async graphComputeAsync(graph: Graph): Promise<void> {
    using plan = this.graphPlanCreate(graph);
    await this.graphPlanComputeAsync(plan);
  }

  /** True once disposed. */
  get disposed(): boolean {
    return this.#disposed;
  }

  /**
   * Joins the pool's threads. Buffers and plans are disposed separately. While asynchronous
   * work is queued or running this throws a BusyError and changes nothing: await
   * {@link synchronize} first.
   */
  dispose(): void {
    if (this.#disposed) {
      throw new DisposedError(`${this.#label}.dispose: already disposed`);
    }
    this.#idle("dispose");
    check(this.#lib, this.#lib.graft_pool_destroy(this.#pool), `${this.#label}.dispose`);
    this.#disposed = true;
  }

  /** Disposes unless already disposed (for `using`). */
  [Symbol.dispose](): void {
    if (!this.#disposed) this.dispose();
  }

  /**
   * The core this backend runs on (for buffers of it, made by subclasses).
   * @ignore
   */
  protected get core(): NativeCore {
    return this.#lib;
  }

  /** Throws a DisposedError naming `verb` once disposed (for subclasses' verbs). */
  protected requireAlive(verb: string): void {
    this.#alive(verb);
  }
}

/**
 * The CPU backend.
 *
 * @example
 * ```ts
 * import { add, allocTensors, Context, CpuBackend, Graph } from "../../../mod.ts";
 * using cpu = new CpuBackend({ threads: 2 });
 * const ctx = new Context();
 * const a = ctx.newTensor("f32", [3]);
 * const b = ctx.newTensor("f32", [3]);
 * const c = add(a, b);
 * const graph = Graph.build(c);
 * using buffer = allocTensors(cpu, [a, b, ...graph.nodes]);
 * cpu.setTensor(a, new Float32Array([1, 2, 3]));
 * cpu.setTensor(b, new Float32Array([10, 20, 30]));
 * cpu.graphCompute(graph);
 * console.log(cpu.getTensor(c)); // Float32Array [11, 22, 33]
 * ```
 */
export class CpuBackend extends CoreBackend {
  /** Loads the core, selects the kernel build and starts the thread pool. */
  constructor(options: CpuBackendOptions = {}) {
    const core = loadNativeLibrary(options.library);
    super(options, {
      core,
      label: "CpuBackend",
      simdLevel: resolveSimd(core, options.simd),
      memory: "cpu",
      defaultThreads: defaultThreads(),
      threadsMax: 64,
      maxBufferSize: CPU_MAX_BUFFER_SIZE,
    });
  }

  /**
   * Maps the whole file at `path` read-only (mmap PROT_READ, MAP_PRIVATE) as a buffer of this
   * backend: no copy and no memory of its own, the OS pages the file in as kernels read it.
   * Tensors placed in it at their byte offsets in the file are read in place; writing into
   * them is a ReadOnlyError. Disposing the buffer unmaps the file. `maxBufferSize` does not
   * apply (nothing is allocated). A file that cannot be mapped is a FileError naming the OS
   * error.
   *
   * @example
   * ```ts
   * import { CpuBackend } from "../../../mod.ts";
   * const path = Deno.makeTempFileSync();
   * Deno.writeFileSync(path, new Uint8Array([1, 2, 3, 4]));
   * using cpu = new CpuBackend({ threads: 1 });
   * using mapped = cpu.mapFile(path);
   * console.log(mapped.size, mapped.readOnly); // 4 true
   * ```
   */
  mapFile(path: string | URL): CpuMappedBuffer {
    this.requireAlive("mapFile");
    return new CpuMappedBuffer(this, this.core, path);
  }
}
