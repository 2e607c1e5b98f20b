/**
 * The offline strategy: with every block's interval known in advance, place big blocks first,
 * each at the lowest offset that overlaps no already placed block live at the same time
 * ("greedy by size", Pisarchyk & Lee 2020). Several orders are tried; the smallest wins.
 *
 * Finding the placed blocks that overlap an interval uses {@link BUCKETS} buckets of steps:
 * each placed block is listed in every bucket its interval touches, so a query looks only at
 * blocks near its own interval instead of at all of them. Candidates are sorted by offset as
 * packed float64 keys (offset * 2^16 + candidate number), a native numeric sort.
 * @module
 */

import type { BlockOffsets } from "./greedy.ts";
import type { Lifetimes } from "./lifetimes.ts";

/**
 * Buckets of the overlap index. More buckets prune more but list long-lived blocks in more of
 * them; about a hundred balances the two on graphs of 1k-10k nodes.
 */
export const BUCKETS = 128;
/** Candidates one placement can sort with packed keys (16 bits of candidate number). */
const PACKED_CANDIDATES_MAX = 1 << 16;

// "size" wins most often; "area" (size x lifetime) wins about a third of the time on random
// DAGs. Ordering by start step was tried and almost never won, so it is not run.
/** Orders the offline strategy tries, best result kept. */
export const OFFLINE_ORDERS = ["size", "area"] as const;

/** One order of placing blocks. */
export type OfflineOrder = typeof OFFLINE_ORDERS[number];

function placementOrder(life: Lifetimes, order: OfflineOrder): Int32Array {
  const { blockStart: start, blockEnd: end, blockSize: size } = life;
  const blocks = new Int32Array(life.blockCount);
  for (let b = 0; b < blocks.length; b++) blocks[b] = b;
  const duration = (b: number): number => (end[b] as number) - (start[b] as number) + 1;
  const key = order === "area"
    ? (b: number): number => (size[b] as number) * duration(b)
    : (b: number): number => size[b] as number;
  // Ties: longer-lived first (they constrain more), then by start for a stable result.
  return blocks.sort((a, b) =>
    key(b) - key(a) || duration(b) - duration(a) || (start[a] as number) - (start[b] as number)
  );
}

/** Places blocks in one order; returns offsets and the highest end offset. */
export function packBlocks(life: Lifetimes, order: OfflineOrder): BlockOffsets {
  const { blockStart: start, blockEnd: end, blockSize: size } = life;
  const count = life.blockCount;
  const offsets = new Float64Array(count);
  const bucketSteps = Math.max(1, Math.ceil(life.timeline.length / BUCKETS));
  const buckets: number[][] = Array.from({ length: BUCKETS }, () => []);
  const seen = new Int32Array(count).fill(-1);
  const candidates: number[] = [];
  let keys = new Float64Array(64);
  let highest = 0;
  for (const block of placementOrder(life, order)) {
    const s = start[block] as number, e = end[block] as number;
    const firstBucket = Math.floor(s / bucketSteps), lastBucket = Math.floor(e / bucketSteps);
    candidates.length = 0;
    for (let k = firstBucket; k <= lastBucket; k++) {
      const list = buckets[k] as number[];
      for (let i = 0; i < list.length; i++) {
        const other = list[i] as number;
        if (seen[other] === block) continue;
        seen[other] = block;
        if ((start[other] as number) <= e && (end[other] as number) >= s) candidates.push(other);
      }
    }
    const n = candidates.length;
    if (n > keys.length) keys = new Float64Array(Math.max(n, keys.length * 2));
    const sorted = keys.subarray(0, n);
    const packed = n < PACKED_CANDIDATES_MAX;
    if (packed) {
      for (let i = 0; i < n; i++) {
        sorted[i] = (offsets[candidates[i] as number] as number) * PACKED_CANDIDATES_MAX + i;
      }
      sorted.sort();
    } else {
      candidates.sort((a, b) => (offsets[a] as number) - (offsets[b] as number));
    }
    const need = size[block] as number;
    let offset = 0;
    for (let i = 0; i < n; i++) {
      const other = packed
        ? candidates[(sorted[i] as number) % PACKED_CANDIDATES_MAX] as number
        : candidates[i] as number;
      const otherOffset = offsets[other] as number;
      if (otherOffset >= offset + need) break; // the gap below `other` fits
      offset = Math.max(offset, otherOffset + (size[other] as number));
    }
    offsets[block] = offset;
    highest = Math.max(highest, offset + need);
    for (let k = firstBucket; k <= lastBucket; k++) (buckets[k] as number[]).push(block);
  }
  return { offsets, size: highest };
}

/** Tries every order of {@link OFFLINE_ORDERS} and keeps the smallest plan. */
export function planOffline(life: Lifetimes): BlockOffsets & { order: OfflineOrder } {
  let best: (BlockOffsets & { order: OfflineOrder }) | null = null;
  for (const order of OFFLINE_ORDERS) {
    const result = packBlocks(life, order);
    if (best === null || result.size < best.size) best = { ...result, order };
  }
  return best as BlockOffsets & { order: OfflineOrder };
}
