/**
 * Graft's RPC server under hostile input. A small valid session (allocate, write, compute a
 * graph of ADD, MUL_MAT, GLU and SET_ROWS, read back) is recorded as request frames; the fuzz
 * test then sends over 10,000 mutations of them (bit flips, truncations, huge sizes, bad
 * offsets and addresses, unknown op numbers) on connections that the server may close at
 * any time, and checks that the server is still up and answers a fresh client exactly. The
 * stalled-client tests check that a client that stops mid-message, or stops reading its
 * replies, does not hold up anyone else. Servers run in this process on free loopback ports.
 */

import assert from "node:assert/strict";
import {
  emptyRpcTensor,
  encodeRequest,
  packAllocBufferRequest,
  packBufferClearRequest,
  packCopyTensorRequest,
  packGetAllocSizeRequest,
  packGetTensorRequest,
  packGraph,
  packHelloRequest,
  packMemsetTensorRequest,
  packSetTensorRequest,
  packU32,
  packU64,
  RpcCmd,
  type RpcCmdCode,
  type RpcTensor,
} from "../src/rpc/protocol.ts";
import { GgmlOp } from "../src/rpc/ggml_ops.ts";
import { RpcServer } from "../src/rpc/server/server.ts";
import { WireClient } from "./rpc_wire_client.ts";

/** A tiny deterministic generator (xorshift32), so a failure replays. */
function rng(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x / 0x1_0000_0000;
  };
}

function u64(bytes: Uint8Array, at = 0): bigint {
  return new DataView(bytes.buffer, bytes.byteOffset).getBigUint64(at, true);
}

function tensor(
  id: bigint,
  type: number,
  ne: [number, number, number, number],
  buffer: bigint,
  data: bigint,
  op = 0,
  src: bigint[] = [],
): RpcTensor {
  const t = emptyRpcTensor();
  const size = type === 0 || type === 26 ? 4 : type === 27 ? 8 : 2;
  t.id = id;
  t.type = type;
  t.ne = ne;
  t.nb = [size, size * ne[0], size * ne[0] * ne[1], size * ne[0] * ne[1] * ne[2]];
  t.buffer = buffer;
  t.data = data;
  t.op = op;
  src.forEach((s, i) => (t.src[i] = s));
  return t;
}

/** The request frames of a valid session after HELLO and ALLOC_BUFFER (base given). */
function sessionFrames(buffer: bigint, base: bigint): { cmd: RpcCmdCode; payload: Uint8Array }[] {
  // Layout in one 4 KiB buffer: a [8,4] at 0, b [8,4] at 128, w [8,2] at 256, c at 512, ...
  const a = tensor(1n, 0, [8, 4, 1, 1], buffer, base);
  const b = tensor(2n, 0, [8, 4, 1, 1], buffer, base + 128n);
  const w = tensor(3n, 0, [8, 2, 1, 1], buffer, base + 256n);
  const c = tensor(4n, 0, [8, 4, 1, 1], buffer, base + 512n, GgmlOp.ADD, [1n, 2n]);
  const d = tensor(5n, 0, [2, 4, 1, 1], buffer, base + 640n, GgmlOp.MUL_MAT, [3n, 4n]);
  const e = tensor(6n, 0, [8, 4, 1, 1], buffer, base + 768n, GgmlOp.GLU, [1n, 2n]);
  e.opParams[0] = 2; // swiglu
  const cache = tensor(7n, 1, [8, 6, 1, 1], buffer, base + 1024n);
  const rows = tensor(8n, 27, [4, 1, 1, 1], buffer, base + 1152n);
  const set = tensor(9n, 1, [8, 6, 1, 1], buffer, base + 1024n, GgmlOp.SET_ROWS, [6n, 8n, 7n]);
  set.viewSrc = 7n;
  const values = new Float32Array(8 * 4 * 2 + 16).map((_, i) => (i % 7) - 3);
  const indices = new BigInt64Array([5n, 0n, 2n, 3n]);
  const graph = packGraph({
    device: 0,
    nodes: [4n, 5n, 6n, 9n],
    tensors: [a, b, w, c, d, e, cache, rows, set],
  });
  return [
    { cmd: RpcCmd.GET_ALIGNMENT, payload: packU32("device", 0) },
    { cmd: RpcCmd.GET_MAX_SIZE, payload: packU32("device", 0) },
    { cmd: RpcCmd.GET_DEVICE_MEMORY, payload: packU32("device", 0) },
    { cmd: RpcCmd.BUFFER_GET_BASE, payload: packU64("remote_ptr", buffer) },
    { cmd: RpcCmd.BUFFER_CLEAR, payload: packBufferClearRequest({ remotePtr: buffer, value: 0 }) },
    {
      cmd: RpcCmd.SET_TENSOR,
      payload: packSetTensorRequest({
        tensor: a,
        cacheFlag: 0,
        offset: 0n,
        data: new Uint8Array(values.buffer, 0, 320),
      }),
    },
    {
      cmd: RpcCmd.SET_TENSOR,
      payload: packSetTensorRequest({
        tensor: rows,
        cacheFlag: 0,
        offset: 0n,
        data: new Uint8Array(indices.buffer),
      }),
    },
    { cmd: RpcCmd.INIT_TENSOR, payload: encodeTensorOnly(w) },
    {
      cmd: RpcCmd.GET_ALLOC_SIZE,
      payload: packGetAllocSizeRequest({ device: 0, tensor: d, srcs: [] }),
    },
    {
      cmd: RpcCmd.MEMSET_TENSOR,
      payload: packMemsetTensorRequest({ tensor: b, offset: 4n, size: 8n, value: 0 }),
    },
    { cmd: RpcCmd.COPY_TENSOR, payload: packCopyTensorRequest({ src: a, dst: c }) },
    { cmd: RpcCmd.GRAPH_COMPUTE, payload: graph },
    { cmd: RpcCmd.GRAPH_RECOMPUTE, payload: packU32("device", 0) },
    { cmd: RpcCmd.GET_TENSOR, payload: packGetTensorRequest({ tensor: d, offset: 0n, size: 32n }) },
    {
      cmd: RpcCmd.GET_TENSOR,
      payload: packGetTensorRequest({ tensor: set, offset: 0n, size: 96n }),
    },
  ];
}

