/**
 * WebGPU's getRows and mulMat on weights kept as their raw bytes (bf16 and ggml's block types
 * q8_0, q4_0, q4_1, q5_0, q5_1, q4_K, q5_K, q6_K), decoded in the shaders. getRows equals
 * `dequantize` bit for bit; mulMat is within ggml's test-backend-ops bound (normalized mean
 * squared error <= 5e-4) of a float64 product of the dequantized weights and of the CPU
 * backend's result, for odd shapes, both kernels (matrix-vector for few columns, tiles for
 * more), broadcast batches, a transposed src1 and weights at an offset that is no multiple of 4.
 * Skipped, visibly, when Deno finds no adapter.
 *
 * The op builders take the k-quants only once the CPU kernels do; until then their nodes are
 * made directly (as a graph loaded for WebGPU would have them) and the CPU comparison is skipped
 * for them, saying so.
 */

import assert from "node:assert/strict";
import { type BuiltGraph, closeSharedWebGpuTest, computeOnGpu, sharedWebGpu } from "./gpu.ts";
import {
  allocGraph,
  allocTensors,
  Context,
  CpuBackend,
  cpy,
  dequantize,
  getRows,
  Graph,
  mulMat,
  Op,
  OutOfBoundsError,
  quantize,
  Schedule,
  Tensor,
  transpose,
  view,
} from "../mod.ts";
import { rowBytes } from "../src/dtype.ts";
import type { WebGpuBackend } from "../src/backend/webgpu/backend.ts";
import { WEIGHT_DTYPES, type WeightDType } from "../src/backend/webgpu/shader_quant.ts";
import { refMulMatBatched, Rng } from "./reference.ts";

const gpu = await sharedWebGpu();
const cpu = new CpuBackend({ threads: 2 });
globalThis.addEventListener("unload", () => {
  cpu.dispose();
});

/** ggml's test-backend-ops bound for mul_mat. */
const NMSE_MAX = 5e-4;

/** Row lengths per dtype: whole blocks, no multiple of 256 where the block allows it. */
const K: Readonly<Record<WeightDType, readonly [number, number]>> = {
  bf16: [99, 576],
  q8_0: [96, 576],
  q4_0: [96, 576],
  q4_1: [96, 576],
  q5_0: [96, 576],
  q5_1: [96, 576],
  q4_K: [256, 512],
  q5_K: [256, 512],
  q6_K: [256, 512],
};

function test(name: string, fn: (gpu: WebGpuBackend) => Promise<void> | void): void {
  Deno.test({
    name: `webgpu quantized: ${name}`,
    ignore: gpu === null,
    sanitizeResources: false,
    sanitizeOps: false,
    fn: () => fn(gpu!),
  });
}

function randoms(rng: Rng, count: number): Float32Array {
  const out = new Float32Array(count);
  for (let i = 0; i < count; i++) out[i] = rng.next() * 2 - 1;
  return out;
}

/** sum((got - want)^2) / sum(want^2). */
function nmse(got: Float32Array, want: ArrayLike<number>): number {
  assert.equal(got.length, want.length);
  let error = 0, norm = 0;
  for (let i = 0; i < got.length; i++) {
    const value = got[i]!;
    if (!Number.isFinite(value)) return Infinity;
    error += (value - want[i]!) ** 2;
    norm += want[i]! ** 2;
  }
  return error / norm;
}

type Built = BuiltGraph;

/** Computes `built` on the GPU, first asserting that WebGPU says it runs its node. */
function onGpu(gpu: WebGpuBackend, built: Built): Promise<Float32Array> {
  assert.ok(gpu.supportsOp(built.output), `supportsOp says no to ${built.output.label}`);
  return computeOnGpu(gpu, built);
}

