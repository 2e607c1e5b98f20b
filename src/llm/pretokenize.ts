/**
 * Pre-tokenizer regex sets, as llama.cpp's llama-vocab.cpp lists them per `tokenizer.ggml.pre`,
 * and GPT-2's byte↔unicode table for byte-level BPE.
 *
 * llama.cpp's `\s` is the Unicode White_Space property (its `unicode_set_whitespace`), which is
 * not JavaScript's `\s` (that adds U+FEFF and lacks U+0085), so the patterns here spell it
 * `\p{White_Space}`; `\p{L}`, `\p{N}`, `\p{P}` are the general categories, as in llama.cpp.
 * @module
 */

const S = "\\p{White_Space}";
const NS = "\\P{White_Space}";

/** GPT-2's pattern (llama.cpp's custom `gpt2` splitter implements exactly this one). */
const GPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^${S}\\p{L}\\p{N}]+|${S}+(?!${NS})`;

/** Llama 3's pattern, with the case-insensitive contractions spelled out as llama.cpp does. */
const LLAMA3 =
  `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|` +
  `\\p{N}{1,3}| ?[^${S}\\p{L}\\p{N}]+[\\r\\n]*|${S}*[\\r\\n]+|${S}+(?!${NS})|${S}+`;

/** Qwen2's pattern: Llama 3's with single digits. */
const QWEN2 =
  `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|` +
  `\\p{N}| ?[^${S}\\p{L}\\p{N}]+[\\r\\n]*|${S}*[\\r\\n]+|${S}+(?!${NS})|${S}+`;

/** One pre-tokenizer: regexes applied in turn (each splits the pieces of the one before). */
export interface PreTokenizer {
  /** The regex family: `default`, `gpt2`, `llama3`, `qwen2` or `smollm`. */
  readonly kind: "default" | "gpt2" | "llama3" | "qwen2" | "smollm";
  /** The patterns (JavaScript source, `u` flag). */
  readonly patterns: readonly string[];
  /** A whole pre-token that is in the vocabulary is taken as is, without merges (llama3). */
  readonly ignoreMerges: boolean;
  /** Detokenizing removes spaces before `?!.,` and some contractions (llama.cpp's clean_spaces). */
  readonly cleanSpaces: boolean;
  /** The BOS default before `tokenizer.ggml.add_bos_token` (llama3: true). */
  readonly addBos: boolean;
}

const SETS: Record<PreTokenizer["kind"], readonly string[]> = {
  default: ["[\\p{P}\\$\\+<=>\\^~\\|]+", GPT2, "\\p{N}+", "[0-9][0-9][0-9]"],
  gpt2: [GPT2],
  llama3: [LLAMA3],
  qwen2: [QWEN2],
  smollm: ["\\p{N}", GPT2],
};

function pre(
  kind: PreTokenizer["kind"],
  flags: { ignoreMerges?: boolean; cleanSpaces?: boolean; addBos?: boolean } = {},
): PreTokenizer {
  return {
    kind,
    patterns: SETS[kind],
    ignoreMerges: flags.ignoreMerges ?? false,
    cleanSpaces: flags.cleanSpaces ?? true,
    addBos: flags.addBos ?? false,
  };
}

/** `tokenizer.ggml.pre` names → pre-tokenizer, with llama.cpp's flags for each name. */
const BY_NAME: Record<string, PreTokenizer> = {
  "": pre("default"),
  "default": pre("default"),
  "llama3": pre("llama3", { ignoreMerges: true, addBos: true }),
  "llama-v3": pre("llama3", { ignoreMerges: true, addBos: true }),
  "llama-bpe": pre("llama3", { ignoreMerges: true, addBos: true }),
  "falcon3": pre("llama3", { ignoreMerges: true, addBos: true }),
  "falcon-h1": pre("llama3", { ignoreMerges: true, addBos: true }),
  "pixtral": pre("llama3", { ignoreMerges: true, addBos: true }),
  "lfm2": pre("llama3", { ignoreMerges: true, addBos: true }),
  "dbrx": pre("llama3"),
  "smaug-bpe": pre("llama3"),
  "gpt-2": pre("gpt2"),
  "phi-2": pre("gpt2"),
  "mpt": pre("gpt2"),
  "olmo": pre("gpt2"),
  "jais": pre("gpt2"),
  "exaone4": pre("gpt2"),
  "qwen2": pre("qwen2", { cleanSpaces: false }),
  "deepseek-r1-qwen": pre("qwen2", { cleanSpaces: false }),
  "megrez": pre("qwen2"),
  "stablelm2": pre("qwen2"),
  "smollm": pre("smollm", { cleanSpaces: false }),
  "starcoder": pre("smollm"),
  "refact": pre("smollm"),
  "codeshell": pre("smollm"),
  "exaone": pre("smollm"),
  "minerva-7b": pre("smollm"),
  "command-r": pre("smollm", { cleanSpaces: false }),
};

/** The pre-tokenizer for a `tokenizer.ggml.pre` name, or undefined for one not implemented. */
export function preTokenizer(name: string): PreTokenizer | undefined {
  return Object.hasOwn(BY_NAME, name) ? BY_NAME[name] : undefined;
}

/** The `tokenizer.ggml.pre` names implemented. */
export const PRE_TOKENIZER_NAMES: readonly string[] = Object.keys(BY_NAME).filter((n) => n !== "");

const compiled = new Map<string, RegExp>();

function regex(pattern: string): RegExp {
  let re = compiled.get(pattern);
  if (!re) {
    re = new RegExp(pattern, "gu");
    compiled.set(pattern, re);
  }
  return re;
}

/**
 * Splits `text` with the patterns in turn, as llama.cpp's `unicode_regex_split`: each pattern
 * splits every piece left by the one before into its matches and the text between them.
 */
export function splitWithPatterns(text: string, patterns: readonly string[]): string[] {
  let pieces = text.length > 0 ? [text] : [];
  for (const pattern of patterns) {
    const re = regex(pattern);
    const next: string[] = [];
    for (const piece of pieces) {
      let last = 0;
      for (const m of piece.matchAll(re)) {
        if (m[0].length === 0) continue;
        if (m.index > last) next.push(piece.slice(last, m.index));
        next.push(m[0]);
        last = m.index + m[0].length;
      }
      if (last < piece.length) next.push(piece.slice(last));
    }
    pieces = next;
  }
  return pieces;
}

/**
 * GPT-2's byte↔unicode table: printable Latin-1 bytes map to themselves, the other 68 bytes to
 * U+0100.. in order, so every byte is one visible character. Index = byte, value = character.
 */
export const BYTE_TO_UNICODE: readonly string[] = (() => {
  const table = new Array<string>(256);
  let n = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) ||
      (b >= 0xae && b <= 0xff);
    table[b] = String.fromCharCode(printable ? b : 256 + n++);
  }
  return table;
})();

/** The inverse of BYTE_TO_UNICODE: character → byte. */
export const UNICODE_TO_BYTE: ReadonlyMap<string, number> = new Map(
  BYTE_TO_UNICODE.map((c, b) => [c, b]),
);

const encoder = new TextEncoder();

/** The UTF-8 bytes of `text`, each mapped through BYTE_TO_UNICODE. */
export function byteEncode(text: string): string {
  let out = "";
  for (const b of encoder.encode(text)) out += BYTE_TO_UNICODE[b];
  return out;
}
