/**
 * CPU benchmarks against peers measured in the same run. Each case prints one line
 *   perf <case> graft=<value><unit> <peer>=<value><unit> ratio=<graft/peer>
 * and all figures go to bench/out/cpu.json. Run with `deno task bench:cpu`.
 * @module
 */

import {
  add,
  allocGraph,
  allocTensors,
  Context,
  CpuBackend,
  mulMat,
  rmsNorm,
  scale,
} from "../mod.ts";
import { Case, random } from "./cases.ts";
import { blockData, buildBlock, setBlockInputs } from "../demo/block.ts";
import {
  CblasNoTrans,
  CblasRowMajor,
  CblasTrans,
  coreName,
  loadOpenBlas,
} from "./peers/openblas.ts";
import { compare, compareAsync } from "./timing.ts";
import { PerfReport } from "./perf_line.ts";
import { Progress } from "./progress.ts";
import { onnxBlock } from "./peers/onnx_block.ts";
import { relativeError } from "../demo/block_reference.ts";

const perf = new PerfReport();

const blas = loadOpenBlas();
if (blas) console.log(`openblas core: ${coreName(blas)}`);

function sgemm(cpu: CpuBackend, n: number, threads: number): void {
  const ctx = new Context();
  const a = ctx.newTensor("f32", [n, n]);
  const b = ctx.newTensor("f32", [n, n]);
  using c = new Case(cpu, [a, b], mulMat(a, b));
  const flops = 2 * n * n * n;
  if (!blas) return;
  blas.symbols.openblas_set_num_threads(threads);
  const A = random(n * n, 1), B = random(n * n, 2), C = new Float32Array(n * n);
  // The same product: C[N][M] = A[M][K] . B[N][K]^T, row-major.
  const peer = (): void =>
    blas.symbols.cblas_sgemm(
      CblasRowMajor,
      CblasNoTrans,
      CblasTrans,
      n,
      n,
      n,
      1,
      B,
      n,
      A,
      n,
      0,
      C,
      n,
    );
  const [tg, tp] = compare(c.run, peer);
  perf.report(
    `sgemm_f32_n${n}_t${threads}`,
    flops / tg / 1e9,
    "openblas",
    flops / tp / 1e9,
    "GFLOP/s",
  );
}

function gemv(cpu: CpuBackend, dtype: "f32" | "f16"): void {
  const n = 4096;
  const ctx = new Context();
  const w = ctx.newTensor(dtype, [n, n]);
  const x = ctx.newTensor("f32", [n, 1]);
  using c = new Case(cpu, [w, x], mulMat(w, x));
  const bytes = n * n * (dtype === "f32" ? 4 : 2);
  {
    // gemv reads its weights once and writes almost nothing: its bound is read bandwidth. JS
    // has no native read-only loop fast enough to measure that, so the bound is the same
    // memcpy as for add and rmsnorm (2 bytes moved per byte copied), alternated with the gemv.
    // A copy also pays for writes, so a read-only kernel may beat it (ratio above 1).
    const [tg, ts] = compare(c.run, streamCopy);
    perf.report(
      `gemv_${dtype}_4096_vs_stream`,
      bytes / tg / 1e9,
      "stream_copy",
      streamBytes / ts / 1e9,
      "GB/s",
    );
  }
  if (!blas) return;
  blas.symbols.openblas_set_num_threads(cpu.threads);
  const W = random(n * n, 3), X = random(n, 4), Y = new Float32Array(n);
  const peer = (): void =>
    blas.symbols.cblas_sgemv(CblasRowMajor, CblasNoTrans, n, n, 1, W, n, X, 1, 0, Y, 1);
  const [tg, tp] = compare(c.run, peer);
  // The f16 case reads half the bytes: the peer is still OpenBLAS sgemv on f32 weights, in GB/s.
  perf.report(
    `gemv_${dtype}_4096`,
    bytes / tg / 1e9,
    "openblas_sgemv",
    (n * n * 4) / tp / 1e9,
    "GB/s",
  );
}

/**
 * The STREAM-like bound: a 64 MiB memcpy (V8's TypedArray.set), past L3, counted as 2 bytes
 * moved per byte copied, alternated with each kernel in `compare`.
 */
const streamSource = random(16 * 1024 * 1024, 6);
const streamTarget = new Float32Array(streamSource.length);
const streamBytes = 2 * streamSource.byteLength;
const streamCopy = (): void => streamTarget.set(streamSource);

