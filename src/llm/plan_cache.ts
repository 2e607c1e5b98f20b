/**
 * The llama graphs a model has planned, one per shape (tokens, KV bucket, all logits or the
 * last): each with its input tensors, its activation memory and the backend's plan, built once
 * and reused for every call of that shape. A call only writes the inputs (token ids, positions,
 * the mask) and computes. The least recently used plans beyond a few are freed.
 * @module
 */

import type { Backend, BackendBuffer, GraphPlan } from "../backend/backend.ts";
import { allocTensors } from "../alloc/alloc_tensors.ts";
import { CpuBackend } from "../backend/cpu/backend.ts";
import { allocGraph } from "../alloc/planner.ts";
import type { LlamaHParams } from "./hparams.ts";
import type { KvCache } from "./kv_cache.ts";
import {
  buildLlamaGraph,
  type LlamaGraph,
  type LlamaGraphShape,
  type LlamaWeights,
} from "./llama_graph.ts";

/** Plans kept at once (decode, a prefill size or two, their KV buckets). */
export const PLANS_KEPT = 8;

interface Entry {
  readonly built: LlamaGraph;
  readonly inputs: BackendBuffer;
  readonly activations: BackendBuffer;
  readonly plan: GraphPlan;
  readonly mask: Float32Array;
}

/** The plans of one model and cache. */
export class PlanCache implements Disposable {
  readonly #backend: Backend;
  readonly #hparams: LlamaHParams;
  readonly #weights: LlamaWeights;
  readonly #cache: KvCache;
  readonly #bucket: number;
  readonly #entries = new Map<string, Entry>();

  constructor(
    backend: Backend,
    hparams: LlamaHParams,
    weights: LlamaWeights,
    cache: KvCache,
    bucket: number,
  ) {
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
   * Evaluates `tokens` at positions `nPast...`; returns the logits (a copy): of the last token,
   * or of each with `all`.
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
    backend.setTensor(built.tokens, Int32Array.from(tokens));
    backend.setTensor(built.positions, Int32Array.from({ length: T }, (_, t) => nPast + t));
    // Row h + r·t is token t's (llama_graph.ts): keys up to its position are visible.
    const nKv = shape.nKv;
    const rows = mask.length / nKv;
    const r = rows / T;
    for (let row = 0; row < rows; row++) {
      const visible = nPast + Math.floor(row / r) + 1;
      const line = mask.subarray(row * nKv, (row + 1) * nKv);
      line.fill(0, 0, visible);
      line.fill(-Infinity, visible);
    }
    backend.setTensor(built.mask, mask);
    backend.graphPlanCompute(entry.plan);
    // The CPU reads its memory synchronously; other backends' getTensor may refuse to.
    const data = backend instanceof CpuBackend
      ? backend.getTensor(built.logits)
      : await backend.getTensorAsync(built.logits);
    return new Float32Array(data as Float32Array);
  }

  #entry(shape: LlamaGraphShape): Entry {
    const key = `${shape.nTokens}:${shape.nKv}:${shape.allLogits}`;
    const found = this.#entries.get(key);
    if (found) {
      // Most recently used last.
      this.#entries.delete(key);
      this.#entries.set(key, found);
      return found;
    }
    const built = buildLlamaGraph(this.#hparams, this.#weights, this.#cache, shape);
    const inputs = allocTensors(this.#backend, built.inputs);
    let activations: BackendBuffer | null = null;
    try {
      activations = allocGraph(this.#backend, built.graph);
      const plan = this.#backend.graphPlanCreate(built.graph);
      const entry: Entry = {
        built,
        inputs,
        activations,
        plan,
        mask: new Float32Array(built.mask.nelements),
      };
      this.#entries.set(key, entry);
      while (this.#entries.size > PLANS_KEPT) {
        const [oldest, old] = this.#entries.entries().next().value!;
        this.#entries.delete(oldest);
        free(old);
      }
      return entry;
    } catch (error) {
      activations?.dispose();
      inputs.dispose();
      throw error;
    }
  }

  /** Frees every plan and its memory. */
  dispose(): void {
    for (const entry of this.#entries.values()) free(entry);
    this.#entries.clear();
  }

  /** Same as {@link dispose}. */
  [Symbol.dispose](): void {
    this.dispose();
  }
}

function free(entry: Entry): void {
  entry.plan.dispose();
  entry.activations.dispose();
  entry.inputs.dispose();
}
