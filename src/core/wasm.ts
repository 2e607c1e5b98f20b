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

const BUILD_FILES: Record<WasmBuild, string> = {
  simd128: "graft.wasm",
  relaxed: "graft-relaxed.wasm",
};

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
export function wasmCandidates(build: WasmBuild = preferredWasmBuild()): URL[] {
  const builds: WasmBuild[] = build === "relaxed" ? ["relaxed", "simd128"] : ["simd128"];
  return builds.flatMap((name) => {
    const file = BUILD_FILES[name];
    const beside = new URL(`./${file}`, import.meta.url);
    const built = new URL(`../../zig-out/wasm/${file}`, import.meta.url);
    return built.protocol === "file:" ? [built, beside] : [beside];
  });
}

/** The build a candidate URL holds. */
function buildOf(url: URL): WasmBuild {
  return url.pathname.endsWith(BUILD_FILES.relaxed) ? "relaxed" : "simd128";
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
  const urls = source !== undefined ? [new URL(source)] : wasmCandidates();
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
  let instance: WebAssembly.Instance;
  try {
    instance = await WebAssembly.instantiate(module, {});
  } catch (cause) {
    throw new LibraryLoadError(
      `Graft's WebAssembly core from ${from} could not be instantiated (this engine may lack ` +
        `SIMD128): ${String(cause)}`,
      { cause },
    );
  }
  const core = wrapInstance(instance, from);
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
  return core;
}

/** The instance's exports as the core's functions, each argument marshalled as its symbol says. */
function wrapInstance(instance: WebAssembly.Instance, from: string): NativeCore {
  const exports = instance.exports;
  const memory = exports.memory;
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
