// Scheduler tests: split construction (merging, copies, shared buffers), results equal to a
// single-backend run on random multi-backend graphs, and clear errors for bad input. Two CPU
// backends stand in for two memory spaces, so these run on every machine.
import assert from "node:assert/strict";
import {
  add,
  allocGraph,
  allocTensors,
  type BackendBuffer,
  Context,
  CpuBackend,
  type CpuBuffer,
  cpy,
  GraftError,
  Graph,
  liveAllocations,
  mul,
  mulMat,
  Op,
  PlacementError,
  rmsNorm,
  scale,
  silu,
  softmax,
  type Tensor,
} from "../mod.ts";
import { Schedule } from "../src/sched/schedule.ts";
import {
  blockData,
  buildBlock,
  DEFAULT_BLOCK,
  randomValues,
  setBlockInputs,
} from "../demo/block.ts";

class NoSoftmaxCpu extends CpuBackend {
  override supportsOp(tensor: Tensor): boolean {
    return tensor.op !== Op.softmax;
  }
}

function fill(backend: CpuBackend, tensors: readonly Tensor[], seed: number): void {
  tensors.forEach((t, i) => backend.setTensor(t, randomValues(t.nelements, seed + i)));
}

Deno.test("consecutive nodes on one backend form one split; inputs from the other are copied", async () => {
  {
    using a = new CpuBackend({ threads: 1, name: "a" });
    using b = new CpuBackend({ threads: 1, name: "b" });
    const ctx = new Context();
    const x = ctx.newTensor("f32", [16, 4], "x");
    const w1 = ctx.newTensor("f32", [16, 16], "w1");
    const w2 = ctx.newTensor("f32", [16, 16], "w2");
    const y = mulMat(w2, silu(mulMat(w1, x)));
    using _onA = allocTensors(a, [x, w1]);
    using _onB = allocTensors(b, [w2]);
    fill(a, [x, w1], 1);
    fill(b, [w2], 9);
    using s = Schedule.create(Graph.build(y), { backends: [b, a] });
    // w1's mulMat and silu run on a; w2's mulMat on b: two splits, one copy (silu's result).
    assert.equal(s.splits.length, 2);
    assert.equal(s.splits[0]!.backend, a);
    assert.equal(s.splits[1]!.backend, b);
    assert.equal(s.splits[1]!.inputs.length, 1);
    assert.equal(s.splits[1]!.inputs[0]!.copy.nbytes, 16 * 4 * 4);
    const stats = await s.compute();
    assert.equal(stats.bytesCopied, 16 * 4 * 4);
    assert.ok(stats.backends["a"]!.computeMs >= 0 && stats.backends["b"]!.computeMs >= 0);
    assert.match(s.explain(), /weight lives here/);
  }
  assert.equal(liveAllocations().buffers, 0);
});

Deno.test("a split schedule computes the transformer block exactly as one backend does", async () => {
  using a = new CpuBackend({ threads: 2, name: "a" });
  using b = new CpuBackend({ threads: 1, name: "b" });
  const alone = buildBlock(DEFAULT_BLOCK);
  const split = buildBlock(DEFAULT_BLOCK);
  const data = blockData(DEFAULT_BLOCK);
  using _all = allocTensors(a, alone.ctx.tensors);
  using _nodes = allocTensors(a, alone.graph.nodes);
  const w = split.inputs;
  const onB = [w.attnNorm, w.wq, w.wk, w.wv, w.wo];
  using _restA = allocTensors(a, split.ctx.tensors.filter((t) => !onB.includes(t)));
  using _restB = allocTensors(b, onB);
  setBlockInputs(alone, data);
  setBlockInputs(split, data);
  a.graphCompute(alone.graph);
  const expected = a.getTensor(alone.output);
  using s = Schedule.create(split.graph, { backends: [b, a] });
  await s.compute();
  assert.deepEqual(await s.getOutput(split.output), expected);
  // Attention weights on b, MLP weights on a: the automatic schedule needs only two splits,
  // no more than the hand-marked cut at the attention output.
  assert.equal(s.splits.length, 2);
  const attnEnd = split.graph.nodes.find((n) => n.op === Op.add)!;
  using manual = Schedule.fromCuts(split.graph, [
    { upTo: attnEnd, backend: b },
    { upTo: split.output, backend: a },
  ]);
  assert.ok(s.splits.length <= manual.splits.length);
  await manual.compute();
  assert.deepEqual(await manual.getOutput(split.output), expected);
});

