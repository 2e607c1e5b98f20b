/// <reference lib="dom" />
/**
 * The page's language model: a GGUF file the user picks is read into memory
 * (`GGUFFile.fromBytes`, no file system here), loaded by `LLM.load` on WebGPU when the browser
 * has an adapter, else on the WebAssembly backend, and greedy tokens stream into the page with
 * tokens/s, beside the memory plan of one decoding step as an SVG timeline. What it did is
 * left on `globalThis.graftLLM` for the browser test.
 * @module
 */

import { type Backend, GGUFFile, LLM, planToSvg, WasmBackend, WebGpuBackend } from "../mod.ts";

/** Positions the page's KV cache holds: a short chat fits, and WASM memory stays small. */
const PAGE_N_CTX = 512;
/** Attention's KV bucket: short prompts read 64 positions, not 256. */
const PAGE_KV_BUCKET = 64;

/** What the page's model run did (for the browser test). */
export interface LLMPageState {
  /** "loading", "generating", "done" or "failed". */
  phase: string;
  /** The backend the model ran on ("webgpu" or "wasm") and why. */
  backend: string;
  /** The prompt's token ids. */
  promptIds: number[];
  /** The generated ids, in order, as they came. */
  ids: number[];
  /** The generated text. */
  text: string;
  /** Generated tokens per second (the first token's prompt evaluation excluded). */
  tokensPerSecond: number;
  error?: string;
}

declare global {
  var graftLLM: LLMPageState | undefined;
}

function element<T extends HTMLElement>(id: string): T {
  const found = document.getElementById(id);
  if (!found) throw new Error(`the page has no #${id}`);
  return found as T;
}

/** The first line of an error's message (a device's report runs to many). */
function firstLine(error: unknown): string {
  return String(error instanceof Error ? error.message : error).split("\n")[0]!;
}

/**
 * The backend `choice` names ("webgpu", "wasm"), or with "auto" WebGPU when the browser gives an
 * adapter, else WebAssembly; says which and why.
 */
async function pickBackend(choice: string): Promise<{ backend: Backend; why: string }> {
  let unavailable = "not chosen";
  if (choice !== "wasm") {
    try {
      // Compatibility mode also takes an OpenGL ES adapter (see WebGpuBackendOptions).
      const gpu = await WebGpuBackend.create({ featureLevel: "compatibility" });
      const info = gpu.adapterInfo;
      const name = [info.vendor, info.architecture, info.device, info.description]
        .filter((s) => s).join(" ") || "adapter";
      const compat = gpu.device.features.has("core-features-and-limits" as GPUFeatureName)
        ? ""
        : ", compatibility mode";
      return { backend: gpu, why: `WebGPU (${name}${compat})` };
    } catch (error) {
      if (choice === "webgpu") throw error;
      unavailable = `no WebGPU: ${firstLine(error)}`;
    }
  }
  const wasm = await WasmBackend.create();
  return {
    backend: wasm,
    why: `WebAssembly (${wasm.simd}, ${wasm.threads} thread; ${unavailable})`,
  };
}

/** The model of the file picked last, with the backend it runs on. */
let loaded: { llm: LLM; backend: Backend; why: string } | null = null;

/** Loads `file` as a model (disposing the previous one), reporting progress in #llm-status. */
export async function loadModel(file: File): Promise<void> {
  const status = element("llm-status");
  loaded?.llm.dispose();
  loaded?.backend.dispose();
  loaded = null;
  status.textContent = `Reading ${file.name}…`;
  const bytes = new Uint8Array(await file.arrayBuffer());
  const gguf = GGUFFile.fromBytes(bytes, file.name);
  const choice = element<HTMLSelectElement>("llm-backend").value;
  const { backend, why } = await pickBackend(choice);
  try {
    status.textContent = `Loading the weights on ${why}…`;
    const llm = await LLM.load(gguf, {
      backend,
      nCtx: PAGE_N_CTX,
      kvBucket: PAGE_KV_BUCKET,
      onProgress: (done, total) => {
        status.textContent = `Loading the weights on ${why}: ${Math.round((100 * done) / total)}%`;
      },
    });
    loaded = { llm, backend, why };
    element("llm-plan").innerHTML = planToSvg(llm.memoryPlan(), {
      title: `${file.name}: one decoding step`,
      width: 860,
      height: 420,
    });
    status.textContent = `Loaded on ${why}: ${llm.hparams.nLayer} layers, ` +
      `${llm.hparams.nVocab} tokens in the vocabulary.`;
  } catch (error) {
    backend.dispose();
    throw error;
  }
}

/** Streams greedy tokens for the prompt in #llm-prompt into #llm-output. */
export async function generate(): Promise<void> {
  if (!loaded) throw new Error("pick a GGUF model first");
  const { llm, why } = loaded;
  const prompt = element<HTMLTextAreaElement>("llm-prompt").value;
  const maxTokens = Number(element<HTMLInputElement>("llm-max-tokens").value) || 32;
  const output = element("llm-output");
  const speed = element("llm-speed");
  const state: LLMPageState = {
    phase: "generating",
    backend: why,
    promptIds: llm.tokenize(prompt, { parseSpecial: true }),
    ids: [],
    text: "",
    tokensPerSecond: 0,
  };
  globalThis.graftLLM = state;
  output.textContent = "";
  const prompted = document.createElement("b");
  prompted.textContent = prompt;
  output.append(prompted);
  let firstAt = 0;
  for await (
    const piece of llm.generate(prompt, {
      maxTokens,
      temperature: 0,
      reuseCache: false,
      onToken: (id) => state.ids.push(id),
    })
  ) {
    const now = performance.now();
    if (state.ids.length === 1) firstAt = now;
    state.text += piece;
    output.append(piece);
    if (state.ids.length > 1) {
      state.tokensPerSecond = (state.ids.length - 1) / ((now - firstAt) / 1000);
      speed.textContent =
        `${state.ids.length} tokens, ${state.tokensPerSecond.toFixed(2)} tokens/s ` +
        `on ${why}`;
    }
    // Let the page paint each token as it comes.
    await new Promise((resolve) => setTimeout(resolve, 0));
  }
  const stats = llm.lastGeneration!;
  const decoded = Math.max(1, stats.generatedTokens - 1);
  speed.textContent = `${stats.generatedTokens} tokens (${stats.stopReason}); prompt of ` +
    `${stats.promptTokens} tokens in ${stats.promptMs.toFixed(0)} ms; ` +
    `${(decoded / (stats.generateMs / 1000)).toFixed(2)} tokens/s on ${why}`;
  state.phase = "done";
}

/** Wires the page's model controls: picking a file loads it and generates once. */
export function setupLLMPage(): void {
  const run = async (task: () => Promise<void>): Promise<void> => {
    globalThis.graftLLM = {
      phase: "loading",
      backend: "",
      promptIds: [],
      ids: [],
      text: "",
      tokensPerSecond: 0,
    };
    try {
      await task();
      await generate();
    } catch (error) {
      console.error(error);
      const message = firstLine(error);
      globalThis.graftLLM = { ...globalThis.graftLLM!, phase: "failed", error: message };
      element("llm-status").textContent = `Failed: ${message}`;
    }
  };
  element("gguf").addEventListener("change", (event) => {
    const file = (event.target as HTMLInputElement).files?.[0];
    if (file) void run(() => loadModel(file));
  });
  element("llm-generate").addEventListener("click", () => void run(() => Promise.resolve()));
}