function encodeTensorOnly(t: RpcTensor): Uint8Array {
  // INIT_TENSOR's payload is one rpc_tensor: a GET_ALLOC_SIZE request without device and srcs.
  return packGetAllocSizeRequest({ device: 0, tensor: t, srcs: [] }).slice(4, 4 + 296);
}

/** Opens a session: HELLO, ALLOC_BUFFER of 4 KiB, BUFFER_GET_BASE. */
async function open(port: number): Promise<{ client: WireClient; buffer: bigint; base: bigint }> {
  const client = await WireClient.connect(port);
  const hello = await client.call(RpcCmd.HELLO, packHelloRequest());
  assert.deepEqual([...hello.subarray(0, 3)], [7, 0, 0]);
  const alloc = await client.call(
    RpcCmd.ALLOC_BUFFER,
    packAllocBufferRequest({ device: 0, size: 4096n }),
  );
  const buffer = u64(alloc);
  const base = u64(await client.call(RpcCmd.BUFFER_GET_BASE, packU64("remote_ptr", buffer)));
  return { client, buffer, base };
}

/** Runs the valid session and checks the graph's results (ADD, MUL_MAT, SWIGLU, SET_ROWS). */
async function checkValidSession(port: number): Promise<void> {
  const { client, buffer, base } = await open(port);
  try {
    const replies: Uint8Array[] = [];
    for (const frame of sessionFrames(buffer, base)) {
      await client.send(frame.cmd, frame.payload);
      const hasReply = ![
        RpcCmd.BUFFER_CLEAR,
        RpcCmd.SET_TENSOR,
        RpcCmd.INIT_TENSOR,
        RpcCmd.MEMSET_TENSOR,
        RpcCmd.GRAPH_COMPUTE,
        RpcCmd.GRAPH_RECOMPUTE,
      ].includes(frame.cmd as never);
      if (hasReply) replies.push(await client.reply());
    }
    const values = new Float32Array(8 * 4 * 2 + 16).map((_, i) => (i % 7) - 3);
    const a = values.subarray(0, 32);
    const b = values.slice(32, 64);
    for (let i = 1; i < 3; i++) b[i] = 0; // MEMSET of bytes 4..12
    const w = values.subarray(64, 80);
    // c = a + b, but COPY_TENSOR wrote a into c first; the graph's ADD overwrote it.
    const c = a.map((x, i) => x + b[i]!);
    const expect = new Float32Array(8);
    for (let col = 0; col < 4; col++) {
      for (let row = 0; row < 2; row++) {
        let sum = 0;
        for (let k = 0; k < 8; k++) sum += w[row * 8 + k]! * c[col * 8 + k]!;
        expect[col * 2 + row] = sum;
      }
    }
    const d = new Float32Array(replies.at(-2)!.slice().buffer);
    for (let i = 0; i < 8; i++) assert.ok(Math.abs(d[i]! - expect[i]!) < 1e-4, `d[${i}]`);
    // SET_ROWS wrote swiglu(a, b) rows 0..3 into cache rows 5, 0, 2, 3 (f16); row 1 stays 0.
    const cache = new Uint16Array(replies.at(-1)!.slice().buffer);
    const f16 = (h: number): number => {
      const sign = h & 0x8000 ? -1 : 1;
      const exp = (h >> 10) & 0x1f;
      const frac = h & 0x3ff;
      return exp === 0 ? sign * frac * 2 ** -24 : sign * (1 + frac / 1024) * 2 ** (exp - 15);
    };
    const silu = (x: number): number => x / (1 + Math.exp(-x));
    const targets = [5, 0, 2, 3];
    for (let r = 0; r < 4; r++) {
      for (let k = 0; k < 8; k++) {
        const want = silu(a[r * 8 + k]!) * b[r * 8 + k]!;
        const got = f16(cache[targets[r]! * 8 + k]!);
        assert.ok(Math.abs(got - want) < 1e-2 * Math.max(1, Math.abs(want)), `cache ${r},${k}`);
      }
    }
    for (let k = 0; k < 8; k++) assert.equal(cache[8 + k], 0);
  } finally {
    client.close();
  }
}

