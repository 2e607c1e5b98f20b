/**
 * SmolLM2-135M Q4_1 end to end on the CPU, 2 threads: Graft's LLM against llama.cpp's own
 * llama-bench (the pinned build of `deno task llama:build`) and, when installed, node-llama-cpp:
 *
 *   perf llm_pp128 graft=<tok/s>tok/s llama_bench=<tok/s>tok/s ratio=<graft/peer>
 *   perf llm_tg64 graft=<tok/s>tok/s llama_bench=<tok/s>tok/s ratio=<graft/peer>
 *   perf llm_rss graft=<MB>MB llama_bench=<MB>MB ratio=<graft/peer>
 *   perf llm_pp128_node_llama_cpp graft=... node_llama_cpp=... ratio=...   (and _tg64, _rss)
 *
 * pp128: 128 random prompt tokens in one batch from an empty cache; tg64: 64 decodes of one token
 * each from an empty cache; tokens/s the mean over the repetitions, as llama-bench's avg_ts, after
 * one warmup (see bench/llm_graft.ts, bench/peers/llama_bench_cli.ts for the settings read from
 * llama-bench's source). Each side runs in a process of its own under bench/peers/rss.py, which
 * gives its peak RSS the same way (ru_maxrss: runtime, model mapping, KV cache and all, both tests
 * in one process). The sides alternate, `--rounds` times (the order reversed every other round),
 * so a noisy neighbour slows each; a missing peer is skipped with how to get it.
 *
 * `--fa on` runs every side with flash attention (llama-bench `-fa 1`, Graft's `flashAttn`,
 * node-llama-cpp's `flashAttention`) and names the lines `llm_pp128_fa`, `llm_tg64_fa`, `llm_rss_fa`.
 *
 * `--depth N` (llama-bench's `-d`) starts every run after N tokens of context (evaluated untimed,
 * n_ctx grown by N) and adds `_dN` to the line names; node-llama-cpp is skipped then.
 *
 * `--model FILE` runs another GGUF on every side (default: the cached SmolLM2 Q4_1, `deno task
 * model:fetch`), and `--tag NAME` appends `_NAME` to the line names, e.g. for SmolLM2 requantized
 * to Q4_K_M (`deno task gguf quantize ... --type q4_K_M`): `--model FILE --tag q4_K_M`.
 *
 * Usage: deno task bench:llm [--reps 5] [--rounds 2] [--seed 42] [--fa on|off] [--depth N]
 *   [--model FILE [--tag NAME]] [--no-node]
 * @module
 */

import { SMOLLM2_PATH, smolLM2Cached } from "../tools/model_cache.ts";
import { runWithPeakRss } from "./peak_rss.ts";
import {
  chooseRepack,
  cpuFlags,
  cpuModel,
  llamaBenchArgs,
  llamaBenchPath,
  type LlamaBenchSettings,
  runLlamaBench,
  simdLevel,
} from "./peers/llama_bench_cli.ts";
import { nodeLlamaCppMissing, runNodeLlamaCpp } from "./peers/node_llama_cpp.ts";
import { Progress } from "./progress.ts";

const THREADS = 2;
const N_PROMPT = 128;
const N_GEN = 64;
/** llama_context rounds n_ctx up to a multiple of this (src/llama-context.cpp, GGML_PAD). */
const LLAMA_CTX_PAD = 256;

const args = Deno.args;
const flag = (name: string, fallback: number): number => {
  const at = args.indexOf(name);
  return at >= 0 ? Number(args[at + 1]) : fallback;
};
const REPS = flag("--reps", 5);
const ROUNDS = flag("--rounds", 2);
const SEED = flag("--seed", 42);
const faAt = args.indexOf("--fa");
const FA = faAt >= 0 ? args[faAt + 1] : "off";
if (FA !== "on" && FA !== "off") throw new Error(`--fa must be on or off, got ${FA}`);
const DEPTH = flag("--depth", 0);
if (!Number.isInteger(DEPTH) || DEPTH < 0) throw new Error(`--depth must be an integer >= 0`);
const modelAt = args.indexOf("--model");
const MODEL: string = modelAt < 0 ? SMOLLM2_PATH : args[modelAt + 1] ?? "";
if (!MODEL) throw new Error("--model needs a GGUF file");
const tagAt = args.indexOf("--tag");
const TAG = tagAt >= 0 ? args[tagAt + 1] : "";
if (TAG === undefined || !/^[A-Za-z0-9_]*$/.test(TAG)) {
  throw new Error(`--tag must be letters, digits and _, got ${TAG}`);
}
/** Line names' suffix for the tag, flash attention and depth. */
const LINE_SUFFIX = (TAG ? `_${TAG}` : "") + (FA === "on" ? "_fa" : "") +
  (DEPTH > 0 ? `_d${DEPTH}` : "");

