/**
 * RpcBackend against real llama.cpp `ggml-rpc-server` processes (tests/rpc_server.ts starts
 * them on free loopback ports): the op suite's cases whose every node the RPC backend takes
 * computed on the server and compared with Graft's CPU backend (NMSE); the protocol's other
 * commands (recompute, hash cache, copy, memset, clear, alloc size, device memory); a schedule
 * that splits a graph between the server and the local CPU; and the faults: connection
 * refused, a server killed mid-compute, a stalled server (time-out), and malformed replies
 * from a small TCP listener that speaks the framing but sends wrong sizes (the real server
 * never sends those). Skipped, visibly, when the pinned llama.cpp build is not in the cache.
 */

import assert from "node:assert/strict";
import {
  add,
  allocTensors,
  ArgumentError,
  cont,
  Context,
  CpuBackend,
  cpy,
  flashAttnExt,
  getRows,
  Graph,
  mul,
  mulMat,
  Op,
  permute,
  quantize,
  reshape,
  rmsNorm,
  rope,
  RpcConnectionError,
  RpcProtocolError,
  RpcTimeoutError,
  scale,
  Schedule,
  setRows,
  silu,
  softmax,
  swiglu,
  type Tensor,
  topK,
  transpose,
} from "../mod.ts";
import { RpcBackend, RpcBuffer } from "../src/backend/rpc/backend.ts";
import { isViewOp, opName } from "../src/op.ts";
import {
  encodeReply,
  packHelloResponse,
  RPC_REQUEST_HEADER_SIZE,
  RpcCmd,
  type RpcGraph,
} from "../src/rpc/protocol.ts";
import { nodeOps, watchSentGraphs } from "./rpc_sent_graphs.ts";
import { CASES, Inputs, nmseOf, runGraph, type SuiteCase } from "./op_suite.ts";
import { freePort, GgmlRpcServer, llamaBinDir } from "./rpc_server.ts";
import { Rng } from "./reference.ts";
import { type BackendCase, f32Input, runCase } from "./rpc_cases.ts";

const bin = llamaBinDir();
const skip = "skip" in bin ? bin.skip : null;
if (skip) console.warn(`rpc_backend_test: skipped: ${skip}`);
const binDir = "dir" in bin ? bin.dir : "";
const opts = { sanitizeResources: false, sanitizeOps: false, ignore: skip !== null };

/**
 * ggml-cpu against Graft's CPU: at most the op suite's cross-backend bound for the case, or
 * ggml's own test-backend-ops bound (1e-7 NMSE) where ggml's math (its exp approximations, the
 * f16 gelu table) takes another route than Graft's kernels.
 */
const GGML_NMSE = 1e-7;

function tolerance(c: SuiteCase): number {
  return Math.max(c.gpuNmse, GGML_NMSE);
}

Deno.test({
  name: "rpc: the op suite's cases the RPC backend takes equal the CPU backend",
  ...opts,
  fn: async () => {
    await using server = await GgmlRpcServer.start(binDir, 1);
    using rpc = await RpcBackend.connect(server.endpoint, { timeoutMs: 30_000 });
    using cpu = new CpuBackend({ threads: 1 });
    const failures: string[] = [];
    const ran = new Set<string>();
    const refused: string[] = [];
    for (const c of CASES) {
      const probe = c.build(new Inputs(c.name)).out;
      const lacking = Graph.build(probe).nodes.filter((n) => !rpc.supportsOp(n));
      if (lacking.length > 0) {
        refused.push(`${c.name} (${opName(lacking[0]!.op)})`);
        continue;
      }
      const onCpu = new Inputs(c.name);
      const expected = await runGraph(cpu, onCpu, c.build(onCpu).out);
      const inputs = new Inputs(c.name);
      const actual = await runGraph(rpc, inputs, c.build(inputs).out);
      const error = nmseOf(actual, expected);
      ran.add(c.op);
      if (!(error <= tolerance(c))) {
        failures.push(
          `${c.name}: NMSE ${error} > ${tolerance(c)}; got ${actual.slice(0, 4).join(", ")}, ` +
            `want ${expected.slice(0, 4).join(", ")}`,
        );
      }
    }
    assert.deepEqual(failures, []);
    // Elementwise, unary and row ops went over the wire (the llama ops: the next test).
    for (const op of ["add", "mul", "div", "scale", "silu", "exp", "sumRows", "abs"]) {
      assert.ok(ran.has(op), `no case of ${op} ran over RPC (ran: ${[...ran].join(", ")})`);
    }
    console.log(`rpc op suite: ${ran.size} ops over RPC; kept local: ${refused.length} cases`);
  },
});

