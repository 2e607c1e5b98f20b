/**
 * The ggml ops Graft's RPC server computes beyond a llama graph's (ACC, SET, COUNT_EQUAL,
 * IM2COL, CONV_2D, CONV_2D_DW, CONV_TRANSPOSE_1D/2D, POOL_1D/2D, UPSCALE, circular PAD, TOP_K,
 * ADD_ID, and ROPE's YaRN, frequency factors and f16), each checked two ways on odd shapes:
 * - through Graft's RpcBackend (the ops its client sends): the same graph on Graft's CPU
 *   backend, on Graft's server and on llama.cpp's `ggml-rpc-server`, all three equal;
 * - as hand-made wire graphs, ggml's op_params as ggml.c's builders store them (the ops only
 *   llama.cpp's client sends, and forms Graft's client does not: f16 kernels, in-place ACC, 1D
 *   im2col as ggml_conv_1d sends it): Graft's server against `ggml-rpc-server`, the independent
 *   check of the op_params mapping.
 * And hostile params for the new ops close that connection only, the op named in the log.
 * The ggml-rpc-server parts skip, visibly, without the pinned llama.cpp build.
 */

import assert from "node:assert/strict";
import {
  acc,
  type Backend,
  Context,
  convTranspose1d,
  convTranspose2d,
  countEqual,
  CpuBackend,
  Graph,
  im2col,
  interpolate,
  padCircular,
  pool1d,
  pool2d,
  rope,
  set,
  type Tensor,
} from "../mod.ts";
import { RpcBackend } from "../src/backend/rpc/backend.ts";
import { opName } from "../src/op.ts";
import { GgmlOp, type GgmlOpName } from "../src/rpc/ggml_ops.ts";
import {
  emptyRpcTensor,
  packAllocBufferRequest,
  packGetTensorRequest,
  packGraph,
  packHelloRequest,
  packSetTensorRequest,
  packU64,
  RpcCmd,
  type RpcTensor,
} from "../src/rpc/protocol.ts";
import { RpcServer } from "../src/rpc/server/server.ts";
import { nmseOf } from "./op_suite.ts";
import { Rng } from "./reference.ts";
import { GgmlRpcServer, llamaBinDir } from "./rpc_server.ts";
import { WireClient } from "./rpc_wire_client.ts";
import { type BackendCase, f32Input, runCase } from "./rpc_cases.ts";

const bin = llamaBinDir();
const ggmlSkip = "skip" in bin ? bin.skip : null;
if (ggmlSkip) console.warn(`rpc_server_ops_test: ggml-rpc-server comparisons skipped: ${ggmlSkip}`);
const binDir = "dir" in bin ? bin.dir : "";
const opts = { sanitizeResources: false, sanitizeOps: false };

// ---------------------------------------------------------------------------------------------
// Through Graft's RpcBackend.

/** An i32 input of shape `ne`, values in [0, n). */
function i32In(
  ctx: Context,
  rng: Rng,
  data: Map<Tensor, ArrayBufferView>,
  ne: number[],
  n: number,
): Tensor {
  const t = ctx.newTensor("i32", ne as [number]);
  data.set(t, Int32Array.from({ length: t.nelements }, () => rng.int(n)));
  return t;
}

