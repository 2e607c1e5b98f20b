// The one WebGPU backend a test process shares. With Deno 2.9.6 on Mesa's lavapipe, a process
// that did much WebGPU work (several devices, or all three WebGPU test files) aborted at exit
// now and then with a glibc heap error after every test had passed (again once in CI on an
// AVX2-only EPYC, after webgpu_quant_test's summary); so each WebGPU test file runs in its own
// `deno test` process (the `test` task in deno.json) over one device, and ends with
// `closeSharedWebGpuTest()`: its last test waits until the queue has finished every submitted
// command and destroys the device, so that no lavapipe thread still runs shaders over device
// memory while the process tears down. That did not stop it (CI aborted once more, after
// webgpu_neural_test's summary), so scripts/test_webgpu.sh runs a file again, once, when its
// process dies of a signal after reporting every test passed, and says so.
import assert from "node:assert/strict";
import { allocTensors, type Context, Graph, simdLevels, type Tensor } from "../mod.ts";
import { WebGpuBackend } from "../src/backend/webgpu/backend.ts";

/**
 * How far below the CPU's best logit a WebGPU run's greedy choice may be where WebGPU does not
 * compute ggml's bits (SmolLM2): flash attention, which sums in its own order
 * (webgpu_llm_test.ts), and Chromium's WebGPU, whose compiler (Tint, ANGLE) may fuse or reorder
 * float arithmetic (wasm_browser_test.ts). Before WebGPU's kernels followed ggml's arithmetic, the
 * two backends' logits of a token measured up to 0.63 apart (a flip at 0.075 below the CPU's
 * best).
 */
export const WEBGPU_LLM_NEAR_TIE = 0.75;

let opened: Promise<WebGpuBackend | null> | null = null;

/** The shared backend, or null (with the reason printed once) where there is no adapter. */
export function sharedWebGpu(): Promise<WebGpuBackend | null> {
  opened ??= WebGpuBackend.create().catch((error: unknown) => {
    console.warn(`WebGPU tests skipped: ${(error as Error).message}`);
    return null;
  });
  return opened;
}

/**
 * Registers the file's last test: drain the shared device's queue, then destroy the device and
 * wait until it reports itself lost. Call it after the file's other tests are registered.
 */
export function closeSharedWebGpuTest(): void {
  Deno.test("webgpu: the shared device finishes its work and closes", async () => {
    const gpu = await opened;
    if (!gpu) return;
    const device = gpu.device;
    await device.queue.onSubmittedWorkDone();
    gpu.dispose(); // the backend made the device, so it destroys it
    const lost = await device.lost;
    if (lost.reason !== "destroyed") throw new Error(`device lost: ${lost.message}`);
  });
}

/** A graph to compute: its context, its inputs' data, and its output. */
export interface BuiltGraph {
  ctx: Context;
  inputs: [Tensor, ArrayBufferView][];
  output: Tensor;
}

/** `built`'s f32 output on WebGPU (the output poisoned first, so stale bits cannot pass). */
export async function computeOnGpu(gpu: WebGpuBackend, built: BuiltGraph): Promise<Float32Array> {
  const { ctx, inputs, output } = built;
  const graph = Graph.build(output);
  using _memory = allocTensors(gpu, [...ctx.tensors, ...graph.leafs, ...graph.nodes]);
  gpu.setTensor(output, new Uint8Array(output.nbytes).fill(0xff));
  for (const [t, data] of inputs) gpu.setTensor(t, data);
  gpu.graphCompute(graph);
  const got = await gpu.getTensorAsync(output);
  assert.ok(got instanceof Float32Array);
  return got;
}

/** A test of {@link exactGpuTests}: needsCpu marks one that compares with the AVX2 CPU. */
export type ExactGpuTest = (
  name: string,
  needsCpu: boolean,
  fn: (gpu: WebGpuBackend) => Promise<void>,
) => void;

/**
 * Deno.test for the WebGPU exactness tests of one file: names prefixed with `prefix`, skipped
 * without an adapter (`gpu` null), and those that compare with `CpuBackend({ simd: "avx2" })`
 * also where the CPU has no AVX2 kernel build (said once on stderr).
 */
export function exactGpuTests(gpu: WebGpuBackend | null, prefix: string): ExactGpuTest {
  const hasAvx2 = simdLevels().includes("avx2");
  if (!hasAvx2) console.warn(`${prefix}: no AVX2 CPU build; the CPU comparisons skipped`);
  return (name, needsCpu, fn) =>
    Deno.test({
      name: `${prefix}: ${name}`,
      ignore: gpu === null || (needsCpu && !hasAvx2),
      sanitizeResources: false,
      sanitizeOps: false,
      fn: () => fn(gpu!),
    });
}
