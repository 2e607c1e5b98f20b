/**
 * The WebAssembly loader of the core: the same Zig core built for wasm32 with SIMD128
 * (`zig build wasm`), instantiated once and wrapped as the same {@link NativeCore} the FFI
 * loader gives. The only place that touches `WebAssembly`.
 *
 * Wasm code reaches only its own linear memory, so every typed-array argument is copied into a
 * scratch block of the instance's memory (`graft_wasm_alloc`), its offset passed as the
 * pointer, and copied back out after the call; the addresses the core hands out (buffers) are
 * offsets into that memory, which the node table carries as it carries native addresses.
 * @module
 */

import { GraftError, LibraryLoadError } from "../errors.ts";
import { ABI_VERSION, type NativeCore, symbols } from "./abi.ts";
import { fileUrlToPath, nativeTables } from "./ffi.ts";
import { compareTables } from "./tables.ts";

/** Where the WebAssembly core comes from. */
export interface WasmLoadOptions {
  /**
   * The module: its bytes, a compiled `WebAssembly.Module`, or a URL to fetch. Default: in a
   * checkout `zig-out/wasm/graft.wasm` (built by `deno task wasm`), else the `graft.wasm`
   * beside this module (the JSR package and the esbuild bundle ship it there).
   */
  source?: BufferSource | WebAssembly.Module | URL | string;
  /**
   * Threads the core may compute on (default 1). Above 1, where this engine shares memory with
   * workers (SharedArrayBuffer and Worker: Deno, a cross-origin-isolated page), the threaded
   * build (`graft-relaxed-threads.wasm` or `graft-threads.wasm`) loads on a shared memory;
   * its workers start with the first backend that asks for threads. Elsewhere the
   * single-threaded build loads: the fallback. Only the first load decides.
   */
  threads?: number;
}

/** Which way a `buffer` argument's bytes travel: into the call, out of it, or both. */
type Direction = "in" | "out" | "inout";

/**
 * Arguments that are only read (copied in) or only written (copied out), by symbol and index;
 * every other `buffer` argument is copied both ways. Large data passes here, so it is copied
 * once.
 */
const DIRECTIONS: { readonly [name: string]: { readonly [index: number]: Direction } } = {
  graft_abi_tables: { 0: "out" },
  graft_last_error: { 0: "out" },
  graft_live: { 0: "out" },
  graft_buffer_write: { 2: "in" },
  graft_buffer_read: { 2: "out" },
  graft_file_map: { 0: "in" },
  graft_plan_create: { 0: "in" },
  graft_plan_timings: { 1: "out" },
  graft_quantize: { 1: "in", 3: "out" },
  graft_dequantize: { 1: "in", 3: "out" },
};

type Exported = (...args: (number | bigint)[]) => number;

interface ScratchBlock {
  address: number;
  view: ArrayBufferView;
  direction: Direction;
}

let loaded: Promise<NativeCore> | null = null;
let instanceCore: NativeCore | null = null;

/** The WebAssembly core if it has been loaded (by {@link loadWasmCore}), else null. */
export function wasmCoreIfLoaded(): NativeCore | null {
  return instanceCore;
}

/**
 * Loads the WebAssembly core once (later calls return the same instance; their options are
 * ignored) and checks its ABI version and tables. Rejects with a LibraryLoadError naming what
 * was tried.
 */
export function loadWasmCore(options: WasmLoadOptions = {}): Promise<NativeCore> {
  if (!loaded) {
    loaded = instantiate(options).then((core) => (instanceCore = core));
    // A failed load may be retried (with another source).
    loaded.catch(() => (loaded = null));
  }
  return loaded;
}

function bytesOf(view: ArrayBufferView): Uint8Array {
  return new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}

/**
 * The smallest module that uses relaxed SIMD (a function returning
 * `f32x4.relaxed_madd(0, 0, 0)`): an engine that validates it runs graft-relaxed.wasm.
 */
