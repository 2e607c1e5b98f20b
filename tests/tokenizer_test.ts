import assert from "node:assert/strict";
import { SMOLLM2_PATH, smolLM2Cached } from "../tools/model_cache.ts";
import {
  GGUFFile,
  type GGUFHeader,
  type GGUFMetadataEntry,
  Tokenizer,
  TokenizerError,
  TokenType,
} from "../mod.ts";
import { BYTE_TO_UNICODE, preTokenizer, splitWithPatterns, UNICODE_TO_BYTE } from "../internal.ts";

const MODEL = SMOLLM2_PATH;
const haveModel = smolLM2Cached();
if (!haveModel) {
  console.log(
    `tokenizer_test: ${MODEL} is missing (deno task model:fetch): the SmolLM2 fixture checks are skipped`,
  );
}

interface Case {
  text: string;
  parseSpecial: boolean;
  ids: number[];
}
const fixture = JSON.parse(
  await Deno.readTextFile(new URL("./fixtures/tokenizer/smollm2.json", import.meta.url)),
) as { cases: Case[] };

function header(entries: Record<string, GGUFMetadataEntry["value"]>): { header: GGUFHeader } {
  const metadata = Object.entries(entries).map(([key, value]) => ({
    key,
    type: "string" as const,
    value,
  }));
  return {
    header: { version: 3, metadata, tensors: [], alignment: 32, dataOffset: 0, fileSize: 0 },
  };
}

function throwsTok(fn: () => unknown, cls: typeof TokenizerError, text = ""): void {
  assert.throws(fn, (e: unknown) => e instanceof cls && e.message.includes(text));
}

function strings(items: string[]): GGUFMetadataEntry["value"] {
  return { itemType: "string", items };
}

function ints(items: number[]): GGUFMetadataEntry["value"] {
  return { itemType: "i32", items };
}

Deno.test("GPT-2 byte↔unicode table: a bijection, printable bytes map to themselves", () => {
  assert.deepStrictEqual(BYTE_TO_UNICODE.length, 256);
  assert.deepStrictEqual(new Set(BYTE_TO_UNICODE).size, 256);
  assert.deepStrictEqual(BYTE_TO_UNICODE[0x41], "A");
  assert.deepStrictEqual(BYTE_TO_UNICODE[0x20], "Ġ"); // U+0120
  assert.deepStrictEqual(BYTE_TO_UNICODE[0x0a], "Ċ"); // U+010A
  assert.deepStrictEqual(BYTE_TO_UNICODE[0x00], "Ā"); // U+0100
  assert.deepStrictEqual(BYTE_TO_UNICODE[0xad], "Ń"); // U+0143, the last one
  for (let b = 0; b < 256; b++) assert.deepStrictEqual(UNICODE_TO_BYTE.get(BYTE_TO_UNICODE[b]!), b);
});

Deno.test("pre-tokenizer regex sets split hand-made strings as llama.cpp does", () => {
  const smollm = preTokenizer("smollm")!.patterns;
  assert.deepStrictEqual(splitWithPatterns("Hello world", smollm), ["Hello", " world"]);
  assert.deepStrictEqual(splitWithPatterns(" 12345", smollm), [" ", "1", "2", "3", "4", "5"]);
  assert.deepStrictEqual(splitWithPatterns("I'm  ok\n\n", smollm), ["I", "'m", " ", " ok", "\n\n"]);
  const gpt2 = preTokenizer("gpt-2")!.patterns;
  assert.deepStrictEqual(splitWithPatterns(" 12345 ab", gpt2), [" 12345", " ab"]);
  assert.deepStrictEqual(splitWithPatterns("a  \tb", gpt2), ["a", "  ", "\t", "b"]);
  const llama3 = preTokenizer("llama-bpe")!.patterns;
  assert.deepStrictEqual(splitWithPatterns("12345 DON'T", llama3), ["123", "45", " DON", "'T"]);
  assert.deepStrictEqual(splitWithPatterns("x = 1;\n\n  y", llama3), [
    "x",
    " =",
    " ",
    "1",
    ";\n\n",
    " ",
    " y",
  ]);
  assert.deepStrictEqual(splitWithPatterns("a \n\n b", llama3), ["a", " \n\n", " b"]);
  assert.ok(preTokenizer("llama3")!.ignoreMerges);
  const qwen2 = preTokenizer("qwen2")!.patterns;
  assert.deepStrictEqual(splitWithPatterns("x123", qwen2), ["x", "1", "2", "3"]);
  const def = preTokenizer("default")!.patterns;
  assert.deepStrictEqual(splitWithPatterns("a+b 12345", def), ["a", "+", "b", " ", "123", "45"]);
  // White_Space, not JavaScript's \s: U+0085 is a space to llama.cpp, U+FEFF is not.
  assert.deepStrictEqual(splitWithPatterns("a\u0085\u0085b", gpt2), ["a", "\u0085", "\u0085", "b"]);
  assert.deepStrictEqual(splitWithPatterns("a\ufeffb", gpt2), ["a", "\ufeff", "b"]);
  assert.deepStrictEqual(preTokenizer("no-such-pre"), undefined);
});

