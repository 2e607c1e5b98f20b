/** cpy between f32/f16 and q8_0/q4_0 (quantized KV caches): bit for bit quantize/dequantize. */

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

for (const simd of simdLevels()) {
  for (const threads of [1, 2]) {
    Deno.test(`${simd}, ${threads} thread(s): cpy f16 -> q8_0/q4_0 -> f16, odd row counts, views on both sides`, () => {
      using cpu = new CpuBackend({ simd, threads });
      const random = seededRandom(13);
      for (const type of ["q8_0", "q4_0"] as const) {
        for (const [ne0, rows] of [[32, 1], [96, 3], [288, 7], [64, 5]] as const) {
          const ctx = new Context();
          // The source rows are a view into a bigger f16 tensor (rows 2.., strided), the
          // destination rows 1.. of a 9-row cache, and the read back goes into rows 1.. of an
          // f16 tensor of 10 rows: strided rows everywhere, adjacent elements in each row.
          const big = ctx.newTensor("f16", [ne0, 10], "big");
          const x = view(big, [ne0, rows], { nb: big.nb, offset: 2 * ne0 * 2 });
          const cache = ctx.newTensor(type, [ne0, 9], "cache");
          const at = rowBytes(type, ne0);
          const slot = () => view(cache, [ne0, rows], { nb: cache.nb, offset: at });
          const out = ctx.newTensor("f16", [ne0, 10], "out");
          const back = view(out, [ne0, rows], { nb: out.nb, offset: ne0 * 2 });
          const stored = cpy(x, slot());
          const read = cpy(slot(), back);
          using _memory = allocTensors(cpu, [big, cache, out]);
          const data = Float16Array.from({ length: ne0 * 10 }, () => (random() - 0.5) * 8);
          cpu.setTensor(big, data);
          cpu.setTensor(cache, new Uint8Array(rowBytes(type, ne0) * 9));
          cpu.setTensor(out, new Float16Array(ne0 * 10).fill(7));
          cpu.graphCompute(Graph.build(stored));
          cpu.graphCompute(Graph.build(read));
          // f16 -> blocks is f16 -> f32 (exact), then quantize; blocks -> f16 is dequantize,
          // then round to nearest even.
          const rowsF32 = Float32Array.from(data.subarray(2 * ne0, (2 + rows) * ne0));
          const expected = quantize(rowsF32, type);
          const cacheBytes = cpu.getTensor(cache) as unknown as Uint8Array;
          assert.deepEqual(
            cacheBytes.subarray(at, at + expected.length),
            expected,
            `${type} ${ne0}`,
          );
          assert.deepEqual(
            cacheBytes.subarray(0, at),
            new Uint8Array(at),
            `${type} ${ne0}: row 0 of the cache untouched`,
          );
          const outValues = cpu.getTensor(out) as Float16Array;
          assert.deepEqual(
            outValues.subarray(ne0, (1 + rows) * ne0),
            Float16Array.from(dequantize(expected, type)),
            `${type} ne0=${ne0} rows=${rows}: dequantized to f16`,
          );
          assert.ok(outValues.subarray(0, ne0).every((v) => v === 7), "row 0 of out untouched");
          assert.ok(
            outValues.subarray((1 + rows) * ne0).every((v) => v === 7),
            "rows after the view untouched",
          );
        }
      }
    });
  }
}

Deno.test("cpy f16 -> q8_0 gives the bytes of cpy f32 -> q8_0 of the same values", () => {
  using cpu = new CpuBackend({ threads: 2 });
  const random = seededRandom(5);
  const ne0 = 160, rows = 3;
  const ctx = new Context();
  const half = ctx.newTensor("f16", [ne0, rows]);
  const single = ctx.newTensor("f32", [ne0, rows]);
  const a = ctx.newTensor("q8_0", [ne0, rows]);
  const b = ctx.newTensor("q8_0", [ne0, rows]);
  using _memory = allocTensors(cpu, [half, single, a, b]);
  const values = Float16Array.from({ length: ne0 * rows }, () => (random() - 0.5) * 100);
  cpu.setTensor(half, values);
  cpu.setTensor(single, Float32Array.from(values));
  cpu.graphCompute(Graph.build(cpy(half, a), cpy(single, b)));
  assert.deepEqual(cpu.getTensor(a), cpu.getTensor(b));
});

Deno.test("a quantizing cpy needs equal row lengths and adjacent row elements", () => {
  const ctx = new Context();
  const x = ctx.newTensor("f32", [64, 4]);
  assert.throws(() => cpy(x, ctx.newTensor("q8_0", [128, 2])), ShapeError);
  assert.throws(
    () => cpy(transpose(ctx.newTensor("f32", [4, 64])), ctx.newTensor("q4_0", [64, 4])),
    ShapeError,
  );
  assert.throws(
    () => cpy(transpose(ctx.newTensor("f16", [4, 64])), ctx.newTensor("q8_0", [64, 4])),
    ShapeError,
  );
  assert.throws(
    () => cpy(ctx.newTensor("q8_0", [64, 4]), transpose(ctx.newTensor("f16", [4, 64]))),
    ShapeError,
  );
  assert.throws(
    () => cpy(ctx.newTensor("f16", [64, 4]), ctx.newTensor("q4_1", [64, 4])),
    /f16 converts to f32, f16, q8_0, q4_0/,
  );
  assert.throws(
    () => cpy(ctx.newTensor("q8_0", [64, 4]), ctx.newTensor("q4_0", [64, 4])),
    /q8_0 converts to f32, f16/,
  );
});

Deno.test("quantized cpy: nothing native is left alive", () => assertNothingLive(baseline));