function onCpu(built: Built): Float32Array {
  const { ctx, inputs, output } = built;
  const graph = Graph.build(output);
  using _memory = allocTensors(cpu, [...ctx.tensors, ...graph.leafs, ...graph.nodes]);
  for (const [t, data] of inputs) cpu.setTensor(t, data);
  cpu.graphCompute(graph);
  const got = cpu.getTensor(output);
  assert.ok(got instanceof Float32Array);
  return got;
}

/** NMSE ranges seen per dtype, printed at the end. */
const seen = new Map<string, { gpuF64: number[]; gpuCpu: number[] }>();

function record(dtype: string): { gpuF64: number[]; gpuCpu: number[] } {
  let entry = seen.get(dtype);
  if (!entry) seen.set(dtype, entry = { gpuF64: [], gpuCpu: [] });
  return entry;
}

for (const dtype of WEIGHT_DTYPES) {
  test(`getRows of ${dtype} rows equals dequantize bit for bit`, async (gpu) => {
    const rng = new Rng(0x6e7 + dtype.length * 31 + dtype.charCodeAt(1));
    for (const ne0 of K[dtype]) {
      const rows = 7, batches = 3, picks = 5;
      const bytes = quantize(randoms(rng, ne0 * rows * batches), dtype);
      const chosen = new Int32Array(picks * batches);
      for (let i = 0; i < chosen.length; i++) chosen[i] = Math.floor(rng.next() * rows);
      const build = (): Built => {
        const ctx = new Context();
        const table = ctx.newTensor(dtype, [ne0, rows, batches]);
        const indices = ctx.newTensor("i32", [picks, batches]);
        const output = getRows(table, indices);
        return { ctx, inputs: [[table, bytes], [indices, chosen]], output };
      };
      const got = await onGpu(gpu, build());
      const all = dequantize(bytes, dtype);
      const want = new Float32Array(ne0 * picks * batches);
      for (let b = 0; b < batches; b++) {
        for (let n = 0; n < picks; n++) {
          const from = (b * rows + chosen[b * picks + n]!) * ne0;
          want.set(all.subarray(from, from + ne0), (b * picks + n) * ne0);
        }
      }
      assert.deepEqual(
        new Uint8Array(got.buffer),
        new Uint8Array(want.buffer),
        `${dtype} ne0=${ne0}: getRows differs from dequantize`,
      );
    }
  });
}

test("getRows reads a quantized table that starts at no word boundary", async (gpu) => {
  for (const dtype of ["q4_0", "q5_0", "q8_0", "q6_K", "bf16"] as const) {
    const ne0 = K[dtype][0], rows = 5;
    const bytes = quantize(randoms(new Rng(99), ne0 * (rows + 1)), dtype);
    const offset = rowBytes(dtype, ne0);
    assert.notEqual(offset % 4, 0, `${dtype}: choose a row length whose bytes are no words`);
    const chosen = new Int32Array([4, 0, 2, 2]);
    const ctx = new Context();
    const full = ctx.newTensor(dtype, [ne0, rows + 1]);
    const table = view(full, [ne0, rows], { offset });
    const indices = ctx.newTensor("i32", [chosen.length]);
    const got = await onGpu(gpu, {
      ctx,
      inputs: [[full, bytes], [indices, chosen]],
      output: getRows(table, indices),
    });
    const all = dequantize(bytes, dtype);
    const want = new Float32Array(ne0 * chosen.length);
    chosen.forEach((row, i) => want.set(all.subarray((row + 1) * ne0, (row + 2) * ne0), i * ne0));
    assert.deepEqual(new Uint8Array(got.buffer), new Uint8Array(want.buffer), dtype);
  }
});

