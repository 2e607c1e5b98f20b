// Node fusion in the CPU plan (src/backend/fuse.ts): mul(silu(x), y) and mul(rmsNorm(x), g)
// run as one core node, bitwise equal to the unfused pair; pairs whose intermediate is read
// elsewhere, or whose x is overwritten before the fused node runs, are left alone. conv2d's
// im2col + mulMat runs as one conv_2d node, within f32 rounding of the pair.
import assert from "node:assert/strict";
import {
  allocGraph,
  allocTensors,
  Context,
  conv2d,
  CpuBackend,
  type CpuPlan,
  Graph,
  liveAllocations,
  mul,
  Op,
  reshape,
  rmsNorm,
  scale,
  type Shape,
  silu,
  type Tensor,
  transpose,
} from "../mod.ts";
import { blockData, buildBlock, DEFAULT_BLOCK, setBlockInputs } from "../demo/block.ts";
import { assertNothingLive } from "./leaks.ts";

const baseline = liveAllocations();
const THREADS = [1, 2, 3];

function random(count: number, seed: number): Float32Array {
  let state = seed >>> 0 || 1;
  const out = new Float32Array(count);
  for (let i = 0; i < count; i++) {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    out[i] = ((state >>> 0) / 2 ** 32) * 6 - 3;
  }
  return out;
}

function bits(data: ArrayBufferView): Uint8Array {
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength).slice();
}

/** The fused records of a plan, as "op+op" names. */
function fusedPairs(plan: CpuPlan): string[] {
  return plan.entries.filter((e) => e.fused.length > 1).map((e) =>
    e.fused.map((t) =>
      t.op === Op.silu
        ? "silu"
        : t.op === Op.rmsNorm
        ? "rmsNorm"
        : t.op === Op.im2col
        ? "im2col"
        : t.op === Op.mulMat
        ? "mulMat"
        : "mul"
    ).join("+")
  );
}

/** `output` computed by a fusing plan and by a plan with fusion off; the fused pairs. */
function computeBoth(
  cpu: CpuBackend,
  graph: Graph,
  output: Tensor,
): [Uint8Array, Uint8Array, string[]] {
  using plain = cpu.graphPlanCreate(graph, { fuse: false });
  assert.deepEqual(fusedPairs(plain), []);
  cpu.graphPlanCompute(plain);
  const want = bits(cpu.getTensor(output));
  using fused = cpu.graphPlanCreate(graph);
  cpu.graphPlanCompute(fused);
  return [want, bits(cpu.getTensor(output)), fusedPairs(fused)];
}

Deno.test("a fused demo block is bitwise the unfused plan's, with both pairs fused twice", () => {
  for (const threads of THREADS) {
    using cpu = new CpuBackend({ threads });
    const block = buildBlock(DEFAULT_BLOCK);
    using _weights = allocTensors(cpu, block.ctx.tensors);
    using _activations = allocGraph(cpu, block.graph);
    setBlockInputs(block, blockData(DEFAULT_BLOCK));
    const [want, got, pairs] = computeBoth(cpu, block.graph, block.output);
    assert.deepEqual(got, want, `threads ${threads}`);
    assert.deepEqual(pairs.sort(), ["rmsNorm+mul", "rmsNorm+mul", "silu+mul"]);
  }
  assertNothingLive(baseline);
});

Deno.test("fusion on odd and non-contiguous shapes, either operand order, broadcast gains", () => {
  const cases: { ne: Shape; gain: Shape; transposed: boolean; swap: boolean }[] = [
    { ne: [7, 3], gain: [7], transposed: false, swap: false },
    { ne: [33, 5, 3], gain: [33, 1, 3], transposed: true, swap: true },
    { ne: [1037, 2, 2], gain: [1037], transposed: false, swap: true },
    { ne: [1, 1], gain: [1], transposed: true, swap: false },
  ];
  for (const threads of THREADS) {
    using cpu = new CpuBackend({ threads });
    for (const { ne, gain, transposed, swap } of cases) {
      const ctx = new Context();
      // A transposed x is a strided source of silu and rmsNorm.
      const stored = (transposed ? [ne[1]!, ne[0]!, ...ne.slice(2)] : ne) as Shape;
      const a = ctx.newTensor("f32", stored);
      const x = transposed ? transpose(a) : a;
      const y = ctx.newTensor("f32", ne);
      const g = ctx.newTensor("f32", gain);
      const s = silu(x);
      const n = rmsNorm(x, 1e-5);
      const gated = swap ? mul(y, s) : mul(s, y);
      const normed = mul(n, g);
      const graph = Graph.build(gated, normed);
      using _leafs = allocTensors(cpu, ctx.tensors);
      using _nodes = allocGraph(cpu, graph);
      const count = (t: Tensor): number => t.ne.reduce((p, q) => p * q, 1);
      cpu.setTensor(a, random(count(a), 1 + count(a)));
      cpu.setTensor(y, random(count(y), 2));
      cpu.setTensor(g, random(count(g), 3));
      const label = `ne ${ne} threads ${threads}`;
      const [wantGated, gotGated, pairs] = computeBoth(cpu, graph, gated);
      assert.deepEqual(gotGated, wantGated, label);
      assert.deepEqual(pairs.sort(), ["rmsNorm+mul", "silu+mul"], label);
      const [wantNormed, gotNormed] = computeBoth(cpu, graph, normed);
      assert.deepEqual(gotNormed, wantNormed, label);
    }
  }
  assertNothingLive(baseline);
});

