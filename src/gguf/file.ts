/**
 * A GGUF file on disk: opening it parses the metadata from a small prefix (never the whole file
 * into the JS heap); tensor data is read per tensor, or loaded into a backend: mapped in place
 * where the backend can map files (the CPU: no copy), else streamed straight into backend
 * buffers (spread over several where a buffer type's maximum size asks for it), with progress
 * reports.
 * @module
 */

import { allocWeights, BufferSet } from "../alloc/alloc_tensors.ts";
import type { Backend, BackendBuffer, MappedBuffer } from "../backend/backend.ts";
import { Context } from "../context.ts";
import { ArgumentError, FileError, GGUFError } from "../errors.ts";
import type { Tensor } from "../tensor.ts";
import { type GGUFHeader, type GGUFTensorInfo, readGGUF } from "./reader.ts";
import { FileSource, MemorySource } from "./source.ts";
import { graftDType } from "./types.ts";
import { writeGGUF } from "./writer.ts";
import { dequantize, isQuantDType } from "../quant.ts";
import type { Shape } from "../context.ts";
import { view } from "../ops/view.ts";

/** Bytes copied from the file into a backend at a time while loading. */
export const LOAD_CHUNK_BYTES = 8 << 20;

/** Progress of {@link GGUFFile.load}: bytes of tensor data done of the total. */
export type LoadProgress = (done: number, total: number) => void;

/** Options of {@link GGUFFile.load}. */
export interface GGUFLoadOptions {
  /** Only these tensors (default: all). */
  readonly names?: readonly string[];
  /** Called as tensor data is placed: bytes done of the total. */
  readonly onProgress?: LoadProgress;
  /**
   * Map the file instead of copying it (default: true on a backend that can map files, the
   * CPU, as llama.cpp's `--mmap`; false elsewhere). Mapped weights are read in place from the
   * page cache, cost no memory of their own and are read-only (writing into one is a
   * ReadOnlyError); `false` streams the data into buffers of the backend, writable. `true` on a
   * backend without {@link Backend.mapFile} is an ArgumentError.
   */
  readonly mmap?: boolean;
  /**
   * With mmap: ask the OS to read the tensor data in now, in the background (madvise
   * WILLNEED), instead of page by page on first use (default false).
   */
  readonly prefetch?: boolean;
  /**
   * Groups of 2-D tensors (by name) to store one after another as the rows of one tensor, each
   * member then a view of its rows: a product with every member of a group can be one product
   * with the whole (`llm`: the q, k and v projections of a block, sent to an RPC server as one
   * matrix product a token). A group applies where its members are all loaded, copied (not
   * mapped: mapped tensors stay where the file has them), and share a dtype and a row length;
   * any other group is left as it is.
   */
  readonly fuse?: readonly (readonly string[])[];
}

/** Weights loaded from a file: the tensors by name and the buffers that hold them. */
export interface LoadedWeights extends Disposable {
  /** Each tensor, by its name in the file. */
  readonly tensors: ReadonlyMap<string, Tensor>;
  /**
   * The buffers holding them; disposing the weights disposes these. Mapped weights: the
   * read-only mapping of the file, and a buffer for any tensor that had to be copied.
   */
  readonly buffers: BufferSet;
  /** The file mapping the weights are read from, or null when they were streamed. */
  readonly mapping: MappedBuffer | null;
  /** Frees the buffers. */
  dispose(): void;
}

function weights(
  tensors: ReadonlyMap<string, Tensor>,
  buffers: BufferSet,
  mapping: MappedBuffer | null,
): LoadedWeights {
  return {
    tensors,
    buffers,
    mapping,
    dispose: () => buffers.dispose(),
    [Symbol.dispose]: () => buffers.dispose(),
  };
}

