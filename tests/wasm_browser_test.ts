/**
 * The web page in a real browser (`deno task test:browser`): Debian's chromium, headless,
 * driven by puppeteer-core, loads the page from `tools/web_serve.ts` (the bundle must be
 * built: the task runs `deno task bundle` first). The page computes the demo's transformer
 * block on the WebAssembly backend, and on WebGPU when the browser gives it an adapter (the
 * test prints whether it did); each result must match the Deno CPU backend's within the op
 * suite's matrix-product tolerance. A screenshot is kept at bench/out/web.png.
 *
 * Chromium: `CHROMIUM` names the binary, else /usr/bin/chromium (`apt-get install chromium`).
 */

import assert from "node:assert/strict";
import puppeteer from "npm:puppeteer-core@25.16.0";
import { allocTensors, CpuBackend, planGraph } from "../mod.ts";
import { blockData, buildBlock, setBlockInputs } from "../demo/block.ts";
import { startServer } from "../tools/web_serve.ts";
import { PAGE_BLOCK } from "../web/page_block.ts";

/** backend_ops_test's matrix-product tolerance (normalized squared error). */
const NMSE_MATMUL = 1e-7;
/** The demo's tolerance against the float64 reference (max relative error). */
const DEMO_TOLERANCE = 1e-4;

interface PageResult {
  backend: string;
  kernels: string;
  msPerRun: number;
  error: number;
  output: number[];
}

interface PageState {
  done: boolean;
  results: PageResult[];
  webgpu: string;
  error?: string;
}

function cpuBlock(): Float32Array {
  using cpu = new CpuBackend({ threads: 1 });
  const block = buildBlock(PAGE_BLOCK);
  using _weights = allocTensors(cpu, block.ctx.tensors);
  using _activations = planGraph(block.graph, { alignment: cpu.alignment }).allocate(cpu);
  setBlockInputs(block, blockData(PAGE_BLOCK));
  cpu.graphCompute(block.graph);
  return cpu.getTensor(block.output) as Float32Array;
}

function nmse(actual: readonly number[], expected: Float32Array): number {
  let error = 0;
  let norm = 0;
  for (let i = 0; i < expected.length; i++) {
    error += (actual[i]! - expected[i]!) ** 2;
    norm += expected[i]! ** 2;
  }
  return error / norm;
}

function chromiumPath(): string {
  const path = Deno.env.get("CHROMIUM") ?? "/usr/bin/chromium";
  try {
    Deno.statSync(path);
  } catch {
    throw new Error(
      `no Chromium at ${path}: install it (apt-get install chromium) or set CHROMIUM`,
    );
  }
  return path;
}

Deno.test({
  name: "the web page computes the block on WebAssembly (and WebGPU if any) as the Deno CPU does",
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const server = startServer(0, true);
    const browser = await puppeteer.launch({
      executablePath: chromiumPath(),
      headless: true,
      args: [
        "--no-sandbox",
        "--enable-unsafe-webgpu",
        "--enable-features=Vulkan",
        "--use-vulkan=native",
        "--use-angle=vulkan",
        "--ignore-gpu-blocklist",
      ],
    });
    try {
      const page = await browser.newPage();
      const logs: string[] = [];
      page.on("console", (message) => logs.push(message.text()));
      page.on("pageerror", (error) => logs.push(String(error)));
      await page.goto(`http://127.0.0.1:${server.addr.port}/`);
      await page.waitForFunction("globalThis.graftResults?.done === true", { timeout: 120_000 });
      const state = await page.evaluate("globalThis.graftResults") as PageState;
      const isolated = await page.evaluate("globalThis.crossOriginIsolated") as boolean;
      await Deno.mkdir(new URL("../bench/out/", import.meta.url), { recursive: true });
      await page.screenshot({
        path: new URL("../bench/out/web.png", import.meta.url).pathname,
        fullPage: true,
      });
      assert.equal(state.error, undefined, `${state.error}\n${logs.join("\n")}`);
      assert.ok(isolated, "the server's COOP/COEP headers make the page cross-origin isolated");
      // WebGPU: "ran" (then checked below like WebAssembly), "unavailable (…)" without an
      // adapter, or "failed: …" when the WebGPU backend errs in Chromium's implementation.
      console.log(`WebGPU in headless Chromium: ${state.webgpu}`);
      const expected = cpuBlock();
      const wasm = state.results.find((r) => r.backend === "wasm");
      assert.ok(wasm, "the page computed on WebAssembly");
      for (const result of state.results) {
        const error = nmse(result.output, expected);
        console.log(
          `  ${result.kernels}: ${result.msPerRun.toFixed(3)} ms per run, NMSE vs Deno CPU ` +
            `${error.toExponential(2)}, max relative error vs float64 ${
              result.error.toExponential(2)
            }`,
        );
        assert.equal(result.output.length, expected.length);
        assert.ok(error <= NMSE_MATMUL, `${result.backend}: NMSE vs the CPU ${error}`);
        assert.ok(result.error <= DEMO_TOLERANCE, `${result.backend}: error ${result.error}`);
      }
    } finally {
      await browser.close();
      await server.shutdown();
    }
  },
});
