/**
 * The GGUF reader (versions 2 and 3, as llama.cpp reads them). Every count, length and offset
 * is checked against the file before it is used: a bad file is a GGUFError naming the field and
 * its byte offset, and nothing is allocated beyond what the file's own size justifies.
 * @module
 */

import { GGUFError } from "../errors.ts";
import type { ByteSource } from "./source.ts";
import { isUtf8, LAZY_ARRAY_MIN_ITEMS, LazyArray } from "./lazy_array.ts";
import {
  type GgmlType,
  ggmlType,
  VALUE_SIZES,
  type ValueTypeName,
  valueTypeName,
} from "./types.ts";

/** A scalar metadata value: numbers (u64/i64 as bigint), booleans and strings. */
export type GGUFScalar = number | bigint | boolean | string;

/** A metadata array: its item type and items (nested arrays for an item type `array`). */
export interface GGUFArray {
  /** The type of every item. */
  readonly itemType: ValueTypeName;
  /** The items, in file order. */
  readonly items: readonly (GGUFScalar | GGUFArray)[];
}

/** One metadata entry, in file order. */
export interface GGUFMetadataEntry {
  /** The key, as `general.architecture`. */
  readonly key: string;
  /** The value's type in the file. */
  readonly type: ValueTypeName;
  /** The value. */
  readonly value: GGUFScalar | GGUFArray;
}

/** One tensor's description. */
export interface GGUFTensorInfo {
  /** The tensor's name, as `blk.0.attn_q.weight`. */
  readonly name: string;
  /** Elements per dimension, ggml order (`dims[0]` innermost). */
  readonly dims: readonly number[];
  /** Its ggml type. */
  readonly type: GgmlType;
  /** Offset of its data from the start of the data section. */
  readonly offset: number;
  /** Bytes of data. */
  readonly nbytes: number;
}

/** A parsed GGUF file: everything but the tensor data. */
export interface GGUFHeader {
  /** The format version: 2 or 3. */
  readonly version: number;
  /** Metadata entries, in file order. */
  readonly metadata: readonly GGUFMetadataEntry[];
  /** Tensor infos, in file order. */
  readonly tensors: readonly GGUFTensorInfo[];
  /** `general.alignment`, or 32. */
  readonly alignment: number;
  /** Where the data section starts in the file. */
  readonly dataOffset: number;
  /** Bytes in the file. */
  readonly fileSize: number;
}

/** GGUF files start with these bytes: "GGUF". */
export const GGUF_MAGIC = 0x46554747;
/** The alignment of the data section when `general.alignment` is absent. */
export const GGUF_DEFAULT_ALIGNMENT = 32;
/** Dimensions a tensor may have (ggml's GGML_MAX_DIMS). */
export const GGUF_MAX_DIMS = 4;

const utf8 = new TextDecoder("utf-8", { fatal: true });

/** Reads little-endian fields in order, checking each against the file's end. */
class Cursor {
  pos = 0;
  readonly #source: ByteSource;

  constructor(source: ByteSource) {
    this.#source = source;
  }

  get remaining(): number {
    return this.#source.size - this.pos;
  }

  bytes(field: string, length: number): Uint8Array {
    if (length > this.remaining) {
      throw new GGUFError(
        field,
        this.pos,
        `needs ${length} bytes but the file ends at byte ${this.#source.size}`,
      );
    }
    const out = this.#source.read(this.pos, length);
    this.pos += length;
    return out;
  }

  view(field: string, length: number): DataView {
    const b = this.bytes(field, length);
    return new DataView(b.buffer, b.byteOffset, b.byteLength);
  }

  u32(field: string): number {
    return this.view(field, 4).getUint32(0, true);
  }

  /** A u64 that must be a count or size below 2^53. */
  size(field: string): number {
    const at = this.pos;
    const value = this.view(field, 8).getBigUint64(0, true);
    if (value > BigInt(Number.MAX_SAFE_INTEGER)) {
      throw new GGUFError(field, at, `${value} is larger than any file`);
    }
    return Number(value);
  }

  /** A count of items of at least `itemBytes` each, which must fit in the rest of the file. */
  count(field: string, itemBytes: number): number {
    const at = this.pos;
    const n = this.size(field);
    if (n * itemBytes > this.remaining) {
      throw new GGUFError(
        field,
        at,
        `${n} items of at least ${itemBytes} bytes cannot fit in the ${this.remaining} bytes left`,
      );
    }
    return n;
  }

  string(field: string): string {
    const at = this.pos;
    const length = this.count(`${field}.length`, 1);
    const bytes = this.bytes(field, length);
    try {
      return utf8.decode(bytes);
    } catch {
      throw new GGUFError(field, at, "is not valid UTF-8");
    }
  }