Deno.test("splits on one backend share its buffers and earlier results stay alive", async () => {
  using a = new CpuBackend({ threads: 1, name: "a" });
  using b = new CpuBackend({ threads: 1, name: "b" });
  const ctx = new Context();
  const x = ctx.newTensor("f32", [32, 3], "x");
  const wa = ctx.newTensor("f32", [32, 32], "wa");
  const wb = ctx.newTensor("f32", [32, 32], "wb");
  const h = mulMat(wa, x); // a
  const g = mulMat(wb, h); // b
  const out = add(h, mulMat(wa, g)); // a again, reading h from split 0
  using _a = allocTensors(a, [x, wa]);
  using _b = allocTensors(b, [wb]);
  fill(a, [x, wa], 3);
  fill(b, [wb], 5);
  using s = Schedule.create(Graph.build(out), { backends: [b, a] });
  assert.deepEqual(s.splits.map((sp) => sp.backend.name), ["a", "b", "a"]);
  // The last split reads h directly (same backend), not through a copy.
  assert.equal(s.splits[2]!.inputs.length, 1);
  await s.compute();
  const result = await s.getOutput(out);
  // Recompute on one backend for the expected value.
  using c = new CpuBackend({ threads: 1 });
  const ctx2 = new Context();
  const x2 = ctx2.newTensor("f32", [32, 3]);
  const wa2 = ctx2.newTensor("f32", [32, 32]);
  const wb2 = ctx2.newTensor("f32", [32, 32]);
  const h2 = mulMat(wa2, x2);
  const out2 = add(h2, mulMat(wa2, mulMat(wb2, h2)));
  const graph2 = Graph.build(out2);
  using _c: BackendBuffer = allocTensors(c, [...ctx2.tensors, ...graph2.nodes]);
  c.setTensor(x2, randomValues(x2.nelements, 3));
  c.setTensor(wa2, randomValues(wa2.nelements, 4));
  c.setTensor(wb2, randomValues(wb2.nelements, 5));
  c.graphCompute(graph2);
  assert.deepEqual(result, c.getTensor(out2));
});

Deno.test("random multi-backend graphs compute what a single backend computes", async () => {
  for (let seed = 1; seed <= 25; seed++) {
    using a = new CpuBackend({ threads: 1, name: "a" });
    using b = new CpuBackend({ threads: 1, name: "b" });
    using single = new CpuBackend({ threads: 1 });
    const build = (): { leafs: Tensor[]; out: Tensor; ctx: Context } => {
      let state = seed * 7919;
      const rand = (n: number): number => {
        state = (Math.imul(state, 1103515245) + 12345) >>> 0;
        return state % n;
      };
      const ctx = new Context();
      const n = 8 + rand(9);
      const leafs = Array.from({ length: 4 }, (_, i) => ctx.newTensor("f32", [n, n], `w${i}`));
      const pool: Tensor[] = [ctx.newTensor("f32", [n, 5], "x")];
      leafs.push(pool[0]!);
      for (let i = 0; i < 10; i++) {
        const t = pool[rand(pool.length)]!;
        const u = pool[rand(pool.length)]!;
        const w = leafs[rand(4)]!;
        const pick = rand(5);
        pool.push(
          pick === 0
            ? mulMat(w, t)
            : pick === 1
            ? add(t, u)
            : pick === 2
            ? silu(t)
            : pick === 3
            ? rmsNorm(scale(t, 0.5))
            : mul(t, u),
        );
      }
      return { leafs, out: add(pool[pool.length - 1]!, pool[pool.length - 2]!), ctx };
    };
    const one = build();
    const two = build();
    using _s = allocTensors(single, one.ctx.tensors);
    const g1 = Graph.build(one.out);
    using _n = allocTensors(single, g1.nodes);
    one.leafs.forEach((t, i) => single.setTensor(t, randomValues(t.nelements, seed * 100 + i)));
    single.graphCompute(g1);
    const expected = single.getTensor(one.out);
    // Weights alternate between the backends; the input is on a.
    const onB = two.leafs.filter((_, i) => i % 2 === 1 && i < 4);
    using _a = allocTensors(a, two.leafs.filter((t) => !onB.includes(t)));
    using _b = allocTensors(b, onB);
    two.leafs.forEach((t, i) => {
      (onB.includes(t) ? b : a).setTensor(t, randomValues(t.nelements, seed * 100 + i));
    });
    using s = Schedule.create(Graph.build(two.out), { backends: [b, a] });
    await s.compute();
    assert.deepEqual(await s.getOutput(two.out), expected, `seed ${seed}`);
  }
  assert.equal(liveAllocations().buffers, 0);
});