function bandwidth(cpu: CpuBackend): void {
  const n = 16 * 1024 * 1024;
  {
    const ctx = new Context();
    const a = ctx.newTensor("f32", [n]);
    const b = ctx.newTensor("f32", [n]);
    using c = new Case(cpu, [a, b], add(a, b));
    const [tg, ts] = compare(c.run, streamCopy);
    perf.report("add_16M", (3 * 4 * n) / tg / 1e9, "stream_copy", streamBytes / ts / 1e9, "GB/s");
  }
  {
    const ctx = new Context();
    const a = ctx.newTensor("f32", [4096, n / 4096]);
    using c = new Case(cpu, [a], rmsNorm(a));
    const [tg, ts] = compare(c.run, streamCopy);
    perf.report(
      "rmsnorm_16M",
      (2 * 4 * n) / tg / 1e9,
      "stream_copy",
      streamBytes / ts / 1e9,
      "GB/s",
    );
  }
}

function graphOverhead(cpu: CpuBackend): void {
  const nodes = 1000;
  const ctx = new Context();
  const x = ctx.newTensor("f32", [16]);
  let t = x;
  for (let i = 0; i < nodes; i++) t = scale(t, 1.0001);
  using c = new Case(cpu, [x], t);
  // The peer is per-op dispatch: one FFI call per node, as an engine without graph plans does.
  const single = new Context();
  const y = single.newTensor("f32", [16]);
  using one = new Case(cpu, [y], scale(y, 1.0001));
  const perOp = (): void => {
    for (let i = 0; i < nodes; i++) one.run();
  };
  const [tg, tp] = compare(c.run, perOp);
  perf.report(
    "graph_overhead_1000",
    (tg / nodes) * 1e6,
    "per_op_calls",
    (tp / nodes) * 1e6,
    "us/node",
  );
}

async function block(cpu: CpuBackend): Promise<void> {
  const config = { dim: 768, heads: 12, seq: 128, ffn: 3072, eps: 1e-5 };
  const b = buildBlock(config);
  const data = blockData(config);
  using _weights = allocTensors(cpu, b.ctx.tensors);
  using _activations = allocGraph(cpu, b.graph);
  setBlockInputs(b, data);
  // Constant weights packed once, as onnxruntime does at session creation.
  using plan = cpu.graphPlanCreate(b.graph, { prepackWeights: true });
  const onnx = await onnxBlock(config, data, cpu.threads);
  if (!onnx) return;
  try {
    // Both must compute the same block, or the ratio means nothing.
    cpu.graphPlanCompute(plan);
    const error = relativeError(cpu.getTensor(b.output), await onnx.run());
    console.log(
      `block (prepacked weights): graft vs onnxruntime max relative difference ` +
        error.toExponential(2),
    );
    // Graft's blocking compute against onnxruntime-node's run (it has no blocking form); both
    // are what a caller waits for.
    const [tg, tp] = await compareAsync(
      () => Promise.resolve(cpu.graphPlanCompute(plan)),
      onnx.run,
    );
    perf.report("block_seq128_d768", tg * 1e3, "onnxruntime", tp * 1e3, "ms");
  } finally {
    await onnx.close();
  }
}

const threadsList = [1, 2];
const sizes = [256, 512, 1024, 2048];
// On a terminal, which case runs (the whole run takes minutes); nothing in a log.
const progress = new Progress(threadsList.length * sizes.length + 6);
for (const threads of threadsList) {
  using cpu = new CpuBackend({ threads });
  for (const n of sizes) {
    progress.step(`sgemm n=${n} threads=${threads}`);
    sgemm(cpu, n, threads);
  }
}
{
  using cpu = new CpuBackend();
  progress.step("gemv f32");
  gemv(cpu, "f32");
  progress.step("gemv f16");
  gemv(cpu, "f16");
  progress.step("add, rmsnorm bandwidth");
  bandwidth(cpu);
  progress.step("graph overhead");
  graphOverhead(cpu);
  progress.step("block vs onnxruntime");
  await block(cpu);
}
progress.step("writing results");
progress.done();
blas?.close();

await Deno.mkdir(new URL("./out/", import.meta.url), { recursive: true });
const path = new URL("./out/cpu.json", import.meta.url);
await Deno.writeTextFile(
  path,
  JSON.stringify({ date: new Date().toISOString(), results: perf.results }, null, 2),
);
console.log(`wrote ${path.pathname}`);
