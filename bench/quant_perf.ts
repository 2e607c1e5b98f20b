/**
 * Quantized matmul on the CPU (issue 13's benchmark), on 2 threads:
 *
 *   perf gemv_<type>_4096 graft=<GB/s> read_bound=<GB/s> ratio=<graft/bound>
 *   perf gemv_<type>_4096_vs_ggml graft=<GB/s> ggml=<GB/s> ratio=<graft/ggml>
 *   perf prefill_<type>_4096x4096x512 graft=<GFLOP/s> sgemm_f32=<GFLOP/s> ratio=<graft/sgemm>
 *   perf gguf_load_smollm2_* ...   (bench/gguf_perf.ts, in a process of its own)
 *
 * Matrix-vector: 4096x4096 weights times one f32 column, in GB/s of weight bytes read, over a
 * rotation of copies whose total is at least twice the last-level cache (so the weights come
 * from memory, as a model's do). The read bound is bench/read_bound.zig streaming a working set
 * of the same size on the same threads; ggml's figure is its own CPU backend on the same shape
 * and rotation (bench/peers/ggml_gemv.sh, from the cached llama.cpp build of `deno task
 * llama:build`; skipped with a message when that build is absent). Graft and each peer are
 * measured alternately, best of 3 rounds. Prefill: 4096x4096 weights times 512 columns, against
 * Graft's own f32 sgemm of the same shape.
 *
 * Then the GGUF lines of bench/gguf_perf.ts (load time and RSS of the SmolLM2 file) when the model
 * is cached (`deno task model:fetch`), run in a fresh process so that its RSS figures do not carry
 * this one's allocations.
 *
 * Usage: deno task bench:quant [--types q4_0,q8_0] [--quick]
 * @module
 */

import {
  allocTensors,
  Context,
  CpuBackend,
  Graph,
  mulMat,
  type QuantDType,
  quantize,
  type Tensor,
} from "../mod.ts";
import { secondsPerCall } from "./timing.ts";
import { Progress } from "./progress.ts";
import { SMOLLM2_PATH, smolLM2Cached } from "../tools/model_cache.ts";
import { llamaBuildBin } from "./peers/llama_bench_cli.ts";

const THREADS = 2;
const K = 4096;
const M = 4096;
const PREFILL_N = 512;
/** The rotation stops growing here even if the cache asks for more (this machine has 24 GiB). */
const ROTATION_CAP_BYTES = 3 * 2 ** 30;

const args = Deno.args;
const quick = args.includes("--quick");
const typesArg = args[args.indexOf("--types") + 1];
const GEMV_TYPES: QuantDType[] = args.includes("--types") && typesArg
  ? typesArg.split(",") as QuantDType[]
  : ["q8_0", "q4_0", "q4_1", "q4_K", "q6_K"];
const PREFILL_TYPES: QuantDType[] = ["q4_0", "q4_K"];
const ROUNDS = quick ? 1 : 3;
const MIN_MS = quick ? 150 : 400;

const root = new URL("..", import.meta.url).pathname;

/**
 * The last-level cache's size in bytes, from `getconf` (Deno reads /sys only with --allow-all);
 * 0 if it cannot be told.
 */
function lastLevelCacheBytes(): number {
  let best = 0;
  for (const level of [2, 3, 4]) {
    try {
      const run = new Deno.Command("getconf", { args: [`LEVEL${level}_CACHE_SIZE`] }).outputSync();
      const bytes = Number(new TextDecoder().decode(run.stdout).trim());
      if (run.success && Number.isFinite(bytes)) best = Math.max(best, bytes);
    } catch {
      // no getconf: the rotation below still holds at least two copies
    }
  }
  return best;
}

function randoms(count: number, seed: number): Float32Array {
  const out = new Float32Array(count);
  let s = seed >>> 0;
  for (let i = 0; i < count; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = s / 2 ** 32 * 2 - 1;
  }
  return out;
}

