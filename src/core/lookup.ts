/**
 * Where the native library comes from, in one written order (the README's "Install / native
 * library lookup" says the same):
 *
 * 1. the `path` option (`new CpuBackend({ library: { path } })`),
 * 2. the `GRAFT_LIB` environment variable,
 * 3. the checkout's build output (`zig-out/lib/libgraft.so`), when this module was loaded from a
 *    `file:` URL (a checkout or a local copy of one),
 * 4. the platform package, `npm:@graft/core-<os>-<cpu>@<version>`: the npm package holding the
 *    library prebuilt for this OS and CPU (the esbuild/swc convention).
 *
 * The first that names an existing file is loaded; when none does, the error lists every place
 * and what it found there. The platform package is imported lazily, once, when this module is
 * evaluated in Deno with FFI permitted and no earlier place has a file: Deno fetches npm
 * packages as it loads modules, so this needs no `--allow-net` at run time, and afterwards
 * `import.meta.resolve` of a file in the package gives its path in Deno's npm cache. Only this
 * platform's package is ever imported (its name is computed, so Deno does not prefetch the
 * others). Nothing here opens the library: `ffi.ts` does.
 * @module
 */

/**
 * The version of the platform packages this binding loads. It is the JSR package's version
 * (`deno.json`), and every `npm/core-*` package carries it: `tests/library_lookup_test.ts`
 * checks all three agree, since a library from another version fails the ABI/table check.
 */
export const CORE_VERSION = "0.1.0";

/** Where to find the library; see the module doc for the order. */
export interface LoadOptions {
  /** An explicit path to the library (`libgraft.so`, `libgraft.dylib`, `graft.dll`); first. */
  path?: string;
}

/** One place the lookup tried: what it is, the path it gave (if any), and what was found. */
export interface Candidate {
  /** The place, as the error names it, e.g. `GRAFT_LIB` or `the platform package npm:...`. */
  place: string;
  /** The file it names; absent when the place gave no path (unset variable, failed import). */
  path?: string;
  /** Why the place gave no path, when it gave none. */
  note?: string;
}

/** The npm platform package for one OS and CPU, and the library's file name inside it. */
export interface PlatformPackage {
  /** The npm package name, e.g. `@graft/core-linux-x64`. */
  name: string;
  /** The library's file name in the package (and in `zig-out/`). */
  file: string;
  /** The npm `os` and `cpu` values the package declares (`linux`/`darwin`/`win32`, `x64`/`arm64`). */
  os: string;
  /** See {@link PlatformPackage.os}. */
  cpu: string;
}

/** Every platform a package is built for: `zig build dist` makes one library for each. */
export const PLATFORM_PACKAGES: readonly PlatformPackage[] = [
  { name: "@graft/core-linux-x64", file: "libgraft.so", os: "linux", cpu: "x64" },
  { name: "@graft/core-linux-arm64", file: "libgraft.so", os: "linux", cpu: "arm64" },
  { name: "@graft/core-darwin-x64", file: "libgraft.dylib", os: "darwin", cpu: "x64" },
  { name: "@graft/core-darwin-arm64", file: "libgraft.dylib", os: "darwin", cpu: "arm64" },
  { name: "@graft/core-win32-x64", file: "graft.dll", os: "win32", cpu: "x64" },
];

/** npm's names for Deno's `Deno.build.os` and `Deno.build.arch` values. */
const NPM_OS: Record<string, string> = { linux: "linux", darwin: "darwin", windows: "win32" };
const NPM_CPU: Record<string, string> = { x86_64: "x64", aarch64: "arm64" };

/**
 * The platform package for an OS and CPU as Deno names them (`Deno.build.os`,
 * `Deno.build.arch`), or null where none is built.
 */
export function platformPackage(os: string, arch: string): PlatformPackage | null {
  const npmOs = NPM_OS[os];
  const npmCpu = NPM_CPU[arch];
  return PLATFORM_PACKAGES.find((entry) => entry.os === npmOs && entry.cpu === npmCpu) ?? null;
}

/** The package's `npm:` specifier at this binding's version, with an optional file inside. */
export function platformSpecifier(entry: PlatformPackage, file?: string): string {
  return `npm:${entry.name}@${CORE_VERSION}${file === undefined ? "" : `/${file}`}`;
}

/**
 * The path of a `file:` URL, percent-escapes decoded (a checkout under "My Files" is
 * `My%20Files` in its URL: `URL.pathname` would keep the escape and find nothing). On Windows
 * the drive letter's leading slash goes.
 */
export function fileUrlToPath(url: URL): string {
  if (url.protocol !== "file:") throw new TypeError(`${url.href} is not a file: URL`);
  if (url.hostname !== "" && url.hostname !== "localhost") {
    throw new TypeError(`${url.href} names a host; only local file: URLs have a path`);
  }
  const path = decodeURIComponent(url.pathname.replace(/%(?![0-9a-fA-F]{2})/g, "%25"));
  return /^\/[A-Za-z]:\//.test(path) ? path.slice(1) : path;
}

function readEnv(name: string): string | undefined {
  try {
    return Deno.env.get(name);
  } catch {
    // Without --allow-env the variable is simply not consulted.
    return undefined;
  }
}