const CLIENT_CASES: BackendCase[] = [
  ...(["f32", "f16"] as const).map((dtype): BackendCase => ({
    name: `rope neox ${dtype} [64, 3, 5, 2] with YaRN and frequency factors`,
    build: (ctx, rng) => {
      const data = new Map<Tensor, ArrayBufferView>();
      const x = ctx.newTensor(dtype, [64, 3, 5, 2]);
      const values = rng.f32(x.nelements);
      data.set(x, dtype === "f32" ? values : new Float16Array(values));
      const pos = ctx.newTensor("i32", [5]);
      data.set(pos, Int32Array.from([0, 4095, 17, 9000, 1]));
      const freqFactors = f32Input(ctx, rng, data, [32]);
      data.set(freqFactors, Float32Array.from({ length: 32 }, (_, k) => 1 + k / 8));
      const out = rope(x, pos, {
        nDims: 64,
        mode: "neox",
        freqBase: 1e6,
        freqScale: 0.25,
        extFactor: 1,
        attnFactor: 0.9,
        betaFast: 32,
        betaSlow: 1,
        nCtxOrig: 4096,
        freqFactors,
      });
      return { data, out };
    },
    nmse: 0,
  })),
  {
    name: "countEqual of i32 [37, 3] (i64 count)",
    build: (ctx, rng) => {
      const data = new Map<Tensor, ArrayBufferView>();
      return {
        data,
        out: countEqual(i32In(ctx, rng, data, [37, 3], 3), i32In(ctx, rng, data, [37, 3], 3)),
      };
    },
    nmse: 0,
  },
  {
    name: "acc of [4, 3, 2] into [13, 5, 2] at row 1, column 2",
    build: (ctx, rng) => {
      const data = new Map<Tensor, ArrayBufferView>();
      const a = f32Input(ctx, rng, data, [13, 5, 2]);
      return { data, out: acc(a, f32Input(ctx, rng, data, [4, 3, 2]), { offset: (13 + 2) * 4 }) };
    },
    nmse: 0,
  },
  {
    name: "set of [3, 2] into [11, 6] with rows 2 apart",
    build: (ctx, rng) => {
      const data = new Map<Tensor, ArrayBufferView>();
      const a = f32Input(ctx, rng, data, [11, 6]);
      return { data, out: set(a, f32Input(ctx, rng, data, [3, 2]), { nb1: 88, offset: 20 }) };
    },
    nmse: 0,
  },
  {
    name: "set of i32 [5] into i32 [7, 3]",
    build: (ctx, rng) => {
      const data = new Map<Tensor, ArrayBufferView>();
      const a = i32In(ctx, rng, data, [7, 3], 100);
      return { data, out: set(a, i32In(ctx, rng, data, [5], 100), { offset: 36 }) };
    },
    nmse: 0,
  },
  ...(["f32", "f16"] as const).map((dtype): BackendCase => ({
    name: `im2col 2D into ${dtype}: stride [2, 1], padding [1, 0], dilation [1, 2]`,
    build: (ctx, rng) => {
      const data = new Map<Tensor, ArrayBufferView>();
      const kernel = f32Input(ctx, rng, data, [3, 2, 3, 4]);
      const image = f32Input(ctx, rng, data, [9, 7, 3, 2]);
      return {
        data,
        out: im2col(kernel, image, { stride: [2, 1], padding: [1, 0], dilation: [1, 2], dtype }),
      };
    },
    nmse: 0,
  })),
  {
    name: "im2col 1D: stride 2, padding 1, dilation 2",
    build: (ctx, rng) => {
      const data = new Map<Tensor, ArrayBufferView>();
      const kernel = f32Input(ctx, rng, data, [3, 5, 2]);
      const image = f32Input(ctx, rng, data, [17, 5, 2]);
      return {
        data,
        out: im2col(kernel, image, { is2D: false, stride: 2, padding: 1, dilation: 2 }),
      };
    },
    nmse: 0,
  },
  ...(["max", "avg"] as const).flatMap((op): BackendCase[] => [
    {
      name: `pool1d ${op}, kernel 3, stride 2, padding 1 over [17, 3, 2]`,
      build: (ctx, rng) => {
        const data = new Map<Tensor, ArrayBufferView>();
        return {
          data,
          out: pool1d(f32Input(ctx, rng, data, [17, 3, 2]), op, 3, { stride: 2, padding: 1 }),
        };
      },
      nmse: 1e-14,
    },
    {
      name: `pool2d ${op}, kernel [3, 2], stride [2, 3], padding [1, 1] over [11, 9, 3]`,
      build: (ctx, rng) => {
        const data = new Map<Tensor, ArrayBufferView>();
        const a = f32Input(ctx, rng, data, [11, 9, 3]);
        return { data, out: pool2d(a, op, [3, 2], { stride: [2, 3], padding: [1, 1] }) };
      },
      nmse: 1e-14,
    },
  ]),
  ...([
    ["nearest", false],
    ["bilinear", false],
    ["bilinear", true],
    ["bicubic", false],
    ["bicubic", true],
  ] as const).map(([mode, alignCorners]): BackendCase => ({
    name: `interpolate ${mode}${
      alignCorners ? " (align corners)" : ""
    } [7, 5, 3, 2] -> [13, 4, 3, 2]`,
    build: (ctx, rng) => {
      const data = new Map<Tensor, ArrayBufferView>();
      const a = f32Input(ctx, rng, data, [7, 5, 3, 2]);
      return { data, out: interpolate(a, [13, 4, 3, 2], { mode, alignCorners }) };
    },
    nmse: 1e-12,
  })),
  {
    name: "convTranspose1d, kernel [3, 4, 5], input [9, 5], stride 2",
    build: (ctx, rng) => {
      const data = new Map<Tensor, ArrayBufferView>();
      const kernel = f32Input(ctx, rng, data, [3, 4, 5]);
      return { data, out: convTranspose1d(kernel, f32Input(ctx, rng, data, [9, 5]), 2) };
    },
    nmse: 1e-12,
  },
  {
    name: "convTranspose2d, kernel [3, 2, 4, 5], input [7, 6, 5, 2], stride 2",
    build: (ctx, rng) => {
      const data = new Map<Tensor, ArrayBufferView>();
      const kernel = f32Input(ctx, rng, data, [3, 2, 4, 5]);
      return { data, out: convTranspose2d(kernel, f32Input(ctx, rng, data, [7, 6, 5, 2]), 2) };
    },
    nmse: 1e-12,
  },
  {
    name: "padCircular of [5, 4, 3] by [2, 1, 0, 0] before and [3, 0, 1, 0] after",
    build: (ctx, rng) => {
      const data = new Map<Tensor, ArrayBufferView>();
      const a = f32Input(ctx, rng, data, [5, 4, 3]);
      return { data, out: padCircular(a, { left: [2, 1, 0, 0], right: [3, 0, 1, 0] }) };
    },
    nmse: 0,
  },
];

