/**
 * Byte-level BPE tokenizer from a GGUF file's `tokenizer.ggml.*` metadata, with llama.cpp's
 * semantics (llama-vocab.cpp): special tokens partitioned out first, then the pre-tokenizer
 * regexes named by `tokenizer.ggml.pre`, then BPE merges by rank.
 * @module
 */

import { GraftError } from "../errors.ts";
import type { GGUFFile } from "../gguf/file.ts";
import type { GGUFArray, GGUFHeader, GGUFScalar } from "../gguf/reader.ts";
import {
  byteEncode,
  type PreTokenizer,
  preTokenizer,
  splitWithPatterns,
  UNICODE_TO_BYTE,
} from "./pretokenize.ts";

/** A tokenizer that cannot be built from a file (missing keys, a model or pre-tokenizer not implemented), or a bad token id. */
export class TokenizerError extends GraftError {
  /** The error class name. */
  override name = "TokenizerError";
}

/** `tokenizer.ggml.token_type` values (llama.cpp's llama_token_type). */
export const TokenType = {
  undefined: 0,
  normal: 1,
  unknown: 2,
  control: 3,
  userDefined: 4,
  unused: 5,
  byte: 6,
} as const;

/** Options of Tokenizer.tokenize. */
export interface TokenizeOptions {
  /** Add BOS/EOS as the model's add_bos/add_eos flags say. Default true. */
  addSpecial?: boolean;
  /** Match control tokens (as `<|im_start|>`) in the text. Default false: they are plain text. */
  parseSpecial?: boolean;
}

/** Options of Tokenizer.detokenize and Tokenizer.decoder. */
export interface DetokenizeOptions {
  /** Drop a leading BOS (when add_bos) and a trailing EOS (when add_eos). Default false. */
  removeSpecial?: boolean;
  /** Render control tokens as their text; otherwise they render as nothing. Default false. */
  unparseSpecial?: boolean;
}

/** A streaming decoder: push token ids, get text that is always whole UTF-8 characters. */
export interface StreamDecoder {
  /** Adds one token; returns the text completed so far (holds a partial multi-byte character). */
  push(id: number): string;
  /** Returns what is held back (an incomplete character becomes U+FFFD) and resets. */
  flush(): string;
}

function entry(header: GGUFHeader, key: string): GGUFScalar | GGUFArray | undefined {
  return header.metadata.find((m) => m.key === key)?.value;
}

function isArray(v: GGUFScalar | GGUFArray | undefined): v is GGUFArray {
  return typeof v === "object" && v !== null && "items" in v;
}

function stringArray(header: GGUFHeader, key: string, required: boolean): string[] | undefined {
  const v = entry(header, key);
  if (v === undefined) {
    if (required) throw new TokenizerError(`GGUF metadata has no ${key}`);
    return undefined;
  }
  if (!isArray(v) || v.items.some((x) => typeof x !== "string")) {
    throw new TokenizerError(`GGUF metadata ${key} is not an array of strings`);
  }
  return v.items as string[];
}

function optionalId(header: GGUFHeader, key: string, nVocab: number): number | undefined {
  const v = entry(header, key);
  if (v === undefined) return undefined;
  if (typeof v !== "number" && typeof v !== "bigint") {
    throw new TokenizerError(`GGUF metadata ${key} is not an integer`);
  }
  const id = Number(v);
  // llama.cpp ignores an out-of-range special id (keeps its default) with a warning.
  return id >= 0 && id < nVocab ? id : undefined;
}

function optionalBool(header: GGUFHeader, key: string): boolean | undefined {
  const v = entry(header, key);
  if (v === undefined) return undefined;
  if (typeof v !== "boolean") throw new TokenizerError(`GGUF metadata ${key} is not a boolean`);
  return v;
}

const EOT_TEXTS = [
  "<|eot_id|>",
  "<|im_end|>",
  "<|end|>",
  "<end_of_turn>",
  "<|endoftext|>",
  "<|end_of_text|>",
  "<EOT>",
  "_<EOT>",
  "[EOT]",
  "<end_of_utterance>",
];

type Fragment = string | number;

const utf8 = new TextEncoder();

