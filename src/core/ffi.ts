/**
 * The one place that loads the native core. Every symbol of `zig/root.zig` is declared here
 * with the C parameter names in comments; nothing else calls `Deno.dlopen`.
 * @module
 */

import { GraftError, LibraryLoadError, nativeError } from "../errors.ts";
import { compareTables } from "./tables.ts";

/** The ABI version this binding speaks; `graft_abi_version()` must return it. */
export const ABI_VERSION = 5;

/** Native symbols of the Graft core. */
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
  /** (out: u64[6]) buffers, buffer bytes, allocators, pools, plans, plan bytes */
  graft_live: { parameters: ["buffer"], result: "i32" },
  /** (size_bytes, out_handle: u32*, out_address: u64*) */
  graft_buffer_alloc: { parameters: ["u64", "buffer", "buffer"], result: "i32" },
  /** (handle) */
  graft_buffer_free: { parameters: ["u32"], result: "i32" },
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
} as const satisfies Deno.ForeignLibraryInterface;

/** The loaded symbols. */
export type GraftSymbols = Deno.DynamicLibrary<typeof symbols>["symbols"];

/** Where to find the library; the first that exists is loaded. */
export interface LoadOptions {
  /** An explicit path to `libgraft.so`; tried first. */
  path?: string;
}

const BUILD_HINT = "Build it with `./scripts/zig build` (or `deno task build`) from the " +
  "repository root, or set GRAFT_LIB to its path.";

let library: Deno.DynamicLibrary<typeof symbols> | null = null;

function readEnv(name: string): string | undefined {
  try {
    return Deno.env.get(name);
  } catch {
    // Without --allow-env the variable is simply not consulted.
    return undefined;
  }
}

/**
 * The path of a `file:` URL, percent-escapes decoded (a checkout under "My Files" is
 * `My%20Files` in its URL: `URL.pathname` would keep the escape and find nothing).
 */
export function fileUrlToPath(url: URL): string {
  if (url.protocol !== "file:") throw new TypeError(`${url.href} is not a file: URL`);
  if (url.hostname !== "" && url.hostname !== "localhost") {
    throw new TypeError(`${url.href} names a host; only local file: URLs have a path`);
  }
  return decodeURIComponent(url.pathname.replace(/%(?![0-9a-fA-F]{2})/g, "%25"));
}

/**
 * The library paths to try, in order: the `path` option, GRAFT_LIB, then the checkout's build
 * output when this module was loaded from a `file:` URL. A module loaded over http(s) (as from
 * JSR) has no checkout beside it: only the first two apply.
 */
export function candidatePaths(options: LoadOptions = {}): string[] {
  const paths: string[] = [];
  if (options.path) paths.push(options.path);
  const fromEnv = readEnv("GRAFT_LIB");
  if (fromEnv) paths.push(fromEnv);
  const name = readEnv("GRAFT_SAFE") === "1" ? "libgraft-safe.so" : "libgraft.so";
  const built = new URL(`../../zig-out/lib/${name}`, import.meta.url);
  if (built.protocol === "file:") paths.push(fileUrlToPath(built));
  return paths;
}

/** True when `path` is a file; a missing --allow-read is an error that names the flag. */
function exists(path: string): boolean {
  try {
    return Deno.statSync(path).isFile;
  } catch (error) {
    if (error instanceof Deno.errors.NotCapable || error instanceof Deno.errors.PermissionDenied) {
      throw new LibraryLoadError(
        `Graft needs read access to load its native library (${path}): run Deno with ` +
          `--allow-read (or --allow-read=${path}), or use Graft's WebAssembly backend`,
        { cause: error },
      );
    }
    return false;
  }
}

/** Throws a LibraryLoadError naming --allow-ffi when FFI is not permitted. */
function requireFfiPermission(): void {
  let state: Deno.PermissionState = "granted";
  try {
    state = Deno.permissions.querySync({ name: "ffi" }).state;
  } catch {
    return; // no permissions API: let dlopen say what it says
  }
  if (state !== "granted") {
    throw new LibraryLoadError(
      "Graft's CPU backend calls its native library through FFI: run Deno with --allow-ffi " +
        "(and --allow-read for the library file)",
    );
  }
}