Deno.test("a hand-made vocabulary: merges by rank, special partition, streaming decoder", () => {
  const tokens = [
    "a",
    "b",
    "c",
    "ab",
    "bc",
    "abc",
    "Ġ",
    "<s>",
    "<user>",
    BYTE_TO_UNICODE[0xe2]!,
    BYTE_TO_UNICODE[0x82]!,
    BYTE_TO_UNICODE[0xac]!,
    BYTE_TO_UNICODE[0xef]!,
    BYTE_TO_UNICODE[0xbb]!,
    BYTE_TO_UNICODE[0xbf]!,
  ]; // ids 0..14; 9, 10, 11 are the bytes of "€" (E2 82 AC), 12, 13, 14 of U+FEFF
  const types = tokens.map((t) =>
    t === "<s>" ? TokenType.control : t === "<user>" ? TokenType.userDefined : TokenType.normal
  );
  const tok = Tokenizer.fromGGUF(header({
    "tokenizer.ggml.model": "gpt2",
    "tokenizer.ggml.pre": "gpt-2",
    "tokenizer.ggml.tokens": strings(tokens),
    "tokenizer.ggml.token_type": ints(types),
    "tokenizer.ggml.merges": strings(["b c", "a b", "a bc"]),
    "tokenizer.ggml.bos_token_id": 7,
    "tokenizer.ggml.add_bos_token": true,
  }));
  assert.deepStrictEqual(tok.tokenize("abc", { addSpecial: false }), [5]); // b+c first, then a+bc
  assert.deepStrictEqual(tok.tokenize("ab"), [7, 3]);
  // User-defined tokens are always matched whole; control tokens only with parseSpecial.
  assert.deepStrictEqual(tok.tokenize("a<user>b", { addSpecial: false }), [0, 8, 1]);
  assert.deepStrictEqual(tok.tokenize("<s>", { addSpecial: false, parseSpecial: true }), [7]);
  assert.deepStrictEqual(tok.detokenize([7, 5, 8]), "abc<user>");
  assert.deepStrictEqual(tok.detokenize([7, 5], { unparseSpecial: true }), "<s>abc");
  assert.deepStrictEqual(
    tok.detokenize([7, 5], { removeSpecial: true, unparseSpecial: true }),
    "abc",
  );
  // "€" is E2 82 AC: one byte per token, the decoder holds it until it is whole.
  const dec = tok.decoder();
  assert.deepStrictEqual([dec.push(9), dec.push(10), dec.push(11), dec.push(0)], [
    "",
    "",
    "€",
    "a",
  ]);
  assert.deepStrictEqual(dec.flush(), "");
  assert.deepStrictEqual([dec.push(9), dec.push(10)], ["", ""]);
  assert.deepStrictEqual(dec.flush(), "\ufffd");
  // A leading U+FEFF is text, not a byte-order mark to drop.
  const bom = tok.tokenize("\ufeffab", { addSpecial: false });
  assert.deepStrictEqual(tok.detokenize(bom), "\ufeffab");
  const dec2 = tok.decoder();
  assert.deepStrictEqual(bom.map((id) => dec2.push(id)).join("") + dec2.flush(), "\ufeffab");
  throwsTok(() => tok.tokenBytes(99), TokenizerError);
});

Deno.test("missing keys and other tokenizer models are TokenizerErrors", () => {
  throwsTok(() => Tokenizer.fromGGUF(header({})), TokenizerError, "tokenizer.ggml.model");
  throwsTok(
    () => Tokenizer.fromGGUF(header({ "tokenizer.ggml.model": "llama" })),
    TokenizerError,
    "not supported",
  );
  throwsTok(
    () => Tokenizer.fromGGUF(header({ "tokenizer.ggml.model": "gpt2" })),
    TokenizerError,
    "tokenizer.ggml.tokens",
  );
  throwsTok(
    () =>
      Tokenizer.fromGGUF(header({
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.tokens": strings(["a"]),
        "tokenizer.ggml.merges": strings([]),
        "tokenizer.ggml.pre": "unheard-of",
      })),
    TokenizerError,
    "unheard-of",
  );
});

Deno.test({
  name:
    "SmolLM2: ids equal llama.cpp's llama-tokenize fixture; detokenize and the decoder round-trip",
  ignore: !haveModel,
  fn: () => {
    using file = GGUFFile.open(MODEL);
    const tok = Tokenizer.fromGGUF(file);
    assert.deepStrictEqual(tok.pre, "smollm");
    const mismatches: string[] = [];
    for (const c of fixture.cases) {
      const ids = tok.tokenize(c.text, { parseSpecial: c.parseSpecial });
      if (JSON.stringify(ids) !== JSON.stringify(c.ids)) {
        mismatches.push(`${JSON.stringify(c.text)} (parseSpecial ${c.parseSpecial}): ${ids}`);
      }
      const opts = { unparseSpecial: c.parseSpecial };
      assert.deepStrictEqual(tok.detokenize(ids, opts), c.text);
      const dec = tok.decoder(opts);
      let streamed = "";
      for (const id of ids) streamed += dec.push(id);
      streamed += dec.flush();
      assert.deepStrictEqual(streamed, c.text);
    }
    assert.deepStrictEqual(
      mismatches,
      [],
      `${mismatches.length} of ${fixture.cases.length} differ`,
    );
  },
});