function mutate(frame: Uint8Array, next: () => number, base: bigint): Uint8Array {
  const out = frame.slice();
  const view = new DataView(out.buffer);
  const kind = Math.floor(next() * 8);
  const at = (n: number): number => Math.floor(next() * Math.max(1, out.length - n));
  switch (kind) {
    case 0: // bit flips anywhere (header included)
      for (let i = 0, n = 1 + Math.floor(next() * 4); i < n; i++) {
        const p = at(1);
        out[p]! ^= 1 << Math.floor(next() * 8);
      }
      return out;
    case 1: // truncation
      return out.slice(0, at(0));
    case 2: // a huge or off-by-some size in the header
      view.setBigUint64(
        1,
        [2n ** 64n - 1n, 2n ** 40n, BigInt(out.length - 8), 0n][at(0) % 4]!,
        true,
      );
      return out;
    case 3: // a u64 field overwritten with an address near, inside or far from the buffer
      if (out.length >= 17) {
        const values = [base - 8n, base + 4090n, base + (1n << 39n), 2n ** 64n - 8n, 0n];
        view.setBigUint64(9 + (at(17) & ~7), values[Math.floor(next() * values.length)]!, true);
      }
      return out;
    case 4: // a u32 field (ne, nb, type, op, counts) set to an extreme
      if (out.length >= 13) {
        const values = [0, 1, 0xffff_ffff, 0x8000_0000, 101, 43, 27];
        view.setUint32(9 + (at(13) & ~3), values[Math.floor(next() * values.length)]!, true);
      }
      return out;
    case 5: // unknown op number on a graph tensor
      if (out[0] === RpcCmd.GRAPH_COMPUTE) {
        view.setUint32(9 + 8 + 4 * 8 + 4 + 3 * 296 + 52, 101 + at(0) % 50, true);
      }
      return out;
    case 6: // random command byte
      out[0] = Math.floor(next() * 256);
      return out;
    default: // random bytes appended (trailing garbage)
      return Uint8Array.from([
        ...out,
        ...Array.from({ length: 1 + at(0) % 64 }, () => next() * 256),
      ]);
  }
}