/**
 * Loads the core once and returns its symbols; later calls return the same library.
 * Throws {@link LibraryLoadError} naming every path tried and how to build the library.
 */
export function loadLibrary(options: LoadOptions = {}): GraftSymbols {
  if (library) return library.symbols;
  requireFfiPermission();
  const tried = candidatePaths(options);
  const path = tried.find(exists);
  if (!path) {
    const remote = new URL(import.meta.url).protocol !== "file:";
    throw new LibraryLoadError(
      `Graft's native library was not found. Tried: ${tried.join(", ") || "nothing"}. ` +
        (remote
          ? `This module was loaded from ${new URL(".", import.meta.url).href}, which ships no ` +
            `native library (platform packages come later): set GRAFT_LIB to a libgraft.so ` +
            `built with \`zig build\` from a checkout.`
          : BUILD_HINT),
    );
  }
  let opened: Deno.DynamicLibrary<typeof symbols>;
  try {
    opened = Deno.dlopen(path, symbols);
  } catch (cause) {
    throw new LibraryLoadError(
      `Graft's native library at ${path} could not be loaded: ${String(cause)}. ${BUILD_HINT}`,
      { cause },
    );
  }
  const version = opened.symbols.graft_abi_version();
  if (version !== ABI_VERSION) {
    opened.close();
    throw new LibraryLoadError(
      `${path} speaks ABI ${version}, this binding needs ${ABI_VERSION}. Rebuild it. ${BUILD_HINT}`,
    );
  }
  const mismatches = compareTables(nativeTables(opened.symbols));
  if (mismatches.length > 0) {
    opened.close();
    throw new LibraryLoadError(
      `${path} disagrees with this binding's tables (${mismatches.join("; ")}). Rebuild it ` +
        `from the same checkout. ${BUILD_HINT}`,
    );
  }
  // Pinned so that no later close (ours, or Deno's on an uncaught exception) unmaps code that
  // pool threads or an in-flight compute are running.
  const pinned = opened.symbols.graft_pin_library();
  if (pinned !== 0) {
    const message = lastError(opened.symbols);
    opened.close();
    throw new LibraryLoadError(`${path} could not be pinned in memory: ${message}`);
  }
  library = opened;
  return opened.symbols;
}

/**
 * Closes the library. Every native object must be disposed first: pools' threads run the
 * library's code, and finalizers of forgotten buffers and plans would call into it, so closing
 * under them would crash the process; this refuses instead, naming what is alive.
 */
export function closeLibrary(): void {
  if (!library) return;
  const live = new BigUint64Array(6);
  library.symbols.graft_live(live);
  const [buffers, , allocators, pools, plans] = Array.from(live, Number);
  if (buffers! + allocators! + pools! + plans! > 0) {
    throw new GraftError(
      `closeLibrary: native objects are alive (${pools} thread pool(s), ${buffers} buffer(s), ` +
        `${plans} plan(s), ${allocators} allocator(s)); dispose them first`,
    );
  }
  library.close();
  library = null;
}

/** The core's tables as text (see `zig/tables.zig`). */
export function nativeTables(lib: GraftSymbols): string {
  let buffer = new Uint8Array(4096);
  let length = lib.graft_abi_tables(buffer, buffer.length);
  if (length > buffer.length) {
    buffer = new Uint8Array(length);
    length = lib.graft_abi_tables(buffer, buffer.length);
  }
  return new TextDecoder().decode(buffer.subarray(0, length));
}

const messageBuffer = new Uint8Array(512);
const decoder = new TextDecoder();

/** The core's message for its last failed call. */
export function lastError(lib: GraftSymbols): string {
  const length = lib.graft_last_error(messageBuffer, messageBuffer.length);
  return decoder.decode(messageBuffer.subarray(0, Math.min(length, messageBuffer.length)));
}

/** Throws the typed error for a failed status, with `context` before the core's message. */
export function check(lib: GraftSymbols, status: number, context: string): void {
  if (status !== 0) throw nativeError(status, `${context}: ${lastError(lib)}`);
}
