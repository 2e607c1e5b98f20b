/**
 * `deno task bench:rpc-server`: llama.cpp's own client (`llama-bench --rpc -ngl 99`) running
 * SmolLM2-135M Q4_1 on Graft's RPC server against the same on llama.cpp's `ggml-rpc-server`
 * (the pinned build of `deno task llama:build`), both on loopback with THREADS threads:
 *
 *   perf rpc_server_tg32_fa<0|1> graft=<tok/s>tok/s ggml_rpc_server=<tok/s>tok/s ratio=...
 *   perf rpc_server_pp64_fa<0|1> graft=<tok/s>tok/s ggml_rpc_server=<tok/s>tok/s ratio=...
 *
 * Flash attention off (SOFT_MAX and f16 K/V products) and on (FLASH_ATTN_EXT). llama-bench's
 * own warmup and REPS repetitions; tokens/s are its avg_ts. Graft's server runs in this process.
 * Without the build or the model, says how to get them and exits.
 *
 * Usage: deno task bench:rpc-server [--reps 3] [--threads 2]
 *
 * On a machine with more runnable threads than cores, a thread pool's spinning barrier makes
 * both servers crawl at 2 threads (seen here: under 1 token/s); `--threads 1` measures the
 * servers rather than the scheduler there.
 * @module
 */

import { SMOLLM2_PATH, smolLM2Cached } from "../tools/model_cache.ts";
import { GgmlRpcServer, llamaBinDir } from "../tests/rpc_server.ts";
import { RpcServer } from "../src/rpc/server/server.ts";
import { PerfReport } from "./perf_line.ts";
import { runLlamaBench } from "./peers/llama_bench_cli.ts";

const threadsAt = Deno.args.indexOf("--threads");
const THREADS = threadsAt >= 0 ? Number(Deno.args[threadsAt + 1]) : 2;
const N_GEN = 32;
const N_PROMPT = 64;
const at = Deno.args.indexOf("--reps");
const REPS = at >= 0 ? Number(Deno.args[at + 1]) : 3;

const bin = llamaBinDir();
if ("skip" in bin) {
  console.log(`bench:rpc-server skipped: ${bin.skip}`);
  Deno.exit(0);
}
const binDir = bin.dir;
if (!smolLM2Cached()) {
  console.log(`bench:rpc-server skipped: no ${SMOLLM2_PATH} (deno task model:fetch)`);
  Deno.exit(0);
}

/** llama-bench --rpc against `endpoint`: tg and pp tokens/s (the mean of its runs, its avg_ts). */
async function llamaBench(endpoint: string, fa: 0 | 1): Promise<{ tg: number; pp: number }> {
  const run = await runLlamaBench(`${binDir}/llama-bench`, {
    model: SMOLLM2_PATH,
    threads: THREADS,
    nPrompt: N_PROMPT,
    nGen: N_GEN,
    reps: REPS,
    flashAttn: String(fa) as "0" | "1",
    repack: 1,
    rpc: endpoint,
  });
  const mean = (xs: number[] | undefined): number =>
    xs && xs.length > 0 ? xs.reduce((s, x) => s + x, 0) / xs.length : NaN;
  return { tg: mean(run.tg), pp: mean(run.pp) };
}

const report = new PerfReport();
await using graft = RpcServer.listen({ port: 0, threads: THREADS, log: () => {} });
await using ggml = await GgmlRpcServer.start(binDir, THREADS);
for (const fa of [0, 1] as const) {
  const onGraft = await llamaBench(`127.0.0.1:${graft.port}`, fa);
  const onGgml = await llamaBench(ggml.endpoint, fa);
  report.report(`rpc_server_tg${N_GEN}_fa${fa}`, onGraft.tg, "ggml_rpc_server", onGgml.tg, "tok/s");
  report.report(
    `rpc_server_pp${N_PROMPT}_fa${fa}`,
    onGraft.pp,
    "ggml_rpc_server",
    onGgml.pp,
    "tok/s",
  );
}
