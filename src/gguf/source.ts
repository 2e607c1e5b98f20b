/**
 * Where GGUF bytes come from: memory, or a file read in windows (never read whole into the JS
 * heap). The reader asks for byte ranges; a file source keeps one window of the file.
 * @module
 */

/** Random access to a file's bytes. */
export interface ByteSource {
  /** Bytes in the file. */
  readonly size: number;
  /** Bytes [offset, offset + length); the caller checked the range lies in the file. */
  read(offset: number, length: number): Uint8Array;
}

/** A source over bytes already in memory. */
export class MemorySource implements ByteSource {
  readonly size: number;
  readonly #bytes: Uint8Array;

  /** A source over `bytes` (not copied). */
  constructor(bytes: Uint8Array) {
    this.#bytes = bytes;
    this.size = bytes.length;
  }

  read(offset: number, length: number): Uint8Array {
    return this.#bytes.subarray(offset, offset + length);
  }

  /** Bytes handed out by {@link readAt} (a file source's count of bytes read). */
  bytesRead = 0;

  /** Copies `length` bytes at `offset` into `into` (tensor data, as a file source does). */
  readAt(offset: number, length: number, into: Uint8Array = new Uint8Array(length)): Uint8Array {
    if (offset + length > this.size) throw new Error(`the bytes end at ${this.size}`);
    into.set(this.#bytes.subarray(offset, offset + length));
    this.bytesRead += length;
    return into.subarray(0, length);
  }

  /** Nothing to close (for the same shape as a file source). */
  close(): void {}
}

/** Bytes read from a file at a time, at least (metadata is parsed from such windows). */
export const FILE_WINDOW_BYTES = 1 << 20;

/** A source over an open file, read through a window of {@link FILE_WINDOW_BYTES} or more. */
export class FileSource implements ByteSource, Disposable {
  readonly size: number;
  readonly #file: Deno.FsFile;
  #windowStart = 0;
  #window: Uint8Array = new Uint8Array(0);
  /** Bytes read from the file so far (to show that opening reads only a prefix). */
  bytesRead = 0;
  /** The open file's device and inode numbers (to check a later mapping is of this file). */
  readonly identity: { readonly dev: number; readonly ino: number | null };

  /** Opens `path` for reading. */
  constructor(path: string | URL) {
    this.#file = Deno.openSync(path, { read: true });
    try {
      const info = this.#file.statSync();
      this.size = info.size;
      this.identity = { dev: info.dev, ino: info.ino };
    } catch (error) {
      this.#file.close();
      throw error;
    }
  }

  read(offset: number, length: number): Uint8Array {
    const end = offset + length;
    if (offset < this.#windowStart || end > this.#windowStart + this.#window.length) {
      const size = Math.min(Math.max(length, FILE_WINDOW_BYTES), this.size - offset);
      this.#window = this.readAt(offset, size);
      this.#windowStart = offset;
    }
    return this.#window.subarray(offset - this.#windowStart, end - this.#windowStart);
  }

  /** Reads `length` bytes at `offset` into a new array (for tensor data). */
  readAt(offset: number, length: number, into: Uint8Array = new Uint8Array(length)): Uint8Array {
    this.#file.seekSync(offset, Deno.SeekMode.Start);
    let done = 0;
    while (done < length) {
      const n = this.#file.readSync(into.subarray(done, length));
      if (n === null || n === 0) throw new Error(`file ended at byte ${offset + done}`);
      done += n;
    }
    this.bytesRead += length;
    return into.subarray(0, length);
  }

  /** Closes the file. */
  close(): void {
    this.#file.close();
  }

  /** Same as {@link close} (for `using`). */
  [Symbol.dispose](): void {
    this.close();
  }
}
