/**
 * The neural-network ops (flashAttnExt, ...) on WebGPU against the CPU backend, as ggml's
 * test-backend-ops: the same graph from the same seeded inputs on both, compared by normalized
 * squared error (NMSE), on odd shapes, f16 and f32 K/V, masks and permuted sources. Skipped,
 * visibly, when Deno finds no adapter. Runs in its own process (deno.json `test:webgpu`).
 */

import assert from "node:assert/strict";
import { closeSharedWebGpuTest, sharedWebGpu } from "./gpu.ts";
import {
  allocGraph,
  allocTensors,
  type Backend,
  Context,
  conv1d,
  conv2d,
  conv2dDw,
  convTranspose1d,
  convTranspose2d,
  CpuBackend,
  cpy,
  flashAttnExt,
  type FlashAttnOptions,
  Graph,
  groupNorm,
  im2col,
  interpolate,
  l2Norm,
  permute,
  pool1d,
  pool2d,
  softmax,
  type Tensor,
  timestepEmbedding,
} from "../mod.ts";
import { nmse, Rng } from "./reference.ts";

const gpu = await sharedWebGpu();
const cpu = new CpuBackend({ threads: 1 });
globalThis.addEventListener("unload", () => {
  cpu.dispose();
});

/** exp and f32 dot products in another order: a few ulp per element. */
const NMSE_ATTENTION = 1e-8;
/** A row reduction, exp and a scale of every element (as backend_ops_test's NMSE_NORM). */
const NMSE_SOFTMAX = 1e-8;
/** Max is exact; a mean is a few additions and one division (a few ulp). */
const NMSE_ELEMENTWISE = 1e-10;

type Dims4 = [number, number, number, number];

interface Built {
  ctx: Context;
  inputs: [Tensor, ArrayBufferView][];
  output: Tensor;
}

/** Builds the case's graph from seeded inputs; called once per backend. */
type Build = () => Built;

async function run(backend: Backend, build: Build): Promise<Float64Array> {
  const { ctx, inputs, output } = build();
  const graph = Graph.build(output);
  // Leafs of other contexts too (a cpy's destination).
  using _inputs = allocTensors(backend, [...new Set([...ctx.tensors, ...graph.leafs])]);
  using _memory = allocGraph(backend, graph);
  for (const [t, data] of inputs) backend.setTensor(t, data);
  backend.graphCompute(graph);
  const result = await backend.getTensorAsync(output);
  return Float64Array.from(result as Float32Array);
}

function attention(
  seed: number,
  q: Dims4,
  kv: Dims4,
  dv: number,
  dtype: "f32" | "f16",
  options: FlashAttnOptions & { maskDType?: "f32" | "f16"; permuted?: boolean },
): Build {
  return () => {
    const rng = new Rng(seed);
    const ctx = new Context();
    const inputs: [Tensor, ArrayBufferView][] = [];
    const make = (type: "f32" | "f16", ne: Dims4): Tensor => {
      const t = ctx.newTensor(type, ne);
      const values = rng.f32(ne[0] * ne[1] * ne[2] * ne[3]);
      inputs.push([t, type === "f16" ? new Float16Array(values) : values]);
      return t;
    };
    const qt = make("f32", q);
    const kvTensor = (d: number): Tensor =>
      options.permuted
        ? permute(make(dtype, [d, kv[2], kv[1], kv[3]]), [0, 2, 1, 3])
        : make(dtype, [d, kv[1], kv[2], kv[3]]);
    const k = kvTensor(kv[0]);
    const v = kvTensor(dv);
    let mask: Tensor | undefined;
    if (options.maskDType) {
      const rows = q[1] + 3;
      mask = ctx.newTensor(options.maskDType, [kv[1], rows]);
      const values = new Float32Array(kv[1] * rows);
      for (let i = 0; i < rows; i++) {
        for (let j = 0; j < kv[1]; j++) {
          // Causal, with a random bias, and row 2 fully hidden.
          values[i * kv[1] + j] = j > kv[1] - q[1] + i || i === 2 ? -Infinity : rng.uniform(-1, 1);
        }
      }
      inputs.push([mask, options.maskDType === "f16" ? new Float16Array(values) : values]);
    }
    const { maskDType: _, permuted: __, ...rest } = options;
    const output = flashAttnExt(qt, k, v, { ...rest, ...(mask ? { mask } : {}) });
    return { ctx, inputs, output };
  };
}