/**
 * An open GGUF file.
 *
 * @example
 * ```ts
 * import { CpuBackend, GGUFFile, ggmlTypeByName, writeGGUF } from "../../mod.ts";
 * // A one-tensor file to open (any GGUF model works the same way).
 * const path = await Deno.makeTempFile({ suffix: ".gguf" });
 * await Deno.writeFile(
 *   path,
 *   writeGGUF({
 *     metadata: [{ key: "general.name", type: "string", value: "tiny" }],
 *     tensors: [{ name: "w", dims: [4], type: ggmlTypeByName("f32")!, offset: 0, nbytes: 16 }],
 *     data: () => new Uint8Array(new Float32Array([1, 2, 3, 4]).buffer),
 *   }),
 * );
 * using file = GGUFFile.open(path);
 * console.log(file.header.tensors.length, file.header.metadata.length);
 * using cpu = new CpuBackend();
 * using weights = file.load(cpu, { onProgress: (done, total) => console.log(done / total) });
 * ```
 */
export class GGUFFile implements Disposable {
  /** The parsed header, metadata and tensor infos. */
  readonly header: GGUFHeader;
  /** The path opened (a name only, for a file made from bytes). */
  readonly path: string | URL;
  readonly #source: FileSource | MemorySource;

  private constructor(path: string | URL, source: FileSource | MemorySource, header: GGUFHeader) {
    this.path = path;
    this.#source = source;
    this.header = header;
  }

  /** Opens and parses `path`; a bad file is a GGUFError naming the field and byte offset. */
  static open(path: string | URL): GGUFFile {
    const source = new FileSource(path);
    try {
      return new GGUFFile(path, source, readGGUF(source));
    } catch (error) {
      source.close();
      throw error;
    }
  }

  /**
   * Parses a GGUF file already in memory (a browser's `File` read into an ArrayBuffer, say):
   * the same as {@link open} without a file system. The bytes are not copied, so they must not
   * change while the file is in use; `load` streams the weights from them (nothing to map).
   *
   * @example
   * ```ts
   * import { GGUFFile, writeGGUF } from "../../mod.ts";
   * const bytes = writeGGUF({
   *   metadata: [{ key: "general.name", type: "string", value: "t" }],
   *   tensors: [],
   *   data: () => new Uint8Array(0),
   * });
   * using file = GGUFFile.fromBytes(bytes, "t.gguf");
   * console.log(file.header.metadata.length); // 1
   * ```
   */
  static fromBytes(bytes: Uint8Array, name = "memory.gguf"): GGUFFile {
    const source = new MemorySource(bytes);
    return new GGUFFile(name, source, readGGUF(source));
  }

  /** Bytes read from the file so far (opening reads a prefix, not the tensor data). */
  get bytesRead(): number {
    return this.#source.bytesRead;
  }

  /** The tensor info named `name`; throws a GGUFError if there is none. */
  tensor(name: string): GGUFTensorInfo {
    const info = this.header.tensors.find((t) => t.name === name);
    if (!info) throw new GGUFError(`tensor ${name}`, 0, "there is no tensor of that name");
    return info;
  }

  /** Reads one tensor's data from the file. */
  readTensorData(info: GGUFTensorInfo): Uint8Array {
    return this.#source.readAt(this.header.dataOffset + info.offset, info.nbytes);
  }

  /**
   * One tensor's values as f32: f32 data as it is, f16 converted, quantized blocks dequantized
   * as ggml does. A type Graft cannot dequantize is a GGUFError naming it.
   */
  dequantizeTensor(info: GGUFTensorInfo): Float32Array {
    const bytes = this.readTensorData(info);
    const name = info.type.name;
    if (name === "f32") return new Float32Array(bytes.slice().buffer);
    if (name === "f16") return Float32Array.from(new Float16Array(bytes.slice().buffer));
    if (!isQuantDType(name)) {
      throw new GGUFError(
        `tensor ${info.name}.type`,
        0,
        `Graft cannot dequantize ggml type ${name} (id ${info.type.id})`,
      );
    }
    return dequantize(bytes, name);
  }