/** `c`'s output on `backend`, as bytes. */
async function runBytes(backend: Backend, c: BackendCase): Promise<Uint8Array> {
  const view = await runCase(backend, c) as ArrayBufferView;
  return new Uint8Array(view.buffer, view.byteOffset, view.byteLength).slice();
}

/** Bytes as numbers of the wire dtype, for NMSE. */
function values(bytes: Uint8Array, dtype: string): Float64Array {
  const b = bytes.slice().buffer;
  if (dtype === "f16") return Float64Array.from(new Float16Array(b));
  if (dtype === "i32") return Float64Array.from(new Int32Array(b));
  return Float64Array.from(new Float32Array(b));
}

function compare(
  name: string,
  got: Uint8Array,
  want: Uint8Array,
  dtype: string,
  nmse: number,
): string[] {
  if (got.length !== want.length) return [`${name}: ${got.length} bytes, want ${want.length}`];
  if (nmse === 0 || dtype === "i64") {
    const at = got.findIndex((v, i) => v !== want[i]);
    return at < 0 ? [] : [`${name}: byte ${at} differs (${got[at]} vs ${want[at]})`];
  }
  const error = nmseOf(values(got, dtype), values(want, dtype));
  return error <= nmse ? [] : [`${name}: NMSE ${error} > ${nmse}`];
}

Deno.test({
  name: "rpc server ops: Graft's client sends them; CPU, Graft's server and ggml-rpc-server agree",
  ...opts,
  async fn(): Promise<void> {
    const lines: string[] = [];
    await using graft = RpcServer.listen({ port: 0, threads: 1, log: (l) => lines.push(l) });
    await using ggml = ggmlSkip ? null : await GgmlRpcServer.start(binDir, 1);
    using cpu = new CpuBackend({ threads: 1 });
    using onGraft = await RpcBackend.connect(`127.0.0.1:${graft.port}`, { timeoutMs: 30_000 });
    using onGgml = ggml ? await RpcBackend.connect(ggml.endpoint, { timeoutMs: 30_000 }) : null;
    const failures: string[] = [];
    for (const c of CLIENT_CASES) {
      const probe = c.build(new Context(), new Rng(1)).out;
      const lacking = Graph.build(probe).nodes.filter((n) => !onGraft.supportsOp(n));
      if (lacking.length > 0) {
        failures.push(`${c.name}: the client keeps ${lacking.map((n) => opName(n.op))} local`);
        continue;
      }
      const want = await runBytes(cpu, c);
      assert.ok(want.some((v) => v !== 0), `${c.name}: a case must compute something`);
      failures.push(
        ...compare(
          `${c.name} on Graft's server`,
          await runBytes(onGraft, c),
          want,
          probe.dtype,
          c.nmse,
        ),
      );
      if (onGgml) {
        failures.push(
          ...compare(
            `${c.name} on ggml-rpc-server`,
            await runBytes(onGgml, c),
            want,
            probe.dtype,
            c.nmse,
          ),
        );
      }
    }
    assert.deepEqual(failures, []);
    assert.deepEqual(lines.filter((l) => l.includes("refused") || l.includes("failed")), []);
  },
});

// ---------------------------------------------------------------------------------------------
// Hand-made wire graphs.

type WireType = "f32" | "f16" | "i32" | "i64";
const TYPE_ID: Record<WireType, number> = { f32: 0, f16: 1, i32: 26, i64: 27 };
const TYPE_SIZE: Record<WireType, number> = { f32: 4, f16: 2, i32: 4, i64: 8 };

/** One tensor of a wire graph: an input with data, or a node of a ggml op over named sources. */
interface WireSpec {
  name: string;
  type: WireType;
  ne: [number, number, number, number];
  /** Byte strides (default contiguous). */
  nb?: [number, number, number, number];
  op?: GgmlOpName;
  src?: string[];
  params?: number[];
  data?: ArrayBufferView;
  /** Lies on this tensor's memory (an in-place node). */
  on?: string;
}

