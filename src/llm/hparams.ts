/**
 * A llama-family model's hyperparameters, read from GGUF metadata under the architecture's
 * prefix (`llama.embedding_length`, ...) as llama.cpp's `llm_load_hparams` reads them.
 * @module
 */

import { GraftError } from "../errors.ts";
import type { GGUFHeader } from "../gguf/reader.ts";
import { metadataValue } from "../gguf/reader.ts";
import { arrayLength } from "../gguf/lazy_array.ts";

/** A model file Graft cannot run: an architecture it lacks, a key missing or out of range. */
export class ModelError extends GraftError {
  /** The error class name. */
  override name = "ModelError";
}

/** Architectures whose graph is the llama graph (`general.architecture`). */
export const LLAMA_ARCHITECTURES: readonly string[] = ["llama"];

/** The hyperparameters of a llama-family model. */
export interface LlamaHParams {
  /** `general.architecture`, the metadata keys' prefix. */
  readonly arch: string;
  /** `context_length`: the context the model was trained for. */
  readonly nCtxTrain: number;
  /** `embedding_length`. */
  readonly nEmbd: number;
  /** `block_count`. */
  readonly nLayer: number;
  /** `feed_forward_length`. */
  readonly nFf: number;
  /** `attention.head_count`. */
  readonly nHead: number;
  /** `attention.head_count_kv` (default: nHead). */
  readonly nHeadKv: number;
  /** `attention.key_length` (default nEmbd / nHead). */
  readonly headDim: number;
  /** `attention.layer_norm_rms_epsilon`. */
  readonly rmsEps: number;
  /** `rope.freq_base` (default 10000). */
  readonly ropeFreqBase: number;
  /** 1 / `rope.scaling.factor` for linear scaling, else 1. */
  readonly ropeFreqScale: number;
  /** `rope.dimension_count` (default headDim). */
  readonly nRot: number;
  /** `vocab_size`, else the length of `tokenizer.ggml.tokens`. */
  readonly nVocab: number;
}

function numberAt(header: GGUFHeader, key: string, fallback?: number): number {
  const value = metadataValue(header, key);
  if (value === undefined) {
    if (fallback !== undefined) return fallback;
    throw new ModelError(`model: metadata key ${key} is missing`);
  }
  if (typeof value !== "number" && typeof value !== "bigint") {
    throw new ModelError(`model: metadata key ${key} is not a number`);
  }
  return Number(value);
}

function positiveInt(key: string, value: number): number {
  if (!Number.isInteger(value) || value < 1 || value > 1 << 24) {
    throw new ModelError(`model: ${key} = ${value} is not a positive integer in range`);
  }
  return value;
}

/**
 * Reads a llama-family model's hyperparameters; a file of another architecture, a missing key
 * or an inconsistent value (heads that do not divide the width, kv heads that do not divide
 * the heads) is a ModelError naming the key.
 */
export function readLlamaHParams(header: GGUFHeader): LlamaHParams {
  const arch = metadataValue(header, "general.architecture");
  if (typeof arch !== "string" || !LLAMA_ARCHITECTURES.includes(arch)) {
    throw new ModelError(
      `model: general.architecture ${JSON.stringify(arch)} is not supported (Graft runs ` +
        `${LLAMA_ARCHITECTURES.join(", ")})`,
    );
  }
  const key = (name: string): string => `${arch}.${name}`;
  const int = (name: string, fallback?: number): number =>
    positiveInt(key(name), numberAt(header, key(name), fallback));
  const nEmbd = int("embedding_length");
  const nHead = int("attention.head_count");
  const nHeadKv = int("attention.head_count_kv", nHead);
  if (nHead % nHeadKv !== 0) {
    throw new ModelError(
      `model: ${key("attention.head_count")} = ${nHead} is not a multiple of ` +
        `${key("attention.head_count_kv")} = ${nHeadKv}`,
    );
  }
  const headDim = int("attention.key_length", Math.floor(nEmbd / nHead));
  if (
    headDim * nHead !== nEmbd && metadataValue(header, key("attention.key_length")) === undefined
  ) {
    throw new ModelError(`model: ${key("embedding_length")} = ${nEmbd} is not ${nHead} heads`);
  }
  const valueLength = int("attention.value_length", headDim);
  if (valueLength !== headDim) {
    throw new ModelError(`model: key_length ${headDim} != value_length ${valueLength}`);
  }
  const nRot = int("rope.dimension_count", headDim);
  if (nRot % 2 !== 0 || nRot > headDim) {
    throw new ModelError(
      `model: ${key("rope.dimension_count")} = ${nRot} must be even, <= ${headDim}`,
    );
  }
  const scalingType = metadataValue(header, key("rope.scaling.type"));
  const scalingFactor = numberAt(header, key("rope.scaling.factor"), 0);
  let ropeFreqScale = 1;
  if (scalingType === "linear" && scalingFactor > 0) ropeFreqScale = 1 / scalingFactor;
  else if (scalingType !== undefined && scalingType !== "none" && scalingType !== "linear") {
    throw new ModelError(`model: rope scaling ${String(scalingType)} is not supported`);
  }
  const tokens = metadataValue(header, "tokenizer.ggml.tokens");
  const tokenCount = tokens && typeof tokens === "object" && "items" in tokens
    ? arrayLength(tokens)
    : undefined;
  const nVocab = int("vocab_size", tokenCount);
  const rmsEps = numberAt(header, key("attention.layer_norm_rms_epsilon"));
  if (!(rmsEps > 0 && rmsEps < 1)) {
    throw new ModelError(`model: ${key("attention.layer_norm_rms_epsilon")} = ${rmsEps}`);
  }
  const ropeFreqBase = numberAt(header, key("rope.freq_base"), 10000);
  if (!(ropeFreqBase > 0) || !Number.isFinite(ropeFreqBase)) {
    throw new ModelError(`model: ${key("rope.freq_base")} = ${ropeFreqBase}`);
  }
  return {
    arch,
    nCtxTrain: int("context_length"),
    nEmbd,
    nLayer: int("block_count"),
    nFf: int("feed_forward_length"),
    nHead,
    nHeadKv,
    headDim,
    rmsEps,
    ropeFreqBase,
    ropeFreqScale,
    nRot,
    nVocab,
  };
}