/** A one-graph case: tensors of its own context, their data, and the output. */
function typedInput(
  ctx: Context,
  rng: Rng,
  data: Map<Tensor, ArrayBufferView>,
  dtype: "f16" | "q8_0" | "q4_0",
  ne: number[],
): Tensor {
  const t = ctx.newTensor(dtype, ne as [number]);
  const values = rng.f32(t.nelements);
  data.set(t, dtype === "f16" ? Float16Array.from(values) : quantize(values, dtype));
  return t;
}

function positions(
  ctx: Context,
  data: Map<Tensor, ArrayBufferView>,
  values: number[],
): Tensor {
  const t = ctx.newTensor("i32", [values.length]);
  data.set(t, Int32Array.from(values));
  return t;
}

/** The ops of a llama graph (llama.cpp's and Graft's), each in a small graph of its own. */
const LLAMA_CASES: BackendCase[] = [
  ...(["f32", "f16", "q8_0", "q4_0"] as const).map((w): BackendCase => ({
    name: `mulMat ${w} weights [64, 7] x [64, 3] (rows not a multiple of 512: INIT_TENSOR)`,
    build: (ctx, rng) => {
      const data = new Map<Tensor, ArrayBufferView>();
      const a = w === "f32"
        ? f32Input(ctx, rng, data, [64, 7])
        : typedInput(ctx, rng, data, w, [64, 7]);
      return { data, out: mulMat(a, f32Input(ctx, rng, data, [64, 3])) };
    },
    nmse: w === "f32" ? 1e-12 : 1e-6,
  })),
  {
    name: "mulMat of permuted views (attention scores: k^T q per head)",
    build: (ctx, rng) => {
      const data = new Map<Tensor, ArrayBufferView>();
      const k = permute(f32Input(ctx, rng, data, [16, 4, 6]), [0, 2, 1, 3]); // [16, 6, 4]
      const q = permute(f32Input(ctx, rng, data, [16, 4, 3]), [0, 2, 1, 3]); // [16, 3, 4]
      return { data, out: mulMat(k, q) };
    },
    nmse: 1e-12,
  },
  {
    name: "rmsNorm then mul by a weight, add a residual",
    build: (ctx, rng) => {
      const data = new Map<Tensor, ArrayBufferView>();
      const x = f32Input(ctx, rng, data, [37, 4]);
      const w = f32Input(ctx, rng, data, [37]);
      return { data, out: add(mul(rmsNorm(x, 1e-5), w), x) };
    },
    nmse: 1e-12,
  },
  {
    name: "softmax with a mask and a scale",
    build: (ctx, rng) => {
      const data = new Map<Tensor, ArrayBufferView>();
      const x = f32Input(ctx, rng, data, [9, 4, 2]);
      const mask = f32Input(ctx, rng, data, [9, 4]);
      return { data, out: softmax(x, { mask, scale: 0.3 }) };
    },
    nmse: GGML_NMSE,
  },
  ...(["normal", "neox"] as const).map((mode): BackendCase => ({
    name: `rope ${mode} on a reshaped projection`,
    build: (ctx, rng) => {
      const data = new Map<Tensor, ArrayBufferView>();
      const x = reshape(f32Input(ctx, rng, data, [64, 3]), [16, 4, 3]);
      const pos = positions(ctx, data, [0, 5, 17]);
      return { data, out: rope(x, pos, { nDims: 16, mode, freqBase: 10000, freqScale: 1 }) };
    },
    nmse: GGML_NMSE,
  })),
  ...(["f32", "q8_0"] as const).map((w): BackendCase => ({
    name: `getRows from a ${w} table (token embeddings)`,
    build: (ctx, rng) => {
      const data = new Map<Tensor, ArrayBufferView>();
      const table = w === "f32"
        ? f32Input(ctx, rng, data, [32, 10])
        : typedInput(ctx, rng, data, w, [32, 10]);
      return { data, out: getRows(table, positions(ctx, data, [3, 0, 9, 3])) };
    },
    nmse: 0,
  })),
  {
    name: "setRows of f32 rows into an f16 cache, then a cont of its permuted view",
    build: (ctx, rng) => {
      const data = new Map<Tensor, ArrayBufferView>();
      const cache = typedInput(ctx, rng, data, "f16", [8, 6]);
      const rows = f32Input(ctx, rng, data, [8, 2]);
      const written = setRows(cache, rows, positions(ctx, data, [4, 1]));
      return { data, out: cont(transpose(written)) };
    },
    nmse: 0,
  },
  {
    name: "cpy f32 into f16, silu, scale with bias",
    build: (ctx, rng) => {
      const data = new Map<Tensor, ArrayBufferView>();
      const x = f32Input(ctx, rng, data, [33, 3]);
      const h = ctx.newTensor("f16", [33, 3]);
      return { data, out: cpy(scale(silu(x), 0.5, 0.25), h) };
    },
    nmse: 1e-6,
  },
  {
    name: "swiglu of gate and up projections",
    build: (ctx, rng) => {
      const data = new Map<Tensor, ArrayBufferView>();
      const x = f32Input(ctx, rng, data, [32, 3]);
      const g = mulMat(typedInput(ctx, rng, data, "q8_0", [32, 24]), x);
      const u = mulMat(typedInput(ctx, rng, data, "q8_0", [32, 24]), x);
      return { data, out: swiglu(g, u) };
    },
    nmse: 1e-6,
  },
  {
    name: "flashAttnExt with f16 k, v and an f16 mask (grouped-query heads)",
    build: (ctx, rng) => {
      const data = new Map<Tensor, ArrayBufferView>();
      const q = f32Input(ctx, rng, data, [16, 3, 4]);
      const k = typedInput(ctx, rng, data, "f16", [16, 7, 2]);
      const v = typedInput(ctx, rng, data, "f16", [16, 7, 2]);
      const mask = typedInput(ctx, rng, data, "f16", [7, 3]);
      return { data, out: flashAttnExt(q, k, v, { mask, scale: 0.25 }) };
    },
    nmse: 1e-6,
  },
];

