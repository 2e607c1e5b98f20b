/**
 * A raw client of the ggml RPC protocol for tests that write frames by hand (hostile messages,
 * graphs with ggml's own op_params): requests as given, replies read in order (a u64 size, then
 * the payload).
 * @module
 */

import { encodeRequest, type RpcCmdCode } from "../src/rpc/protocol.ts";

/** One connection, frames in order. */
export class WireClient {
  readonly #conn: Deno.Conn;
  #pending = new Uint8Array(0);
  private constructor(conn: Deno.Conn) {
    this.#conn = conn;
  }
  /** Connects to a port on 127.0.0.1, or to "host:port". */
  static async connect(where: number | string): Promise<WireClient> {
    const [hostname, port] = typeof where === "number"
      ? ["127.0.0.1", where]
      : [where.slice(0, where.lastIndexOf(":")), Number(where.slice(where.lastIndexOf(":") + 1))];
    return new WireClient(await Deno.connect({ hostname, port }));
  }
  /** Writes one request. */
  async send(cmd: RpcCmdCode, payload: Uint8Array): Promise<void> {
    await this.sendRaw(encodeRequest(cmd, payload));
  }
  /** Writes bytes as they are (a frame, part of one, or garbage). */
  async sendRaw(frame: Uint8Array): Promise<void> {
    let done = 0;
    while (done < frame.length) done += await this.#conn.write(frame.subarray(done));
  }
  async #read(n: number): Promise<Uint8Array> {
    while (this.#pending.length < n) {
      const chunk = new Uint8Array(65536);
      const got = await this.#conn.read(chunk);
      if (got === null) throw new Error("connection closed");
      const next = new Uint8Array(this.#pending.length + got);
      next.set(this.#pending);
      next.set(chunk.subarray(0, got), this.#pending.length);
      this.#pending = next;
    }
    const out = this.#pending.slice(0, n);
    this.#pending = this.#pending.slice(n);
    return out;
  }
  /** Reads the next reply's payload. */
  async reply(): Promise<Uint8Array> {
    const size = new DataView((await this.#read(8)).buffer).getBigUint64(0, true);
    return await this.#read(Number(size));
  }
  /** Sends a request and reads its reply. */
  async call(cmd: RpcCmdCode, payload: Uint8Array): Promise<Uint8Array> {
    await this.send(cmd, payload);
    return await this.reply();
  }
  /** Half-closes: the server sees the end of the stream. */
  async closeWrite(): Promise<void> {
    await this.#conn.closeWrite();
  }
  /** Closes (quietly, if the server already has). */
  close(): void {
    try {
      this.#conn.close();
    } catch {
      // closed by the server
    }
  }
}
