/**
 * The backend to compute on when the caller does not choose: the native CPU backend where FFI
 * is allowed, else the WebAssembly backend.
 * @module
 */

import { LibraryLoadError } from "../errors.ts";
import { ffiAllowed } from "../core/core.ts";
import { CpuBackend, type CpuBackendOptions } from "./cpu/backend.ts";
import { WasmBackend, type WasmBackendOptions } from "./wasm/backend.ts";

/** Options of {@link defaultBackend}. */
export interface DefaultBackendOptions {
  /** Options of the CPU backend, when it is the one. */
  cpu?: CpuBackendOptions;
  /** Options of the WebAssembly backend, when it is the one. */
  wasm?: WasmBackendOptions;
  /** Say nothing about falling back to WebAssembly (default false: one line, once). */
  quiet?: boolean;
}

let said = false;

/** One line on stderr, once per process: why this process computes on WebAssembly. */
function sayOnce(quiet: boolean | undefined, message: string): void {
  if (quiet || said) return;
  said = true;
  console.warn(message);
}

/**
 * The CPU backend (native kernels over FFI, all cores) where this process may call native code
 * and the library loads; otherwise the WebAssembly backend (the same kernels as SIMD128
 * WebAssembly, one thread): in a browser, and in a Deno without `--allow-ffi` (said once on
 * stderr, unless `quiet`).
 *
 * @param options Each backend's options, and `quiet`.
 * @returns A backend; dispose it when done.
 *
 * @example
 * ```ts
 * import { add, allocTensors, Context, defaultBackend, Graph } from "../../mod.ts";
 * using backend = await defaultBackend({ quiet: true });
 * const ctx = new Context();
 * const a = ctx.newTensor("f32", [2]);
 * const c = add(a, a);
 * const graph = Graph.build(c);
 * using _memory = allocTensors(backend, [a, ...graph.nodes]);
 * backend.setTensor(a, new Float32Array([1, 2]));
 * backend.graphCompute(graph);
 * console.log(backend.getTensor(c)); // Float32Array [2, 4]
 * ```
 */
export async function defaultBackend(
  options: DefaultBackendOptions = {},
): Promise<CpuBackend | WasmBackend> {
  if (ffiAllowed()) {
    try {
      return new CpuBackend(options.cpu);
    } catch (error) {
      if (!(error instanceof LibraryLoadError)) throw error;
      sayOnce(
        options.quiet,
        `Graft: the native library did not load (${error.message}); computing on ` +
          "WebAssembly (one thread)",
      );
    }
  } else if (typeof Deno !== "undefined") {
    sayOnce(
      options.quiet,
      "Graft: no --allow-ffi, so computing on WebAssembly (one thread); run Deno with " +
        "--allow-ffi for the native CPU backend",
    );
  }
  return await WasmBackend.create(options.wasm);
}