Deno.test({
  name: "rpc: the llama graph's ops (quantized mulMat, rope, softmax, attention...) equal the CPU",
  ...opts,
  fn: async () => {
    await using server = await GgmlRpcServer.start(binDir, 1);
    using rpc = await RpcBackend.connect(server.endpoint, { timeoutMs: 30_000 });
    using cpu = new CpuBackend({ threads: 1 });
    const failures: string[] = [];
    for (const c of LLAMA_CASES) {
      const probe = c.build(new Context(), new Rng(1)).out;
      const lacking = Graph.build(probe).nodes.filter((n) => !rpc.supportsOp(n));
      if (lacking.length > 0) {
        failures.push(`${c.name}: RPC refuses ${lacking.map((n) => opName(n.op)).join(", ")}`);
        continue;
      }
      const expected = Float64Array.from(await runCase(cpu, c) as ArrayLike<number>);
      const actual = Float64Array.from(await runCase(rpc, c) as ArrayLike<number>);
      assert.ok(expected.some((v) => v !== 0), `${c.name}: a case must compute something`);
      const error = nmseOf(actual, expected);
      if (!(error <= c.nmse)) {
        failures.push(
          `${c.name}: NMSE ${error} > ${c.nmse}; got ${actual.slice(0, 4).join(", ")}, want ` +
            `${expected.slice(0, 4).join(", ")}`,
        );
      }
    }
    assert.deepEqual(failures, []);
  },
});

