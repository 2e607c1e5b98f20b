/**
 * The threaded WebAssembly core in Deno: a child process (tests/wasm_threads.ts, its own
 * process so that it loads the threaded build) computes a matrix product and the demo block on
 * 3 threads (Web Workers on a shared memory) and on 1; the outputs must be bitwise equal, match
 * float64 references, leave nothing alive, and the process must exit by itself (the workers
 * stop with the last threaded backend).
 */

import assert from "node:assert/strict";

const root = new URL("..", import.meta.url);
/** A matrix product's error bound relative to the sum of |terms| (f32 accumulation, k 517). */
const PRODUCT_TOLERANCE = 1e-5;
/** The demo's tolerance against the float64 reference (max relative error). */
const BLOCK_TOLERANCE = 1e-4;

Deno.test("the threaded WebAssembly core computes on Web Workers as on one thread", async () => {
  const output = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--no-prompt",
      `--allow-read=${root.pathname}`,
      new URL("tests/wasm_threads.ts", root).pathname,
    ],
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(300_000),
  }).output();
  const stderr = new TextDecoder().decode(output.stderr);
  assert.equal(output.code, 0, stderr);
  const result = JSON.parse(new TextDecoder().decode(output.stdout)) as {
    build: string;
    threads: number[];
    sameBits: boolean;
    productError: number;
    blockError: number;
    live: number;
  };
  assert.match(result.build, /-threads$/, "the child loaded the threaded build");
  assert.deepEqual(result.threads, [3, 1]);
  assert.ok(result.sameBits, "3 threads give the bits of 1");
  assert.ok(result.productError <= PRODUCT_TOLERANCE, `product error ${result.productError}`);
  assert.ok(result.blockError <= BLOCK_TOLERANCE, `block error ${result.blockError}`);
  assert.equal(result.live, 0, "the child disposed everything it made in the core");
});