Deno.test({
  name: "Graft's RPC server survives 10,000 mutated messages and then serves a fresh client",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn(): Promise<void> {
    const lines: string[] = [];
    await using server = RpcServer.listen({
      port: 0,
      threads: 1,
      memoryCap: 1 << 20,
      log: (l) => lines.push(l),
    });
    await checkValidSession(server.port);
    const next = rng(20261204);
    let sent = 0;
    let connections = 0;
    // One mutated message per connection, after a valid opening and before more valid
    // messages: each mutation reaches a server in a known state, and is read in full (the
    // client then shuts its side and drains until the server closes).
    while (sent < 10_000) {
      const { client, buffer, base } = await open(server.port);
      connections++;
      const frames = sessionFrames(buffer, base).map((f) => encodeRequest(f.cmd, f.payload));
      const drain = (async () => {
        try {
          for (;;) await client.reply();
        } catch {
          // closed
        }
      })();
      try {
        const prefix = Math.floor(next() * frames.length);
        for (let i = 0; i < prefix; i++) await client.sendRaw(frames[i]!);
        const frame = frames[Math.floor(next() * frames.length)]!;
        await client.sendRaw(mutate(frame, next, base));
        sent++;
        for (let i = prefix; i < frames.length; i++) await client.sendRaw(frames[i]!);
        await client.closeWrite();
      } catch {
        // the server closed this connection: a refused message
      }
      await drain;
      client.close();
    }
    assert.ok(sent >= 10_000);
    // The server is up and computes exactly for a client that behaves.
    await checkValidSession(server.port);
    const refused = lines.filter((l) => l.includes("refused")).length;
    assert.ok(refused > 100, `only ${refused} refusals over ${connections} connections`);
    if (Deno.env.get("FUZZ_VERBOSE")) {
      console.log(
        connections,
        refused,
        lines.map((l) => l.replace(/client \d+: /, "").replace(/[0-9a-fx]{3,}/g, "N")).sort()
          .filter((l, i, a) => l !== a[i - 1]).join("\n"),
      );
    }
  },
});

Deno.test({
  name: "a stalled client does not hold up another client",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn(): Promise<void> {
    await using server = RpcServer.listen({ port: 0, threads: 1, log: () => {} });
    // One client stops halfway through a SET_TENSOR payload...
    const { client: halfway, buffer, base } = await open(server.port);
    const frame = encodeRequest(
      RpcCmd.SET_TENSOR,
      packSetTensorRequest({
        tensor: tensor(1n, 0, [8, 4, 1, 1], buffer, base),
        cacheFlag: 0,
        offset: 0n,
        data: new Uint8Array(128),
      }),
    );
    const raw = await Deno.connect({ hostname: "127.0.0.1", port: server.port });
    await raw.write(encodeRequest(RpcCmd.HELLO, packHelloRequest()));
    await raw.write(frame.subarray(0, 100));
    // ...another asks for 64 MiB of replies and reads none of them.
    const { client: deaf, buffer: deafBuffer, base: deafBase } = await open(server.port);
    const big = tensor(1n, 0, [1024, 1, 1, 1], deafBuffer, deafBase);
    // Its own writes block once the socket buffers fill both ways: not awaited.
    const flood = (async () => {
      for (let i = 0; i < 16384; i++) {
        await deaf.send(
          RpcCmd.GET_TENSOR,
          packGetTensorRequest({ tensor: big, offset: 0n, size: 4096n }),
        );
      }
    })().catch(() => {});
    // A third runs its whole session meanwhile.
    const timer = setTimeout(() => {
      throw new Error("a healthy client waited on a stalled one for 30 s");
    }, 30_000);
    try {
      await checkValidSession(server.port);
    } finally {
      clearTimeout(timer);
    }
    halfway.close();
    deaf.close();
    raw.close();
    await flood;
  },
});

