/**
 * Quantizing a GGUF file, as llama.cpp's `llama-quantize` does (without an importance matrix):
 * the same choice of type per tensor (`llama_tensor_get_type`), the same bytes (ggml's
 * reference quantizers, through {@link quantize}), the same tensor order and the same
 * `general.file_type`. The output is written a tensor at a time.
 *
 * Per tensor, as llama.cpp:
 * - Only weights are quantized: tensors of two or more dimensions (ggml_n_dims) whose name ends
 *   in `weight`, except norms (`_norm.weight`), MoE gates (`ffn_gate_inp`), positional and
 *   token-type embeddings and the other small tensors llama.cpp lists. The rest keep their type
 *   and bytes (1-D norms and biases stay f32).
 * - `output.weight`, and `token_embd.weight` when the file has no `output.weight` (tied
 *   embeddings), become q6_K for every quantized type but q8_0 (q8_0 when ne[0] is not a
 *   multiple of the type's block size, or for Falcon).
 * - `q4_K_S`, `q4_K_M`, `q5_K_S` and `q5_K_M` mix types by layer as llama.cpp's mixtures of
 *   those names do (attn_v and ffn_down get q5_K/q6_K in some layers; the 70B-llama and
 *   8-expert rules too). Plain `q4_K` and `q5_K`, which llama.cpp has no file type for, apply
 *   only the output rule: every other weight gets the type.
 * - A weight whose row length ne[0] is not a multiple of its type's block size falls back:
 *   q4_K -> q5_0, q5_K -> q5_1, q6_K -> q8_0 (SmolLM2's 576-wide rows, for one), and to f16
 *   when even that does not divide ne[0]. llama.cpp stops with an error where a 32-element
 *   type (q8_0, q4_0, ...) does not divide ne[0]; here such a tensor becomes f16.
 * - A tensor already of its new type is copied as it is. A quantized tensor that gets another
 *   type is dequantized to f32 first (llama.cpp needs `--allow-requantize` for that; it loses
 *   more than quantizing the original weights, and the summary counts such tensors).
 *
 * Not replicated: importance matrices, `--pure` on llama.cpp's other types, per-tensor type
 * overrides, `--leave-output-tensor`, `--output-tensor-type`/`--token-embedding-type`, layer
 * pruning, split files, the IQ and q2_K/q3_K types, f32 -> f16 NaN payloads (JS rounds them).
 *
 * @module
 */

import { ArgumentError, GGUFError } from "../errors.ts";
import { type QuantDType, quantize } from "../quant.ts";
import { GGUFFile } from "./file.ts";
import type { GGUFHeader, GGUFMetadataEntry, GGUFTensorInfo } from "./reader.ts";
import { type GgmlType, ggmlTypeByName } from "./types.ts";
import { fileSink, type GGUFSink, layoutTensors, writeGGUFStream } from "./writer.ts";

/** The types {@link quantizeGGUF} writes: llama-quantize's names for them, lower case. */
export const QUANTIZE_TYPES = [
  "q8_0",
  "q4_0",
  "q4_1",
  "q5_0",
  "q5_1",
  "q4_K",
  "q4_K_S",
  "q4_K_M",
  "q5_K",
  "q5_K_S",
  "q5_K_M",
  "q6_K",
  "f16",
  "bf16",
  "f32",
] as const;

/** A type {@link quantizeGGUF} writes (see {@link QUANTIZE_TYPES}). */
export type QuantizeType = (typeof QUANTIZE_TYPES)[number];

/**
 * llama.cpp's `LLAMA_FTYPE_*` value written as `general.file_type` for each type. Plain q4_K
 * and q5_K have none of their own; they are written as MOSTLY_Q4_K_S / MOSTLY_Q5_K_S ("mostly
 * q4_K/q5_K").
 */
export const LLAMA_FTYPES: Readonly<Record<QuantizeType, number>> = {
  f32: 0,
  f16: 1,
  q4_0: 2,
  q4_1: 3,
  q8_0: 7,
  q5_0: 8,
  q5_1: 9,
  q4_K: 14,
  q4_K_S: 14,
  q4_K_M: 15,
  q5_K: 16,
  q5_K_S: 16,
  q5_K_M: 17,
  q6_K: 18,
  bf16: 32,
};

/** ggml's quantization version, written as `general.quantization_version` (GGML_QNT_VERSION). */
export const GGML_QNT_VERSION = 2;

