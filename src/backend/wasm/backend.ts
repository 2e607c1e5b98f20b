/**
 * The WebAssembly backend: the Zig core built for wasm32 with SIMD128, running the same node
 * tables, plans and kernels as the CPU backend in the instance's memory. What a browser uses,
 * and a Deno without `--allow-ffi`.
 * @module
 */

import {
  loadWasmCore,
  type NativeCore,
  wasmCoreIfLoaded,
  type WasmLoadOptions,
} from "../../core/core.ts";
import {
  acquireWasmThreads,
  releaseWasmThreads,
  wasmCoreBuild,
  wasmThreadsMax,
} from "../../core/wasm.ts";
import { type LiveAllocations, liveAllocationsOf } from "../../core/live.ts";
import { CoreBackend, type CoreBackendOptions } from "../cpu/backend.ts";

/** Options of {@link WasmBackend.create}. */
export interface WasmBackendOptions extends CoreBackendOptions {
  /** Where the WebAssembly core comes from (default: `graft.wasm` beside the modules). */
  wasm?: WasmLoadOptions;
}

/**
 * The largest WebAssembly buffer: 2 GiB. A wasm32 instance addresses 4 GiB in all, and the
 * core's own tables, plans and the other buffers share it.
 */
export const WASM_MAX_BUFFER_SIZE: number = 2 ** 31;

/** The SIMD128 kernel build's level number in the core (`zig/cpu.zig`). */
const WASM_SIMD_LEVEL = 4;

/**
 * The WebAssembly backend. One thread by default; `threads: n` where the engine shares memory
 * with workers (Deno; a cross-origin-isolated page) loads the threaded build, whose `n - 1` Web
 * Workers start with the backend (elsewhere `threads` is 1: the fallback). Buffers live in the
 * instance's memory, which grows as they are allocated. No file mappings: load GGUF weights with
 * `{ mmap: false }`, which the loader picks by itself for a backend without `mapFile`.
 *
 * Permissions in Deno: none for computing; reading `graft.wasm` from disk (a checkout, or a
 * local copy of the package) takes `--allow-read` for that file, fetching it from JSR
 * `--allow-net` for the JSR host, unless the module's bytes are passed as `wasm.source`.
 *
 * @example
 * ```ts
 * import { add, allocTensors, Context, Graph, WasmBackend } from "../../../mod.ts";
 * using wasm = await WasmBackend.create();
 * const ctx = new Context();
 * const a = ctx.newTensor("f32", [3]);
 * const b = ctx.newTensor("f32", [3]);
 * const c = add(a, b);
 * const graph = Graph.build(c);
 * using buffer = allocTensors(wasm, [a, b, ...graph.nodes]);
 * wasm.setTensor(a, new Float32Array([1, 2, 3]));
 * wasm.setTensor(b, new Float32Array([10, 20, 30]));
 * wasm.graphCompute(graph);
 * console.log(wasm.getTensor(c)); // Float32Array [11, 22, 33]
 * ```
 */
export class WasmBackend extends CoreBackend {
  /**
   * Loads the WebAssembly core (once per process or page: every WebAssembly backend shares the
   * instance) and starts a backend on it.
   *
   * @param options Threads (1), name (default "wasm"), buffer limit, and where the module is.
   * @returns The backend; dispose it when done.
   */
  static async create(options: WasmBackendOptions = {}): Promise<WasmBackend> {
    const asked = options.threads ?? 1;
    const core = await loadWasmCore({ threads: asked, ...options.wasm });
    // The threaded build's workers start with the first backend that asks for threads. A
    // single-threaded core grants none: the constructor then refuses more than one thread
    // with an ArgumentError, as it refuses an invalid count.
    const granted = Number.isInteger(asked) && asked > 1 ? await acquireWasmThreads(asked) : 1;
    try {
      return new WasmBackend(options, core, granted > 1);
    } catch (error) {
      if (granted > 1) releaseWasmThreads();
      throw error;
    }
  }

  /** Whether this backend holds the threaded core's workers (released on dispose). */
  readonly #holdsWorkers: boolean;

  /**
   * Which build of the WebAssembly core is loaded: `"relaxed"` (graft-relaxed.wasm, fused
   * multiply-adds through relaxed SIMD, where the engine has it), `"simd128"` (graft.wasm),
   * `"given"` (a module passed as `wasm.source`), or null before the first `create`.
   * `GRAFT_WASM=simd128` (Deno) forces the plain build.
   *
   * @example
   * ```ts
   * import { WasmBackend } from "../../../mod.ts";
   * using _wasm = await WasmBackend.create();
   * console.log(WasmBackend.coreBuild()); // "relaxed" in Deno 2 and Chromium
   * ```
   */
  static coreBuild(): string | null {
    return wasmCoreBuild();
  }

  /**
   * The WebAssembly core's live buffers, pools and plans (every WebAssembly backend shares
   * it); all zero once everything is disposed. `liveAllocations()` counts the native core's.
   *
   * @example
   * ```ts
   * import { WasmBackend } from "../../../mod.ts";
   * { using _wasm = await WasmBackend.create(); }
   * console.log(WasmBackend.liveAllocations().pools); // 0
   * ```
   */
  static liveAllocations(): LiveAllocations {
    const core = wasmCoreIfLoaded();
    if (core) return liveAllocationsOf(core);
    // Not loaded: nothing can be alive in it.
    return {
      buffers: 0,
      bufferBytes: 0,
      allocators: 0,
      pools: 0,
      plans: 0,
      planBytes: 0,
      mappings: 0,
      mappedBytes: 0,
    };
  }

  private constructor(options: WasmBackendOptions, core: NativeCore, holdsWorkers: boolean) {
    super(options, {
      core,
      label: "WasmBackend",
      simdLevel: WASM_SIMD_LEVEL,
      memory: "wasm",
      defaultThreads: 1,
      threadsMax: holdsWorkers ? wasmThreadsMax() : 1,
      maxBufferSize: WASM_MAX_BUFFER_SIZE,
    });
    this.#holdsWorkers = holdsWorkers;
  }

  /** Disposes the backend; the last one holding the threaded core's workers stops them. */
  override dispose(): void {
    super.dispose();
    if (this.#holdsWorkers) releaseWasmThreads();
  }
}