const RELAXED_SIMD_PROBE = new Uint8Array([
  0x00,
  0x61,
  0x73,
  0x6d,
  0x01,
  0x00,
  0x00,
  0x00, // magic, version
  0x01,
  0x05,
  0x01,
  0x60,
  0x00,
  0x01,
  0x7b, // types: () -> v128
  0x03,
  0x02,
  0x01,
  0x00, // functions: one of type 0
  0x0a,
  0x3d,
  0x01,
  0x3b,
  0x00, // code: one body of 59 bytes, no locals
  ...[0, 1, 2].flatMap(() => [0xfd, 0x0c, ...new Array<number>(16).fill(0)]), // v128.const 0 x3
  0xfd,
  0x85,
  0x02, // f32x4.relaxed_madd
  0x0b, // end
]);

/** The core's builds: plain SIMD128 (every engine with SIMD), and SIMD128 with relaxed SIMD. */
export type WasmBuild = "simd128" | "relaxed";

const BUILD_FILES: Record<string, string> = {
  simd128: "graft.wasm",
  relaxed: "graft-relaxed.wasm",
  "simd128-threads": "graft-threads.wasm",
  "relaxed-threads": "graft-relaxed-threads.wasm",
};

/** Whether this engine can run the threaded build: shared memory and workers. */
export function wasmThreadsAvailable(): boolean {
  if (typeof SharedArrayBuffer === "undefined" || typeof Worker === "undefined") return false;
  // A page must be cross-origin isolated to share memory with its workers (Deno always can).
  const isolated = (globalThis as { crossOriginIsolated?: boolean }).crossOriginIsolated;
  return isolated !== false;
}

/**
 * The build this engine runs best: `relaxed` (graft-relaxed.wasm: f32x4.relaxed_madd, a fused
 * multiply-add on CPUs with FMA) where the engine validates relaxed SIMD, else `simd128`. The
 * environment variable `GRAFT_WASM` (`simd128` or `relaxed`) forces one in Deno, as `GRAFT_CPU`
 * does for the native kernels (tests run the op suite on both).
 */
export function preferredWasmBuild(): WasmBuild {
  let forced: string | undefined;
  try {
    forced = typeof Deno !== "undefined" ? Deno.env.get("GRAFT_WASM") : undefined;
  } catch {
    // No --allow-env: choose by the engine.
  }
  if (forced === "simd128" || forced === "relaxed") return forced;
  if (forced !== undefined && forced !== "") {
    throw new LibraryLoadError(`GRAFT_WASM=${forced}: expected simd128 or relaxed`);
  }
  return WebAssembly.validate(RELAXED_SIMD_PROBE) ? "relaxed" : "simd128";
}

let loadedBuild: string | null = null;

/**
 * Which module the loaded WebAssembly core came from: `relaxed` or `simd128` when the loader
 * chose it, `given` for a `source` passed in; null before loading.
 */
export function wasmCoreBuild(): string | null {
  return loadedBuild;
}

/**
 * The default places to look, in order (see {@link WasmLoadOptions.source}): in a checkout
 * (a `file:` module) its build output first, the freshest; then the copy beside this module,
 * which the JSR package and the bundle carry. The relaxed-SIMD build first where the engine
 * has relaxed SIMD, then the plain one.
 */
export function wasmCandidates(build: WasmBuild = preferredWasmBuild(), threads = false): URL[] {
  const single: string[] = build === "relaxed" ? ["relaxed", "simd128"] : ["simd128"];
  const builds = threads ? [...single.map((name) => `${name}-threads`), ...single] : single;
  return builds.flatMap((name) => {
    const file = BUILD_FILES[name];
    const beside = new URL(`./${file}`, import.meta.url);
    const built = new URL(`../../zig-out/wasm/${file}`, import.meta.url);
    return built.protocol === "file:" ? [built, beside] : [beside];
  });
}