Deno.test({
  name: "rpc: mul(silu(gate), up) goes to the server as one GLU node, with the bits of the two",
  ...opts,
  fn: async () => {
    await using server = await GgmlRpcServer.start(binDir, 1);
    using rpc = await RpcBackend.connect(server.endpoint);
    // The graphs the connection sends (GRAPH_COMPUTE's payload), decoded.
    const sent: RpcGraph[] = [];
    using _watch = watchSentGraphs((g) => sent.push(g));
    const run = async (keepSilu: boolean): Promise<{ out: number[]; ops: string[] }> => {
      const ctx = new Context();
      const gate = ctx.newTensor("f32", [37, 3], "gate");
      const up = ctx.newTensor("f32", [37, 3], "up");
      const act = silu(gate);
      const out = mul(act, up);
      // The silu as an output too: then it must be computed, and nothing is fused.
      const graph = Graph.build(...(keepSilu ? [out, act] : [out]));
      using _buffer = allocTensors(rpc, [gate, up, ...graph.nodes]);
      const r = new Rng(3);
      rpc.setTensor(gate, Float32Array.from({ length: 111 }, () => r.uniform(-12, 12)));
      rpc.setTensor(up, Float32Array.from({ length: 111 }, () => r.uniform()));
      rpc.graphCompute(graph);
      const values = [...(await rpc.getTensorAsync(out) as Float32Array)];
      return { out: values, ops: nodeOps(sent.at(-1)!) };
    };
    const fused = await run(false);
    const apart = await run(true);
    assert.deepEqual(fused.ops, ["GLU"]);
    assert.deepEqual(apart.ops, ["UNARY", "MUL"]);
    assert.ok(fused.out.some((v) => v !== 0));
    assert.deepEqual(fused.out, apart.out, "ggml's swiglu computes silu then the product");
  },
});

Deno.test({
  name: "rpc: the same graph again is GRAPH_RECOMPUTE, with new inputs; buffers clear and memset",
  ...opts,
  fn: async () => {
    await using server = await GgmlRpcServer.start(binDir, 1);
    using rpc = await RpcBackend.connect(server.endpoint);
    const ctx = new Context();
    const w = ctx.newTensor("f32", [5, 3], "w");
    const x = ctx.newTensor("f32", [5, 2], "x");
    const y = add(mulMat(w, x), ctx.newTensor("f32", [3, 2], "bias"));
    const graph = Graph.build(y);
    using buffer = allocTensors(rpc, [...ctx.tensors, ...graph.nodes]);
    const wv = new Float32Array(15).map((_, i) => i - 7);
    rpc.setTensor(w, wv);
    rpc.memsetTensor(graph.leafs.find((t) => t.name === "bias")!, 0);
    const want = (xs: Float32Array): number[] =>
      [0, 1].flatMap((n) =>
        [0, 1, 2].map((m) =>
          [0, 1, 2, 3, 4].reduce((s, k) => s + wv[m * 5 + k]! * xs[n * 5 + k]!, 0)
        )
      );
    for (let step = 0; step < 3; step++) {
      const xs = new Float32Array(10).map((_, i) => (i + 1) * (step + 1) * 0.5);
      rpc.setTensor(x, xs);
      rpc.graphCompute(graph);
      assert.deepEqual([...await rpc.getTensorAsync(y)], want(xs), `step ${step}`);
    }
    assert.deepEqual(rpc.stats.graphComputes, 1);
    assert.deepEqual(rpc.stats.graphRecomputes, 2);
    (buffer as RpcBuffer).clear(0);
    assert.deepEqual([...await rpc.getTensorAsync(w)], new Array(15).fill(0));
    assert.equal(await rpc.getAllocSize(w), w.nbytes);
    const memory = await rpc.getDeviceMemory();
    assert.ok(memory.total > 0 && memory.free <= memory.total);
    await rpc.synchronize();
  },
});

