/**
 * Leak checks: the native core counts what is alive.
 * @module
 */

import { loadCore } from "./core.ts";

/** Native objects alive now. */
export interface LiveAllocations {
  /** Live buffers. */
  buffers: number;
  /** Bytes in live buffers. */
  bufferBytes: number;
  /** Live allocators. */
  allocators: number;
  /** Live thread pools. */
  pools: number;
  /** Live graph plans. */
  plans: number;
  /** Bytes held by live plans (node tables and work buffers). */
  planBytes: number;
}

/**
 * Counts the native buffers, allocators, pools and plans alive; all zero once everything
 * is disposed.
 *
 * @example
 * ```ts
 * import { CpuBackend, liveAllocations } from "../../mod.ts";
 * { using _cpu = new CpuBackend(); }
 * console.log(liveAllocations().pools); // 0
 * ```
 */
export function liveAllocations(): LiveAllocations {
  const out = new BigUint64Array(6);
  loadCore().graft_live(out);
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
