/**
 * Leak checks: the native core counts what is alive.
 * @module
 */

import { loadCore, type NativeCore } from "./core.ts";

/** Native objects alive now. */
export interface LiveAllocations {
  /** Live buffers, file mappings included. */
  buffers: number;
  /** Bytes allocated for live buffers (mapped files are in {@link mappedBytes}). */
  bufferBytes: number;
  /** Live allocators. */
  allocators: number;
  /** Live thread pools. */
  pools: number;
  /** Live graph plans. */
  plans: number;
  /** Bytes held by live plans (node tables and work buffers). */
  planBytes: number;
  /** Live read-only file mappings (buffers made by `CpuBackend.mapFile`). */
  mappings: number;
  /** Bytes of the live file mappings (address space: resident only as pages are read). */
  mappedBytes: number;
}

/**
 * Counts the native buffers, file mappings, allocators, pools and plans alive; all zero once
 * everything is disposed.
 *
 * @example
 * ```ts
 * import { CpuBackend, liveAllocations } from "../../mod.ts";
 * { using _cpu = new CpuBackend(); }
 * console.log(liveAllocations().pools); // 0
 * ```
 */
export function liveAllocations(): LiveAllocations {
  return liveAllocationsOf(loadCore());
}

/** The live counts of one loaded core (the native library's, or the WebAssembly core's). */
export function liveAllocationsOf(core: NativeCore): LiveAllocations {
  const out = new BigUint64Array(8);
  core.graft_live(out);
  const [buffers, bufferBytes, allocators, pools, plans, planBytes, mappings, mappedBytes] = Array
    .from(out, Number);
  return {
    buffers: buffers!,
    bufferBytes: bufferBytes!,
    allocators: allocators!,
    pools: pools!,
    plans: plans!,
    planBytes: planBytes!,
    mappings: mappings!,
    mappedBytes: mappedBytes!,
  };
}
