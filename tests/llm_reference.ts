/**
 * A float64 reference forward pass of a llama-family GGUF model, written from first principles
 * for tests: the independent check of the engine's llama graph. It shares nothing with the
 * engine but the GGUF reader and {@link dequantize} (bit-exact with ggml, tested elsewhere).
 *
 * The math is llama.cpp's `llm_build_llama`: x = token_embd[id]; per block
 * h = rmsnorm(x) * attn_norm; q, k, v = Wq h, Wk h, Wv h; RoPE in ggml's normal mode (adjacent
 * pairs, with llama.cpp's rope scaling: linear, YaRN and the frequency factors of
 * `rope_freqs.weight` or LongRoPE's tensors, by ggml's formulas) on q and k; causal softmax attention per head with GQA, scale 1/sqrt(head_dim);
 * x += Wo attn; h = rmsnorm(x) * ffn_norm; x += Wdown (silu(Wgate h) * Wup h); then
 * rmsnorm(x) * output_norm and logits = Wout x (Wout tied to token_embd when the file has no
 * `output.weight`). Weights are kept as Float32Array (the dequantized values are f32, so that is
 * exact); every sum, product and transcendental is computed in f64.
 * @module
 */

import { GGUFFile } from "../src/gguf/file.ts";
import { metadataValue } from "../src/gguf/reader.ts";
import { arrayLength } from "../src/gguf/lazy_array.ts";
import type { GGUFHeader, GGUFTensorInfo } from "../src/gguf/reader.ts";
import { dequantize, isQuantDType } from "../src/quant.ts";

/** One transformer block's weights, dequantized; matrices in ggml order [in, out]. */
export interface ReferenceLayer {
  readonly attnNorm: Float32Array;
  /** [nEmbd, nHead * headDim]: element (i, o) at `o * nEmbd + i`. */
  readonly wq: Float32Array;
  /** [nEmbd, nHeadKV * headDim]. */
  readonly wk: Float32Array;
  /** [nEmbd, nHeadKV * headDimV]. */
  readonly wv: Float32Array;
  /** [nHead * headDimV, nEmbd]. */
  readonly wo: Float32Array;
  readonly ffnNorm: Float32Array;
  /** [nEmbd, nFF]. */
  readonly wGate: Float32Array;
  /** [nEmbd, nFF]. */
  readonly wUp: Float32Array;
  /** [nFF, nEmbd]. */
  readonly wDown: Float32Array;
}

/** A llama-family model's hyperparameters and dequantized weights. */
export interface ReferenceModel {
  readonly nEmbd: number;
  /** Blocks evaluated (the `layers` option, or all of the file's). */
  readonly nLayer: number;
  readonly nFF: number;
  readonly nHead: number;
  readonly nHeadKV: number;
  /** Key (and query) dims per head. */
  readonly headDim: number;
  /** Value dims per head. */
  readonly headDimV: number;
  readonly eps: number;
  readonly ropeBase: number;
  /** Leading dims of each q/k head that RoPE rotates; the rest pass through. */
  readonly ropeDims: number;
  /** Angles are scaled by this (1 / rope.scaling.factor; 1 for scaling type "none"). */
  readonly ropeFreqScale: number;
  /** YaRN's mix (ggml's ext_factor): 1 for scaling type "yarn", else 0. */
  readonly ropeExtFactor: number;
  /**
   * What cos and sin are multiplied by in the end: `rope.scaling.attn_factor`, times YaRN's
   * 1 + 0.1 ln(factor) for a YaRN factor above 1 (llama.cpp's cparams and ggml's rope_yarn
   * together come to that).
   */
  readonly ropeMagnitude: number;
  /** YaRN's beta_fast and beta_slow (llama.cpp's defaults for llama models: 32 and 1). */
  readonly ropeBetaFast: number;
  readonly ropeBetaSlow: number;
  /** YaRN's original context (rope.scaling.original_context_length, else context_length). */
  readonly ropeCtxOrig: number;
  /** Per-pair divisors of the angle (rope_freqs.weight, or LongRoPE's), or null. */
  readonly ropeFreqFactors: Float32Array | null;
  readonly nVocab: number;
  /** [nEmbd, nVocab]. */
  readonly tokenEmbd: Float32Array;
  readonly layers: readonly ReferenceLayer[];
  readonly outputNorm: Float32Array;
  /** [nEmbd, nVocab]: `output.weight`, or the same array as tokenEmbd when tied. */
  readonly output: Float32Array;
  /** True when the output weight is token_embd's. */
  readonly tiedOutput: boolean;
}

function meta(header: GGUFHeader, key: string): number | undefined {
  const value = metadataValue(header, key);
  if (value === undefined) return undefined;
  if (typeof value === "number") return value;
  if (typeof value === "bigint") return Number(value);
  throw new Error(`llm_reference: metadata ${key} is not a number`);
}

