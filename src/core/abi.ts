/**
 * The core's ABI, independent of how the core is loaded: its version and every export with
 * its C parameter types (`zig/root.zig`), and {@link NativeCore}, the functions as TypeScript
 * calls them. The FFI loader (`ffi.ts`) opens the shared library with this table; a
 * WebAssembly loader will implement the same {@link NativeCore} over a wasm instance (typed
 * arrays passed as `buffer` arguments are then copied into and out of the instance's memory,
 * since wasm code cannot address JS memory).
 * @module
 */

/** The ABI version this binding speaks; `graft_abi_version()` must return it. */
export const ABI_VERSION = 9;

/** Native symbols of the Graft core (the C ABI of `zig/root.zig`). */
export const symbols = {
  graft_abi_version: { parameters: [], result: "u32" },
  /** (destination, capacity) -> full length: the core's op, dtype and status tables as text */
  graft_abi_tables: { parameters: ["buffer", "u32"], result: "u32" },
  /** Keeps the library mapped until the process ends (see zig/pin.zig). */
  graft_pin_library: { parameters: [], result: "i32" },
  /** (destination, capacity) -> full message length */
  graft_last_error: { parameters: ["buffer", "u32"], result: "u32" },
  /** The best kernel build this CPU runs: 0 none, 1 AVX2, 2 AVX-512. */
  graft_simd_supported: { parameters: [], result: "u32" },
  /**
   * (out: u64[8]) buffers (file mappings included), bytes allocated for buffers, allocators,
   * pools, plans, plan bytes, file mappings, bytes mapped
   */
  graft_live: { parameters: ["buffer"], result: "i32" },
  /** (size_bytes, out_handle: u32*, out_address: u64*) */
  graft_buffer_alloc: { parameters: ["u64", "buffer", "buffer"], result: "i32" },
  /** (handle): frees a buffer, or unmaps a file mapping */
  graft_buffer_free: { parameters: ["u32"], result: "i32" },
  /**
   * (path: bytes, path_length, out_handle: u32*, out: u64[4] address, length, device, inode):
   * the whole file mapped read-only (PROT_READ, MAP_PRIVATE) as a buffer that refuses writes
   */
  graft_file_map: { parameters: ["buffer", "u64", "buffer", "buffer"], result: "i32" },
  /** (handle, offset, length, advice): madvise on a mapping; 0 normal 1 random 2 sequential 3 will need */
  graft_buffer_advise: { parameters: ["u32", "u64", "u64", "u32"], result: "i32" },
  /** (handle, offset, source, length) */
  graft_buffer_write: { parameters: ["u32", "u64", "buffer", "u64"], result: "i32" },
  /** (handle, offset, destination, length) */
  graft_buffer_read: { parameters: ["u32", "u64", "buffer", "u64"], result: "i32" },
  /** (source_handle, source_offset, destination_handle, destination_offset, length) */
  graft_buffer_copy: { parameters: ["u32", "u64", "u32", "u64", "u64"], result: "i32" },
  /** (handle, offset, length, value) */
  graft_buffer_fill: { parameters: ["u32", "u64", "u64", "u32"], result: "i32" },
  /** (size_bytes, alignment, measure, blocks_max, out_handle: u32*) */
  graft_allocator_create: {
    parameters: ["u64", "u32", "u32", "u32", "buffer"],
    result: "i32",
  },
  /** (handle, size_bytes, out_offset: u64*) */
  graft_allocator_alloc: { parameters: ["u32", "u64", "buffer"], result: "i32" },
  /** (handle, offset, size_bytes) */
  graft_allocator_free: { parameters: ["u32", "u64", "u64"], result: "i32" },
  graft_allocator_reset: { parameters: ["u32"], result: "i32" },
  /** (handle, out: u64[5]) size_max, live_blocks, live_bytes, free_blocks, largest_free */
  graft_allocator_stats: { parameters: ["u32", "buffer"], result: "i32" },
  graft_allocator_destroy: { parameters: ["u32"], result: "i32" },
  /** (thread_count, out_handle: u32*) */
  graft_pool_create: { parameters: ["u32", "buffer"], result: "i32" },
  graft_pool_destroy: { parameters: ["u32"], result: "i32" },
  /** (nodes: Node[], node_count, thread_count, simd_level, out_handle: u32*, out_work_bytes: u64*) */
  graft_plan_create: {
    parameters: ["buffer", "u32", "u32", "u32", "buffer", "buffer"],
    result: "i32",
  },
  /** (plan, pool): the whole graph in one call */
  graft_plan_compute: { parameters: ["u32", "u32"], result: "i32" },
  /** The same call on a Deno worker thread, returning a Promise. */
  graft_plan_compute_async: {
    name: "graft_plan_compute",
    parameters: ["u32", "u32"],
    result: "i32",
    nonblocking: true,
  },
  /** (plan): the plan's prepacked weights are stale; the next compute packs them again */
  graft_plan_repack: { parameters: ["u32"], result: "i32" },
  /** (plan, enable): per-node timing of later computes */
  graft_plan_profile: { parameters: ["u32", "u32"], result: "i32" },
  /** (plan, out: u64[capacity], capacity) */
  graft_plan_timings: { parameters: ["u32", "buffer", "u32"], result: "i32" },
  graft_plan_free: { parameters: ["u32"], result: "i32" },
  /** (dtype_code, source: f32[n], n, destination, destination_capacity): ggml's quantize_row_*_ref */
  graft_quantize: { parameters: ["u32", "buffer", "u64", "buffer", "u64"], result: "i32" },
  /** (dtype_code, source, source_bytes, destination: f32[n], n): ggml's dequantize_row_* */
  graft_dequantize: { parameters: ["u32", "buffer", "u64", "buffer", "u64"], result: "i32" },
} as const satisfies Deno.ForeignLibraryInterface;

type ParamType<P> = P extends "u32" | "i32" | "f64" ? number
  : P extends "u64" ? bigint
  : P extends "buffer" ? ArrayBufferView | null
  : never;

type Params<T extends readonly unknown[]> = { -readonly [K in keyof T]: ParamType<T[K]> };

type CoreFunction<D> = D extends
  { parameters: infer P extends readonly unknown[]; nonblocking: true }
  ? (...args: Params<P>) => Promise<number>
  : D extends { parameters: infer P extends readonly unknown[] } ? (...args: Params<P>) => number
  : never;

/**
 * The core's functions as TypeScript calls them, derived from {@link symbols}: every status
 * and count is a number, `u64` arguments take a bigint, `buffer` arguments a typed array. The one interface the rest of Graft uses to reach the core, whichever loader is
 * behind it.
 */
export type NativeCore = {
  readonly [K in keyof typeof symbols]: CoreFunction<(typeof symbols)[K]>;
};

const messageBuffer = new Uint8Array(512);
const decoder = new TextDecoder();

/** The core's message for its last failed call. */
export function lastError(lib: NativeCore): string {
  const length = lib.graft_last_error(messageBuffer, messageBuffer.length);
  return decoder.decode(messageBuffer.subarray(0, Math.min(length, messageBuffer.length)));
}
