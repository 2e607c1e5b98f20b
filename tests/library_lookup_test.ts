/**
 * Finding and loading the native library: the order of the places (option, GRAFT_LIB, the
 * checkout, the npm platform package), missing permissions naming their flag, a checkout whose
 * path has spaces still finding its build, a module loaded over http finding the library in
 * its platform package from an npm registry (a small one served here) or listing every place
 * it tried. Each case runs in a child Deno with exactly the permissions it is about.
 */

import assert from "node:assert/strict";
import {
  candidates,
  CORE_VERSION,
  fileUrlToPath,
  PLATFORM_PACKAGES,
  platformPackage,
  platformSpecifier,
} from "../src/core/lookup.ts";

const canRun = Deno.permissions.querySync({ name: "run" }).state === "granted";
const canServe = Deno.permissions.querySync({ name: "net", host: "127.0.0.1" }).state === "granted";
const root = new URL("../", import.meta.url);
const modUrl = new URL("mod.ts", root).href;

const probe = (mod: string): string => `
  import * as g from ${JSON.stringify(mod)};
  try { const cpu = new g.CpuBackend({ threads: 1 }); cpu.dispose(); console.log("ok"); }
  catch (e) { console.log(e.name + ": " + e.message); }
`;

/** Runs `script` with `deno run` and exactly `flags` (`deno eval` would grant everything). */
async function child(
  flags: string[],
  script: string,
  env: Record<string, string> = {},
): Promise<string> {
  const file = await Deno.makeTempFile({ suffix: ".ts" });
  await Deno.writeTextFile(file, script);
  const output = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--no-prompt", ...flags, file],
    env,
    stdout: "piped",
    stderr: "piped",
  }).output();
  await Deno.remove(file);
  const stderr = new TextDecoder().decode(output.stderr);
  assert.equal(output.code, 0, stderr);
  return new TextDecoder().decode(output.stdout).trim();
}

Deno.test({
  name: "without --allow-ffi the error names --allow-ffi (was: library not found)",
  ignore: !canRun,
  fn: async () => {
    const out = await child(["--allow-read", "--allow-env"], probe(modUrl));
    assert.match(out, /^LibraryLoadError: .*--allow-ffi/);
  },
});

Deno.test({
  name: "without --allow-read the error names --allow-read (was: library not found)",
  ignore: !canRun,
  fn: async () => {
    const out = await child(["--allow-ffi", "--allow-env"], probe(modUrl));
    assert.match(out, /^LibraryLoadError: .*--allow-read/);
  },
});

