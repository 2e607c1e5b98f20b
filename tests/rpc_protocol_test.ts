// The ggml RPC codec (src/rpc/protocol.ts, src/rpc/ggml_ops.ts): every message round-trips,
// fields land at the C struct's offsets, and truncated, oversized and random bytes give
// RpcProtocolError and nothing else. The ggml enums are compared with the pinned ggml.h where
// the llama.cpp sources are in the cache.

import nodeAssert from "node:assert/strict";
import { RpcProtocolError } from "../src/errors.ts";
import * as P from "../src/rpc/protocol.ts";
import {
  encodeGgmlOp,
  f32ToI32Bits,
  GGML_OP_COUNT,
  GGML_OP_PARAMS,
  GGML_TYPE_COUNT,
  GgmlGluOp,
  GgmlOp,
  ggmlOpName,
  ggmlTypeToDType,
  GgmlUnaryOp,
  GRAFT_TO_GGML,
  i32BitsToF32,
  readGgmlOpParam,
} from "../src/rpc/ggml_ops.ts";
import { Context } from "../src/context.ts";
import { DTYPES } from "../src/dtype.ts";
import { rope } from "../src/ops/rope.ts";
import { scale, silu } from "../src/ops/elementwise.ts";
import { view } from "../src/ops/view.ts";

function assert(condition: unknown, message?: string): asserts condition {
  nodeAssert.ok(condition, message);
}
function assertEquals(actual: unknown, expected: unknown, message?: string): void {
  nodeAssert.deepStrictEqual(actual, expected, message);
}
function assertThrows<E extends Error>(
  fn: () => unknown,
  cls: new (...args: never[]) => E,
  includes?: string,
): E {
  try {
    fn();
  } catch (e) {
    nodeAssert.ok(e instanceof cls, `expected ${cls.name}, got ${e}`);
    if (includes) nodeAssert.ok(e.message.includes(includes), `"${e.message}" lacks "${includes}"`);
    return e;
  }
  throw new Error(`expected ${cls.name}, nothing was thrown`);
}

function sampleTensor(seed: number): P.RpcTensor {
  const t = P.emptyRpcTensor();
  t.id = 0x7fff_0000_0000n + BigInt(seed);
  t.type = 1;
  t.buffer = 0xdead_beef_0000n + BigInt(seed);
  t.ne = [576, 3, 2, 1];
  t.nb = [2, 1152, 3456, 6912];
  t.op = 48;
  for (let i = 0; i < 16; i++) t.opParams[i] = (i * 0x01010101 + seed) | 0;
  t.flags = -3;
  t.src = t.src.map((_, i) => BigInt(i * 1000 + seed));
  t.viewSrc = 0xffff_ffff_ffff_ffffn;
  t.viewOffs = 1n << 40n;
  t.data = 0x7f00_1234_5678n;
  t.name = `blk.${seed}.attn_q.weight`;
  t.useCount = 7;
  return t;
}

/** Every unpack function, for the fuzz loops. */
const UNPACKERS: [string, (b: Uint8Array) => unknown][] = [
  ["hello_req", P.unpackHelloRequest],
  ["hello_rsp", P.unpackHelloResponse],
  ["alloc_req", P.unpackAllocBufferRequest],
  ["alloc_rsp", P.unpackAllocBufferResponse],
  ["clear", P.unpackBufferClearRequest],
  ["devmem", P.unpackDeviceMemoryResponse],
  ["alloc_size", P.unpackGetAllocSizeRequest],
  ["init", P.unpackInitTensorRequest],
  ["memset", P.unpackMemsetTensorRequest],
  ["hash", P.unpackSetTensorHashRequest],
  ["get", P.unpackGetTensorRequest],
  ["copy", P.unpackCopyTensorRequest],
  ["set", P.unpackSetTensorRequest],
  ["graph", P.unpackGraph],
  ["u32", (b) => P.unpackU32("x", b)],
  ["u64", (b) => P.unpackU64("x", b)],
  ["u8", (b) => P.unpackU8("x", b)],
  ["req_header", P.parseRequestHeader],
  ["reply_header", P.parseReplyHeader],
];