Deno.test("an op that the preferred backend lacks runs on one that has it", async () => {
  using a = new CpuBackend({ threads: 1, name: "a" });
  using limited = new NoSoftmaxCpu({ threads: 1, name: "limited" });
  const ctx = new Context();
  const w = ctx.newTensor("f32", [8, 8], "w");
  const x = ctx.newTensor("f32", [8, 2], "x");
  const out = softmax(mulMat(w, x));
  using _l = allocTensors(limited, [w]);
  using _a = allocTensors(a, [x]);
  fill(limited, [w], 1);
  fill(a, [x], 2);
  using s = Schedule.create(Graph.build(out), { backends: [limited, a] });
  assert.equal(s.assignment.get(out)!.backend, a);
  await s.compute();
  const values = await s.getOutput(out);
  assert.ok(Math.abs(Array.from(values.slice(0, 8)).reduce((p, v) => p + v, 0) - 1) < 1e-6);
});

Deno.test("scheduling rejects a tensor on no backend and an op no backend supports", () => {
  using limited = new NoSoftmaxCpu({ threads: 1, name: "limited" });
  const ctx = new Context();
  const x = ctx.newTensor("f32", [8, 2], "x");
  assert.throws(
    () => Schedule.create(Graph.build(softmax(x)), { backends: [limited] }),
    (e: unknown) => e instanceof PlacementError && /x .* is on no backend/.test(e.message),
  );
  using _x = allocTensors(limited, [x]);
  assert.throws(
    () => Schedule.create(Graph.build(softmax(x)), { backends: [limited] }),
    (e: unknown) => e instanceof GraftError && /no backend supports softmax/.test(e.message),
  );
  const y = ctx.newTensor("f32", [8, 2], "y");
  using _y = allocTensors(limited, [y]);
  assert.throws(
    () =>
      Schedule.fromCuts(Graph.build(softmax(add(x, y))), [
        { upTo: softmax(y), backend: limited },
      ]),
    GraftError,
  );
});

Deno.test("planned split buffers give the same results, and declared cut inputs are checked", async () => {
  using a = new CpuBackend({ threads: 1, name: "a" });
  using b = new CpuBackend({ threads: 1, name: "b" });
  const ctx = new Context();
  const x = ctx.newTensor("f32", [32, 3], "x");
  const wa = ctx.newTensor("f32", [32, 32], "wa");
  const wb = ctx.newTensor("f32", [32, 32], "wb");
  const h = silu(mulMat(wa, x));
  const out = add(h, mulMat(wa, mulMat(wb, h)));
  using _a = allocTensors(a, [x, wa]);
  using _b = allocTensors(b, [wb]);
  fill(a, [x, wa], 3);
  fill(b, [wb], 5);
  const graph = Graph.build(out);
  using simple = Schedule.create(graph, { backends: [b, a] });
  using planned = Schedule.create(graph, { backends: [b, a], allocate: allocGraph });
  await simple.compute();
  await planned.compute();
  assert.deepEqual(await planned.getOutput(out), await simple.getOutput(out));
  const gb = graph.nodes.find((n) => n.op === Op.mulMat && n.src[0] === wb)!;
  const live = liveAllocations().buffers;
  assert.throws(
    () =>
      Schedule.fromCuts(graph, [
        { upTo: h, backend: a },
        { upTo: gb, backend: b, inputs: [x] },
        { upTo: out, backend: a },
      ]),
    (e: unknown) => e instanceof GraftError && /declared input x .* does not cross/.test(e.message),
  );
  assert.equal(liveAllocations().buffers, live, "a refused schedule frees what it allocated");
  using manual = Schedule.fromCuts(graph, [
    { upTo: h, backend: a },
    { upTo: gb, backend: b, inputs: [h] },
    { upTo: out, backend: a },
  ]);
  await manual.compute();
  assert.deepEqual(await manual.getOutput(out), await simple.getOutput(out));
});

/** out[n][m] = sum_k w[m][k] x[n][k] in f64: mulMat(w [k, m], x [k, n]). */
function mulMatF64(w: Float32Array, x: Float32Array, k: number, m: number, n: number): number[] {
  const out: number[] = [];
  for (let j = 0; j < n; j++) {
    for (let i = 0; i < m; i++) {
      let sum = 0;
      for (let p = 0; p < k; p++) sum += w[i * k + p]! * x[j * k + p]!;
      out.push(sum);
    }
  }
  return out;
}

