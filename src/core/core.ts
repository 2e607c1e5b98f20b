/**
 * The one interface to the native core: {@link loadCore} gives the core's functions
 * ({@link NativeCore}, `abi.ts`) from whichever loader fits. Today that is the FFI loader
 * (`ffi.ts`, the only `Deno.dlopen`); a WebAssembly loader will be the other, for browsers and
 * a Deno without `--allow-ffi`. Backends and the allocator binding use only this module.
 * @module
 */

import { nativeError } from "../errors.ts";
import { lastError, type NativeCore } from "./abi.ts";
import { loadLibrary, type LoadOptions } from "./ffi.ts";

export { lastError };
export type { LoadOptions, NativeCore };

/** The core, loaded once (later calls return the same); throws LibraryLoadError if it cannot. */
export function loadCore(options: LoadOptions = {}): NativeCore {
  return loadLibrary(options);
}

/** Throws the typed error for a failed status, with `context` before the core's message. */
export function check(lib: NativeCore, status: number, context: string): void {
  if (status !== 0) throw nativeError(status, `${context}: ${lastError(lib)}`);
}