Deno.test("rpc_tensor fields land at the C struct's offsets (296 bytes)", () => {
  const t = sampleTensor(5);
  const bytes = new Uint8Array(P.RPC_TENSOR_SIZE);
  const view = new DataView(bytes.buffer);
  P.packRpcTensor(view, 0, t);
  const o = P.RPC_TENSOR_OFFSETS;
  assertEquals(view.getBigUint64(o.id, true), t.id);
  assertEquals(view.getUint32(o.type, true), 1);
  assertEquals(view.getUint32(o.ne + 4, true), 3);
  assertEquals(view.getUint32(o.nb + 12, true), 6912);
  assertEquals(view.getUint32(o.op, true), 48);
  assertEquals(view.getInt32(o.opParams + 60, true), t.opParams[15]);
  assertEquals(view.getInt32(o.flags, true), -3);
  assertEquals(view.getBigUint64(o.src + 72, true), t.src[9]);
  assertEquals(view.getBigUint64(o.viewOffs, true), 1n << 40n);
  assertEquals(view.getBigUint64(o.data, true), t.data);
  assertEquals(bytes[o.name], "b".charCodeAt(0));
  assertEquals(view.getInt32(o.useCount, true), 7);
  assertEquals(o.useCount + 4, P.RPC_TENSOR_SIZE);
  assertEquals(P.unpackRpcTensor(view, 0), t);
});

Deno.test("rpc_tensor names are cut to 63 bytes on a UTF-8 boundary and NUL-terminated", () => {
  const t = sampleTensor(1);
  t.name = "é".repeat(40); // 80 bytes
  const bytes = new Uint8Array(P.RPC_TENSOR_SIZE);
  P.packRpcTensor(new DataView(bytes.buffer), 0, t);
  assertEquals(bytes[P.RPC_TENSOR_OFFSETS.name + 63], 0);
  assertEquals(P.unpackRpcTensor(new DataView(bytes.buffer), 0).name, "é".repeat(31));
});

Deno.test("every fixed-size message round-trips and has the size ggml-rpc.cpp gives it", () => {
  const t = sampleTensor(2);
  const cases: [number, Uint8Array, (b: Uint8Array) => unknown, unknown][] = [
    [P.RpcCmd.HELLO, P.packHelloRequest(), P.unpackHelloRequest, { connCaps: new Uint8Array(24) }],
    [
      P.RpcCmd.ALLOC_BUFFER,
      P.packAllocBufferRequest({ device: 1, size: 1n << 33n }),
      P.unpackAllocBufferRequest,
      { device: 1, size: 1n << 33n },
    ],
    [
      P.RpcCmd.BUFFER_CLEAR,
      P.packBufferClearRequest({ remotePtr: 9n, value: 255 }),
      P.unpackBufferClearRequest,
      { remotePtr: 9n, value: 255 },
    ],
    [P.RpcCmd.INIT_TENSOR, P.packInitTensorRequest(t), P.unpackInitTensorRequest, t],
    [
      P.RpcCmd.MEMSET_TENSOR,
      P.packMemsetTensorRequest({ tensor: t, offset: 4n, size: 8n, value: 3 }),
      P.unpackMemsetTensorRequest,
      { tensor: t, offset: 4n, size: 8n, value: 3 },
    ],
    [
      P.RpcCmd.SET_TENSOR_HASH,
      P.packSetTensorHashRequest({ tensor: t, offset: 0n, hash: 0xffff_0000_1111_2222n }),
      P.unpackSetTensorHashRequest,
      { tensor: t, offset: 0n, hash: 0xffff_0000_1111_2222n },
    ],
    [
      P.RpcCmd.GET_TENSOR,
      P.packGetTensorRequest({ tensor: t, offset: 16n, size: 64n }),
      P.unpackGetTensorRequest,
      { tensor: t, offset: 16n, size: 64n },
    ],
    [
      P.RpcCmd.COPY_TENSOR,
      P.packCopyTensorRequest({ src: t, dst: sampleTensor(3) }),
      P.unpackCopyTensorRequest,
      { src: t, dst: sampleTensor(3) },
    ],
    [P.RpcCmd.GET_ALIGNMENT, P.packU32("device", 2), (b) => P.unpackU32("device", b), 2],
    [P.RpcCmd.FREE_BUFFER, P.packU64("ptr", 77n), (b) => P.unpackU64("ptr", b), 77n],
    [P.RpcCmd.GRAPH_RECOMPUTE, P.packU32("device", 0), (b) => P.unpackU32("device", b), 0],
  ];
  for (const [cmd, bytes, unpack, expected] of cases) {
    assertEquals(bytes.byteLength, P.RPC_REQUEST_SIZE[cmd], P.rpcCmdName(cmd));
    assertEquals(unpack(bytes), expected, P.rpcCmdName(cmd));
  }
  // A packed tensor then its range is the whole GET_TENSOR request (RpcBackend keeps the first).
  assertEquals(
    [...P.packInitTensorRequest(t), ...P.packGetTensorRange(16n, 64n)],
    [...P.packGetTensorRequest({ tensor: t, offset: 16n, size: 64n })],
  );
  const srcs = [sampleTensor(4), ...Array.from({ length: 9 }, P.emptyRpcTensor)];
  const allocSize = P.packGetAllocSizeRequest({ device: 0, tensor: t, srcs: [sampleTensor(4)] });
  assertEquals(allocSize.byteLength, 3260);
  assertEquals(P.unpackGetAllocSizeRequest(allocSize), { device: 0, tensor: t, srcs });
  // Replies.
  const hello = P.packHelloResponse();
  assertEquals(hello.byteLength, P.RPC_REPLY_SIZE[P.RpcCmd.HELLO]);
  assertEquals(P.unpackHelloResponse(hello), {
    major: 7,
    minor: 0,
    patch: 0,
    connCaps: new Uint8Array(24),
  });
  const alloc = P.packAllocBufferResponse({ remotePtr: 0x55aa_0000n, remoteSize: 4096n });
  assertEquals(P.unpackAllocBufferResponse(alloc), { remotePtr: 0x55aa_0000n, remoteSize: 4096n });
  const mem = P.packDeviceMemoryResponse({ free: 1n, total: 2n });
  assertEquals(P.unpackDeviceMemoryResponse(mem), { free: 1n, total: 2n });
  assertEquals(P.unpackU8("result", P.packU8("result", 1)), 1);
});