  /**
   * Places every tensor (or those `names` lists) on `backend`. On a backend that maps files (the
   * CPU) the file is mapped read-only and each tensor sits at its offset in the mapping: nothing
   * is read into memory until a kernel or `getTensor` reads it, and the weights are read-only
   * (see {@link GGUFLoadOptions.mmap}). A tensor whose offset misses the backend's alignment need
   * (only in files with a `general.alignment` below 4) is copied into a buffer of its own.
   * Otherwise, and with `mmap: false`, the data is streamed from the file into buffers of
   * `backend` in chunks of {@link LOAD_CHUNK_BYTES}. A tensor type Graft has no dtype for is a
   * GGUFError naming the tensor and the type; a file removed or changed since it was opened is
   * a FileError.
   */
  load(backend: Backend, options: GGUFLoadOptions = {}): LoadedWeights {
    const wanted = options.names ? options.names.map((n) => this.tensor(n)) : this.header.tensors;
    const inMemory = this.#source instanceof MemorySource;
    const mmap = options.mmap ?? (backend.mapFile !== undefined && !inMemory);
    if (mmap && inMemory) {
      throw new ArgumentError(
        `GGUFFile.load: ${String(this.path)} was made from bytes in memory, which cannot be ` +
          `mapped; load it with { mmap: false } (or no mmap option)`,
      );
    }
    if (mmap && !backend.mapFile) {
      throw new ArgumentError(
        `GGUFFile.load: ${backend.name} cannot map files; load with { mmap: false } (or no ` +
          `mmap option) to stream the weights into its buffers`,
      );
    }
    const ctx = new Context();
    const tensors = new Map<string, Tensor>();
    for (const info of wanted) {
      const dtype = graftDType(info.type);
      if (!dtype) {
        throw new GGUFError(
          `tensor ${info.name}.type`,
          0,
          `Graft has no dtype for ggml type ${info.type.name} (id ${info.type.id})`,
        );
      }
      tensors.set(info.name, ctx.newTensor(dtype, info.dims as unknown as Shape, info.name));
    }
    const total = wanted.reduce((sum, t) => sum + t.nbytes, 0);
    const progress = { done: 0, total, report: options.onProgress };
    if (!mmap) {
      for (const group of options.fuse ?? []) fuseRows(ctx, tensors, group);
      // Fused tensors are views: their owner takes the memory.
      const buffers = allocWeights(backend, [...tensors.values()].map((t) => t.memoryOwner));
      try {
        this.#stream(backend, wanted, tensors, progress);
      } catch (error) {
        buffers.dispose();
        throw error;
      }
      return weights(tensors, buffers, null);
    }
    const mapping = this.#map(backend);
    const buffers: BackendBuffer[] = [mapping];
    const placed: Tensor[] = [];
    try {
      const copied: GGUFTensorInfo[] = [];
      for (const info of wanted) {
        const tensor = tensors.get(info.name)!;
        const offset = this.header.dataOffset + info.offset;
        if (offset % mapping.alignmentFor(tensor.dtype) !== 0) {
          copied.push(info);
          continue;
        }
        tensor.place(mapping, offset);
        placed.push(tensor);
        progress.done += info.nbytes;
        progress.report?.(progress.done, total);
      }
      if (options.prefetch && wanted.length > 0) {
        const begin = Math.min(...wanted.map((t) => t.offset));
        const end = Math.max(...wanted.map((t) => t.offset + t.nbytes));
        mapping.prefetch(this.header.dataOffset + begin, end - begin);
      }
      if (copied.length > 0) {
        const set = allocWeights(backend, copied.map((info) => tensors.get(info.name)!));
        buffers.push(...set.buffers);
        this.#stream(backend, copied, tensors, progress);
      }
    } catch (error) {
      for (const tensor of placed) tensor.unplace();
      for (const buffer of buffers) if (!buffer.disposed) buffer.dispose();
      throw error;
    }
    return weights(tensors, new BufferSet(buffers), mapping);
  }

