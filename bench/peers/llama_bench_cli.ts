/**
 * llama.cpp's llama-bench, the peer of record of `deno task bench:llm` (bench/llm_perf.ts): where
 * the pinned build lives, how to run it, and what its JSON says. The build is the one
 * tools/llama_build.sh makes (`deno task llama:build`, about 10 minutes); the benchmark never starts
 * that build itself.
 *
 * Settings, read from tools/llama-bench/llama-bench.cpp and src/llama-context.cpp of that build:
 * each test gets a fresh context of n_ctx = n_prompt + n_gen + n_depth (pp128: 128, tg64: 64),
 * which llama_context pads up to a multiple of 256 (so 256 cells for both, and the attention spans
 * all 256, masked); n_batch 2048, n_ubatch 512 (pp128 is one batch); KV cache f16/f16 by default
 * (passed explicitly here); flash attention `auto` by default, which resolves to on where the CPU
 * backend supports it: it is passed as `-fa 0` since Graft has no flash-attention kernel; one
 * warmup (pp: a full prompt run; tg: one token), then -r repetitions, avg_ts the mean of the
 * runs' tokens/s.
 * @module
 */

import { runWithPeakRss } from "../peak_rss.ts";

/**
 * The SIMD level tools/llama_build.sh names its build dir by (from the same /proc/cpuinfo flags,
 * or GRAFT_LLAMA_SIMD=avx2 for its AVX2 build on an AVX-512 machine).
 */
export function simdLevel(): "avx512" | "avx2" | "generic" {
  if (Deno.env.get("GRAFT_LLAMA_SIMD") === "avx2") return "avx2";
  const flags = cpuFlags();
  return flags.has("avx512f") ? "avx512" : flags.has("avx2") ? "avx2" : "generic";
}

/** The CPU's feature flags, from /proc/cpuinfo (empty if unreadable). */
export function cpuFlags(): Set<string> {
  const line = cpuinfo().match(/^flags\s*:(.*)$/m)?.[1] ?? "";
  return new Set(line.trim().split(/\s+/));
}

/** The CPU's model name, from /proc/cpuinfo. */
export function cpuModel(): string {
  return cpuinfo().match(/^model name\s*:\s*(.*)$/m)?.[1] ?? "unknown";
}

/** /proc/cpuinfo, read through `cat` (Deno opens /proc files only under --allow-all). */
function cpuinfo(): string {
  try {
    const out = new Deno.Command("cat", { args: ["/proc/cpuinfo"] }).outputSync();
    return new TextDecoder().decode(out.stdout);
  } catch {
    return "";
  }
}

/**
 * The bin directory of tools/llama_build.sh's build for SIMD `level` (this CPU's by default):
 * $GRAFT_CACHE or ~/.cache/graft, llama.cpp-0.3.36/build-<level>/bin. Needs --allow-env.
 */
export function llamaBuildBin(level: string = simdLevel()): string {
  const cache = Deno.env.get("GRAFT_CACHE") ?? `${Deno.env.get("HOME")}/.cache/graft`;
  return `${cache}/llama.cpp-0.3.36/build-${level}/bin`;
}

/** llama-bench's path in the pinned build, or the reason it is not there (and how to get it). */
export function llamaBenchPath(): { path: string } | { skip: string } {
  const path = `${llamaBuildBin()}/llama-bench`;
  try {
    Deno.statSync(path);
    return { path };
  } catch {
    return {
      skip: `no ${path}; build it with \`deno task llama:build\` (tools/llama_build.sh, ` +
        `about 10 minutes)`,
    };
  }
}

/** How llama-bench is run: the settings both sides share, and its own. */
export interface LlamaBenchSettings {
  model: string;
  threads: number;
  nPrompt: number;
  nGen: number;
  reps: number;
  /** `-fa`: 0 (off), 1 (on) or auto. */
  flashAttn: "0" | "1" | "auto";
  /** `--repack`: llama.cpp's extra CPU buffer types (repacked weights, AMX). */
  repack: 0 | 1;
  /** `-d`: tokens of context evaluated (untimed) before each run; default 0. */
  depth?: number;
  /** `--rpc HOST:PORT -ngl 99`: every layer on that RPC server (bench/rpc_*_perf.ts). */
  rpc?: string;
}

/** llama-bench's arguments for `s`, JSON output. */
export function llamaBenchArgs(s: LlamaBenchSettings): string[] {
  return [
    ...["-m", s.model, "-t", String(s.threads), "-p", String(s.nPrompt), "-n", String(s.nGen)],
    ...["-r", String(s.reps), "-ctk", "f16", "-ctv", "f16", "-fa", s.flashAttn],
    ...["--repack", String(s.repack), "-o", "json"],
    ...(s.depth ? ["-d", String(s.depth)] : []),
    ...(s.rpc === undefined ? [] : ["--rpc", s.rpc, "-ngl", "99"]),
  ];
}

/** One llama-bench run: tokens/s per repetition of each test, and the process's peak RSS. */
export interface LlamaBenchResult {
  pp?: number[];
  tg?: number[];
  peakRssBytes: number;
}

/** Runs llama-bench with `s`; throws with its stderr's tail when it fails. */
export async function runLlamaBench(
  bin: string,
  s: LlamaBenchSettings,
): Promise<LlamaBenchResult> {
  const run = await runWithPeakRss(bin, llamaBenchArgs(s));
  if (!run.success) {
    const why = run.code > 128 ? `signal ${run.code - 128}` : `exit ${run.code}`;
    throw new Error(`llama-bench failed (${why}): ${run.stderr.trim().split("\n").slice(-3)}`);
  }
  const tests = JSON.parse(run.stdout) as {
    n_prompt: number;
    n_gen: number;
    samples_ts: number[];
  }[];
  const result: LlamaBenchResult = { peakRssBytes: run.peakRssBytes };
  for (const t of tests) {
    if (t.n_prompt > 0 && t.n_gen === 0) result.pp = t.samples_ts;
    if (t.n_gen > 0 && t.n_prompt === 0) result.tg = t.samples_ts;
  }
  return result;
}

/**
 * llama-bench's default `--repack 1` where it works, else `--repack 0` and why: on a CPU with
 * AMX, the pinned build's AMX matmul (an extra buffer type, taken for Q4_1 weights) can die with
 * SIGSEGV (it does on this project's KVM Sapphire Rapids machine), so one short pp run with the
 * default decides.
 */
export async function chooseRepack(
  bin: string,
  s: LlamaBenchSettings,
): Promise<{ repack: 0 | 1; why: string }> {
  try {
    await runLlamaBench(bin, { ...s, nGen: 0, reps: 1, repack: 1 });
    return { repack: 1, why: "llama-bench's default" };
  } catch (error) {
    return {
      repack: 0,
      why: `the default --repack 1 failed here (${(error as Error).message.split(":")[0]}; ` +
        `the AMX matmul of its extra buffer types), so weights stay in their file layout as Graft's do`,
    };
  }
}