/**
 * A byte-level BPE tokenizer (`tokenizer.ggml.model == "gpt2"`) with llama.cpp's semantics, so
 * its ids equal llama.cpp's for the same model and text.
 *
 * @example
 * ```ts
 * import { GGUFFile, Tokenizer } from "@graft/graft";
 * // The SmolLM2 GGUF `deno task model:fetch` caches (any llama-family GGUF works the same way).
 * const cache = Deno.env.get("GRAFT_MODEL_CACHE") ?? `${Deno.env.get("HOME")}/.cache/graft/models`;
 * const path = `${cache}/SmolLM2-135M-Instruct.Q4_1.gguf`;
 * using file = GGUFFile.open(path);
 * const tok = Tokenizer.fromGGUF(file);
 * const ids = tok.tokenize("<|im_start|>user\nhi<|im_end|>", { parseSpecial: true });
 * console.log(ids, tok.detokenize(ids, { unparseSpecial: true }));
 * const dec = tok.decoder();
 * let text = "";
 * for (const id of ids) text += dec.push(id);
 * ```
 */
export class Tokenizer {
  /** Token texts by id (byte-level: bytes mapped through GPT-2's byte↔unicode table). */
  readonly tokens: readonly string[];
  /** Token types by id (see TokenType). */
  readonly tokenTypes: readonly number[];
  /** `tokenizer.ggml.pre` (empty when the file has none: llama.cpp's `default`). */
  readonly pre: string;
  /** The pre-tokenizer that `pre` names. */
  readonly preTokenizer: PreTokenizer;
  /** BOS id, if any. */
  readonly bosId: number | undefined;
  /** EOS id, if any. */
  readonly eosId: number | undefined;
  /** End-of-turn id (`tokenizer.ggml.eot_token_id`, else found by text as llama.cpp does). */
  readonly eotId: number | undefined;
  /** Whether tokenize adds BOS (with addSpecial). */
  readonly addBos: boolean;
  /** Whether tokenize adds EOS (with addSpecial). */
  readonly addEos: boolean;

  readonly #vocab = new Map<string, number>();
  readonly #ranks = new Map<string, number>();
  /** Control, user-defined and unknown tokens, longest text first (llama.cpp's order). */
  readonly #special: readonly number[];
  readonly #cache = new Map<string, readonly number[]>();
  readonly #pieces: readonly (Uint8Array | undefined)[];

