/**
 * End to end, as a user gets Graft: the platform package, packed from `zig build dist`'s
 * library, is published to a local npm registry (verdaccio, pinned, installed into
 * ~/.cache/graft/verdaccio); a local HTTP server serves exactly the files `deno publish
 * --dry-run` lists; a consumer in a temporary directory, with no Zig on PATH, no checkout, no
 * GRAFT_LIB and an empty Deno cache, imports `mod.ts` over http and computes a small graph on
 * the CPU, which must match a float64 reference. Run as `deno task test:consumer` (it builds
 * the library first; see `platform` below for testing another platform's package). Skips, saying why, only where npm or verdaccio cannot be installed.
 */

import assert from "node:assert/strict";
import { packPlatform, platformEntry } from "./npm_pack.ts";

const VERDACCIO_VERSION = "6.8.0";
const root = new URL("../", import.meta.url);
const decoder = new TextDecoder();
/** How long verdaccio may take to answer its first ping. */
const STARTUP_MS_MAX = 60_000;

/** This machine's platform as npm names it: the platform package's suffix. */
function hostPlatform(): string {
  const os = { linux: "linux", darwin: "darwin", windows: "win32" }[Deno.build.os as string];
  const cpu = { x86_64: "x64", aarch64: "arm64" }[Deno.build.arch as string];
  return `${os}-${cpu}`;
}

async function run(
  command: string,
  args: string[],
  options: Deno.CommandOptions = {},
): Promise<{ ok: boolean; stdout: string; stderr: string }> {
  try {
    const output = await new Deno.Command(command, {
      args,
      stdout: "piped",
      stderr: "piped",
      ...options,
    }).output();
    return {
      ok: output.success,
      stdout: decoder.decode(output.stdout),
      stderr: decoder.decode(output.stderr),
    };
  } catch (error) {
    return { ok: false, stdout: "", stderr: String(error) };
  }
}

/**
 * Verdaccio's start script, installed once with `npm i -E` into a cache folder outside the
 * repository; a string saying why when npm or the install is not possible.
 */
async function installVerdaccio(): Promise<{ bin: string } | { skip: string }> {
  const npm = await run("npm", ["--version"]);
  if (!npm.ok) return { skip: `npm is not installed (${npm.stderr.trim()})` };
  const home = Deno.env.get("HOME") ?? Deno.env.get("USERPROFILE");
  if (!home) return { skip: "no HOME folder for the verdaccio cache" };
  const cache = `${home}/.cache/graft/verdaccio`;
  const manifest = `${cache}/node_modules/verdaccio/package.json`;
  const installed = async (): Promise<boolean> => {
    try {
      const { version } = JSON.parse(await Deno.readTextFile(manifest)) as { version: string };
      return version === VERDACCIO_VERSION;
    } catch {
      return false;
    }
  };
  if (!await installed()) {
    await Deno.mkdir(cache, { recursive: true });
    const install = await run("npm", [
      "i",
      "-E",
      "--no-audit",
      "--no-fund",
      "--prefix",
      cache,
      `verdaccio@${VERDACCIO_VERSION}`,
    ]);
    if (!install.ok || !await installed()) {
      return { skip: `npm could not install verdaccio@${VERDACCIO_VERSION}: ${install.stderr}` };
    }
  }
  return { bin: `${cache}/node_modules/verdaccio/bin/verdaccio` };
}

/** A port free right now on 127.0.0.1 (verdaccio takes a port number, not 0). */
function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr as Deno.NetAddr;
  listener.close();
  return port;
}

