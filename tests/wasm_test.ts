/**
 * The WebAssembly backend outside the op suites (tests/ops_test.ts and
 * tests/backend_ops_test.ts run every op on it): a Deno process without --allow-ffi computes
 * the demo's transformer block on `defaultBackend()` and matches the CPU backend; the loader's
 * errors name what is missing; the core's limits (one thread, no file mappings) are typed
 * errors.
 */

import assert from "node:assert/strict";
import {
  allocTensors,
  ArgumentError,
  Context,
  conv2d,
  CpuBackend,
  Graph,
  liveAllocations,
  LLM,
  planGraph,
  WasmBackend,
} from "../mod.ts";
import { SMOLLM2_PATH, smolLM2Cached } from "../tools/model_cache.ts";
import { blockData, buildBlock, setBlockInputs } from "../demo/block.ts";
import { assertNothingLive, NOTHING_LIVE } from "./leaks.ts";

const baseline = liveAllocations();
const root = new URL("..", import.meta.url);

/** Runs `script` (a file of this checkout) in a child Deno with exactly `permissions`. */
async function runChild(
  script: string,
  permissions: string[],
): Promise<{ code: number; stdout: string; stderr: string }> {
  const output = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--no-prompt", ...permissions, new URL(script, root).pathname],
    clearEnv: true,
    env: { PATH: Deno.env.get("PATH") ?? "", HOME: Deno.env.get("HOME") ?? "" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const decode = (bytes: Uint8Array): string => new TextDecoder().decode(bytes);
  return { code: output.code, stdout: decode(output.stdout), stderr: decode(output.stderr) };
}

/** The demo block's output on the CPU backend, one thread. */
function cpuBlock(): Float32Array {
  const config = { dim: 64, heads: 4, seq: 9, ffn: 176, eps: 1e-5 };
  using cpu = new CpuBackend({ threads: 1 });
  const block = buildBlock(config);
  using _weights = allocTensors(cpu, block.ctx.tensors);
  using _activations = planGraph(block.graph, { alignment: cpu.alignment }).allocate(cpu);
  setBlockInputs(block, blockData(config));
  cpu.graphCompute(block.graph);
  return cpu.getTensor(block.output) as Float32Array;
}

Deno.test("a Deno without --allow-ffi computes the demo block on WebAssembly, as the CPU does", async () => {
  const readable = `--allow-read=${new URL(".", root).pathname}`;
  const child = await runChild("tests/wasm_block.ts", [readable]);
  assert.equal(child.code, 0, child.stderr);
  const result = JSON.parse(child.stdout) as {
    ffi: string;
    backend: { kind: string; simd: string; threads: number };
    error: number;
    live: number;
    output: number[];
  };
  assert.equal(result.ffi, "prompt", "the child must run without FFI permission");
  assert.deepEqual(result.backend, { kind: "wasm", simd: "simd128", threads: 1 });
  // Said once, on stderr.
  const notes = child.stderr.split("\n").filter((line) => line.includes("no --allow-ffi"));
  assert.equal(notes.length, 1, child.stderr);
  assert.ok(result.error <= 1e-4, `error vs float64 ${result.error}`);
  assert.equal(result.live, 0, "the child disposed everything it made in the core");
  // Against the CPU backend: the same kernels in another SIMD width sum in another order.
  const cpu = cpuBlock();
  assert.equal(result.output.length, cpu.length);
  let error = 0;
  let norm = 0;
  for (let i = 0; i < cpu.length; i++) {
    error += (result.output[i]! - cpu[i]!) ** 2;
    norm += cpu[i]! ** 2;
  }
  assert.ok(error / norm <= 1e-10, `NMSE vs the CPU backend ${error / norm}`);
});

Deno.test("without read permission the loader says which flag or option is missing", async () => {
  const script = "tests/wasm_block.ts";
  const child = await runChild(script, [`--allow-read=${new URL(script, root).pathname}`]);
  assert.notEqual(child.code, 0);
  assert.match(child.stderr, /graft\.wasm \(no read permission: run Deno with --allow-read/);
});

Deno.test("the WebAssembly backend is single-threaded and has no file mappings", async () => {
  using wasm = await WasmBackend.create();
  assert.equal(wasm.threads, 1);
  assert.equal(wasm.bufferType.name, "wasm");
  assert.throws(() => wasm.setThreads(2), ArgumentError);
  assert.equal("mapFile" in wasm, false);
  await assert.rejects(() => WasmBackend.create({ threads: 4 }), ArgumentError);
});

Deno.test("a buffer larger than the WebAssembly limit is refused before any allocation", async () => {
  using wasm = await WasmBackend.create();
  assert.throws(() => wasm.allocBuffer(2 ** 31 + 64), ArgumentError);
  await assert.rejects(() => WasmBackend.create({ maxBufferSize: 2 ** 32 }), ArgumentError);
});

// 29 channels x 3 x 3 = 261 taps: two KC blocks; 13 output channels and 17 x 11 pixels are off
// WebAssembly's 12 x 4 micro-tile. Stride (2, 1) takes the packing path (its division path),
// stride 1 the Winograd path (tiles across tile rows, 13 off its 4 channels), dilation 2 the
// direct path (tiles across padded rows).
for (
  const [path, options] of [
    ["packing", { padding: 1, stride: [2, 1] }],
    ["Winograd", { padding: 1 }],
    ["direct", { padding: 1, dilation: 2 }],
  ] as [string, Parameters<typeof conv2d>[2]][]
) {
  Deno.test(`conv2d (the fused conv_2d node) on WebAssembly matches the CPU backend: ${path} path`, async () => {
    const run = (backend: CpuBackend | WasmBackend): Float32Array => {
      const ctx = new Context();
      const kernel = ctx.newTensor("f32", [3, 3, 29, 13]);
      const image = ctx.newTensor("f32", [17, 11, 29, 2]);
      const out = conv2d(kernel, image, options);
      const graph = Graph.build(out);
      using _memory = allocTensors(backend, [...ctx.tensors, ...graph.nodes]);
      const values = (count: number, seed: number): Float32Array =>
        Float32Array.from({ length: count }, (_, i) => Math.sin(seed * 7.1 + i * 0.37));
      backend.setTensor(kernel, values(3 * 3 * 29 * 13, 1));
      backend.setTensor(image, values(17 * 11 * 29 * 2, 2));
      backend.graphCompute(graph);
      return backend.getTensor(out) as Float32Array;
    };
    using wasm = await WasmBackend.create();
    using cpu = new CpuBackend();
    const [a, b] = [run(wasm), run(cpu)];
    assert.equal(a.length, b.length);
    let error = 0;
    let norm = 0;
    for (let i = 0; i < b.length; i++) {
      error += (a[i]! - b[i]!) ** 2;
      norm += b[i]! ** 2;
    }
    assert.ok(error / norm <= 1e-10, `NMSE vs the CPU backend ${error / norm}`);
  });
}

/** Greedy text of `prompt` on `backend`, and the model's ids for it. */
async function greedy(backend: "cpu" | WasmBackend, prompt: string): Promise<string> {
  using llm = await LLM.load(SMOLLM2_PATH, { backend });
  let text = "";
  for await (const piece of llm.generate(prompt, { maxTokens: 8, temperature: 0 })) text += piece;
  return text;
}

Deno.test({
  name: "SmolLM2 (q4_1) generates on the WebAssembly backend the CPU's greedy tokens",
  ignore: !smolLM2Cached(),
  fn: async () => {
    using wasm = await WasmBackend.create();
    const prompt = "The capital of France is";
    const [onWasm, onCpu] = [await greedy(wasm, prompt), await greedy("cpu", prompt)];
    assert.equal(onWasm, onCpu);
    assert.match(onWasm, /Paris/);
  },
});

Deno.test("wasm_test leaves nothing alive in either core", () => {
  assert.deepEqual(WasmBackend.liveAllocations(), NOTHING_LIVE);
  assertNothingLive(baseline);
});
