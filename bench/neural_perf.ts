/**
 * Benchmarks of the neural-network ops against what they replace or a peer, measured in the
 * same run (alternated, best of rounds: bench/timing.ts). Each case prints
 *   perf <case> graft=<value><unit> <peer>=<value><unit> ratio=<graft/peer>
 * and memory lines for the planned activations (bench/out/neural.json gets everything).
 * Run with `deno task bench:neural`.
 *
 * flashAttnExt: seq 512, head dim 64, 8 heads, causal mask (and without a mask), against the
 * unfused graph llama.cpp builds without flash attention: mulMat(K, Q), softmax with the mask
 * and scale, mulMat(V^T, P) with V stored transposed (llama.cpp's non-flash V cache), and the
 * permute + cont to [D, heads, tokens]; and one decoding step (1 token, 4096 positions, 9 query
 * heads on 3 kv heads, f16 K/V: SmolLM2's attention deep in a long context). Memory is the
 * planner's size for the graph's
 * activations (inputs excluded), plus each plan's work buffer.
 *
 * conv2d: 3x3, 64 -> 64 channels, 56x56, padding 1 (ggml_conv_2d: im2col + mulMat, which the
 * CPU plan runs as one fused conv_2d node, an implicit GEMM: zig/kernels/conv2d.zig) against
 * onnxruntime-node's Conv on the same data and thread count (bench/peers/onnx_conv.ts).
 * @module
 */

import {
  allocGraph,
  allocTensors,
  cont,
  Context,
  conv2d,
  CpuBackend,
  flashAttnExt,
  Graph,
  mulMat,
  permute,
  softmax,
  type Tensor,
} from "../mod.ts";
import { compare, compareAsync } from "./timing.ts";
import { PerfReport } from "./perf_line.ts";
import { onnxConv } from "./peers/onnx_conv.ts";

const perf = new PerfReport();
const memory: Record<string, number>[] = [];

function random(count: number, seed: number): Float32Array {
  const out = new Float32Array(count);
  let s = seed;
  for (let i = 0; i < count; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = s / 4294967296 - 0.5;
  }
  return out;
}

/** A graph with its inputs and planned activations on the CPU, ready to compute. */
class Case implements Disposable {
  readonly graph: Graph;
  readonly activationBytes: number;
  readonly workBytes: number;
  readonly #dispose: Disposable[];
  readonly #plan;
  constructor(readonly cpu: CpuBackend, inputs: [Tensor, ArrayBufferView][], output: Tensor) {
    this.graph = Graph.build(output);
    const inputMemory = allocTensors(cpu, inputs.map(([t]) => t));
    // What allocGraph gives the activations (a fused conv2d's im2col gets none).
    const activations = allocGraph(cpu, this.graph);
    this.activationBytes = activations.size;
    for (const [t, data] of inputs) cpu.setTensor(t, data);
    this.#plan = cpu.graphPlanCreate(this.graph);
    this.workBytes = this.#plan.workSize;
    this.#dispose = [this.#plan, activations, inputMemory];
  }
  run = (): void => this.cpu.graphPlanCompute(this.#plan);
  result(): Float32Array {
    this.run();
    return this.cpu.getTensor(this.graph.nodes.at(-1)!) as Float32Array;
  }
  [Symbol.dispose](): void {
    for (const d of this.#dispose) d[Symbol.dispose]();
  }
}

/** Token i of the last t of nKv positions sees positions up to its own. */
function causalMask(nKv: number, t: number): Float32Array {
  const out = new Float32Array(nKv * t);
  for (let i = 0; i < t; i++) {
    for (let j = 0; j < nKv; j++) out[i * nKv + j] = j <= nKv - t + i ? 0 : -Infinity;
  }
  return out;
}

/** An attention shape: query tokens, kv positions, query heads, kv heads (GQA). */
interface AttentionShape {
  seq: number;
  nKv: number;
  heads: number;
  kvHeads: number;
}
const PREFILL: AttentionShape = { seq: 512, nKv: 512, heads: 8, kvHeads: 8 };
/** A decoding step of SmolLM2's shape (9 query heads on 3 kv heads) deep in a 4096 context. */
const DECODE: AttentionShape = { seq: 1, nKv: 4096, heads: 9, kvHeads: 3 };

function attention(
  cpu: CpuBackend,
  dtype: "f32" | "f16",
  masked: boolean,
  shape: AttentionShape = PREFILL,
): void {
  const d = 64;
  const { seq, nKv, heads, kvHeads } = shape;
  const scale = 1 / Math.sqrt(d);
  const qData = random(d * seq * heads, 1);
  const kData = random(d * nKv * kvHeads, 2);
  const vData = random(d * nKv * kvHeads, 3);
  // V transposed for the unfused graph: vt[j, e, h] = v[e, j, h].
  const vtData = new Float32Array(vData.length);
  for (let h = 0; h < kvHeads; h++) {
    for (let j = 0; j < nKv; j++) {
      for (let e = 0; e < d; e++) vtData[j + nKv * (e + d * h)] = vData[e + d * (j + nKv * h)]!;
    }
  }
  const typed = (x: Float32Array): ArrayBufferView => dtype === "f16" ? new Float16Array(x) : x;
  const maskData = causalMask(nKv, seq);
  const build = (fused: boolean): Case => {
    const ctx = new Context();
    const q = ctx.newTensor("f32", [d, seq, heads]);
    const k = ctx.newTensor(dtype, [d, nKv, kvHeads]);
    const mask = ctx.newTensor("f32", [nKv, seq]);
    const inputs: [Tensor, ArrayBufferView][] = [[q, qData], [k, typed(kData)]];
    if (masked) inputs.push([mask, maskData]);
    let out: Tensor;
    if (fused) {
      const v = ctx.newTensor(dtype, [d, nKv, kvHeads]);
      inputs.push([v, typed(vData)]);
      out = flashAttnExt(q, k, v, { scale, ...(masked ? { mask } : {}) });
    } else {
      const vt = ctx.newTensor(dtype, [nKv, d, kvHeads]);
      inputs.push([vt, typed(vtData)]);
      const p = softmax(mulMat(k, q), { scale, ...(masked ? { mask } : {}) });
      out = cont(permute(mulMat(vt, p), [0, 2, 1, 3]));
    }
    return new Case(cpu, inputs, out);
  };
  using fused = build(true);
  using plain = build(false);
  // Both must compute the same attention, or the ratio means nothing.
  const a = fused.result();
  const b = plain.result();
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i]! - b[i]!));
  const name = seq === 1
    ? `flash_attn_${dtype}_decode_kv${nKv}_d${d}_h${heads}_kvh${kvHeads}`
    : `flash_attn_${dtype}_seq${seq}_d${d}_h${heads}${masked ? "_causal" : ""}`;
  console.log(`${name}: fused vs unfused max abs difference ${worst.toExponential(2)}`);
  const [tf, tu] = compare(fused.run, plain.run);
  perf.report(name, tf * 1e3, "unfused", tu * 1e3, "ms");
  console.log(
    `memory ${name} graft=${fused.activationBytes}B+work ${fused.workBytes}B ` +
      `unfused=${plain.activationBytes}B+work ${plain.workBytes}B ratio=${
        ((fused.activationBytes + fused.workBytes) / (plain.activationBytes + plain.workBytes))
          .toFixed(3)
      }`,
  );
  memory.push({
    [`${name}_graft_activation_bytes`]: fused.activationBytes,
    [`${name}_graft_work_bytes`]: fused.workBytes,
    [`${name}_unfused_activation_bytes`]: plain.activationBytes,
    [`${name}_unfused_work_bytes`]: plain.workBytes,
  });
}

