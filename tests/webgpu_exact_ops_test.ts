/**
 * rms_norm, soft_max (scale and an f32 causal mask) and silu on the shared WebGPU device give
 * ggml-cpu's AVX2 bits, as the CPU backend does (`CpuBackend({ simd: "avx2" })`):
 * - Every case of tests/ggml_exact_ops.ts but rope's (which tests/webgpu_exact_test.ts checks):
 *   rms_norm and rms_norm * weight, silu and silu * g (ggml's swiglu), soft_max; the output's
 *   SHA-256 equals ggml's AVX2 digest in tests/fixtures/ggml_exact_ops.json. All 24 cases are bit
 *   for bit on lavapipe; on a mismatch the message counts the elements that differ from the CPU's.
 * - rms_norm over 2000 rows of 576 and of 37, each row scaled by its own power of two (2^-20 to
 *   2^19), against the CPU's AVX2 kernel on the same inputs: bit for bit.
 * - silu over 2^16 seeded values in [-110, 110] (exp's overflow and underflow ranges, subnormal
 *   exps) with row lengths 1000 (full vectors of 8: ggml_v_silu) and 999 (7 per row through the
 *   scalar tail: glibc's expf), and soft_max over rows of 1 to 41 and 1000 elements with
 *   differences down to -160, with and without a mask, against the CPU's AVX2 kernels on the same
 *   inputs: bit for bit.
 * - `expf_libc` (wgsl_exact.ts) against this process's glibc expf (through FFI, where libm.so.6
 *   loads) on 2^18 seeded values: bit for bit. By construction it can differ from glibc only
 *   where glibc's double result lies within about 2^-46 of a midpoint between two floats; no such
 *   value was met.
 * Skipped, visibly, when Deno finds no adapter (and the CPU comparisons where this CPU does not
 * run the AVX2 kernels).
 */

import assert from "node:assert/strict";
import {
  allocTensors,
  Context,
  CpuBackend,
  Graph,
  rmsNorm,
  silu,
  simdLevels,
  softmax,
  type Tensor,
} from "../mod.ts";
import type { Backend } from "../src/backend/backend.ts";
import { closeSharedWebGpuTest, sharedWebGpu } from "./gpu.ts";
import { bitDiff, digest, exactCases, graftOutput, seeded } from "./ggml_exact_ops.ts";
import { EXACT_WGSL, GGML_EXP_WGSL } from "../src/backend/webgpu/wgsl_exact.ts";
import { PARAMS_WGSL, UNIFORM_SLOT_BYTES } from "../src/backend/webgpu/wgsl_common.ts";

const gpu = await sharedWebGpu();
const avx2 = simdLevels().includes("avx2");

const fixture = JSON.parse(
  Deno.readTextFileSync(new URL("./fixtures/ggml_exact_ops.json", import.meta.url)),
) as { cases: Record<string, Record<string, string>> };

/** A graph's output computed on `backend` from `data` (one array per input, in order). */
async function compute(
  backend: Backend,
  build: (ctx: Context) => { inputs: Tensor[]; output: Tensor },
  data: Float32Array[],
): Promise<Float32Array> {
  const ctx = new Context();
  const { inputs, output } = build(ctx);
  const graph = Graph.build(output);
  using _memory = allocTensors(backend, [...ctx.tensors, ...graph.leafs, ...graph.nodes]);
  inputs.forEach((t, k) => backend.setTensor(t, data[k]!));
  backend.graphCompute(graph);
  return await backend.getTensorAsync(output) as Float32Array;
}

Deno.test({
  name: "webgpu exact ops: rms_norm, silu, swiglu, soft_max hash as ggml's AVX2 outputs",
  ignore: gpu === null,
  async fn(): Promise<void> {
    const cases = exactCases().filter((c) => !c.name.startsWith("rope_"));
    assert.equal(cases.length, 24);
    const wrong: string[] = [];
    for (const c of cases) {
      const got = await compute(gpu!, c.build, c.inputs as Float32Array[]);
      if (await digest(got) === fixture.cases[c.name]!.avx2) continue;
      if (!avx2) {
        wrong.push(`${c.name}: not ggml's digest`);
        continue;
      }
      const { count, first } = bitDiff(got, graftOutput(c, 1, "avx2"));
      wrong.push(`${c.name}: ${count}/${got.length} differ from the CPU's, first at ${first}`);
    }
    assert.deepEqual(wrong, []);
  },
});