/** Tokens/s per repetition of each test, and the peak RSS, of one side over all rounds. */
interface Side {
  pp: number[];
  tg: number[];
  peakRssBytes: number;
}
const emptySide = (): Side => ({ pp: [], tg: [], peakRssBytes: 0 });
const add = (side: Side, run: { pp?: number[]; tg?: number[]; peakRssBytes: number }): void => {
  side.pp.push(...run.pp ?? []);
  side.tg.push(...run.tg ?? []);
  side.peakRssBytes = Math.max(side.peakRssBytes, run.peakRssBytes);
};
const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;

/** n_ctx as llama-bench asks for it (n_prompt + n_gen + n_depth) and as llama.cpp allocates it. */
const padCtx = (n: number): number => Math.ceil(n / LLAMA_CTX_PAD) * LLAMA_CTX_PAD;
const N_CTX_PP = padCtx(N_PROMPT + DEPTH);
const N_CTX_TG = padCtx(N_GEN + DEPTH);

/** Graft's side; `repack` as llama-bench's `--repack` (LLMLoadOptions.repack). */
async function runGraft(repack: 0 | 1): Promise<Side> {
  const script = new URL("./llm_graft.ts", import.meta.url).pathname;
  const run = await runWithPeakRss(Deno.execPath(), [
    ...["run", "--allow-ffi", "--allow-env", "--allow-read", script, MODEL],
    ...[THREADS, N_PROMPT, N_GEN, N_CTX_PP, N_CTX_TG, REPS, SEED].map(String),
    FA === "on" ? "1" : "0",
    String(DEPTH),
    String(repack),
  ]);
  if (!run.success) throw new Error(`bench/llm_graft.ts failed:\n${run.stderr}`);
  const out = JSON.parse(run.stdout.trim().split("\n").at(-1)!) as {
    pp?: { samples_ts: number[] };
    tg?: { samples_ts: number[] };
  };
  return {
    pp: out.pp?.samples_ts ?? [],
    tg: out.tg?.samples_ts ?? [],
    peakRssBytes: run.peakRssBytes,
  };
}

function printLines(peer: string, suffix: string, graft: Side, other: Side): void {
  const fmt = (v: number): string => v >= 100 ? v.toFixed(1) : v.toFixed(2);
  const line = (name: string, g: number, p: number, unit: string): void =>
    console.log(
      `perf ${name}${suffix} graft=${fmt(g)}${unit} ${peer}=${fmt(p)}${unit} ratio=${
        (g / p).toFixed(3)
      }`,
    );
  line(`llm_pp${N_PROMPT}`, mean(graft.pp), mean(other.pp), "tok/s");
  line(`llm_tg${N_GEN}`, mean(graft.tg), mean(other.tg), "tok/s");
  line("llm_rss", graft.peakRssBytes / 1e6, other.peakRssBytes / 1e6, "MB");
}

