/**
 * Leak checks: the native core counts what is alive.
 * @module
 */

import { loadLibrary } from "./ffi.ts";

/** Native objects alive now. */
export interface LiveAllocations {
  buffers: number;
  bufferBytes: number;
  allocators: number;
  pools: number;
  plans: number;
  planBytes: number;
}

/**
 * Counts the native buffers, allocators, pools and plans alive; all zero once everything
 * is disposed.
 *
 * @example
 * ```ts
 * import { CpuBackend, liveAllocations } from "../mod.ts";
 * { using _cpu = new CpuBackend(); }
 * console.log(liveAllocations().pools); // 0
 * ```
 */
export function liveAllocations(): LiveAllocations {
  const out = new BigUint64Array(6);
  loadLibrary().graft_live(out);
  const [buffers, bufferBytes, allocators, pools, plans, planBytes] = Array.from(out, Number);
  return {
    buffers: buffers!,
    bufferBytes: bufferBytes!,
    allocators: allocators!,
    pools: pools!,
    plans: plans!,
    planBytes: planBytes!,
  };
}