Deno.test("SET_TENSOR and GRAPH_COMPUTE round-trip with their variable parts", () => {
  const t = sampleTensor(6);
  const data = new Uint8Array([1, 2, 3, 4, 5]);
  const set = P.packSetTensorRequest({ tensor: t, cacheFlag: 1, offset: 12n, data });
  assertEquals(set.byteLength, P.SET_TENSOR_HEADER_SIZE + 5);
  assertEquals(P.unpackSetTensorRequest(set), { tensor: t, cacheFlag: 1, offset: 12n, data });
  const graph: P.RpcGraph = {
    device: 3,
    nodes: [t.id, 0n, sampleTensor(7).id],
    tensors: [t, sampleTensor(7)],
  };
  const bytes = P.packGraph(graph);
  assertEquals(bytes.byteLength, 4 + 4 + 3 * 8 + 4 + 2 * 296);
  assertEquals(P.unpackGraph(bytes), graph);
  assertEquals(P.unpackGraph(P.packGraph({ device: 0, nodes: [], tensors: [] })), {
    device: 0,
    nodes: [],
    tensors: [],
  });
});

Deno.test("framing: request and reply headers, commands with and without replies", () => {
  const frame = P.encodeRequest(P.RpcCmd.GET_ALIGNMENT, P.packU32("device", 0));
  assertEquals(frame.byteLength, 9 + 4);
  assertEquals(P.parseRequestHeader(frame.subarray(0, 9)), { cmd: 1, size: 4n });
  assertEquals(P.parseReplyHeader(P.encodeReply(new Uint8Array(3)).subarray(0, 8)), 3n);
  const noReply = ["FREE_BUFFER", "BUFFER_CLEAR", "SET_TENSOR", "GRAPH_COMPUTE"] as const;
  for (const name of noReply) assert(!P.rpcCmdHasReply(P.RpcCmd[name]), name);
  for (const name of ["GRAPH_RECOMPUTE", "INIT_TENSOR", "MEMSET_TENSOR"] as const) {
    assert(!P.rpcCmdHasReply(P.RpcCmd[name]), name);
  }
  for (const name of ["HELLO", "GET_TENSOR", "COPY_TENSOR", "DEVICE_COUNT"] as const) {
    assert(P.rpcCmdHasReply(P.RpcCmd[name]), name);
  }
  // Unknown command byte, NONE, and a fixed-size command with a wrong size.
  const bad = new Uint8Array(9);
  bad[0] = 19;
  assertThrows(() => P.parseRequestHeader(bad), RpcProtocolError, "unknown command");
  bad[0] = P.RpcCmd.NONE;
  assertThrows(() => P.parseRequestHeader(bad), RpcProtocolError, "unknown command");
  bad[0] = P.RpcCmd.HELLO;
  assertThrows(() => P.parseRequestHeader(bad), RpcProtocolError, "takes 24 bytes");
  bad[0] = P.RpcCmd.GRAPH_COMPUTE;
  new DataView(bad.buffer).setBigUint64(1, 0xffff_ffff_ffff_ffffn, true);
  assertEquals(P.parseRequestHeader(bad).size, 0xffff_ffff_ffff_ffffn);
});