  /** The file mapped on `backend`, checked to be the file this object opened. */
  #map(backend: Backend): MappedBuffer {
    const source = this.#source;
    if (!(source instanceof FileSource)) throw new Error("GGUFFile: only a file is mapped");
    let mapping: MappedBuffer;
    try {
      mapping = backend.mapFile!(this.path);
    } catch (error) {
      if (!(error instanceof FileError)) throw error;
      throw new FileError(
        `GGUFFile.load: ${String(this.path)} cannot be mapped (removed since it was opened?): ` +
          error.message,
        { cause: error },
      );
    }
    const { dev, ino } = source.identity;
    const file = mapping.file;
    if (file.dev !== dev || (ino !== null && file.ino !== ino) || file.size !== source.size) {
      mapping.dispose();
      throw new FileError(
        `GGUFFile.load: ${String(this.path)} changed since it was opened (opened: ` +
          `${source.size} bytes, device ${dev}, inode ${ino}; mapped: ${file.size} bytes, ` +
          `device ${file.dev}, inode ${file.ino}); open it again`,
      );
    }
    return mapping;
  }

  /** Streams the data of `infos` from the file into their tensors' buffers, in chunks. */
  #stream(
    backend: Backend,
    infos: readonly GGUFTensorInfo[],
    tensors: ReadonlyMap<string, Tensor>,
    progress: { done: number; total: number; report: LoadProgress | undefined },
  ): void {
    const largest = infos.reduce((most, t) => Math.max(most, t.nbytes), 0);
    const chunk = new Uint8Array(Math.min(LOAD_CHUNK_BYTES, Math.max(1, largest)));
    for (const info of infos) {
      const tensor = tensors.get(info.name)!;
      for (let at = 0; at < info.nbytes; at += chunk.length) {
        const length = Math.min(chunk.length, info.nbytes - at);
        const bytes = this.#source.readAt(this.header.dataOffset + info.offset + at, length, chunk);
        backend.setTensor(tensor, bytes, at);
        progress.done += length;
        progress.report?.(progress.done, progress.total);
      }
    }
  }

  /** Writes the file back (metadata, infos, data) as GGUF v3: byte for byte for a v3 file. */
  rewrite(): Uint8Array {
    return writeGGUF({
      metadata: this.header.metadata,
      tensors: this.header.tensors,
      data: (i) => this.readTensorData(this.header.tensors[i]!),
      padEnd: this.header.fileSize % this.header.alignment === 0,
    });
  }

  /** Closes the file. */
  close(): void {
    this.#source.close();
  }

  /** Same as {@link close} (for `using`). */
  [Symbol.dispose](): void {
    this.close();
  }
}

/**
 * Makes the tensors named in `group` views of consecutive rows of one new tensor (see
 * `GGUFLoadOptions.fuse`), where they are all in `tensors`, unplaced, 2-D and alike.
 */
function fuseRows(ctx: Context, tensors: Map<string, Tensor>, group: readonly string[]): void {
  const members = group.map((name) => tensors.get(name));
  const first = members[0];
  if (group.length < 2 || !first) return;
  const alike = members.every((t): t is Tensor =>
    t !== undefined && !t.placement && t.dtype === first.dtype && t.ne[0] === first.ne[0] &&
    t.ne[2] === 1 && t.ne[3] === 1
  );
  if (!alike) return;
  const rows = members.reduce((sum, t) => sum + t.ne[1]!, 0);
  const whole = ctx.newTensor(first.dtype, [first.ne[0]!, rows], group.join("+"));
  let offset = 0;
  for (const t of members) {
    const part = view(whole, [t.ne[0]!, t.ne[1]!], { offset });
    part.name = t.name;
    tensors.set(t.name, part);
    offset += t.nbytes;
  }
}