/** Builds (once, with `deno task`'s zig) and runs the read bound on `bytes` for `seconds`. */
function readBound(bytes: number, seconds: number): number {
  const exe = `${root}bench/out/read_bound`;
  const zig = `${root}.tools/zig/ziglang/zig`;
  try {
    Deno.statSync(exe);
  } catch {
    Deno.mkdirSync(`${root}bench/out`, { recursive: true });
    const build = new Deno.Command(zig, {
      args: [
        "build-exe",
        `${root}bench/read_bound.zig`,
        "-O",
        "ReleaseFast",
        "-mcpu",
        "native",
        `-femit-bin=${exe}`,
        "--cache-dir",
        `${root}.zig-cache`,
      ],
    }).outputSync();
    if (!build.success) throw new Error(new TextDecoder().decode(build.stderr));
  }
  const run = new Deno.Command(exe, { args: [String(bytes), String(THREADS), String(seconds)] })
    .outputSync();
  const text = new TextDecoder().decode(run.stdout);
  const gbps = /gbps=([\d.]+)/.exec(text);
  if (!run.success || !gbps) throw new Error(`read_bound failed: ${text}`);
  return Number(gbps[1]);
}

/** ggml's mat-vec GB/s on the same shape, or undefined (with the reason) when not built. */
function ggmlGemv(type: QuantDType, n: number): { gbps: number; gflops: number } | string {
  const script = `${root}bench/peers/ggml_gemv.sh`;
  // The harness would start the (minutes-long) llama.cpp build itself: only a cached build runs.
  const built = ["avx512", "avx2", "generic"].some((level) => {
    try {
      Deno.statSync(`${llamaBuildBin(level)}/test-backend-ops`);
      return true;
    } catch {
      return false;
    }
  });
  if (!built) return "no cached llama.cpp build; run `deno task llama:build` (about 10 minutes)";
  const run = new Deno.Command("bash", {
    args: [
      script,
      "--type",
      type,
      "--k",
      String(K),
      "--m",
      String(M),
      "--n",
      String(n),
      "--threads",
      String(THREADS),
      "--seconds",
      quick ? "1" : "2",
    ],
    stderr: "piped",
  }).outputSync();
  const text = new TextDecoder().decode(run.stdout);
  const gbps = /gbps=([\d.]+)/.exec(text);
  const gflops = /gflops=([\d.]+)/.exec(text);
  if (!run.success || !gbps || !gflops) {
    const why = new TextDecoder().decode(run.stderr).trim().split("\n").at(-1);
    return `ggml harness unavailable (${why ?? "no output"}); run \`deno task llama:build\``;
  }
  return { gbps: Number(gbps[1]), gflops: Number(gflops[1]) };
}

/** A graph of `copies` products `w_i x` (each its own weights) and a function computing it. */
function products(
  cpu: CpuBackend,
  dtype: QuantDType | "f32",
  weights: Uint8Array | Float32Array,
  copies: number,
  n: number,
): { run: () => void; dispose: () => void; weightBytes: number } {
  const ctx = new Context();
  const x = ctx.newTensor("f32", [K, n]);
  const ws: Tensor[] = [];
  const outs: Tensor[] = [];
  for (let i = 0; i < copies; i++) {
    const w = ctx.newTensor(dtype, [K, M]);
    ws.push(w);
    outs.push(mulMat(w, x));
  }
  const graph = Graph.build(...outs);
  const memory = allocTensors(cpu, [...ctx.tensors, ...graph.leafs, ...graph.nodes]);
  for (const w of ws) cpu.setTensor(w, weights);
  cpu.setTensor(x, randoms(K * n, 7));
  const plan = cpu.graphPlanCreate(graph);
  return {
    run: () => cpu.graphPlanCompute(plan),
    dispose: () => {
      plan.dispose();
      memory.dispose();
    },
    weightBytes: ws[0]!.nbytes,
  };
}

function fmt(v: number, digits = 2): string {
  return v.toFixed(digits);
}

