/**
 * The Zig core's best-fit free-list allocator, over the offsets of one buffer. In measure mode
 * the buffer is unbounded and {@link Allocator.sizeMax} reports the size a real one needs.
 * @module
 */

import { ArgumentError, DisposedError, OutOfSpaceError, Status } from "../errors.ts";
import { requireByteCount } from "../args.ts";
import { check, lastError, loadCore, type NativeCore } from "../core/core.ts";

/** Free blocks an allocator tracks by default (a named limit; raise it with `blocksMax`). */
export const DEFAULT_FREE_BLOCKS = 4096;

/** Counters of an allocator. */
export interface AllocatorStats {
  /** The highest offset+size ever handed out: the buffer size this sequence needs. */
  sizeMax: number;
  /** Blocks allocated and not freed. */
  liveBlocks: number;
  /** Bytes in live blocks. */
  liveBytes: number;
  /** Entries in the free list. */
  freeBlocks: number;
  /** The largest block that can be allocated now. */
  largestFreeBlock: number;
}

/** Options of {@link Allocator}. */
export interface AllocatorOptions {
  /** Offset alignment (power of two). Default 64. */
  alignment?: number;
  /** Free-block list capacity. Default {@link DEFAULT_FREE_BLOCKS}. */
  blocksMax?: number;
}

/**
 * Offsets within a buffer of `size` bytes, best fit, coalescing freed neighbours.
 *
 * @example
 * ```ts
 * import { Allocator } from "../../internal.ts";
 * using measure = Allocator.measure();
 * const a = measure.alloc(1000);
 * measure.alloc(500);
 * measure.free(a, 1000);
 * console.log(measure.stats().sizeMax); // 1536
 * ```
 */
export class Allocator implements Disposable {
  /** Bytes managed (0 in measure mode). */
  readonly size: number;
  /** Offset alignment. */
  readonly alignment: number;
  /** True for a measure-mode allocator. */
  readonly isMeasure: boolean;
  readonly #lib: NativeCore;
  readonly #handle: number;
  #disposed = false;
  readonly #out = new BigUint64Array(5);

  /** An allocator over `size` bytes (or unbounded with `measure`). */
  constructor(size: number, options: AllocatorOptions = {}, measure = false) {
    requireByteCount("Allocator: size", size);
    const alignment = options.alignment ?? 64;
    if (
      !Number.isSafeInteger(alignment) || alignment < 1 || (alignment & (alignment - 1)) !== 0 ||
      alignment > 2 ** 30
    ) {
      throw new ArgumentError(
        `Allocator: alignment must be a power of two up to 2^30, got ${String(alignment)}`,
      );
    }
    const blocksMax = options.blocksMax ?? DEFAULT_FREE_BLOCKS;
    if (!Number.isSafeInteger(blocksMax) || blocksMax < 1 || blocksMax > 2 ** 20) {
      throw new ArgumentError(
        `Allocator: blocksMax must be an integer in 1..2^20, got ${String(blocksMax)}`,
      );
    }
    this.#lib = loadCore();
    this.size = size;
    this.alignment = alignment;
    this.isMeasure = measure;
    const handle = new Uint32Array(1);
    check(
      this.#lib,
      this.#lib.graft_allocator_create(
        BigInt(size),
        this.alignment,
        measure ? 1 : 0,
        blocksMax,
        handle,
      ),
      "Allocator",
    );
    this.#handle = handle[0]!;
  }

  /** An allocator over an unbounded virtual buffer, to measure the size a sequence needs. */
  static measure(options: AllocatorOptions = {}): Allocator {
    return new Allocator(0, options, true);
  }

  #alive(verb: string): void {
    if (this.#disposed) throw new DisposedError(`Allocator.${verb}: allocator is disposed`);
  }

  /** `size` rounded up to the alignment, as the allocator reserves it. */
  alignedSize(size: number): number {
    const a = this.alignment;
    return Math.ceil(Math.max(size, 1) / a) * a;
  }

  /** Reserves `size` bytes and returns their offset; throws OutOfSpaceError if none fits. */
  alloc(size: number): number {
    this.#alive("alloc");
    requireByteCount("Allocator.alloc: size", size);
    const status = this.#lib.graft_allocator_alloc(this.#handle, BigInt(size), this.#out);
    if (status === Status.outOfSpace) {
      throw new OutOfSpaceError(
        status,
        `Allocator.alloc: ${lastError(this.#lib)}`,
        Number(this.#out[0]!),
      );
    }
    check(this.#lib, status, "Allocator.alloc");
    return Number(this.#out[0]!);
  }

  /**
   * Returns a block. `offset` and `size` must be those of a live block (the size as given to
   * {@link alloc}, or anything that rounds to the same aligned size); anything else (a double
   * free, a wrong size, an offset never handed out) throws and changes nothing.
   */
  free(offset: number, size: number): void {
    this.#alive("free");
    requireByteCount("Allocator.free: offset", offset);
    requireByteCount("Allocator.free: size", size);
    check(
      this.#lib,
      this.#lib.graft_allocator_free(this.#handle, BigInt(offset), BigInt(size)),
      "Allocator.free",
    );
  }

  /** Frees every block. */
  reset(): void {
    this.#alive("reset");
    check(this.#lib, this.#lib.graft_allocator_reset(this.#handle), "Allocator.reset");
  }

  /** Current counters. */
  stats(): AllocatorStats {
    this.#alive("stats");
    check(this.#lib, this.#lib.graft_allocator_stats(this.#handle, this.#out), "Allocator.stats");
    const [sizeMax, liveBlocks, liveBytes, freeBlocks, largestFreeBlock] = Array.from(
      this.#out,
      Number,
    );
    return {
      sizeMax: sizeMax!,
      liveBlocks: liveBlocks!,
      liveBytes: liveBytes!,
      freeBlocks: freeBlocks!,
      largestFreeBlock: largestFreeBlock!,
    };
  }

  /** True once disposed. */
  get disposed(): boolean {
    return this.#disposed;
  }

  /** Frees the native allocator. */
  dispose(): void {
    this.#alive("dispose");
    this.#disposed = true;
    check(this.#lib, this.#lib.graft_allocator_destroy(this.#handle), "Allocator.dispose");
  }

  /** Disposes unless already disposed (for `using`). */
  [Symbol.dispose](): void {
    if (!this.#disposed) this.dispose();
  }
}
