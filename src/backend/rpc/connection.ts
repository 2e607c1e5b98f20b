/**
 * One TCP connection to a ggml RPC server, with its commands run strictly in order: the
 * protocol is one request at a time with no request ids, so a reply belongs to the request
 * before it. Commands are tasks on a queue; a task's time-out closes the connection, and any
 * failure of the stream (closed, reset, timed out, a reply of the wrong size) leaves the
 * connection dead: every later command rejects with that first error.
 * @module
 */

import { RpcConnectionError, RpcProtocolError, RpcTimeoutError } from "../../errors.ts";
import {
  encodeRequest,
  packHelloRequest,
  RPC_PROTO_MAJOR,
  RPC_PROTO_MINOR,
  RPC_REPLY_HEADER_SIZE,
  RPC_REQUEST_HEADER_SIZE,
  RpcCmd,
  type RpcCmdCode,
  rpcCmdName,
  unpackHelloResponse,
} from "../../rpc/protocol.ts";

/** The version a server announced in HELLO. */
export interface RpcServerVersion {
  /** Major. */
  major: number;
  /** Minor. */
  minor: number;
  /** Patch. */
  patch: number;
}

/** Parses "host:port" (as llama.cpp's `--rpc` takes it; `[::1]:50052` for IPv6). */
export function parseEndpoint(endpoint: string): { hostname: string; port: number } {
  const colon = endpoint.lastIndexOf(":");
  const port = Number(endpoint.slice(colon + 1));
  let hostname = endpoint.slice(0, colon);
  if (hostname.startsWith("[") && hostname.endsWith("]")) hostname = hostname.slice(1, -1);
  if (colon <= 0 || !Number.isInteger(port) || port < 1 || port > 65535 || hostname === "") {
    throw new RpcConnectionError(`RPC endpoint "${endpoint}" is not host:port`);
  }
  return { hostname, port };
}

/** Writes larger than this go out as header and data separately (no copy of the data). */
const COALESCE_BYTES_MAX = 64 * 1024;
/** Queued small requests beyond this make the next one wait for the socket (backpressure). */
const OUTBOX_BYTES_MAX = 1024 * 1024;

/** A connection to one RPC server. Use {@link RpcConnection.open}. */
export class RpcConnection {
  readonly endpoint: string;
  /** Milliseconds one command may take from its turn in the queue to its reply. */
  readonly timeoutMs: number;
  /** What the server said in HELLO. */
  version: RpcServerVersion = { major: 0, minor: 0, patch: 0 };
  readonly #conn: Deno.TcpConn;
  #tail: Promise<void> = Promise.resolve();
  #failure: Error | null = null;
  #closed = false;
  #header = new Uint8Array(RPC_REPLY_HEADER_SIZE);
  // Small requests wait here for the writer, which sends all that are waiting in one write.
  // Requests sent with `hold` (writes that need no reply) wait for the next request that is not
  // held: a decode step's inputs go out with its compute in one write, instead of one write
  // (and one turn of the event loop) each.
  #outbox: Uint8Array[] = [];
  #outboxBytes = 0;
  /** The running writer (null when idle); resolves when the outbox is empty. */
  #writer: Promise<void> | null = null;
  /** The task running (its label) and since when: the watchdog's to judge (see #watch). */
  #running: string | null = null;
  #runningSince = 0;
  #watchdog: ReturnType<typeof setTimeout> | null = null;
  /** Held requests go out by this timer if nothing else sends them first. */
  #holdTimer: ReturnType<typeof setTimeout> | null = null;
  /** Tasks queued and not yet started: while there are any, requests wait for theirs. */
  #waiting = 0;

  private constructor(endpoint: string, conn: Deno.TcpConn, timeoutMs: number) {
    this.endpoint = endpoint;
    this.#conn = conn;
    this.timeoutMs = timeoutMs;
  }