Deno.test({
  name: "webgpu exact ops: rms_norm of 2000 rows of assorted scales is the CPU's AVX2 rms_norm",
  ignore: gpu === null || !avx2,
  async fn(): Promise<void> {
    using cpu = new CpuBackend({ threads: 1, simd: "avx2" });
    for (const [ne0, ne1] of [[576, 2000], [37, 2000]] as const) {
      // Each row scaled by its own power of two, 2^-20 to 2^19 (with eps 1e-5 in play).
      const x = seeded(ne0 * ne1, 31 + ne0, 4).map((v, i) =>
        v * 2 ** ((Math.floor(i / ne0) % 40) - 20)
      );
      const build = (ctx: Context): { inputs: Tensor[]; output: Tensor } => {
        const a = ctx.newTensor("f32", [ne0, ne1]);
        return { inputs: [a], output: rmsNorm(a, 1e-5) };
      };
      const got = await compute(gpu!, build, [x]);
      const want = await compute(cpu, build, [x]);
      const { count, first } = bitDiff(got, want);
      assert.equal(count, 0, `rows of ${ne0}: ${count} differ, first at ${first}`);
    }
  },
});

/** `count` seeded values in [-110, 110] with exp's edge cases spread over them. */
function siluInputs(count: number): Float32Array {
  const x = seeded(count, 77, 110);
  const edges = [0, -0, 88.5, -88.5, 88.72, -88.73, 103.9, -103.9, 104, -104, 87.3, -87.4, 1e-30];
  edges.forEach((v, i) => x[(i * 997) % count] = v);
  // A third of them small, where silu is nearly x / 2.
  for (let i = 1; i < count; i += 3) x[i] = x[i]! / 64;
  return x;
}

Deno.test({
  name: "webgpu exact ops: silu of full vectors and of row tails is the CPU's AVX2 silu",
  ignore: gpu === null || !avx2,
  async fn(): Promise<void> {
    using cpu = new CpuBackend({ threads: 1, simd: "avx2" });
    for (const ne0 of [1000, 999, 7]) {
      const ne1 = Math.floor(65536 / ne0);
      const x = siluInputs(ne0 * ne1);
      const build = (ctx: Context): { inputs: Tensor[]; output: Tensor } => {
        const a = ctx.newTensor("f32", [ne0, ne1]);
        return { inputs: [a], output: silu(a) };
      };
      const got = await compute(gpu!, build, [x]);
      const want = await compute(cpu, build, [x]);
      const { count, first } = bitDiff(got, want);
      assert.equal(count, 0, `rows of ${ne0}: ${count} differ, first silu(${x[first]})`);
    }
  },
});

Deno.test({
  name: "webgpu exact ops: soft_max of rows of 1 to 41 and 1000 is the CPU's AVX2 soft_max",
  ignore: gpu === null || !avx2,
  async fn(): Promise<void> {
    using cpu = new CpuBackend({ threads: 1, simd: "avx2" });
    for (const ne0 of [1, 2, 7, 8, 9, 15, 16, 17, 33, 41, 1000]) {
      for (const masked of [false, true]) {
        const [ne1, ne2] = [5, 3];
        // Logits in [-160, 160] times 1/2: differences past -104 (0 exps) and subnormal ones.
        const x = seeded(ne0 * ne1 * ne2, 1000 + ne0, 160);
        const mask = Float32Array.from(
          { length: ne0 * ne1 },
          (_, i) => (i % ne0 > ne0 - ne1 + Math.floor(i / ne0) ? -Infinity : (i % 3) - 1),
        );
        const build = (ctx: Context): { inputs: Tensor[]; output: Tensor } => {
          const a = ctx.newTensor("f32", [ne0, ne1, ne2]);
          const m = ctx.newTensor("f32", [ne0, ne1]);
          return {
            inputs: masked ? [a, m] : [a],
            output: softmax(a, masked ? { mask: m, scale: 0.5 } : { scale: 0.5 }),
          };
        };
        const data = masked ? [x, mask] : [x];
        const got = await compute(gpu!, build, data);
        const want = await compute(cpu, build, data);
        const { count, first } = bitDiff(got, want);
        assert.equal(
          count,
          0,
          `rows of ${ne0}${masked ? ", masked" : ""}: ${count} differ, first at ${first}`,
        );
      }
    }
  },
});

