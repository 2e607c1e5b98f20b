/**
 * Long metadata arrays (a vocabulary, its merges) stay as file bytes until read
 * (src/gguf/lazy_array.ts): they must read back as the eager reader would have read them, keep
 * the writer's byte-for-byte round trip, and be refused at open - never at first read - when
 * their lengths, UTF-8 or bools are bad.
 */

import assert from "node:assert/strict";
import { GGUFError, type GGUFMetadataEntry, MemorySource, readGGUF, writeGGUF } from "../mod.ts";
import { arrayLength, isUtf8, LAZY_ARRAY_MIN_ITEMS, LazyArray } from "../src/gguf/lazy_array.ts";
import type { GGUFArray, GGUFScalar } from "../src/gguf/reader.ts";
import type { ValueTypeName } from "../src/gguf/types.ts";
import { seededRandom } from "./random_dag.ts";

const N = LAZY_ARRAY_MIN_ITEMS + 45;
const random = seededRandom(77);

const words = ["a", "é", "中文", "🙂", "", " \n\t", "Ġthe", "<|im_start|>", "\u0000x"];
const ITEMS: [ValueTypeName, (i: number) => GGUFScalar][] = [
  ["string", (i) => `${words[i % words.length]}${i}`],
  ["u8", (i) => i % 256],
  ["i8", (i) => (i % 256) - 128],
  ["u16", (i) => i * 211 % 65536],
  ["i16", (i) => (i * 211 % 65536) - 32768],
  ["u32", (i) => i * 2654435761 % 2 ** 32],
  ["i32", (i) => (i * 2654435761 % 2 ** 32) - 2 ** 31],
  ["f32", (i) => Math.fround(Math.sin(i) * 1e3)],
  ["f64", () => random() * 1e300],
  ["u64", (i) => BigInt(i) * 1234567890123n],
  ["i64", (i) => -BigInt(i) * 1234567890123n],
  ["bool", (i) => i % 3 === 0],
];

function metadata(): GGUFMetadataEntry[] {
  return ITEMS.map(([itemType, item]) => ({
    key: `test.long.${itemType}`,
    type: "array" as const,
    value: { itemType, items: Array.from({ length: N }, (_, i) => item(i)) },
  }));
}

function file(entries: readonly GGUFMetadataEntry[]): Uint8Array {
  return writeGGUF({ metadata: entries, tensors: [], data: () => new Uint8Array(0) });
}

Deno.test("long arrays of every scalar type read back lazily as written", () => {
  const expected = metadata();
  const bytes = file(expected);
  const header = readGGUF(new MemorySource(bytes));
  for (const [i, entry] of header.metadata.entries()) {
    const value = entry.value as GGUFArray;
    assert.ok(value instanceof LazyArray, `${entry.key} is kept as bytes`);
    assert.equal(arrayLength(value), N);
    assert.deepEqual(value.items, (expected[i]!.value as GGUFArray).items, entry.key);
    assert.equal(value.items, value.items, "decoded once");
  }
  // The writer reads the items back out: the same bytes.
  assert.deepEqual(file(header.metadata), bytes);
  // Short arrays stay eager (and equal).
  const short = readGGUF(
    new MemorySource(file([{
      key: "short",
      type: "array",
      value: { itemType: "string", items: ["x", "y"] },
    }])),
  );
  assert.ok(!(short.metadata[0]!.value instanceof LazyArray));
  assert.equal(arrayLength(short.metadata[0]!.value as GGUFArray), 2);
});

/** Offset of item `index` in the file's only entry, a string array (of its first item in any). */
function stringItemOffset(bytes: Uint8Array, index: number): number {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let at = 24; // magic, version, tensor count, kv count
  at += 8 + Number(view.getBigUint64(at, true)); // key
  at += 4 + 4 + 8; // type, item type, count
  for (let i = 0; i < index; i++) at += 8 + Number(view.getBigUint64(at, true));
  return at;
}