/** The build a candidate URL holds. */
function buildOf(url: URL): string {
  const file = url.pathname.split("/").pop();
  return Object.entries(BUILD_FILES).find(([, name]) => name === file)?.[0] ?? "given";
}

async function fetchModule(url: URL): Promise<WebAssembly.Module> {
  if (url.protocol === "file:" && typeof Deno !== "undefined") {
    // Deno's fetch of a file: URL reads it too, but a missing file is then a TypeError that
    // does not say whether the file or the permission is missing.
    return new WebAssembly.Module(await Deno.readFile(fileUrlToPath(url)));
  }
  const response = await fetch(url);
  if (!response.ok) throw new GraftError(`${url.href}: HTTP ${response.status}`);
  const compile = WebAssembly.compileStreaming;
  const type = response.headers.get("content-type") ?? "";
  // Streaming compilation needs the wasm MIME type; a server that says otherwise still works.
  if (typeof compile === "function" && type.startsWith("application/wasm")) {
    return await compile(response);
  }
  return await WebAssembly.compile(await response.arrayBuffer());
}

async function compileFrom(
  options: WasmLoadOptions,
): Promise<{ module: WebAssembly.Module; from: string; build: string }> {
  const source = options.source;
  if (source instanceof WebAssembly.Module) {
    return { module: source, from: "the given module", build: "given" };
  }
  if (source instanceof ArrayBuffer || ArrayBuffer.isView(source)) {
    return { module: await WebAssembly.compile(source), from: "the given bytes", build: "given" };
  }
  const threads = (options.threads ?? 1) > 1 && wasmThreadsAvailable();
  const urls = source !== undefined
    ? [new URL(source)]
    : wasmCandidates(preferredWasmBuild(), threads);
  const failures: string[] = [];
  for (const url of urls) {
    try {
      const build = source !== undefined ? "given" : buildOf(url);
      return { module: await fetchModule(url), from: url.href, build };
    } catch (error) {
      if (typeof Deno !== "undefined" && error instanceof Deno.errors.NotCapable) {
        failures.push(
          `${url.href} (no read permission: run Deno with --allow-read, or pass the module's ` +
            `bytes as \`source\`)`,
        );
      } else {
        failures.push(`${url.href} (${error instanceof Error ? error.message : String(error)})`);
      }
    }
  }
  throw new LibraryLoadError(
    `Graft's WebAssembly core was not found. Tried: ${failures.join("; ")}. In a checkout, ` +
      "build it with `deno task wasm`.",
  );
}

async function instantiate(options: WasmLoadOptions): Promise<NativeCore> {
  const { module, from, build } = await compileFrom(options);
  // The threaded build imports its memory: one shared memory for the instance and its workers.
  const shared = WebAssembly.Module.imports(module).some((entry) => entry.kind === "memory");
  const imports: WebAssembly.Imports = shared
    ? {
      env: {
        memory: new WebAssembly.Memory({
          initial: INITIAL_PAGES,
          maximum: MAXIMUM_PAGES,
          shared: true,
        }),
      },
    }
    : {};
  let instance: WebAssembly.Instance;
  try {
    instance = await WebAssembly.instantiate(module, imports);
  } catch (cause) {
    throw new LibraryLoadError(
      `Graft's WebAssembly core from ${from} could not be instantiated (this engine may lack ` +
        `SIMD128): ${String(cause)}`,
      { cause },
    );
  }
  const memory = shared ? imports.env!.memory as WebAssembly.Memory : undefined;
  const core = wrapInstance(instance, from, memory);
  const version = core.graft_abi_version();
  if (version !== ABI_VERSION) {
    throw new LibraryLoadError(
      `${from} speaks ABI ${version}, this binding needs ${ABI_VERSION}: rebuild it with ` +
        "`deno task wasm`",
    );
  }
  const mismatches = compareTables(nativeTables(core));
  if (mismatches.length > 0) {
    throw new LibraryLoadError(
      `${from} disagrees with this binding's tables (${mismatches.join("; ")}): rebuild it ` +
        "with `deno task wasm`",
    );
  }
  loadedBuild = build;
  crewState = shared
    ? { module, memory: memory!, exports: instance.exports, workers: [], stacks: [] }
    : null;
  return core;
}

