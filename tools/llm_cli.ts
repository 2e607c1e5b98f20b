/**
 * What `deno task generate`, `deno task chat` and the demo share: llama.cpp-style options, the
 * default model (the cached SmolLM2, fetched on first use), loading with progress on a terminal,
 * and the timing line at the end.
 * @module
 */

import { parseArgs } from "node:util";
import { type GenerateOptions, LLM, type LLMLoadOptions } from "../mod.ts";
import { SMOLLM2_PATH, smolLM2Cached } from "./model_cache.ts";

/** Options common to the LLM command lines. */
export interface LlmCliOptions {
  model: string;
  load: LLMLoadOptions;
  sampling: GenerateOptions;
  /** `-n`: tokens to generate (-1: until end of generation or context). */
  nPredict: number;
  /** The rest of the parsed values, for the command's own flags. */
  values: Record<string, string | boolean | string[] | undefined>;
}

/** The option table (node:util parseArgs) every LLM command accepts, llama.cpp's names. */
export const LLM_OPTIONS = {
  model: { type: "string", short: "m" },
  "n-predict": { type: "string", short: "n" },
  temp: { type: "string" },
  seed: { type: "string", short: "s" },
  "top-k": { type: "string" },
  "top-p": { type: "string" },
  "min-p": { type: "string" },
  "repeat-penalty": { type: "string" },
  "repeat-last-n": { type: "string" },
  "presence-penalty": { type: "string" },
  "frequency-penalty": { type: "string" },
  "ignore-eos": { type: "boolean" },
  reverse: { type: "string", short: "r", multiple: true },
  backend: { type: "string" },
  "gpu-layers": { type: "string", short: "g" },
  rpc: { type: "string" },
  threads: { type: "string", short: "t" },
  "ctx-size": { type: "string", short: "c" },
  "batch-size": { type: "string", short: "b" },
  "cache-type": { type: "string" },
  "flash-attn": { type: "string" },
  "no-mmap": { type: "boolean" },
  "no-repack": { type: "boolean" },
  help: { type: "boolean", short: "h" },
} as const;

/** A command-line mistake: the message says what to do. */
export class UsageError extends Error {
  override name = "UsageError";
}

function numberOption(
  values: Record<string, unknown>,
  name: string,
  check: (v: number) => boolean,
  what: string,
): number | undefined {
  const text = values[name];
  if (text === undefined) return undefined;
  const value = Number(text);
  if (typeof text !== "string" || text.trim() === "" || !check(value)) {
    throw new UsageError(`--${name} must be ${what}, got ${JSON.stringify(text)}`);
  }
  return value;
}