const CASES: [string, Build][] = [
  ["f32, no mask, odd head dim", attention(1, [40, 7, 3, 1], [40, 37, 3, 1], 40, "f32", {})],
  [
    "f16 K/V, GQA 6:2, 2 batches, f16 mask with a hidden row, scale",
    attention(2, [64, 5, 6, 2], [64, 300, 2, 2], 64, "f16", { maskDType: "f16", scale: 0.125 }),
  ],
  [
    "Dv != Dk, f32 mask, softcap and ALiBi over 5 heads",
    attention(3, [24, 9, 5, 1], [24, 33, 5, 1], 33, "f32", {
      maskDType: "f32",
      scale: 0.3,
      softcap: 2.5,
      maxBias: 8,
    }),
  ],
  [
    "permuted f16 K and V, 1 query row",
    attention(4, [32, 1, 4, 1], [32, 50, 4, 1], 32, "f16", { permuted: true, scale: 0.2 }),
  ],
];

for (const [name, build] of CASES) {
  Deno.test({
    name: `webgpu flashAttnExt matches the CPU: ${name}`,
    ignore: gpu === null,
    sanitizeResources: false,
    sanitizeOps: false,
    fn: async () => {
      const expected = await run(cpu, build);
      assert.ok(gpu!.supportsOp(build().output));
      const actual = await run(gpu!, build);
      const error = nmse(actual, expected);
      assert.ok(
        error <= NMSE_ATTENTION,
        `${name}: NMSE ${error} > ${NMSE_ATTENTION}\nactual ${actual.slice(0, 6).join(", ")}` +
          `\nexpected ${expected.slice(0, 6).join(", ")}`,
      );
    },
  });
}

Deno.test({
  name: "webgpu flashAttnExt: head dims past the shader's limit are not supported",
  ignore: gpu === null,
  sanitizeResources: false,
  sanitizeOps: false,
  fn: () => {
    const ctx = new Context();
    const q = ctx.newTensor("f32", [2048, 2, 1]);
    const k = ctx.newTensor("f32", [2048, 3, 1]);
    assert.equal(gpu!.supportsOp(flashAttnExt(q, k, k)), false);
    assert.equal(cpu.supportsOp(flashAttnExt(q, k, k)), true);
  },
});

for (
  const [name, ne, maskNe, maxBias] of [
    ["6 heads, max_bias 8", [37, 5, 6, 1], [37, 7, 1, 1], 8],
    ["3 heads x 2 batches, per-head mask, max_bias 0.5", [300, 3, 3, 2], [300, 3, 3, 1], 0.5],
  ] as [string, Dims4, Dims4, number][]
) {
  Deno.test({
    name: `webgpu softmax with ALiBi slopes matches the CPU: ${name}`,
    ignore: gpu === null,
    sanitizeResources: false,
    sanitizeOps: false,
    fn: async () => {
      const build: Build = () => {
        const rng = new Rng(ne[0]);
        const ctx = new Context();
        const x = ctx.newTensor("f32", ne);
        const mask = ctx.newTensor("f32", maskNe);
        const values = rng.f32(maskNe[0] * maskNe[1] * maskNe[2], -2, 2);
        for (let i = 0; i < values.length; i += 5) values[i] = -Infinity;
        const inputs: [Tensor, ArrayBufferView][] = [
          [x, rng.f32(ne[0] * ne[1] * ne[2] * ne[3], -3, 3)],
          [mask, values],
        ];
        return { ctx, inputs, output: softmax(x, { mask, scale: 0.7, maxBias }) };
      };
      const expected = await run(cpu, build);
      const actual = await run(gpu!, build);
      const error = nmse(actual, expected);
      assert.ok(error <= NMSE_SOFTMAX, `${name}: NMSE ${error} > ${NMSE_SOFTMAX}`);
    },
  });
}

/** Builds `op(kernel, image)` from seeded f32 (or f16 kernel) data. */
function convCase(
  seed: number,
  kne: Dims4,
  ine: Dims4,
  kernelDType: "f32" | "f16",
  op: (kernel: Tensor, image: Tensor) => Tensor,
): Build {
  return () => {
    const rng = new Rng(seed);
    const ctx = new Context();
    const kernel = ctx.newTensor(kernelDType, kne);
    const image = ctx.newTensor("f32", ine);
    const kv = rng.f32(kne[0] * kne[1] * kne[2] * kne[3]);
    const inputs: [Tensor, ArrayBufferView][] = [
      [kernel, kernelDType === "f16" ? new Float16Array(kv) : kv],
      [image, rng.f32(ine[0] * ine[1] * ine[2] * ine[3])],
    ];
    return { ctx, inputs, output: op(kernel, image) };
  };
}

/** Sums of up to a few hundred f32 products in another order (a GEMM on each side). */
const NMSE_CONV = 1e-9;