/** The type each file type quantizes weights to (llama_ftype_get_default_type). */
function defaultType(type: QuantizeType): GgmlType {
  return ggmlTypeByName(type.replace(/_[SM]$/, ""))!;
}

/** What happens to one tensor. */
export interface TensorQuantization {
  /** The tensor's name. */
  readonly name: string;
  /** Its dims (ggml order). */
  readonly dims: readonly number[];
  /** Its type in the input. */
  readonly from: GgmlType;
  /** Its type in the output. */
  readonly to: GgmlType;
  /** Why `to` is not the requested type, when it is not (a fallback, the output rule, ...). */
  readonly note?: string;
}

/** Options of {@link planQuantization}. */
export interface QuantizePlanOptions {
  /**
   * Every weight gets the type, but for shape fallbacks: no output rule, no mixing (as
   * llama-quantize's `--pure`).
   */
  readonly pure?: boolean;
}

/** Options of {@link quantizeGGUF}. */
export interface QuantizeOptions extends QuantizePlanOptions {
  /** The type (file type) to write. */
  readonly type: QuantizeType;
  /** Called after each tensor is written: tensors done, of total, and the tensor. */
  readonly onProgress?: (done: number, total: number, tensor: TensorQuantization) => void;
  /** Called with a warning of the writer (nested metadata arrays). */
  readonly onWarning?: (message: string) => void;
}

/** What {@link quantizeGGUF} did. */
export interface QuantizeSummary {
  /** The type asked for. */
  readonly type: QuantizeType;
  /** The `general.file_type` written. */
  readonly fileType: number;
  /** Every tensor, in output order. */
  readonly tensors: readonly TensorQuantization[];
  /** Tensors per output type name. */
  readonly counts: Readonly<Record<string, number>>;
  /** Tensors that were quantized in the input and were dequantized to get another type. */
  readonly requantized: number;
  /** Tensors that fell back to another type because of their row length. */
  readonly fallbacks: number;
  /** Bytes of tensor data in the input. */
  readonly dataBytesIn: number;
  /** Bytes of tensor data in the output. */
  readonly dataBytesOut: number;
  /** Bytes of the input file. */
  readonly fileBytesIn: number;
  /** Bytes of the output file. */
  readonly fileBytesOut: number;
}

/** True when `name` is one of {@link QUANTIZE_TYPES}. */
export function isQuantizeType(name: unknown): name is QuantizeType {
  return (QUANTIZE_TYPES as readonly unknown[]).includes(name);
}

function parseQuantizeType(what: string, name: unknown): QuantizeType {
  if (!isQuantizeType(name)) {
    throw new ArgumentError(
      `${what}: type ${JSON.stringify(name) ?? String(name)} is not one Graft quantizes to; ` +
        `use one of ${QUANTIZE_TYPES.join(", ")}`,
    );
  }
  return name;
}

// ---------------------------------------------------------------------------------------------
// llama.cpp's choice of type per tensor (src/llama-quant.cpp)

type Category =
  | "token_embd"
  | "attn_q"
  | "attn_v"
  | "attn_k"
  | "attn_qkv"
  | "attn_kv_b"
  | "attn_output"
  | "ffn_up"
  | "ffn_gate"
  | "ffn_down"
  | "output"
  | "other";

function category(name: string): Category {
  if (name === "output.weight") return "output";
  if (name === "token_embd.weight" || name === "per_layer_token_embd.weight") return "token_embd";
  const inName: [string, Category][] = [
    ["attn_qkv.weight", "attn_qkv"],
    ["attn_kv_b.weight", "attn_kv_b"],
    ["attn_v.weight", "attn_v"],
    ["attn_k.weight", "attn_k"],
    ["attn_q.weight", "attn_q"],
    ["attn_output.weight", "attn_output"],
    ["ffn_up", "ffn_up"],
    ["ffn_gate", "ffn_gate"],
    ["ffn_down", "ffn_down"],
  ];
  for (const [part, cat] of inName) if (name.includes(part)) return cat;
  return "other";
}

const isAttnV = (c: Category): boolean => c === "attn_v" || c === "attn_qkv" || c === "attn_kv_b";

/** ggml_n_dims: dimensions up to the last that is not 1. */
function nDims(dims: readonly number[]): number {
  let n = dims.length;
  while (n > 1 && dims[n - 1] === 1) n--;
  return n;
}