interface WireCase {
  name: string;
  specs: WireSpec[];
  /** NMSE bound of the last spec (the output) between the servers (0: bitwise). */
  nmse: number;
  /** Compare each row's values as a set (TOP_K: ggml leaves their order open). */
  unordered?: boolean;
}

/** Runs a wire graph (every spec with an op a node, in order) and reads the last spec back. */
async function runWire(endpoint: string, specs: WireSpec[]): Promise<Uint8Array> {
  const client = await WireClient.connect(endpoint);
  try {
    await client.call(RpcCmd.HELLO, packHelloRequest());
    const align = 256;
    const offsets = new Map<string, number>();
    let size = 0;
    const sizes = specs.map((s) => {
      const nb = s.nb ?? contiguous(s.type, s.ne);
      return s.ne.reduce((sum, n, d) => sum + (n - 1) * nb[d]!, 0) + TYPE_SIZE[s.type];
    });
    specs.forEach((s, i) => {
      if (s.on) {
        offsets.set(s.name, offsets.get(s.on)!);
        return;
      }
      offsets.set(s.name, size);
      size = Math.ceil((size + sizes[i]!) / align) * align;
    });
    const alloc = await client.call(
      RpcCmd.ALLOC_BUFFER,
      packAllocBufferRequest({ device: 0, size: BigInt(size) }),
    );
    const buffer = new DataView(alloc.buffer).getBigUint64(0, true);
    const baseBytes = await client.call(RpcCmd.BUFFER_GET_BASE, packU64("remote_ptr", buffer));
    const base = new DataView(baseBytes.buffer).getBigUint64(0, true);
    const ids = new Map(specs.map((s, i) => [s.name, BigInt(i + 1)]));
    const tensors = specs.map((s): RpcTensor => {
      const t = emptyRpcTensor();
      t.id = ids.get(s.name)!;
      t.type = TYPE_ID[s.type];
      t.ne = s.ne;
      t.nb = s.nb ?? contiguous(s.type, s.ne);
      t.buffer = buffer;
      t.data = base + BigInt(offsets.get(s.name)!);
      t.name = s.name;
      if (s.op) {
        t.op = GgmlOp[s.op];
        t.flags = 16; // GGML_TENSOR_FLAG_COMPUTE
        (s.src ?? []).forEach((name, k) => (t.src[k] = ids.get(name)!));
        (s.params ?? []).forEach((v, k) => (t.opParams[k] = v));
        if (s.on) {
          t.viewSrc = ids.get(s.on)!;
        }
      }
      return t;
    });
    for (const [i, s] of specs.entries()) {
      if (!s.data) continue;
      const bytes = new Uint8Array(s.data.buffer, s.data.byteOffset, s.data.byteLength);
      await client.send(
        RpcCmd.SET_TENSOR,
        packSetTensorRequest({ tensor: tensors[i]!, cacheFlag: 0, offset: 0n, data: bytes }),
      );
    }
    const nodes = tensors.filter((_, i) => specs[i]!.op).map((t) => t.id);
    await client.send(RpcCmd.GRAPH_COMPUTE, packGraph({ device: 0, nodes, tensors }));
    const out = tensors.at(-1)!;
    return await client.call(
      RpcCmd.GET_TENSOR,
      packGetTensorRequest({ tensor: out, offset: 0n, size: BigInt(sizes.at(-1)!) }),
    );
  } finally {
    client.close();
  }
}

function contiguous(type: WireType, ne: readonly number[]): [number, number, number, number] {
  const size = TYPE_SIZE[type];
  return [size, size * ne[0]!, size * ne[0]! * ne[1]!, size * ne[0]! * ne[1]! * ne[2]!];
}

function count(ne: readonly number[]): number {
  return ne[0]! * ne[1]! * ne[2]! * ne[3]!;
}

const wireRng = new Rng(20261205);
function f32Data(ne: readonly number[]): Float32Array {
  return wireRng.f32(count(ne));
}
function f16Data(ne: readonly number[]): Float16Array {
  return Float16Array.from(wireRng.f32(count(ne)));
}

/** ggml_calc_conv_output_size. */
function convOut(size: number, k: number, s: number, p: number, d: number): number {
  return Math.floor((size + 2 * p - d * (k - 1) - 1) / s) + 1;
}