/** The instance's exports as the core's functions, each argument marshalled as its symbol says. */
function wrapInstance(
  instance: WebAssembly.Instance,
  from: string,
  imported?: WebAssembly.Memory,
): NativeCore {
  const exports = instance.exports;
  const memory = imported ?? exports.memory;
  const alloc = exports.graft_wasm_alloc;
  const free = exports.graft_wasm_free;
  if (
    !(memory instanceof WebAssembly.Memory) || typeof alloc !== "function" ||
    typeof free !== "function"
  ) {
    throw new LibraryLoadError(`${from} is not Graft's WebAssembly core (no memory or scratch)`);
  }
  const scratch = (size: number): number => {
    const address = (alloc as Exported)(size) >>> 0;
    if (address === 0) {
      throw new GraftError(`the WebAssembly core's memory cannot hold ${size} more bytes`);
    }
    return address;
  };
  const release = (block: ScratchBlock): void => {
    (free as Exported)(block.address, block.view.byteLength);
  };

  const core: Record<string, unknown> = {};
  for (const [key, definition] of Object.entries(symbols)) {
    const exportName = "name" in definition ? definition.name : key;
    const exported = exports[exportName];
    if (typeof exported !== "function") {
      throw new LibraryLoadError(`${from} lacks the export ${exportName}: rebuild it`);
    }
    const parameters: readonly string[] = definition.parameters;
    const unsigned = definition.result === "u32";
    const directions = DIRECTIONS[exportName] ?? {};
    const call = (...args: unknown[]): number => {
      const blocks: ScratchBlock[] = [];
      try {
        const wasmArgs = parameters.map((type, index): number | bigint => {
          const value = args[index];
          if (type !== "buffer") return value as number | bigint;
          if (value === null || value === undefined) return 0;
          const view = value as ArrayBufferView;
          const direction = directions[index] ?? "inout";
          const address = scratch(view.byteLength);
          blocks.push({ address, view, direction });
          if (direction !== "out") {
            new Uint8Array(memory.buffer, address, view.byteLength).set(bytesOf(view));
          }
          return address;
        });
        const result = (exported as Exported)(...wasmArgs);
        // The call may have grown the memory: take its buffer again.
        for (const block of blocks) {
          if (block.direction === "in") continue;
          const out = new Uint8Array(memory.buffer, block.address, block.view.byteLength);
          bytesOf(block.view).set(out);
        }
        return unsigned ? result >>> 0 : result;
      } finally {
        for (const block of blocks) release(block);
      }
    };
    // A wasm call cannot run off the calling thread: the async form computes, then resolves.
    core[key] = "nonblocking" in definition && definition.nonblocking
      ? (...args: unknown[]): Promise<number> => {
        try {
          return Promise.resolve(call(...args));
        } catch (error) {
          return Promise.reject(error);
        }
      }
      : call;
  }
  return core as NativeCore;
}

// ---------------------------------------------------------------------------------------------
// The threaded build's workers: Web Workers, each an instance of the same module on the same
// shared memory, parked in the core (`graft_wasm_worker`) between jobs. Started when a backend
// asks for threads, stopped when the last such backend is disposed (a live worker keeps a Deno
// process running).

/** The threaded build's memory: 16 MiB at first (as the single-threaded build), up to 4 GiB. */
const INITIAL_PAGES = 256;
const MAXIMUM_PAGES = 65536;
/** Each worker's stack, as the main thread's (build.zig's stack_size). */
const WORKER_STACK_BYTES = 1 << 20;

/**
 * A worker: instantiates the module on the shared memory, moves its stack pointer to its own
 * stack, says it is ready, and runs the core's worker loop until the crew stops. A blob URL, so
 * that neither the bundle nor a JSR import needs a worker file beside it.
 */
