/**
 * GGUF files made from bytes in memory (`GGUFFile.fromBytes`, what a browser page has): the same
 * header as the file on disk, weights streamed into backend buffers, mapping refused by name.
 */

import assert from "node:assert/strict";
import { ArgumentError, CpuBackend, ggmlTypeByName, GGUFFile, writeGGUF } from "../mod.ts";

const values = new Float32Array([1, -2, 3.5, 4, 0.25, -6]);
const bytes = writeGGUF({
  metadata: [{ key: "general.name", type: "string", value: "tiny" }],
  tensors: [{ name: "w", dims: [3, 2], type: ggmlTypeByName("f32")!, offset: 0, nbytes: 24 }],
  data: () => new Uint8Array(values.buffer),
});

Deno.test("GGUFFile.fromBytes reads the header as GGUFFile.open does", async () => {
  const path = await Deno.makeTempFile({ suffix: ".gguf" });
  try {
    await Deno.writeFile(path, bytes);
    using onDisk = GGUFFile.open(path);
    using inMemory = GGUFFile.fromBytes(bytes, "tiny.gguf");
    assert.equal(inMemory.path, "tiny.gguf");
    assert.deepEqual(inMemory.header, onDisk.header);
  } finally {
    await Deno.remove(path);
  }
});

Deno.test("GGUFFile.fromBytes: load streams the weights; mapping them is refused", () => {
  using cpu = new CpuBackend({ threads: 1 });
  using file = GGUFFile.fromBytes(bytes);
  using weights = file.load(cpu);
  assert.deepEqual(cpu.getTensor(weights.tensors.get("w")!), values);
  assert.ok(file.bytesRead >= 24, "the tensor's bytes were read");
  assert.throws(
    () => file.load(cpu, { mmap: true }),
    (error: unknown) => error instanceof ArgumentError && /cannot be mapped/.test(error.message),
  );
});