Deno.test({
  name: "clients share the server's memory cap and at most maxClients are served at once",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn(): Promise<void> {
    await using server = RpcServer.listen({
      port: 0,
      threads: 1,
      memoryCap: 64 * 1024,
      maxClients: 2,
      log: () => {},
    });
    const first = await open(server.port); // holds 4 KiB
    const second = await open(server.port); // holds 4 KiB
    const memory = async (c: WireClient): Promise<[bigint, bigint]> => {
      const r = await c.call(RpcCmd.GET_DEVICE_MEMORY, packU32("device", 0));
      return [u64(r, 0), u64(r, 8)];
    };
    assert.deepEqual(await memory(first.client), [64n * 1024n - 8192n, 64n * 1024n]);
    // Beyond what is left: a null handle (ggml's answer to a failed allocation), nothing held.
    const tooBig = await second.client.call(
      RpcCmd.ALLOC_BUFFER,
      packAllocBufferRequest({ device: 0, size: 60n * 1024n }),
    );
    assert.deepEqual([u64(tooBig, 0), u64(tooBig, 8)], [0n, 0n]);
    const fits = await second.client.call(
      RpcCmd.ALLOC_BUFFER,
      packAllocBufferRequest({ device: 0, size: 56n * 1024n }),
    );
    assert.notEqual(u64(fits, 0), 0n);
    assert.deepEqual(await memory(first.client), [0n, 64n * 1024n]);
    // A third connection is closed before HELLO is answered.
    const third = await WireClient.connect(server.port);
    await assert.rejects(() => third.call(RpcCmd.HELLO, packHelloRequest()));
    third.close();
    // A client that leaves gives its memory back.
    second.client.close();
    for (let i = 0; i < 100 && (await memory(first.client))[0] === 0n; i++) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    assert.deepEqual(await memory(first.client), [64n * 1024n - 4096n, 64n * 1024n]);
    first.client.close();
  },
});

Deno.test({
  name: "a graph with an op the server does not compute closes that connection only, naming the op",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn(): Promise<void> {
    const lines: string[] = [];
    await using server = RpcServer.listen({ port: 0, threads: 1, log: (l) => lines.push(l) });
    const bystander = await open(server.port);
    for (
      const [op, name] of [[GgmlOp.CUSTOM, "CUSTOM"], [GgmlOp.SSM_SCAN, "SSM_SCAN"], [
        150,
        "150",
      ]] as const
    ) {
      const { client, buffer, base } = await open(server.port);
      const a = tensor(1n, 0, [8, 4, 1, 1], buffer, base);
      const node = tensor(2n, 0, [8, 4, 1, 1], buffer, base + 128n, op, [1n]);
      await client.send(
        RpcCmd.GRAPH_COMPUTE,
        packGraph({ device: 0, nodes: [2n], tensors: [a, node] }),
      );
      // The server answers by closing: the next call fails.
      await assert.rejects(() => client.call(RpcCmd.DEVICE_COUNT, new Uint8Array(0)));
      client.close();
      assert.ok(
        lines.some((l) => l.includes(name)),
        `no log line names ${name}:\n${lines.join("\n")}`,
      );
    }
    // Everyone else is still served.
    const count = await bystander.client.call(RpcCmd.DEVICE_COUNT, new Uint8Array(0));
    assert.equal(new DataView(count.buffer).getUint32(0, true), 1);
    bystander.client.close();
  },
});

Deno.test({
  name: "idleTimeout closes a connection that sends nothing, and only that one",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn(): Promise<void> {
    const lines: string[] = [];
    await using server = RpcServer.listen({
      port: 0,
      threads: 1,
      idleTimeout: 0.4,
      log: (l) => lines.push(l),
    });
    // Silent after its opening: closed within the time-out (and well before 5 s).
    const silent = await open(server.port);
    // Silent halfway through a message: closed too (a stalled client).
    const halfway = await open(server.port);
    const frame = encodeRequest(RpcCmd.GET_DEVICE_MEMORY, packU32("device", 0));
    await halfway.client.sendRaw(frame.subarray(0, 5));
    // Busy: a command every 100 ms for 1.2 s, three time-outs long: never closed.
    const busy = await open(server.port);
    const t0 = performance.now();
    while (performance.now() - t0 < 1200) {
      await busy.client.call(RpcCmd.GET_DEVICE_MEMORY, packU32("device", 0));
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    for (const c of [silent.client, halfway.client]) {
      await assert.rejects(() => c.reply(), /connection closed/);
      c.close();
    }
    await busy.client.call(RpcCmd.GET_DEVICE_MEMORY, packU32("device", 0));
    busy.client.close();
    assert.equal(lines.filter((l) => l.includes("sent nothing for 0.4 s")).length, 2);
    assert.deepEqual(lines.filter((l) => l.includes("refused") || l.includes("failed")), []);
    // Bad values are refused up front.
    for (const idleTimeout of [-1, Number.NaN, 1e12]) {
      assert.throws(() => RpcServer.listen({ port: 0, idleTimeout, log: () => {} }), /idleTimeout/);
    }
  },
});
