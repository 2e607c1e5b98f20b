/**
 * Bad input gives clear, typed errors and the process stays alive: shape and dtype errors at
 * build time, range and placement errors on tensor access, use after dispose, stale plans,
 * out-of-range gathers at compute time, a missing library, and the core's own checks through
 * its C ABI.
 */

import assert from "node:assert/strict";
import { assertNothingLive } from "./leaks.ts";
import { copyLoader } from "./child.ts";
import {
  acc,
  add,
  allocTensors,
  ArgumentError,
  Context,
  CpuBackend,
  cpy,
  DisposedError,
  DTypeError,
  getRows,
  type GraftError,
  Graph,
  interpolate,
  LibraryLoadError,
  liveAllocations,
  mul,
  mulMat,
  NativeError,
  OutOfBoundsError,
  padCircular,
  PlacementError,
  reshape,
  set,
  set1d,
  setRows,
  ShapeError,
  softmax,
  StalePlanError,
  Status,
  sum,
  type Tensor,
  transpose,
  view,
} from "../mod.ts";
import { Allocator } from "../src/alloc/allocator.ts";
import { computeNodes, encodeNodeTable, NODE_SIZE } from "../src/backend/cpu/node_table.ts";
import { closeLibrary, loadLibrary } from "../src/core/ffi.ts";
import { lastError } from "../src/core/core.ts";

const baseline = liveAllocations();

/** Asserts `fn` throws an instance of `type` whose message contains every one of `parts`. */
function assertThrowsWith(
  fn: () => unknown,
  type: new (...args: never[]) => GraftError,
  parts: readonly string[],
): GraftError {
  let caught: unknown = null;
  try {
    fn();
  } catch (error) {
    caught = error;
  }
  assert.ok(caught !== null, `expected ${type.name}, nothing was thrown`);
  assert.ok(
    caught instanceof type,
    `expected ${type.name}, got ${caught instanceof Error ? caught.name : String(caught)}: ${
      caught instanceof Error ? caught.message : ""
    }`,
  );
  for (const part of parts) {
    assert.ok(
      caught.message.includes(part),
      `message ${JSON.stringify(caught.message)} names ${part}`,
    );
  }
  return caught;
}

// ---------------------------------------------------------------------------------------------
// Build time: shapes and dtypes.

Deno.test("binary op shape mismatches throw ShapeError naming the op and both shapes", () => {
  const ctx = new Context();
  const a = ctx.newTensor("f32", [4, 3]);
  const b = ctx.newTensor("f32", [3, 4]);
  assertThrowsWith(() => add(a, b), ShapeError, ["add", "[3, 4]", "[4, 3]"]);
  assertThrowsWith(() => mul(a, ctx.newTensor("f32", [4, 2])), ShapeError, [
    "mul",
    "[4, 2]",
    "[4, 3]",
  ]);
});

Deno.test("mulMat, softmax, cpy and getRows shape mismatches name the op and both shapes", () => {
  const ctx = new Context();
  const a = ctx.newTensor("f32", [4, 3]);
  assertThrowsWith(() => mulMat(a, ctx.newTensor("f32", [5, 2])), ShapeError, [
    "mulMat",
    "[4, 3]",
    "[5, 2]",
  ]);
  assertThrowsWith(
    () => mulMat(ctx.newTensor("f32", [4, 3, 2]), ctx.newTensor("f32", [4, 5, 3])),
    ShapeError,
    ["mulMat", "[4, 3, 2]", "[4, 5, 3]"],
  );
  assertThrowsWith(() => softmax(a, { mask: ctx.newTensor("f32", [4, 2]) }), ShapeError, [
    "softmax",
    "[4, 2]",
    "[4, 3]",
  ]);
  assertThrowsWith(() => cpy(a, ctx.newTensor("f32", [5])), ShapeError, ["cpy", "[4, 3]", "[5]"]);
  const rows = ctx.newTensor("f32", [8, 10, 2]);
  const indices = ctx.newTensor("i32", [3, 3]);
  assertThrowsWith(() => getRows(rows, indices), ShapeError, ["getRows", "[8, 10, 2]", "[3, 3]"]);
});