function assertClose(actual: ArrayLike<number>, expected: readonly number[], what: string): void {
  assert.equal(actual.length, expected.length);
  for (let i = 0; i < expected.length; i++) {
    // f32 dot products of 37 terms of size < 1: 1e-5 absolute is ~100 ulps of slack.
    assert.ok(Math.abs(actual[i]! - expected[i]!) < 1e-5, `${what}[${i}]`);
  }
}

Deno.test("a leaf input crosses once while unchanged; a write to its buffer makes it cross again", async () => {
  {
    using a = new CpuBackend({ threads: 1, name: "a" });
    using b = new CpuBackend({ threads: 1, name: "b" });
    const ctx = new Context();
    const [k, m, n] = [37, 5, 3];
    const x = ctx.newTensor("f32", [k, n], "x");
    const w = ctx.newTensor("f32", [k, m], "w");
    const y = mulMat(w, x); // on b, where its weight lives; x crosses from a
    using onA = allocTensors(a, [x]);
    using _onB = allocTensors(b, [w]);
    const wData = randomValues(w.nelements, 11);
    b.setTensor(w, wData);
    let xData = randomValues(x.nelements, 12);
    a.setTensor(x, xData);
    using s = Schedule.create(Graph.build(y), { backends: [b, a] });
    assert.equal(s.splits.length, 1);
    assert.equal(s.splits[0]!.inputs.length, 1);

    const first = await s.compute();
    assert.equal(first.bytesCopied, x.nbytes);
    assert.equal(first.copiesSkipped, 0);
    assertClose(await s.getOutput(y) as Float32Array, mulMatF64(wData, xData, k, m, n), "first");

    const second = await s.compute({ profile: true });
    assert.equal(second.bytesCopied, 0);
    assert.equal(second.copiesSkipped, 1);
    assertClose(await s.getOutput(y) as Float32Array, mulMatF64(wData, xData, k, m, n), "second");

    xData = randomValues(x.nelements, 13);
    a.setTensor(x, xData);
    const third = await s.compute();
    assert.equal(third.bytesCopied, x.nbytes);
    assertClose(await s.getOutput(y) as Float32Array, mulMatF64(wData, xData, k, m, n), "new x");

    // A write the backend did not see, announced with markWritten.
    (onA as CpuBuffer).markWritten();
    assert.equal((await s.compute()).bytesCopied, x.nbytes);
    assert.equal((await s.compute()).bytesCopied, 0);
  }
  assert.equal(liveAllocations().buffers, 0);
});

Deno.test("a crossing input that the graph writes (a cpy into a leaf) crosses on every compute", async () => {
  using a = new CpuBackend({ threads: 1, name: "a" });
  using b = new CpuBackend({ threads: 1, name: "b" });
  const ctx = new Context();
  const [k, m, n] = [9, 4, 2];
  const x = ctx.newTensor("f32", [k, n], "x");
  const cache = ctx.newTensor("f32", [k, n], "cache");
  const w = ctx.newTensor("f32", [k, m], "w");
  const written = cpy(scale(x, 2), cache); // on a: cache's memory lives there
  const y = mulMat(w, written); // on b
  // Separate buffers: write counts are per buffer, and each compute writes the cache's.
  using _x = allocTensors(a, [x]);
  using _cache = allocTensors(a, [cache]);
  using _onB = allocTensors(b, [w]);
  const wData = randomValues(w.nelements, 21);
  b.setTensor(w, wData);
  using s = Schedule.create(Graph.build(y), { backends: [b, a] });
  for (let run = 0; run < 3; run++) {
    const xData = randomValues(x.nelements, 30 + run);
    a.setTensor(x, xData);
    const stats = await s.compute();
    assert.equal(stats.copiesSkipped, 0);
    const doubled = Float32Array.from(xData, (v) => 2 * v);
    assertClose(await s.getOutput(y) as Float32Array, mulMatF64(wData, doubled, k, m, n), "run");
  }
  // x unchanged: its copy is skipped, but what the cpy wrote still crosses.
  const crossings = s.splits.flatMap((sp) => sp.inputs).length;
  const again = await s.compute();
  assert.equal(again.copiesSkipped, 1);
  assert.equal(again.bytesCopied, (crossings - 1) * x.nbytes);
});