/** glibc's expf through FFI, or null where libm.so.6 does not load. */
function glibcExpf(): ((x: number) => number) | null {
  try {
    const lib = Deno.dlopen("libm.so.6", { expf: { parameters: ["f32"], result: "f32" } });
    return (x) => lib.symbols.expf(x);
  } catch {
    return null;
  }
}
const expf = glibcExpf();
if (!expf) console.log("webgpu_exact_ops_test: no libm.so.6, expf_libc's check skipped");

/** `expf_libc(x)` of each x on the device. */
async function deviceExpf(x: Float32Array<ArrayBuffer>): Promise<Float32Array> {
  const device = gpu!.device;
  const code = `${PARAMS_WGSL}
${EXACT_WGSL}
${GGML_EXP_WGSL}
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read_write> o: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  if (g.x < arrayLength(&a)) {
    o[g.x] = expf_libc(a[g.x]);
  }
}`;
  const pipeline = device.createComputePipeline({
    layout: "auto",
    compute: { module: device.createShaderModule({ code }), entryPoint: "main" },
  });
  const params = device.createBuffer({
    size: UNIFORM_SLOT_BYTES,
    usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST,
  });
  const input = device.createBuffer({
    size: x.byteLength,
    usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST,
  });
  device.queue.writeBuffer(input, 0, x);
  const out = device.createBuffer({
    size: x.byteLength,
    usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC,
  });
  const read = device.createBuffer({
    size: x.byteLength,
    usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
  });
  const bindGroup = device.createBindGroup({
    layout: pipeline.getBindGroupLayout(0),
    entries: [params, input, out].map((buffer, binding) => ({ binding, resource: { buffer } })),
  });
  const encoder = device.createCommandEncoder();
  const pass = encoder.beginComputePass();
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bindGroup);
  pass.dispatchWorkgroups(Math.ceil(x.length / 64));
  pass.end();
  encoder.copyBufferToBuffer(out, 0, read, 0, x.byteLength);
  device.queue.submit([encoder.finish()]);
  await read.mapAsync(GPUMapMode.READ);
  const result = new Float32Array(read.getMappedRange().slice(0));
  read.unmap();
  for (const buffer of [params, input, out, read]) buffer.destroy();
  return result;
}

Deno.test({
  name: "webgpu exact ops: expf_libc is glibc's expf",
  ignore: gpu === null || expf === null,
  async fn(): Promise<void> {
    // Over the whole finite range (overflow, subnormal results, glibc's underflow cut-offs),
    // then densely where softmax and silu tails take it.
    const wide = seeded(1 << 17, 5, 110);
    const near = seeded(1 << 17, 6, 20);
    const x = new Float32Array(wide.length + near.length + 8);
    x.set(wide);
    x.set(near, wide.length);
    x.set(
      [0, -0, 88.72283172607422, 88.72284, -103.97207641601562, -103.2789, -103.28, -150],
      x.length - 8,
    );
    const got = await deviceExpf(x);
    let differ = 0;
    let firstAt = "";
    for (let i = 0; i < x.length; i++) {
      const want = expf!(x[i]!);
      if (Object.is(got[i], want)) continue;
      differ++;
      firstAt ||= `expf(${x[i]}) = ${got[i]}, glibc's ${want}`;
    }
    assert.equal(differ, 0, `${differ}/${x.length} differ; first ${firstAt}`);
  },
});

closeSharedWebGpuTest();