function required(header: GGUFHeader, key: string): number {
  const value = meta(header, key);
  if (value === undefined) throw new Error(`llm_reference: metadata ${key} is missing`);
  return value;
}

/** A tensor's values as f32, checking its dims. */
function weight(file: GGUFFile, name: string, dims: readonly number[]): Float32Array {
  const info: GGUFTensorInfo = file.tensor(name);
  const got = [...info.dims];
  while (got.length > 1 && got[got.length - 1] === 1) got.pop();
  const want = [...dims];
  while (want.length > 1 && want[want.length - 1] === 1) want.pop();
  if (got.join(",") !== want.join(",")) {
    throw new Error(`llm_reference: ${name} has dims [${got}], expected [${want}]`);
  }
  const n = dims.reduce((a, b) => a * b, 1);
  const bytes = file.readTensorData(info);
  const type = info.type.name;
  if (type === "f32") return new Float32Array(bytes.slice(0, n * 4).buffer);
  if (type === "f16") return Float32Array.from(new Float16Array(bytes.slice(0, n * 2).buffer));
  if (isQuantDType(type)) return dequantize(bytes, type, n);
  throw new Error(`llm_reference: ${name} has type ${type}, which this reference cannot read`);
}

/**
 * Reads a llama-family GGUF (general.architecture "llama") and dequantizes its weights.
 * `layers` evaluates only the first that many blocks (for quicker partial checks).
 */
// deno-lint-ignore require-await
export async function loadReferenceModel(
  path: string,
  options: { layers?: number; nCtx?: number } = {},
): Promise<ReferenceModel> {
  using file = GGUFFile.open(path);
  const h = file.header;
  const arch = metadataValue(h, "general.architecture");
  if (arch !== "llama") throw new Error(`llm_reference: architecture ${String(arch)} is not llama`);
  const nEmbd = required(h, "llama.embedding_length");
  const blockCount = required(h, "llama.block_count");
  const nFF = required(h, "llama.feed_forward_length");
  const nHead = required(h, "llama.attention.head_count");
  const nHeadKV = meta(h, "llama.attention.head_count_kv") ?? nHead;
  const eps = required(h, "llama.attention.layer_norm_rms_epsilon");
  const ropeBase = meta(h, "llama.rope.freq_base") ?? 10000;
  const headDim = meta(h, "llama.attention.key_length") ?? nEmbd / nHead;
  const headDimV = meta(h, "llama.attention.value_length") ?? nEmbd / nHead;
  const ropeDims = meta(h, "llama.rope.dimension_count") ?? headDim;
  // llama.cpp's rules (llama-model.cpp, llama-context.cpp): type "linear" without the key, the
  // factor from rope.scaling.factor or rope.scale_linear, 0 meaning none.
  const scalingType = metadataValue(h, "llama.rope.scaling.type") ?? "linear";
  if (!["none", "linear", "yarn", "longrope"].includes(String(scalingType))) {
    throw new Error(`llm_reference: rope scaling ${String(scalingType)} is not implemented`);
  }
  const factor = meta(h, "llama.rope.scaling.factor") ?? meta(h, "llama.rope.scale_linear") ?? 0;
  const ropeFreqScale = scalingType === "none" || factor === 0 ? 1 : 1 / factor;
  const ropeExtFactor = scalingType === "yarn" ? 1 : 0;
  const yarnScale = 1 / ropeFreqScale;
  const ropeMagnitude = (meta(h, "llama.rope.scaling.attn_factor") ?? 1) *
    (ropeExtFactor !== 0 && yarnScale > 1 ? 1 + 0.1 * Math.log(yarnScale) : 1);
  const nCtxTrain = required(h, "llama.context_length");
  const ropeCtxOrig = meta(h, "llama.rope.scaling.original_context_length") || nCtxTrain;
  const nCtx = options.nCtx ?? nCtxTrain;
  const factorsName = scalingType !== "longrope"
    ? "rope_freqs.weight"
    : Math.ceil(nCtx / 256) * 256 > ropeCtxOrig
    ? "rope_factors_long.weight"
    : "rope_factors_short.weight";
  const tokens = metadataValue(h, "tokenizer.ggml.tokens");
  const nVocab = tokens !== undefined && typeof tokens === "object"
    ? arrayLength(tokens)
    : required(h, "llama.vocab_size");
  if (!Number.isInteger(headDim) || nHead % nHeadKV !== 0 || ropeDims > headDim || ropeDims % 2) {
    throw new Error("llm_reference: inconsistent head dimensions");
  }
  const nLayer = options.layers ?? blockCount;
  if (!Number.isInteger(nLayer) || nLayer < 0 || nLayer > blockCount) {
    throw new Error(`llm_reference: layers must be in [0, ${blockCount}], got ${nLayer}`);
  }

  const tokenEmbd = weight(file, "token_embd.weight", [nEmbd, nVocab]);
  const layers: ReferenceLayer[] = [];
  for (let l = 0; l < nLayer; l++) {
    const w = (name: string, dims: number[]) => weight(file, `blk.${l}.${name}.weight`, dims);
    layers.push({
      attnNorm: w("attn_norm", [nEmbd]),
      wq: w("attn_q", [nEmbd, nHead * headDim]),
      wk: w("attn_k", [nEmbd, nHeadKV * headDim]),
      wv: w("attn_v", [nEmbd, nHeadKV * headDimV]),
      wo: w("attn_output", [nHead * headDimV, nEmbd]),
      ffnNorm: w("ffn_norm", [nEmbd]),
      wGate: w("ffn_gate", [nEmbd, nFF]),
      wUp: w("ffn_up", [nEmbd, nFF]),
      wDown: w("ffn_down", [nFF, nEmbd]),
    });
  }
  const ropeFreqFactors = h.tensors.some((t) => t.name === factorsName)
    ? weight(file, factorsName, [ropeDims / 2])
    : null;
  const outputNorm = weight(file, "output_norm.weight", [nEmbd]);
  const hasOutput = h.tensors.some((t) => t.name === "output.weight");
  const output = hasOutput ? weight(file, "output.weight", [nEmbd, nVocab]) : tokenEmbd;
  return {
    nEmbd,
    nLayer,
    nFF,
    nHead,
    nHeadKV,
    headDim,
    headDimV,
    eps,
    ropeBase,
    ropeDims,
    ropeFreqScale,
    ropeExtFactor,
    ropeMagnitude,
    ropeBetaFast: 32,
    ropeBetaSlow: 1,
    ropeCtxOrig,
    ropeFreqFactors,
    nVocab,
    tokenEmbd,
    layers,
    outputNorm,
    output,
    tiedOutput: !hasOutput,
  };
}