Deno.test({
  name: "rpc: writes that need no reply wait for the compute and go out with it in one write, " +
    "a read queued behind the compute too; alone, they go out on the next turn",
  ...opts,
  fn: async () => {
    await using server = await GgmlRpcServer.start(binDir, 1);
    using rpc = await RpcBackend.connect(server.endpoint);
    const ctx = new Context();
    const a = ctx.newTensor("f32", [4], "a");
    const b = ctx.newTensor("f32", [4], "b");
    const graph = Graph.build(add(a, b));
    const y = graph.nodes[0]!;
    using _buffer = allocTensors(rpc, [a, b, y]);
    await rpc.synchronize();
    // Count the socket writes: the connection writes only through its TcpConn's write, whose
    // class Deno does not export (taken from a throwaway loopback connection).
    const proto = await tcpConnPrototype();
    const write = proto.write;
    let writes = 0;
    proto.write = function (this: Deno.Conn, bytes: Uint8Array): Promise<number> {
      writes++;
      return write.call(this, bytes);
    };
    try {
      for (let step = 1; step <= 3; step++) {
        writes = 0;
        rpc.setTensor(a, new Float32Array([1, 2, 3, 4]).map((v) => v * step));
        rpc.setTensor(b, new Float32Array([10, 20, 30, 40]));
        rpc.graphCompute(graph);
        await rpc.synchronize();
        assert.equal(writes, 1, `step ${step}: two SET_TENSOR and the compute in one write`);
        assert.deepEqual(
          [...await rpc.getTensorAsync(y)],
          [11, 22, 33, 44].map((v, i) => v + (step - 1) * (i + 1)),
        );
      }
      // A read queued straight after the compute: the compute waits for it, one write for all.
      writes = 0;
      rpc.setTensor(a, new Float32Array([2, 4, 6, 8]));
      rpc.graphCompute(graph);
      const read = rpc.getTensorAsync(y);
      assert.deepEqual([...await read], [12, 24, 36, 48]);
      assert.equal(writes, 1, "SET_TENSOR, the compute and GET_TENSOR in one write");
      // A write with nothing after it still reaches the server, on the next turn of the loop:
      // the server applies it before the read that follows.
      writes = 0;
      rpc.setTensor(a, new Float32Array([5, 6, 7, 8]));
      await new Promise((resolve) => setTimeout(resolve, 20));
      assert.equal(writes, 1, "the held SET_TENSOR went out by itself");
      assert.deepEqual([...await rpc.getTensorAsync(a)], [5, 6, 7, 8]);
    } finally {
      proto.write = write;
    }
  },
});

Deno.test({
  name: "rpc: data above 10 MiB goes by SET_TENSOR_HASH; a server with a cache skips resending it",
  ...opts,
  fn: async () => {
    const cacheDir = await Deno.makeTempDir({ prefix: "graft-rpc-cache-" });
    try {
      // -c caches under $LLAMA_CACHE/rpc: a temporary directory, not the user's cache.
      const port = freePort();
      const child = new Deno.Command(`${binDir}/ggml-rpc-server`, {
        args: ["-H", "127.0.0.1", "-p", String(port), "-c"],
        env: { LD_LIBRARY_PATH: binDir, LLAMA_CACHE: cacheDir },
        stdout: "null",
        stderr: "null",
      }).spawn();
      try {
        await waitListening(port);
        const n = 3 * 1024 * 1024; // 12 MiB of f32
        const values = Float32Array.from(new Rng(7).f32(n));
        for (const expectHit of [false, true]) {
          using rpc = await RpcBackend.connect(`127.0.0.1:${port}`);
          const t = new Context().newTensor("f32", [n]);
          using _b = allocTensors(rpc, [t]);
          rpc.setTensor(t, values);
          const back = await rpc.getTensorAsync(t, 4 * (n - 4), 16);
          assert.deepEqual([...back], [...values.subarray(n - 4)]);
          assert.deepEqual(rpc.stats.hashHits, expectHit ? 1 : 0);
          assert.deepEqual(rpc.stats.hashMisses, expectHit ? 0 : 1);
        }
      } finally {
        child.kill("SIGKILL");
        await child.status;
      }
    } finally {
      await Deno.remove(cacheDir, { recursive: true });
    }
  },
});

Deno.test({
  name: "rpc: copies within the server (COPY_TENSOR) and across to the CPU and back",
  ...opts,
  fn: async () => {
    await using server = await GgmlRpcServer.start(binDir, 1);
    using rpc = await RpcBackend.connect(server.endpoint);
    using cpu = new CpuBackend({ threads: 1 });
    const ctx = new Context();
    const [a, b] = [ctx.newTensor("f16", [7, 3]), ctx.newTensor("f16", [7, 3])];
    const c = ctx.newTensor("f16", [7, 3]);
    using _r = allocTensors(rpc, [a, b]);
    using _c = allocTensors(cpu, [c]);
    const values = new Float16Array(21).map((_, i) => i * 0.25 - 2);
    rpc.setTensor(a, values);
    await rpc.cpyTensorFrom(a, b);
    await rpc.cpyTensorTo(b, c);
    assert.deepEqual(cpu.getTensor(c), values);
    cpu.setTensor(c, values.map((v) => v * 2));
    await rpc.cpyTensorFrom(c, a);
    assert.deepEqual(await rpc.getTensorAsync(a), values.map((v) => v * 2));
  },
});