const WORKER_SOURCE = `
self.onmessage = (event) => {
  const { module, memory, index, stackTop } = event.data;
  const instance = new WebAssembly.Instance(module, { env: { memory } });
  instance.exports.graft_wasm_set_stack(stackTop);
  self.postMessage({ ready: index });
  const status = instance.exports.graft_wasm_worker(index);
  self.postMessage({ stopped: index, status });
  self.close();
};
`;

interface CrewState {
  module: WebAssembly.Module;
  memory: WebAssembly.Memory;
  exports: WebAssembly.Exports;
  workers: Worker[];
  /** Each worker's stack (graft_wasm_alloc), freed once the workers have stopped. */
  stacks: number[];
}

let crewState: CrewState | null = null;
/** Backends holding the crew (see {@link acquireWasmThreads}). */
let crewHolders = 0;

/** The most threads a WebAssembly backend can have now: 1 unless the threaded build loaded. */
export function wasmThreadsMax(): number {
  if (!crewState) return 1;
  return crewState.workers.length > 0 ? crewState.workers.length + 1 : 64;
}

function exported(name: string): Exported {
  const fn = crewState?.exports[name];
  if (typeof fn !== "function") throw new LibraryLoadError(`the threaded core lacks ${name}`);
  return fn as Exported;
}

/**
 * Reserves `threads` threads of the threaded core for a backend, starting `threads - 1`
 * workers if none run. Resolves with the threads granted: `threads`, or 1 where the core is
 * single-threaded (the fallback). Rejects when the running workers are fewer than asked.
 * Each call that granted more than 1 is paired with {@link releaseWasmThreads}.
 */
export async function acquireWasmThreads(threads: number): Promise<number> {
  if (threads <= 1 || !crewState) return 1;
  const state = crewState;
  if (state.workers.length === 0) {
    const status = exported("graft_wasm_crew_init")(threads - 1);
    if (status !== 0) {
      throw new GraftError(`the WebAssembly core's crew of ${threads - 1}: ${status}`);
    }
    const url = URL.createObjectURL(new Blob([WORKER_SOURCE], { type: "text/javascript" }));
    const ready: Promise<void>[] = [];
    for (let index = 1; index < threads; index++) {
      const stack = (exported("graft_wasm_alloc")(WORKER_STACK_BYTES) as number) >>> 0;
      if (stack === 0) throw new GraftError("no memory for a WebAssembly worker's stack");
      state.stacks.push(stack);
      const worker = new Worker(url, { type: "module" });
      ready.push(
        new Promise((resolve, reject) => {
          worker.onmessage = () => resolve();
          worker.onerror = (event) => {
            event.preventDefault();
            reject(new GraftError(`a WebAssembly worker failed to start: ${event.message}`));
          };
        }),
      );
      worker.postMessage({
        module: state.module,
        memory: state.memory,
        index,
        stackTop: stack + WORKER_STACK_BYTES,
      });
      state.workers.push(worker);
    }
    await Promise.all(ready);
    URL.revokeObjectURL(url);
    for (const worker of state.workers) worker.onmessage = null;
  } else if (threads > state.workers.length + 1) {
    throw new GraftError(
      `the WebAssembly core runs ${state.workers.length + 1} threads; ${threads} were asked ` +
        "(dispose the backends using them first)",
    );
  }
  crewHolders++;
  return threads;
}

/** Releases a reservation of {@link acquireWasmThreads}; the last one stops the workers. */
export function releaseWasmThreads(): void {
  if (!crewState || crewHolders === 0) return;
  crewHolders--;
  if (crewHolders > 0) return;
  // The core wakes the workers and waits (spinning) until each has left its loop; each then
  // closes itself.
  exported("graft_wasm_crew_stop")();
  for (const stack of crewState.stacks) exported("graft_wasm_free")(stack, WORKER_STACK_BYTES);
  crewState.workers = [];
  crewState.stacks = [];
}
