/**
 * The web page in a real browser (`deno task test:browser`): Debian's chromium, headless,
 * driven by puppeteer-core, loads the page from `tools/web_serve.ts` (the bundle must be
 * built: the task runs `deno task bundle` first). The page computes the demo's transformer
 * block on the WebAssembly backend, and on WebGPU when the browser gives it an adapter (the
 * test prints whether it did); each result must match the Deno CPU backend's within the op
 * suite's matrix-product tolerance. Then, with SmolLM2 cached (`deno task model:fetch`), the
 * GGUF file goes in through the page's file input (puppeteer's uploadFile), the page loads it
 * on WebGPU (else WebAssembly) and streams greedy tokens, which must be the Deno CPU backend's
 * ids for the same prompt. A screenshot is kept at bench/out/web.png.
 *
 * WebGPU in headless Chromium without a GPU: Dawn's Vulkan backend offers only SwiftShader
 * here (a CPU fallback adapter: the block at ~300 ms, about a token a minute), so Chromium is
 * told to take its OpenGL ES backend (ANGLE on Vulkan on Mesa's lavapipe), which WebGPU's
 * compatibility mode reaches: the block, and SmolLM2 at several seconds a token.
 *
 * Chromium: `CHROMIUM` names the binary, else /usr/bin/chromium (`apt-get install chromium`).
 */

import assert from "node:assert/strict";
import puppeteer, { type ElementHandle, type Page } from "npm:puppeteer-core@25.16.0";
import { allocTensors, CpuBackend, LLM, planGraph } from "../mod.ts";
import { blockData, buildBlock, setBlockInputs } from "../demo/block.ts";
import { startServer } from "../tools/web_serve.ts";
import { PAGE_BLOCK } from "../web/page_block.ts";
import type { LLMPageState } from "../web/llm_page.ts";
import { SMOLLM2_PATH, smolLM2Cached } from "../tools/model_cache.ts";
import { WEBGPU_LLM_NEAR_TIE } from "./gpu.ts";
import { chromiumPath } from "../tools/chromium.ts";

/** The page's model run: a short prompt, a few greedy tokens. */
const LLM_PROMPT = "The capital of France is";
const LLM_TOKENS = 8;
/** The page's KV cache and bucket (web/llm_page.ts), so the CPU evaluates the same graphs. */
const LLM_N_CTX = 512;
const LLM_KV_BUCKET = 64;

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

/** The Deno CPU backend's greedy ids for the page's prompt. */
/** The CPU's greedy ids for the page's prompt, with each step's logits (for the near-tie rule). */
async function cpuGreedy(): Promise<{ ids: number[]; rows: Float32Array[] }> {
  using llm = await LLM.load(SMOLLM2_PATH, {
    threads: 2,
    nCtx: LLM_N_CTX,
    kvBucket: LLM_KV_BUCKET,
  });
  for await (const _ of llm.generate(LLM_PROMPT, { maxTokens: LLM_TOKENS, temperature: 0 }));
  const ids = [...llm.lastGeneration!.ids];
  // The same steps again, one token at a time as generate evaluates them, keeping the rows.
  llm.reset();
  const rows: Float32Array[] = [];
  let logits = await llm.eval(llm.tokenize(LLM_PROMPT));
  for (const id of ids) {
    rows.push(logits.slice());
    logits = await llm.eval([id]);
  }
  return { ids, rows };
}

/**
 * The page's ids against the CPU's. On WebAssembly (the CPU's Zig kernels) they must be equal;
 * on WebGPU, as tests/webgpu_llm_test.ts rules, a step may go another way only where the CPU's
 * own logit of the page's choice is within WEBGPU_LLM_NEAR_TIE of its best, and the steps after
 * such a divergence are not compared (their contexts differ).
 */
function checkIds(
  page: number[],
  cpu: { ids: number[]; rows: Float32Array[] },
  webgpu: boolean,
): string {
  assert.equal(page.length, cpu.ids.length, "the page streamed every token");
  if (!webgpu) {
    assert.deepEqual(page, cpu.ids, "the page's greedy ids on WebAssembly are the Deno CPU's");
    return "equal";
  }
  for (let step = 0; step < page.length; step++) {
    if (page[step] === cpu.ids[step]) continue;
    const row = cpu.rows[step]!;
    const gap = row[cpu.ids[step]!]! - row[page[step]!]!;
    assert.ok(
      gap <= WEBGPU_LLM_NEAR_TIE,
      `step ${step}: the page picks ${page[step]}, ${gap.toFixed(3)} below the CPU's ` +
        `${cpu.ids[step]} (more than ${WEBGPU_LLM_NEAR_TIE})`,
    );
    return `equal to step ${step}, where the page picks ${page[step]}, ` +
      `${gap.toFixed(3)} below the CPU's best (within ${WEBGPU_LLM_NEAR_TIE})`;
  }
  return "equal";
}

