/**
 * The core's best-fit free-list allocator (`zig/allocator.zig`) in TypeScript, step for step:
 * the same smallest-block-that-fits choice (the first of equal sizes), the same splitting from
 * the front of a block, the same coalescing, the same measure mode. The memory planner walks
 * it, so planning needs no native library (a Deno without `--allow-ffi`, a browser); the
 * property test in tests/free_list_test.ts holds it to the Zig allocator's offsets.
 * @module
 */

import { ArgumentError, GraftError } from "../errors.ts";
import { requireByteCount } from "../args.ts";

/** A free or live byte range. */
interface Range {
  offset: number;
  size: number;
}

/**
 * Offsets within a buffer of `size` bytes (or an unbounded one, to measure), best fit.
 *
 * @example
 * ```ts
 * import { FreeList } from "./free_list.ts";
 * const measure = FreeList.measure(64);
 * const a = measure.alloc(1000);
 * measure.alloc(500);
 * measure.free(a, 1000);
 * console.log(measure.sizeMax); // 1536
 * ```
 */
export class FreeList {
  /** Offset alignment (a power of two). */
  readonly alignment: number;
  /** The highest end offset ever handed out: the buffer size the calls so far need. */
  sizeMax = 0;
  /** Bytes in live blocks (after rounding). */
  liveBytes = 0;
  /** Free blocks, sorted by offset, never adjacent. */
  readonly #free: Range[];
  /** Live blocks by offset, with their rounded size. */
  readonly #live = new Map<number, number>();

  /** A free list over `size` bytes; `measure` makes it unbounded. */
  constructor(size: number, alignment: number, measure = false) {
    requireByteCount("FreeList: size", size);
    if (!Number.isSafeInteger(alignment) || alignment < 1 || (alignment & (alignment - 1)) !== 0) {
      throw new ArgumentError(`FreeList: alignment must be a power of two, got ${alignment}`);
    }
    this.alignment = alignment;
    // The Zig allocator's measure mode spans maxInt(u64) / 2 bytes: past any real size.
    const span = measure ? Number.MAX_SAFE_INTEGER : size;
    this.#free = span > 0 ? [{ offset: 0, size: span }] : [];
  }

  /** An unbounded free list: allocation never fails; {@link sizeMax} is the size needed. */
  static measure(alignment: number): FreeList {
    return new FreeList(0, alignment, true);
  }

  /** `size` rounded up to the alignment, as a block reserves it. */
  alignedSize(size: number): number {
    return Math.ceil(Math.max(size, 1) / this.alignment) * this.alignment;
  }

  /** Reserves `size` bytes: the smallest free block that fits, split from its front. */
  alloc(size: number): number {
    requireByteCount("FreeList.alloc: size", size);
    const needed = this.alignedSize(size);
    let best = -1;
    for (let i = 0; i < this.#free.length; i++) {
      const block = this.#free[i]!;
      if (block.size < needed) continue;
      if (best < 0 || block.size < this.#free[best]!.size) best = i;
    }
    if (best < 0) {
      throw new GraftError(`FreeList.alloc: no free block fits ${needed} bytes`);
    }
    const block = this.#free[best]!;
    const offset = block.offset;
    block.offset += needed;
    block.size -= needed;
    if (block.size === 0) this.#free.splice(best, 1);
    this.sizeMax = Math.max(this.sizeMax, offset + needed);
    this.#live.set(offset, needed);
    this.liveBytes += needed;
    return offset;
  }

  /** Returns a live block (its offset and size as allocated), merging free neighbours. */
  free(offset: number, size: number): void {
    const freed = this.alignedSize(size);
    if (this.#live.get(offset) !== freed) {
      throw new GraftError(
        `FreeList.free: ${size} bytes at offset ${offset} name no live block of that size`,
      );
    }
    this.#live.delete(offset);
    this.liveBytes -= freed;
    // The first free block after the freed range (binary search: the list is sorted).
    let low = 0, high = this.#free.length;
    while (low < high) {
      const middle = (low + high) >> 1;
      if (this.#free[middle]!.offset < offset) low = middle + 1;
      else high = middle;
    }
    const index = low;
    const before = index > 0 ? this.#free[index - 1]! : null;
    const after = index < this.#free.length ? this.#free[index]! : null;
    const mergesBefore = before !== null && before.offset + before.size === offset;
    const mergesAfter = after !== null && offset + freed === after.offset;
    if (mergesBefore && mergesAfter) {
      before.size += freed + after.size;
      this.#free.splice(index, 1);
    } else if (mergesBefore) {
      before.size += freed;
    } else if (mergesAfter) {
      after.offset = offset;
      after.size += freed;
    } else {
      this.#free.splice(index, 0, { offset, size: freed });
    }
  }

  /** Free blocks now (for tests). */
  get freeBlocks(): number {
    return this.#free.length;
  }
}