Deno.test("truncated and oversized messages give RpcProtocolError naming the field", () => {
  const t = sampleTensor(8);
  const full = P.packMemsetTensorRequest({ tensor: t, offset: 0n, size: 1n, value: 0 });
  for (let n = 0; n < full.byteLength; n++) {
    assertThrows(() => P.unpackMemsetTensorRequest(full.subarray(0, n)), RpcProtocolError);
  }
  const longer = new Uint8Array(full.byteLength + 1);
  longer.set(full);
  assertThrows(() => P.unpackMemsetTensorRequest(longer), RpcProtocolError, "past the end");
  // A graph whose counts claim more than its bytes: refused before any array is made.
  const huge = new Uint8Array(12);
  new DataView(huge.buffer).setUint32(4, 0xffff_ffff, true);
  const e = assertThrows(() => P.unpackGraph(huge), RpcProtocolError);
  assertEquals(e.field, "graph.nodes");
  const tensorsClaim = P.packGraph({ device: 0, nodes: [1n], tensors: [] });
  new DataView(tensorsClaim.buffer).setUint32(16, 1000, true);
  assertThrows(() => P.unpackGraph(tensorsClaim), RpcProtocolError, "tensors");
  assertThrows(() => P.unpackSetTensorRequest(new Uint8Array(304)), RpcProtocolError);
  assertEquals(P.unpackSetTensorRequest(new Uint8Array(305)).data.byteLength, 0);
});

Deno.test("values that do not fit the wire types give RpcProtocolError when packing", () => {
  const t = sampleTensor(9);
  t.ne = [2 ** 32, 1, 1, 1];
  assertThrows(() => P.packInitTensorRequest(t), RpcProtocolError, "ne[0]");
  assertThrows(() => P.packU32("device", -1), RpcProtocolError);
  assertThrows(() => P.packU64("ptr", -1n), RpcProtocolError);
  assertThrows(() => P.packU8("v", 256), RpcProtocolError);
  assertThrows(() => P.packHelloRequest({ connCaps: new Uint8Array(3) }), RpcProtocolError);
});

Deno.test("random and mutated bytes give RpcProtocolError or a value, never another error", () => {
  // A fixed-seed generator: the run is the same every time.
  let state = 0x2545f491;
  const rand = (): number => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return (state >>> 0) / 2 ** 32;
  };
  const valid = [
    P.packGraph({ device: 0, nodes: [1n, 2n], tensors: [sampleTensor(1), sampleTensor(2)] }),
    P.packGetAllocSizeRequest({ device: 0, tensor: sampleTensor(3), srcs: [] }),
    P.packSetTensorRequest({
      tensor: sampleTensor(4),
      cacheFlag: 0,
      offset: 0n,
      data: new Uint8Array(9),
    }),
  ];
  let thrown = 0;
  let parsed = 0;
  for (let i = 0; i < 3000; i++) {
    let bytes: Uint8Array;
    if (i % 2 === 0) {
      bytes = new Uint8Array(Math.floor(rand() * 700)).map(() => Math.floor(rand() * 256));
    } else {
      const base = valid[i % valid.length]!;
      bytes = base.slice(0, Math.floor(rand() * (base.byteLength + 4)));
      for (let k = 0; k < 4 && bytes.byteLength > 0; k++) {
        bytes[Math.floor(rand() * bytes.byteLength)] = Math.floor(rand() * 256);
      }
    }
    for (const [name, unpack] of UNPACKERS) {
      try {
        unpack(bytes);
        parsed++;
      } catch (e) {
        if (!(e instanceof RpcProtocolError)) throw new Error(`${name}: ${e}`, { cause: e });
        thrown++;
      }
    }
  }
  assert(thrown > 0 && parsed > 0);
});

Deno.test("fnv1a64 equals ggml's fnv_hash (BigInt reference) on random data", () => {
  const reference = (d: Uint8Array): bigint => {
    let h = 0xcbf29ce484222325n;
    for (const b of d) h = ((h ^ BigInt(b)) * 0x100000001b3n) & 0xffff_ffff_ffff_ffffn;
    return h;
  };
  for (let n = 0; n < 200; n += 7) {
    const d = new Uint8Array(n).map((_, i) => (i * 131 + n * 7) & 255);
    assertEquals(P.fnv1a64(d), reference(d));
  }
  assertEquals(P.fnv1a64(new TextEncoder().encode("hello")), 0xa430d84680aabd0bn);
});