if (import.meta.main) {
  using cpu = new CpuBackend({ threads: THREADS });
  const llc = lastLevelCacheBytes();
  if (llc === 0) console.log("# last-level cache size unknown: the rotation may fit in it");
  const values = randoms(K * M, 1);
  console.log(
    `# ${THREADS} threads, kernels ${cpu.simd}, last-level cache ${(llc / 2 ** 20).toFixed(0)} MiB`,
  );
  // On a terminal, which case runs (each takes seconds to minutes); nothing in a log.
  const progress = new Progress(GEMV_TYPES.length + PREFILL_TYPES.length);
  for (const type of GEMV_TYPES) {
    progress.step(`gemv ${type}`);
    const bytes = quantize(values, type);
    const copies = Math.max(2, Math.ceil(Math.min(2 * llc, ROTATION_CAP_BYTES) / bytes.length));
    const set = products(cpu, type, bytes, copies, 1);
    const working = set.weightBytes * copies;
    if (2 * llc > ROTATION_CAP_BYTES) {
      console.log(`# ${type}: rotation capped at ${(working / 2 ** 30).toFixed(2)} GiB`);
    }
    let graft = 0, bound = 0;
    for (let r = 0; r < ROUNDS; r++) {
      graft = Math.max(graft, working / secondsPerCall(set.run, MIN_MS) / 1e9);
      bound = Math.max(bound, readBound(working, quick ? 0.5 : 1));
    }
    console.log(
      `perf gemv_${type}_4096 graft=${fmt(graft)}GB/s read_bound=${fmt(bound)}GB/s ` +
        `ratio=${fmt(graft / bound, 3)}`,
    );
    const ggml = ggmlGemv(type, 1);
    if (typeof ggml === "string") {
      console.log(`# gemv_${type}_4096_vs_ggml skipped: ${ggml}`);
    } else {
      let best = ggml.gbps;
      graft = Math.max(graft, working / secondsPerCall(set.run, MIN_MS) / 1e9);
      for (let r = 1; r < ROUNDS; r++) {
        const again = ggmlGemv(type, 1);
        if (typeof again !== "string") best = Math.max(best, again.gbps);
      }
      console.log(
        `perf gemv_${type}_4096_vs_ggml graft=${fmt(graft)}GB/s ggml=${fmt(best)}GB/s ` +
          `ratio=${fmt(graft / best, 3)}`,
      );
    }
    set.dispose();
  }
  const flops = 2 * K * M * PREFILL_N;
  const f32 = products(cpu, "f32", values, 1, PREFILL_N);
  for (const type of PREFILL_TYPES) {
    progress.step(`prefill ${type}`);
    const set = products(cpu, type, quantize(values, type), 1, PREFILL_N);
    let graft = 0, sgemm = 0;
    for (let r = 0; r < ROUNDS; r++) {
      graft = Math.max(graft, flops / secondsPerCall(set.run, MIN_MS) / 1e9);
      sgemm = Math.max(sgemm, flops / secondsPerCall(f32.run, MIN_MS) / 1e9);
    }
    console.log(
      `perf prefill_${type}_4096x4096x512 graft=${fmt(graft, 1)}GFLOP/s ` +
        `sgemm_f32=${fmt(sgemm, 1)}GFLOP/s ratio=${fmt(graft / sgemm, 3)}`,
    );
    const ggml = ggmlGemv(type, PREFILL_N);
    if (typeof ggml !== "string") {
      console.log(
        `perf prefill_${type}_4096x4096x512_vs_ggml graft=${fmt(graft, 1)}GFLOP/s ` +
          `ggml=${fmt(ggml.gflops, 1)}GFLOP/s ratio=${fmt(graft / ggml.gflops, 3)}`,
      );
    }
    set.dispose();
  }
  f32.dispose();
  progress.done();
  if (!smolLM2Cached()) {
    console.log(
      `# gguf_load_smollm2 skipped: ${SMOLLM2_PATH} is missing; run \`deno task model:fetch\``,
    );
  } else if (!quick) {
    const gguf = new Deno.Command(Deno.execPath(), {
      args: ["run", "--allow-ffi", "--allow-env", "--allow-read", `${root}bench/gguf_perf.ts`],
      stdout: "inherit",
      stderr: "inherit",
    }).outputSync();
    if (!gguf.success) throw new Error("bench/gguf_perf.ts failed");
  }
}
