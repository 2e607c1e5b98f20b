/**
 * The llama graphs a model has planned, one per shape (tokens, KV bucket, all logits or the
 * last): each with its input tensors, its activation memory and the backend's plan, built once
 * and reused for every call of that shape. A call only writes the inputs (token ids, positions,
 * the mask) and computes. The least recently used plans beyond a few are freed.
 * @module
 */

import type { Backend, BackendBuffer } from "../backend/backend.ts";
import type { Tensor } from "../tensor.ts";
import { GraftError } from "../errors.ts";
import { Schedule } from "../sched/schedule.ts";
import { allocTensors } from "../alloc/alloc_tensors.ts";
import { allocGraph, type MemoryPlan, planGraph } from "../alloc/planner.ts";
import type { LlamaHParams } from "./hparams.ts";
import type { KvCache } from "./kv_cache.ts";
import {
  buildLlamaGraph,
  type LlamaGraph,
  type LlamaGraphOptions,
  type LlamaGraphShape,
  type LlamaWeights,
  vCacheIndices,
} from "./llama_graph.ts";

/** Plans kept at once (decode, a prefill size or two, their KV buckets). */
export const PLANS_KEPT = 8;

/** A run of blocks on one backend: blocks from `from` on (up to the next stage's `from`). */
export interface LayerStage {
  /** The backend the blocks run on (their weights and KV cache live there). */
  readonly backend: Backend;
  /** The stage's first block. */
  readonly from: number;
}

/**
 * Layers split between backends: blocks from `from` on, and the output, on `second`; with
 * `more`, further stages after `second` (RPC servers), the output on the last.
 */
export interface LayerSplit {
  /** Runs the embedding and the blocks before `from`; holds the graph's inputs. */
  readonly first: Backend;
  /** Runs the blocks from `from` on and the output. */
  readonly second: Backend;
  /** The first block on `second`. */
  readonly from: number;
  /** Stages after `second`, in block order (each `from` above the one before). */
  readonly more?: readonly LayerStage[];
}

interface Entry {
  readonly built: LlamaGraph;
  readonly inputs: BackendBuffer;
  /** The mask's values: f32, or f16 (flash attention). */
  readonly mask: Float32Array | Float16Array;
  readonly vIndices: Int32Array;
  /** The token ids and positions written as inputs (the plan's own arrays, reused). */
  readonly tokens: Int32Array;
  readonly positions: Int32Array;
  /** Computes the graph (inputs written) and reads the logits into the plan's array. */
  readonly compute: () => Promise<Float32Array>;
  readonly free: () => void;
}

/** The plans of one model and cache. */
export class PlanCache implements Disposable {
  readonly #backend: Backend;
  readonly #hparams: LlamaHParams;
  readonly #weights: LlamaWeights;
  readonly #cache: KvCache;
  readonly #bucket: number;
  readonly #split: LayerSplit | null;
  readonly #graph: LlamaGraphOptions;
  readonly #entries = new Map<string, Entry>();
  /** The most recently used entry and its key (also in #entries). */
  #lastKey: string | null = null;
  #last: Entry | null = null;

  /**
   * Plans for `weights` and `cache` on `backend`, or split by layers (`split`: then `backend` is
   * the split's first backend, which holds the inputs).
   */
  constructor(
    backend: Backend,
    hparams: LlamaHParams,
    weights: LlamaWeights,
    cache: KvCache,
    bucket: number,
    split: LayerSplit | null = null,
    graph: LlamaGraphOptions = {},
  ) {
    this.#graph = graph;
    this.#split = split;
    this.#backend = backend;
    this.#hparams = hparams;
    this.#weights = weights;
    this.#cache = cache;
    this.#bucket = bucket;
  }

  /** Plans built so far and still kept. */
  get size(): number {
    return this.#entries.size;
  }

