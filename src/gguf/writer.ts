/**
 * The GGUF v3 writer. It writes the metadata in the order given and the tensor infos with
 * their offsets, pads the data section to the alignment with zeros, and asks for each tensor's
 * bytes: so a file read with `readGGUF` is written back byte for byte. `writeGGUF` builds the
 * file in memory; `writeGGUFStream` sends it to a file or sink a tensor at a time.
 * @module
 */

import { GGUFError } from "../errors.ts";
import {
  GGUF_DEFAULT_ALIGNMENT,
  GGUF_MAGIC,
  type GGUFArray,
  type GGUFMetadataEntry,
  type GGUFScalar,
  type GGUFTensorInfo,
} from "./reader.ts";
import { VALUE_SIZES, ValueType, type ValueTypeName } from "./types.ts";

/** What {@link writeGGUF} writes. */
export interface GGUFWriteInput {
  /** Metadata entries, written in this order. */
  readonly metadata: readonly GGUFMetadataEntry[];
  /** Tensors, in this order; `offset` is relative to the data section and aligned. */
  readonly tensors: readonly GGUFTensorInfo[];
  /** Bytes of each tensor's data, by index into `tensors` (`nbytes` of them). */
  readonly data: (index: number) => Uint8Array;
  /** Called with a warning (nested arrays: llama.cpp's reader rejects them). */
  readonly onWarning?: (message: string) => void;
  /**
   * Pad the end of the file to the alignment, as llama.cpp's and the gguf package's writers do
   * (default true). A file read back whose size is not a multiple of it was written without.
   */
  readonly padEnd?: boolean;
}

const utf8 = new TextEncoder();

/** Growable little-endian byte output. */
class Output {
  bytes = new Uint8Array(1 << 16);
  length = 0;

  reserve(n: number): DataView {
    if (this.length + n > this.bytes.length) {
      const grown = new Uint8Array(Math.max(this.bytes.length * 2, this.length + n));
      grown.set(this.bytes.subarray(0, this.length));
      this.bytes = grown;
    }
    const view = new DataView(this.bytes.buffer, this.length, n);
    this.length += n;
    return view;
  }

  u32(v: number): void {
    this.reserve(4).setUint32(0, v, true);
  }

  u64(v: number | bigint): void {
    this.reserve(8).setBigUint64(0, BigInt(v), true);
  }

  raw(b: Uint8Array): void {
    this.reserve(b.length);
    this.bytes.set(b, this.length - b.length);
  }

  string(s: string): void {
    const b = utf8.encode(s);
    this.u64(b.length);
    this.raw(b);
  }

  scalar(type: ValueTypeName, value: GGUFScalar): void {
    if (type === "string") return this.string(value as string);
    const size = VALUE_SIZES[type];
    if (size === undefined) throw new GGUFError("metadata", this.length, `${type} is no scalar`);
    const v = this.reserve(size);
    switch (type) {
      case "u8":
        return v.setUint8(0, value as number);
      case "i8":
        return v.setInt8(0, value as number);
      case "u16":
        return v.setUint16(0, value as number, true);
      case "i16":
        return v.setInt16(0, value as number, true);
      case "u32":
        return v.setUint32(0, value as number, true);
      case "i32":
        return v.setInt32(0, value as number, true);
      case "f32":
        return v.setFloat32(0, value as number, true);
      case "bool":
        return v.setUint8(0, value ? 1 : 0);
      case "u64":
        return v.setBigUint64(0, BigInt(value as bigint), true);
      case "i64":
        return v.setBigInt64(0, BigInt(value as bigint), true);
      case "f64":
        return v.setFloat64(0, value as number, true);
    }
  }