/** Parts of names llama.cpp never quantizes (tensor_allows_quantization). */
const KEEP_PARTS = [
  "_norm.weight",
  "ffn_gate_inp.weight",
  "ffn_gate_tid2eid.weight",
  "altup",
  "laurel",
  "per_layer_model_proj",
  "ssm_conv1d",
  "shortconv.conv.weight",
  "indexer.k_proj.weight",
  "indexer.q_proj.weight",
  ...[
    "first",
    "w0",
    "w1",
    "w2",
    "v0",
    "v1",
    "v2",
    "a0",
    "a1",
    "a2",
    "g1",
    "g2",
    "decay_w1",
    "decay_w2",
    "lerp_fused",
  ].map((s) => `time_mix_${s}.weight`),
  "attn_rel_b.weight",
  ".position_embd",
  "sam.pos_embd",
  "sam.neck.",
  "sam.net_",
  ".rel_pos",
  ".patch_embd",
  ".patch_merger",
  "a.rvq.codebook",
  "mm.a.code_embd",
];

/** Why llama.cpp keeps a tensor as it is, or undefined when it quantizes it. */
function keepReason(name: string, dims: readonly number[]): string | undefined {
  if (nDims(dims) < 2) return `kept: ${nDims(dims)}-D`;
  if (!name.endsWith("weight")) return "kept: not a weight";
  if (name === "position_embd.weight" || name === "token_types.weight") return "kept";
  const part = KEEP_PARTS.find((p) => name.includes(p));
  return part ? `kept: llama.cpp does not quantize *${part}*` : undefined;
}

/** The layer of `blk.N.` names, -1 for others (sscanf "blk.%d."). */
function layerOf(name: string): number {
  const match = /^blk\.\s*([+-]?\d+)/.exec(name);
  return match ? Number(match[1]) : -1;
}

const utf8 = new TextEncoder();

/** std::string's operator<: bytes, unsigned. */
function compareBytes(a: string, b: string): number {
  const x = utf8.encode(a), y = utf8.encode(b);
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    if (x[i] !== y[i]) return x[i]! - y[i]!;
  }
  return x.length - y.length;
}

/**
 * llama.cpp's tensor order when it quantizes (llama_model_loader's weight_name_comparer):
 * by layer number (tensors outside `blk.N.` first), then by name.
 */
function llamaOrder(a: GGUFTensorInfo, b: GGUFTensorInfo): number {
  return (layerOf(a.name) - layerOf(b.name)) || compareBytes(a.name, b.name);
}

interface State {
  readonly ftype: QuantizeType;
  readonly arch: string;
  readonly nExpert: number;
  readonly nLayer: number;
  readonly is70B: boolean;
  readonly tied: boolean;
  readonly nAttentionWv: number;
  iAttentionWv: number;
  iFfnDown: number;
  iFfnGate: number;
  iFfnUp: number;
  fallbacks: number;
}

const useMoreBits = (i: number, n: number): boolean =>
  i < Math.trunc(n / 8) || i >= Math.trunc(7 * n / 8) || (i - Math.trunc(n / 8)) % 3 === 2;

function layerInfo(state: State, i: number, name: string): [number, number] {
  if (state.nExpert <= 1) return [i, state.nLayer];
  const layer = layerOf(name);
  if (!/^blk\.\s*[+-]?\d+/.test(name)) {
    throw new GGUFError(`tensor ${name}`, 0, "cannot tell its layer (no blk.N. in its name)");
  }
  if (layer < 0 || layer >= state.nLayer) {
    throw new GGUFError(`tensor ${name}`, 0, `layer ${layer} is not in [0, ${state.nLayer})`);
  }
  return [layer, state.nLayer];
}

