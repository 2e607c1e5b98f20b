/**
 * Graft's RPC server: llama.cpp's ggml RPC protocol 7.0.0 over TCP with Graft's CPU backend
 * behind it, so that llama.cpp's client (`llama-completion --rpc host:port`) and Graft's
 * `RpcBackend` can run graphs on it. Each connection has its own state (buffers, memory cap,
 * last graph, CPU thread pool); a message that fails any check closes that connection and
 * only that one — the protocol has no error replies.
 * @module
 */

import { ArgumentError, RpcProtocolError } from "../../errors.ts";
import type { CpuPlan } from "../../backend/cpu/plan.ts";
import { opName } from "../../op.ts";
import {
  encodeReply,
  fnv1a64,
  packAllocBufferResponse,
  packDeviceMemoryResponse,
  packHelloResponse,
  packU32,
  packU64,
  packU8,
  parseRequestHeader,
  RPC_CONN_CAPS_SIZE,
  RPC_PROTO_MAJOR,
  RPC_PROTO_MINOR,
  RPC_PROTO_PATCH,
  RPC_REQUEST_HEADER_SIZE,
  RpcCmd,
  rpcCmdName,
  SET_TENSOR_HEADER_SIZE,
  unpackAllocBufferRequest,
  unpackBufferClearRequest,
  unpackCopyTensorRequest,
  unpackGetAllocSizeRequest,
  unpackGetTensorRequest,
  unpackGraph,
  unpackInitTensorRequest,
  unpackMemsetTensorRequest,
  unpackSetTensorHashRequest,
  unpackSetTensorRequest,
  unpackU32,
  unpackU64,
} from "../protocol.ts";
import { ClientSession, refuse, SharedMemory, wireDType, wireNbytes } from "./session.ts";
import { GRAPH_NODES_MAX, GRAPH_TENSORS_MAX, translateGraph } from "./translate.ts";
import { RPC_TENSOR_SIZE } from "../protocol.ts";

/**
 * The largest GRAPH_COMPUTE message accepted (about 20 MB): far above a large model's graph
 * (SmolLM2's is 0.4 MB), and all the memory one message may make the server set aside.
 */
export const GRAPH_MESSAGE_MAX = 16 + 8 * GRAPH_NODES_MAX + RPC_TENSOR_SIZE * GRAPH_TENSORS_MAX;

/** Options of {@link RpcServer.listen}. */
export interface RpcServerOptions {
  /** Address to bind (default 127.0.0.1: the protocol has no authentication). */
  host?: string;
  /** TCP port (default 50052; 0 lets the OS pick, see {@link RpcServer.port}). */
  port?: number;
  /** CPU threads of each client's backend (default: the machine's cores, at most 64). */
  threads?: number;
  /**
   * Bytes of buffers the server holds for all its clients together, and so at most for one
   * (default 8 GiB): the device memory GET_DEVICE_MEMORY reports.
   */
  memoryCap?: number;
  /** Clients served at once (default 16); a connection beyond it is closed at once. */
  maxClients?: number;
  /** Directory of the SET_TENSOR_HASH cache (as ggml-rpc-server's `-c`); none by default. */
  cacheDir?: string;
  /**
   * Seconds a connection may send nothing (between messages or inside one) before the server
   * closes it; 0 (the default) never closes an idle one. Off by default as in ggml-rpc-server:
   * llama.cpp's client keeps its connection open and silent between requests (a llama-server
   * waiting for a prompt) and aborts when its server goes away; a time-out is for servers
   * whose clients may vanish without closing (a crashed host behind a NAT), to free their
   * memory and their place among `maxClients`. The time a graph computes does not count.
   */
  idleTimeout?: number;
  /** Where log lines go (default console.error). */
  log?: (line: string) => void;
}

/** GRAFT_RPC_DEBUG=1 logs every command's time and, on recomputes, a per-op profile. */
const DEBUG = (() => {
  try {
    return Deno.env.get("GRAFT_RPC_DEBUG") === "1";
  } catch {
    return false;
  }
})();

/** SET_TENSOR data is read and written in chunks of this many bytes. */
const SET_TENSOR_CHUNK = 4 * 1024 * 1024;

