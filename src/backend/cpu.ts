/**
 * The CPU backend: buffers from the Zig core, a persistent thread pool, and graph plans that
 * compute a whole graph in one FFI call.
 * @module
 */

import { dtypeSize, type TensorData, typedView } from "../dtype.ts";
import { DisposedError, GraftError, PlacementError, StalePlanError } from "../errors.ts";
import { check, type GraftSymbols, loadLibrary, type LoadOptions } from "../ffi.ts";
import type { Graph } from "../graph.ts";
import { Op } from "../op.ts";
import type { Tensor } from "../tensor.ts";
import type { Backend, BackendBuffer, GraphPlan } from "./backend.ts";
import { computeNodes, encodeNodeTable, type TableEntry, tensorEntry } from "./node_table.ts";
import { fuseNodes } from "./fuse.ts";
import { requireSameLayout, requireTensorRange, writesLeaf } from "./checks.ts";

/** Tensor offsets in CPU buffers are 64-byte aligned (one cache line, one zmm register). */
export const CPU_ALIGNMENT = 64;

const buffers = new FinalizationRegistry<{ lib: GraftSymbols; handle: number }>((held) => {
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
  readonly #lib: GraftSymbols;

  /** Use {@link CpuBackend.allocBuffer}. */
  constructor(backend: CpuBackend, lib: GraftSymbols, size: number) {
    if (!Number.isInteger(size) || size <= 0) {
      throw new GraftError(`allocBuffer: size must be a positive integer, got ${size}`);
    }
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

  dispose(): void {
    if (this.#disposed) throw new DisposedError("CpuBuffer.dispose: buffer already disposed");
    this.#disposed = true;
    buffers.unregister(this);
    check(this.#lib, this.#lib.graft_buffer_free(this.handle), "CpuBuffer.dispose");
  }

  /** Disposes unless already disposed (for `using`). */
  [Symbol.dispose](): void {
    if (!this.#disposed) this.dispose();
  }
}

const plans = new FinalizationRegistry<{ lib: GraftSymbols; handle: number }>((held) => {
  held.lib.graft_plan_free(held.handle);
});

/** Options of {@link CpuBackend.graphPlanCreate}. */
export interface CpuPlanOptions {
  /**
   * Pack the weights of the graph's matrix products once, as the kernels read them, instead of
   * on every compute (default false). A weight is the src0 of a `mulMat` whose memory owner is
   * a leaf (op none) on this backend that no node of the graph writes. The packed copies live
   * in the plan's memory (as large as the weights, f16 weights stored as f32) and are packed
   * on the first compute. A later write into a weight's buffer through the backend
   * (`setTensor`, `setTensorAsync`, a tensor copy, another plan's `cpy`; see
   * {@link CpuBuffer.writeGeneration}) makes the next compute pack again, so results never
   * come from a stale copy, but a buffer written on every compute repacks every compute: keep
   * per-run inputs out of the weights' buffer. Memory written outside the backend, as through
   * raw FFI, is not seen: call {@link CpuBuffer.markWritten} after such a write. Results are
   * bitwise those of a plan without prepacking.
   */
  prepackWeights?: boolean;
  /**
   * Fuse node pairs whose intermediate only feeds the next node (default true): `mul` of a
   * `silu` and `mul` of an `rmsNorm` by a gain row run as one pass (see `src/backend/fuse.ts`).
   * Results are bitwise those without fusion, but the intermediate (the silu or rmsNorm result,
   * never a graph output) is not written: make it an output of the graph to read it.
   */
  fuse?: boolean;
}

/** A byte range of one CPU buffer. */
interface BufferRange {
  buffer: CpuBuffer;
  begin: number;
  end: number;
}

function ownerRange(backend: CpuBackend, tensor: Tensor): BufferRange {
  const owner = tensor.memoryOwner;
  const buffer = backend.bufferOf(owner, "graphPlanCreate");
  const begin = owner.placement!.offset;
  return { buffer, begin, end: begin + owner.nbytes };
}

function overlaps(a: BufferRange, b: BufferRange): boolean {
  return a.buffer === b.buffer && a.begin < b.end && b.begin < a.end;
}

/**
 * The mulMat nodes whose src0 is a weight (see {@link CpuPlanOptions.prepackWeights}): owned by
 * a leaf whose memory no node of the graph writes, not even in part. Every node's destination
 * is checked, not only copies into leafs, so that a placement that aliases a weight (however
 * it was made) never leaves a stale packed copy.
 */
function prepackedProducts(backend: CpuBackend, nodes: readonly Tensor[]): Tensor[] {
  const writes = nodes.map((t) => ownerRange(backend, t));
  return nodes.filter((t) => {
    if (t.op !== Op.mulMat) return false;
    const weight = t.src[0]!;
    if (weight.memoryOwner.op !== Op.none) return false;
    const range = ownerRange(backend, weight);
    return !writes.some((w) => overlaps(w, range));
  });
}

/** A graph plan in native memory: the node table and its work buffer. */
export class CpuPlan implements GraphPlan {
  readonly graph: Graph;
  readonly workSize: number;
  /** Native handle. */
  readonly handle: number;
  /** The thread count the plan was made for. */
  readonly threads: number;
  /** The backend that made the plan. */
  readonly backend: CpuBackend;
  /** Records in the core's node table: nodes computed (views excluded), a fused pair as one. */
  readonly nodeCount: number;
  /** The node table's records in order, each with the graph nodes it computes. */
  readonly entries: readonly TableEntry[];
  /**
   * The mulMat nodes whose weight (src0) the plan prepacks (see
   * {@link CpuPlanOptions.prepackWeights}); the core still computes from the weight itself for
   * shapes its packed kernels do not take (few columns, a src0 of several batches).
   */
  readonly prepacked: readonly Tensor[];
  #disposed = false;
  readonly #lib: GraftSymbols;
  /** Buffers the graph writes into (a leaf of), whose write counts each compute bumps. */
  readonly #writes: readonly CpuBuffer[];
  /** Buffers holding prepacked weights, with their write count when the plan last packed. */
  readonly #packedGenerations = new Map<CpuBuffer, number>();

  /** Use {@link CpuBackend.graphPlanCreate}. */
  constructor(
    backend: CpuBackend,
    lib: GraftSymbols,
    graph: Graph,
    threads: number,
    simdLevel: number,
    options: CpuPlanOptions = {},
  ) {
    const nodes = computeNodes(graph.nodes);
    for (const tensor of [...graph.leafs, ...graph.nodes]) {
      backend.bufferOf(tensor, "graphPlanCreate");
    }
    const prepacked = options.prepackWeights ? prepackedProducts(backend, nodes) : [];
    const entries = options.fuse === false ? nodes.map(tensorEntry) : fuseNodes(graph, {
      overlaps: (a, b) => overlaps(ownerRange(backend, a), ownerRange(backend, b)),
      addressOf: (t) => backend.addressOf(t),
    });
    const table = encodeNodeTable(entries, (t) => backend.addressOf(t), new Set(prepacked));
    const handle = new Uint32Array(1);
    const work = new BigUint64Array(1);
    check(
      lib,
      lib.graft_plan_create(table, entries.length, threads, simdLevel, handle, work),
      "graphPlanCreate",
    );
    this.backend = backend;
    this.graph = graph;
    this.handle = handle[0]!;
    this.workSize = Number(work[0]!);
    this.threads = threads;
    this.nodeCount = entries.length;
    this.entries = entries;
    this.prepacked = prepacked;
    this.#lib = lib;
    this.#writes = [
      ...new Set(nodes.filter(writesLeaf).map((t) => backend.bufferOf(t, "graphPlanCreate"))),
    ];
    // -1: never packed; the first compute packs anyway (the core starts unpacked).
    for (const t of prepacked) {
      this.#packedGenerations.set(backend.bufferOf(t.src[0]!, "graphPlanCreate"), -1);
    }
    plans.register(this, { lib, handle: this.handle }, this);
  }

  /**
   * What the backend does right before each compute of this plan (do not call it otherwise):
   * asks the core to pack the weights again when a weight's buffer was written since they were
   * packed, then counts this compute's writes. The plan's own writes never touch its weights
   * (such weights are not prepacked), so they do not make it repack.
   */
  beforeCompute(): void {
    let stale = false;
    for (const [buffer, generation] of this.#packedGenerations) {
      if (buffer.writeGeneration !== generation) stale = true;
    }
    if (stale) {
      check(this.#lib, this.#lib.graft_plan_repack(this.handle), "graphPlanCompute");
      for (const buffer of this.#packedGenerations.keys()) {
        this.#packedGenerations.set(buffer, buffer.writeGeneration);
      }
    }
    for (const buffer of this.#writes) {
      const current = this.#packedGenerations.get(buffer) === buffer.writeGeneration;
      buffer.markWritten();
      if (current) this.#packedGenerations.set(buffer, buffer.writeGeneration);
    }
  }

  /** True once disposed. */
  get disposed(): boolean {
    return this.#disposed;
  }

  /** Records each node's time in later computes (a little overhead: two clock reads a node). */
  enableProfiling(enable = true): void {
    if (this.#disposed) throw new DisposedError("enableProfiling: plan was freed");
    check(this.#lib, this.#lib.graft_plan_profile(this.handle, enable ? 1 : 0), "enableProfiling");
  }

  /**
   * Each node table record's milliseconds in the last compute (views excluded), with the tensor
   * it writes and the graph nodes it computes (two for a fused pair); includes the wait for the
   * slowest thread. Needs {@link enableProfiling}.
   */
  nodeTimings(): { tensor: Tensor; ms: number; fused: readonly Tensor[] }[] {
    if (this.#disposed) throw new DisposedError("nodeTimings: plan was freed");
    const out = new BigUint64Array(Math.max(1, this.nodeCount));
    check(this.#lib, this.#lib.graft_plan_timings(this.handle, out, out.length), "nodeTimings");
    return this.entries.map((entry, i) => ({
      tensor: entry.tensor,
      ms: Number(out[i]!) / 1e6,
      fused: entry.fused,
    }));
  }

  dispose(): void {
    if (this.#disposed) throw new DisposedError("graphPlanFree: plan already freed");
    this.#disposed = true;
    plans.unregister(this);
    check(this.#lib, this.#lib.graft_plan_free(this.handle), "graphPlanFree");
  }

  /** Disposes unless already disposed (for `using`). */
  [Symbol.dispose](): void {
    if (!this.#disposed) this.dispose();
  }
}

/** Options of {@link CpuBackend}. */
export interface CpuBackendOptions {
  /** Threads that compute graphs (default: 1 per available core, at most 64). */
  threads?: number;
  /** A name for reports, to tell several CPU backends apart (default "cpu"). */
  name?: string;
  /** Kernel build: "auto" picks the best the CPU supports. */
  simd?: "auto" | "avx2" | "avx512";
  /** Where to load the native library from. */
  library?: LoadOptions;
}

function defaultThreads(): number {
  try {
    return Math.max(1, Math.min(64, navigator.hardwareConcurrency));
  } catch {
    return 1;
  }
}

/**
 * The CPU backend.
 *
 * @example
 * ```ts
 * import { add, allocTensors, Context, CpuBackend, Graph } from "../../mod.ts";
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
export class CpuBackend implements Backend {
  readonly name: string;
  readonly alignment: number = CPU_ALIGNMENT;
  readonly #lib: GraftSymbols;
  #pool = 0;
  #simdLevel = 1;
  #threads = 1;
  #disposed = false;
  #tail: Promise<void> = Promise.resolve();
  #pending = 0;

  /** Loads the core, selects the kernel build and starts the thread pool. */
  constructor(options: CpuBackendOptions = {}) {
    this.name = options.name ?? "cpu";
    this.#lib = loadLibrary(options.library);
    const simd = options.simd ?? "auto";
    const supported = this.#lib.graft_simd_supported();
    const level = simd === "auto" ? supported : simd === "avx2" ? 1 : 2;
    if (supported === 0 || level > supported) {
      throw new GraftError(
        `CpuBackend: this CPU cannot run simd=${simd} (AVX2 with FMA and F16C is the minimum; ` +
          `best here: ${["none", "avx2", "avx512"][supported]})`,
      );
    }
    this.#simdLevel = level;
    this.#startPool(options.threads ?? defaultThreads());
  }

  /** The kernel build in use. */
  get simd(): "avx2" | "avx512" {
    return this.#simdLevel === 2 ? "avx512" : "avx2";
  }

  /** Threads computing graphs. */
  get threads(): number {
    return this.#threads;
  }

  /** Restarts the pool with `threads` threads. Plans made before must be made again. */
  setThreads(threads: number): void {
    this.#alive("setThreads");
    this.#idle("setThreads");
    check(this.#lib, this.#lib.graft_pool_destroy(this.#pool), "setThreads");
    this.#startPool(threads);
  }

  #startPool(threads: number): void {
    if (!Number.isInteger(threads) || threads < 1 || threads > 64) {
      throw new GraftError(`CpuBackend: threads must be an integer in 1..64, got ${threads}`);
    }
    const handle = new Uint32Array(1);
    check(this.#lib, this.#lib.graft_pool_create(threads, handle), "CpuBackend thread pool");
    this.#pool = handle[0]!;
    this.#threads = threads;
  }

  #alive(verb: string): void {
    if (this.#disposed) throw new DisposedError(`CpuBackend.${verb}: backend is disposed`);
  }

  #idle(verb: string): void {
    if (this.#pending > 0) {
      throw new GraftError(
        `CpuBackend.${verb}: asynchronous work is in flight; await synchronize() first`,
      );
    }
  }

  allocBuffer(size: number): CpuBuffer {
    this.#alive("allocBuffer");
    return new CpuBuffer(this, this.#lib, size);
  }

  /** The CPU buffer holding `tensor`; throws if it has no memory here. */
  bufferOf(tensor: Tensor, verb: string): CpuBuffer {
    const placement = tensor.placement;
    if (!placement) throw new PlacementError(`${verb}: ${tensor.label} has no memory`);
    const buffer = placement.buffer;
    if (!(buffer instanceof CpuBuffer) || buffer.backend !== this) {
      throw new PlacementError(
        `${verb}: ${tensor.label} lives on ${buffer.backend.name}, not on this cpu backend`,
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
    this.#alive("setTensor");
    this.#idle("setTensor");
    const buffer = this.bufferOf(tensor, "setTensor");
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
    const copy = new Uint8Array(data.byteLength);
    copy.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
    return this.#enqueue(() => this.#withIdle(() => this.setTensor(tensor, copy, offset)));
  }

  getTensorAsync(tensor: Tensor, offset = 0, size?: number): Promise<TensorData> {
    return this.#enqueue(() => this.#withIdle(() => this.getTensor(tensor, offset, size)));
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
    if (graph && graph !== plan.graph && graph.hash !== plan.graph.hash) {
      throw new StalePlanError(
        `graphPlanCompute: the plan was made for graph ${plan.graph.hash}, not ${graph.hash}`,
      );
    }
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

  /** Joins the pool's threads. Buffers and plans are disposed separately. */
  dispose(): void {
    if (this.#disposed) throw new DisposedError("CpuBackend.dispose: already disposed");
    this.#idle("dispose");
    this.#disposed = true;
    check(this.#lib, this.#lib.graft_pool_destroy(this.#pool), "CpuBackend.dispose");
  }

  /** Disposes unless already disposed (for `using`). */
  [Symbol.dispose](): void {
    if (!this.#disposed) this.dispose();
  }
}