/** llama_tensor_get_type_impl for the file types Graft writes. */
function mixType(state: State, type: GgmlType, info: GGUFTensorInfo, cat: Category): GgmlType {
  const t = (name: string): GgmlType => ggmlTypeByName(name)!;
  const ftype = state.ftype;
  const falcon = state.arch === "falcon";
  if (cat === "output" || (state.tied && cat === "token_embd")) {
    if (falcon || info.dims[0]! % type.blockSize !== 0) return t("q8_0");
    return type.name !== "q8_0" ? t("q6_K") : type;
  }
  if (cat === "token_embd") return type;
  if (isAttnV(cat)) {
    let out = type;
    if (
      (ftype === "q4_K_M" || ftype === "q5_K_M") &&
      useMoreBits(state.iAttentionWv, state.nAttentionWv)
    ) {
      out = t("q6_K");
    } else if (ftype === "q4_K_S" && state.iAttentionWv < 4) out = t("q5_K");
    if (state.is70B && (out.name === "q3_K" || out.name === "q4_K")) out = t("q5_K");
    if (state.nExpert === 8) out = t("q8_0");
    state.iAttentionWv++;
    return out;
  }
  if (cat === "attn_k") return state.nExpert === 8 ? t("q8_0") : type;
  if (cat === "ffn_down") {
    const [i, n] = layerInfo(state, state.iFfnDown, info.name);
    let out = type;
    if (ftype === "q4_K_M") {
      if (falcon) {
        out = i < Math.trunc(n / 16) ? t("q6_K") : useMoreBits(i, n) ? t("q5_K") : t("q4_K");
      } else if (useMoreBits(i, n)) out = t("q6_K");
    } else if (ftype === "q5_K_M" && useMoreBits(i, n)) out = t("q6_K");
    else if (ftype === "q4_K_S" && !falcon && i < Math.trunc(n / 8)) out = t("q5_K");
    state.iFfnDown++;
    return out;
  }
  if (cat === "attn_output") {
    if (!falcon && state.nExpert === 8 && (ftype === "q4_K_S" || ftype === "q4_K_M")) {
      return t("q5_K");
    }
    return type;
  }
  if (cat === "ffn_gate") {
    layerInfo(state, state.iFfnGate++, info.name);
  } else if (cat === "ffn_up") {
    layerInfo(state, state.iFfnUp++, info.name);
  }
  return type;
}

/** tensor_type_fallback: a type whose blocks divide the rows, as llama.cpp picks it. */
function fallback(state: State, info: GGUFTensorInfo, type: GgmlType): GgmlType {
  const ncols = info.dims[0]!;
  if (ncols % type.blockSize === 0) return type;
  state.fallbacks++;
  const next: Record<string, string> = { q4_K: "q5_0", q5_K: "q5_1", q6_K: "q8_0" };
  const to = ggmlTypeByName(next[type.name] ?? "f16")!;
  return ncols % to.blockSize === 0 ? to : ggmlTypeByName("f16")!;
}

function metadataNumber(header: GGUFHeader, key: string): number | undefined {
  const value = header.metadata.find((m) => m.key === key)?.value;
  return typeof value === "number" ? value : typeof value === "bigint" ? Number(value) : undefined;
}

/**
 * The type each tensor of a file gets when quantized to `type`, in the order llama.cpp writes
 * them (by layer, then name): llama-quantize's choice without an importance matrix (see the
 * module's notes). Throws an ArgumentError for an unknown type and a GGUFError for a file it
 * cannot quantize (split files; a mixture without `{arch}.block_count`).
 *
 * @example
 * ```ts
 * import { ggmlTypeByName, GGUFFile, planQuantization, writeGGUF } from "../../mod.ts";
 * // A small f32 model file: one 256 x 4 weight (any GGUF model works the same way).
 * const input = await Deno.makeTempFile({ suffix: ".gguf" });
 * const values = Float32Array.from({ length: 1024 }, (_, i) => Math.sin(i));
 * await Deno.writeFile(
 *   input,
 *   writeGGUF({
 *     metadata: [
 *       { key: "general.architecture", type: "string", value: "llama" },
 *       { key: "llama.block_count", type: "u32", value: 1 },
 *     ],
 *     tensors: [{
 *       name: "blk.0.ffn_up.weight",
 *       dims: [256, 4],
 *       type: ggmlTypeByName("f32")!,
 *       offset: 0,
 *       nbytes: 4096,
 *     }],
 *     data: () => new Uint8Array(values.buffer),
 *   }),
 * );
 * using file = GGUFFile.open(input);
 * for (const t of planQuantization(file.header, "q4_K_M")) {
 *   console.log(t.name, t.to.name); // blk.0.ffn_up.weight q4_K
 * }
 * ```
 */
export function planQuantization(
  header: GGUFHeader,
  type: QuantizeType,
  options: QuantizePlanOptions = {},
): TensorQuantization[] {
  return plan(header, parseQuantizeType("planQuantization", type), options).tensors;
}