  scalar(field: string, type: ValueTypeName): GGUFScalar {
    switch (type) {
      case "string":
        return this.string(field);
      case "bool": {
        const at = this.pos;
        const b = this.bytes(field, 1)[0]!;
        if (b > 1) throw new GGUFError(field, at, `bool is ${b}, not 0 or 1`);
        return b === 1;
      }
      default: {
        const v = this.view(field, VALUE_SIZES[type]!);
        switch (type) {
          case "u8":
            return v.getUint8(0);
          case "i8":
            return v.getInt8(0);
          case "u16":
            return v.getUint16(0, true);
          case "i16":
            return v.getInt16(0, true);
          case "u32":
            return v.getUint32(0, true);
          case "i32":
            return v.getInt32(0, true);
          case "f32":
            return v.getFloat32(0, true);
          case "u64":
            return v.getBigUint64(0, true);
          case "i64":
            return v.getBigInt64(0, true);
          case "f64":
            return v.getFloat64(0, true);
          default:
            throw new GGUFError(field, this.pos, `value type ${type} is not a scalar`);
        }
      }
    }
  }

  valueType(field: string): ValueTypeName {
    const at = this.pos;
    const code = this.u32(field);
    const name = valueTypeName(code);
    if (!name) throw new GGUFError(field, at, `value type ${code} is not a GGUF type (0-12)`);
    return name;
  }