const CONV_CASES: [string, Build][] = [
  [
    "conv2d, one image (planar im2col), stride 2, pad 1",
    convCase(
      10,
      [3, 3, 5, 7],
      [11, 9, 5, 1],
      "f32",
      (k, i) => conv2d(k, i, { stride: 2, padding: 1 }),
    ),
  ],
  [
    "conv2d, 2 images (ggml's im2col), dilation 2",
    convCase(
      11,
      [3, 2, 4, 6],
      [13, 12, 4, 2],
      "f32",
      (k, i) => conv2d(k, i, { padding: [1, 2], dilation: 2 }),
    ),
  ],
  [
    "conv2d, f16 kernel",
    convCase(12, [3, 3, 4, 5], [10, 8, 4, 1], "f16", (k, i) => conv2d(k, i, { padding: 1 })),
  ],
  [
    "conv2dDw, 6 channels, 2 images",
    convCase(13, [3, 3, 1, 6], [9, 10, 6, 2], "f32", (k, i) => conv2dDw(k, i, { padding: 1 })),
  ],
  [
    "conv1d, stride 2, 2 inputs",
    convCase(
      14,
      [3, 4, 5, 1],
      [20, 4, 2, 1],
      "f32",
      (k, i) => conv1d(k, i, { stride: 2, padding: 1 }),
    ),
  ],
  [
    "im2col into f16, ggml layout",
    convCase(
      15,
      [3, 3, 3, 2],
      [9, 7, 3, 2],
      "f32",
      (k, i) =>
        cpy(
          im2col(k, i, { padding: 1, dtype: "f16" }),
          new Context().newTensor("f32", [27, 9, 7, 2]),
        ),
    ),
  ],
  [
    "im2col planar, stride (2, 1), dilation (1, 2)",
    convCase(
      16,
      [3, 2, 3, 2],
      [9, 7, 3, 1],
      "f32",
      (k, i) => im2col(k, i, { planar: true, stride: [2, 1], dilation: [1, 2], padding: 1 }),
    ),
  ],
];

for (const [name, build] of CONV_CASES) {
  Deno.test({
    name: `webgpu im2col and convolutions match the CPU: ${name}`,
    ignore: gpu === null,
    sanitizeResources: false,
    sanitizeOps: false,
    fn: async () => {
      const expected = await run(cpu, build);
      const actual = await run(gpu!, build);
      const error = nmse(actual, expected);
      assert.ok(error <= NMSE_CONV, `${name}: NMSE ${error} > ${NMSE_CONV}`);
    },
  });
}

function unaryCase(seed: number, ne: Dims4, op: (x: Tensor) => Tensor, permuted = false): Build {
  return () => {
    const rng = new Rng(seed);
    const ctx = new Context();
    const stored = permuted ? [ne[0], ne[2], ne[1], ne[3]] as Dims4 : ne;
    const x = ctx.newTensor("f32", stored);
    const inputs: [Tensor, ArrayBufferView][] = [[
      x,
      rng.f32(ne[0] * ne[1] * ne[2] * ne[3], -2, 3),
    ]];
    return { ctx, inputs, output: op(permuted ? permute(x, [0, 2, 1, 3]) : x) };
  };
}

/** Row or group statistics, then a scale of every element (as backend_ops_test's NMSE_NORM). */
const NMSE_NORM = 1e-8;

const NORM_CASES: [string, Build][] = [
  ["l2Norm, rows of 300", unaryCase(20, [300, 3, 2, 1], (x) => l2Norm(x))],
  ["l2Norm, permuted, eps 10", unaryCase(21, [5, 4, 3, 1], (x) => l2Norm(x, 10), true)],
  [
    "groupNorm, 32 channels in 8 groups, 2 images",
    unaryCase(22, [9, 7, 32, 2], (x) => groupNorm(x, 8)),
  ],
  [
    "groupNorm, 7 channels in 5 groups, permuted",
    unaryCase(23, [3, 4, 7, 1], (x) => groupNorm(x, 5), true),
  ],
];

for (const [name, build] of NORM_CASES) {
  Deno.test({
    name: `webgpu norms match the CPU: ${name}`,
    ignore: gpu === null,
    sanitizeResources: false,
    sanitizeOps: false,
    fn: async () => {
      const expected = await run(cpu, build);
      const actual = await run(gpu!, build);
      const error = nmse(actual, expected);
      assert.ok(error <= NMSE_NORM, `${name}: NMSE ${error} > ${NMSE_NORM}`);
    },
  });
}