function plan(
  header: GGUFHeader,
  type: QuantizeType,
  options: QuantizePlanOptions,
): { tensors: TensorQuantization[]; fallbacks: number } {
  const splits = metadataNumber(header, "split.count");
  if (splits !== undefined && splits > 1) {
    throw new GGUFError(
      "split.count",
      0,
      `the file is one of ${splits} splits; merge them first (llama-gguf-split --merge)`,
    );
  }
  const archValue = header.metadata.find((m) => m.key === "general.architecture")?.value;
  const arch = typeof archValue === "string" ? archValue : "";
  const mixing = /_[SM]$/.test(type) && !options.pure;
  const nLayer = metadataNumber(header, `${arch}.block_count`);
  if (mixing && nLayer === undefined) {
    throw new GGUFError(
      `${arch}.block_count`,
      0,
      `${type} mixes types by layer and needs the layer count; the file has no ${arch}.block_count`,
    );
  }
  const nHead = metadataNumber(header, `${arch}.attention.head_count`);
  const nHeadKv = metadataNumber(header, `${arch}.attention.head_count_kv`) ?? nHead;
  const ordered = [...header.tensors].sort(llamaOrder);
  const state: State = {
    ftype: type,
    arch,
    nExpert: Math.max(1, metadataNumber(header, `${arch}.expert_count`) ?? 0),
    nLayer: nLayer ?? 0,
    is70B: arch === "llama" && nLayer === 80 && nHead !== nHeadKv,
    tied: !header.tensors.some((t) => t.name === "output.weight"),
    nAttentionWv: header.tensors.filter((t) => isAttnV(category(t.name))).length,
    iAttentionWv: 0,
    iFfnDown: 0,
    iFfnGate: 0,
    iFfnUp: 0,
    fallbacks: 0,
  };
  const base = defaultType(type);
  const quantized = base.blockSize > 1;
  const tensors = ordered.map((info): TensorQuantization => {
    const keep = keepReason(info.name, info.dims);
    const common = { name: info.name, dims: info.dims, from: info.type };
    if (keep) return { ...common, to: info.type, note: keep };
    if (!quantized) return { ...common, to: base };
    const cat = category(info.name);
    const mixed = options.pure ? base : mixType(state, base, info, cat);
    const to = fallback(state, info, mixed);
    let note: string | undefined;
    if (mixed !== base) {
      note = cat === "output" || cat === "token_embd"
        ? `${cat === "output" ? "output" : "tied token_embd"}: ${mixed.name} (llama.cpp's rule)`
        : `${type} mixture: ${mixed.name}`;
    }
    if (to !== mixed) {
      const why = `ne[0] = ${info.dims[0]} is not a multiple of ${mixed.blockSize}: ` +
        `${mixed.name} -> ${to.name}`;
      note = note ? `${note}; ${why}` : why;
    }
    return note ? { ...common, to, note } : { ...common, to };
  });
  return { tensors, fallbacks: state.fallbacks };
}

// ---------------------------------------------------------------------------------------------
// Writing

function elements(dims: readonly number[]): number {
  return dims.reduce((a, b) => a * b, 1);
}

/** f32 values as bytes of `to`: as they are, rounded to f16, or quantized as ggml does. */
function encode(values: Float32Array, to: GgmlType): Uint8Array {
  if (to.name === "f32") return new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
  if (to.name === "f16") return new Uint8Array(Float16Array.from(values).buffer);
  return quantize(values, to.name as QuantDType);
}

/** The input's metadata with llama.cpp's changes: split keys gone, versions and file type last. */
function outputMetadata(header: GGUFHeader, fileType: number): GGUFMetadataEntry[] {
  const replaced = new Set([
    "general.quantization_version",
    "general.file_type",
    "split.no",
    "split.count",
    "split.tensors.count",
  ]);
  return [
    ...header.metadata.filter((m) => !replaced.has(m.key)),
    { key: "general.quantization_version", type: "u32", value: GGML_QNT_VERSION },
    { key: "general.file_type", type: "u32", value: fileType },
  ];
}

/** True when `a` and `b` name the same file (both exist). */
function sameFile(a: string | URL, b: string | URL): boolean {
  try {
    const x = Deno.statSync(a), y = Deno.statSync(b);
    return x.dev === y.dev && x.ino !== null && x.ino === y.ino;
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return false;
    throw error;
  }
}

