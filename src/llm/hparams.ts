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

/** `rope.scaling.type` values llama.cpp knows (`llama_rope_scaling_type`). */
export type RopeScalingType = "none" | "linear" | "yarn" | "longrope";

const ROPE_SCALING_TYPES: readonly RopeScalingType[] = ["none", "linear", "yarn", "longrope"];

/** Largest n_ctx_orig: ggml keeps it in an int32 op parameter. */
const N_CTX_ORIG_MAX = 2 ** 31 - 1;

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
  /**
   * `rope.scaling.type`: how the positions are scaled (llama.cpp's default, with no key, is
   * `"linear"`; without a factor that scales nothing).
   */
  readonly ropeScalingType: RopeScalingType;
  /**
   * The angle scale: 1 / `rope.scaling.factor` (or the older `rope.scale_linear`), 1 without a
   * factor or with scaling type `"none"` (llama.cpp's cparams.rope_freq_scale).
   */
  readonly ropeFreqScale: number;
  /** YaRN's extrapolation mix (ggml's ext_factor): 1 for `"yarn"`, else 0. */
  readonly ropeExtFactor: number;
  /**
   * Multiplies rope's cos and sin (ggml's attn_factor): YaRN's magnitude correction, cancelled
   * as llama.cpp does, times `rope.scaling.attn_factor` (default 1).
   */
  readonly ropeAttnFactor: number;
  /** YaRN's beta_fast (32: llama.cpp reads no key for it in llama models). */
  readonly ropeBetaFast: number;
  /** YaRN's beta_slow (1: llama.cpp reads no key for it in llama models). */
  readonly ropeBetaSlow: number;
  /**
   * `rope.scaling.original_context_length`, else (or when 0) the trained context: where YaRN's
   * ramp lies, and the context past which LongRoPE takes its long factors.
   */
  readonly nCtxOrigYarn: number;
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
  const nCtxTrain = int("context_length");
  return {
    arch,
    nCtxTrain,
    nEmbd,
    nLayer: int("block_count"),
    nFf: int("feed_forward_length"),
    nHead,
    nHeadKv,
    headDim,
    rmsEps,
    ropeFreqBase,
    ...readRopeScaling(header, arch, nCtxTrain),
    nRot,
    nVocab,
  };
}

/** The rope scaling fields of {@link LlamaHParams}. */
type RopeScaling = Pick<
  LlamaHParams,
  | "ropeScalingType"
  | "ropeFreqScale"
  | "ropeExtFactor"
  | "ropeAttnFactor"
  | "ropeBetaFast"
  | "ropeBetaSlow"
  | "nCtxOrigYarn"
>;

/**
 * Rope scaling as llama.cpp 0.3.36 computes it for a llama model: `llm_load_hparams` reads the
 * type (default "linear"), the factor (`rope.scaling.factor`, else `rope.scale_linear`),
 * `rope.scaling.attn_factor` and `rope.scaling.original_context_length`; llama_context then
 * derives ext_factor (1 for YaRN, else 0) and attn_factor. The `rope.scaling.yarn_*` keys are
 * read by other architectures only (grok, mistral3, deepseek2), so a llama model runs with
 * ggml's beta_fast 32 and beta_slow 1 and no log multiplier, whatever its file says, as in
 * llama.cpp. Each step rounds to f32, as the C++ does.
 */
function readRopeScaling(header: GGUFHeader, arch: string, nCtxTrain: number): RopeScaling {
  const key = (name: string): string => `${arch}.${name}`;
  const f = Math.fround;
  const typeKey = key("rope.scaling.type");
  const typeValue = metadataValue(header, typeKey) ?? "linear";
  const ropeScalingType = ROPE_SCALING_TYPES.find((t) => t === typeValue);
  if (ropeScalingType === undefined) {
    throw new ModelError(
      `model: ${typeKey} = ${
        typeof typeValue === "string" ? JSON.stringify(typeValue) : String(typeValue)
      } is not a rope scaling type ` +
        `(${ROPE_SCALING_TYPES.join(", ")})`,
    );
  }
  const finite = (name: string, fallback: number): number => {
    const value = numberAt(header, name, fallback);
    if (!Number.isFinite(f(value))) {
      throw new ModelError(`model: ${name} = ${value} is not a finite f32`);
    }
    return f(value);
  };
  const factorKey = metadataValue(header, key("rope.scaling.factor")) !== undefined
    ? key("rope.scaling.factor")
    : key("rope.scale_linear");
  const factor = finite(factorKey, 0);
  if (factor < 0) throw new ModelError(`model: ${factorKey} = ${factor} is negative`);
  // llama.cpp: a factor of 0 (or none) scales nothing; type "none" never scales.
  const ropeFreqScale = ropeScalingType === "none" || factor === 0 ? 1 : f(1 / factor);
  const ropeExtFactor = ropeScalingType === "yarn" ? 1 : 0;
  let attnFactor = 1;
  if (ropeExtFactor !== 0) {
    // llama_context: YaRN's attn_factor is get_mscale(factor, 1) = 1 + 0.1 ln(factor) (1 for a
    // factor <= 1), divided by ggml's own 1 + 0.1 ln(1 / freq_scale), which ggml multiplies
    // back in: the net magnitude is get_mscale's.
    const scale = f(1 / ropeFreqScale);
    const log = f(Math.log(scale));
    const mscale = scale <= 1 ? 1 : f(f(f(0.1) * log) + 1);
    attnFactor = f(mscale * f(1 / f(1 + f(f(0.1) * log))));
  }
  const ropeAttnFactor = f(attnFactor * finite(key("rope.scaling.attn_factor"), 1));
  const origKey = key("rope.scaling.original_context_length");
  const orig = numberAt(header, origKey, 0);
  if (!Number.isInteger(orig) || orig < 0 || orig > N_CTX_ORIG_MAX) {
    throw new ModelError(`model: ${origKey} = ${orig} is not an integer in [0, 2^31)`);
  }
  return {
    ropeScalingType,
    ropeFreqScale,
    ropeExtFactor,
    ropeAttnFactor,
    ropeBetaFast: 32,
    ropeBetaSlow: 1,
    nCtxOrigYarn: orig === 0 ? nCtxTrain : orig,
  };
}

/**
 * The name of the tensor of rope frequency factors that a model's blocks use at context `nCtx`,
 * as llama.cpp's `get_rope_factors`: `rope_freqs.weight` (Llama 3.1+), or for LongRoPE
 * `rope_factors_long.weight` when the context (padded to 256 as llama_context pads it) exceeds
 * the original one, else `rope_factors_short.weight`. The tensor is optional: a file without it
 * rotates by the plain frequencies.
 */
export function ropeFactorsName(hparams: LlamaHParams, nCtx: number): string {
  if (hparams.ropeScalingType !== "longrope") return "rope_freqs.weight";
  const padded = Math.ceil(nCtx / 256) * 256;
  return padded > hparams.nCtxOrigYarn ? "rope_factors_long.weight" : "rope_factors_short.weight";
}