async function convolution(cpu: CpuBackend): Promise<void> {
  const shape = { width: 56, height: 56, channels: 64, outChannels: 64, kernel: 3, pad: 1 };
  const { width, height, channels, outChannels, kernel, pad } = shape;
  const imageData = random(width * height * channels, 11);
  const weightData = random(kernel * kernel * channels * outChannels, 12).map((x) => x / 8);
  const ctx = new Context();
  const image = ctx.newTensor("f32", [width, height, channels]);
  const weights = ctx.newTensor("f32", [kernel, kernel, channels, outChannels]);
  const out = conv2d(weights, image, { padding: pad });
  using graft = new Case(cpu, [[image, imageData], [weights, weightData]], out);
  const onnx = await onnxConv(shape, imageData, weightData, cpu.threads);
  if (!onnx) return;
  try {
    // Both must compute the same convolution, or the ratio means nothing.
    const a = graft.result();
    const b = await onnx.run();
    let worst = 0;
    for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i]! - b[i]!));
    console.log(`conv2d: graft vs onnxruntime max abs difference ${worst.toExponential(2)}`);
    const [tg, tp] = await compareAsync(() => Promise.resolve(graft.run()), onnx.run);
    perf.report("conv2d_3x3_64to64_56x56", tg * 1e3, "onnxruntime", tp * 1e3, "ms");
    console.log(
      `memory conv2d_3x3_64to64_56x56 graft=${graft.activationBytes}B+work ${graft.workBytes}B`,
    );
  } finally {
    await onnx.close();
  }
}

{
  using cpu = new CpuBackend();
  console.log(`cpu threads ${cpu.threads}`);
  await convolution(cpu);
  for (const dtype of ["f32", "f16"] as const) {
    attention(cpu, dtype, true);
    attention(cpu, dtype, false);
  }
  attention(cpu, "f16", true, DECODE);
}

await Deno.mkdir(new URL("./out/", import.meta.url), { recursive: true });
const path = new URL("./out/neural.json", import.meta.url);
await Deno.writeTextFile(
  path,
  JSON.stringify({ date: new Date().toISOString(), results: perf.results, memory }, null, 2),
);
console.log(`wrote ${path.pathname}`);
