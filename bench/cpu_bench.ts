/**
 * `deno bench` groups that put Graft's CPU backend beside a peer measured in the same run, the
 * peer as each group's baseline (so the summary reads "graft is N× faster/slower than <peer>"):
 *
 * - `sgemm n=<n>`: an n×n×n f32 matrix product, Graft's `mulMat` graph against OpenBLAS's
 *   `cblas_sgemm` (Debian's libopenblas0) on the same thread count;
 * - `block seq128 d768`: the demo's transformer block (RMSNorm, attention, SwiGLU MLP) at GPT-2
 *   small's width, Graft's plan with prepacked weights against the same block as an ONNX model in
 *   onnxruntime-node (checked to compute the same output first);
 * - `graph overhead 1000 nodes`: a chain of 1000 small `scale` ops computed by one
 *   `graphPlanCompute` against 1000 one-op plans computed one call each (what an engine without
 *   graph plans pays per op), both on one thread.
 *
 * A missing peer drops its side of the group with a message saying how to get it. Run with
 * `deno task bench` (bench/deno.json: its permissions, onnxruntime-node from its own lock,
 * OPENBLAS_CORETYPE for the CPU); `deno task bench:cpu` prints the same comparisons as `perf`
 * lines.
 * @module
 */

import { allocGraph, allocTensors, Context, CpuBackend, mulMat, scale } from "../mod.ts";
import { blockData, buildBlock, setBlockInputs } from "../demo/block.ts";
import { relativeError } from "../demo/block_reference.ts";
import { Case, random } from "./cases.ts";
import { CblasNoTrans, CblasRowMajor, CblasTrans, loadOpenBlas } from "./peers/openblas.ts";
import { onnxBlock } from "./peers/onnx_block.ts";

/** Everything the groups hold, disposed when the bench module unloads. */
const held: Disposable[] = [];
/** Peers' async releases, started at unload (the process ends without waiting on them). */
const closers: (() => Promise<void>)[] = [];
globalThis.addEventListener("unload", () => {
  for (const close of closers) void close();
  for (const item of held.reverse()) item[Symbol.dispose]();
  blas?.close();
});

const cpu = new CpuBackend();
held.push(cpu);
const blas = loadOpenBlas();

// --- sgemm against OpenBLAS -------------------------------------------------------------------

for (const n of [256, 1024]) {
  const group = `sgemm n=${n}`;
  const ctx = new Context();
  const a = ctx.newTensor("f32", [n, n]);
  const b = ctx.newTensor("f32", [n, n]);
  const product = new Case(cpu, [a, b], mulMat(a, b));
  held.push(product);
  if (blas) {
    const A = random(n * n, 1),
      B = random(n * n, 2),
      C = new Float32Array(n * n);
    Deno.bench({
      name: `openblas sgemm (${cpu.threads} threads)`,
      group,
      baseline: true,
      fn: () => {
        blas.symbols.openblas_set_num_threads(cpu.threads);
        // The same product as mulMat: C[N][M] = A[M][K] . B[N][K]^T, row-major.
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
      },
    });
  }
  Deno.bench({
    name: `graft mulMat (${cpu.threads} threads)`,
    group,
    baseline: !blas,
    fn: product.run,
  });
}

// --- the demo block against onnxruntime-node --------------------------------------------------

{
  const config = { dim: 768, heads: 12, seq: 128, ffn: 3072, eps: 1e-5 };
  const group = "block seq128 d768";
  const block = buildBlock(config);
  const data = blockData(config);
  held.push(allocTensors(cpu, block.ctx.tensors), allocGraph(cpu, block.graph));
  setBlockInputs(block, data);
  // Constant weights packed once, as onnxruntime does at session creation.
  const plan = cpu.graphPlanCreate(block.graph, { prepackWeights: true });
  held.push(plan);
  const onnx = await onnxBlock(config, data, cpu.threads);
  if (onnx) {
    closers.push(onnx.close);
    // Both must compute the same block, or the comparison means nothing.
    cpu.graphPlanCompute(plan);
    const error = relativeError(cpu.getTensor(block.output), await onnx.run());
    if (!(error < 1e-3)) {
      throw new Error(
        `block: graft and onnxruntime differ (max relative error ${error})`,
      );
    }
    Deno.bench({
      name: "onnxruntime-node run",
      group,
      baseline: true,
      fn: async (): Promise<void> => {
        await onnx.run();
      },
    });
  }
  Deno.bench({
    name: "graft graphPlanCompute (prepacked)",
    group,
    baseline: !onnx,
    fn: () => cpu.graphPlanCompute(plan),
  });
}

// --- one graph call against one call per op ---------------------------------------------------

{
  const nodes = 1000;
  const group = `graph overhead ${nodes} nodes`;
  const ctx = new Context();
  const x = ctx.newTensor("f32", [16]);
  let t = x;
  for (let i = 0; i < nodes; i++) t = scale(t, 1.0001);
  // One thread: the group measures what a call costs, not a pool's barriers between 16-element
  // ops (which, on a busy machine, wait for a descheduled thread and swamp the difference).
  const serial = new CpuBackend({ threads: 1 });
  held.push(serial);
  const chain = new Case(serial, [x], t);
  const single = new Context();
  const y = single.newTensor("f32", [16]);
  const one = new Case(serial, [y], scale(y, 1.0001));
  held.push(chain, one);
  Deno.bench({
    name: `${nodes} per-op calls`,
    group,
    baseline: true,
    fn: () => {
      for (let i = 0; i < nodes; i++) one.run();
    },
  });
  Deno.bench({ name: "graft one graphPlanCompute", group, fn: chain.run });
}