Deno.test("a bad item in a long array is a GGUFError at open naming the item", () => {
  const strings = metadata().slice(0, 1);
  const bytes = file(strings);
  const at = stringItemOffset(bytes, 280);
  const badUtf8 = bytes.slice();
  badUtf8[at + 8] = 0xc0; // an overlong lead byte
  assert.throws(() => readGGUF(new MemorySource(badUtf8)), (e: unknown) => {
    assert.ok(e instanceof GGUFError);
    assert.match(e.message, /test\.long\.string\[280\].*not valid UTF-8/);
    return true;
  });
  const tooLong = bytes.slice();
  new DataView(tooLong.buffer).setBigUint64(at, 1n << 40n, true);
  assert.throws(() => readGGUF(new MemorySource(tooLong)), /\[280\].*needs 1099511627776 bytes/);
  const cut = bytes.slice(0, at + 3);
  assert.throws(() => readGGUF(new MemorySource(cut)), /\[280\]\.length.*ends inside it/);

  const bools = file(metadata().filter((m) => m.key === "test.long.bool"));
  const badBool = bools.slice();
  badBool[stringItemOffset(bools, 0) + N - 1] = 2; // the items start where a string's would

  assert.throws(() => readGGUF(new MemorySource(badBool)), (e: unknown) => {
    assert.ok(e instanceof GGUFError);
    assert.match(e.message, new RegExp(`bool\\[${N - 1}\\].*bool is 2`));
    return true;
  });
});

Deno.test("isUtf8 agrees with the fatal TextDecoder on random and edge-case bytes", () => {
  const decoder = new TextDecoder("utf-8", { fatal: true });
  const valid = (b: Uint8Array): boolean => {
    try {
      decoder.decode(b);
      return true;
    } catch {
      return false;
    }
  };
  const edges = [
    [0xc2, 0x80],
    [0xc1, 0xbf],
    [0xe0, 0x9f, 0x80],
    [0xe0, 0xa0, 0x80],
    [0xed, 0xa0, 0x80],
    [0xed, 0x9f, 0xbf],
    [0xf0, 0x8f, 0x80, 0x80],
    [0xf4, 0x90, 0x80, 0x80],
    [0xf4, 0x8f, 0xbf, 0xbf],
    [0xf5, 0x80, 0x80, 0x80],
    [0xe2, 0x82],
    [0x80],
  ].map((b) => new Uint8Array(b));
  const randoms = Array.from({ length: 20_000 }, () => {
    const b = new Uint8Array(1 + Math.floor(random() * 6));
    for (let i = 0; i < b.length; i++) {
      b[i] = random() < 0.5 ? 0x80 + Math.floor(random() * 0x40) : Math.floor(random() * 256);
    }
    return b;
  });
  for (const b of [...edges, ...randoms]) {
    assert.equal(isUtf8(b, 0, b.length), valid(b), `bytes ${[...b].map((x) => x.toString(16))}`);
  }
});

Deno.test("fuzz: mutated long arrays are refused at open or read back without error", () => {
  const bytes = file(metadata());
  let parsed = 0, refused = 0;
  for (let i = 0; i < 2000; i++) {
    const copy = bytes.slice();
    for (let e = 0; e < 3; e++) {
      const at = Math.floor(random() * copy.length);
      copy[at] = random() < 0.5 ? Math.floor(random() * 256) : copy[at]! ^ 0x80;
    }
    let header;
    try {
      header = readGGUF(new MemorySource(copy));
    } catch (error) {
      if (!(error instanceof GGUFError)) throw new Error(`case ${i}: ${error}`);
      refused++;
      continue;
    }
    for (const entry of header.metadata) {
      const value = entry.value;
      if (typeof value === "object" && "items" in value) void value.items.length;
    }
    parsed++;
  }
  assert.ok(refused > 100 && parsed > 100, `parsed ${parsed}, refused ${refused}`);
});