  /**
   * `n` scalars of `itemType` kept as a copy of their bytes (see lazy_array.ts), every string's
   * length and UTF-8 and every bool checked now, as when they are decoded here.
   */
  lazyArray(field: string, itemType: ValueTypeName, n: number): LazyArray {
    const start = this.pos;
    if (itemType !== "string") {
      const bytes = this.bytes(field, n * VALUE_SIZES[itemType]!).slice();
      if (itemType === "bool") {
        const bad = bytes.findIndex((b) => b > 1);
        if (bad >= 0) {
          throw new GGUFError(`${field}[${bad}]`, start + bad, `bool is ${bytes[bad]}, not 0 or 1`);
        }
      }
      return new LazyArray(itemType, n, bytes);
    }
    // Strings: walk the lengths through windows of the file, without a JS object per item.
    let window: Uint8Array = new Uint8Array(0), windowStart = start;
    let view = new DataView(window.buffer);
    const reach = (at: number, length: number): void => {
      if (at + length <= windowStart + window.length) return;
      windowStart = at;
      window = this.#source.read(at, Math.min(this.#source.size - at, Math.max(length, 1 << 16)));
      view = new DataView(window.buffer, window.byteOffset, window.byteLength);
    };
    let at = start;
    for (let i = 0; i < n; i++) {
      if (at + 8 > this.#source.size) {
        throw new GGUFError(`${field}[${i}].length`, at, "the file ends inside it");
      }
      reach(at, 8);
      const length = view.getBigUint64(at - windowStart, true);
      if (length > BigInt(this.#source.size - at - 8)) {
        throw new GGUFError(
          `${field}[${i}]`,
          at,
          `needs ${length} bytes but the file ends at byte ${this.#source.size}`,
        );
      }
      const bytes = Number(length);
      reach(at + 8, bytes);
      if (!isUtf8(window, at + 8 - windowStart, at + 8 - windowStart + bytes)) {
        throw new GGUFError(`${field}[${i}]`, at, "is not valid UTF-8");
      }
      at += 8 + bytes;
    }
    const bytes = this.bytes(field, at - start).slice();
    return new LazyArray("string", n, bytes);
  }

  /** A value of `type`; arrays may nest (the spec allows it; llama.cpp's reader does not). */
  value(field: string, type: ValueTypeName, depth = 0): GGUFScalar | GGUFArray {
    if (type !== "array") return this.scalar(field, type);
    if (depth > 64) throw new GGUFError(field, this.pos, "arrays nest more than 64 deep");
    const itemType = this.valueType(`${field}.itemType`);
    // The least bytes one item can take, so a count the file cannot hold fails before any work.
    const least = VALUE_SIZES[itemType] ?? (itemType === "string" ? 8 : 12);
    const n = this.count(`${field}.count`, least);
    if (itemType !== "array" && n >= LAZY_ARRAY_MIN_ITEMS) {
      return this.lazyArray(field, itemType, n);
    }
    const items: (GGUFScalar | GGUFArray)[] = new Array(n);
    for (let i = 0; i < n; i++) items[i] = this.value(`${field}[${i}]`, itemType, depth + 1);
    return { itemType, items };
  }
}

/** Reads the header, metadata and tensor infos of a GGUF file, checking all of them. */
export function readGGUF(source: ByteSource): GGUFHeader {
  const c = new Cursor(source);
  const magic = c.u32("header.magic");
  if (magic !== GGUF_MAGIC) {
    throw new GGUFError("header.magic", 0, "this is not a GGUF file (it does not start with GGUF)");
  }
  const versionAt = c.pos;
  const version = c.u32("header.version");
  if (version === 1) {
    throw new GGUFError(
      "header.version",
      versionAt,
      "GGUF v1 is not supported (as in llama.cpp); convert the file to v3",
    );
  }
  if (version !== 2 && version !== 3) {
    throw new GGUFError("header.version", versionAt, `version ${version} is not 2 or 3`);
  }
  // Least bytes of one tensor info (name length, n_dims, one dim, type, offset) and one entry.
  const tensorCount = c.count("header.tensor_count", 8 + 4 + 8 + 4 + 8);
  const kvCount = c.count("header.kv_count", 8 + 4 + 1);
  const metadata: GGUFMetadataEntry[] = [];
  const keys = new Set<string>();
  for (let i = 0; i < kvCount; i++) {
    const keyAt = c.pos;
    const key = c.string(`metadata[${i}].key`);
    if (keys.has(key)) throw new GGUFError(`metadata[${i}].key`, keyAt, `duplicate key ${key}`);
    keys.add(key);
    const type = c.valueType(`metadata[${i}].type`);
    metadata.push({ key, type, value: c.value(`metadata[${i}] ${key}`, type) });
  }
  const alignment = readAlignment(metadata);
  const infos: (GGUFTensorInfo & { at: number })[] = [];
  const names = new Set<string>();
  for (let i = 0; i < tensorCount; i++) {
    const at = c.pos;
    const name = c.string(`tensor[${i}].name`);
    if (names.has(name)) throw new GGUFError(`tensor[${i}].name`, at, `duplicate tensor ${name}`);
    names.add(name);
    const dimsAt = c.pos;
    const nDims = c.u32(`tensor[${i}] ${name}.n_dims`);
    if (nDims < 1 || nDims > GGUF_MAX_DIMS) {
      throw new GGUFError(`tensor[${i}] ${name}.n_dims`, dimsAt, `${nDims} is not in 1..4`);
    }
    const dims: number[] = [];
    let elements = 1;
    for (let d = 0; d < nDims; d++) {
      const dimAt = c.pos;
      const n = c.size(`tensor[${i}] ${name}.dims[${d}]`);
      elements *= n;
      if (!Number.isSafeInteger(elements)) {
        throw new GGUFError(`tensor[${i}] ${name}.dims`, dimAt, "the element count overflows");
      }
      dims.push(n);
    }
    const typeAt = c.pos;
    const typeId = c.u32(`tensor[${i}] ${name}.type`);
    const type = ggmlType(typeId);
    if (!type) {
      throw new GGUFError(`tensor[${i}] ${name}.type`, typeAt, `unknown ggml type ${typeId}`);
    }
    if (dims[0]! % type.blockSize !== 0) {
      throw new GGUFError(
        `tensor[${i}] ${name}.dims`,
        dimsAt,
        `dims[0] = ${dims[0]} is not a multiple of ${type.name}'s block size ${type.blockSize}`,
      );
    }
    const offsetAt = c.pos;
    const offset = c.size(`tensor[${i}] ${name}.offset`);
    if (offset % alignment !== 0) {
      throw new GGUFError(
        `tensor[${i}] ${name}.offset`,
        offsetAt,
        `${offset} is not a multiple of the alignment ${alignment}`,
      );
    }
    const nbytes = (elements / type.blockSize) * type.blockBytes;
    infos.push({ name, dims, type, offset, nbytes, at: offsetAt });
  }
  const dataOffset = Math.ceil(c.pos / alignment) * alignment;
  const dataSize = source.size - Math.min(dataOffset, source.size);
  // Tensor data must lie in the file and not overlap.
  const sorted = [...infos].sort((a, b) => a.offset - b.offset);
  let end = 0;
  for (const t of sorted) {
    if (t.offset < end) {
      throw new GGUFError(`tensor ${t.name}.offset`, t.at, "its data overlaps another tensor's");
    }
    if (t.offset + t.nbytes > dataSize) {
      throw new GGUFError(
        `tensor ${t.name}.offset`,
        t.at,
        `its ${t.nbytes} bytes at data offset ${t.offset} end past the file (data section of ` +
          `${dataSize} bytes from byte ${dataOffset})`,
      );
    }
    end = t.offset + t.nbytes;
  }
  const tensors = infos.map(({ at: _at, ...info }) => info);
  return { version, metadata, tensors, alignment, dataOffset, fileSize: source.size };
}

function readAlignment(metadata: readonly GGUFMetadataEntry[]): number {
  const entry = metadata.find((m) => m.key === "general.alignment");
  if (!entry) return GGUF_DEFAULT_ALIGNMENT;
  const value = entry.value;
  if (
    entry.type !== "u32" || typeof value !== "number" || value === 0 ||
    (value & (value - 1)) !== 0
  ) {
    throw new GGUFError(
      "general.alignment",
      0,
      `must be a power-of-two u32, got ${String(value)} (${entry.type})`,
    );
  }
  return value;
}

/** The metadata value of `key`, or undefined. */
export function metadataValue(
  header: GGUFHeader,
  key: string,
): GGUFScalar | GGUFArray | undefined {
  return header.metadata.find((m) => m.key === key)?.value;
}
