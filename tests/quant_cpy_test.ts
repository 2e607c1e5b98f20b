/** cpy between f32 and q8_0/q4_0 (quantized KV caches): bit for bit quantize/dequantize. */

import assert from "node:assert/strict";
import {
  allocTensors,
  Context,
  CpuBackend,
  cpy,
  dequantize,
  DTYPES,
  Graph,
  liveAllocations,
  quantize,
  rowBytes,
  ShapeError,
  simdLevels,
  transpose,
  view,
} from "../mod.ts";
import { seededRandom } from "./random_dag.ts";
import { assertNothingLive } from "./leaks.ts";

const baseline = liveAllocations();

for (const simd of simdLevels()) {
  for (const threads of [1, 2]) {
    Deno.test(`${simd}, ${threads} thread(s): cpy f32 -> q8_0/q4_0 -> f32 into views of a cache`, () => {
      using cpu = new CpuBackend({ simd, threads });
      const random = seededRandom(7);
      for (const type of ["q8_0", "q4_0"] as const) {
        for (const ne0 of [32, 96, 288]) {
          const ctx = new Context();
          const rows = 5;
          const x = ctx.newTensor("f32", [ne0, rows], "x");
          // A cache of 9 rows; the new rows go to rows 3..7, as a KV cache is written.
          const cache = ctx.newTensor(type, [ne0, 9], "cache");
          const slot = view(cache, [ne0, rows], { nb: cache.nb, offset: 3 * rowBytes(type, ne0) });
          const stored = cpy(x, slot);
          const back = ctx.newTensor("f32", [ne0, rows], "back");
          const read = cpy(
            view(cache, [ne0, rows], { nb: cache.nb, offset: 3 * rowBytes(type, ne0) }),
            back,
          );
          using _memory = allocTensors(cpu, [x, cache, back]);
          const data = Float32Array.from({ length: ne0 * rows }, () => (random() - 0.5) * 8);
          cpu.setTensor(x, data);
          cpu.setTensor(cache, new Uint8Array(rowBytes(type, ne0) * 9));
          cpu.graphCompute(Graph.build(stored));
          cpu.graphCompute(Graph.build(read));
          const cacheBytes = cpu.getTensor(cache) as unknown as Uint8Array;
          const expected = quantize(data, type);
          const at = 3 * rowBytes(type, ne0);
          assert.deepEqual(
            new Uint8Array(cacheBytes.buffer, cacheBytes.byteOffset + at, expected.length),
            expected,
            `${type} ne0=${ne0}: quantized bytes`,
          );
          assert.deepEqual(cpu.getTensor(back), dequantize(expected, type), `${type} ne0=${ne0}`);
          assert.equal(DTYPES[type].blockSize, 32);
        }
      }
    });
  }
}

Deno.test("a quantizing cpy needs equal row lengths and adjacent row elements", () => {
  const ctx = new Context();
  const x = ctx.newTensor("f32", [64, 4]);
  assert.throws(() => cpy(x, ctx.newTensor("q8_0", [128, 2])), ShapeError);
  assert.throws(
    () => cpy(transpose(ctx.newTensor("f32", [4, 64])), ctx.newTensor("q4_0", [64, 4])),
    ShapeError,
  );
  assert.throws(
    () => cpy(ctx.newTensor("f16", [64, 4]), ctx.newTensor("q8_0", [64, 4])),
    /f16 converts to/,
  );
});

Deno.test("quantized cpy: nothing native is left alive", () => assertNothingLive(baseline));