Deno.test("no fusion when the intermediate is an output, has another consumer or a view", () => {
  noFusionCases();
  assertNothingLive(baseline);
});

function noFusionCases(): void {
  using cpu = new CpuBackend({ threads: 2 });
  const ctx = new Context();
  const x = ctx.newTensor("f32", [16, 4]);
  const y = ctx.newTensor("f32", [16, 4]);
  const graphs = (): Graph[] => {
    const s1 = silu(x);
    const asOutput = Graph.build(mul(s1, y), s1);
    const s2 = silu(x);
    const twice = Graph.build(mul(s2, y), scale(s2, 2));
    const s3 = silu(x);
    const viewed = Graph.build(mul(s3, y), scale(reshape(s3, [64]), 2));
    const n4 = rmsNorm(x, 1e-5);
    const squared = Graph.build(mul(n4, n4)); // same operand twice: two uses
    // A gain of one element per row (ne[0] 1) is a valid mul, not a row gain.
    const perRow = ctx.newTensor("f32", [1, 4]);
    const notRow = Graph.build(mul(rmsNorm(x, 1e-5), perRow));
    return [asOutput, twice, viewed, squared, notRow];
  };
  const built = graphs();
  using _leafs = allocTensors(cpu, ctx.tensors);
  cpu.setTensor(x, random(64, 5));
  cpu.setTensor(y, random(64, 6));
  for (const [i, graph] of built.entries()) {
    using _nodes = allocGraph(cpu, graph);
    using plan = cpu.graphPlanCreate(graph);
    assert.deepEqual(fusedPairs(plan), [], `graph ${i}`);
    // Unfused, the plan still computes.
    cpu.graphPlanCompute(plan);
  }
}

Deno.test("no fusion when a node between the pair overwrites x; results stay right", () => {
  overwrittenBetween();
  assertNothingLive(baseline);
});

function overwrittenBetween(): void {
  using cpu = new CpuBackend({ threads: 2 });
  const ctx = new Context();
  const x = ctx.newTensor("f32", [40, 3]);
  const b = ctx.newTensor("f32", [40, 3]);
  const s = silu(x);
  const t = scale(b, 2); // placed over x: it runs between silu and mul
  const out = mul(s, t);
  const graph = Graph.build(out);
  const order = graph.nodes.filter((n) => n === s || n === t);
  assert.deepEqual(order, [s, t], "silu runs before the node that overwrites x");
  using buffer = cpu.allocBuffer(4 * 1024);
  x.place(buffer, 0);
  t.place(buffer, 0);
  b.place(buffer, 1024);
  s.place(buffer, 2048);
  out.place(buffer, 3072);
  const xs = random(120, 7);
  const bs = random(120, 8);
  cpu.setTensor(x, xs);
  cpu.setTensor(b, bs);
  using plan = cpu.graphPlanCreate(graph);
  assert.deepEqual(fusedPairs(plan), []);
  cpu.graphPlanCompute(plan);
  const got = cpu.getTensor(out) as Float32Array;
  for (let i = 0; i < 120; i++) {
    const silu64 = xs[i]! / (1 + Math.exp(-xs[i]!));
    const want = silu64 * Math.fround(bs[i]! * 2);
    assert.ok(Math.abs(got[i]! - want) <= 1e-5 * Math.max(1, Math.abs(want)), `element ${i}`);
  }
  for (const tensor of [x, t, b, s, out]) tensor.unplace();
}