  private constructor(init: {
    tokens: string[];
    types: number[];
    merges: string[];
    pre: string;
    preTokenizer: PreTokenizer;
    bosId?: number;
    eosId?: number;
    eotId?: number;
    addBos: boolean;
    addEos: boolean;
  }) {
    this.tokens = init.tokens;
    this.tokenTypes = init.types;
    this.pre = init.pre;
    this.preTokenizer = init.preTokenizer;
    this.bosId = init.bosId;
    this.eosId = init.eosId;
    this.addBos = init.addBos;
    this.addEos = init.addEos;
    init.tokens.forEach((t, i) => this.#vocab.set(t, i));
    init.merges.forEach((m, rank) => {
      // llama.cpp splits at the first space after the first character.
      const pos = m.indexOf(" ", 1);
      if (pos < 0) throw new TokenizerError(`merge ${rank} (${JSON.stringify(m)}) has no space`);
      const key = m.slice(0, pos) + " " + m.slice(pos + 1);
      if (!this.#ranks.has(key)) this.#ranks.set(key, rank);
    });
    let eot = init.eotId;
    if (eot === undefined) {
      for (const text of EOT_TEXTS) {
        const id = this.#vocab.get(text);
        if (id !== undefined) {
          eot = id;
          break;
        }
      }
    }
    this.eotId = eot;
    const special: number[] = [];
    init.types.forEach((t, id) => {
      if (
        (t === TokenType.control || t === TokenType.userDefined || t === TokenType.unknown) &&
        init.tokens[id]!.length > 0
      ) special.push(id);
    });
    const byteLen = special.map((id) => utf8.encode(init.tokens[id]!).length);
    const order = special.map((_, i) => i);
    order.sort((a, b) => byteLen[b]! - byteLen[a]! || special[a]! - special[b]!);
    this.#special = order.map((i) => special[i]!);
    this.#pieces = init.tokens.map((_, id) => this.#piece(id));
  }

  /**
   * Builds the tokenizer from a GGUF file's metadata. Throws a TokenizerError when
   * `tokenizer.ggml.model` is not `gpt2`, when a required key is missing or mistyped, or when
   * `tokenizer.ggml.pre` names a pre-tokenizer not implemented here.
   */
  static fromGGUF(file: GGUFFile | { header: GGUFHeader }): Tokenizer {
    const header = file.header;
    const model = entry(header, "tokenizer.ggml.model");
    if (model === undefined) throw new TokenizerError("GGUF metadata has no tokenizer.ggml.model");
    if (model !== "gpt2") {
      throw new TokenizerError(
        `tokenizer.ggml.model ${
          JSON.stringify(model)
        } is not supported (only "gpt2", byte-level BPE)`,
      );
    }
    const tokens = stringArray(header, "tokenizer.ggml.tokens", true)!;
    const merges = stringArray(header, "tokenizer.ggml.merges", true)!;
    const typeEntry = entry(header, "tokenizer.ggml.token_type");
    let types: number[];
    if (typeEntry === undefined) {
      types = tokens.map(() => TokenType.normal);
    } else {
      if (!isArray(typeEntry) || typeEntry.items.length !== tokens.length) {
        throw new TokenizerError(
          `GGUF metadata tokenizer.ggml.token_type is not an array of ${tokens.length} integers`,
        );
      }
      types = typeEntry.items.map((x) => {
        if (typeof x !== "number" && typeof x !== "bigint") {
          throw new TokenizerError("GGUF metadata tokenizer.ggml.token_type has a non-integer");
        }
        return Number(x);
      });
    }
    const preValue = entry(header, "tokenizer.ggml.pre");
    if (preValue !== undefined && typeof preValue !== "string") {
      throw new TokenizerError("GGUF metadata tokenizer.ggml.pre is not a string");
    }
    const pre = preValue ?? "";
    const pt = preTokenizer(pre);
    if (!pt) {
      throw new TokenizerError(`tokenizer.ggml.pre ${JSON.stringify(pre)} is not implemented`);
    }
    const n = tokens.length;
    return new Tokenizer({
      tokens,
      types,
      merges,
      pre,
      preTokenizer: pt,
      bosId: optionalId(header, "tokenizer.ggml.bos_token_id", n),
      eosId: optionalId(header, "tokenizer.ggml.eos_token_id", n),
      eotId: optionalId(header, "tokenizer.ggml.eot_token_id", n),
      addBos: optionalBool(header, "tokenizer.ggml.add_bos_token") ?? pt.addBos,
      addEos: optionalBool(header, "tokenizer.ggml.add_eos_token") ?? false,
    });
  }

  /** Number of tokens in the vocabulary. */
  get vocabSize(): number {
    return this.tokens.length;
  }

  /** The id of a token text (byte-level form), or undefined. */
  tokenId(text: string): number | undefined {
    return this.#vocab.get(text);
  }

  /** Text → token ids, as llama.cpp's llama_tokenize(text, addSpecial, parseSpecial). */
  tokenize(text: string, options: TokenizeOptions = {}): number[] {
    const addSpecial = options.addSpecial ?? true;
    const parseSpecial = options.parseSpecial ?? false;
    const out: number[] = [];
    if (addSpecial && this.addBos) {
      if (this.bosId === undefined) {
        throw new TokenizerError("add_bos is set but there is no BOS id");
      }
      out.push(this.bosId);
    }
    for (const fragment of this.#partition(text, parseSpecial)) {
      if (typeof fragment === "number") out.push(fragment);
      else this.#tokenizeText(fragment, out);
    }
    if (addSpecial && this.addEos) {
      if (this.eosId === undefined) {
        throw new TokenizerError("add_eos is set but there is no EOS id");
      }
      out.push(this.eosId);
    }
    return out;
  }

  /** Splits out special tokens (llama.cpp's tokenizer_st_partition). */
  #partition(text: string, parseSpecial: boolean): Fragment[] {
    let fragments: Fragment[] = text.length > 0 ? [text] : [];
    for (const id of this.#special) {
      const type = this.tokenTypes[id];
      if (!parseSpecial && (type === TokenType.control || type === TokenType.unknown)) continue;
      const special = this.tokens[id]!;
      const next: Fragment[] = [];
      for (const f of fragments) {
        if (typeof f === "number" || !f.includes(special)) {
          next.push(f);
          continue;
        }
        let start = 0;
        for (;;) {
          const at = f.indexOf(special, start);
          if (at < 0) break;
          if (at > start) next.push(f.slice(start, at));
          next.push(id);
          start = at + special.length;
        }
        if (start < f.length) next.push(f.slice(start));
      }
      fragments = next;
    }
    return fragments;
  }

  #tokenizeText(text: string, out: number[]): void {
    for (const word of splitWithPatterns(text, this.preTokenizer.patterns)) {
      const encoded = byteEncode(word);
      let ids = this.#cache.get(encoded);
      if (!ids) {
        ids = this.#bpe(encoded);
        if (this.#cache.size > 50_000) this.#cache.clear();
        this.#cache.set(encoded, ids);
      }
      for (const id of ids) out.push(id);
    }
  }

  /** BPE merges on one byte-encoded word (llama.cpp's llm_tokenizer_bpe_session). */
  #bpe(word: string): number[] {
    if (this.preTokenizer.ignoreMerges) {
      const id = this.#vocab.get(word);
      if (id !== undefined) return [id];
    }
    // llama.cpp's algorithm: a linked list of symbols (every character of a byte-encoded word
    // is one byte, one code unit) and a heap of candidate pairs, lowest rank then leftmost
    // first; a popped pair whose symbols changed since it was queued is skipped.
    const n = word.length;
    const text: string[] = word.split("");
    const prev = Int32Array.from({ length: n }, (_, i) => i - 1);
    const next = Int32Array.from({ length: n }, (_, i) => (i + 1 < n ? i + 1 : -1));
    const heap = new PairHeap();
    const add = (left: number, right: number): void => {
      if (left < 0 || right < 0) return;
      const rank = this.#ranks.get(text[left] + " " + text[right]);
      if (rank !== undefined) heap.push(rank, left, right, text[left]! + text[right]!);
    };
    for (let i = 1; i < n; i++) add(i - 1, i);
    for (let pair = heap.pop(); pair; pair = heap.pop()) {
      const { left, right, merged } = pair;
      const l = text[left]!, r = text[right]!;
      if (l.length === 0 || r.length === 0 || l + r !== merged) continue;
      text[left] = merged;
      text[right] = "";
      next[left] = next[right]!;
      if (next[right]! >= 0) prev[next[right]!] = left;
      add(prev[left]!, left);
      add(left, next[left]!);
    }
    const symbols = text.filter((t) => t.length > 0);
    const ids: number[] = [];
    for (const s of symbols) {
      const id = this.#vocab.get(s);
      if (id !== undefined) {
        ids.push(id);
        continue;
      }
      // llama.cpp then looks up each byte of the symbol's UTF-8 alone: only ASCII can match.
      for (const c of s) {
        if (c.charCodeAt(0) < 0x80) {
          const b = this.#vocab.get(c);
          if (b !== undefined) ids.push(b);
        }
      }
    }
    return ids;
  }