function conv2dCase(kernelType: "f32" | "f16"): WireCase {
  const [s0, s1, p0, p1, d0, d1] = [2, 1, 1, 1, 1, 2];
  const k: [number, number, number, number] = [3, 3, 4, 5];
  const x: [number, number, number, number] = [10, 9, 4, 2];
  const ne: [number, number, number, number] = [
    convOut(x[0], k[0], s0, p0, d0),
    convOut(x[1], k[1], s1, p1, d1),
    k[3],
    x[3],
  ];
  return {
    name: `CONV_2D with an ${kernelType} kernel, stride (2, 1), padding (1, 1), dilation (1, 2)`,
    specs: [
      { name: "k", type: kernelType, ne: k, data: kernelType === "f32" ? f32Data(k) : f16Data(k) },
      { name: "x", type: "f32", ne: x, data: f32Data(x) },
      {
        name: "y",
        type: "f32",
        ne,
        op: "CONV_2D",
        src: ["k", "x"],
        params: [s0, s1, p0, p1, d0, d1],
      },
    ],
    nmse: 1e-12,
  };
}

/** An f32 op_params word: its bits as the int32 ggml's builders store. */
function f32Word(value: number): number {
  return new Int32Array(new Float32Array([value]).buffer)[0]!;
}

interface RopeWire {
  label: string;
  type: "f32" | "f16";
  ne: [number, number, number, number];
  nDims: number;
  mode: 0 | 2;
  nCtxOrig: number;
  /** freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow. */
  floats: [number, number, number, number, number, number];
  factors?: number;
  /** NMSE bound (default 0: bitwise). */
  nmse?: number;
}

/** ROPE as ggml_rope_ext stores it: [n_past, n_dims, mode, n_ctx, n_ctx_orig, six floats,
 * four sections, n_offs]; positions up to 8191 (and negative), src2 when `factors` is given. */
function ropeCase(r: RopeWire): WireCase {
  const positions = Int32Array.from({ length: r.ne[2] }, (_, i) => (i * 2953) % 8192 - 3);
  const factors = r.factors
    ? Float32Array.from({ length: r.factors }, (_, k) => 1 + (k % 7) * 1.25)
    : undefined;
  const params = [0, r.nDims, r.mode, 0, r.nCtxOrig, ...r.floats.map(f32Word), 0, 0, 0, 0, 0];
  return {
    name: `ROPE ${r.label}`,
    specs: [
      { name: "x", type: r.type, ne: r.ne, data: r.type === "f32" ? f32Data(r.ne) : f16Data(r.ne) },
      { name: "pos", type: "i32", ne: [r.ne[2], 1, 1, 1], data: positions },
      ...(factors
        ? [{
          name: "ff",
          type: "f32" as const,
          ne: [r.factors!, 1, 1, 1] as [
            number,
            number,
            number,
            number,
          ],
          data: factors,
        }]
        : []),
      {
        name: "y",
        type: r.type,
        ne: r.ne,
        op: "ROPE",
        src: factors ? ["x", "pos", "ff"] : ["x", "pos"],
        params,
      },
    ],
    nmse: r.nmse ?? 0,
  };
}

const ROPE_WIRES: RopeWire[] = [
  {
    label: "neox f32, YaRN (ext 1, scale 1/4, n_ctx_orig 4096) with frequency factors",
    type: "f32",
    ne: [64, 4, 9, 2],
    nDims: 64,
    mode: 2,
    nCtxOrig: 4096,
    floats: [1e6, 0.25, 1, 1, 32, 1],
    factors: 32,
  },
  {
    label: "normal f32, YaRN (ext 0.5, attn 0.8, betas 16 and 2), nDims 38 of 70",
    type: "f32",
    ne: [70, 3, 7, 1],
    nDims: 38,
    mode: 0,
    nCtxOrig: 2048,
    floats: [10000, 0.125, 0.5, 0.8, 16, 2],
    // Not bitwise: here only the last of the 19 pairs differs, by an ulp, in a few rows. ggml's
    // normal-mode rotate_pairs is vectorized by GCC, and a row whose pairs do not fill the
    // vectors ends in a tail loop where GCC apparently fuses the other product of
    // `x0*cos - x1*sin`; Graft fuses as the vector body does. Full vectors (nDims 64) match.
    nmse: 1e-12,
  },
  {
    label: "normal f32, Llama 3 frequency factors (40 of them for nDims 64), base 500000",
    type: "f32",
    ne: [64, 5, 6, 1],
    nDims: 64,
    mode: 0,
    nCtxOrig: 8192,
    floats: [500000, 1, 0, 1, 32, 1],
    factors: 40,
  },
  {
    label: "neox f16, YaRN with factors, nDims 26 of 38",
    type: "f16",
    ne: [38, 3, 8, 2],
    nDims: 26,
    mode: 2,
    nCtxOrig: 4096,
    floats: [10000, 0.25, 1, 1, 32, 1],
    factors: 13,
  },
  {
    label: "normal f16, YaRN off, attn_factor 1.5",
    type: "f16",
    ne: [64, 4, 7, 1],
    nDims: 64,
    mode: 0,
    nCtxOrig: 0,
    floats: [10000, 1, 0, 1.5, 0, 0],
  },
];

