/**
 * Bandwidth-bound ops against the memcpy bound (`deno task bench:ops`): each op on 16M f32
 * elements (64 MiB) on the CPU backend, alternated with two copies of 64 MiB so a noisy
 * neighbour slows all three: V8's TypedArray.set (one thread) and Graft's own contiguous f32
 * `cont` node (the cpy kernel: glibc's memmove split over the same threads as the op). The bound is the faster
 * of the two copies (2 bytes moved per byte copied), so an op running on more threads than the
 * single-threaded V8 copy is not credited with their extra bandwidth. Bytes moved per op:
 * unary and row norms read and write each element (8 bytes), binary ops read two and write one
 * (12), row reductions read each (4). One line per case:
 *
 *   perf <case> graft=<GB/s> memcpy=<GB/s> ratio=<graft/memcpy>
 *
 * `GRAFT_CPU=avx2` measures the AVX2 kernel build on an AVX-512 machine.
 * @module
 */

import {
  abs,
  add,
  allocTensors,
  type BackendBuffer,
  cont,
  Context,
  exp,
  gelu,
  geluErf,
  Graph,
  log,
  mul,
  neg,
  norm,
  relu,
  rmsNorm,
  scale,
  sigmoid,
  silu,
  softmax,
  sqr,
  sumRows,
  tanh,
  type Tensor,
} from "../mod.ts";
import { CpuBackend } from "../src/backend/cpu/backend.ts";
import type { CpuPlan } from "../src/backend/cpu/plan.ts";
import { secondsPerCall } from "./timing.ts";

const N = 16 * 1024 * 1024;
const ROW = 4096;

function random(count: number, seed: number): Float32Array {
  const out = new Float32Array(count);
  let s = seed;
  for (let i = 0; i < count; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = s / 4294967296 - 0.5;
  }
  return out;
}

const streamSource = random(N, 6);
const streamTarget = new Float32Array(N);
const streamBytes = 2 * streamSource.byteLength;
const streamCopy = (): void => streamTarget.set(streamSource);

/** Best-of-`rounds` seconds per call of each function, the functions measured in turn. */
function compareAll(fns: (() => void)[], rounds = 3, minMs = 150): number[] {
  const best = fns.map(() => Infinity);
  for (let r = 0; r < rounds; r++) {
    fns.forEach((fn, i) => best[i] = Math.min(best[i]!, secondsPerCall(fn, minMs)));
  }
  return best;
}

/** A one-output graph on the CPU backend with its memory and random inputs. */
class Case implements Disposable {
  readonly plan: CpuPlan;
  readonly #buffers: BackendBuffer[];
  constructor(readonly cpu: CpuBackend, inputs: Tensor[], output: Tensor) {
    const graph = Graph.build(output);
    this.#buffers = [allocTensors(cpu, inputs), allocTensors(cpu, graph.nodes)];
    inputs.forEach((t, i) => cpu.setTensor(t, random(t.nelements, i + 1)));
    this.plan = cpu.graphPlanCreate(graph);
  }
  run = (): void => this.cpu.graphPlanCompute(this.plan);
  [Symbol.dispose](): void {
    this.plan.dispose();
    for (const b of this.#buffers) b.dispose();
  }
}

type Build = (ctx: Context) => { inputs: Tensor[]; out: Tensor; bytes: number };

const unary = (f: (a: Tensor) => Tensor): Build => (ctx) => {
  const a = ctx.newTensor("f32", [ROW, N / ROW]);
  return { inputs: [a], out: f(a), bytes: 8 * N };
};
const binary = (f: (a: Tensor, b: Tensor) => Tensor, rowBroadcast = false): Build => (ctx) => {
  const a = ctx.newTensor("f32", [ROW, N / ROW]);
  const b = ctx.newTensor("f32", rowBroadcast ? [ROW] : [ROW, N / ROW]);
  return { inputs: [a, b], out: f(a, b), bytes: rowBroadcast ? 8 * N : 12 * N };
};

const CASES: Record<string, Build> = {
  add_16M: binary(add),
  mul_16M: binary(mul),
  add_row_broadcast_16M: binary(add, true),
  scale_16M: unary((a) => scale(a, 0.5)),
  scale_bias_16M: unary((a) => scale(a, 0.5, 0.25)),
  sqr_16M: unary(sqr),
  relu_16M: unary(relu),
  abs_16M: unary(abs),
  neg_16M: unary(neg),
  exp_16M: unary(exp),
  tanh_16M: unary(tanh),
  log_16M: unary(log), // half the inputs negative: NaN costs the same
  gelu_erf_16M: unary(geluErf),
  sigmoid_16M: unary(sigmoid),
  silu_16M: unary(silu),
  gelu_16M: unary(gelu),
  rmsnorm_16M: unary(rmsNorm),
  norm_16M: unary(norm),
  softmax_16M: unary(softmax),
  sum_rows_16M: (ctx) => {
    const a = ctx.newTensor("f32", [ROW, N / ROW]);
    return { inputs: [a], out: sumRows(a), bytes: 4 * N };
  },
};

// `deno task bench:ops [filter] [threads]`: cases whose name contains `filter`, on `threads`
// threads (default: the backend's).
const filter = Deno.args[0];
const threads = Deno.args[1] ? Number(Deno.args[1]) : undefined;
using cpu = new CpuBackend(threads ? { threads } : {});
console.log(`threads=${cpu.threads} kernels=${Deno.env.get("GRAFT_CPU") ?? "auto"}`);
// cont of a contiguous f32 tensor is the cpy kernel's contiguous path: memmove split by threads.
const copySource = new Context().newTensor("f32", [ROW, N / ROW]);
using threadedCopy = new Case(cpu, [copySource], cont(copySource));
for (const [name, build] of Object.entries(CASES)) {
  if (filter && !name.includes(filter)) continue;
  const { inputs, out, bytes } = build(new Context());
  using c = new Case(cpu, inputs, out);
  const [tg, ts, tc] = compareAll([c.run, streamCopy, threadedCopy.run]) as [
    number,
    number,
    number,
  ];
  const graft = bytes / tg / 1e9;
  const memcpy = streamBytes / Math.min(ts, tc) / 1e9;
  console.log(
    `perf ${name} graft=${graft.toFixed(2)} memcpy=${memcpy.toFixed(2)} ratio=${
      (graft / memcpy).toFixed(3)
    }`,
  );
}