Deno.test("conv2d runs as one conv_2d node within f32 rounding of im2col + mulMat, not when the unfolding is read", () => {
  const cases: {
    kernel: Shape;
    image: Shape;
    dtype: "f32" | "f16";
    options: Parameters<typeof conv2d>[2];
  }[] = [
    { kernel: [3, 3, 37, 13], image: [23, 19, 37, 2], dtype: "f32", options: { padding: 1 } },
    {
      kernel: [3, 3, 4, 5],
      image: [13, 12, 4, 2],
      dtype: "f16",
      options: { stride: [1, 2], padding: [1, 2], dilation: 2 },
    },
  ];
  for (const threads of THREADS) {
    using cpu = new CpuBackend({ threads });
    for (const c of cases) {
      for (const readUnfolded of [false, true]) {
        const ctx = new Context();
        const kernel = ctx.newTensor(c.dtype, c.kernel);
        const image = ctx.newTensor("f32", c.image);
        const out = conv2d(kernel, image, c.options);
        // out = reshape(transpose(mulMat(weights, transpose(reshape(im2col)))))
        const cols = out.src[0]!.src[0]!.src[1]!.src[0]!.src[0]!;
        assert.equal(cols.op, Op.im2col);
        const graph = readUnfolded ? Graph.build(out, cols) : Graph.build(out);
        using _leafs = allocTensors(cpu, ctx.tensors);
        // Every node its memory (allocGraph's default leaves a fused im2col none): the plan
        // without fusion below computes it.
        using _nodes = allocGraph(cpu, graph, { fused: new Map() });
        const count = (t: Tensor): number => t.ne.reduce((p, q) => p * q, 1);
        const weights = random(count(kernel), 5);
        cpu.setTensor(kernel, c.dtype === "f16" ? new Float16Array(weights) : weights);
        cpu.setTensor(image, random(count(image), 6));
        const label = `kernel ${c.kernel} threads ${threads} read ${readUnfolded}`;
        const [want, got, pairs] = computeBoth(cpu, graph, out);
        assert.deepEqual(pairs, readUnfolded ? [] : ["im2col+mulMat"], label);
        const a = new Float32Array(want.buffer);
        const b = new Float32Array(got.buffer);
        const scale = a.reduce((m, x) => Math.max(m, Math.abs(x)), 0);
        for (let i = 0; i < a.length; i++) {
          assert.ok(Math.abs(a[i]! - b[i]!) <= 1e-5 * scale, `${label}: element ${i}`);
        }
        // A plan that prepacks weights leaves the fused product's to conv_2d, same result.
        using prepacking = cpu.graphPlanCreate(graph, { prepackWeights: true });
        assert.deepEqual(prepacking.prepacked, readUnfolded ? [out.src[0]!.src[0]!] : [], label);
        cpu.graphPlanCompute(prepacking);
        if (!readUnfolded) assert.deepEqual(bits(cpu.getTensor(out)), got, label);
      }
    }
  }
  assertNothingLive(baseline);
});

Deno.test("allocGraph gives a fused conv2d's im2col no memory; the plan computes the same; a plan without fusion over it says what to do", () => {
  using cpu = new CpuBackend({ threads: 2 });
  const ctx = new Context();
  const kernel = ctx.newTensor("f32", [3, 3, 16, 8]);
  const image = ctx.newTensor("f32", [20, 17, 16]);
  const first = conv2d(kernel, image, { padding: 1 });
  // A second conv2d reading the first's result: two im2cols, the first image live until its
  // product, the second reading a computed tensor.
  const kernel2 = ctx.newTensor("f32", [3, 3, 8, 4]);
  const out = conv2d(kernel2, first, { padding: 1 });
  const graph = Graph.build(out);
  const cols = graph.nodes.filter((t) => t.op === Op.im2col);
  assert.equal(cols.length, 2);
  assert.deepEqual([...cpu.fusedAway([graph]).keys()].sort((a, b) => a.id - b.id), cols);
  using _leafs = allocTensors(cpu, ctx.tensors);
  const count = (t: Tensor): number => t.ne.reduce((p, q) => p * q, 1);
  cpu.setTensor(kernel, random(count(kernel), 7));
  cpu.setTensor(kernel2, random(count(kernel2), 8));
  cpu.setTensor(image, random(count(image), 9));
  const run = (fusedAway: boolean): { bytes: Uint8Array; size: number } => {
    using memory = fusedAway
      ? allocGraph(cpu, graph)
      : allocGraph(cpu, graph, { fused: new Map() });
    cpu.graphCompute(graph);
    return { bytes: bits(cpu.getTensor(out)), size: memory.size };
  };
  const lean = run(true);
  const full = run(false);
  // The same fused kernels over other addresses: the same bits.
  assert.deepEqual(lean.bytes, full.bytes);
  // The lean plan holds the two results alone (10,880 + 5,440 bytes; measured 16,320), less
  // than either im2col (196 KB and 98 KB); the full one holds the larger im2col.
  assert.equal(lean.size, first.nbytes + out.nbytes);
  assert.ok(full.size >= cols[0]!.nbytes, `full ${full.size}, im2col ${cols[0]!.nbytes}`);
  using _memory = allocGraph(cpu, graph);
  assert.throws(
    () => cpu.graphPlanCreate(graph, { fuse: false }),
    (e: unknown) =>
      e instanceof Error && e.name === "PlacementError" &&
      /has no memory: allocGraph planned it inside its conv2d product.*fuse: false.*fused: new Map\(\)/
        .test(e.message),
  );
});