Deno.test({
  name:
    "rpc: getTensorIntoAsync reads into the caller's array, again and again; a wrong size is refused",
  ...opts,
  fn: async () => {
    await using server = await GgmlRpcServer.start(binDir, 1);
    using rpc = await RpcBackend.connect(server.endpoint);
    const ctx = new Context();
    const a = ctx.newTensor("f32", [5, 3]);
    using _r = allocTensors(rpc, [a]);
    const into = new Float32Array(15);
    for (let round = 0; round < 3; round++) {
      const values = new Float32Array(15).map((_, i) => i * 0.5 - round);
      rpc.setTensor(a, values);
      await rpc.getTensorIntoAsync(a, into);
      assert.deepEqual(into, values);
    }
    await assert.rejects(() => rpc.getTensorIntoAsync(a, new Float32Array(14)), ArgumentError);
    // The connection still works after the refusal (nothing was sent).
    assert.deepEqual(await rpc.getTensorAsync(a), into);
  },
});

Deno.test({
  name: "rpc: a schedule keeps an op the server lacks (topK) on the CPU, the rest on the server",
  ...opts,
  fn: async () => {
    await using server = await GgmlRpcServer.start(binDir, 1);
    using rpc = await RpcBackend.connect(server.endpoint);
    using cpu = new CpuBackend({ threads: 1 });
    const build = () => {
      const ctx = new Context();
      const x = ctx.newTensor("f32", [37], "x");
      const table = ctx.newTensor("f32", [16, 37], "table");
      const bias = ctx.newTensor("f32", [16, 5], "bias");
      const out = add(getRows(table, topK(scale(x, 1.5), 5)), bias);
      return { ctx, x, table, bias, out };
    };
    const rng = new Rng(3);
    const xs = rng.f32(37);
    const tv = rng.f32(16 * 37);
    const bv = rng.f32(16 * 5);
    const local = build();
    const localGraph = Graph.build(local.out);
    using _l = allocTensors(cpu, [...local.ctx.tensors, ...localGraph.nodes]);
    cpu.setTensor(local.x, xs);
    cpu.setTensor(local.table, tv);
    cpu.setTensor(local.bias, bv);
    cpu.graphCompute(localGraph);
    const c = build();
    using _i = allocTensors(rpc, c.ctx.tensors);
    rpc.setTensor(c.x, xs);
    rpc.setTensor(c.table, tv);
    rpc.setTensor(c.bias, bv);
    using schedule = Schedule.create(Graph.build(c.out), { backends: [rpc, cpu] });
    assert.deepEqual(schedule.splits.map((s) => s.backend), [rpc, cpu, rpc]);
    const topKNode = schedule.graph.nodes.find((n) => n.op === Op.topK)!;
    assert.equal(schedule.assignment.get(topKNode)!.backend, cpu);
    for (let step = 0; step < 2; step++) {
      await schedule.compute();
      assert.deepEqual(await schedule.getOutput(c.out), cpu.getTensor(local.out));
    }
    // Two RPC splits alternate on one connection: each compute resends its graph (the server
    // keeps only the last one), as llama.cpp's client does.
    assert.equal(rpc.stats.graphComputes, 4);
    assert.ok(schedule.graph.nodes.filter((n) => !isViewOp(n.op)).length > 3);
  },
});

Deno.test({
  name: "rpc faults: a refused connection is an RpcConnectionError",
  ...opts,
  ignore: false,
  fn: async () => {
    const port = freePort();
    await assert.rejects(() => RpcBackend.connect(`127.0.0.1:${port}`), RpcConnectionError);
    await assert.rejects(() => RpcBackend.connect("no-port"), RpcConnectionError);
  },
});

Deno.test({
  name: "rpc faults: a server killed mid-compute fails the pending read and every later command",
  ...opts,
  fn: async () => {
    const server = await GgmlRpcServer.start(binDir, 1);
    using rpc = await RpcBackend.connect(server.endpoint);
    const ctx = new Context();
    const a = ctx.newTensor("f32", [1024, 1024]);
    let out = mulMat(a, a);
    for (let i = 0; i < 6; i++) out = mulMat(a, out);
    const graph = Graph.build(out);
    using _b = allocTensors(rpc, [a, ...graph.nodes]);
    rpc.setTensor(a, new Float32Array(1024 * 1024).fill(1e-3));
    await rpc.synchronize();
    rpc.graphCompute(graph);
    const read = assert.rejects(rpc.getTensorAsync(out, 0, 16), RpcConnectionError);
    await new Promise((resolve) => setTimeout(resolve, 50));
    await server.stop();
    await read;
    await assert.rejects(() => rpc.synchronize(), RpcConnectionError);
    await assert.rejects(() => rpc.getTensorAsync(a, 0, 4), RpcConnectionError);
  },
});

