/**
 * The TS Allocator (the core's best-fit free list) and allocTensors: best fit, coalescing,
 * alignment, measure mode, out-of-space and double-free errors, and non-overlapping aligned
 * tensor placement.
 */

import assert from "node:assert/strict";
import { assertNothingLive } from "./leaks.ts";
import { denoEval } from "./child.ts";
import {
  allocTensors,
  ArgumentError,
  Context,
  CpuBackend,
  cpy,
  DisposedError,
  GraftError,
  LimitError,
  liveAllocations,
  NativeError,
  OutOfSpaceError,
  Status,
  type Tensor,
  transpose,
} from "../mod.ts";
import { Allocator } from "../internal.ts";

const baseline = liveAllocations();

function thrown(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  assert.fail("expected an error, nothing was thrown");
}

Deno.test("alloc picks the smallest free block that fits (best fit), not the first", () => {
  using allocator = new Allocator(4096, { alignment: 64 });
  const a = allocator.alloc(64);
  const b = allocator.alloc(256);
  const c = allocator.alloc(64);
  const d = allocator.alloc(128);
  const e = allocator.alloc(64);
  assert.deepEqual([a, b, c, d, e], [0, 64, 320, 384, 512]);
  allocator.free(b, 256);
  allocator.free(d, 128);
  // Free: [64, 320) of 256, [384, 512) of 128, and the tail [576, 4096).
  assert.equal(allocator.stats().freeBlocks, 3);
  assert.equal(allocator.alloc(100), 384, "100 bytes (128 aligned) go to the 128-byte hole");
  assert.equal(allocator.alloc(200), 64, "200 bytes (256 aligned) go to the 256-byte hole");
  assert.equal(allocator.alloc(64), 576, "with the holes full, the tail is next");
  assert.equal(allocator.stats().freeBlocks, 1);
});

Deno.test("freeing coalesces with the free neighbour before, after, and on both sides", () => {
  using allocator = new Allocator(1024, { alignment: 64 });
  const blocks = [0, 1, 2, 3, 4].map(() => allocator.alloc(64));
  assert.deepEqual(blocks, [0, 64, 128, 192, 256]);
  allocator.free(0, 64);
  allocator.free(64, 64); // merges with the block before: [0, 128)
  assert.equal(allocator.stats().freeBlocks, 2);
  allocator.free(192, 64); // a separate hole [192, 256)
  assert.equal(allocator.stats().freeBlocks, 3);
  allocator.free(128, 64); // merges both sides: [0, 256)
  let stats = allocator.stats();
  assert.equal(stats.freeBlocks, 2);
  assert.equal(stats.largestFreeBlock, 1024 - 320);
  assert.equal(allocator.alloc(256), 0, "the merged hole holds 256 bytes at offset 0");
  allocator.free(0, 256);
  allocator.free(256, 64); // merges with [0, 256) before and the tail after
  stats = allocator.stats();
  assert.deepEqual(stats, {
    sizeMax: 320,
    liveBlocks: 0,
    liveBytes: 0,
    freeBlocks: 1,
    largestFreeBlock: 1024,
  });
  // Merging with the block after only.
  const x = allocator.alloc(64);
  const y = allocator.alloc(64);
  allocator.alloc(64);
  allocator.free(y, 64);
  allocator.free(x, 64);
  assert.equal(allocator.stats().freeBlocks, 2);
  assert.equal(allocator.alloc(128), 0);
});

