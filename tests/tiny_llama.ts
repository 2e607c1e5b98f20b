/**
 * Tiny synthetic llama GGUF files for tests: 2 blocks, 4 query heads sharing 2 kv heads of 8
 * dims, an 11-token vocabulary; weights drawn from a seeded generator, stored in mixed types
 * (f32, f16, q8_0) or all in f32, with extra metadata and tensors on request (rope scaling,
 * `rope_freqs.weight`). Each weight keeps the values the file stores, for formulas written
 * against them.
 * @module
 */

import type { GGUFMetadataEntry } from "../src/gguf/reader.ts";
import { ggmlTypeByName } from "../src/gguf/types.ts";
import { layoutTensors, writeGGUF } from "../src/gguf/writer.ts";
import { dequantize, quantize } from "../src/quant.ts";
import { seededRandom } from "./random_dag.ts";

/** Embedding width. */
export const E = 32;
/** Query heads. */
export const NH = 4;
/** KV heads. */
export const NKV = 2;
/** Dims per head (all rotated). */
export const HD = E / NH;
/** Feed-forward width. */
export const FF = 64;
/** Vocabulary size. */
export const V = 11;
/** Blocks. */
export const LAYERS = 2;
/** The RMS norm epsilon written to the file (an f32 there). */
export const EPS = 1e-5;
/** Rope's frequency base. */
export const BASE = 10000;
/** `llama.context_length`. */
export const CTX_TRAIN = 64;

/** A weight's storage type in a tiny file. */
export type StoredType = "f32" | "f16" | "q8_0";

/** One weight: its values as the file stores them (after any rounding), dims and type. */
export interface TinyWeight {
  name: string;
  dims: number[];
  type: StoredType;
  bytes: Uint8Array;
  values: Float32Array;
}

/** Options of {@link tinyWeights}. */
export interface TinyWeightOptions {
  /** Add an `output.weight` (else the output is tied to the embedding). */
  readonly untied?: boolean;
  /** Store every weight as f32 (default: a mix of f32, f16 and q8_0). */
  readonly allF32?: boolean;
}

/** The weights of a tiny llama drawn from `seed`. */
export function tinyWeights(
  seed: number,
  options: TinyWeightOptions = {},
): Map<string, TinyWeight> {
  const random = seededRandom(seed);
  const weights = new Map<string, TinyWeight>();
  const add = (name: string, dims: number[], stored: StoredType, center = 0, spread = 1): void => {
    const type = options.allF32 ? "f32" : stored;
    const n = dims.reduce((a, b) => a * b, 1);
    const raw = Float32Array.from({ length: n }, () => center + spread * (random() - 0.5));
    let bytes: Uint8Array;
    let values: Float32Array;
    if (type === "f32") {
      values = raw;
      bytes = new Uint8Array(raw.slice().buffer);
    } else if (type === "f16") {
      const half = Float16Array.from(raw);
      values = Float32Array.from(half);
      bytes = new Uint8Array(half.buffer);
    } else {
      bytes = quantize(raw, type);
      values = dequantize(bytes, type);
    }
    weights.set(name, { name, dims, type, bytes, values });
  };
  add("token_embd.weight", [E, V], "q8_0", 0, 2);
  for (let l = 0; l < LAYERS; l++) {
    add(`blk.${l}.attn_norm.weight`, [E], "f32", 1, 0.4);
    add(`blk.${l}.attn_q.weight`, [E, NH * HD], "f32", 0, 0.8);
    add(`blk.${l}.attn_k.weight`, [E, NKV * HD], "f16", 0, 0.8);
    add(`blk.${l}.attn_v.weight`, [E, NKV * HD], "f32", 0, 0.8);
    add(`blk.${l}.attn_output.weight`, [NH * HD, E], "f32", 0, 0.4);
    add(`blk.${l}.ffn_norm.weight`, [E], "f32", 1, 0.4);
    add(`blk.${l}.ffn_gate.weight`, [E, FF], "f32", 0, 0.6);
    add(`blk.${l}.ffn_up.weight`, [E, FF], "q8_0", 0, 0.6);
    add(`blk.${l}.ffn_down.weight`, [FF, E], "q8_0", 0, 0.4);
  }
  add("output_norm.weight", [E], "f32", 1, 0.4);
  if (options.untied) add("output.weight", [E, V], "f32", 0, 1);
  return weights;
}

/** An f32 weight of the given values (as `rope_freqs.weight`). */
export function f32Weight(name: string, values: readonly number[]): TinyWeight {
  const stored = Float32Array.from(values);
  return {
    name,
    dims: [stored.length],
    type: "f32",
    bytes: new Uint8Array(stored.slice().buffer),
    values: stored,
  };
}

/**
 * Writes a tiny llama GGUF of `weights` at `path`; `metadata` entries are added after the
 * model's own (a key given twice is the caller's mistake, not replaced).
 */
export async function writeTiny(
  path: string,
  weights: Map<string, TinyWeight>,
  metadata: readonly GGUFMetadataEntry[] = [],
): Promise<void> {
  const entries: GGUFMetadataEntry[] = [
    { key: "general.architecture", type: "string", value: "llama" },
    { key: "llama.context_length", type: "u32", value: CTX_TRAIN },
    { key: "llama.embedding_length", type: "u32", value: E },
    { key: "llama.block_count", type: "u32", value: LAYERS },
    { key: "llama.feed_forward_length", type: "u32", value: FF },
    { key: "llama.attention.head_count", type: "u32", value: NH },
    { key: "llama.attention.head_count_kv", type: "u32", value: NKV },
    { key: "llama.attention.layer_norm_rms_epsilon", type: "f32", value: EPS },
    { key: "llama.rope.freq_base", type: "f32", value: BASE },
    { key: "llama.rope.dimension_count", type: "u32", value: HD },
    {
      key: "tokenizer.ggml.tokens",
      type: "array",
      value: { itemType: "string", items: Array.from({ length: V }, (_, i) => `t${i}`) },
    },
    ...metadata,
  ];
  const list = [...weights.values()];
  const tensors = layoutTensors(list.map((w) => ({
    name: w.name,
    dims: w.dims,
    type: ggmlTypeByName(w.type)!,
    nbytes: w.bytes.length,
  })));
  await Deno.writeFile(
    path,
    writeGGUF({ metadata: entries, tensors, data: (i) => list[i]!.bytes }),
  );
}
