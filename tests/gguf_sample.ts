// A small GGUF file with every metadata value type and a few tensors, built with Graft's writer,
// for the reader, writer and fuzz tests.
import {
  ggmlTypeByName,
  type GGUFMetadataEntry,
  type GGUFTensorInfo,
  layoutTensors,
  writeGGUF,
} from "../mod.ts";
import { seededRandom } from "./random_dag.ts";

/** The sample's metadata: one entry of every type, arrays of numbers and strings. */
export function sampleMetadata(nested: boolean): GGUFMetadataEntry[] {
  const entries: GGUFMetadataEntry[] = [
    { key: "general.architecture", type: "string", value: "llama" },
    { key: "general.name", type: "string", value: "graft sample ✓" },
    { key: "test.u8", type: "u8", value: 200 },
    { key: "test.i8", type: "i8", value: -100 },
    { key: "test.u16", type: "u16", value: 60000 },
    { key: "test.i16", type: "i16", value: -30000 },
    { key: "test.u32", type: "u32", value: 4000000000 },
    { key: "test.i32", type: "i32", value: -2000000000 },
    { key: "test.f32", type: "f32", value: Math.fround(1.5e-7) },
    { key: "test.bool", type: "bool", value: true },
    { key: "test.u64", type: "u64", value: 2n ** 63n + 5n },
    { key: "test.i64", type: "i64", value: -(2n ** 62n) },
    { key: "test.f64", type: "f64", value: Math.PI },
    { key: "test.u32s", type: "array", value: { itemType: "u32", items: [1, 2, 3, 4096] } },
    {
      key: "tokenizer.ggml.tokens",
      type: "array",
      value: { itemType: "string", items: ["<s>", "</s>", "hello", " world", "ü"] },
    },
    { key: "test.empty", type: "array", value: { itemType: "f32", items: [] } },
  ];
  if (nested) {
    entries.push({
      key: "test.nested",
      type: "array",
      value: {
        itemType: "array",
        items: [{ itemType: "i16", items: [1, -2] }, { itemType: "string", items: ["a"] }],
      },
    });
  }
  return entries;
}

/** The sample's tensors: f32, f16, i32 and a q4_0 one (raw blocks), with seeded data. */
export function sampleTensors(): { infos: GGUFTensorInfo[]; data: Uint8Array[] } {
  const type = (name: string) => ggmlTypeByName(name)!;
  const infos = layoutTensors([
    { name: "token_embd.weight", dims: [7, 3], type: type("f32"), nbytes: 84 },
    { name: "blk.0.attn_norm.weight", dims: [5], type: type("f16"), nbytes: 10 },
    { name: "ids", dims: [4, 2], type: type("i32"), nbytes: 32 },
    { name: "blk.0.ffn_up.weight", dims: [64, 2], type: type("q4_0"), nbytes: 72 },
  ]);
  const random = seededRandom(11);
  const data = infos.map((t) => Uint8Array.from({ length: t.nbytes }, () => random() * 256));
  return { infos, data };
}

/** The sample file's bytes (nested arrays optional: llama.cpp's reader rejects them). */
export function sampleFile(nested = false): Uint8Array {
  const { infos, data } = sampleTensors();
  return writeGGUF({
    metadata: sampleMetadata(nested),
    tensors: infos,
    data: (i) => data[i]!,
    onWarning: () => {},
  });
}