Deno.test("offsets are aligned and sizes rounded up to the alignment", () => {
  for (const alignment of [16, 64, 256]) {
    using allocator = new Allocator(1 << 16, { alignment });
    const offsets = [1, 3, alignment, alignment + 1, 1031].map((size) => allocator.alloc(size));
    for (const offset of offsets) assert.equal(offset % alignment, 0, `${offset} % ${alignment}`);
    assert.deepEqual(offsets.slice(0, 3), [0, alignment, 2 * alignment]);
    assert.equal(allocator.alignedSize(0), alignment);
    assert.equal(allocator.alignedSize(1031), Math.ceil(1031 / alignment) * alignment);
    const stats = allocator.stats();
    assert.equal(stats.liveBlocks, 5);
    assert.equal(
      stats.liveBytes,
      [1, 3, alignment, alignment + 1, 1031].reduce((s, n) => s + allocator.alignedSize(n), 0),
    );
  }
  // Checked where it enters, before the core (which refuses it too).
  const error = thrown(() => new Allocator(1024, { alignment: 48 }));
  assert.ok(error instanceof ArgumentError, String(error));
  assert.match(error.message, /alignment must be a power of two.*got 48/);
});

Deno.test("measure mode never runs out and reports the size a real buffer needs", () => {
  using measure = Allocator.measure({ alignment: 32 });
  assert.ok(measure.isMeasure);
  const a = measure.alloc(1000); // 1024
  measure.alloc(500); // 512
  measure.free(a, 1000);
  assert.equal(measure.alloc(900), 0, "the freed 1024-byte block is reused");
  assert.equal(measure.stats().sizeMax, 1536);
  measure.alloc(2 ** 40);
  assert.equal(measure.stats().sizeMax, 1536 + 2 ** 40);
  // The measured size is enough for a real allocator replaying the same calls.
  using real = new Allocator(1536, { alignment: 32 });
  const b = real.alloc(1000);
  real.alloc(500);
  real.free(b, 1000);
  assert.equal(real.alloc(900), 0);
});

Deno.test("running out of space throws OutOfSpaceError giving the needed size", () => {
  using allocator = new Allocator(1024, { alignment: 64 });
  allocator.alloc(900);
  const error = thrown(() => allocator.alloc(100));
  assert.ok(error instanceof OutOfSpaceError, String(error));
  assert.ok(error instanceof NativeError);
  assert.equal(error.status, Status.outOfSpace);
  assert.match(error.message, /cannot fit 128 bytes/, "names the aligned size asked for");
  assert.match(error.message, /1024/, "names the allocator's size");
  assert.match(error.message, /largest free block 64/);
  // Nothing changed: the remaining 64 bytes are still there.
  assert.equal(allocator.alloc(64), 960);
});

Deno.test("OutOfSpaceError carries the bytes the request needed", () => {
  // Callers that grow a buffer need the size as a number, not only in the message.
  using allocator = new Allocator(256, { alignment: 64 });
  const error = thrown(() => allocator.alloc(300));
  assert.ok(error instanceof OutOfSpaceError);
  const needed: unknown = Reflect.get(error, "neededBytes");
  assert.ok(needed === 300 || needed === 320, `neededBytes is ${String(needed)}`);
});

Deno.test("a double free or a free of never-allocated memory throws, leaving state intact", () => {
  using allocator = new Allocator(1024, { alignment: 64 });
  const a = allocator.alloc(64);
  const b = allocator.alloc(64);
  allocator.free(a, 64);
  const error = thrown(() => allocator.free(a, 64));
  assert.ok(error instanceof NativeError, String(error));
  assert.equal(error.status, Status.invalidArgument);
  assert.match(error.message, /double free/);
  assert.ok(thrown(() => allocator.free(512, 64)) instanceof NativeError, "inside the tail");
  assert.ok(thrown(() => allocator.free(32, 64)) instanceof NativeError, "misaligned");
  assert.ok(thrown(() => allocator.free(1024, 64)) instanceof NativeError, "past the end");
  const stats = allocator.stats();
  assert.equal(stats.liveBlocks, 1);
  assert.equal(stats.liveBytes, 64);
  allocator.free(b, 64);
  assert.equal(allocator.stats().largestFreeBlock, 1024);
});