Deno.test("ggml enums equal the pinned ggml.h", async (t) => {
  const home = Deno.env.get("HOME") ?? "";
  const header = `${home}/.cache/graft/llama.cpp-0.3.36/src/ggml/include/ggml.h`;
  let text: string;
  try {
    text = await Deno.readTextFile(header);
  } catch {
    t.step("skipped: llama.cpp sources not in the cache (deno task llama:build)", () => {});
    return;
  }
  const enumNames = (name: string, prefix: string): string[] => {
    const body = text.slice(text.indexOf(`enum ${name} {`));
    return [...body.slice(0, body.indexOf("};")).matchAll(new RegExp(`${prefix}([A-Z0-9_]+)`, "g"))]
      .map((m) => m[1]!);
  };
  const ops = enumNames("ggml_op", "GGML_OP_");
  assertEquals(ops.at(-1), "COUNT");
  assertEquals(ops.length - 1, GGML_OP_COUNT);
  ops.slice(0, -1).forEach((name, i) => assertEquals(GgmlOp[name as keyof typeof GgmlOp], i, name));
  const unaries = enumNames("ggml_unary_op", "GGML_UNARY_OP_").slice(0, -1);
  unaries.forEach((n, i) => assertEquals(GgmlUnaryOp[n as keyof typeof GgmlUnaryOp], i, n));
  const glus = enumNames("ggml_glu_op", "GGML_GLU_OP_").slice(0, -1);
  glus.forEach((n, i) => assertEquals(GgmlGluOp[n as keyof typeof GgmlGluOp], i, n));
  // ggml_type has explicit values (GGML_TYPE_Q8_0 = 8): each Graft dtype's id names it.
  const typeIds = new Map<number, string>();
  for (const m of text.matchAll(/GGML_TYPE_([A-Z0-9_]+)\s*=\s*(\d+)/g)) {
    typeIds.set(Number(m[2]), m[1]!.toLowerCase());
  }
  assertEquals(typeIds.get(GGML_TYPE_COUNT), "count");
  for (const [name, traits] of Object.entries(DTYPES)) {
    assertEquals(typeIds.get(traits.ggmlType)?.toLowerCase(), name.toLowerCase(), name);
    assertEquals(ggmlTypeToDType(traits.ggmlType), name);
  }
});

Deno.test("the op_params table covers every mapped op, and ggml types map to Graft dtypes", () => {
  for (const [name, m] of Object.entries(GRAFT_TO_GGML)) {
    assert(m.op in GgmlOp, name);
    for (const field of m.params ?? []) {
      if (field) assert(GGML_OP_PARAMS[m.op]?.some((f) => f.name === field), `${name}.${field}`);
    }
  }
  assertEquals(ggmlOpName(91), "UNARY");
  assertEquals(ggmlOpName(101), null);
  assertEquals(ggmlTypeToDType(0), "f32");
  assertEquals(ggmlTypeToDType(8), "q8_0");
  assertEquals(ggmlTypeToDType(26), "i32");
  assertEquals(ggmlTypeToDType(42), null);
  assertEquals(i32BitsToF32(f32ToI32Bits(1.5)), 1.5);
});

Deno.test("encodeGgmlOp writes ggml's op numbers and op_params for Graft nodes", () => {
  const ctx = new Context();
  const x = ctx.newTensor("f32", [64, 4, 2]);
  const pos = ctx.newTensor("i32", [2]);
  const r = rope(x, pos, { nDims: 64, mode: "neox", freqBase: 10000, freqScale: 0.5 });
  const ro = encodeGgmlOp(r)!;
  assertEquals(ro.op, GgmlOp.ROPE);
  assertEquals(readGgmlOpParam("ROPE", ro.opParams, "n_dims"), 64);
  assertEquals(readGgmlOpParam("ROPE", ro.opParams, "mode"), 2);
  assertEquals(readGgmlOpParam("ROPE", ro.opParams, "freq_base"), 10000);
  assertEquals(readGgmlOpParam("ROPE", ro.opParams, "freq_scale"), 0.5);
  assertEquals(readGgmlOpParam("ROPE", ro.opParams, "attn_factor"), 1);
  const s = encodeGgmlOp(silu(x))!;
  assertEquals([s.op, s.opParams[0]], [GgmlOp.UNARY, GgmlUnaryOp.SILU]);
  const sc = encodeGgmlOp(scale(x, 0.25))!;
  assertEquals(readGgmlOpParam("SCALE", sc.opParams, "s"), 0.25);
  const v = encodeGgmlOp(view(x, [32, 4, 2, 1], { nb: x.nb, offset: 128 }))!;
  assertEquals([v.op, v.opParams[0], v.opParams[1]], [GgmlOp.VIEW, 128, 0]);
});