if (import.meta.main) {
  if (modelAt < 0 && !smolLM2Cached()) {
    console.log(`# llm skipped: ${SMOLLM2_PATH} is missing; run \`deno task model:fetch\``);
    Deno.exit(0);
  }
  const flags = cpuFlags();
  const extras = ["avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8"].filter((f) => flags.has(f));
  console.log(`# model: ${MODEL}`);
  console.log(
    `# cpu: ${cpuModel()}, ${navigator.hardwareConcurrency} logical cores; SIMD level ` +
      `${simdLevel()}${extras.length ? ` (+${extras.join(", ")})` : ""}`,
  );
  console.log(
    `# both sides: threads=${THREADS}; KV cache K f16, V f16; flash attention ${FA}; ` +
      `pp${N_PROMPT} n_ctx=${N_CTX_PP}, tg${N_GEN} n_ctx=${N_CTX_TG} (llama-bench asks for ` +
      `n_prompt+n_gen+n_depth = ${N_PROMPT + DEPTH} and ${N_GEN + DEPTH}, llama.cpp pads to ` +
      `a multiple of ${LLAMA_CTX_PAD}; ` +
      `Graft and node-llama-cpp get the padded sizes); one warmup, ${REPS} repetitions x ` +
      `${ROUNDS} rounds, tokens/s the mean over all; random tokens (seed ${SEED})` +
      (DEPTH > 0 ? `; each run after ${DEPTH} tokens of context (untimed)` : ""),
  );

  const settings: LlamaBenchSettings = {
    model: MODEL,
    threads: THREADS,
    nPrompt: N_PROMPT,
    nGen: N_GEN,
    reps: REPS,
    flashAttn: FA === "on" ? "1" : "0",
    repack: 1,
    depth: DEPTH,
  };
  const found = llamaBenchPath();
  let llamaBench: string | undefined;
  if ("skip" in found) {
    console.log(`# llm vs llama_bench skipped: ${found.skip}`);
  } else {
    llamaBench = found.path;
    const { repack, why } = await chooseRepack(llamaBench, settings);
    settings.repack = repack;
    console.log(`# llama_bench: ${llamaBench} ${llamaBenchArgs(settings).join(" ")}`);
    console.log(
      `#   -fa ${settings.flashAttn}: llama-bench's default is auto (on where the CPU backend ` +
        `supports it); both sides are set alike (--fa on|off). --repack ${repack}: ${why}; ` +
        `Graft's repack option follows it`,
    );
  }
  const nodeMissing = args.includes("--no-node")
    ? "--no-node"
    : DEPTH > 0
    ? "--depth (bench/peers/node_llama_cpp_bench.mjs has no depth)"
    : nodeLlamaCppMissing();
  if (nodeMissing) console.log(`# llm vs node_llama_cpp skipped: ${nodeMissing}`);
  else {
    console.log(
      `# node_llama_cpp: gpu: false, flashAttention: ${FA === "on"}, same threads and n_ctx`,
    );
  }

  const graft = emptySide(), peer = emptySide(), node = emptySide();
  let nodeOk = !nodeMissing, nodeVersion = "";
  // On a terminal, which side of which round runs (each takes tens of seconds).
  const progress = new Progress(ROUNDS * 3);
  for (let round = 0; round < ROUNDS; round++) {
    const steps: (() => Promise<void>)[] = [
      async () => {
        progress.step(`round ${round + 1}/${ROUNDS}: graft`);
        add(graft, await runGraft(settings.repack));
      },
      async () => {
        progress.step(`round ${round + 1}/${ROUNDS}: llama-bench`);
        if (!llamaBench) return;
        try {
          add(peer, await runLlamaBench(llamaBench, settings));
        } catch (error) {
          console.log(`# llm vs llama_bench skipped: ${(error as Error).message}`);
          llamaBench = undefined;
        }
      },
      async () => {
        progress.step(`round ${round + 1}/${ROUNDS}: node-llama-cpp`);
        if (!nodeOk) return;
        try {
          const run = await runNodeLlamaCpp({
            ...settings,
            nCtxPP: N_CTX_PP,
            nCtxTG: N_CTX_TG,
            seed: SEED,
            flashAttention: FA === "on",
          });
          nodeVersion = run.version;
          add(node, run);
        } catch (error) {
          console.log(`# llm vs node_llama_cpp skipped: ${(error as Error).message}`);
          nodeOk = false;
        }
      },
    ];
    for (const step of round % 2 === 0 ? steps : steps.reverse()) await step();
  }
  progress.done();

  if (llamaBench) printLines("llama_bench", LINE_SUFFIX, graft, peer);
  else {
    console.log(
      `# graft alone: llm_pp${N_PROMPT}${LINE_SUFFIX}=${mean(graft.pp).toFixed(1)}tok/s ` +
        `llm_tg${N_GEN}${LINE_SUFFIX}=${mean(graft.tg).toFixed(1)}tok/s llm_rss${LINE_SUFFIX}=${
          (graft.peakRssBytes / 1e6).toFixed(1)
        }MB`,
    );
  }
  if (nodeOk) {
    console.log(`# node_llama_cpp ${nodeVersion}`);
    printLines("node_llama_cpp", `${LINE_SUFFIX}_node_llama_cpp`, graft, node);
  }
}