Deno.test({
  name: "rpc faults: a stalled server times out (RpcTimeoutError) instead of hanging",
  ...opts,
  fn: async () => {
    await using server = await GgmlRpcServer.start(binDir, 1);
    using rpc = await RpcBackend.connect(server.endpoint, { timeoutMs: 400 });
    const t = new Context().newTensor("f32", [8]);
    using _b = allocTensors(rpc, [t]);
    await rpc.synchronize();
    server.pause();
    await assert.rejects(() => rpc.getTensorAsync(t), RpcTimeoutError);
    await assert.rejects(() => rpc.synchronize(), RpcTimeoutError);
  },
});

/**
 * A listener that answers HELLO as `hello` says, then each later request with `reply(cmd)`:
 * the framing of the protocol with wrong contents, which the real server never sends.
 */
async function fakeServer(
  hello: Uint8Array | null,
  reply: (cmd: number) => Uint8Array | null | Promise<Uint8Array | null>,
  body: (endpoint: string) => Promise<void>,
): Promise<void> {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const endpoint = `127.0.0.1:${(listener.addr as Deno.NetAddr).port}`;
  const serving = (async () => {
    const conn = await listener.accept();
    try {
      const header = new Uint8Array(RPC_REQUEST_HEADER_SIZE);
      for (let first = true;; first = false) {
        if (!await readFull(conn, header)) return;
        const size = Number(new DataView(header.buffer).getBigUint64(1, true));
        if (!await readFull(conn, new Uint8Array(size))) return;
        const answer = first ? hello : await reply(header[0]!);
        if (answer === null) continue; // stall: say nothing
        await conn.write(answer);
      }
    } catch {
      // the client closed it
    } finally {
      try {
        conn.close();
      } catch {
        // already closed
      }
    }
  })();
  try {
    await body(endpoint);
  } finally {
    listener.close();
    await serving;
  }
}

async function readFull(conn: Deno.Conn, into: Uint8Array): Promise<boolean> {
  for (let at = 0; at < into.byteLength;) {
    const n = await conn.read(into.subarray(at));
    if (n === null) return false;
    at += n;
  }
  return true;
}

const goodHello = encodeReply(packHelloResponse());