/** Parses `args` with LLM_OPTIONS plus `extra`; throws UsageError on a bad value. */
export function parseLlmArgs(
  args: string[],
  extra: Record<string, { type: "string" | "boolean"; short?: string; multiple?: boolean }>,
): LlmCliOptions {
  let parsed;
  try {
    // llama.cpp spells it `-fa`: parseArgs takes one-letter short options only.
    const spelled = args.map((a) => a === "-fa" ? "--flash-attn" : a);
    parsed = parseArgs({
      args: spelled,
      options: { ...LLM_OPTIONS, ...extra },
      allowPositionals: false,
    });
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  const v = parsed.values as Record<string, string | boolean | string[] | undefined>;
  const int = (v: number): boolean => Number.isInteger(v);
  const positive = (v: number): boolean => Number.isInteger(v) && v >= 1;
  const finite = (v: number): boolean => Number.isFinite(v);
  const unit = (v: number): boolean => v >= 0 && v <= 1;
  const backend = v.backend ?? "cpu";
  if (backend !== "cpu" && backend !== "webgpu") {
    throw new UsageError(`--backend must be cpu or webgpu, got ${JSON.stringify(backend)}`);
  }
  const cacheType = v["cache-type"] ?? "f16";
  if (cacheType !== "f16" && cacheType !== "f32") {
    throw new UsageError(`--cache-type must be f16 or f32, got ${JSON.stringify(cacheType)}`);
  }
  const flashAttn = v["flash-attn"] ?? "off";
  if (flashAttn !== "on" && flashAttn !== "off") {
    throw new UsageError(`--flash-attn (-fa) must be on or off, got ${JSON.stringify(flashAttn)}`);
  }
  const threads = numberOption(v, "threads", positive, "a positive integer");
  const nCtx = numberOption(v, "ctx-size", positive, "a positive integer");
  const nBatch = numberOption(v, "batch-size", positive, "a positive integer");
  const gpuLayers = numberOption(v, "gpu-layers", (x) => int(x) && x >= 0, "an integer >= 0");
  const load: LLMLoadOptions = {
    backend,
    cacheType,
    ...(threads !== undefined ? { threads } : {}),
    ...(nCtx !== undefined ? { nCtx } : {}),
    ...(nBatch !== undefined ? { nBatch } : {}),
    ...(gpuLayers !== undefined ? { gpuLayers } : {}),
    ...(v["no-mmap"] ? { mmap: false } : {}),
    ...(v["no-repack"] ? { repack: false } : {}),
    ...(flashAttn === "on" ? { flashAttn: true } : {}),
    ...(typeof v.rpc === "string" ? { rpc: rpcServers(v.rpc) } : {}),
  };
  const sampling: Record<string, unknown> = {
    temperature: numberOption(v, "temp", (x) => x >= 0 && finite(x), "a number >= 0"),
    seed: numberOption(v, "seed", (x) => int(x) && x >= 0 && x < 2 ** 32, "an integer >= 0"),
    topK: numberOption(v, "top-k", int, "an integer"),
    topP: numberOption(v, "top-p", unit, "a number in [0, 1]"),
    minP: numberOption(v, "min-p", unit, "a number in [0, 1]"),
    repeatPenalty: numberOption(v, "repeat-penalty", (x) => x > 0, "a number > 0"),
    penaltyLastN: numberOption(v, "repeat-last-n", (x) => int(x) && x >= -1, "an integer >= -1"),
    presencePenalty: numberOption(v, "presence-penalty", finite, "a number"),
    frequencyPenalty: numberOption(v, "frequency-penalty", finite, "a number"),
    ignoreEos: v["ignore-eos"] === true ? true : undefined,
    stop: v.reverse,
  };
  for (const key of Object.keys(sampling)) {
    if (sampling[key] === undefined) delete sampling[key];
  }
  const nPredict = numberOption(v, "n-predict", (x) => int(x) && x >= -1, "an integer >= -1") ??
    -1;
  return {
    model: typeof v.model === "string" ? v.model : SMOLLM2_PATH,
    load,
    sampling: sampling as GenerateOptions,
    nPredict,
    values: v,
  };
}

/** `--rpc host:port,host:port` (llama.cpp's flag): the servers, in order. */
function rpcServers(text: string): string[] {
  const servers = text.split(",").map((s) => s.trim());
  for (const s of servers) {
    if (!/^(\[[^\]]+\]|[^:\s]+):\d{1,5}$/.test(s)) {
      throw new UsageError(`--rpc takes host:port[,host:port...], got ${JSON.stringify(s)}`);
    }
  }
  return servers;
}

/** Fetches the default model when it is the one asked for and is not cached yet. */
export async function ensureModel(path: string): Promise<void> {
  if (path !== SMOLLM2_PATH || smolLM2Cached()) return;
  const script = new URL("../scripts/model_fetch.sh", import.meta.url).pathname;
  const { code } = await new Deno.Command(script, { stdout: "null", stderr: "inherit" }).output();
  if (code !== 0) throw new UsageError(`could not fetch the model (${script} failed)`);
}

/** Loads the model; on a terminal, shows loading progress on stderr. */
export async function loadModel(options: LlmCliOptions): Promise<LLM> {
  await ensureModel(options.model);
  const tty = Deno.stderr.isTerminal();
  const encoder = new TextEncoder();
  const onProgress = (done: number, total: number): void => {
    const pct = total > 0 ? Math.round((100 * done) / total) : 100;
    Deno.stderr.writeSync(encoder.encode(`\rloading ${options.model}: ${pct}%`));
  };
  const llm = await LLM.load(options.model, tty ? { ...options.load, onProgress } : options.load);
  if (tty) Deno.stderr.writeSync(encoder.encode("\r\x1b[K"));
  return llm;
}

/** llama.cpp-style timings for the last generation, for stderr. */
export function timingLine(llm: LLM): string {
  const g = llm.lastGeneration;
  if (!g) return "";
  const rate = (n: number, ms: number): string => ms > 0 ? (1000 * n / ms).toFixed(2) : "-";
  return `prompt: ${g.promptEvaluated} tokens in ${g.promptMs.toFixed(1)} ms (${
    rate(g.promptEvaluated, g.promptMs)
  } tokens/s) | generation: ${g.generatedTokens} tokens in ${g.generateMs.toFixed(1)} ms (${
    rate(g.generatedTokens, g.generateMs)
  } tokens/s) | stop: ${g.stopReason}`;
}

/**
 * Runs a command's `main` and exits with its status: a UsageError prints the message and the
 * usage and exits 2, any other error prints its name and message and exits 1.
 */
export async function runCli(
  name: string,
  usage: string,
  main: (args: string[]) => Promise<number>,
): Promise<never> {
  try {
    Deno.exit(await main(Deno.args));
  } catch (error) {
    if (error instanceof UsageError) {
      console.error(`${name}: ${error.message}\n${usage}`);
      Deno.exit(2);
    }
    console.error(`${name}: ${error instanceof Error ? `${error.name}: ${error.message}` : error}`);
    Deno.exit(1);
  }
}
