/**
 * The greedy strategy: ggml-alloc's walk. Step by step, allocate the block a node starts, then
 * free the blocks whose last use was this step, through the Zig core's best-fit allocator in
 * measure mode. Its offsets are the plan; its high-water mark is the buffer size.
 * @module
 */

import { Allocator } from "./allocator.ts";
import type { Lifetimes } from "./lifetimes.ts";

/** Offsets of every block, and the buffer size they need. */
export interface BlockOffsets {
  readonly offsets: Float64Array;
  readonly size: number;
}

/** Free blocks the Zig allocator may need: at most one more than blocks alive at once. */
function freeBlocksBound(life: Lifetimes): number {
  return life.blockCount + 2;
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

/** Walks the steps against `allocator`, recording each block's offset. */
export function greedyWalk(life: Lifetimes, allocator: Allocator): BlockOffsets {
  const offsets = new Float64Array(life.blockCount);
  const ending = blocksEndingAt(life);
  let next = 0; // blocks are numbered in order of their start step
  for (let step = 0; step < life.timeline.length; step++) {
    while (next < life.blockCount && life.blockStart[next] === step) {
      offsets[next] = allocator.alloc(life.blockSize[next] as number);
      next++;
    }
    for (let i = ending.first[step] as number; i < (ending.first[step + 1] as number); i++) {
      const block = ending.blocks[i] as number;
      if (life.blockPinned[block] === 0) {
        allocator.free(offsets[block] as number, life.blockSize[block] as number);
      }
    }
  }
  return { offsets, size: allocator.stats().sizeMax };
}

/** Plans every block greedily in measure mode. */
export function planGreedy(life: Lifetimes, alignment: number): BlockOffsets {
  using measure = Allocator.measure({ alignment, blocksMax: freeBlocksBound(life) });
  return greedyWalk(life, measure);
}