/** Feeds SmolLM2 to the page's file input and checks the streamed ids against the CPU's. */
async function checkModel(page: Page, logs: string[]): Promise<void> {
  if (!smolLM2Cached()) {
    console.log(
      `SmolLM2 is not cached at ${SMOLLM2_PATH}: skipping the model (deno task model:fetch)`,
    );
    return;
  }
  // A CPU fallback adapter (SwiftShader, where Chromium does not take the OpenGL ES one)
  // decodes about one token a minute here: the model then runs on WebAssembly, unless
  // GRAFT_BROWSER_LLM=webgpu asks for WebGPU (or wasm for WebAssembly in any case).
  const fallback = await page.evaluate(
    `navigator.gpu?.requestAdapter({ featureLevel: "compatibility" })
      .then((a) => a ? (a.info?.isFallbackAdapter ?? a.isFallbackAdapter ?? false) : null)`,
  ) as boolean | null;
  const wanted = Deno.env.get("GRAFT_BROWSER_LLM") ?? (fallback ? "wasm" : "auto");
  if (fallback && wanted === "wasm") {
    console.log(
      "WebGPU's adapter is a CPU fallback (SwiftShader): SmolLM2 runs on WebAssembly " +
        "(GRAFT_BROWSER_LLM=webgpu runs it on WebGPU, at about a token a minute here)",
    );
  }
  await page.select("#llm-backend", wanted);
  await page.$eval("#llm-prompt", (e, v) => ((e as HTMLTextAreaElement).value = v), LLM_PROMPT);
  await page.$eval(
    "#llm-max-tokens",
    (e, v) => ((e as HTMLInputElement).value = v),
    `${LLM_TOKENS}`,
  );
  const input = await page.$("#gguf");
  assert.ok(input, "the page has a file input");
  await (input as ElementHandle<HTMLInputElement>).uploadFile(SMOLLM2_PATH);
  await page.waitForFunction(
    "globalThis.graftLLM?.phase === 'done' || globalThis.graftLLM?.phase === 'failed'",
    { timeout: 1_800_000, polling: 500 },
  );
  const state = await page.evaluate("globalThis.graftLLM") as LLMPageState;
  assert.equal(state.error, undefined, `${state.error}\n${logs.join("\n")}`);
  console.log(
    `SmolLM2 in the page on ${state.backend}: ${state.ids.length} tokens, ` +
      `${state.tokensPerSecond.toFixed(2)} tokens/s, ids ${state.ids.join(",")}, ` +
      `text ${JSON.stringify(state.text)}`,
  );
  const cpu = await cpuGreedy();
  console.log(`  Deno CPU greedy ids ${cpu.ids.join(",")}`);
  const verdict = checkIds(state.ids, cpu, state.backend.startsWith("WebGPU"));
  console.log(`  the page's ids: ${verdict}`);
  const svg = await page.$eval("#llm-plan", (e) => e.innerHTML.length);
  assert.ok(svg > 1000, "the page shows the memory plan's SVG timeline");
}

Deno.test({
  name: "the web page computes the block and streams SmolLM2's tokens as the Deno CPU does",
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const server = startServer(0, true);
    const browser = await puppeteer.launch({
      executablePath: chromiumPath(),
      headless: true,
      // The page computes on its main thread; a slow backend holds it for minutes.
      protocolTimeout: 1_800_000,
      args: [
        "--no-sandbox",
        "--enable-unsafe-webgpu",
        "--enable-features=Vulkan",
        "--use-vulkan=native",
        "--use-angle=vulkan",
        // Dawn's Vulkan backend lists only SwiftShader here (a CPU fallback adapter, slow);
        // its OpenGL ES backend reaches Mesa's lavapipe through ANGLE on Vulkan, in WebGPU's
        // compatibility mode, which the page asks for.
        "--use-webgpu-adapter=opengles",
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
      try {
        await checkModel(page, logs);
      } finally {
        await Deno.mkdir(new URL("../bench/out/", import.meta.url), { recursive: true });
        await page.screenshot({
          path: new URL("../bench/out/web.png", import.meta.url).pathname,
          fullPage: true,
        });
      }
    } finally {
      await browser.close();
      await server.shutdown();
    }
  },
});