Deno.test("view and reshape errors name the tensor and the shapes", () => {
  const ctx = new Context();
  const a = ctx.newTensor("f32", [4, 3], "a");
  assertThrowsWith(() => reshape(a, [5, 2]), ShapeError, ["reshape", "a", "[5, 2]"]);
  assertThrowsWith(() => view(a, [4, 3], { offset: 4 }), ShapeError, ["view", "[4, 3]", "48"]);
  assertThrowsWith(() => ctx.newTensor("f32", [4, 0]), ShapeError, [
    "newTensor",
    "shape[1]",
    "[4, 0",
  ]);
});

Deno.test("acc, set, padCircular and bicubic interpolate refuse bad arguments, naming them", () => {
  const ctx = new Context();
  const a = ctx.newTensor("f32", [8, 4]);
  const b = ctx.newTensor("f32", [4, 2]);
  assert.equal(add(ctx.newTensor("f16", [4, 3]), ctx.newTensor("f32", [4, 1])).dtype, "f16");
  assert.equal(
    mul(ctx.newTensor("f16", [4, 3]), ctx.newTensor("f32", [4, 1]), { dtype: "f32" }).dtype,
    "f32",
  );
  assert.equal(acc(a, b, { offset: 20 * 4 }).dtype, "f32");
  assertThrowsWith(() => acc(a, b, { offset: 21 * 4 }), ShapeError, ["acc", "outside"]);
  assertThrowsWith(() => set(a, b, { nb1: 12 }), ShapeError, ["set", "nb1 = 12", "overlap"]);
  assertThrowsWith(() => set(a, b, { offset: 6 }), ArgumentError, ["set", "offset", "6"]);
  assertThrowsWith(() => set(a, b, { nb2: -4 }), ArgumentError, ["set", "nb2", "-4"]);
  assertThrowsWith(() => acc(ctx.newTensor("i32", [8]), ctx.newTensor("i32", [2])), DTypeError, [
    "acc",
    "i32",
  ]);
  assertThrowsWith(() => set(a, ctx.newTensor("f16", [4])), DTypeError, ["set", "f16"]);
  assertThrowsWith(() => set(transpose(a), b), ShapeError, ["set", "contiguous"]);
  assertThrowsWith(() => set1d(a, b, 0), ShapeError, ["set1d", "one-dimensional"]);
  assertThrowsWith(() => padCircular(a, { left: [-1, 0, 0, 0] }), ShapeError, [
    "padCircular",
    "left[0]",
    "-1",
  ]);
  assertThrowsWith(
    () => interpolate(a, [16, 8], { mode: "nearest", alignCorners: true }),
    ArgumentError,
    ["interpolate", "alignCorners"],
  );
  assert.equal(interpolate(a, [16, 8], { mode: "bicubic", alignCorners: true }).ne[0], 16);
});

Deno.test("ops given a dtype they do not take throw DTypeError naming the op and dtype", () => {
  const ctx = new Context();
  const f32 = ctx.newTensor("f32", [4, 3]);
  const f16 = ctx.newTensor("f16", [4, 3]);
  const i32 = ctx.newTensor("i32", [4, 3]);
  // ggml-cpu takes an f16 src0 with an f32 src1, never the other way round.
  assertThrowsWith(() => add(f32, f16), DTypeError, ["add", "f16"]);
  assertThrowsWith(() => add(f32, f32, { dtype: "f16" }), DTypeError, ["add", "f16", "f32"]);
  assertThrowsWith(() => add(f32, i32), DTypeError, ["add", "i32"]);
  assertThrowsWith(() => mulMat(i32, f32), DTypeError, ["mulMat", "i32"]);
  assertThrowsWith(() => mulMat(f32, f16), DTypeError, ["mulMat", "f16"]);
  assertThrowsWith(() => sum(i32), DTypeError, ["sum", "i32"]);
  assertThrowsWith(() => getRows(f32, ctx.newTensor("f32", [2])), DTypeError, ["getRows", "f32"]);
  assertThrowsWith(() => softmax(f32, { mask: f16 }), DTypeError, ["softmax", "f16"]);
});