/** rmsnorm(x) * w: x / sqrt(mean(x^2) + eps), times the norm weight elementwise. */
function rmsNorm(x: Float64Array, w: Float32Array, eps: number): Float64Array {
  let sum = 0;
  for (let i = 0; i < x.length; i++) sum += x[i]! * x[i]!;
  const scale = 1 / Math.sqrt(sum / x.length + eps);
  const out = new Float64Array(x.length);
  for (let i = 0; i < x.length; i++) out[i] = x[i]! * scale * w[i]!;
  return out;
}

/** y = W x for each x, W in ggml order [nIn, nOut] (row o of the output contiguous). */
function matVecs(w: Float32Array, nIn: number, nOut: number, xs: Float64Array[]): Float64Array[] {
  const ys = xs.map(() => new Float64Array(nOut));
  for (let o = 0; o < nOut; o++) {
    const row = w.subarray(o * nIn, (o + 1) * nIn);
    for (let t = 0; t < xs.length; t++) {
      const x = xs[t]!;
      let sum = 0;
      for (let i = 0; i < nIn; i++) sum += row[i]! * x[i]!;
      ys[t]![o] = sum;
    }
  }
  return ys;
}

/**
 * YaRN's correction dims (ggml_rope_yarn_corr_dims): the pairs from which the angle is
 * interpolated rather than extrapolated, where a pair turns beta times over the original context.
 */
function yarnCorrDims(m: ReferenceModel): [number, number] {
  const dim = (beta: number): number =>
    (m.ropeDims * Math.log(m.ropeCtxOrig / (beta * 2 * Math.PI))) / (2 * Math.log(m.ropeBase));
  return [
    Math.max(0, Math.floor(dim(m.ropeBetaFast))),
    Math.min(m.ropeDims - 1, Math.ceil(dim(m.ropeBetaSlow))),
  ];
}

/**
 * ggml's normal-mode RoPE (ggml_rope_ext), in place, on `nHeads` heads of `headDim` at `pos`:
 * adjacent pair k, (x[2k], x[2k+1]), of the first `ropeDims` of a head turns by theta, with
 * theta_e = pos * base^(-2k/ropeDims) / freqFactors[k] and theta = freqScale * theta_e; with
 * YaRN, theta mixes freqScale * theta_e and theta_e by ramp(k) * extFactor, ramp going from 1
 * to 0 between the correction dims; cos and sin are then scaled by the model's magnitude.
 */
