// The leak check every test file ends with: what it started with is what is left, and that
// is nothing.
import assert from "node:assert/strict";
import { type LiveAllocations, liveAllocations } from "../mod.ts";

/** No native object alive. */
export const NOTHING_LIVE: LiveAllocations = {
  buffers: 0,
  bufferBytes: 0,
  allocators: 0,
  pools: 0,
  plans: 0,
  planBytes: 0,
  mappings: 0,
  mappedBytes: 0,
};

/** Asserts the counts are back to `baseline`, and that the baseline was empty. */
export function assertNothingLive(baseline: LiveAllocations): void {
  assert.deepEqual(liveAllocations(), baseline);
  assert.deepEqual(baseline, NOTHING_LIVE);
}