Deno.test("cpy between i32 and f32 throws DTypeError", () => {
  const ctx = new Context();
  const i32 = ctx.newTensor("i32", [4, 3]);
  const f32 = ctx.newTensor("f32", [4, 3]);
  // DTypeError is documented as "a dtype an op does not accept"; src/ops/copy.ts throws
  // ShapeError("cpy: cannot copy i32 into f32") instead.
  assertThrowsWith(() => cpy(i32, f32), DTypeError, ["cpy", "i32", "f32"]);
});

// ---------------------------------------------------------------------------------------------
// Tensor access.

Deno.test("setTensor and getTensor outside a tensor throw OutOfBoundsError", () => {
  using cpu = new CpuBackend({ threads: 1 });
  const ctx = new Context();
  const a = ctx.newTensor("f32", [4, 3], "a");
  using _buffer = allocTensors(cpu, ctx.tensors);
  assertThrowsWith(() => cpu.setTensor(a, new Float32Array(13)), OutOfBoundsError, [
    "setTensor",
    "52",
    "48",
  ]);
  assertThrowsWith(() => cpu.setTensor(a, new Float32Array(2), 44), OutOfBoundsError, ["[44"]);
  assertThrowsWith(() => cpu.setTensor(a, new Float32Array(1), -4), OutOfBoundsError, ["-4"]);
  assertThrowsWith(() => cpu.getTensor(a, 40, 12), OutOfBoundsError, ["getTensor", "52"]);
  assertThrowsWith(() => cpu.getTensor(a, 49), OutOfBoundsError, ["getTensor"]);
  // The tensor is still usable afterwards.
  cpu.setTensor(a, new Float32Array(12).fill(2));
  assert.deepEqual(Array.from(cpu.getTensor(a, 44, 4)), [2]);
});

Deno.test("setTensor and getTensor on a tensor without memory throw PlacementError", () => {
  using cpu = new CpuBackend({ threads: 1 });
  const ctx = new Context();
  const a = ctx.newTensor("f32", [4], "unplaced");
  assertThrowsWith(() => cpu.setTensor(a, new Float32Array(4)), PlacementError, [
    "setTensor",
    "unplaced",
  ]);
  assertThrowsWith(() => cpu.getTensor(a), PlacementError, ["getTensor", "unplaced"]);
  const graph = Graph.build(add(a, a));
  assertThrowsWith(() => cpu.graphCompute(graph), PlacementError, ["graphPlanCreate"]);
});

Deno.test("a tensor on another CPU backend is refused with PlacementError", () => {
  using first = new CpuBackend({ threads: 1 });
  using second = new CpuBackend({ threads: 1 });
  const ctx = new Context();
  const a = ctx.newTensor("f32", [4]);
  using _buffer = allocTensors(first, ctx.tensors);
  assertThrowsWith(() => second.setTensor(a, new Float32Array(4)), PlacementError, ["cpu"]);
});

// ---------------------------------------------------------------------------------------------
// Dispose.

Deno.test("using a disposed buffer, backend or plan throws DisposedError", () => {
  const cpu = new CpuBackend({ threads: 1 });
  const ctx = new Context();
  const a = ctx.newTensor("f32", [4], "a");
  const b = add(a, a);
  const graph = Graph.build(b);
  const buffer = allocTensors(cpu, [a, ...graph.nodes]);
  const plan = cpu.graphPlanCreate(graph);
  plan.dispose();
  assertThrowsWith(() => cpu.graphPlanCompute(plan), DisposedError, ["plan"]);
  buffer.dispose();
  assertThrowsWith(() => cpu.setTensor(a, new Float32Array(4)), DisposedError, ["a"]);
  assertThrowsWith(() => cpu.getTensor(b), DisposedError, ["disposed"]);
  assertThrowsWith(() => cpu.graphPlanCreate(graph), DisposedError, ["disposed"]);
  cpu.dispose();
  assertThrowsWith(() => cpu.allocBuffer(64), DisposedError, ["allocBuffer"]);
  assertThrowsWith(() => cpu.setTensor(a, new Float32Array(4)), DisposedError, ["setTensor"]);
  assertThrowsWith(() => cpu.graphCompute(graph), DisposedError, ["disposed"]);
  assertThrowsWith(() => cpu.setThreads(2), DisposedError, ["setThreads"]);
});

