/**
 * CPU graph plans: a graph's node table and work buffer in native memory, computed in one call.
 * @module
 */

import { DisposedError, PlacementError } from "../../errors.ts";
import { check, type NativeCore } from "../../core/core.ts";
import type { Graph } from "../../graph.ts";
import { CoreOp, Op } from "../../op.ts";
import type { Tensor } from "../../tensor.ts";
import type { GraphPlan } from "../backend.ts";
import { writesLeaf } from "../checks.ts";
import { PlanIdentity } from "../plan_identity.ts";
import { markFused } from "../../alloc/reuse.ts";
import type { CoreBackend } from "./backend.ts";
import type { CpuBuffer } from "./buffer.ts";
import { convFusedAway, fuseNodes } from "./fuse.ts";
import { computeNodes, encodeNodeTable, type TableEntry, tensorEntry } from "./node_table.ts";

const plans = new FinalizationRegistry<{ lib: NativeCore; handle: number }>((held) => {
  held.lib.graft_plan_free(held.handle);
});

/** Options of {@link CoreBackend.graphPlanCreate}. */
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

function ownerRange(backend: CoreBackend, tensor: Tensor): BufferRange {
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
function prepackedProducts(backend: CoreBackend, nodes: readonly Tensor[]): Tensor[] {
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
  /** The graph and placement the plan was made for; checked before every compute. */
  readonly identity: PlanIdentity;
  readonly workSize: number;
  /** Native handle. */
  readonly handle: number;
  /** The thread count the plan was made for. */
  readonly threads: number;
  /** The backend that made the plan. */
  readonly backend: CoreBackend;
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
  readonly #lib: NativeCore;
  /** Buffers the graph writes into (a leaf of), whose write counts each compute bumps. */
  readonly #writes: readonly CpuBuffer[];
  /** Buffers holding prepacked weights, with their write count when the plan last packed. */
  readonly #packedGenerations = new Map<CpuBuffer, number>();

  /** Use {@link CoreBackend.graphPlanCreate}. */
  constructor(
    backend: CoreBackend,
    lib: NativeCore,
    graph: Graph,
    threads: number,
    simdLevel: number,
    options: CpuPlanOptions = {},
  ) {
    const nodes = computeNodes(graph.nodes);
    // Memory that is not there yet (a fused-away im2col, see allocGraph) overlaps nothing; the
    // checks below name it if the plan does not fuse it after all.
    const placed = (t: Tensor): boolean => t.memoryOwner.placement !== null;
    const entries = options.fuse === false ? nodes.map(tensorEntry) : fuseNodes(graph, {
      overlaps: (a, b) =>
        placed(a) && placed(b) && overlaps(ownerRange(backend, a), ownerRange(backend, b)),
      addressOf: (t) => backend.addressOf(t),
    });
    // The intermediates computed inside a fused node (and their views) need no memory.
    const absorbed = new Set(entries.flatMap((e) => e.fused?.slice(0, -1) ?? []));
    const inside = (t: Tensor): boolean => absorbed.has(t.memoryOwner);
    for (const tensor of [...graph.leafs, ...graph.nodes]) {
      if (inside(tensor)) continue;
      // Only an unplaced tensor asks whether allocGraph left it out for fusion.
      if (!placed(tensor) && convFusedAway(graph).has(tensor.memoryOwner)) {
        throw new PlacementError(
          `graphPlanCreate: ${tensor.memoryOwner.label} has no memory: allocGraph planned it ` +
            `inside its conv2d product (CPU plans fuse the pair), but this plan does not fuse ` +
            `it${options.fuse === false ? " (fuse: false)" : ""}; plan the memory with ` +
            `\`fused: new Map()\` to give every node its own`,
        );
      }
      backend.bufferOf(tensor, "graphPlanCreate");
    }
    // A node that writes into read-only memory (a mapped weight, as a cpy into it) would fault.
    for (const node of nodes) {
      if (inside(node)) continue;
      backend.bufferOf(node.memoryOwner, "graphPlanCreate").requireWritable(
        "graphPlanCreate",
        node,
      );
    }
    // A product fused into another core op (conv_2d) packs its weight itself.
    const fusedProducts = new Set(
      entries.filter((e) => e.coreOp !== CoreOp.mul_mat).map((e) => e.tensor),
    );
    const computed = nodes.filter((t) => !inside(t));
    const prepacked = options.prepackWeights
      ? prepackedProducts(backend, computed).filter((t) => !fusedProducts.has(t))
      : [];
    // Reads of an intermediate fused away are refused until a plan computes it again.
    for (const entry of entries) {
      entry.fused.forEach((t, i) => markFused(t, i < entry.fused.length - 1 ? entry.tensor : null));
    }
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
    this.identity = new PlanIdentity(graph);
    this.handle = handle[0]!;
    this.workSize = Number(work[0]!);
    this.threads = threads;
    this.nodeCount = entries.length;
    this.entries = entries;
    this.prepacked = prepacked;
    this.#lib = lib;
    this.#writes = [
      ...new Set(computed.filter(writesLeaf).map((t) => backend.bufferOf(t, "graphPlanCreate"))),
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

  /**
   * Frees the plan. While the plan computes, the core refuses and this throws a BusyError,
   * leaving the plan alive: await the compute first. Computes queued behind others and not yet
   * started when the plan is freed reject with a DisposedError.
   */
  dispose(): void {
    if (this.#disposed) throw new DisposedError("graphPlanFree: plan already freed");
    // The core frees first: a refusal (busy) leaves the plan usable and disposable later.
    check(this.#lib, this.#lib.graft_plan_free(this.handle), "graphPlanFree");
    this.#disposed = true;
    plans.unregister(this);
  }

  /** Disposes unless already disposed (for `using`). */
  [Symbol.dispose](): void {
    if (!this.#disposed) this.dispose();
  }
}
