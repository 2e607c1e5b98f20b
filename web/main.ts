/// <reference lib="dom" />
/**
 * The web page's script (bundled by `deno task bundle` into dist/web.js): computes the demo's
 * transformer block on the WebAssembly backend, and on WebGPU where the browser has it, checks
 * each against the float64 reference, and shows the results; reads the header of a GGUF file
 * the user picks and, for a llama-family model, streams its tokens (`llm_page.ts`). The results are also left on `globalThis.graftResults` for the browser test.
 * @module
 */

import {
  allocTensors,
  type Backend,
  GGUFError,
  MemorySource,
  metadataValue,
  planGraph,
  readGGUF,
  WasmBackend,
  WebGpuBackend,
} from "../mod.ts";
import { blockData, buildBlock, setBlockInputs } from "../demo/block.ts";
import { referenceBlock, relativeError } from "../demo/block_reference.ts";
import { PAGE_BLOCK } from "./page_block.ts";
import { setupLLMPage } from "./llm_page.ts";

const RUNS = 10;

/** What the page computed on one backend. */
export interface PageResult {
  backend: string;
  kernels: string;
  msPerRun: number;
  checksum: number;
  error: number;
  output: number[];
}

declare global {
  var graftResults: { done: boolean; results: PageResult[]; webgpu: string; error?: string };
}

globalThis.graftResults = { done: false, results: [], webgpu: "not tried" };

function element(id: string): HTMLElement {
  const found = document.getElementById(id);
  if (!found) throw new Error(`the page has no #${id}`);
  return found;
}

async function computeBlock(backend: Backend, kernels: string): Promise<PageResult> {
  const block = buildBlock(PAGE_BLOCK);
  const data = blockData(PAGE_BLOCK);
  using _weights = allocTensors(backend, block.ctx.tensors);
  using _activations = planGraph(block.graph, { alignment: backend.alignment }).allocate(backend);
  setBlockInputs(block, data);
  using plan = backend.graphPlanCreate(block.graph);
  backend.graphPlanCompute(plan);
  const output = Array.from((await backend.getTensorAsync(block.output)) as Float32Array);
  const started = performance.now();
  for (let i = 0; i < RUNS; i++) backend.graphPlanCompute(plan);
  await backend.getTensorAsync(block.output); // waits for a device's queue
  const msPerRun = (performance.now() - started) / RUNS;
  const error = relativeError(output, referenceBlock(PAGE_BLOCK, data));
  const checksum = output.reduce((a, b) => a + b, 0);
  return { backend: backend.name, kernels, msPerRun, checksum, error, output };
}

function show(result: PageResult): void {
  const row = document.createElement("tr");
  const cells = [
    result.backend,
    result.kernels,
    `${result.msPerRun.toFixed(3)} ms`,
    result.checksum.toFixed(6),
    result.error.toExponential(2),
  ];
  cells.forEach((text, i) => {
    const cell = document.createElement("td");
    cell.textContent = text;
    if (i >= 2) cell.className = "num";
    row.append(cell);
  });
  element("results").append(row);
}

/** The first line of an error's message (a device's report runs to many). */
function firstLine(error: unknown): string {
  return String(error instanceof Error ? error.message : error).split("\n")[0]!;
}

/** Computes the block on WebGPU if the browser has an adapter: "ran", "unavailable: …" or "failed: …". */
async function runWebGpu(): Promise<string> {
  let gpu: WebGpuBackend;
  try {
    gpu = await WebGpuBackend.create({ featureLevel: "compatibility" });
  } catch (error) {
    return `unavailable (${firstLine(error)})`;
  }
  try {
    const result = await computeBlock(gpu, `WebGPU (${gpu.adapterInfo.description || "adapter"})`);
    globalThis.graftResults.results.push(result);
    show(result);
    return "ran";
  } catch (error) {
    console.error(error);
    return `failed: ${firstLine(error)}`;
  } finally {
    gpu.dispose();
  }
}

async function run(): Promise<void> {
  const c = PAGE_BLOCK;
  element("block-config").textContent =
    `dim ${c.dim}, ${c.heads} heads, ${c.seq} tokens, ffn ${c.ffn}; mean of ${RUNS} runs.`;
  {
    using wasm = await WasmBackend.create();
    const result = await computeBlock(wasm, `WebAssembly ${wasm.simd}, ${wasm.threads} thread`);
    globalThis.graftResults.results.push(result);
    show(result);
  }
  globalThis.graftResults.webgpu = await runWebGpu();
  element("status").textContent = `Done. WebGPU: ${globalThis.graftResults.webgpu}`;
}

async function describeGGUF(file: File): Promise<string> {
  const bytes = new Uint8Array(await file.arrayBuffer());
  const header = readGGUF(new MemorySource(bytes));
  const lines = [
    `${file.name}: ${bytes.length} bytes, GGUF v${header.version}`,
    `${header.metadata.length} metadata entries, ${header.tensors.length} tensors`,
  ];
  for (const key of ["general.architecture", "general.name", "general.file_type"]) {
    const value = metadataValue(header, key);
    if (value !== undefined) lines.push(`${key} = ${String(value)}`);
  }
  for (const tensor of header.tensors.slice(0, 12)) {
    lines.push(`  ${tensor.name} ${tensor.type.name} [${tensor.dims.join(", ")}]`);
  }
  if (header.tensors.length > 12) lines.push(`  … ${header.tensors.length - 12} more`);
  return lines.join("\n");
}

element("gguf").addEventListener("change", async (event) => {
  const file = (event.target as HTMLInputElement).files?.[0];
  if (!file) return;
  const info = element("gguf-info");
  try {
    info.textContent = await describeGGUF(file);
  } catch (error) {
    info.textContent = error instanceof GGUFError ? error.message : String(error);
  }
});

setupLLMPage();

run().then(
  () => (globalThis.graftResults.done = true),
  (error) => {
    globalThis.graftResults.error = String(error);
    globalThis.graftResults.done = true;
    const status = element("status");
    status.textContent = `Failed: ${String(error)}`;
    status.className = "failed";
  },
);