  value(type: ValueTypeName, value: GGUFScalar | GGUFArray, warn: (m: string) => void): void {
    if (type !== "array") return this.scalar(type, value as GGUFScalar);
    const array = value as GGUFArray;
    this.u32(ValueType[array.itemType]);
    this.u64(array.items.length);
    if (array.itemType === "array") {
      warn("a nested array is valid GGUF, but llama.cpp's reader rejects it");
    }
    for (const item of array.items) this.value(array.itemType, item, warn);
  }
}

/** Alignment from the metadata, as the reader takes it. */
function alignmentOf(metadata: readonly GGUFMetadataEntry[]): number {
  const entry = metadata.find((m) => m.key === "general.alignment");
  return typeof entry?.value === "number" ? entry.value : GGUF_DEFAULT_ALIGNMENT;
}

/** Warns once per file, through `onWarning` or console.warn. */
function warnOnce(onWarning: ((message: string) => void) | undefined): (m: string) => void {
  let warned = false;
  return (message: string): void => {
    if (warned) return;
    warned = true;
    (onWarning ?? ((m: string) => console.warn(`graft gguf: ${m}`)))(message);
  };
}

/**
 * The header (magic, version, counts), metadata and tensor infos, padded with zeros to the
 * start of the data section; and the tensors in data order.
 */
function encodeHeader(
  input: Omit<GGUFWriteInput, "data">,
): { out: Output; alignment: number; order: { t: GGUFTensorInfo; i: number }[] } {
  const out = new Output();
  const warn = warnOnce(input.onWarning);
  out.u32(GGUF_MAGIC);
  out.u32(3);
  out.u64(input.tensors.length);
  out.u64(input.metadata.length);
  for (const entry of input.metadata) {
    out.string(entry.key);
    out.u32(ValueType[entry.type]);
    out.value(entry.type, entry.value, warn);
  }
  for (const t of input.tensors) {
    out.string(t.name);
    out.u32(t.dims.length);
    for (const d of t.dims) out.u64(d);
    out.u32(t.type.id);
    out.u64(t.offset);
  }
  const alignment = alignmentOf(input.metadata);
  out.reserve(Math.ceil(out.length / alignment) * alignment - out.length);
  const order = input.tensors.map((t, i) => ({ t, i })).sort((a, b) => a.t.offset - b.t.offset);
  return { out, alignment, order };
}

/** A tensor's data must start after the tensor before it ends. */
function checkPlace(t: GGUFTensorInfo, at: number, written: number): void {
  if (at < written) {
    throw new GGUFError(`tensor ${t.name}.offset`, at, "overlaps the tensor before it");
  }
}

/** A tensor's data must be as many bytes as its info says. */
function checkData(t: GGUFTensorInfo, at: number, data: Uint8Array): void {
  if (!(data instanceof Uint8Array) || data.length !== t.nbytes) {
    const what = data instanceof Uint8Array ? `${data.length} bytes` : "no Uint8Array";
    throw new GGUFError(`tensor ${t.name}`, at, `has ${what}, not ${t.nbytes}`);
  }
}

/**
 * Writes a GGUF v3 file into memory and returns its bytes.
 *
 * @example
 * ```ts
 * import { ggmlTypeByName, readGGUF, MemorySource, writeGGUF } from "../../mod.ts";
 * const f32 = ggmlTypeByName("f32")!;
 * const bytes = writeGGUF({
 *   metadata: [{ key: "general.name", type: "string", value: "tiny" }],
 *   tensors: [{ name: "w", dims: [4], type: f32, offset: 0, nbytes: 16 }],
 *   data: () => new Uint8Array(new Float32Array([1, 2, 3, 4]).buffer),
 * });
 * console.log(readGGUF(new MemorySource(bytes)).tensors[0]!.name); // "w"
 * ```
 */