function rope(
  x: Float64Array,
  nHeads: number,
  headDim: number,
  pos: number,
  m: ReferenceModel,
): void {
  const [low, high] = yarnCorrDims(m);
  for (let i = 0; i < m.ropeDims; i += 2) {
    const k = i / 2;
    const extrapolated = (pos * Math.pow(m.ropeBase, -i / m.ropeDims)) /
      (m.ropeFreqFactors ? m.ropeFreqFactors[k]! : 1);
    let theta = m.ropeFreqScale * extrapolated;
    if (m.ropeExtFactor !== 0) {
      const ramp = 1 - Math.min(1, Math.max(0, (k - low) / Math.max(0.001, high - low)));
      const mix = ramp * m.ropeExtFactor;
      theta = theta * (1 - mix) + extrapolated * mix;
    }
    const c = Math.cos(theta) * m.ropeMagnitude;
    const s = Math.sin(theta) * m.ropeMagnitude;
    for (let hd = 0; hd < nHeads; hd++) {
      const at = hd * headDim + i;
      const x0 = x[at]!;
      const x1 = x[at + 1]!;
      x[at] = x0 * c - x1 * s;
      x[at + 1] = x0 * s + x1 * c;
    }
  }
}

function silu(x: number): number {
  return x / (1 + Math.exp(-x));
}

/**
 * Logits (f64) for every position of `ids` evaluated as one causal sequence from position 0;
 * `positions` picks which rows to return (default all), in that order.
 */
export function referenceLogits(
  model: ReferenceModel,
  ids: readonly number[],
  positions?: readonly number[],
): Float64Array[] {
  const m = model;
  const T = ids.length;
  const want = positions ?? ids.map((_, i) => i);
  for (const p of want) {
    if (!Number.isInteger(p) || p < 0 || p >= T) {
      throw new RangeError(`referenceLogits: position ${p} outside [0, ${T})`);
    }
  }
  let x = ids.map((id) => {
    if (!Number.isInteger(id) || id < 0 || id >= m.nVocab) {
      throw new RangeError(`referenceLogits: token id ${id} outside [0, ${m.nVocab})`);
    }
    return Float64Array.from(m.tokenEmbd.subarray(id * m.nEmbd, (id + 1) * m.nEmbd));
  });
  const { nEmbd, nHead, nHeadKV, headDim, headDimV, nFF } = m;
  const group = nHead / nHeadKV;
  const scale = 1 / Math.sqrt(headDim);
  for (const layer of m.layers) {
    const h = x.map((v) => rmsNorm(v, layer.attnNorm, m.eps));
    const q = matVecs(layer.wq, nEmbd, nHead * headDim, h);
    const k = matVecs(layer.wk, nEmbd, nHeadKV * headDim, h);
    const v = matVecs(layer.wv, nEmbd, nHeadKV * headDimV, h);
    for (let t = 0; t < T; t++) {
      rope(q[t]!, nHead, headDim, t, m);
      rope(k[t]!, nHeadKV, headDim, t, m);
    }
    const attn = x.map(() => new Float64Array(nHead * headDimV));
    const scores = new Float64Array(T);
    for (let hd = 0; hd < nHead; hd++) {
      const g = Math.floor(hd / group);
      for (let t = 0; t < T; t++) {
        const qt = q[t]!;
        let max = -Infinity;
        for (let s = 0; s <= t; s++) {
          const ks = k[s]!;
          let dot = 0;
          for (let d = 0; d < headDim; d++) dot += qt[hd * headDim + d]! * ks[g * headDim + d]!;
          scores[s] = dot * scale;
          if (scores[s]! > max) max = scores[s]!;
        }
        let total = 0;
        for (let s = 0; s <= t; s++) {
          scores[s] = Math.exp(scores[s]! - max);
          total += scores[s]!;
        }
        const out = attn[t]!;
        for (let s = 0; s <= t; s++) {
          const p = scores[s]! / total;
          const vs = v[s]!;
          for (let d = 0; d < headDimV; d++) out[hd * headDimV + d]! += p * vs[g * headDimV + d]!;
        }
      }
    }
    const o = matVecs(layer.wo, nHead * headDimV, nEmbd, attn);
    x = x.map((xt, t) => xt.map((value, i) => value + o[t]![i]!));
    const f = x.map((v) => rmsNorm(v, layer.ffnNorm, m.eps));
    const gate = matVecs(layer.wGate, nEmbd, nFF, f);
    const up = matVecs(layer.wUp, nEmbd, nFF, f);
    const act = gate.map((gt, t) => gt.map((value, i) => silu(value) * up[t]![i]!));
    const down = matVecs(layer.wDown, nFF, nEmbd, act);
    x = x.map((xt, t) => xt.map((value, i) => value + down[t]![i]!));
  }
  const finals = want.map((p) => rmsNorm(x[p]!, m.outputNorm, m.eps));
  return matVecs(m.output, nEmbd, m.nVocab, finals);
}