/** A local npm registry holding `tarball`; stopped by the returned function. */
async function startRegistry(
  bin: string,
  dir: string,
  tarball: string,
): Promise<{ url: string; stop: () => Promise<void> }> {
  const port = freePort();
  const url = `http://127.0.0.1:${port}/`;
  await Deno.writeTextFile(
    `${dir}/config.yaml`,
    [
      `storage: ${dir}/storage`,
      "uplinks: {}", // nothing from the public registry: the consumer sees only our package
      "packages:",
      "  '@graft/*':",
      "    access: $all",
      "    publish: $anonymous",
      "  '**':",
      "    access: $all",
      "log: { type: stdout, format: pretty, level: warn }",
      "",
    ].join("\n"),
  );
  const child = new Deno.Command("node", {
    args: [bin, "--config", `${dir}/config.yaml`, "--listen", `127.0.0.1:${port}`],
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).spawn();
  const stop = async (): Promise<void> => {
    try {
      child.kill("SIGTERM");
    } catch {
      // already exited
    }
    await child.status;
  };
  try {
    const deadline = Date.now() + STARTUP_MS_MAX;
    for (;;) {
      try {
        const response = await fetch(`${url}-/ping`);
        await response.body?.cancel();
        if (response.ok) break;
      } catch {
        // not listening yet
      }
      if (Date.now() > deadline) throw new Error(`verdaccio did not answer on ${url}`);
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    await Deno.writeTextFile(`${dir}/npmrc`, `//127.0.0.1:${port}/:_authToken=consumer-test\n`);
    const publish = await run("npm", ["publish", tarball, "--registry", url], {
      env: { NPM_CONFIG_USERCONFIG: `${dir}/npmrc` },
    });
    assert.ok(publish.ok, `npm publish ${tarball}: ${publish.stderr}`);
  } catch (error) {
    await stop();
    throw error;
  }
  return { url, stop };
}

/** The files `deno publish --dry-run` would publish, relative to the repository root. */
async function publishedFiles(): Promise<Set<string>> {
  const result = await run(Deno.execPath(), ["publish", "--dry-run", "--allow-dirty"], {
    cwd: root,
    env: { NO_COLOR: "1" },
  });
  assert.ok(result.ok, `deno publish --dry-run: ${result.stderr}`);
  const files = new Set<string>();
  for (const line of (result.stdout + result.stderr).split("\n")) {
    const match = line.match(/^\s+(file:\/\/\S+) \(/);
    if (match) {
      files.add(decodeURIComponent(new URL(match[1]!).pathname.slice(root.pathname.length)));
    }
  }
  assert.ok(files.has("mod.ts"), `the dry run lists mod.ts: ${[...files].join(", ")}`);
  return files;
}

/** Serves exactly `files` from the repository root; everything else is 404. */
function serveFiles(
  files: Set<string>,
): { url: string; requested: string[]; stop: () => Promise<void> } {
  const requested: string[] = [];
  const controller = new AbortController();
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, signal: controller.signal, onListen: () => {} },
    async (request) => {
      const path = decodeURIComponent(new URL(request.url).pathname.slice(1));
      requested.push(path);
      if (!files.has(path)) return new Response("not published", { status: 404 });
      const body = await Deno.readFile(new URL(path, root));
      const type = path.endsWith(".ts") ? "application/typescript" : "application/octet-stream";
      return new Response(body, { headers: { "content-type": type } });
    },
  );
  return {
    url: `http://127.0.0.1:${server.addr.port}/`,
    requested,
    stop: async () => {
      controller.abort();
      await server.finished;
    },
  };
}

/** The consumer's program: y = silu(w·x) + b for small odd shapes, printed as JSON. */
function consumerSource(modUrl: string): string {
  return `
import { add, allocTensors, Context, CpuBackend, Graph, mulMat, silu } from ${
    JSON.stringify(modUrl)
  };
const K = 5, M = 3, N = 2;
const fill = (n, f) => Float32Array.from({ length: n }, (_, i) => f(i));
using cpu = new CpuBackend({ threads: 2 });
const ctx = new Context();
const w = ctx.newTensor("f32", [K, M]);
const x = ctx.newTensor("f32", [K, N]);
const b = ctx.newTensor("f32", [M, N]);
const y = add(silu(mulMat(w, x)), b);
const graph = Graph.build(y);
using weights = allocTensors(cpu, ctx.tensors);
using activations = allocTensors(cpu, graph.nodes);
cpu.setTensor(w, fill(K * M, (i) => ((i * 7) % 11) / 10 - 0.5));
cpu.setTensor(x, fill(K * N, (i) => ((i * 5) % 9) / 8 - 0.5));
cpu.setTensor(b, fill(M * N, (i) => i / 4));
cpu.graphCompute(graph);
console.log(JSON.stringify(Array.from(cpu.getTensor(y))));
`;
}

/** The same computation in float64. */
function reference(): number[] {
  const K = 5, M = 3, N = 2;
  const w = (i: number): number => Math.fround(((i * 7) % 11) / 10 - 0.5);
  const x = (i: number): number => Math.fround(((i * 5) % 9) / 8 - 0.5);
  const out: number[] = [];
  for (let n = 0; n < N; n++) {
    for (let m = 0; m < M; m++) {
      let dot = 0;
      for (let k = 0; k < K; k++) dot += w(m * K + k) * x(n * K + k);
      out.push(dot / (1 + Math.exp(-dot)) + (n * M + m) / 4);
    }
  }
  return out;
}

/** PATH without any folder that holds a `zig`: the consumer must not need one. */
async function pathWithoutZig(): Promise<string> {
  const kept: string[] = [];
  for (const dir of (Deno.env.get("PATH") ?? "").split(":")) {
    try {
      await Deno.stat(`${dir}/zig`);
    } catch {
      if (dir) kept.push(dir);
    }
  }
  return kept.join(":");
}

/** Every file named `name` under `dir`. */
async function findFiles(dir: string, name: string): Promise<string[]> {
  const found: string[] = [];
  for await (const entry of Deno.readDir(dir)) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory) found.push(...await findFiles(path, name));
    else if (entry.name === name) found.push(path);
  }
  return found;
}

