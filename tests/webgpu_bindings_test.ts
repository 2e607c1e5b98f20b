/**
 * How the WebGPU backend binds the tensors of one dispatch (no device needed): tensors of the
 * destination's buffer read-write, overlapping ranges merged into one binding, other buffers
 * read-only, as Chromium's WebGPU validation demands; and the WGSL each shape declares.
 */

import assert from "node:assert/strict";
import { LimitError } from "../mod.ts";
import type { TensorBinding } from "../src/backend/webgpu/binding.ts";
import type { WebGpuBuffer } from "../src/backend/webgpu/buffer.ts";
import { shapeBindings } from "../src/backend/webgpu/plan.ts";
import { expandBindings, tensorBindings } from "../src/backend/webgpu/wgsl_common.ts";

// Stand-ins for two device buffers: shapeBindings only compares them by identity.
const A = { label: "A" } as unknown as WebGpuBuffer;
const B = { label: "B" } as unknown as WebGpuBuffer;

function bound(buffer: WebGpuBuffer, offset: number, size: number, relative = 0): TensorBinding {
  return { buffer, offset, size, relative };
}

Deno.test("shapeBindings: an in-place destination shares its source's binding", () => {
  const { shape, bindings } = shapeBindings(
    [bound(A, 256, 64, 8), bound(A, 256, 64, 8), bound(B, 0, 32)],
    1 << 20,
    "add",
  );
  assert.deepEqual(shape, ["w", 0, "r"]);
  assert.deepEqual(bindings[1], bound(A, 256, 64, 8));
  assert.deepEqual(bindings[2], bound(B, 0, 32));
});

Deno.test("shapeBindings: ranges apart in the destination's buffer stay apart, read-write", () => {
  const { shape } = shapeBindings([bound(A, 0, 256), bound(A, 512, 256)], 1 << 20, "cpy");
  assert.deepEqual(shape, ["w", "w"]);
});

Deno.test("shapeBindings: overlaps chain into one binding from the lowest start", () => {
  // S0 [0, 300) overlaps D [256, 512), which overlaps S1 [400, 600): one binding [0, 600).
  const { shape, bindings } = shapeBindings(
    [bound(A, 256, 256, 4), bound(A, 0, 300, 12), bound(A, 400, 200)],
    1 << 20,
    "mul",
  );
  assert.deepEqual(shape, ["w", 0, 0]);
  assert.deepEqual(bindings.map((b) => [b.offset, b.size, b.relative]), [
    [0, 600, 260],
    [0, 600, 12],
    [0, 600, 400],
  ]);
});

Deno.test("shapeBindings: two sources overlapping apart from the destination share one", () => {
  const { shape } = shapeBindings(
    [bound(A, 1024, 64), bound(A, 0, 64), bound(A, 0, 64)],
    1 << 20,
    "mul",
  );
  assert.deepEqual(shape, ["w", "w", 1]);
});

Deno.test("shapeBindings: sources of other buffers are read-only, even when they alias", () => {
  const { shape } = shapeBindings([bound(A, 0, 64), bound(B, 0, 64), bound(B, 0, 64)], 64, "x");
  assert.deepEqual(shape, ["w", "r", "r"]);
});

Deno.test("shapeBindings: a merged binding over the device's limit is a LimitError", () => {
  assert.throws(
    () => shapeBindings([bound(A, 0, 256), bound(A, 128, 256)], 300, "add n1"),
    (error: unknown) => error instanceof LimitError && /add n1 binds 384 bytes/.test(error.message),
  );
});

Deno.test("expandBindings: each shape declares the bindings it binds, accessors for all", () => {
  const source = `${tensorBindings("f16", ["f16", "f32"])}\nfn main() {}`;
  const inPlace = expandBindings(source, ["w", 0, "r"]);
  assert.match(inPlace, /@binding\(1\) var<storage, read_write> D: array<atomic<u32>>;/);
  assert.doesNotMatch(inPlace, /@binding\(2\)/);
  // S0 reads the destination's atomic words.
  assert.match(inPlace, /fn S0_word\(i: u32\) -> u32 \{ return atomicLoad\(&D\[i\]\); \}/);
  assert.match(inPlace, /@binding\(3\) var<storage, read> S1: array<u32>;/);
  const apart = expandBindings(source, ["w", "w", "r"]);
  assert.match(apart, /@binding\(2\) var<storage, read_write> S0: array<u32>;/);
  assert.throws(() => expandBindings(source, ["w", "r"]), /3 tensors bound as 2/);
  assert.equal(expandBindings("fn main() {}", ["w"]), "fn main() {}");
});
