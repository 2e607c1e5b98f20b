/**
 * The KV cache: each layer's keys and values for every position of the context, as persistent
 * tensors in one buffer of the backend that runs the model. Keys are `[nEmbdKv, nCtx]` (a row
 * per position, as ggml's cache). Values are stored transposed, `[nCtx, nEmbdKv]` (a row per
 * channel), so attention's `V·p` reads rows of positions, as llama.cpp's non-flash path does;
 * for flash attention (`vTransposed` false) they are stored as the keys, a row per position, as
 * llama.cpp's cache with `-fa on` (the fused kernel reads a position's values together).
 * Layers split between backends have their cache on their own backend. Graphs write new positions with `setRows` at positions given as an input, so one plan serves
 * every position.
 * @module
 */

import type { Backend, BackendBuffer } from "../backend/backend.ts";
import { allocTensors } from "../alloc/alloc_tensors.ts";
import { Context } from "../context.ts";
import type { Tensor } from "../tensor.ts";
import type { LlamaHParams } from "./hparams.ts";

/** The element type of the cache. */
export type KvCacheType = "f16" | "f32";

/** One layer's cache tensors. */
export interface KvLayer {
  /** Keys, `[nEmbdKv, nCtx]`. */
  readonly k: Tensor;
  /** Values: transposed, `[nCtx, nEmbdKv]`; or `[nEmbdKv, nCtx]` as the keys (flash attention). */
  readonly v: Tensor;
}

/** The cache of every layer, in one backend buffer; dispose it to free the buffer. */
export class KvCache implements Disposable {
  /** Positions the cache holds. */
  readonly nCtx: number;
  /** Element type. */
  readonly type: KvCacheType;
  /** The layers' tensors. */
  readonly layers: readonly KvLayer[];
  /** Values stored transposed (`[nCtx, nEmbdKv]`), else as the keys (for flash attention). */
  readonly vTransposed: boolean;
  /** The buffers holding them: one per backend. */
  readonly buffers: readonly BackendBuffer[];

  /**
   * Allocates the cache of `nCtx` positions for `hparams`' layers, zeroed, on `backend` (or on
   * each layer's backend, when the layers are split between backends). `vTransposed` (default
   * true) stores the values transposed, as attention through `mulMat` reads them; false stores
   * them as the keys, as `flashAttnExt` reads them.
   */
  constructor(
    backend: Backend | ((layer: number) => Backend),
    hparams: LlamaHParams,
    nCtx: number,
    type: KvCacheType,
    vTransposed = true,
  ) {
    const ctx = new Context();
    const width = hparams.headDim * hparams.nHeadKv;
    const layers: KvLayer[] = [];
    for (let il = 0; il < hparams.nLayer; il++) {
      layers.push({
        k: ctx.newTensor(type, [width, nCtx], `cache_k_l${il}`),
        v: ctx.newTensor(type, vTransposed ? [nCtx, width] : [width, nCtx], `cache_v_l${il}`),
      });
    }
    this.nCtx = nCtx;
    this.type = type;
    this.layers = layers;
    this.vTransposed = vTransposed;
    const backendOf = typeof backend === "function" ? backend : () => backend;
    const groups = new Map<Backend, Tensor[]>();
    layers.forEach((layer, il) => {
      const b = backendOf(il);
      groups.set(b, [...(groups.get(b) ?? []), layer.k, layer.v]);
    });
    const buffers: BackendBuffer[] = [];
    try {
      for (const [b, tensors] of groups) buffers.push(allocTensors(b, tensors));
    } catch (error) {
      for (const buffer of buffers) buffer.dispose();
      throw error;
    }
    this.buffers = buffers;
    // Attention reads whole buckets of positions, masked past the filled ones: masked keys weigh
    // 0, but 0 times a value that is not finite is NaN, so every value must start finite (as
    // llama.cpp clears its cache buffer).
    const zeros = new Uint8Array(layers[0]?.k.nbytes ?? 0);
    layers.forEach((layer, il) => {
      backendOf(il).setTensor(layer.k, zeros);
      backendOf(il).setTensor(layer.v, zeros);
    });
  }

  /** Bytes of the cache. */
  get size(): number {
    return this.buffers.reduce((sum, b) => sum + b.size, 0);
  }

  /** Frees the buffers. */
  dispose(): void {
    for (const buffer of this.buffers) buffer.dispose();
  }

  /** Same as {@link dispose}. */
  [Symbol.dispose](): void {
    this.dispose();
  }
}
