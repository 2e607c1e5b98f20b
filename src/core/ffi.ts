/**
 * The one place that loads the native core. Every symbol of `zig/root.zig` is declared here
 * with the C parameter names in comments; nothing else calls `Deno.dlopen`.
 * @module
 */

import { GraftError, LibraryLoadError } from "../errors.ts";
import { compareTables } from "./tables.ts";

import { ABI_VERSION, lastError, type NativeCore, symbols } from "./abi.ts";
import { candidates, fileUrlToPath, isFile, type LoadOptions, lookupHint } from "./lookup.ts";

export { ABI_VERSION, fileUrlToPath, type LoadOptions, symbols };

/** The loaded symbols. */
export type GraftSymbols = Deno.DynamicLibrary<typeof symbols>["symbols"];

// The FFI symbols are one implementation of the core's interface.
const _implements = (lib: GraftSymbols): NativeCore => lib;

const BUILD_HINT = "Build it with `./scripts/zig build` (or `deno task build`) from the " +
  "repository root, or set GRAFT_LIB to its path.";

let library: Deno.DynamicLibrary<typeof symbols> | null = null;

/** True when `path` is a file; a missing --allow-read is an error that names the flag. */
function exists(path: string): boolean {
  try {
    return isFile(path);
  } catch (error) {
    throw new LibraryLoadError(
      `Graft needs read access to load its native library (${path}): run Deno with ` +
        `--allow-read (or --allow-read=${path}), or use Graft's WebAssembly backend`,
      { cause: error },
    );
  }
}

/**
 * The library paths to try, in order (see `lookup.ts`): the `path` option, GRAFT_LIB, the
 * checkout's build output when this module was loaded from a `file:` URL, the platform package.
 */
export function candidatePaths(options: LoadOptions = {}): string[] {
  return candidates(options).flatMap((c) => c.path === undefined ? [] : [c.path]);
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
  const tried = candidates(options);
  const path = tried.find((c) => c.path !== undefined && exists(c.path))?.path;
  if (!path) {
    const places = tried.map((c, i) =>
      `${i + 1}. ${c.place}: ${c.path === undefined ? c.note : `${c.path} (no such file)`}`
    );
    throw new LibraryLoadError(
      `Graft's native library was not found. Tried, in order: ${places.join("; ")}. ` +
        lookupHint(),
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
  const live = new BigUint64Array(8);
  library.symbols.graft_live(live);
  const [buffers, , allocators, pools, plans, , mappings] = Array.from(live, Number);
  if (buffers! + allocators! + pools! + plans! > 0) {
    throw new GraftError(
      `closeLibrary: native objects are alive (${pools} thread pool(s), ${buffers} buffer(s) ` +
        `(${mappings} of them file mappings), ${plans} plan(s), ${allocators} allocator(s)); ` +
        `dispose them first`,
    );
  }
  library.close();
  library = null;
}

/** The core's tables as text (see `zig/tables.zig`). */
export function nativeTables(lib: NativeCore): string {
  let buffer = new Uint8Array(4096);
  let length = lib.graft_abi_tables(buffer, buffer.length);
  if (length > buffer.length) {
    buffer = new Uint8Array(length);
    length = lib.graft_abi_tables(buffer, buffer.length);
  }
  return new TextDecoder().decode(buffer.subarray(0, length));
}