Deno.test({
  name: "a checkout whose path has spaces finds its build output",
  ignore: !canRun,
  fn: async () => {
    const dir = await Deno.makeTempDir({ prefix: "graft lookup with spaces " });
    try {
      // The modules and the built library, laid out as in a checkout.
      const copy = async (from: URL, to: string): Promise<void> => {
        for await (const entry of Deno.readDir(from)) {
          const source = new URL(entry.name + (entry.isDirectory ? "/" : ""), from);
          if (entry.isDirectory) {
            await Deno.mkdir(`${to}/${entry.name}`, { recursive: true });
            await copy(source, `${to}/${entry.name}`);
          } else if (entry.name.endsWith(".ts")) {
            await Deno.copyFile(source, `${to}/${entry.name}`);
          }
        }
      };
      await Deno.mkdir(`${dir}/src`, { recursive: true });
      await copy(new URL("src/", root), `${dir}/src`);
      await Deno.copyFile(new URL("mod.ts", root), `${dir}/mod.ts`);
      await Deno.mkdir(`${dir}/zig-out/lib`, { recursive: true });
      await Deno.copyFile(
        new URL("zig-out/lib/libgraft.so", root),
        `${dir}/zig-out/lib/libgraft.so`,
      );
      const mod = new URL(`file://${encodeURI(`${dir}/mod.ts`)}`).href;
      assert.match(mod, /%20/, "the module URL escapes the spaces");
      const out = await child(["-A"], probe(mod), { GRAFT_LIB: "" });
      assert.equal(out, "ok");
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

/**
 * Serves the repository's modules at `/` and a small npm registry at `/npm/`: the packument
 * and tarball of `packages` (name -> files), or 404 for any other package.
 */
function serve(packages: Map<string, Map<string, Uint8Array<ArrayBuffer>>> = new Map()): {
  port: number;
  registry: string;
  stop: () => Promise<void>;
} {
  const controller = new AbortController();
  const tarballs = new Map<string, Promise<Uint8Array<ArrayBuffer>>>();
  let registry = "";
  const server: Deno.HttpServer<Deno.NetAddr> = Deno.serve(
    { hostname: "127.0.0.1", port: 0, signal: controller.signal, onListen: () => {} },
    async (request): Promise<Response> => {
      const path = decodeURIComponent(new URL(request.url).pathname);
      if (path.startsWith("/npm/")) {
        return await npmResponse(path.slice("/npm/".length), registry, packages, tarballs);
      }
      try {
        const body = await Deno.readTextFile(new URL(`.${path}`, root));
        return new Response(body, { headers: { "content-type": "application/typescript" } });
      } catch {
        return new Response("not found", { status: 404 });
      }
    },
  );
  const { port } = server.addr;
  registry = `http://127.0.0.1:${port}/npm/`;
  return {
    port,
    registry: `http://127.0.0.1:${port}/npm/`,
    stop: async () => {
      controller.abort();
      await server.finished;
    },
  };
}

/** The npm registry's two answers: a package's packument, or its tarball (`<name>.tgz`). */
async function npmResponse(
  path: string,
  registry: string,
  packages: Map<string, Map<string, Uint8Array<ArrayBuffer>>>,
  tarballs: Map<string, Promise<Uint8Array<ArrayBuffer>>>,
): Promise<Response> {
  const name = path.replace(/\.tgz$/, "");
  const files = packages.get(name);
  if (!files) return new Response(JSON.stringify({ error: "not found" }), { status: 404 });
  if (!tarballs.has(name)) tarballs.set(name, tgz(files));
  const tarball = await tarballs.get(name)!;
  if (path.endsWith(".tgz")) return new Response(tarball);
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-512", tarball));
  const integrity = `sha512-${btoa(String.fromCharCode(...digest))}`;
  const version = {
    name,
    version: CORE_VERSION,
    dist: { tarball: `${registry}${name}.tgz`, integrity },
  };
  return Response.json({
    name,
    "dist-tags": { latest: CORE_VERSION },
    versions: { [CORE_VERSION]: version },
    time: { [CORE_VERSION]: "2020-01-01T00:00:00.000Z" },
  });
}

/** A gzipped ustar archive of `files` under `package/`, as npm packs them. */
async function tgz(files: Map<string, Uint8Array<ArrayBuffer>>): Promise<Uint8Array<ArrayBuffer>> {
  const blocks: Uint8Array<ArrayBuffer>[] = [];
  const encoder = new TextEncoder();
  for (const [name, data] of files) {
    const header = new Uint8Array(512);
    const field = (offset: number, text: string): void => header.set(encoder.encode(text), offset);
    field(0, `package/${name}`);
    field(100, "0000644\0");
    field(108, "0000000\0");
    field(116, "0000000\0");
    field(124, data.length.toString(8).padStart(11, "0") + "\0");
    field(136, "00000000000\0");
    field(148, "        "); // the checksum counts its own field as spaces
    field(156, "0");
    field(257, "ustar\0");
    field(263, "00");
    const sum = header.reduce((total, byte) => total + byte, 0);
    field(148, sum.toString(8).padStart(6, "0") + "\0 ");
    blocks.push(header, data, new Uint8Array((512 - (data.length % 512)) % 512));
  }
  blocks.push(new Uint8Array(1024));
  const stream = new Blob(blocks).stream().pipeThrough(new CompressionStream("gzip"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

Deno.test({
  name: "a module loaded over http with no library anywhere lists every place it tried",
  ignore: !canRun || !canServe,
  fn: async () => {
    const server = serve(); // its registry has no packages
    const denoDir = await Deno.makeTempDir({ prefix: "graft-lookup-deno-dir-" });
    try {
      const out = await child(
        [`--allow-import=127.0.0.1:${server.port}`, "--allow-ffi", "--allow-read", "--allow-env"],
        probe(`http://127.0.0.1:${server.port}/mod.ts`),
        { GRAFT_LIB: "", NPM_CONFIG_REGISTRY: server.registry, DENO_DIR: denoDir },
      );
      const entry = platformPackage(Deno.build.os, Deno.build.arch);
      assert.match(
        out,
        /^LibraryLoadError: Graft's native library was not found\. Tried, in order/,
      );
      assert.match(out, /1\. the library\.path option: not given; 2\. GRAFT_LIB: empty; /);
      assert.match(out, /3\. the checkout's build output: none: this module was loaded from http/);
      if (entry) {
        assert.ok(
          out.includes(`4. the platform package ${platformSpecifier(entry)}: importing`),
          out,
        );
      }
      assert.match(out, /To fix: .*set GRAFT_LIB/);
    } finally {
      await server.stop();
      await Deno.remove(denoDir, { recursive: true });
    }
  },
});

Deno.test({
  name: "a module loaded over http loads the library from its npm platform package",
  ignore: !canRun || !canServe || platformPackage(Deno.build.os, Deno.build.arch) === null,
  fn: async () => {
    const entry = platformPackage(Deno.build.os, Deno.build.arch)!;
    const library = await Deno.readFile(new URL(`zig-out/lib/${entry.file}`, root));
    const encoder = new TextEncoder();
    const manifest = { name: entry.name, version: CORE_VERSION, type: "module", main: "index.js" };
    const files = new Map([
      ["package.json", encoder.encode(JSON.stringify(manifest))],
      ["index.js", encoder.encode(`export const library = ${JSON.stringify(entry.file)};\n`)],
      [entry.file, library],
    ]);
    const server = serve(new Map([[entry.name, files]]));
    const denoDir = await Deno.makeTempDir({ prefix: "graft-lookup-deno-dir-" });
    try {
      // No --allow-net: Deno fetches the npm package as it loads modules.
      const out = await child(
        [`--allow-import=127.0.0.1:${server.port}`, "--allow-ffi", "--allow-read", "--allow-env"],
        probe(`http://127.0.0.1:${server.port}/mod.ts`) +
          `const { candidatePaths } = await import("http://127.0.0.1:${server.port}/src/core/ffi.ts");
           console.log(candidatePaths().join("\\n"));`,
        { GRAFT_LIB: "", NPM_CONFIG_REGISTRY: server.registry, DENO_DIR: denoDir },
      );
      const [status, path] = out.split("\n");
      assert.equal(status, "ok");
      assert.ok(path?.startsWith(denoDir), `${path} is in Deno's npm cache`);
      assert.ok(path?.endsWith(`/${entry.name}/${CORE_VERSION}/${entry.file}`), path);
    } finally {
      await server.stop();
      await Deno.remove(denoDir, { recursive: true });
    }
  },
});

Deno.test({
  name: "the places are tried in the written order: option, GRAFT_LIB, checkout, platform package",
  ignore: !canRun,
  fn: async () => {
    const lookup = new URL("src/core/lookup.ts", root).href;
    const out = await child(
      ["--allow-env", "--allow-read"],
      `import { candidates } from ${JSON.stringify(lookup)};
       console.log(JSON.stringify(candidates({ path: "/explicit/libgraft.so" })));`,
      { GRAFT_LIB: "/from/env/libgraft.so" },
    );
    const places = JSON.parse(out) as { place: string; path?: string; note?: string }[];
    assert.deepEqual(places.map((c) => c.place.split(" npm:")[0]), [
      "the library.path option",
      "GRAFT_LIB",
      "the checkout's build output",
      "the platform package",
    ]);
    assert.equal(places[0]!.path, "/explicit/libgraft.so");
    assert.equal(places[1]!.path, "/from/env/libgraft.so");
    assert.ok(places[2]!.path?.endsWith("/zig-out/lib/libgraft.so"), places[2]!.path);
    // Without --allow-ffi the platform package is not imported (such a Deno uses WebAssembly).
    assert.equal(places[3]!.path, undefined);
    assert.match(places[3]!.note ?? "", /not imported/);
  },
});

Deno.test("every platform has a package whose manifest matches the loader's table", async () => {
  const config = JSON.parse(await Deno.readTextFile(new URL("deno.json", root))) as {
    version: string;
  };
  assert.equal(CORE_VERSION, config.version, "the platform packages follow the JSR version");
  const builds: [string, string][] = [
    ["linux", "x86_64"],
    ["linux", "aarch64"],
    ["darwin", "x86_64"],
    ["darwin", "aarch64"],
    ["windows", "x86_64"],
  ];
  for (const [os, arch] of builds) assert.ok(platformPackage(os, arch), `${os}/${arch}`);
  assert.equal(platformPackage("freebsd", "x86_64"), null);
  assert.equal(platformPackage("linux", "riscv64"), null);
  for (const entry of PLATFORM_PACKAGES) {
    const dir = new URL(`npm/${entry.name.replace("@graft/", "")}/`, root);
    const manifest = JSON.parse(await Deno.readTextFile(new URL("package.json", dir))) as {
      name: string;
      version: string;
      os: string[];
      cpu: string[];
      files: string[];
    };
    assert.equal(manifest.name, entry.name);
    assert.equal(manifest.version, CORE_VERSION, `${entry.name}'s version`);
    assert.deepEqual(manifest.os, [entry.os]);
    assert.deepEqual(manifest.cpu, [entry.cpu]);
    assert.ok(manifest.files.includes(entry.file), `${entry.name} ships ${entry.file}`);
    const index = await Deno.readTextFile(new URL("index.js", dir));
    assert.ok(index.includes(JSON.stringify(entry.file)), `${entry.name}'s index.js names it`);
  }
  assert.equal(
    platformSpecifier(PLATFORM_PACKAGES[0]!, "libgraft.so"),
    `npm:@graft/core-linux-x64@${CORE_VERSION}/libgraft.so`,
  );
});

Deno.test("fileUrlToPath decodes escapes and drops a Windows drive's leading slash", () => {
  assert.equal(fileUrlToPath(new URL("file:///a%20b/lib.so")), "/a b/lib.so");
  assert.equal(fileUrlToPath(new URL("file:///C:/Users/x/graft.dll")), "C:/Users/x/graft.dll");
  assert.throws(() => fileUrlToPath(new URL("https://jsr.io/x.so")), TypeError);
  assert.ok(candidates().length === 4);
});
