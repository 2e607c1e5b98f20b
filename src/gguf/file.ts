/**
 * A GGUF file on disk: opening it parses the metadata from a small prefix (never the whole file
 * into the JS heap); tensor data is read per tensor, or streamed straight into backend buffers
 * (spread over several where a buffer type's maximum size asks for it) with progress reports.
 * @module
 */

import { allocWeights, type BufferSet } from "../alloc/alloc_tensors.ts";
import type { Backend } from "../backend/backend.ts";
import { Context } from "../context.ts";
import { GGUFError } from "../errors.ts";
import type { Tensor } from "../tensor.ts";
import { type GGUFHeader, type GGUFTensorInfo, readGGUF } from "./reader.ts";
import { FileSource } from "./source.ts";
import { graftDType } from "./types.ts";
import { writeGGUF } from "./writer.ts";
import { dequantize, isQuantDType } from "../quant.ts";
import type { Shape } from "../context.ts";

/** Bytes copied from the file into a backend at a time while loading. */
export const LOAD_CHUNK_BYTES = 8 << 20;

/** Progress of {@link GGUFFile.load}: bytes of tensor data done of the total. */
export type LoadProgress = (done: number, total: number) => void;

/** Weights loaded from a file: the tensors by name and the buffers that hold them. */
export interface LoadedWeights extends Disposable {
  /** Each tensor, by its name in the file. */
  readonly tensors: ReadonlyMap<string, Tensor>;
  /** The buffers holding them; disposing the weights disposes these. */
  readonly buffers: BufferSet;
  /** Frees the buffers. */
  dispose(): void;
}

/**
 * An open GGUF file.
 *
 * @example
 * ```ts ignore
 * import { CpuBackend, GGUFFile } from "../../mod.ts";
 * using file = GGUFFile.open("model.gguf");
 * console.log(file.header.tensors.length, file.header.metadata.length);
 * using cpu = new CpuBackend();
 * using weights = file.load(cpu, { onProgress: (done, total) => console.log(done / total) });
 * ```
 */
export class GGUFFile implements Disposable {
  /** The parsed header, metadata and tensor infos. */
  readonly header: GGUFHeader;
  readonly #source: FileSource;

  private constructor(source: FileSource, header: GGUFHeader) {
    this.#source = source;
    this.header = header;
  }

  /** Opens and parses `path`; a bad file is a GGUFError naming the field and byte offset. */
  static open(path: string | URL): GGUFFile {
    const source = new FileSource(path);
    try {
      return new GGUFFile(source, readGGUF(source));
    } catch (error) {
      source.close();
      throw error;
    }
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
   * Places every tensor (or those `names` lists) in buffers of `backend` and streams their data
   * from the file in chunks of {@link LOAD_CHUNK_BYTES}. A tensor type Graft has no dtype for is
   * a GGUFError naming the tensor and the type.
   */
  load(
    backend: Backend,
    options: { names?: readonly string[]; onProgress?: LoadProgress } = {},
  ): LoadedWeights {
    const wanted = options.names ? options.names.map((n) => this.tensor(n)) : this.header.tensors;
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
    const buffers = allocWeights(backend, [...tensors.values()]);
    try {
      const total = wanted.reduce((sum, t) => sum + t.nbytes, 0);
      let done = 0;
      const chunk = new Uint8Array(Math.min(LOAD_CHUNK_BYTES, Math.max(1, total)));
      for (const info of wanted) {
        const tensor = tensors.get(info.name)!;
        for (let at = 0; at < info.nbytes; at += chunk.length) {
          const length = Math.min(chunk.length, info.nbytes - at);
          const bytes = this.#source.readAt(
            this.header.dataOffset + info.offset + at,
            length,
            chunk,
          );
          backend.setTensor(tensor, bytes, at);
          done += length;
          options.onProgress?.(done, total);
        }
      }
    } catch (error) {
      buffers.dispose();
      throw error;
    }
    return {
      tensors,
      buffers,
      dispose: () => buffers.dispose(),
      [Symbol.dispose]: () => buffers.dispose(),
    };
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