/** This OS's library file name as `zig build` installs it, and the folder it goes in. */
function builtLibrary(safe: boolean): string {
  const base = safe ? "graft-safe" : "graft";
  if (Deno.build.os === "windows") return `bin/${base}.dll`; // Zig installs DLLs in bin/
  return `lib/lib${base}.${Deno.build.os === "darwin" ? "dylib" : "so"}`;
}

/**
 * The checkout's build output, when `base` (this module's URL) is a `file:` URL; null for a
 * module loaded over http(s), as from JSR, which has no checkout beside it.
 */
export function checkoutLibrary(base: string = import.meta.url, safe = false): string | null {
  const built = new URL(`../../zig-out/${builtLibrary(safe)}`, base);
  return built.protocol === "file:" ? fileUrlToPath(built) : null;
}

/** True when `path` is a file; missing read permission is rethrown for the caller to name. */
export function isFile(path: string): boolean {
  try {
    return Deno.statSync(path).isFile;
  } catch (error) {
    if (error instanceof Deno.errors.NotCapable || error instanceof Deno.errors.PermissionDenied) {
      throw error;
    }
    return false;
  }
}

/** The first three places (option, `GRAFT_LIB`, checkout): no import, no I/O. */
function localCandidates(options: LoadOptions): Candidate[] {
  const safe = readEnv("GRAFT_SAFE") === "1";
  const fromEnv = readEnv("GRAFT_LIB");
  const checkout = checkoutLibrary(import.meta.url, safe);
  return [
    options.path
      ? { place: "the library.path option", path: options.path }
      : { place: "the library.path option", note: "not given" },
    fromEnv
      ? { place: "GRAFT_LIB", path: fromEnv }
      : { place: "GRAFT_LIB", note: fromEnv === undefined ? "not set" : "empty" },
    checkout ? { place: "the checkout's build output", path: checkout } : {
      place: "the checkout's build output",
      note: `none: this module was loaded from ${new URL(".", import.meta.url).href}`,
    },
  ];
}

/** What the platform-package step found; set once, when this module is evaluated. */
let platform: Candidate | null = null;

/**
 * Imports this platform's package and resolves its library file. Never throws: a failure is
 * the candidate's note. The specifier is computed, so only this platform's package is fetched.
 */
export async function importPlatformPackage(
  os: string = Deno.build.os,
  arch: string = Deno.build.arch,
): Promise<Candidate> {
  const entry = platformPackage(os, arch);
  if (!entry) {
    return {
      place: "the platform package",
      note: `none is built for ${os}/${arch} (there are: ` +
        `${PLATFORM_PACKAGES.map((p) => p.name).join(", ")})`,
    };
  }
  const place = `the platform package ${platformSpecifier(entry)}`;
  if (readEnv("GRAFT_SAFE") === "1") {
    return { place, note: "it has no bounds-checked build (GRAFT_SAFE=1)" };
  }
  try {
    // `deno publish` warns that it cannot analyze these two specifiers: they are computed on
    // purpose (a literal per platform would make Deno fetch every platform's package), and as
    // complete `npm:` specifiers they need no import map to resolve.
    await import(platformSpecifier(entry));
    const url = new URL(import.meta.resolve(platformSpecifier(entry, entry.file)));
    if (url.protocol !== "file:") {
      return { place, note: `it resolved to ${url.href}, not to a file in Deno's npm cache` };
    }
    return { place, path: fileUrlToPath(url) };
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    return { place, note: `importing it failed: ${message.split("\n")[0]}` };
  }
}

/**
 * Whether the platform step should run as this module loads: in Deno, with FFI permitted (a
 * Deno without it uses WebAssembly), and only when no local place already has a file.
 */
function wantsPlatformPackage(): boolean {
  if (typeof Deno === "undefined" || typeof Deno.dlopen !== "function") return false;
  try {
    if (Deno.permissions.querySync({ name: "ffi" }).state !== "granted") return false;
  } catch {
    return false;
  }
  try {
    return !localCandidates({}).some((c) => c.path !== undefined && isFile(c.path));
  } catch {
    return false; // no read permission: the loader names --allow-read
  }
}

if (wantsPlatformPackage()) platform = await importPlatformPackage();

/**
 * Every place, in order: the option, `GRAFT_LIB`, the checkout, then the platform package (as
 * imported when this module loaded; when that step did not run, because an earlier place had
 * a file then, it says so).
 */
export function candidates(options: LoadOptions = {}): Candidate[] {
  const entry = typeof Deno === "undefined"
    ? null
    : platformPackage(Deno.build.os, Deno.build.arch);
  const skipped: Candidate = {
    place: entry ? `the platform package ${platformSpecifier(entry)}` : "the platform package",
    note: "not imported: an earlier place had a file, or FFI was not permitted, when Graft loaded",
  };
  return [...localCandidates(options), platform ?? skipped];
}

/** What to do when no place has a library, for the error message. */
export function lookupHint(): string {
  const entry = typeof Deno === "undefined"
    ? null
    : platformPackage(Deno.build.os, Deno.build.arch);
  const fromPackage = entry
    ? `let Deno fetch ${platformSpecifier(entry)} from npm (it needs network access to the ` +
      `npm registry the first time, and \`--min-dep-age\` must not exclude it), `
    : "";
  return `To fix: ${fromPackage}set GRAFT_LIB to a library built with \`zig build\`, or in a ` +
    "checkout build it with `./scripts/zig build` (or `deno task build`).";
}