  /** The KV positions attention reads for tokens up to `end`: whole buckets, at most nCtx. */
  kvLength(end: number): number {
    return Math.min(this.#cache.nCtx, Math.ceil(end / this.#bucket) * this.#bucket);
  }

  /**
   * Evaluates `tokens` at positions `nPast...`; returns the logits of the last token, or of each
   * with `all`. The array is the plan's own, overwritten by its next run: copy what must outlive
   * it (so that generating allocates nothing per token).
   */
  async run(tokens: readonly number[], nPast: number, all: boolean): Promise<Float32Array> {
    const shape: LlamaGraphShape = {
      nTokens: tokens.length,
      nKv: this.kvLength(nPast + tokens.length),
      allLogits: all && tokens.length > 1,
    };
    const entry = this.#entry(shape);
    const { built, mask } = entry;
    const backend = this.#backend;
    const T = tokens.length;
    // The plan's arrays: a decoding step allocates nothing here (an RPC client's garbage is
    // collected on the cores its server computes on).
    const ids = entry.tokens;
    const positions = entry.positions;
    for (let t = 0; t < T; t++) {
      ids[t] = tokens[t]!;
      positions[t] = nPast + t;
    }
    backend.setTensor(built.tokens, ids);
    backend.setTensor(built.positions, positions);
    // Row t is token t's (llama_graph.ts): keys up to its position are visible.
    const nKv = shape.nKv;
    for (let t = 0; t < T; t++) {
      const visible = nPast + t + 1;
      const line = mask.subarray(t * nKv, (t + 1) * nKv);
      line.fill(0, 0, visible);
      line.fill(-Infinity, visible);
    }
    backend.setTensor(built.mask, mask);
    const { headDim, nHeadKv } = this.#hparams;
    vCacheIndices(entry.vIndices, headDim * nHeadKv, this.#cache.nCtx, nPast);
    backend.setTensor(built.vIndices, entry.vIndices);
    return await entry.compute();
  }

  /**
   * The activation memory plan of the graph for `nTokens` tokens after `nPast` (for a timeline:
   * `planToSvg`); builds the graph's metadata only, nothing is allocated.
   */
  memoryPlan(nTokens: number, nPast: number): MemoryPlan {
    const shape = { nTokens, nKv: this.kvLength(nPast + nTokens), allLogits: false };
    const built = buildLlamaGraph(this.#hparams, this.#weights, this.#cache, shape, this.#graph);
    return planGraph(built.graph, { alignment: this.#backend.alignment });
  }

  #entry(shape: LlamaGraphShape): Entry {
    const key = `${shape.nTokens}:${shape.nKv}:${shape.allLogits}`;
    // Decoding asks for the plan of the step before: it is already the most recent.
    if (this.#lastKey === key) return this.#last!;
    const found = this.#entries.get(key);
    if (found) {
      this.#lastKey = key;
      this.#last = found;
      // Most recently used last.
      this.#entries.delete(key);
      this.#entries.set(key, found);
      return found;
    }
    const built = buildLlamaGraph(this.#hparams, this.#weights, this.#cache, shape, this.#graph);
    const inputs = allocTensors(this.#backend, built.inputs);
    try {
      const run = this.#split ? this.#scheduled(built, this.#split) : this.#planned(built);
      const entry: Entry = {
        built,
        inputs,
        mask: built.mask.dtype === "f16"
          ? new Float16Array(built.mask.nelements)
          : new Float32Array(built.mask.nelements),
        vIndices: new Int32Array(built.vIndices.nelements),
        tokens: new Int32Array(built.tokens.nelements),
        positions: new Int32Array(built.positions.nelements),
        compute: run.compute,
        free: () => {
          run.free();
          inputs.dispose();
        },
      };
      this.#entries.set(key, entry);
      this.#lastKey = key;
      this.#last = entry;
      while (this.#entries.size > PLANS_KEPT) {
        const [oldest, old] = this.#entries.entries().next().value!;
        this.#entries.delete(oldest);
        old.free();
      }
      return entry;
    } catch (error) {
      inputs.dispose();
      throw error;
    }
  }

  /** One backend: the planner's buffer and the backend's plan. */
  #planned(built: LlamaGraph): Pick<Entry, "compute" | "free"> {
    const backend = this.#backend;
    const activations = allocGraph(backend, built.graph);
    try {
      const plan = backend.graphPlanCreate(built.graph);
      const logits = new Float32Array(built.logits.nelements);
      return {
        compute: async (): Promise<Float32Array> => {
          backend.graphPlanCompute(plan);
          await backend.getTensorIntoAsync(built.logits, logits);
          return logits;
        },
        free: (): void => {
          plan.dispose();
          activations.dispose();
        },
      };
    } catch (error) {
      activations.dispose();
      throw error;
    }
  }

  /**
   * Layers split between backends: a schedule cut after the embedding or block `from - 1` of
   * each stage, the last stage ending at the logits.
   */
  #scheduled(built: LlamaGraph, split: LayerSplit): Pick<Entry, "compute" | "free"> {
    const stages = [{ backend: split.second, from: split.from }, ...(split.more ?? [])];
    const endBefore = (from: number): Tensor => {
      const name = from === 0 ? "inp_embd" : `l_out-${from - 1}`;
      const node = built.graph.nodes.find((t) => t.name === name);
      if (!node) throw new GraftError(`llm: no node ${name} to split the layers at`);
      return node;
    };
    const cuts = [{ upTo: endBefore(stages[0]!.from), backend: split.first }];
    stages.forEach((stage, i) => {
      const next = stages[i + 1];
      cuts.push({ upTo: next ? endBefore(next.from) : built.logits, backend: stage.backend });
    });
    const schedule = Schedule.fromCuts(
      built.graph,
      cuts,
      (backend, graphs, options) => allocGraph(backend, graphs, options),
    );
    // The logits are read into the plan's own array: a fresh 196 KB array a token was most of
    // what an RPC client allocated, and V8 collected it on the cores the server needs.
    const logits = new Float32Array(built.logits.nelements);
    return {
      compute: async (): Promise<Float32Array> => {
        await schedule.compute();
        await schedule.getOutputInto(built.logits, logits);
        return logits;
      },
      free: (): void => schedule.dispose(),
    };
  }

  /** Frees every plan and its memory. */
  dispose(): void {
    for (const entry of this.#entries.values()) entry.free();
    this.#entries.clear();
    this.#lastKey = null;
    this.#last = null;
  }

  /** Same as {@link dispose}. */
  [Symbol.dispose](): void {
    this.dispose();
  }
}