  /** The bytes a token renders as (llama.cpp's token_to_piece with special = true). */
  #piece(id: number): Uint8Array | undefined {
    const text = this.tokens[id]!;
    const type = this.tokenTypes[id];
    if (
      type === TokenType.control || type === TokenType.unknown || type === TokenType.userDefined
    ) {
      return utf8.encode(text);
    }
    if (type === TokenType.normal) {
      const bytes: number[] = [];
      for (const c of text) {
        const b = UNICODE_TO_BYTE.get(c);
        if (b !== undefined) {
          bytes.push(b);
        } else {
          const hex = [...utf8.encode(c)].map((x) => x.toString(16).padStart(2, "0")).join("");
          bytes.push(...utf8.encode(`[UNK_BYTE_0x${hex}${text}]`));
        }
      }
      return new Uint8Array(bytes);
    }
    if (type === TokenType.byte) {
      const m = /^<0x([0-9A-Fa-f]{2})>$/.exec(text);
      if (m) return new Uint8Array([parseInt(m[1]!, 16)]);
      const b = UNICODE_TO_BYTE.get(text);
      return b === undefined ? undefined : new Uint8Array([b]);
    }
    return undefined;
  }

  /** The bytes of one token under `unparseSpecial` (empty for suppressed tokens). */
  tokenBytes(id: number, unparseSpecial = false): Uint8Array {
    if (!Number.isInteger(id) || id < 0 || id >= this.tokens.length) {
      throw new TokenizerError(`token id ${id} is out of range [0, ${this.tokens.length})`);
    }
    const type = this.tokenTypes[id];
    if (!unparseSpecial && (type === TokenType.control || type === TokenType.unknown)) {
      return new Uint8Array(0);
    }
    return this.#pieces[id] ?? new Uint8Array(0);
  }

  /** Token ids → text, as llama.cpp's llama_detokenize (with its clean_spaces for the pre-tokenizer). */
  detokenize(ids: readonly number[], options: DetokenizeOptions = {}): string {
    let list = ids;
    if (options.removeSpecial) {
      if (this.addBos && list.length > 0 && list[0] === this.bosId) list = list.slice(1);
      if (this.addEos && list.length > 0 && list[list.length - 1] === this.eosId) {
        list = list.slice(0, -1);
      }
    }
    const parts = list.map((id) => this.tokenBytes(id, options.unparseSpecial ?? false));
    let bytes: Uint8Array = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
    let o = 0;
    for (const p of parts) {
      bytes.set(p, o);
      o += p.length;
    }
    if (this.preTokenizer.cleanSpaces) bytes = cleanSpaces(bytes);
    return new TextDecoder("utf-8", { ignoreBOM: true }).decode(bytes);
  }

  /**
   * A streaming decoder: `push(id)` returns the text that the token completes, holding back an
   * incomplete UTF-8 sequence until the tokens that finish it arrive. Without clean_spaces (as
   * SmolLM2's `smollm`), the pushes concatenated equal detokenize of the same ids.
   */
  decoder(options: DetokenizeOptions = {}): StreamDecoder {
    const unparse = options.unparseSpecial ?? false;
    let td = new TextDecoder("utf-8", { ignoreBOM: true });
    let first = true;
    return {
      push: (id: number): string => {
        const isFirst = first;
        first = false;
        if (options.removeSpecial && isFirst && this.addBos && id === this.bosId) return "";
        return td.decode(this.tokenBytes(id, unparse), { stream: true });
      },
      flush: (): string => {
        const rest = td.decode();
        td = new TextDecoder("utf-8", { ignoreBOM: true });
        first = true;
        return rest;
      },
    };
  }
}