const WIRE_CASES: WireCase[] = [
  ...ROPE_WIRES.map(ropeCase),
  conv2dCase("f32"),
  conv2dCase("f16"),
  ...(["f32", "f16"] as const).map((kernelType): WireCase => {
    const k: [number, number, number, number] = [3, 3, 1, 4];
    const x: [number, number, number, number] = [9, 8, 4, 2];
    const [s0, s1, p0, p1, d0, d1] = [1, 2, 1, 0, 1, 1];
    const ne: [number, number, number, number] = [
      convOut(9, 3, s0, p0, d0),
      convOut(8, 3, s1, p1, d1),
      4,
      2,
    ];
    return {
      name: `CONV_2D_DW with an ${kernelType} kernel, stride (1, 2), padding (1, 0)`,
      specs: [
        {
          name: "k",
          type: kernelType,
          ne: k,
          data: kernelType === "f32" ? f32Data(k) : f16Data(k),
        },
        { name: "x", type: "f32", ne: x, data: f32Data(x) },
        {
          name: "y",
          type: "f32",
          ne,
          op: "CONV_2D_DW",
          src: ["k", "x"],
          params: [s0, s1, p0, p1, d0, d1],
        },
      ],
      nmse: 1e-12,
    };
  }),
  {
    name: "CONV_TRANSPOSE_1D with an f16 kernel (input rounded to f16, as ggml-cpu)",
    specs: [
      { name: "k", type: "f16", ne: [3, 4, 5, 1], data: f16Data([3, 4, 5, 1]) },
      { name: "x", type: "f32", ne: [9, 5, 1, 1], data: f32Data([9, 5, 1, 1]) },
      {
        name: "y",
        type: "f32",
        ne: [19, 4, 1, 1],
        op: "CONV_TRANSPOSE_1D",
        src: ["k", "x"],
        params: [2, 0, 1],
      },
    ],
    nmse: 1e-12,
  },
  {
    name: "CONV_TRANSPOSE_2D with an f16 kernel, stride 3",
    specs: [
      { name: "k", type: "f16", ne: [3, 2, 4, 5], data: f16Data([3, 2, 4, 5]) },
      { name: "x", type: "f32", ne: [5, 4, 5, 2], data: f32Data([5, 4, 5, 2]) },
      {
        name: "y",
        type: "f32",
        ne: [15, 11, 4, 2],
        op: "CONV_TRANSPOSE_2D",
        src: ["k", "x"],
        params: [3],
      },
    ],
    nmse: 1e-12,
  },
  {
    name: "IM2COL 1D as ggml_conv_1d sends it (s1 = 0, d1 = 0), f16 result",
    specs: [
      { name: "k", type: "f16", ne: [3, 5, 2, 1], data: f16Data([3, 5, 2, 1]) },
      { name: "x", type: "f32", ne: [17, 5, 2, 1], data: f32Data([17, 5, 2, 1]) },
      {
        name: "y",
        type: "f16",
        ne: [15, convOut(17, 3, 2, 1, 2), 2, 1],
        op: "IM2COL",
        src: ["k", "x"],
        params: [2, 0, 1, 0, 2, 0, 0],
      },
    ],
    nmse: 0,
  },
  {
    name: "ACC in place (the result is src0's memory, nothing copied)",
    specs: [
      { name: "a", type: "f32", ne: [13, 5, 2, 1], data: f32Data([13, 5, 2, 1]) },
      { name: "b", type: "f32", ne: [4, 3, 2, 1], data: f32Data([4, 3, 2, 1]) },
      {
        name: "y",
        type: "f32",
        ne: [13, 5, 2, 1],
        op: "ACC",
        src: ["a", "b"],
        params: [13 * 4, 13 * 5 * 4, 13 * 5 * 2 * 4, (13 + 2) * 4, 1],
        on: "a",
      },
    ],
    nmse: 0,
  },
  {
    name: "SET with a view of its own strides (every other row)",
    specs: [
      { name: "a", type: "f32", ne: [6, 7, 1, 1], data: f32Data([6, 7, 1, 1]) },
      { name: "b", type: "f32", ne: [5, 3, 1, 1], data: f32Data([5, 3, 1, 1]) },
      {
        name: "y",
        type: "f32",
        ne: [6, 7, 1, 1],
        op: "SET",
        src: ["a", "b"],
        params: [48, 168, 168, 28, 0],
      },
    ],
    nmse: 0,
  },
  {
    name: "TOP_K 5 of rows of 29 (as sets: ggml's order is open)",
    specs: [
      {
        name: "a",
        type: "f32",
        ne: [29, 4, 1, 1],
        // Distinct values: no ties for the two servers to break differently.
        data: Float32Array.from({ length: 29 * 4 }, (_, i) => ((i * 37) % 116) - 58.5),
      },
      { name: "y", type: "i32", ne: [5, 4, 1, 1], op: "TOP_K", src: ["a"] },
    ],
    nmse: 0,
    unordered: true,
  },
  {
    name: "ADD_ID: [6, 3, 4] + rows of [6, 5] picked by ids [3, 4]",
    specs: [
      { name: "a", type: "f32", ne: [6, 3, 4, 1], data: f32Data([6, 3, 4, 1]) },
      { name: "b", type: "f32", ne: [6, 5, 1, 1], data: f32Data([6, 5, 1, 1]) },
      {
        name: "ids",
        type: "i32",
        ne: [3, 4, 1, 1],
        data: Int32Array.from({ length: 12 }, (_, i) => (i * 3) % 5),
      },
      { name: "y", type: "f32", ne: [6, 3, 4, 1], op: "ADD_ID", src: ["a", "b", "ids"] },
    ],
    nmse: 0,
  },
  {
    name: "UPSCALE bilinear with aligned corners (mode 257), [5, 4, 3] -> [9, 7, 3]",
    specs: [
      { name: "a", type: "f32", ne: [5, 4, 3, 1], data: f32Data([5, 4, 3, 1]) },
      { name: "y", type: "f32", ne: [9, 7, 3, 1], op: "UPSCALE", src: ["a"], params: [257] },
    ],
    nmse: 1e-12,
  },
  {
    name: "PAD circular (ggml_pad_ext_circular) of [5, 4, 3]",
    specs: [
      { name: "a", type: "f32", ne: [5, 4, 3, 1], data: f32Data([5, 4, 3, 1]) },
      {
        name: "y",
        type: "f32",
        ne: [11, 6, 4, 1],
        op: "PAD",
        src: ["a"],
        params: [2, 4, 1, 1, 0, 1, 0, 0, 1],
      },
    ],
    nmse: 0,
  },
];