  /**
   * Connects and shakes hands (HELLO, 24 bytes of zero capabilities: plain TCP). Throws
   * RpcConnectionError when the connection is refused or the server speaks another major
   * version (or a newer minor), RpcTimeoutError when either takes longer than `timeoutMs`.
   */
  static async open(endpoint: string, timeoutMs: number): Promise<RpcConnection> {
    const { hostname, port } = parseEndpoint(endpoint);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const connecting = Deno.connect({ hostname, port, transport: "tcp" });
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          reject(new RpcTimeoutError(`RPC ${endpoint}: connect timed out after ${timeoutMs} ms`)),
        timeoutMs,
      );
    });
    let conn: Deno.TcpConn;
    try {
      conn = await Promise.race([connecting, timeout]);
    } catch (error) {
      // A connect that completes after the time-out is closed, not leaked.
      connecting.then((c) => c.close(), () => {});
      if (error instanceof RpcTimeoutError) throw error;
      throw new RpcConnectionError(
        `RPC ${endpoint}: cannot connect: ${error instanceof Error ? error.message : error}`,
        { cause: error },
      );
    } finally {
      clearTimeout(timer);
    }
    conn.setNoDelay(true);
    const connection = new RpcConnection(endpoint, conn, timeoutMs);
    try {
      const reply = await connection.enqueue(
        "HELLO",
        () => connection.call(RpcCmd.HELLO, packHelloRequest(), 28),
      );
      const hello = unpackHelloResponse(reply);
      connection.version = { major: hello.major, minor: hello.minor, patch: hello.patch };
      if (hello.major !== RPC_PROTO_MAJOR || hello.minor > RPC_PROTO_MINOR) {
        throw new RpcConnectionError(
          `RPC ${endpoint}: server speaks protocol ${hello.major}.${hello.minor}.${hello.patch}, ` +
            `this client ${RPC_PROTO_MAJOR}.${RPC_PROTO_MINOR}.x`,
        );
      }
    } catch (error) {
      connection.close();
      throw error;
    }
    return connection;
  }

  /** The first error that broke the connection, or null while it works. */
  get failure(): Error | null {
    return this.#failure;
  }

  /** True once closed (by {@link close} or by a failure). */
  get closed(): boolean {
    return this.#closed;
  }

  /**
   * Queues `task` after every task queued before it; resolves with its result. The task runs
   * under the connection's time-out: past it, the connection is closed and the task (and every
   * later one) rejects with RpcTimeoutError.
   */
  enqueue<T>(label: string, task: () => Promise<T>): Promise<T> {
    this.#waiting++;
    const run = this.#tail.then(() => {
      this.#waiting--;
      return this.#run(label, task);
    });
    this.#tail = run.then(() => {}, () => {});
    return run;
  }

  /**
   * Resolves once every task queued so far has finished (whatever their outcome) and their
   * requests have been written.
   */
  async drain(): Promise<void> {
    await this.#tail;
    this.flush();
    await this.#flushed();
  }

  /** Starts writing the queued requests, held ones included (see {@link send}). */
  flush(): void {
    if (this.#holdTimer !== null) {
      clearTimeout(this.#holdTimer);
      this.#holdTimer = null;
    }
    if (this.#outbox.length > 0) this.#writer ??= this.#write();
  }

  async #run<T>(label: string, task: () => Promise<T>): Promise<T> {
    if (this.#failure) throw this.#failure;
    if (this.#closed) {
      throw new RpcConnectionError(`RPC ${this.endpoint}: ${label}: connection closed`);
    }
    this.#running = label;
    this.#runningSince = performance.now();
    this.#watch(this.timeoutMs);
    try {
      return await task();
    } catch (error) {
      // A read or write interrupted by the time-out (or a close) reports the reason instead.
      if (this.#failure) throw this.#failure;
      const reason = this.#streamFailure(label, error);
      if (reason) {
        this.#fail(reason);
        throw reason;
      }
      throw error;
    } finally {
      this.#running = null;
      // The last task queued left held requests: they go out on the next turn at the latest.
      if (this.#waiting === 0) this.#backstop();
    }
  }

  // Held requests go out by a timer if nothing sends them first. While tasks wait in the queue
  // there is none: one of them sends or reads next, or the last one sets it (see #run).
  #backstop(): void {
    if (this.#outbox.length > 0 && this.#writer === null && this.#waiting === 0) {
      this.#holdTimer ??= setTimeout(() => this.flush(), 0);
    }
  }

  // One watchdog for every task, instead of a timer set and cleared per command (a decode step
  // sends six): armed by the first task, it looks at the task running when it fires, fails the
  // connection if that one has run `timeoutMs`, and else waits for the rest of its time; it
  // lapses when no task runs (the next one arms it again), and close() clears it. Unref'd: an
  // open connection alone does not keep the process alive (as a socket waiting for nothing).
  #watch(delayMs: number): void {
    if (this.#watchdog !== null || this.#closed) return;
    this.#watchdog = setTimeout(() => {
      this.#watchdog = null;
      const label = this.#running;
      if (label === null) return;
      const ran = performance.now() - this.#runningSince;
      if (ran < this.timeoutMs) {
        this.#watch(Math.max(1, this.timeoutMs - ran));
        return;
      }
      this.#fail(
        new RpcTimeoutError(
          `RPC ${this.endpoint}: ${label}: no reply within ${this.timeoutMs} ms; connection closed`,
        ),
      );
    }, delayMs);
    Deno.unrefTimer(this.#watchdog as unknown as number);
  }

  /**
   * The error that ends the connection for `error`, thrown by `label`'s read or write: protocol
   * and connection errors as they are, a stream error (or a non-Error) as RpcConnectionError;
   * null for anything else (a bug, which is not the stream's fault).
   */
  #streamFailure(label: string, error: unknown): Error | null {
    if (error instanceof RpcProtocolError || error instanceof RpcConnectionError) return error;
    if (error instanceof Error && !isStreamError(error)) return null;
    return new RpcConnectionError(
      `RPC ${this.endpoint}: ${label}: ${error instanceof Error ? error.message : error}`,
      { cause: error },
    );
  }

  #fail(error: Error): void {
    this.#failure ??= error;
    this.close();
  }

  /** Closes the socket; queued commands reject. */
  close(): void {
    for (const timer of [this.#holdTimer, this.#watchdog]) {
      if (timer !== null) clearTimeout(timer);
    }
    this.#holdTimer = null;
    this.#watchdog = null;
    if (this.#closed) return;
    this.#closed = true;
    try {
      this.#conn.close();
    } catch {
      // Already closed by the peer: nothing to release.
    }
  }

  /**
   * Sends one command and reads its reply: exactly `replySize` bytes (the protocol's size for
   * the command; a reply of any other size is an RpcProtocolError and ends the connection), or
   * nothing when `replySize` is null (commands without a reply). Run it inside a task.
   */
  async call(cmd: RpcCmdCode, payload: Uint8Array, replySize: null): Promise<null>;
  async call(cmd: RpcCmdCode, payload: Uint8Array, replySize: number): Promise<Uint8Array>;
  async call(
    cmd: RpcCmdCode,
    payload: Uint8Array,
    replySize: number | null,
  ): Promise<Uint8Array | null> {
    await this.send(cmd, [payload]);
    if (replySize === null) return null;
    return await this.receive(cmd, replySize);
  }

  /**
   * Writes a request whose payload is the concatenation of `parts`. A small one is queued for
   * the writer (see `#outbox`) and this resolves at once; a large one waits for the queue to be
   * written, then goes out without a copy of its data. With `hold`, or while other tasks are
   * queued behind the running one, a small request waits in the queue for the next request
   * sent without it (or {@link flush}, {@link drain}, a reply awaited, or at the latest the
   * next turn of the event loop): for requests with no reply, whose only reader is a later
   * command, and for requests that a queued command follows at once anyway. A write that fails
   * fails the connection, so the next command reports it.
   */
  async send(cmd: RpcCmdCode, parts: readonly Uint8Array[], hold = false): Promise<void> {
    const size = parts.reduce((sum, p) => sum + p.byteLength, 0);
    if (size <= COALESCE_BYTES_MAX) {
      const payload = concat(parts);
      if (this.#outboxBytes > OUTBOX_BYTES_MAX) {
        this.flush();
        await this.#flushed();
      }
      if (this.#failure) throw this.#failure;
      this.#outbox.push(encodeRequest(cmd, payload));
      this.#outboxBytes += size + RPC_REQUEST_HEADER_SIZE;
      // A task queued behind this one sends (or reads) next, so this request can wait for it:
      // a decode step's compute and the read of its logits go out in one write.
      if (!hold && this.#waiting === 0) this.flush();
      else this.#backstop();
      return;
    }
    this.flush();
    await this.#flushed();
    if (this.#failure) throw this.#failure;
    const header = new Uint8Array(RPC_REQUEST_HEADER_SIZE);
    const view = new DataView(header.buffer);
    view.setUint8(0, cmd);
    view.setBigUint64(1, BigInt(size), true);
    await this.#writeAll(header);
    for (const p of parts) await this.#writeAll(p);
  }

  /** Resolves when every queued request has been written (or the connection failed). */
  async #flushed(): Promise<void> {
    while (this.#writer) await this.#writer;
  }

  // The writer: takes everything queued, writes it as one buffer, and repeats until the queue
  // is empty. A failure fails the connection (queued requests are then never sent).
  async #write(): Promise<void> {
    try {
      while (this.#outbox.length > 0 && !this.#failure) {
        const batch = this.#outbox.length === 1 ? this.#outbox[0]! : concat(this.#outbox);
        this.#outbox = [];
        this.#outboxBytes = 0;
        await this.#writeAll(batch);
      }
    } catch (error) {
      // The writer has no caller to throw to: whatever it was, the connection ends with it.
      this.#fail(this.#streamFailure("write", error) ?? (error as Error));
    } finally {
      this.#outbox = [];
      this.#outboxBytes = 0;
      this.#writer = null;
    }
  }

  /**
   * Reads one reply into `into`, which must be exactly the reply's size (as {@link receive});
   * for replies read often, so that no array is allocated per reply.
   */
  async receiveInto(cmd: RpcCmdCode, into: Uint8Array): Promise<void> {
    await this.#readHeader(cmd, into.byteLength);
    await this.#readExact(into, cmd);
  }

  /** Reads one reply that must be `size` bytes. */
  async receive(cmd: RpcCmdCode, size: number): Promise<Uint8Array> {
    await this.#readHeader(cmd, size);
    const reply = new Uint8Array(size);
    await this.#readExact(reply, cmd);
    return reply;
  }

  async #readHeader(cmd: RpcCmdCode, size: number): Promise<void> {
    // The request this answers may still be queued: the writer is on it (a failed write closes
    // the socket, and the read below then fails with the connection's failure).
    this.flush();
    await this.#readExact(this.#header, cmd);
    const said = new DataView(this.#header.buffer).getBigUint64(0, true);
    if (said !== BigInt(size)) {
      throw new RpcProtocolError(
        `${rpcCmdName(cmd)}.reply.size`,
        0,
        `the reply is ${size} bytes in protocol ${RPC_PROTO_MAJOR}.${RPC_PROTO_MINOR}, ` +
          `the server sent ${said}`,
      );
    }
  }

  async #writeAll(bytes: Uint8Array): Promise<void> {
    let at = 0;
    while (at < bytes.byteLength) at += await this.#conn.write(bytes.subarray(at));
  }

  async #readExact(into: Uint8Array, cmd: RpcCmdCode): Promise<void> {
    let at = 0;
    while (at < into.byteLength) {
      const n = await this.#conn.read(into.subarray(at));
      if (n === null) {
        throw new RpcConnectionError(
          `RPC ${this.endpoint}: the server closed the connection during ${rpcCmdName(cmd)} ` +
            `(${at} of ${into.byteLength} reply bytes read); the protocol has no error replies, ` +
            "so a server that refuses a request, or dies, closes it",
        );
      }
      at += n;
    }
  }
}

function concat(chunks: readonly Uint8Array[]): Uint8Array {
  const out = new Uint8Array(chunks.reduce((sum, c) => sum + c.byteLength, 0));
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.byteLength;
  }
  return out;
}

// Errors of the socket itself (as opposed to bugs): Deno's network error classes.
function isStreamError(error: Error): boolean {
  return error instanceof Deno.errors.ConnectionReset ||
    error instanceof Deno.errors.ConnectionAborted ||
    error instanceof Deno.errors.BrokenPipe ||
    error instanceof Deno.errors.BadResource ||
    error instanceof Deno.errors.Interrupted ||
    error instanceof Deno.errors.NotConnected ||
    error instanceof Deno.errors.UnexpectedEof ||
    error instanceof RpcConnectionError;
}