/** llama.cpp's clean_spaces passes over detokenized bytes. */
function cleanSpaces(input: Uint8Array): Uint8Array {
  const SP = 0x20, Q = 0x27;
  let text = Array.from(input);
  // 1: " ?", " !", " .", " ," lose the space.
  let out: number[] = text.length ? [text[0]!] : [];
  for (let i = 1; i < text.length; i++) {
    const x = text[i]!;
    if (text[i - 1] === SP && (x === 0x3f || x === 0x21 || x === 0x2e || x === 0x2c)) out.pop();
    out.push(x);
  }
  // 2: " ' " becomes "'".
  text = out;
  out = text.length ? [text[0]!] : [];
  for (let i = 1; i < text.length; i++) {
    const x = text[i]!;
    if (x === Q && i + 1 < text.length && text[i - 1] === SP && text[i + 1] === SP) {
      out.pop();
      out.push(x);
      i++;
      continue;
    }
    out.push(x);
  }
  // 3: " 's", " 'm", " 're", " 've" lose the space.
  text = out;
  out = text.length ? [text[0]!] : [];
  for (let i = 1; i < text.length; i++) {
    const x = text[i]!;
    if (text[i - 1] === SP && x === Q && i + 1 < text.length) {
      const x1 = text[i + 1];
      if (x1 === 0x73 || x1 === 0x6d) out.pop();
      else if (i + 2 < text.length) {
        const x2 = text[i + 2];
        if ((x1 === 0x72 && x2 === 0x65) || (x1 === 0x76 && x2 === 0x65)) out.pop();
      }
    }
    out.push(x);
  }
  return new Uint8Array(out);
}

interface Pair {
  rank: number;
  left: number;
  right: number;
  merged: string;
}

/** A binary min-heap of merge candidates: lowest rank first, then leftmost (llama.cpp's order). */
class PairHeap {
  readonly #items: Pair[] = [];

  static #less(a: Pair, b: Pair): boolean {
    return a.rank < b.rank || (a.rank === b.rank && a.left < b.left);
  }

  push(rank: number, left: number, right: number, merged: string): void {
    const items = this.#items;
    items.push({ rank, left, right, merged });
    let i = items.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!PairHeap.#less(items[i]!, items[parent]!)) break;
      [items[i], items[parent]] = [items[parent]!, items[i]!];
      i = parent;
    }
  }

  pop(): Pair | undefined {
    const items = this.#items;
    const top = items[0];
    const last = items.pop();
    if (items.length > 0 && last) {
      items[0] = last;
      let i = 0;
      for (;;) {
        const a = 2 * i + 1, b = a + 1;
        let m = i;
        if (a < items.length && PairHeap.#less(items[a]!, items[m]!)) m = a;
        if (b < items.length && PairHeap.#less(items[b]!, items[m]!)) m = b;
        if (m === i) break;
        [items[i], items[m]] = [items[m]!, items[i]!];
        i = m;
      }
    }
    return top;
  }
}