Deno.test("disposing a buffer, backend, plan or allocator twice throws DisposedError", () => {
  const cpu = new CpuBackend({ threads: 1 });
  const buffer = cpu.allocBuffer(256);
  buffer.dispose();
  assertThrowsWith(() => buffer.dispose(), DisposedError, ["buffer"]);
  const ctx = new Context();
  const a = ctx.newTensor("f32", [4]);
  const graph = Graph.build(add(a, a));
  using _memory = allocTensors(cpu, [a, ...graph.nodes]);
  const plan = cpu.graphPlanCreate(graph);
  cpu.graphPlanFree(plan);
  assertThrowsWith(() => plan.dispose(), DisposedError, ["plan"]);
  assertThrowsWith(() => cpu.graphPlanFree(plan), DisposedError, ["plan"]);
  cpu.dispose();
  assertThrowsWith(() => cpu.dispose(), DisposedError, ["disposed"]);
  const allocator = new Allocator(1024);
  allocator.dispose();
  assertThrowsWith(() => allocator.dispose(), DisposedError, ["disposed"]);
  // `using` after an explicit dispose is a no-op, not an error.
  buffer[Symbol.dispose]();
  cpu[Symbol.dispose]();
});

// ---------------------------------------------------------------------------------------------
// Plans.

function smallGraph(cpu: CpuBackend, n: number): {
  graph: Graph;
  memory: Disposable;
  a: Tensor;
  out: Tensor;
} {
  const ctx = new Context();
  const a = ctx.newTensor("f32", [n]);
  const out = mul(add(a, a), a);
  const graph = Graph.build(out);
  const memory = allocTensors(cpu, [a, ...graph.nodes]);
  return { graph, memory, a, out };
}

Deno.test("computing a plan whose buffer was disposed is refused, not a use after free", () => {
  using cpu = new CpuBackend({ threads: 2 });
  const { graph, memory } = smallGraph(cpu, 33);
  using plan = cpu.graphPlanCreate(graph);
  cpu.graphPlanCompute(plan);
  memory[Symbol.dispose]();
  let caught: unknown = null;
  try {
    cpu.graphPlanCompute(plan);
  } catch (error) {
    caught = error;
  }
  assert.ok(
    caught instanceof StalePlanError || caught instanceof DisposedError,
    `expected StalePlanError or DisposedError, got ${String(caught)}`,
  );
  // The backend still computes other graphs.
  const other = smallGraph(cpu, 7);
  using _other = other.memory;
  cpu.setTensor(other.a, new Float32Array(7).fill(3));
  cpu.graphCompute(other.graph);
  assert.deepEqual(Array.from(cpu.getTensor(other.out)), new Array(7).fill(18));
});

Deno.test("graphPlanCompute with a graph the plan was not made for throws StalePlanError", () => {
  using cpu = new CpuBackend({ threads: 1 });
  const first = smallGraph(cpu, 33);
  using _first = first.memory;
  const second = smallGraph(cpu, 34);
  using _second = second.memory;
  using plan = cpu.graphPlanCreate(first.graph);
  assertThrowsWith(() => cpu.graphPlanCompute(plan, second.graph), StalePlanError, [
    "graphPlanCompute",
    first.graph.identity().slice(0, 16),
    second.graph.identity().slice(0, 16),
  ]);
  cpu.graphPlanCompute(plan, first.graph);
});

Deno.test("a plan made before setThreads is refused with StalePlanError", () => {
  using cpu = new CpuBackend({ threads: 1 });
  const { graph, memory } = smallGraph(cpu, 8);
  using _memory = memory;
  using plan = cpu.graphPlanCreate(graph);
  cpu.setThreads(2);
  assertThrowsWith(() => cpu.graphPlanCompute(plan), StalePlanError, ["threads"]);
});