/**
 * The platform package to test and the Deno that runs the consumer: this machine's, unless
 * GRAFT_CONSUMER_PLATFORM and GRAFT_CONSUMER_DENO (a command, its words split on spaces) name
 * another, e.g. `linux-arm64` with `qemu-aarch64-static -L /usr/aarch64-linux-gnu /path/to/deno`
 * to check the arm64 package in an aarch64 Deno under emulation.
 */
const platform = Deno.env.get("GRAFT_CONSUMER_PLATFORM") || hostPlatform();
const [consumerDeno, ...consumerDenoArgs] = (Deno.env.get("GRAFT_CONSUMER_DENO") || Deno.execPath())
  .split(" ").filter((word) => word !== "");
const setup = await installVerdaccio();
if ("skip" in setup) console.warn(`consumer test skipped: ${setup.skip}`);

Deno.test({
  name: `a consumer imports mod.ts over http and loads ${platformEntry(platform).name} from npm`,
  ignore: "skip" in setup,
  sanitizeResources: false,
  fn: async () => {
    if ("skip" in setup) return;
    const work = await Deno.makeTempDir({ prefix: "graft-consumer-" });
    const cleanups: (() => Promise<void>)[] = [];
    try {
      const tarball = await packPlatform(platform, `${work}/packed`);
      await Deno.mkdir(`${work}/registry`);
      const registry = await startRegistry(setup.bin, `${work}/registry`, tarball);
      cleanups.push(registry.stop);
      const files = await publishedFiles();
      const server = serveFiles(files);
      cleanups.push(server.stop);

      const consumer = `${work}/consumer`;
      await Deno.mkdir(consumer);
      await Deno.writeTextFile(`${consumer}/main.ts`, consumerSource(`${server.url}mod.ts`));
      const host = new URL(server.url).host;
      const path = await pathWithoutZig();
      const result = await run(consumerDeno!, [
        ...consumerDenoArgs,
        "run",
        "--no-prompt",
        "--no-config",
        "--min-dep-age=0", // the package was published a moment ago
        `--allow-import=${host}`,
        "--allow-ffi",
        "--allow-read",
        "--allow-env",
        "main.ts",
      ], {
        cwd: consumer,
        clearEnv: true,
        env: {
          PATH: path,
          HOME: consumer,
          DENO_DIR: `${work}/deno_dir`,
          NPM_CONFIG_REGISTRY: registry.url,
          NO_COLOR: "1",
        },
      });
      assert.ok(result.ok, `the consumer ran: ${result.stderr}\n${result.stdout}`);
      const got = JSON.parse(result.stdout.trim()) as number[];
      const want = reference();
      assert.equal(got.length, want.length);
      for (let i = 0; i < want.length; i++) {
        assert.ok(Math.abs(got[i]! - want[i]!) <= 1e-5, `y[${i}] = ${got[i]}, want ${want[i]}`);
      }
      // Every module it fetched was in the published file set.
      const unpublished = server.requested.filter((p) => !files.has(p));
      assert.deepEqual(unpublished, [], "the consumer asked only for published files");
      // The library came from the npm cache (no checkout, no GRAFT_LIB: nowhere else to go).
      const cached = await findFiles(`${work}/deno_dir`, platformEntry(platform).file);
      assert.ok(
        cached.some((path) => /[/\\]npm[/\\].*@graft[/\\]core-/.test(path)),
        `the library is in Deno's npm cache: ${cached.join(", ")}`,
      );
    } finally {
      for (const cleanup of cleanups.reverse()) await cleanup();
      await Deno.remove(work, { recursive: true });
    }
  },
});
