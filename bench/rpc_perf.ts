/**
 * `deno task bench:rpc`: SmolLM2-135M Q4_1 over llama.cpp's RPC protocol, against one local
 * `ggml-rpc-server` (the pinned build of `deno task llama:build`) on a loopback port:
 *
 *   perf rpc_tg32_vs_local graft=<tok/s>tok/s graft_local=<tok/s>tok/s ratio=...
 *     Graft with the whole model on the server (`LLM.load` with one `rpc` server: the blocks,
 *     the output and the embedding, which llama.cpp's `-ngl 99 --rpc` keeps on the CPU) against
 *     Graft on the local CPU: the protocol's overhead.
 *   perf rpc_client_tg32 graft=<tok/s>tok/s llama_bench_rpc=<tok/s>tok/s ratio=...
 *   perf rpc_client_pp64 graft=<tok/s>tok/s llama_bench_rpc=<tok/s>tok/s ratio=...
 *     Graft's RPC client against llama.cpp's (llama-bench --rpc -ngl 99 -fa 0), same server.
 *     The graphs differ where Graft's client is built to: it stores each block's q, k, v and
 *     its gate, up projections fused on the server (`LLMLoadOptions.fuseProjections`) and sends
 *     silu * up as ggml's GLU, and turns a token's q and k heads with one rope, so a decoding
 *     step is 514 compute nodes (181 matrix products) where llama.cpp's is 665 (271), with the
 *     same logits bit for bit (tests/rpc_llm_test.ts).
 *
 * tg: N_GEN decodes of one token each from an empty cache; pp: N_PROMPT tokens in one eval; a
 * warmup (Graft: one untimed run of each, see `graft`; llama-bench: its own), then REPS timed
 * runs, tokens/s the mean (llama-bench's avg_ts). Each timed run directly follows an untimed
 * run of its own kind, as in llama-bench (its pp test: a warmup prompt, then the timed one; its
 * tg test: a warmup token, then the timed tokens), so that both clients' timed graphs are the
 * server's last graph again (GRAPH_RECOMPUTE) rather than a full GRAPH_COMPUTE for one of them.
 * The runs take turns (Graft local, Graft over RPC, llama-bench -r 1; each loads the model and
 * warms up), REPS rounds, so that a drift of the machine's speed touches all three. The server
 * and both clients use THREADS threads. Without the build or the model, says how to get them
 * and exits.
 *
 * Usage: deno task bench:rpc [--reps 5]
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
const REPS = at >= 0 ? Number(Deno.args[at + 1]) : 5;

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

/** A Graft model, loaded once, and its timed runs: one tg or pp run per call. */
interface GraftRunner extends Disposable {
  tg(): Promise<number>;
  pp(): Promise<number>;
}

/** Graft on `rpc` servers (none: the local CPU), warmed up (plans built, the code compiled). */
async function graft(rpc: string[]): Promise<GraftRunner> {
  const llm = await LLM.load(SMOLLM2_PATH, {
    threads: THREADS,
    nCtx: 256,
    ...(rpc.length > 0 ? { rpc } : {}),
  });
  let token = 1;
  const next = (): number => (token = (token * 48271) % 49151 + 1);
  // Tokens per second of one run from an empty cache, as llama-bench's tg and pp tests.
  const timed = async (n: number, run: () => Promise<void>): Promise<number> => {
    llm.reset();
    const start = performance.now();
    await run();
    return n / ((performance.now() - start) / 1000);
  };
  const tgRun = async (n: number): Promise<void> => {
    for (let i = 0; i < n; i++) await llm.eval([next()]);
  };
  const ppRun = (n: number): Promise<void> => llm.eval(Array.from({ length: n }, next)).then();
  // Warmup, untimed: one tg run and one pp run. llama-bench's own is one token and one prompt;
  // Graft's JavaScript is compiled while it runs, and the first run of N_GEN tokens after a load
  // is measured 10-15% slower than the next (V8 optimizes the decode path during it).
  await timed(N_GEN, () => tgRun(N_GEN));
  await timed(N_PROMPT, () => ppRun(N_PROMPT));
  return {
    // llama-bench's order within a test: an untimed run of the same kind, then the timed one.
    tg: async () => {
      await timed(1, () => tgRun(1));
      return await timed(N_GEN, () => tgRun(N_GEN));
    },
    pp: async () => {
      await timed(N_PROMPT, () => ppRun(N_PROMPT));
      return await timed(N_PROMPT, () => ppRun(N_PROMPT));
    },
    [Symbol.dispose]: () => llm.dispose(),
  };
}

/** One llama-bench --rpc run against `endpoint` (its own warmup, then -r 1): tg and pp tokens/s. */
async function llamaBench(endpoint: string): Promise<{ tg: number; pp: number }> {
  const run = await runLlamaBench(`${binDir}/llama-bench`, {
    model: SMOLLM2_PATH,
    threads: THREADS,
    nPrompt: N_PROMPT,
    nGen: N_GEN,
    reps: 1,
    flashAttn: "0",
    repack: 1,
    rpc: endpoint,
  });
  return { tg: mean(run.tg ?? [NaN]), pp: mean(run.pp ?? [NaN]) };
}

const report = new PerfReport();
await using server = await GgmlRpcServer.start(binDir, THREADS);
// The repetitions of the three take turns, so that the slow drifts of a shared machine's speed
// (seen here: 15% over a minute) fall on each alike; each series' mean is reported.
const samples = { local: [] as number[], tg: [] as number[], pp: [] as number[] };
const peer = { tg: [] as number[], pp: [] as number[] };
for (let r = 0; r < REPS; r++) {
  {
    using local = await graft([]);
    samples.local.push(await local.tg());
  }
  // ggml-rpc-server serves one client at a time: Graft's connection closes before llama-bench's.
  {
    using overRpc = await graft([server.endpoint]);
    samples.tg.push(await overRpc.tg());
    samples.pp.push(await overRpc.pp());
  }
  const llama = await llamaBench(server.endpoint);
  peer.tg.push(llama.tg);
  peer.pp.push(llama.pp);
}
report.report(
  `rpc_tg${N_GEN}_vs_local`,
  mean(samples.tg),
  "graft_local",
  mean(samples.local),
  "tok/s",
);
report.report(`rpc_client_tg${N_GEN}`, mean(samples.tg), "llama_bench_rpc", mean(peer.tg), "tok/s");
report.report(
  `rpc_client_pp${N_PROMPT}`,
  mean(samples.pp),
  "llama_bench_rpc",
  mean(peer.pp),
  "tok/s",
);