function poolCase(seed: number, ne: Dims4, dtype: "f32" | "f16", op: (x: Tensor) => Tensor): Build {
  return () => {
    const rng = new Rng(seed);
    const ctx = new Context();
    const x = ctx.newTensor(dtype, ne);
    const values = rng.f32(ne[0] * ne[1] * ne[2] * ne[3], -2, 2);
    return {
      ctx,
      inputs: [[x, dtype === "f16" ? new Float16Array(values) : values]],
      output: op(x),
    };
  };
}

const POOL_CASES: [string, Build][] = [
  [
    "2D max 3x3 stride 2 pad 1",
    poolCase(30, [11, 9, 3, 2], "f32", (x) => pool2d(x, "max", 3, { stride: 2, padding: 1 })),
  ],
  [
    "2D avg 2x3, f16",
    poolCase(
      31,
      [7, 8, 2, 1],
      "f16",
      (x) => pool2d(x, "avg", [2, 3], { stride: [1, 2], padding: [1, 0] }),
    ),
  ],
  [
    "1D avg kernel 4 stride 3 pad 2",
    poolCase(32, [17, 4, 1, 1], "f32", (x) => pool1d(x, "avg", 4, { stride: 3, padding: 2 })),
  ],
  [
    "1D max kernel 3, f16",
    poolCase(33, [20, 3, 2, 1], "f16", (x) => pool1d(x, "max", 3, { stride: 2, padding: 1 })),
  ],
];

for (const [name, build] of POOL_CASES) {
  Deno.test({
    name: `webgpu pooling matches the CPU: ${name}`,
    ignore: gpu === null,
    sanitizeResources: false,
    sanitizeOps: false,
    fn: async () => {
      const expected = await run(cpu, build);
      const actual = await run(gpu!, build);
      const error = nmse(actual, expected);
      assert.ok(error <= NMSE_ELEMENTWISE, `${name}: NMSE ${error} > ${NMSE_ELEMENTWISE}`);
    },
  });
}

const RESAMPLE_CASES: [string, Build][] = [
  ["interpolate nearest", unaryCase(40, [5, 4, 2, 1], (x) => interpolate(x, [10, 8, 6, 1]))],
  [
    "interpolate bilinear, permuted",
    unaryCase(41, [7, 5, 3, 1], (x) => interpolate(x, [16, 9, 3, 1], { mode: "bilinear" }), true),
  ],
  [
    "interpolate bilinear, aligned corners",
    unaryCase(
      42,
      [6, 4, 2, 1],
      (x) => interpolate(x, [11, 7, 2, 1], { mode: "bilinear", alignCorners: true }),
    ),
  ],
  ["timestepEmbedding, odd dim", unaryCase(43, [5, 1, 1, 1], (x) => timestepEmbedding(x, 33, 100))],
];

for (const [name, build] of RESAMPLE_CASES) {
  Deno.test({
    name: `webgpu resampling matches the CPU: ${name}`,
    ignore: gpu === null,
    sanitizeResources: false,
    sanitizeOps: false,
    fn: async () => {
      const expected = await run(cpu, build);
      const actual = await run(gpu!, build);
      const error = nmse(actual, expected);
      // WGSL's sin, cos and exp are a few ulp (lavapipe's more): 1e-8 for the embedding.
      assert.ok(error <= NMSE_NORM, `${name}: NMSE ${error} > ${NMSE_NORM}`);
    },
  });
}

const TRANSPOSE_CASES: [string, Build][] = [
  [
    "convTranspose2d stride 2, 2 images",
    convCase(50, [3, 3, 5, 4], [6, 5, 4, 2], "f32", (k, i) => convTranspose2d(k, i, 2)),
  ],
  [
    "convTranspose2d f16 kernel",
    convCase(51, [2, 2, 3, 6], [7, 4, 6, 1], "f16", (k, i) => convTranspose2d(k, i, 2)),
  ],
  [
    "convTranspose1d stride 2",
    convCase(52, [4, 5, 3, 1], [9, 3, 1, 1], "f32", (k, i) => convTranspose1d(k, i, 2)),
  ],
];

for (const [name, build] of TRANSPOSE_CASES) {
  Deno.test({
    name: `webgpu transposed convolutions match the CPU: ${name}`,
    ignore: gpu === null,
    sanitizeResources: false,
    sanitizeOps: false,
    fn: async () => {
      const expected = await run(cpu, build);
      const actual = await run(gpu!, build);
      const error = nmse(actual, expected);
      assert.ok(error <= NMSE_CONV, `${name}: NMSE ${error} > ${NMSE_CONV}`);
    },
  });
}

closeSharedWebGpuTest();
