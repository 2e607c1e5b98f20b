/**
 * The one interface to the native core: {@link loadCore} gives the core's functions
 * ({@link NativeCore}, `abi.ts`) from whichever loader fits: the FFI loader (`ffi.ts`, the only
 * `Deno.dlopen`) in a Deno with `--allow-ffi`, else the WebAssembly core (`wasm.ts`, the only
 * `WebAssembly`) once it has been loaded (`loadWasmCore`, which is asynchronous: a browser
 * compiles a module of this size only asynchronously). Backends and the allocator binding use
 * only this module.
 * @module
 */

import { LibraryLoadError, nativeError } from "../errors.ts";
import { lastError, type NativeCore } from "./abi.ts";
import { loadLibrary, type LoadOptions } from "./ffi.ts";
import { loadWasmCore, wasmCoreIfLoaded, type WasmLoadOptions } from "./wasm.ts";

export { lastError, loadWasmCore, wasmCoreIfLoaded };
export type { LoadOptions, NativeCore, WasmLoadOptions };

/**
 * Whether this process may call native code: a Deno with `--allow-ffi` (a browser never may).
 * Asks without prompting.
 */
export function ffiAllowed(): boolean {
  if (typeof Deno === "undefined" || typeof Deno.dlopen !== "function") return false;
  try {
    return Deno.permissions.querySync({ name: "ffi" }).state === "granted";
  } catch {
    return false;
  }
}

/**
 * The core, loaded once (later calls return the same): the native library through FFI, or,
 * where FFI is not allowed, the WebAssembly core if {@link loadWasmCore} has loaded it. Throws
 * a LibraryLoadError if neither is available.
 */
export function loadCore(options: LoadOptions = {}): NativeCore {
  if (!ffiAllowed()) {
    const wasm = wasmCoreIfLoaded();
    if (wasm) return wasm;
    if (typeof Deno === "undefined") {
      throw new LibraryLoadError(
        "Graft's native core is not loaded: in a browser, `await WasmBackend.create()` (or " +
          "`await defaultBackend()`) first",
      );
    }
  }
  return loadLibrary(options);
}

/**
 * The native library through FFI, never the WebAssembly core (the CPU backend's core); throws
 * a LibraryLoadError naming --allow-ffi where FFI is not allowed.
 */
export function loadNativeLibrary(options: LoadOptions = {}): NativeCore {
  return loadLibrary(options);
}

/** Throws the typed error for a failed status, with `context` before the core's message. */
export function check(lib: NativeCore, status: number, context: string): void {
  if (status !== 0) throw nativeError(status, `${context}: ${lastError(lib)}`);
}
