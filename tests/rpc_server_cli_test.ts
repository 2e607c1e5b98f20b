/**
 * `deno task rpc-server`'s script: it parses llama.cpp's flags, binds loopback, says loudly that
 * the protocol has no authentication, and answers HELLO with version 7.0.0. The warning for
 * other addresses is checked through `isLoopback`, without binding one in a test.
 */

import assert from "node:assert/strict";
import { encodeRequest, packHelloRequest, RpcCmd } from "../src/rpc/protocol.ts";
import { isLoopback } from "../src/rpc/server/server.ts";
import { freePort } from "./rpc_server.ts";

Deno.test("isLoopback tells loopback addresses from others", () => {
  for (const host of ["127.0.0.1", "127.1.2.3", "localhost", "::1"]) assert.ok(isLoopback(host));
  for (const host of ["0.0.0.0", "192.168.1.5", "::", "example.com"]) {
    assert.ok(!isLoopback(host), host);
  }
});

Deno.test({
  name: "rpc-server: flags as ggml-rpc-server's, a no-authentication warning, HELLO 7.0.0",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn(): Promise<void> {
    const port = freePort();
    const child = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--allow-ffi",
        "--allow-env",
        "--allow-read",
        "--allow-write",
        "--allow-net",
        new URL("../tools/rpc_server.ts", import.meta.url).pathname,
        ...["-H", "127.0.0.1", "-p", String(port), "-t", "1", "-m", "64"],
        ...["--idle-timeout", "30"],
      ],
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const stderr = child.stderr.pipeThrough(new TextDecoderStream()).getReader();
    const stdout = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
    try {
      let out = "";
      while (!out.includes("listening on")) {
        const chunk = await stdout.read();
        if (chunk.done) throw new Error("rpc-server exited before listening");
        out += chunk.value;
      }
      assert.match(out, new RegExp(`listening on 127\\.0\\.0\\.1:${port}`));
      let err = "";
      while (!err.includes("authentication")) {
        const chunk = await stderr.read();
        if (chunk.done) break;
        err += chunk.value;
      }
      assert.match(err, /64 MiB/);
      assert.match(err, /idle time-out 30 s/);
      assert.match(err, /WARNING: the RPC protocol has no authentication/);
      const conn = await Deno.connect({ hostname: "127.0.0.1", port });
      await conn.write(encodeRequest(RpcCmd.HELLO, packHelloRequest()));
      const reply = new Uint8Array(8 + 28);
      let got = 0;
      while (got < reply.length) {
        const n = await conn.read(reply.subarray(got));
        if (n === null) throw new Error("closed");
        got += n;
      }
      assert.deepEqual([...reply.subarray(8, 11)], [7, 0, 0]);
      conn.close();
    } finally {
      child.kill("SIGTERM");
      await child.status;
      await stdout.cancel().catch(() => {});
      await stderr.cancel().catch(() => {});
    }
  },
});
