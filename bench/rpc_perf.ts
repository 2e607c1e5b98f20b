/**
 * `deno task bench:rpc`: SmolLM2-135M Q4_1 over llama.cpp's RPC protocol, against one local
 * `ggml-rpc-server` (the pinned build of `deno task llama:build`) on a loopback port:
 *
 *   perf rpc_tg32_vs_local graft=<tok/s>tok/s graft_local=<tok/s>tok/s ratio=...
 *     Graft with every block and the output on the server (the embedding local, as llama.cpp's
 *     `-ngl 99 --rpc`) against Graft on the local CPU: the protocol's overhead.
 *   perf rpc_client_tg32 graft=<tok/s>tok/s llama_bench_rpc=<tok/s>tok/s ratio=...
 *   perf rpc_client_pp64 graft=<tok/s>tok/s llama_bench_rpc=<tok/s>tok/s ratio=...
 *     Graft's RPC client against llama.cpp's (llama-bench --rpc -ngl 99 -fa 0), same server.
 *
 * tg: N_GEN decodes of one token each from an empty cache; pp: N_PROMPT tokens in one eval; one
 * warmup, then REPS timed runs, tokens/s the mean (llama-bench's avg_ts). The server and both
 * clients use THREADS threads. Without the build or the model, says how to get them and exits.
 *
 * Usage: deno task bench:rpc [--reps 3]
 * @module
 */

import { LLM } from "../src/llm/llm.ts";
import { SMOLLM2_PATH, smolLM2Cached } from "../tools/model_cache.ts";
import { GgmlRpcServer, llamaBinDir } from "../tests/rpc_server.ts";
import { PerfReport } from "./perf_line.ts";
import { runLlamaBench } from "./peers/llama_bench_cli.ts";

const THREADS = 2;
const N_GEN = 32;
const N_PROMPT = 64;
const at = Deno.args.indexOf("--reps");
const REPS = at >= 0 ? Number(Deno.args[at + 1]) : 3;

const bin = llamaBinDir();
if ("skip" in bin) {
  console.log(`bench:rpc skipped: ${bin.skip}`);
  Deno.exit(0);
}
const binDir = bin.dir;
if (!smolLM2Cached()) {
  console.log(`bench:rpc skipped: no ${SMOLLM2_PATH} (deno task model:fetch)`);
  Deno.exit(0);
}

const mean = (xs: number[]): number => xs.reduce((s, x) => s + x, 0) / xs.length;

/** Graft's tg and pp tokens/s with `rpc` servers (none: the local CPU). */
async function graft(rpc: string[]): Promise<{ tg: number; pp: number }> {
  using llm = await LLM.load(SMOLLM2_PATH, {
    threads: THREADS,
    nCtx: 256,
    ...(rpc.length > 0 ? { rpc } : {}),
  });
  let token = 1;
  const next = (): number => (token = (token * 48271) % 49151 + 1);
  const tgRun = async (n: number): Promise<void> => {
    for (let i = 0; i < n; i++) await llm.eval([next()]);
  };
  const ppRun = async (n: number): Promise<void> => {
    await llm.eval(Array.from({ length: n }, next));
  };
  const measure = async (run: (n: number) => Promise<void>, n: number): Promise<number> => {
    llm.reset();
    await run(n === N_GEN ? 1 : n); // warmup (plans built)
    const samples: number[] = [];
    for (let r = 0; r < REPS; r++) {
      llm.reset();
      const start = performance.now();
      await run(n);
      samples.push(n / ((performance.now() - start) / 1000));
    }
    return mean(samples);
  };
  return { tg: await measure(tgRun, N_GEN), pp: await measure(ppRun, N_PROMPT) };
}

/** llama-bench --rpc against `endpoint`: tg and pp tokens/s (the mean of its runs, its avg_ts). */
async function llamaBench(endpoint: string): Promise<{ tg: number; pp: number }> {
  const run = await runLlamaBench(`${binDir}/llama-bench`, {
    model: SMOLLM2_PATH,
    threads: THREADS,
    nPrompt: N_PROMPT,
    nGen: N_GEN,
    reps: REPS,
    flashAttn: "0",
    repack: 1,
    rpc: endpoint,
  });
  return { tg: mean(run.tg ?? [NaN]), pp: mean(run.pp ?? [NaN]) };
}

const report = new PerfReport();
await using server = await GgmlRpcServer.start(binDir, THREADS);
const local = await graft([]);
const overRpc = await graft([server.endpoint]);
const peer = await llamaBench(server.endpoint);
report.report(`rpc_tg${N_GEN}_vs_local`, overRpc.tg, "graft_local", local.tg, "tok/s");
report.report(`rpc_client_tg${N_GEN}`, overRpc.tg, "llama_bench_rpc", peer.tg, "tok/s");
report.report(`rpc_client_pp${N_PROMPT}`, overRpc.pp, "llama_bench_rpc", peer.pp, "tok/s");