Deno.test("getRows with an out-of-range index fails at compute time and the backend lives", () => {
  using cpu = new CpuBackend({ threads: 2 });
  const ctx = new Context();
  const rows = ctx.newTensor("f32", [33, 5]);
  const indices = ctx.newTensor("i32", [3]);
  const out = getRows(rows, indices);
  const graph = Graph.build(out);
  using _memory = allocTensors(cpu, [...ctx.tensors, ...graph.nodes]);
  cpu.setTensor(rows, new Float32Array(33 * 5).map((_, i) => i));
  for (const bad of [[0, 5, 1], [-1, 0, 0], [2, 0x7fffffff, 1]]) {
    cpu.setTensor(indices, Int32Array.from(bad));
    let caught: unknown = null;
    try {
      cpu.graphCompute(graph);
    } catch (error) {
      caught = error;
    }
    assert.ok(
      caught instanceof OutOfBoundsError || caught instanceof NativeError,
      `index ${bad}: expected OutOfBoundsError or NativeError, got ${String(caught)}`,
    );
  }
  cpu.setTensor(indices, Int32Array.from([4, 0, 2]));
  cpu.graphCompute(graph);
  const got = cpu.getTensor(out);
  assert.equal(got[0], 4 * 33);
  assert.equal(got[33], 0);
  assert.equal(got[66 + 32], 2 * 33 + 32);
});

Deno.test("setRows with an out-of-range index fails before writing and the backend lives", () => {
  using cpu = new CpuBackend({ threads: 2 });
  const ctx = new Context();
  const cache = ctx.newTensor("f32", [8, 4]);
  const rows = ctx.newTensor("f32", [8, 2]);
  const indices = ctx.newTensor("i32", [2]);
  const out = setRows(cache, rows, indices);
  const graph = Graph.build(out);
  using _memory = allocTensors(cpu, [...ctx.tensors, ...graph.nodes]);
  cpu.setTensor(cache, new Float32Array(32).fill(-1));
  cpu.setTensor(rows, new Float32Array(16).map((_, i) => i));
  for (const bad of [[0, 4], [-1, 1], [3, 0x7fffffff]]) {
    cpu.setTensor(indices, Int32Array.from(bad));
    assertThrowsWith(() => cpu.graphCompute(graph), OutOfBoundsError, []);
    assert.ok(cpu.getTensor(cache).every((x) => x === -1), `index ${bad}: nothing written`);
  }
  cpu.setTensor(indices, Int32Array.from([3, 1]));
  cpu.graphCompute(graph);
  const got = cpu.getTensor(cache);
  assert.equal(got[3 * 8], 0);
  assert.equal(got[8 + 7], 15);
  assert.equal(got[0], -1);
  assert.throws(() => setRows(cache, rows, ctx.newTensor("i32", [3])), ShapeError);
  assert.throws(() => setRows(cache, ctx.newTensor("i32", [8, 2]), indices), DTypeError);
});

// ---------------------------------------------------------------------------------------------
// The native library.

const canRun = Deno.permissions.querySync({ name: "run" }).state === "granted";
if (!canRun) {
  console.log("bad_input_test: no --allow-run: the missing-library subprocess test is ignored");
}