test("getRows with an index outside a quantized table reports OutOfBoundsError", async (gpu) => {
  const ctx = new Context();
  const table = ctx.newTensor("q4_K", [256, 3]);
  const indices = ctx.newTensor("i32", [2]);
  const node = getRows(table, indices);
  const graph = Graph.build(node);
  using _memory = allocTensors(gpu, [...ctx.tensors, ...graph.nodes]);
  gpu.setTensor(table, quantize(randoms(new Rng(5), 256 * 3), "q4_K"));
  gpu.setTensor(indices, new Int32Array([1, 3]));
  gpu.graphCompute(graph);
  await assert.rejects(gpu.getTensorAsync(node), OutOfBoundsError);
  gpu.setTensor(indices, new Int32Array([1, 2]));
  gpu.graphCompute(graph);
  const got = await gpu.getTensorAsync(node);
  assert.equal(got.length, 512);
});

interface MulMatCase {
  k: number;
  m: number;
  n: number;
  batchA?: [number, number];
  batchB?: [number, number];
  /** src1 is the transpose of an [n, k] tensor (rows strided). */
  transposedB?: boolean;
  /** The weights are a view starting this many rows into a larger tensor. */
  offsetRows?: number;
}

/** Odd shapes for row lengths `k1` (no multiple of 256 where the dtype allows) and `k2`. */
function mulMatCases(k1: number, k2: number): MulMatCase[] {
  return [
    { k: k1, m: 7, n: 1 },
    { k: k2, m: 33, n: 3 },
    { k: k1, m: 33, n: 17 },
    { k: k2, m: 7, n: 12 },
    { k: k1, m: 7, n: 3, batchA: [2, 1], batchB: [4, 3] },
    { k: k2, m: 33, n: 17, batchA: [1, 2], batchB: [3, 2] },
    { k: k1, m: 7, n: 5, transposedB: true },
    { k: k1, m: 33, n: 20, transposedB: true },
    { k: k1, m: 7, n: 3, offsetRows: 1 },
    { k: k1, m: 9, n: 18, offsetRows: 1 },
  ];
}

for (const dtype of WEIGHT_DTYPES) {
  test(`mulMat with ${dtype} weights is within NMSE ${NMSE_MAX} of f64 and the CPU`, async (gpu) => {
    const rng = new Rng(0xabc + dtype.length * 7 + dtype.charCodeAt(1));
    const stats = record(dtype);
    for (const c of mulMatCases(...K[dtype])) {
      const label = `${dtype} ${JSON.stringify(c)}`;
      const [a2, a3] = c.batchA ?? [1, 1], [b2, b3] = c.batchB ?? [1, 1];
      const skip = c.offsetRows ?? 0;
      const rows = c.m + skip;
      const aBytes = quantize(randoms(rng, c.k * rows * a2 * a3), dtype);
      const bValues = randoms(rng, c.k * c.n * b2 * b3);
      const bData = c.transposedB ? new Float32Array(c.k * c.n) : bValues;
      if (c.transposedB) {
        for (let i = 0; i < c.n; i++) {
          for (let j = 0; j < c.k; j++) bData[j * c.n + i] = bValues[i * c.k + j]!;
        }
      }
      const build = (): Built => {
        const ctx = new Context();
        const full = ctx.newTensor(dtype, [c.k, rows, a2, a3]);
        const a = skip ? view(full, [c.k, c.m], { offset: skip * rowBytes(dtype, c.k) }) : full;
        const bInput = c.transposedB
          ? ctx.newTensor("f32", [c.n, c.k])
          : ctx.newTensor("f32", [c.k, c.n, b2, b3]);
        const b = c.transposedB ? transpose(bInput) : bInput;
        return { ctx, inputs: [[full, aBytes], [bInput, bData]], output: mulMat(a, b) };
      };
      const built = build();
      const got = await onGpu(gpu, built);
      const w = dequantize(aBytes, dtype).subarray(skip * c.k);
      const error = nmse(got, refMulMatBatched(w, bValues, c).sum);
      stats.gpuF64.push(error);
      assert.ok(error <= NMSE_MAX, `${label}: NMSE ${error} against f64 > ${NMSE_MAX}`);
      const onCpuResult = onCpu(build());
      const againstCpu = nmse(got, onCpuResult);
      stats.gpuCpu.push(againstCpu);
      assert.ok(
        againstCpu <= NMSE_MAX,
        `${label}: NMSE ${againstCpu} against the CPU > ${NMSE_MAX}`,
      );
    }
  });
}

