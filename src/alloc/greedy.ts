/**
 * The greedy strategy: ggml-alloc's walk. Step by step, allocate the block a node starts, then
 * free the blocks whose last use was this step, through a best-fit free list in measure mode
 * (the Zig core's allocator, in TypeScript: planning needs no native library). Its offsets are
 * the plan; its high-water mark is the buffer size.
 * @module
 */

import { FreeList } from "./free_list.ts";
import type { Lifetimes } from "./lifetimes.ts";

/** Offsets of every block, and the buffer size they need. */
export interface BlockOffsets {
  readonly offsets: Float64Array;
  readonly size: number;
}

/** Blocks ending at each step, as compressed rows (a counting sort, no per-step arrays). */
export function blocksEndingAt(life: Lifetimes): { first: Int32Array; blocks: Int32Array } {
  const steps = life.timeline.length;
  const first = new Int32Array(steps + 1);
  for (let b = 0; b < life.blockCount; b++) first[(life.blockEnd[b] as number) + 1]!++;
  for (let s = 0; s < steps; s++) first[s + 1]! += first[s] as number;
  const fill = first.slice(0, steps);
  const blocks = new Int32Array(life.blockCount);
  for (let b = 0; b < life.blockCount; b++) blocks[fill[life.blockEnd[b] as number]!++] = b;
  return { first, blocks };
}

/** What the walk needs of an allocator: the TS free list, or the core's (for the tests). */
export interface WalkAllocator {
  alloc(size: number): number;
  free(offset: number, size: number): void;
}

/** Walks the steps against `allocator`, recording each block's offset and the high-water mark. */
export function greedyWalk(life: Lifetimes, allocator: WalkAllocator): BlockOffsets {
  const offsets = new Float64Array(life.blockCount);
  const ending = blocksEndingAt(life);
  let size = 0;
  let next = 0; // blocks are numbered in order of their start step
  for (let step = 0; step < life.timeline.length; step++) {
    while (next < life.blockCount && life.blockStart[next] === step) {
      const blockSize = life.blockSize[next] as number;
      offsets[next] = allocator.alloc(blockSize);
      size = Math.max(size, offsets[next]! + blockSize);
      next++;
    }
    for (let i = ending.first[step] as number; i < (ending.first[step + 1] as number); i++) {
      const block = ending.blocks[i] as number;
      if (life.blockPinned[block] === 0) {
        allocator.free(offsets[block] as number, life.blockSize[block] as number);
      }
    }
  }
  return { offsets, size };
}

/** Plans every block greedily in measure mode (pure TypeScript). */
export function planGreedy(life: Lifetimes, alignment: number): BlockOffsets {
  return greedyWalk(life, FreeList.measure(alignment));
}
