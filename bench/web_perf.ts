/**
 * `deno task bench:web`: Graft's WebAssembly backend against onnxruntime-web (wasm execution
 * provider) and TensorFlow.js's wasm backend in the same headless Chromium (Debian's
 * `chromium`, driven by puppeteer-core), on sgemm n=512 and the demo's transformer block, with
 * one thread and with several (each thread count is its own page load, since the peers fix
 * theirs when their wasm starts). The page (web/bench/) is bundled here with esbuild into
 * dist/bench.js; the peers are the npm packages pinned in bench/web/package.json (installed by
 * the task with `npm ci`), served from bench/web/node_modules. One line per case and peer, as
 * bench:cpu prints them:
 *   perf <case> graft=<value><unit> <peer>=<value><unit> ratio=<graft/peer>
 * (GFLOP/s for sgemm, higher is better; ms for the block, lower is better.)
 *
 *   deno task bench:web [--threads N]   (N: the multi-threaded runs' count, default up to 4)
 *
 * Chromium: `CHROMIUM` names the binary, else /usr/bin/chromium.
 * @module
 */

import * as esbuild from "npm:esbuild@0.28.2";
import puppeteer from "npm:puppeteer-core@25.16.0";
import { serveFile } from "../tools/web_serve.ts";
import { PerfReport } from "./perf_line.ts";
import type { BenchState } from "../web/bench/bench.ts";
import { chromiumPath } from "../tools/chromium.ts";

const root = new URL("../", import.meta.url);
const peers = new URL("bench/web/node_modules/", root);
const dist = new URL("dist/", root);
const PAGE_TIMEOUT_MS = 600_000;

const TYPES: Record<string, string> = {
  js: "text/javascript; charset=utf-8",
  mjs: "text/javascript; charset=utf-8",
  wasm: "application/wasm",
  map: "application/json",
};

/** The page's files (tools/web_serve.ts) and, under /peers/, the peers' packages. */
async function serve(request: Request): Promise<Response> {
  const pathname = new URL(request.url).pathname;
  if (!pathname.startsWith("/peers/")) return serveFile(pathname);
  const headers = {
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-embedder-policy": "require-corp",
    "cross-origin-resource-policy": "same-origin",
  };
  const path = decodeURIComponent(pathname.slice("/peers/".length));
  if (path.includes("..")) return new Response("not found", { status: 404, headers });
  try {
    const body = await Deno.readFile(new URL(path, peers));
    const type = TYPES[path.split(".").pop() ?? ""] ?? "application/octet-stream";
    return new Response(body, { headers: { ...headers, "content-type": type } });
  } catch {
    return new Response("not found", { status: 404, headers });
  }
}

/** Bundles the page's script and puts the WebAssembly core builds beside it. */
async function bundle(): Promise<void> {
  await Deno.mkdir(dist, { recursive: true });
  const result = await esbuild.build({
    entryPoints: [{ in: new URL("web/bench/bench.ts", root).pathname, out: "bench" }],
    bundle: true,
    format: "esm",
    platform: "neutral",
    target: "es2022",
    minify: true,
    sourcemap: true,
    outdir: dist.pathname,
    logLevel: "error",
  });
  await esbuild.stop();
  if (result.errors.length > 0) throw new Error(`esbuild failed: ${result.errors.length} errors`);
  for await (const entry of Deno.readDir(new URL("zig-out/wasm/", root))) {
    if (entry.name.endsWith(".wasm")) {
      await Deno.copyFile(new URL(`zig-out/wasm/${entry.name}`, root), new URL(entry.name, dist));
    }
  }
}

function loadAverage(): string {
  try {
    return Deno.loadavg().map((x) => x.toFixed(2)).join(" ");
  } catch {
    return "unknown";
  }
}

const PEER_NAMES: Record<string, string> = { ort: "ort_web", tfjs: "tfjs_wasm" };

function report(perf: PerfReport, state: BenchState): void {
  const t = `${state.threads}t`;
  for (const c of state.cases) {
    const graft = c.ms.graft;
    if (graft === undefined) continue;
    for (const [peer, ms] of Object.entries(c.ms)) {
      if (peer === "graft") continue;
      const label = `${PEER_NAMES[peer] ?? peer}_${t}`;
      if (c.flops > 0) {
        const rate = (msPerCall: number): number => c.flops / (msPerCall / 1e3) / 1e9;
        perf.report(`web_${c.name}_${t}`, rate(graft), label, rate(ms), "GFLOP/s");
      } else {
        perf.report(`web_${c.name}_${t}`, graft, label, ms, "ms");
      }
    }
  }
}

async function main(): Promise<void> {
  const at = Deno.args.indexOf("--threads");
  const many = at >= 0
    ? Number(Deno.args[at + 1])
    : Math.max(2, Math.min(4, navigator.hardwareConcurrency));
  await bundle();
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, serve);
  const browser = await puppeteer.launch({
    executablePath: chromiumPath(),
    headless: true,
    args: ["--no-sandbox"],
  });
  const perf = new PerfReport();
  try {
    console.log(`# ${await browser.version()}, load average ${loadAverage()}`);
    for (const threads of [1, many]) {
      const page = await browser.newPage();
      const logs: string[] = [];
      page.on("console", (message) => logs.push(message.text()));
      page.on("pageerror", (error) => logs.push(String(error)));
      await page.goto(
        `http://127.0.0.1:${server.addr.port}/web/bench/index.html?threads=${threads}`,
      );
      await page.waitForFunction("globalThis.benchResults?.done === true", {
        timeout: PAGE_TIMEOUT_MS,
        polling: 500,
      });
      const state = await page.evaluate("globalThis.benchResults") as BenchState;
      await page.close();
      if (state.error) throw new Error(`the bench page failed: ${state.error}\n${logs.join("\n")}`);
      console.log(
        `# ${threads} thread(s): cross-origin isolated ${state.isolated}, Graft core ` +
          `${state.graftBuild}${state.notes.length ? `; ${state.notes.join("; ")}` : ""}`,
      );
      report(perf, state);
    }
    console.log(`# load average after: ${loadAverage()}`);
  } finally {
    await browser.close();
    await server.shutdown();
  }
}

await main();