/** Default memory cap: 8 GiB. */
export const DEFAULT_MEMORY_CAP = 8 * 1024 ** 3;
/** The longest idle time-out, in seconds (setTimeout's limit: 2^31 - 1 ms). */
export const IDLE_TIMEOUT_MAX = 2_000_000;

/** Default number of clients served at once. */
export const DEFAULT_MAX_CLIENTS = 16;

/** True for addresses only this machine reaches. */
export function isLoopback(host: string): boolean {
  return host === "localhost" || host === "::1" || host.startsWith("127.");
}

/** A connection sent nothing for the idle time-out. */
class ClientIdle extends Error {}

/**
 * Reads exact byte counts from a connection. A connection that closes mid-message yields null;
 * one that sends nothing for `idleMs` (when above 0) throws ClientIdle.
 */
class FrameReader {
  readonly #reader: ReadableStreamDefaultReader<Uint8Array>;
  readonly #idleMs: number;
  #pending: Uint8Array = new Uint8Array(0);

  constructor(conn: Deno.Conn, idleMs = 0) {
    this.#reader = conn.readable.getReader();
    this.#idleMs = idleMs;
  }

  #next(): Promise<ReadableStreamReadResult<Uint8Array>> {
    const read = this.#reader.read();
    if (this.#idleMs <= 0) return read;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const idle = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new ClientIdle()), this.#idleMs);
    });
    // The read left pending is rejected when the reader is released (the connection closes).
    return Promise.race([read, idle]).finally(() => clearTimeout(timer));
  }

  /** Exactly `n` bytes, or null at the end of the stream. */
  async read(n: number): Promise<Uint8Array | null> {
    if (this.#pending.byteLength >= n) {
      const out = this.#pending.subarray(0, n);
      this.#pending = this.#pending.subarray(n);
      return out;
    }
    const out = new Uint8Array(n);
    let have = 0;
    while (have < n) {
      if (this.#pending.byteLength === 0) {
        const chunk = await this.#next();
        if (chunk.done) return null;
        this.#pending = chunk.value;
      }
      const take = Math.min(n - have, this.#pending.byteLength);
      out.set(this.#pending.subarray(0, take), have);
      have += take;
      this.#pending = this.#pending.subarray(take);
    }
    return out;
  }

  release(): void {
    this.#reader.releaseLock();
  }
}

/** A client closed its connection between messages (not an error). */
class ClientGone extends Error {}

/**
 * A running server. `RpcServer.listen` binds and starts accepting; `close()` stops it and
 * drops every connection.
 *
 * @example
 * ```ts ignore
 * import { RpcServer } from "@graft/graft";
 * await using server = RpcServer.listen({ host: "127.0.0.1", port: 50052 });
 * // llama-completion -m model.gguf --rpc 127.0.0.1:50052 -ngl 99 ...
 * await server.finished;
 * ```
 */
export class RpcServer implements AsyncDisposable {
  /** The bound address. */
  readonly host: string;
  /** The bound port. */
  readonly port: number;
  /** Resolves when the server stops accepting. */
  readonly finished: Promise<void>;
  readonly #listener: Deno.Listener;
  readonly #options: Required<Omit<RpcServerOptions, "cacheDir">> & { cacheDir?: string };
  readonly #connections = new Set<Deno.Conn>();
  readonly #shared: SharedMemory;
  readonly #work = new Set<Promise<void>>();
  #closed = false;
  /** Connections served so far (for logs). */
  #served = 0;

  private constructor(listener: Deno.Listener, options: RpcServerOptions) {
    this.#listener = listener;
    const addr = listener.addr as Deno.NetAddr;
    this.host = addr.hostname;
    this.port = addr.port;
    this.#options = {
      host: addr.hostname,
      port: addr.port,
      threads: options.threads ?? Math.max(1, Math.min(64, navigator.hardwareConcurrency ?? 1)),
      memoryCap: options.memoryCap ?? DEFAULT_MEMORY_CAP,
      maxClients: options.maxClients ?? DEFAULT_MAX_CLIENTS,
      idleTimeout: options.idleTimeout ?? 0,
      log: options.log ?? ((line: string) => console.error(line)),
      ...(options.cacheDir ? { cacheDir: options.cacheDir } : {}),
    };
    this.#shared = new SharedMemory(this.#options.memoryCap);
    this.finished = this.#accept();
  }

  /**
   * Binds `host:port` (default 127.0.0.1:50052) and serves every client that connects.
   * Prints a warning that the protocol has no authentication (louder when not loopback).
   */
  static listen(options: RpcServerOptions = {}): RpcServer {
    const idle = options.idleTimeout ?? 0;
    // setTimeout's limit is 2^31 - 1 ms (24.8 days).
    if (typeof idle !== "number" || !(idle >= 0 && idle <= IDLE_TIMEOUT_MAX)) {
      throw new ArgumentError(
        `RpcServer.listen: idleTimeout must be seconds in [0, ${IDLE_TIMEOUT_MAX}], got ${idle}`,
      );
    }
    const host = options.host ?? "127.0.0.1";
    const listener = Deno.listen({ hostname: host, port: options.port ?? 50052 });
    const server = new RpcServer(listener, options);
    const log = server.#options.log;
    log(
      `Graft RPC server (ggml RPC protocol ${RPC_PROTO_MAJOR}.${RPC_PROTO_MINOR}.` +
        `${RPC_PROTO_PATCH}) on ${server.host}:${server.port}, ${server.#options.threads} ` +
        `threads per client, ${Math.round(server.#options.memoryCap / 1024 ** 2)} MiB for at ` +
        `most ${server.#options.maxClients} clients at once, ` +
        `cache ${server.#options.cacheDir ?? "n/a"}, idle time-out ` +
        (server.#options.idleTimeout > 0 ? `${server.#options.idleTimeout} s` : "off"),
    );
    if (isLoopback(host)) {
      log(
        "WARNING: the RPC protocol has no authentication or encryption: any program on this " +
          "machine can connect, allocate memory and run graphs.",
      );
    } else {
      log(
        "!!! WARNING: the RPC protocol has NO AUTHENTICATION and NO ENCRYPTION. Anyone who can " +
          `reach ${host}:${server.port} can allocate this machine's memory, read and write ` +
          "it through the server and run graphs. Never expose it to an untrusted network. !!!",
      );
    }
    return server;
  }

  async #accept(): Promise<void> {
    try {
      for await (const conn of this.#listener) {
        if (this.#closed) {
          conn.close();
          break;
        }
        const id = ++this.#served;
        if (this.#connections.size >= this.#options.maxClients) {
          this.#options.log(
            `client ${id}: ${this.#options.maxClients} clients are connected already; closing`,
          );
          conn.close();
          continue;
        }
        this.#connections.add(conn);
        const work = this.#serve(conn, id).finally(() => {
          this.#connections.delete(conn);
          this.#work.delete(work);
        });
        this.#work.add(work);
      }
    } catch (error) {
      if (!this.#closed) throw error;
    }
  }

  async #serve(conn: Deno.Conn, id: number): Promise<void> {
    const log = this.#options.log;
    const reader = new FrameReader(conn, this.#options.idleTimeout * 1000);
    let session: ClientSession | null = null;
    try {
      // The session (a CPU thread pool, buffers) exists only once the client said HELLO.
      await this.#hello(conn, reader);
      session = new ClientSession({
        memoryCap: this.#options.memoryCap,
        threads: this.#options.threads,
        shared: this.#shared,
      });
      for (;;) {
        const header = await reader.read(RPC_REQUEST_HEADER_SIZE);
        if (!header) break;
        const t0 = performance.now();
        await this.#command(conn, reader, session, header);
        if (DEBUG) {
          log(`client ${id}: ${rpcCmdName(header[0]!)} ${(performance.now() - t0).toFixed(2)} ms`);
        }
      }
    } catch (error) {
      // A connection reset or closed under a pending read is the client leaving, not an error.
      const gone = error instanceof ClientGone || error instanceof Deno.errors.Interrupted ||
        error instanceof Deno.errors.BadResource || error instanceof Deno.errors.ConnectionReset;
      if (error instanceof ClientIdle) {
        log(
          `client ${id}: sent nothing for ${this.#options.idleTimeout} s (--idle-timeout); ` +
            "closing its connection",
        );
      } else if (!gone) {
        const what = error instanceof RpcProtocolError ? "refused" : "failed";
        log(`client ${id}: ${what}: ${(error as Error).message}; closing its connection`);
      }
    } finally {
      try {
        reader.release();
      } catch {
        // already released
      }
      try {
        conn.close();
      } catch {
        // already closed
      }
      session?.dispose();
    }
  }

  async #payload(
    reader: FrameReader,
    size: bigint,
    max: number,
    what: string,
  ): Promise<Uint8Array> {
    if (size > BigInt(max)) refuse(`${what}.size`, `${size} bytes (at most ${max} accepted)`);
    const bytes = await reader.read(Number(size));
    if (!bytes) throw new ClientGone();
    return bytes;
  }

  async #hello(conn: Deno.Conn, reader: FrameReader): Promise<void> {
    const header = await reader.read(RPC_REQUEST_HEADER_SIZE);
    if (!header) throw new ClientGone();
    if (header[0] !== RpcCmd.HELLO) refuse("request.cmd", "the first command must be HELLO");
    const { size } = parseRequestHeader(header);
    await this.#payload(reader, size, RPC_CONN_CAPS_SIZE, "hello");
    // No transport upgrades (RDMA): all-zero capabilities keep the connection plain TCP.
    await write(
      conn,
      encodeReply(
        packHelloResponse({
          major: RPC_PROTO_MAJOR,
          minor: RPC_PROTO_MINOR,
          patch: RPC_PROTO_PATCH,
        }),
      ),
    );
  }

  async #command(
    conn: Deno.Conn,
    reader: FrameReader,
    s: ClientSession,
    headerBytes: Uint8Array,
  ): Promise<void> {
    const { cmd, size } = parseRequestHeader(headerBytes);
    const cap = Number(s.memoryCap);
    const name = rpcCmdName(cmd);
    const reply = (payload: Uint8Array): Promise<void> => write(conn, encodeReply(payload));
    const device = (bytes: Uint8Array, field: string): void => {
      const dev = unpackU32(field, bytes.subarray(0, 4));
      if (dev !== 0) refuse(field, `device ${dev} (the server has 1)`);
    };
    switch (cmd) {
      case RpcCmd.HELLO:
        refuse("request.cmd", "HELLO may only come first");
        break;
      case RpcCmd.DEVICE_COUNT:
        await this.#payload(reader, size, 0, name);
        return reply(packU32("device_count", 1));
      case RpcCmd.GET_ALIGNMENT: {
        device(await this.#payload(reader, size, 4, name), "get_alignment.device");
        return reply(packU64("alignment", s.alignment));
      }
      case RpcCmd.GET_MAX_SIZE: {
        device(await this.#payload(reader, size, 4, name), "get_max_size.device");
        return reply(packU64("max_size", s.memoryCap));
      }
      case RpcCmd.GET_DEVICE_MEMORY: {
        device(await this.#payload(reader, size, 4, name), "get_device_memory.device");
        return reply(
          packDeviceMemoryResponse({ free: s.available, total: s.memoryCap }),
        );
      }
      case RpcCmd.ALLOC_BUFFER: {
        const req = unpackAllocBufferRequest(await this.#payload(reader, size, 12, name));
        if (req.device !== 0) refuse("alloc_buffer.device", `device ${req.device}`);
        const buffer = s.alloc(req.size);
        if (!buffer) {
          this.#options.log(
            `a client asked for ${req.size} bytes with ${s.allocated} of its ${s.memoryCap} ` +
              "in use: answered with no buffer",
          );
        }
        return reply(
          packAllocBufferResponse({
            remotePtr: buffer?.id ?? 0n,
            remoteSize: buffer?.size ?? 0n,
          }),
        );
      }
      case RpcCmd.BUFFER_GET_BASE: {
        const id = unpackU64("remote_ptr", await this.#payload(reader, size, 8, name));
        return reply(packU64("base_ptr", s.buffer(id, "buffer_get_base.remote_ptr").base));
      }
      case RpcCmd.FREE_BUFFER: {
        s.free(unpackU64("remote_ptr", await this.#payload(reader, size, 8, name)));
        return;
      }
      case RpcCmd.BUFFER_CLEAR: {
        const req = unpackBufferClearRequest(await this.#payload(reader, size, 9, name));
        const buffer = s.buffer(req.remotePtr, "buffer_clear.remote_ptr");
        s.fill(buffer, 0n, buffer.size, req.value);
        return;
      }
      case RpcCmd.SET_TENSOR:
        return await this.#setTensor(reader, s, size, cap);
      case RpcCmd.SET_TENSOR_HASH: {
        const req = unpackSetTensorHashRequest(await this.#payload(reader, size, 312, name));
        const data = await this.#cacheLoad(req.hash);
        if (!data) return reply(packU8("result", 0));
        const where = s.region(req.tensor, req.offset, BigInt(data.byteLength), "set_tensor_hash");
        s.write(where.buffer, where.at, data);
        return reply(packU8("result", 1));
      }
      case RpcCmd.INIT_TENSOR: {
        // CPU buffers need no per-tensor setup; the tensor is still checked as ggml's server
        // deserializes it (a known type, and inside its buffer when it names one).
        const t = unpackInitTensorRequest(await this.#payload(reader, size, RPC_TENSOR_SIZE, name));
        if (t.buffer !== 0n) s.resolve(t, "init_tensor");
        else wireNbytes(t, wireDType(t, "init_tensor"), "init_tensor");
        return;
      }
      case RpcCmd.GET_ALLOC_SIZE: {
        const req = unpackGetAllocSizeRequest(await this.#payload(reader, size, 3260, name));
        if (req.device !== 0) refuse("get_alloc_size.device", `device ${req.device}`);
        const t = req.tensor;
        return reply(
          packU64("alloc_size", wireNbytes(t, wireDType(t, "get_alloc_size"), "get_alloc_size")),
        );
      }
      case RpcCmd.GET_TENSOR: {
        const req = unpackGetTensorRequest(await this.#payload(reader, size, 312, name));
        const where = s.region(req.tensor, req.offset, req.size, "get_tensor");
        return reply(s.read(where.buffer, where.at, req.size));
      }
      case RpcCmd.COPY_TENSOR: {
        const req = unpackCopyTensorRequest(
          await this.#payload(reader, size, 2 * RPC_TENSOR_SIZE, name),
        );
        const src = s.resolve(req.src, "copy_tensor.src");
        // ggml copies ggml_nbytes(src) to dst's data: that many bytes must fit in dst's buffer.
        const dst = s.region(req.dst, 0n, src.nbytes, "copy_tensor.dst");
        s.copy(src.buffer, src.offset, dst.buffer, dst.at, src.nbytes);
        return reply(packU8("result", 1));
      }
      case RpcCmd.MEMSET_TENSOR: {
        const req = unpackMemsetTensorRequest(await this.#payload(reader, size, 313, name));
        const t = s.resolve(req.tensor, "memset_tensor");
        if (req.offset > t.nbytes || req.size > t.nbytes - req.offset) {
          refuse("memset_tensor", `region (${req.offset}, ${req.size}) outside the tensor`);
        }
        s.fill(t.buffer, t.offset + req.offset, req.size, req.value);
        return;
      }
      case RpcCmd.GRAPH_COMPUTE: {
        const bytes = await this.#payload(reader, size, GRAPH_MESSAGE_MAX, name);
        const graph = unpackGraph(bytes);
        s.dropLastGraph();
        const compiled = translateGraph(s, graph);
        if (DEBUG) compiled.plan?.enableProfiling();
        s.lastGraph = compiled;
        if (compiled.plan) await s.backend.graphPlanComputeAsync(compiled.plan);
        return;
      }
      case RpcCmd.GRAPH_RECOMPUTE: {
        device(await this.#payload(reader, size, 4, name), "graph_recompute.device");
        const compiled = s.lastGraph;
        if (!compiled) refuse("graph_recompute", "no graph to compute again");
        if (compiled.plan) await s.backend.graphPlanComputeAsync(compiled.plan);
        if (DEBUG && compiled.plan) this.#logProfile(compiled.plan);
        return;
      }
      default:
        refuse("request.cmd", `command ${cmd}`);
    }
  }

  /**
   * SET_TENSOR, streamed: the header (tensor, cache flag, offset) is read and the region
   * checked before any data, which then goes into the buffer in chunks, so a message never
   * costs the server more memory than a chunk, whatever size it declares.
   */
  async #setTensor(
    reader: FrameReader,
    s: ClientSession,
    size: bigint,
    cap: number,
  ): Promise<void> {
    // No write can be larger than the memory this client may hold.
    if (size > BigInt(cap + SET_TENSOR_HEADER_SIZE)) {
      refuse("SET_TENSOR.size", `${size} bytes (at most ${cap + SET_TENSOR_HEADER_SIZE})`);
    }
    if (size < BigInt(SET_TENSOR_HEADER_SIZE)) {
      refuse(
        "SET_TENSOR.size",
        `${size} bytes is less than its ${SET_TENSOR_HEADER_SIZE}-byte header`,
      );
    }
    const header = await reader.read(SET_TENSOR_HEADER_SIZE);
    if (!header) throw new ClientGone();
    const req = unpackSetTensorRequest(header);
    const total = size - BigInt(SET_TENSOR_HEADER_SIZE);
    const where = s.region(req.tensor, req.offset, total, "set_tensor");
    const caching = req.cacheFlag !== 0 && this.#options.cacheDir !== undefined;
    const parts: Uint8Array[] = [];
    let hash: bigint | undefined;
    for (let done = 0n; done < total;) {
      const n = Number(total - done < BigInt(SET_TENSOR_CHUNK) ? total - done : SET_TENSOR_CHUNK);
      const chunk = await reader.read(n);
      if (!chunk) throw new ClientGone();
      s.write(where.buffer, where.at + done, chunk);
      if (caching) {
        hash = fnv1a64(chunk, hash);
        parts.push(chunk.slice());
      }
      done += BigInt(n);
    }
    if (caching) await this.#cacheStore(fnv1a64(new Uint8Array(0), hash), parts);
  }

  /** GRAFT_RPC_DEBUG=1: the eight op kinds that took longest in the last compute. */
  #logProfile(plan: CpuPlan): void {
    const by = new Map<string, number>();
    for (const node of plan.nodeTimings()) {
      const key = `${opName(node.tensor.op)}(${node.tensor.src.map((t) => t.dtype).join(",")})`;
      by.set(key, (by.get(key) ?? 0) + node.ms);
    }
    const top = [...by].sort((a, b) => b[1] - a[1]).slice(0, 8);
    this.#options.log(`profile: ${top.map(([k, ms]) => `${k} ${ms.toFixed(1)} ms`).join(", ")}`);
  }

  #cachePath(hash: bigint): string {
    return `${this.#options.cacheDir}/${hash.toString(16).padStart(16, "0")}`;
  }

  async #cacheStore(hash: bigint, parts: Uint8Array[]): Promise<void> {
    const path = this.#cachePath(hash);
    try {
      await Deno.writeFile(path, ReadableStream.from(parts));
    } catch (error) {
      this.#options.log(`cache: could not write ${path}: ${(error as Error).message}`);
    }
  }

  async #cacheLoad(hash: bigint): Promise<Uint8Array | null> {
    if (!this.#options.cacheDir) return null;
    const path = this.#cachePath(hash);
    try {
      const info = await Deno.stat(path);
      // A cached file larger than a client may hold cannot be written anywhere it owns.
      if (!info.isFile || info.size > this.#options.memoryCap) return null;
      const data = await Deno.readFile(path);
      // The file is keyed by its hash; one changed on disk since is not trusted.
      return fnv1a64(data) === hash ? data : null;
    } catch {
      return null;
    }
  }

  /** Connections open now. */
  get connections(): number {
    return this.#connections.size;
  }

  /** Stops accepting, closes every connection and waits for their sessions to end. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    try {
      this.#listener.close();
    } catch {
      // already closed
    }
    for (const conn of this.#connections) {
      try {
        conn.close();
      } catch {
        // already closed
      }
    }
    await this.finished;
    await Promise.allSettled([...this.#work]);
  }

  /** Same as {@link close}. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

async function write(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  let done = 0;
  while (done < bytes.byteLength) done += await conn.write(bytes.subarray(done));
}
