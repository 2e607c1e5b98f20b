/**
 * Metadata arrays kept as their file bytes until read. A vocabulary (`tokenizer.ggml.tokens`,
 * `tokenizer.ggml.merges`: about 50,000 strings each in SmolLM2) decoded into JS strings when a
 * file is opened took about 20 MB of JS heap (10 MB live, the rest the garbage of decoding) in
 * every process that opened the model, tokenizer used or not; kept as bytes it is 1.6 MB. The
 * reader checks every length and every string's UTF-8 when the file is opened, so reading the
 * items later cannot fail.
 * @module
 */

import type { GGUFArray, GGUFScalar } from "./reader.ts";
import { VALUE_SIZES, type ValueTypeName } from "./types.ts";

/** Arrays of scalars with at least this many items are decoded on first read. */
export const LAZY_ARRAY_MIN_ITEMS = 256;

const utf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * Whether `bytes[start, end)` is well-formed UTF-8 as the WHATWG decoder (fatal) accepts it:
 * no overlong forms, no surrogates, nothing above U+10FFFF, no truncated sequence.
 */
export function isUtf8(bytes: Uint8Array, start: number, end: number): boolean {
  let i = start;
  while (i < end) {
    const b = bytes[i]!;
    if (b < 0x80) {
      i++;
      continue;
    }
    let need: number, low = 0x80, high = 0xbf;
    if (b >= 0xc2 && b <= 0xdf) need = 1;
    else if (b >= 0xe0 && b <= 0xef) {
      need = 2;
      if (b === 0xe0) low = 0xa0; // overlong
      if (b === 0xed) high = 0x9f; // surrogates
    } else if (b >= 0xf0 && b <= 0xf4) {
      need = 3;
      if (b === 0xf0) low = 0x90; // overlong
      if (b === 0xf4) high = 0x8f; // above U+10FFFF
    } else return false;
    if (i + need >= end) return false; // truncated
    for (let k = 1; k <= need; k++) {
      const c = bytes[i + k]!;
      if (k === 1 ? c < low || c > high : c < 0x80 || c > 0xbf) return false;
    }
    i += need + 1;
  }
  return true;
}

/** An array of `length` scalars of `itemType`, decoded from `bytes` (the file's) on first read. */
export class LazyArray implements GGUFArray {
  readonly itemType: ValueTypeName;
  /** Items in the array. */
  readonly length: number;
  readonly #bytes: Uint8Array;
  #items: GGUFScalar[] | null = null;

  /** `bytes` are the array's items as the file holds them, already checked by the reader. */
  constructor(itemType: ValueTypeName, length: number, bytes: Uint8Array) {
    this.itemType = itemType;
    this.length = length;
    this.#bytes = bytes;
  }

  /** The items, decoded once. */
  get items(): readonly GGUFScalar[] {
    this.#items ??= this.#decode();
    return this.#items;
  }

  #decode(): GGUFScalar[] {
    const b = this.#bytes;
    const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
    const out: GGUFScalar[] = new Array(this.length);
    if (this.itemType === "string") {
      for (let i = 0, at = 0; i < this.length; i++) {
        const n = Number(v.getBigUint64(at, true));
        out[i] = utf8.decode(b.subarray(at + 8, at + 8 + n));
        at += 8 + n;
      }
      return out;
    }
    const read = READ[this.itemType];
    const size = VALUE_SIZES[this.itemType];
    if (!read || size === undefined) throw new RangeError(`${this.itemType} is not a scalar`);
    for (let i = 0; i < this.length; i++) out[i] = read(v, i * size);
    return out;
  }
}

const READ: Partial<Record<ValueTypeName, (v: DataView, at: number) => GGUFScalar>> = {
  u8: (v, at) => v.getUint8(at),
  i8: (v, at) => v.getInt8(at),
  u16: (v, at) => v.getUint16(at, true),
  i16: (v, at) => v.getInt16(at, true),
  u32: (v, at) => v.getUint32(at, true),
  i32: (v, at) => v.getInt32(at, true),
  f32: (v, at) => v.getFloat32(at, true),
  u64: (v, at) => v.getBigUint64(at, true),
  i64: (v, at) => v.getBigInt64(at, true),
  f64: (v, at) => v.getFloat64(at, true),
  bool: (v, at) => v.getUint8(at) === 1,
};

/** Items in a metadata array, without decoding a lazy one. */
export function arrayLength(array: GGUFArray): number {
  return array instanceof LazyArray ? array.length : array.items.length;
}