Deno.test("a full free-block list throws LimitError naming blocksMax", () => {
  using allocator = new Allocator(1024, { alignment: 64, blocksMax: 2 });
  const offsets = [0, 1, 2, 3].map(() => allocator.alloc(64));
  allocator.free(offsets[0]!, 64); // blocks: [0, 64) and the tail
  const error = thrown(() => allocator.free(offsets[2]!, 64));
  assert.ok(error instanceof LimitError, String(error));
  assert.match(error.message, /blocks_max/);
  allocator.free(offsets[1]!, 64); // merges, needs no new block
  assert.equal(allocator.stats().freeBlocks, 2);
});

Deno.test("reset frees every block; a disposed allocator throws DisposedError", () => {
  const allocator = new Allocator(1024);
  allocator.alloc(100);
  allocator.alloc(200);
  allocator.reset();
  assert.deepEqual(allocator.stats(), {
    sizeMax: 384,
    liveBlocks: 0,
    liveBytes: 0,
    freeBlocks: 1,
    largestFreeBlock: 1024,
  });
  assert.equal(allocator.alloc(1024), 0);
  allocator.dispose();
  assert.ok(allocator.disposed);
  for (const use of [() => allocator.alloc(1), () => allocator.stats(), () => allocator.reset()]) {
    assert.ok(thrown(use) instanceof DisposedError);
  }
});

Deno.test("allocTensors places every owner aligned, inside the buffer and without overlap", () => {
  using cpu = new CpuBackend({ threads: 1 });
  const ctx = new Context();
  const shapes = [[7], [1031], [33, 7, 3], [1], [5, 3, 2, 2]] as const;
  const f32 = shapes.map((shape) => ctx.newTensor("f32", shape));
  const f16 = [ctx.newTensor("f16", [33]), ctx.newTensor("f16", [1])];
  const i32 = ctx.newTensor("i32", [3]);
  const owners: Tensor[] = [...f32, ...f16, i32];
  // Views and cpy results take their source's memory, not their own.
  const t = transpose(f32[2]!);
  const copied = cpy(f32[0]!, ctx.newTensor("f32", [7]));
  const all = [...ctx.tensors, t, copied];
  using buffer = allocTensors(cpu, all);
  owners.push(ctx.tensors[ctx.tensors.length - 1]!);
  const expectedSize = owners.reduce((s, o) => s + Math.ceil(o.nbytes / 64) * 64, 0);
  assert.equal(buffer.size, expectedSize, "the buffer is exactly the aligned sum");
  const ranges = owners.map((o) => {
    const placement = o.placement;
    assert.ok(placement, `${o.label} is placed`);
    assert.equal(placement.buffer, buffer);
    assert.equal(placement.offset % cpu.alignment, 0, `${o.label} at ${placement.offset}`);
    assert.ok(placement.offset + o.nbytes <= buffer.size);
    return [placement.offset, placement.offset + o.nbytes] as const;
  });
  const sorted = [...ranges].sort((x, y) => x[0] - y[0]);
  for (let i = 1; i < sorted.length; i++) {
    assert.ok(sorted[i - 1]![1] <= sorted[i]![0], `ranges ${sorted[i - 1]} and ${sorted[i]}`);
  }
  assert.equal(t.placement?.offset, f32[2]!.placement?.offset, "a view shares its source");
  assert.equal(copied.placement?.offset, copied.viewSource?.placement?.offset);
  // Filling each tensor with its own byte and reading all back shows no overlap in memory.
  owners.forEach((o, i) => cpu.setTensor(o, new Uint8Array(o.nbytes).fill(i + 1)));
  owners.forEach((o, i) => {
    const data = cpu.getTensor(o);
    const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    assert.ok(bytes.every((byte) => byte === i + 1), `${o.label} kept its bytes`);
  });
  const again = thrown(() => allocTensors(cpu, all));
  assert.ok(again instanceof GraftError);
  assert.match(again.message, /already has memory/);
});