test("supportsOp: quantized weights in getRows and mulMat only, blocks adjacent", (gpu) => {
  const ctx = new Context();
  const x = ctx.newTensor("f32", [256, 2]);
  for (const dtype of WEIGHT_DTYPES) {
    const w = ctx.newTensor(dtype, [256, 4]);
    assert.ok(gpu.supportsOp(mulMat(w, x)), `mulMat ${dtype}`);
    assert.ok(gpu.supportsOp(getRows(w, ctx.newTensor("i32", [2]))), `getRows ${dtype}`);
  }
  // q8_1 and q8_K only feed ggml's dot products: no decoder.
  for (const dtype of ["q8_1", "q8_K"] as const) {
    const w = ctx.newTensor(dtype, [256, 4]);
    const node = new Tensor({ dtype: "f32", ne: [4, 2, 1, 1], op: Op.mulMat, src: [w, x] });
    assert.equal(gpu.supportsOp(node), false, dtype);
  }
  // Every other op keeps them on the CPU: a quantizing copy, for one.
  const cache = ctx.newTensor("q8_0", [256, 2]);
  assert.equal(gpu.supportsOp(cpy(x, cache)), false);
  // Rows whose blocks are not adjacent (every other block of a row).
  const q = ctx.newTensor("q4_0", [512, 4]);
  const strided = view(q, [256, 4], { nb: [36, 288, 1152, 1152] });
  assert.equal(gpu.supportsOp(mulMat(strided, x)), false);
});

test("the scheduler keeps mulMat and getRows of quantized weights on WebGPU", async (gpu) => {
  const ctx = new Context();
  const embeddings = ctx.newTensor("q8_0", [96, 10]);
  const w = ctx.newTensor("q4_1", [96, 7]);
  const tokens = ctx.newTensor("i32", [3]);
  const hidden = getRows(embeddings, tokens);
  const out = mulMat(w, hidden);
  const graph = Graph.build(out);
  using _weights = allocTensors(gpu, ctx.tensors);
  const rng = new Rng(3);
  const eBytes = quantize(randoms(rng, 96 * 10), "q8_0");
  const wBytes = quantize(randoms(rng, 96 * 7), "q4_1");
  const ids = new Int32Array([9, 0, 4]);
  gpu.setTensor(embeddings, eBytes);
  gpu.setTensor(w, wBytes);
  gpu.setTensor(tokens, ids);
  using schedule = Schedule.create(graph, { backends: [gpu, cpu], allocate: allocGraph });
  assert.deepEqual(schedule.splits.map((s) => s.backend.name), ["webgpu"]);
  await schedule.compute();
  const got = await schedule.getOutput(out);
  const e = dequantize(eBytes, "q8_0");
  const b = new Float32Array(96 * 3);
  ids.forEach((id, i) => b.set(e.subarray(id * 96, (id + 1) * 96), i * 96));
  const want = refMulMatBatched(dequantize(wBytes, "q4_1"), b, { k: 96, m: 7, n: 3 }).sum;
  assert.ok(nmse(got as Float32Array, want) <= NMSE_MAX);
});

test("NMSE ranges per dtype", () => {
  const range = (xs: number[]): string =>
    xs.length === 0
      ? "-"
      : `${Math.min(...xs).toExponential(2)} .. ${Math.max(...xs).toExponential(2)}`;
  for (const [dtype, s] of seen) {
    console.log(
      `${dtype.padEnd(5)} vs f64 ${range(s.gpuF64)}; vs cpu ${range(s.gpuCpu)}`,
    );
  }
});

closeSharedWebGpuTest();