function sortedRows(bytes: Uint8Array, rowLength: number): number[] {
  const ids = new Int32Array(bytes.slice().buffer);
  const out: number[] = [];
  for (let r = 0; r < ids.length; r += rowLength) {
    out.push(...[...ids.subarray(r, r + rowLength)].sort((a, b) => a - b));
  }
  return out;
}

Deno.test({
  name: "rpc server ops: wire graphs of ggml's own op_params equal ggml-rpc-server's results",
  ...opts,
  ignore: ggmlSkip !== null,
  async fn(): Promise<void> {
    const lines: string[] = [];
    await using graft = RpcServer.listen({ port: 0, threads: 1, log: (l) => lines.push(l) });
    await using ggml = await GgmlRpcServer.start(binDir, 1);
    const failures: string[] = [];
    for (const c of WIRE_CASES) {
      const out = c.specs.at(-1)!;
      let got: Uint8Array;
      try {
        got = await runWire(`127.0.0.1:${graft.port}`, c.specs);
      } catch (error) {
        failures.push(`${c.name}: Graft's server: ${(error as Error).message}`);
        continue;
      }
      const want = await runWire(ggml.endpoint, c.specs);
      assert.ok(want.some((v) => v !== 0), `${c.name}: a case must compute something`);
      if (c.unordered) {
        assert.deepEqual(sortedRows(got, out.ne[0]), sortedRows(want, out.ne[0]), c.name);
      } else {
        failures.push(...compare(c.name, got, want, out.type, c.nmse));
      }
    }
    assert.deepEqual(failures, [], lines.join("\n"));
    assert.deepEqual(lines.filter((l) => l.includes("refused") || l.includes("failed")), []);
  },
});