Deno.test({
  name: "a missing or broken library gives LibraryLoadError naming the paths and the build",
  ignore: !canRun,
  fn: async () => {
    // A copy of the loader outside the repository: its build-output fallback does not exist.
    const dir = await Deno.makeTempDir({ prefix: "graft-missing-lib-" });
    try {
      const loader = await copyLoader(dir);
      const broken = `${dir}/broken.so`;
      await Deno.writeTextFile(broken, "not a shared object");
      const script = `
      import { loadLibrary } from ${JSON.stringify(loader)};
      const report = (f) => {
        try { f(); return { loaded: true }; }
        catch (e) { return { name: e.name, message: e.message }; }
      };
      const missing = report(() => loadLibrary({ path: "/nonexistent/explicit.so" }));
      const bad = report(() => loadLibrary({ path: ${JSON.stringify(broken)} }));
      console.log(JSON.stringify({ missing, bad, alive: true }));
    `;
      const output = await new Deno.Command(Deno.execPath(), {
        args: ["eval", script],
        cwd: dir,
        env: { GRAFT_LIB: "/nonexistent/env.so" },
        stdout: "piped",
        stderr: "piped",
      }).output();
      const stderr = new TextDecoder().decode(output.stderr);
      assert.equal(output.code, 0, `the subprocess exits cleanly: ${stderr}`);
      const result = JSON.parse(new TextDecoder().decode(output.stdout)) as {
        missing: { name: string; message: string };
        bad: { name: string; message: string };
        alive: boolean;
      };
      assert.equal(result.alive, true);
      assert.equal(result.missing.name, new LibraryLoadError("").name);
      for (const part of ["/nonexistent/explicit.so", "/nonexistent/env.so", "zig-out/lib"]) {
        assert.ok(result.missing.message.includes(part), `${result.missing.message} lists ${part}`);
      }
      assert.ok(result.missing.message.includes("./scripts/zig build"), "says how to build it");
      assert.equal(result.bad.name, "LibraryLoadError");
      assert.ok(result.bad.message.includes(broken), result.bad.message);
      assert.ok(result.bad.message.includes("could not be loaded"), result.bad.message);
      assert.ok(result.bad.message.includes("./scripts/zig build"), result.bad.message);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test("the core: freeing a buffer twice returns invalid handle, not a crash", () => {
  const lib = loadLibrary();
  const handle = new Uint32Array(1);
  const address = new BigUint64Array(1);
  assert.equal(lib.graft_buffer_alloc(256n, handle, address), Status.ok);
  assert.ok(address[0]! % 64n === 0n, "buffers are 64-byte aligned");
  assert.equal(lib.graft_buffer_free(handle[0]!), Status.ok);
  assert.equal(lib.graft_buffer_free(handle[0]!), Status.invalidHandle);
  assert.match(lastError(lib), /not live/);
  const bytes = new Uint8Array(4);
  assert.equal(lib.graft_buffer_write(handle[0]!, 0n, bytes, 4n), Status.invalidHandle);
  assert.equal(lib.graft_buffer_free(0), Status.invalidHandle);
});

Deno.test("the core: reads and writes outside a buffer return out of bounds (-3)", () => {
  const lib = loadLibrary();
  const handle = new Uint32Array(1);
  const address = new BigUint64Array(1);
  assert.equal(lib.graft_buffer_alloc(256n, handle, address), Status.ok);
  try {
    const bytes = new Uint8Array(16);
    assert.equal(lib.graft_buffer_write(handle[0]!, 248n, bytes, 16n), Status.outOfBounds);
    assert.equal(Status.outOfBounds, -3);
    assert.match(lastError(lib), /outside the buffer of 256 bytes/);
    assert.equal(lib.graft_buffer_write(handle[0]!, 257n, bytes, 0n), Status.outOfBounds);
    assert.equal(
      lib.graft_buffer_write(handle[0]!, 2n ** 64n - 8n, bytes, 16n),
      Status.outOfBounds,
      "offset + length overflowing 64 bits is out of bounds",
    );
    assert.equal(lib.graft_buffer_read(handle[0]!, 241n, bytes, 16n), Status.outOfBounds);
    assert.equal(lib.graft_buffer_write(handle[0]!, 240n, bytes, 16n), Status.ok);
    assert.equal(lib.graft_buffer_fill(handle[0]!, 200n, 57n, 0), Status.outOfBounds);
    assert.equal(lib.graft_buffer_copy(handle[0]!, 0n, handle[0]!, 200n, 64n), Status.outOfBounds);
  } finally {
    assert.equal(lib.graft_buffer_free(handle[0]!), Status.ok);
  }
});

Deno.test("the core: a plan whose node points outside every buffer is rejected at create", () => {
  const lib = loadLibrary();
  using cpu = new CpuBackend({ threads: 1 });
  using buffer = cpu.allocBuffer(64);
  const ctx = new Context();
  const a = ctx.newTensor("f32", [1031]);
  const nodes = computeNodes(Graph.build(add(a, a)).nodes);
  const handle = new Uint32Array(1);
  const work = new BigUint64Array(1);
  const create = (table: Uint8Array): number =>
    lib.graft_plan_create(table, nodes.length, 1, 0, handle, work);
  // An address in no buffer.
  assert.equal(create(encodeNodeTable(nodes, () => 0x10000n)), Status.outOfBounds);
  assert.match(lastError(lib), /no live buffer/);
  // Inside a buffer, but running past its end.
  assert.equal(create(encodeNodeTable(nodes, () => buffer.address)), Status.outOfBounds);
  assert.match(lastError(lib), /past the end/);
  // A null address and an unknown op are refused too.
  assert.equal(create(encodeNodeTable(nodes, () => 0n)), Status.invalidArgument);
  const table = encodeNodeTable(nodes, () => buffer.address);
  new DataView(table.buffer).setUint32(0, 999, true);
  assert.equal(create(table), Status.unsupported);
  assert.equal(table.length, NODE_SIZE);
  assert.equal(liveAllocations().plans, 0, "no plan was made");
});

Deno.test("bad_input_test leaves no native buffers, pools or plans alive", () => {
  assertNothingLive(baseline);
});

Deno.test("dims that are BigInts, NaN, fractional or too large are ShapeErrors naming them", () => {
  const ctx = new Context();
  const cases: [unknown[], RegExp][] = [
    [[4, 2n], /shape\[1\].*got 2n \(a BigInt\)/],
    [[NaN, 2], /shape\[0\].*got NaN/],
    [[4, 1.5], /shape\[1\].*got 1.5/],
    [[-3], /shape\[0\].*got -3/],
    [[2 ** 30, 2 ** 30, 2 ** 30], /more than 2\^53 elements/],
  ];
  for (const [shape, message] of cases) {
    assertThrowsWith(
      () => ctx.newTensor("f32", shape as unknown as [number]),
      ShapeError,
      ["newTensor"],
    );
    assert.throws(() => ctx.newTensor("f32", shape as unknown as [number]), message);
  }
});

Deno.test("an unknown dtype name is a DTypeError listing the dtypes", () => {
  const ctx = new Context();
  assertThrowsWith(() => ctx.newTensor("f64" as "f32", [4]), DTypeError, [
    "newTensor",
    '"f64"',
    "f32, f16, i32",
  ]);
});

Deno.test("negative strides are refused where the view is made, on every backend alike", () => {
  const ctx = new Context();
  const a = ctx.newTensor("f32", [4, 3], "a");
  assertThrowsWith(() => view(a, [4], { nb: [-4, 16, 48, 48], offset: 12 }), ShapeError, [
    "view",
    "strides[0]",
    "-4",
  ]);
});

Deno.test("cpy between overlapping source and destination is refused at build time", () => {
  const ctx = new Context();
  const s = ctx.newTensor("f32", [4, 4], "s");
  // Wrong before: the kernel read elements it had already overwritten.
  assertThrowsWith(() => cpy(transpose(s), s), ShapeError, ["cpy", "overlap"]);
  const other = ctx.newTensor("f32", [4, 4], "other");
  cpy(transpose(s), other); // disjoint: fine
  cpy(s, s); // the same elements in the same layout: a copy onto itself is harmless
});

Deno.test("writing a typed array of another element type is a DTypeError", async () => {
  using cpu = new CpuBackend({ threads: 1 });
  const ctx = new Context();
  const h = ctx.newTensor("f16", [4], "h");
  using _memory = allocTensors(cpu, [h]);
  // Before: the Float32Array's bytes were copied raw, 8 f16 garbage values from 4 floats.
  assertThrowsWith(() => cpu.setTensor(h, new Float32Array(2)), DTypeError, [
    "setTensor",
    "Float16Array",
    "Float32Array",
  ]);
  await assert.rejects(cpu.setTensorAsync(h, new Int32Array(2)), DTypeError);
  cpu.setTensor(h, new Float16Array([1, 2, 3, 4]));
  cpu.setTensor(h, new Uint8Array(8)); // raw bytes stay allowed
  cpu.setTensor(h, new Uint16Array(4)); // and raw f16 bit patterns
});

Deno.test("allocBuffer sizes above 2^53 are refused instead of wrapping", () => {
  using cpu = new CpuBackend({ threads: 1 });
  // 2^64 + 4096 reached the core as 4096: a 4 KiB buffer for an exabyte request.
  for (const size of [2 ** 64 + 4096, 2 ** 53 + 2, -1, 0, 1.5, NaN]) {
    assertThrowsWith(() => cpu.allocBuffer(size), ArgumentError, ["allocBuffer", "size"]);
  }
});

Deno.test("closeLibrary refuses while a thread pool or a buffer is alive", () => {
  {
    using cpu = new CpuBackend({ threads: 2 });
    assert.throws(() => closeLibrary(), /native objects are alive \(1 thread pool\(s\)/);
    assert.equal(cpu.threads, 2, "the backend still works");
    using _buffer = cpu.allocBuffer(64);
    assert.throws(() => closeLibrary(), /1 buffer\(s\)/);
  }
  assert.equal(liveAllocations().pools, 0);
});