Deno.test({
  name: "rpc faults: malformed replies (wrong sizes, another version, silence) give typed errors",
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    // DEVICE_COUNT answered with 8 bytes instead of 4.
    await fakeServer(goodHello, () => encodeReply(new Uint8Array(8)), async (endpoint) => {
      await assert.rejects(() => RpcBackend.connect(endpoint), RpcProtocolError);
    });
    // A reply header claiming 2^64-1 bytes: refused from the header, nothing allocated.
    const huge = new Uint8Array(8).fill(0xff);
    await fakeServer(goodHello, () => huge, async (endpoint) => {
      await assert.rejects(() => RpcBackend.connect(endpoint), RpcProtocolError);
    });
    // A HELLO of 3 bytes, and a HELLO from protocol 6.
    await fakeServer(encodeReply(new Uint8Array(3)), () => null, async (endpoint) => {
      await assert.rejects(() => RpcBackend.connect(endpoint), RpcProtocolError);
    });
    const old = encodeReply(packHelloResponse({ major: 6 }));
    await fakeServer(old, () => null, async (endpoint) => {
      await assert.rejects(
        () => RpcBackend.connect(endpoint),
        (e: Error) => e instanceof RpcConnectionError && /protocol 6\.0\.0/.test(e.message),
      );
    });
    // A server that accepts and never answers HELLO.
    await fakeServer(null, () => null, async (endpoint) => {
      await assert.rejects(
        () => RpcBackend.connect(endpoint, { timeoutMs: 300 }),
        RpcTimeoutError,
      );
    });
    // Answers the handshake, then closes on ALLOC_BUFFER's reply (a short reply).
    let answered = 0;
    const replies = (cmd: number): Uint8Array | null => {
      answered++;
      if (cmd === RpcCmd.DEVICE_COUNT) return encodeReply(new Uint8Array([1, 0, 0, 0]));
      if (cmd === RpcCmd.GET_ALIGNMENT) {
        return encodeReply(new Uint8Array([32, 0, 0, 0, 0, 0, 0, 0]));
      }
      if (cmd === RpcCmd.GET_MAX_SIZE) return encodeReply(new Uint8Array([0, 0, 1, 0, 0, 0, 0, 0]));
      return new Uint8Array([16, 0, 0, 0, 0, 0, 0, 0, 1, 2]); // 16 bytes promised, 2 sent
    };
    await fakeServer(goodHello, replies, async (endpoint) => {
      const rpc = await RpcBackend.connect(endpoint, { timeoutMs: 500 });
      try {
        rpc.allocBuffer(64);
        // The listener then waits for more bytes that never come: a time-out, not a hang.
        await assert.rejects(() => rpc.synchronize(), RpcTimeoutError);
      } finally {
        rpc.dispose();
      }
    });
    assert.ok(answered >= 4);
    // ALLOC_BUFFER answered with a buffer smaller than asked: the buffer is refused, typed.
    const small = (cmd: number): Uint8Array | null => {
      if (cmd === RpcCmd.ALLOC_BUFFER) {
        const reply = new Uint8Array(16);
        new DataView(reply.buffer).setBigUint64(0, 0x1000n, true);
        new DataView(reply.buffer).setBigUint64(8, 32n, true); // 32 bytes for 64 asked
        return encodeReply(reply);
      }
      return replies(cmd);
    };
    await fakeServer(goodHello, small, async (endpoint) => {
      using rpc = await RpcBackend.connect(endpoint, { timeoutMs: 2000 });
      const t = new Context().newTensor("f32", [16]);
      using _b = allocTensors(rpc, [t]);
      await assert.rejects(() => rpc.getTensorAsync(t), RpcProtocolError);
    });
  },
});

Deno.test({
  name: "rpc faults: the time-out is per command: slow replies that each come in time pass, " +
    "however long they take together",
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    let delayMs = 0;
    const replies = async (cmd: number): Promise<Uint8Array | null> => {
      await new Promise((resolve) => setTimeout(resolve, delayMs));
      if (cmd === RpcCmd.DEVICE_COUNT) return encodeReply(new Uint8Array([1, 0, 0, 0]));
      if (cmd === RpcCmd.GET_ALIGNMENT) {
        return encodeReply(new Uint8Array([32, 0, 0, 0, 0, 0, 0, 0]));
      }
      if (cmd === RpcCmd.GET_MAX_SIZE) return encodeReply(new Uint8Array([0, 0, 1, 0, 0, 0, 0, 0]));
      if (cmd === RpcCmd.GET_DEVICE_MEMORY) return encodeReply(new Uint8Array(16).fill(1));
      return null;
    };
    await fakeServer(goodHello, replies, async (endpoint) => {
      using rpc = await RpcBackend.connect(endpoint, { timeoutMs: 300 });
      // Five commands of 120 ms each: 600 ms in all, each well inside its 300.
      delayMs = 120;
      const started = performance.now();
      for (let i = 0; i < 5; i++) await rpc.getDeviceMemory();
      assert.ok(performance.now() - started >= 500);
      // One that takes longer than its 300 ms fails the connection.
      delayMs = 700;
      await assert.rejects(() => rpc.getDeviceMemory(), RpcTimeoutError);
      await assert.rejects(() => rpc.synchronize(), RpcTimeoutError);
    });
  },
});

/** The prototype of Deno's TCP connections (the class is not exported). */
async function tcpConnPrototype(): Promise<{ write(bytes: Uint8Array): Promise<number> }> {
  using listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const accepting = listener.accept();
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: listener.addr.port });
  (await accepting).close();
  conn.close();
  return Object.getPrototypeOf(conn);
}

async function waitListening(port: number): Promise<void> {
  for (let attempt = 0; attempt < 200; attempt++) {
    try {
      (await Deno.connect({ hostname: "127.0.0.1", port })).close();
      return;
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  }
  throw new Error(`nothing listens on ${port}`);
}