Deno.test({
  name: "rpc server ops: hostile params for the new ops close that connection, naming the op",
  ...opts,
  async fn(): Promise<void> {
    const lines: string[] = [];
    await using graft = RpcServer.listen({ port: 0, threads: 1, log: (l) => lines.push(l) });
    const endpoint = `127.0.0.1:${graft.port}`;
    const x: WireSpec = { name: "x", type: "f32", ne: [8, 6, 2, 1], data: f32Data([8, 6, 2, 1]) };
    const k: WireSpec = { name: "k", type: "f32", ne: [3, 3, 2, 2], data: f32Data([3, 3, 2, 2]) };
    const hostile: [string, WireSpec[]][] = [
      ["CONV_2D", [k, x, {
        name: "y",
        type: "f32",
        ne: [6, 4, 2, 1],
        op: "CONV_2D",
        src: ["k", "x"],
        params: [-1, 1, 0, 0, 1, 1],
      }]],
      ["IM2COL", [k, x, {
        name: "y",
        type: "f32",
        ne: [18, 6, 4, 1],
        op: "IM2COL",
        src: ["k", "x"],
        params: [1, 1, 0, 0, 1, 1, 2],
      }]],
      // A window of 2^20 x 2^20 taps per output: refused for its cost.
      ["POOL_2D", [x, {
        name: "y",
        type: "f32",
        ne: [2, 2, 2, 1],
        op: "POOL_2D",
        src: ["x"],
        params: [0, 1 << 20, 1 << 20, 1, 1, 524_288, 524_288],
      }]],
      ["POOL_1D", [x, {
        name: "y",
        type: "f32",
        ne: [8, 6, 2, 1],
        op: "POOL_1D",
        src: ["x"],
        params: [7, 1, 1, 0],
      }]],
      ["UPSCALE", [x, {
        name: "y",
        type: "f32",
        ne: [16, 12, 2, 1],
        op: "UPSCALE",
        src: ["x"],
        params: [1 | 512],
      }]],
      ["ACC", [x, { name: "b", type: "f32", ne: [4, 2, 1, 1], data: f32Data([4, 2, 1, 1]) }, {
        name: "y",
        type: "f32",
        ne: [8, 6, 2, 1],
        op: "ACC",
        src: ["x", "b"],
        params: [32, 192, 384, 0x7fff_fff0, 0],
      }]],
      ["SET", [x, { name: "b", type: "f32", ne: [4, 2, 1, 1], data: f32Data([4, 2, 1, 1]) }, {
        name: "y",
        type: "f32",
        ne: [8, 6, 2, 1],
        op: "SET",
        src: ["x", "b"],
        params: [-32, 192, 384, 0, 0],
      }]],
      ["CONV_TRANSPOSE_1D", [
        { name: "k1", type: "f32", ne: [3, 2, 6, 1], data: f32Data([3, 2, 6, 1]) },
        { name: "x1", type: "f32", ne: [8, 6, 1, 1], data: f32Data([8, 6, 1, 1]) },
        {
          name: "y",
          type: "f32",
          ne: [10, 2, 1, 1],
          op: "CONV_TRANSPOSE_1D",
          src: ["k1", "x1"],
          params: [1, 1, 1],
        },
      ]],
      ["PAD", [x, {
        name: "y",
        type: "f32",
        ne: [8, 6, 2, 1],
        op: "PAD",
        src: ["x"],
        params: [0, 0, 0, 0, 0, 0, 0, 0, 5],
      }]],
      // ggml-cpu would read outside x (its wrap is (i - lp + ne) % ne).
      ["PAD", [x, {
        name: "y",
        type: "f32",
        ne: [17, 6, 2, 1],
        op: "PAD",
        src: ["x"],
        params: [9, 0, 0, 0, 0, 0, 0, 0, 1],
      }]],
      // ggml-cpu's count_equal miscounts 3D tensors.
      ["COUNT_EQUAL", [{ name: "p", type: "i32", ne: [4, 3, 2, 1], data: new Int32Array(24) }, {
        name: "q",
        type: "i32",
        ne: [4, 3, 2, 1],
        data: new Int32Array(24),
      }, { name: "y", type: "i64", ne: [1, 1, 1, 1], op: "COUNT_EQUAL", src: ["p", "q"] }]],
      // Refused, with the reason: ggml-cpu keeps the last tie, Graft's argmax the first.
      ["ARGMAX.*tied maxima", [{
        name: "m",
        type: "f32",
        ne: [8, 6, 1, 1],
        data: f32Data([8, 6, 1, 1]),
      }, { name: "y", type: "i32", ne: [6, 1, 1, 1], op: "ARGMAX", src: ["m"] }]],
    ];
    for (const [op, specs] of hostile) {
      const before = lines.length;
      await assert.rejects(() => runWire(endpoint, specs), /connection closed/, op);
      const said = lines.slice(before).join("\n");
      assert.match(said, new RegExp(`refused: .*${op}`, "i"), `${op}:\n${said}`);
    }
    // The server still computes for a client that behaves.
    const ok = await runWire(endpoint, [x, {
      name: "y",
      type: "f32",
      ne: [4, 3, 2, 1],
      op: "POOL_2D",
      src: ["x"],
      params: [1, 2, 2, 2, 2, 0, 0],
    }]);
    assert.equal(ok.length, 4 * 3 * 2 * 4);
  },
});