Deno.test("allocTensors skips tensors that already have memory", () => {
  using cpu = new CpuBackend({ threads: 1 });
  const ctx = new Context();
  const a = ctx.newTensor("f32", [100]);
  using first = allocTensors(cpu, [a]);
  const b = ctx.newTensor("f32", [10]);
  using second = allocTensors(cpu, ctx.tensors);
  assert.equal(a.placement?.buffer, first);
  assert.equal(b.placement?.buffer, second);
  assert.equal(second.size, 64);
});

Deno.test("a free with the wrong size throws and never hands the same bytes out twice", () => {
  using allocator = new Allocator(1024, { alignment: 64 });
  const a = allocator.alloc(64);
  const b = allocator.alloc(64);
  // The old allocator took this free of 128 bytes at a, freeing b's bytes too: the next two
  // allocations then both got b's memory.
  const error = thrown(() => allocator.free(a, 128));
  assert.ok(error instanceof NativeError, String(error));
  assert.match(error.message, /names no live block of that size/);
  assert.ok(thrown(() => allocator.free(a + 16, 48)) instanceof NativeError, "inside a");
  allocator.free(a, 60); // rounds to the same 64 bytes
  const c = allocator.alloc(64);
  const d = allocator.alloc(64);
  assert.equal(new Set([b, c, d]).size, 3, `offsets ${b}, ${c}, ${d} are distinct`);
  assert.equal(allocator.stats().liveBlocks, 3);
});

Deno.test("sizes and offsets that are not byte counts are ArgumentErrors naming the value", () => {
  using allocator = new Allocator(1024, { alignment: 64 });
  using measure = Allocator.measure();
  const bad: [unknown, RegExp][] = [
    [-1, /got -1/],
    [1.5, /got 1.5/],
    [NaN, /got NaN/],
    [Infinity, /got Infinity/],
    [2 ** 53 + 2, /got 9007199254740994/],
    [2n, /got 2n \(a BigInt\)/],
  ];
  for (const [value, message] of bad) {
    for (
      const [label, call] of [
        ["alloc", () => measure.alloc(value as number)],
        ["free size", () => allocator.free(0, value as number)],
        ["free offset", () => allocator.free(value as number, 64)],
        ["new Allocator", () => new Allocator(value as number)],
      ] as const
    ) {
      const error = thrown(call);
      assert.ok(error instanceof ArgumentError, `${label}(${String(value)}): ${String(error)}`);
      assert.match(error.message, message);
    }
  }
  assert.equal(measure.stats().liveBlocks, 0);
});

Deno.test("the core itself refuses sizes that would wrap, in the fast and the safe build", async () => {
  // Raw calls past the TypeScript checks: the safe build used to abort the process on these
  // (integer overflow panic), the fast build wrapped.
  for (const safe of ["0", "1"]) {
    const script = `
      import { loadCore, lastError } from ${
      JSON.stringify(new URL("../src/core/core.ts", import.meta.url).href)
    };
      const lib = loadCore();
      const handle = new Uint32Array(1);
      const out = new BigUint64Array(1);
      if (lib.graft_allocator_create(0n, 64, 1, 16, handle) !== 0) throw new Error(lastError(lib));
      const results = [
        lib.graft_allocator_alloc(handle[0], 2n ** 64n - 1n, out),
        lib.graft_allocator_free(handle[0], 0n, 2n ** 64n - 1n),
        lib.graft_buffer_alloc(2n ** 64n - 1n, handle.subarray(0, 1), out),
      ];
      console.log(JSON.stringify({ results, message: lastError(lib) }));
    `;
    const output = await denoEval(script, { GRAFT_SAFE: safe });
    assert.equal(output.code, 0, `GRAFT_SAFE=${safe}: the process survives: ${output.stderr}`);
    const result = JSON.parse(output.stdout) as { results: number[] };
    assert.deepEqual(result.results, [
      Status.invalidArgument,
      Status.invalidArgument,
      Status.invalidArgument,
    ]);
  }
});

Deno.test("allocator_test leaves no native allocators or buffers alive", () => {
  assertNothingLive(baseline);
});