export function writeGGUF(input: GGUFWriteInput): Uint8Array {
  const { out, alignment, order } = encodeHeader(input);
  const dataOffset = out.length;
  for (const { t, i } of order) {
    const at = dataOffset + t.offset;
    checkPlace(t, at, out.length);
    out.reserve(at - out.length);
    const data = input.data(i);
    checkData(t, at, data);
    out.raw(data);
  }
  // The file ends on an alignment boundary, as llama.cpp's writer leaves it.
  if (input.padEnd !== false) {
    out.reserve(Math.ceil(out.length / alignment) * alignment - out.length);
  }
  return out.bytes.slice(0, out.length);
}

/** Where {@link writeGGUFStream} writes: anything that takes bytes, in order. */
export interface GGUFSink {
  /** Takes the next bytes of the file (they may be reused once the call returns or settles). */
  write(bytes: Uint8Array): void | Promise<void>;
}

/** What {@link writeGGUFStream} writes: as {@link GGUFWriteInput}, data may come later. */
export interface GGUFStreamInput extends Omit<GGUFWriteInput, "data"> {
  /** Bytes of each tensor's data (`nbytes`), by index into `tensors`; asked for in data order. */
  readonly data: (index: number) => Uint8Array | Promise<Uint8Array>;
}

/** A sink writing every byte to an open file, in order. */
export function fileSink(file: Deno.FsFile): GGUFSink {
  return {
    async write(bytes: Uint8Array): Promise<void> {
      for (let done = 0; done < bytes.length;) done += await file.write(bytes.subarray(done));
    },
  };
}

const zeros = new Uint8Array(4096);

async function writeZeros(sink: GGUFSink, n: number): Promise<void> {
  for (let left = n; left > 0; left -= zeros.length) {
    await sink.write(zeros.subarray(0, Math.min(left, zeros.length)));
  }
}

/**
 * Writes a GGUF v3 file to `target` (a path, created or truncated; or a {@link GGUFSink}) a
 * tensor at a time: it holds the header and one tensor's bytes, never the whole file. The bytes
 * are those {@link writeGGUF} returns. Resolves to the number of bytes written.
 *
 * @example
 * ```ts
 * import { ggmlTypeByName, writeGGUFStream } from "../../mod.ts";
 * const f32 = ggmlTypeByName("f32")!;
 * const path = await Deno.makeTempFile({ suffix: ".gguf" });
 * await writeGGUFStream(path, {
 *   metadata: [{ key: "general.name", type: "string", value: "tiny" }],
 *   tensors: [{ name: "w", dims: [4], type: f32, offset: 0, nbytes: 16 }],
 *   data: async () => new Uint8Array(new Float32Array([1, 2, 3, 4]).buffer),
 * });
 * ```
 */
export async function writeGGUFStream(
  target: string | URL | GGUFSink,
  input: GGUFStreamInput,
): Promise<number> {
  if (typeof target === "string" || target instanceof URL) {
    using file = await Deno.open(target, { write: true, create: true, truncate: true });
    return await writeGGUFStream(fileSink(file), input);
  }
  const { out, alignment, order } = encodeHeader(input);
  const dataOffset = out.length;
  await target.write(out.bytes.subarray(0, out.length));
  let written = dataOffset;
  for (const { t, i } of order) {
    const at = dataOffset + t.offset;
    checkPlace(t, at, written);
    await writeZeros(target, at - written);
    const data = await input.data(i);
    checkData(t, at, data);
    await target.write(data);
    written = at + data.length;
  }
  if (input.padEnd !== false) {
    const end = Math.ceil(written / alignment) * alignment;
    await writeZeros(target, end - written);
    written = end;
  }
  return written;
}

/**
 * Tensor infos for `tensors` laid out in order, each at the next aligned data offset: what a
 * new file needs.
 */
export function layoutTensors(
  tensors: readonly Omit<GGUFTensorInfo, "offset">[],
  alignment: number = GGUF_DEFAULT_ALIGNMENT,
): GGUFTensorInfo[] {
  let offset = 0;
  return tensors.map((t) => {
    const placed = { ...t, offset };
    offset = Math.ceil((offset + t.nbytes) / alignment) * alignment;
    return placed;
  });
}