/**
 * Quantizes a GGUF file (f32, f16, bf16, or already quantized: such tensors are dequantized
 * first) to `options.type`, as llama.cpp's llama-quantize does without an importance matrix
 * (see the module's notes for the rules and what is not replicated). It reads and writes one
 * tensor at a time: the output goes to `output` (a path, written to a temporary file beside it
 * and renamed when complete; or a {@link GGUFSink}). Resolves to a summary.
 *
 * Throws an ArgumentError for an unknown type or an output that is the input, a GGUFError for
 * a bad input file or a tensor type Graft cannot dequantize, and Deno.errors.NotFound for a
 * missing input file.
 *
 * @example
 * ```ts
 * import { ggmlTypeByName, quantizeGGUF, writeGGUF } from "../../mod.ts";
 * // A small f32 model file: one 256 x 4 weight (any GGUF model works the same way).
 * const input = await Deno.makeTempFile({ suffix: ".gguf" });
 * const values = Float32Array.from({ length: 1024 }, (_, i) => Math.sin(i));
 * await Deno.writeFile(
 *   input,
 *   writeGGUF({
 *     metadata: [
 *       { key: "general.architecture", type: "string", value: "llama" },
 *       { key: "llama.block_count", type: "u32", value: 1 },
 *     ],
 *     tensors: [{
 *       name: "blk.0.ffn_up.weight",
 *       dims: [256, 4],
 *       type: ggmlTypeByName("f32")!,
 *       offset: 0,
 *       nbytes: 4096,
 *     }],
 *     data: () => new Uint8Array(values.buffer),
 *   }),
 * );
 * const output = await Deno.makeTempFile({ suffix: ".gguf" });
 * const summary = await quantizeGGUF(input, output, { type: "q8_0" });
 * console.log(summary.counts, summary.dataBytesIn, summary.dataBytesOut); // { q8_0: 1 } 4096 1088
 * ```
 */
export async function quantizeGGUF(
  input: string | URL | GGUFFile,
  output: string | URL | GGUFSink,
  options: QuantizeOptions,
): Promise<QuantizeSummary> {
  const type = parseQuantizeType("quantizeGGUF", options?.type);
  const toPath = typeof output === "string" || output instanceof URL;
  if (toPath && !(input instanceof GGUFFile) && sameFile(input, output)) {
    throw new ArgumentError(`quantizeGGUF: the output ${String(output)} is the input file`);
  }
  const file = input instanceof GGUFFile ? input : GGUFFile.open(input);
  try {
    const header = file.header;
    const { tensors, fallbacks } = plan(header, type, options);
    const infos = layoutTensors(
      tensors.map((t) => ({
        name: t.name,
        dims: t.dims,
        type: t.to,
        nbytes: (elements(t.dims) / t.to.blockSize) * t.to.blockBytes,
      })),
      header.alignment,
    );
    const sources = new Map(header.tensors.map((t) => [t.name, t]));
    let requantized = 0;
    let done = 0;
    const data = (i: number): Uint8Array => {
      const t = tensors[i]!;
      const source = sources.get(t.name)!;
      let bytes: Uint8Array;
      if (t.to === t.from) bytes = file.readTensorData(source);
      else {
        if (t.from.blockSize > 1) requantized++;
        bytes = encode(file.dequantizeTensor(source), t.to);
      }
      options.onProgress?.(++done, tensors.length, t);
      return bytes;
    };
    const write = {
      metadata: outputMetadata(header, LLAMA_FTYPES[type]),
      tensors: infos,
      data,
      onWarning: options.onWarning,
    };
    let fileBytesOut: number;
    if (toPath) {
      const temporary = `${output instanceof URL ? output.pathname : output}.part-${Deno.pid}`;
      let sink: Deno.FsFile;
      try {
        sink = await Deno.open(temporary, { write: true, create: true, truncate: true });
      } catch (error) {
        if (!(error instanceof Error)) throw error;
        throw new (error.constructor as ErrorConstructor)(
          `cannot write ${String(output)}: ${error.message}`,
        );
      }
      try {
        fileBytesOut = await writeGGUFStream(fileSink(sink), write);
        sink.close();
        await Deno.rename(temporary, output);
      } catch (error) {
        try {
          sink.close();
        } catch { /* closed already */ }
        await Deno.remove(temporary).catch(() => {});
        throw error;
      }
    } else {
      fileBytesOut = await writeGGUFStream(output, write);
    }
    const counts: Record<string, number> = {};
    for (const t of tensors) counts[t.to.name] = (counts[t.to.name] ?? 0) + 1;
    return {
      type,
      fileType: LLAMA_FTYPES[type],
      tensors,
      counts,
      requantized,
      fallbacks,
      dataBytesIn: header.tensors.reduce((sum, t) => sum + t.nbytes, 0),
      dataBytesOut: infos.reduce((sum, t) => sum + t.nbytes, 0),
      fileBytesIn: header.fileSize,
      fileBytesOut,
    };
  } finally {
    if (!(input instanceof GGUFFile)) file.close();
  }
}
