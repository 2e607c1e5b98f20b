/**
 * The shape and indexing ops on WebGPU against the CPU backend (itself checked against a
 * float64 reference in ops_indexing_test.ts): the same seeded graphs on both, f32, f16 and i32,
 * contiguous, transposed and strided sources. The element-moving ops and the sorts must match
 * bit for bit; repeatBack (compensated f32 sums against the CPU's f64) and arange (the device
 * may fuse start + step * i) within a normalized error like test-backend-ops'. Skipped, visibly,
 * when Deno finds no adapter.
 */

import assert from "node:assert/strict";
import { closeSharedWebGpuTest, sharedWebGpu } from "./gpu.ts";
import { SORT_COLUMNS_MAX } from "../src/backend/webgpu/kernels_indexing.ts";
import {
  add,
  allocTensors,
  arange,
  argsort,
  type Backend,
  concat,
  Context,
  CpuBackend,
  diagMaskInf,
  fill,
  getRows,
  Graph,
  OutOfBoundsError,
  pad,
  padExt,
  padReflect1d,
  planGraph,
  repeatBack,
  roll,
  scale,
  setRows,
  type Tensor,
  topK,
  transpose,
  tri,
  view,
} from "../mod.ts";
import {
  assertBytesEqual,
  assertClose,
  dims,
  type Dims4,
  fromBytes,
  type RefDType,
  Rng,
} from "./reference.ts";

const gpu = await sharedWebGpu();

const SIZE: Readonly<Record<RefDType, number>> = { f32: 4, f16: 2, i32: 4 };
type Layout = "contiguous" | "transposed" | "strided";
const LAYOUTS: readonly Layout[] = ["contiguous", "transposed", "strided"];
const MOVED: readonly RefDType[] = ["f32", "f16", "i32"];

/** Seeded inputs (the same for both backends). */
class Feed {
  readonly ctx = new Context();
  readonly inputs: [Tensor, Uint8Array][] = [];
  readonly rng = new Rng(0x51ed);

  raw(dtype: RefDType | "i64", shape: readonly number[], bytes: Uint8Array): Tensor {
    const t = this.ctx.newTensor(dtype, dims(shape));
    this.inputs.push([t, bytes]);
    return t;
  }

  input(dtype: RefDType, shape: readonly number[], layout: Layout): Tensor {
    const ne = dims(shape);
    const base: Dims4 = layout === "transposed"
      ? [ne[1], ne[0], ne[2], ne[3]]
      : layout === "strided"
      ? [ne[0] + 3, ne[1], ne[2], ne[3]]
      : ne;
    const count = base[0] * base[1] * base[2] * base[3];
    const data = dtype === "f32"
      ? this.rng.f32(count)
      : dtype === "f16"
      ? this.rng.f16(count)
      : Int32Array.from({ length: count }, () => this.rng.int(2000) - 1000);
    const t = this.raw(dtype, base, new Uint8Array(data.buffer));
    if (layout === "transposed") return transpose(t);
    if (layout === "contiguous") return t;
    const s = SIZE[dtype];
    const st = [1, base[0], base[0] * ne[1], base[0] * ne[1] * ne[2]];
    return view(t, ne, { nb: [s, st[1]! * s, st[2]! * s, st[3]! * s], offset: 2 * s });
  }
}

interface Out {
  tensor: Tensor;
  label: string;
  /** Must equal the CPU's bytes; otherwise within a normalized error. */
  exact: boolean;
}

function i64(values: readonly number[]): Uint8Array {
  return new Uint8Array(BigInt64Array.from(values.map(BigInt)).buffer);
}

/** Every op of the family, with each dtype and layout it takes. */
function cases(f: Feed): Out[] {
  const outs: Out[] = [];
  const exact = (tensor: Tensor, label: string): void => {
    outs.push({ tensor, label, exact: true });
  };
  for (const dtype of MOVED) {
    for (const [i, layout] of LAYOUTS.entries()) {
      const a = f.input(dtype, [9, 9, 3, 2], layout);
      for (let dim = 0; dim < 4; dim++) {
        const shape = [9, 9, 3, 2];
        shape[dim] = 2;
        exact(concat(a, f.input(dtype, shape, LAYOUTS[(i + 1) % 3]!), dim), `concat ${dim}`);
      }
      exact(pad(a, [3, 1, 2, 0]), "pad");
      exact(padExt(a, { left: [2, 1, 0, 1], right: [1, 0, 2, 1] }), "padExt");
      exact(padReflect1d(a, 3, 8), "padReflect1d");
      exact(roll(a, [3, -2, 1, -1]), "roll");
      for (const kind of ["upperDiag", "upper", "lowerDiag", "lower"] as const) {
        exact(tri(a, kind), `tri ${kind}`);
      }
      if (dtype === "i32") continue;
      exact(diagMaskInf(a, 2), "diagMaskInf");
      exact(fill(a, 0.1), "fill");
      exact(argsort(a, "asc"), "argsort asc");
      exact(argsort(a, "desc"), "argsort desc");
      exact(topK(a, 4), "topK");
      outs.push({ tensor: repeatBack(a, [3, 3, 1, 2]), label: "repeatBack", exact: false });
    }
  }
  // Ties and NaN order the same way on both backends.
  const tied = new Float32Array([2, NaN, -1, 2, 0, NaN, 2, -Infinity, Infinity]);
  const t = f.raw("f32", [9], new Uint8Array(tied.buffer));
  exact(argsort(t, "asc"), "argsort ties");
  exact(argsort(t, "desc"), "argsort ties desc");
  exact(topK(t, 5), "topK ties");
  outs.push({ tensor: arange(-1, 7, 0.3), label: "arange", exact: false });
  for (const table of MOVED) {
    const a = f.input(table, [17, 9, 3], "strided");
    const picks = Array.from({ length: 15 }, () => f.rng.int(9));
    exact(getRows(a, f.raw("i64", [5, 3], i64(picks))), `getRows ${table} i64`);
    const i32 = new Uint8Array(Int32Array.from(picks).buffer);
    exact(getRows(a, f.raw("i32", [5, 3], i32)), `getRows ${table} i32`);
  }
  for (const from of ["f32", "f16"] as const) {
    for (const to of ["f32", "f16"] as const) {
      const target = f.input(to, [19, 11, 2], "contiguous");
      const rows = f.input(from, [19, 4, 2], "transposed");
      exact(setRows(target, rows, f.raw("i64", [4, 2], i64([3, 0, 10, 7, 1, 2, 9, 5]))), "setRows");
    }
  }
  const target = f.input("f16", [19, 11, 2, 2], "contiguous");
  const rows = f.input("f32", [19, 4, 2, 2], "strided");
  exact(
    setRows(target, rows, f.raw("i64", [4, 1, 2], i64([6, 1, 8, 3, 0, 2, 9, 4]))),
    "setRows bcast",
  );
  return outs;
}

async function run(backend: Backend): Promise<{ outs: Out[]; bytes: Uint8Array[] }> {
  const f = new Feed();
  const outs = cases(f);
  const graph = Graph.build(...outs.map((o) => o.tensor));
  using _memory = allocTensors(backend, [...f.ctx.tensors, ...graph.leafs, ...graph.nodes]);
  for (const [t, data] of f.inputs) backend.setTensor(t, data);
  backend.graphCompute(graph);
  const bytes: Uint8Array[] = [];
  for (const o of outs) {
    const data = await backend.getTensorAsync(o.tensor);
    bytes.push(new Uint8Array(data.buffer, data.byteOffset, data.byteLength).slice());
  }
  return { outs, bytes };
}

Deno.test({
  name: "webgpu: the shape and indexing ops match the CPU backend",
  ignore: gpu === null,
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    using cpu = new CpuBackend({ threads: 2 });
    const expected = await run(cpu);
    const got = await run(gpu!);
    for (const [i, o] of got.outs.entries()) {
      assert.ok(gpu!.supportsOp(o.tensor), `webgpu supports ${o.label}`);
      const label = `${o.label} ${o.tensor.label}`;
      if (o.exact) {
        assertBytesEqual(got.bytes[i]!, expected.bytes[i]!, label);
        continue;
      }
      const t = o.tensor;
      const read = (b: Uint8Array) => fromBytes(b, t.dtype as RefDType, t.ne, t.nb);
      // f32 sums in another order (or a fused multiply-add): a few ulps; f16 one rounding.
      const rtol = t.dtype === "f16" ? 2 ** -10 : 1e-6;
      assertClose(
        read(got.bytes[i]!),
        read(expected.bytes[i]!),
        { nmse: 1e-9, rtol, atol: 1e-6 },
        label,
      );
    }
  },
});

Deno.test({
  name: "webgpu: an i64 row index out of range is reported as an OutOfBoundsError",
  ignore: gpu === null,
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    for (const bad of [-1n, 9n, 1n << 40n]) {
      const ctx = new Context();
      const table = ctx.newTensor("f32", [4, 9]);
      const indices = ctx.newTensor("i64", [3]);
      const out = getRows(table, indices);
      using _m = allocTensors(gpu!, [table, indices, out]);
      gpu!.setTensor(table, new Float32Array(36));
      gpu!.setTensor(indices, new Uint8Array(BigInt64Array.from([0n, bad, 2n]).buffer));
      gpu!.graphCompute(Graph.build(out));
      await assert.rejects(gpu!.synchronize(), OutOfBoundsError);
    }
  },
});

Deno.test({
  name: "webgpu: sorts of rows longer than SORT_COLUMNS_MAX are left to the CPU",
  ignore: gpu === null,
  sanitizeResources: false,
  sanitizeOps: false,
  fn: () => {
    const ctx = new Context();
    const short = ctx.newTensor("f32", [SORT_COLUMNS_MAX, 2]);
    const long = ctx.newTensor("f32", [SORT_COLUMNS_MAX + 1, 2]);
    assert.ok(gpu!.supportsOp(argsort(short)));
    assert.equal(gpu!.supportsOp(argsort(long)), false);
    assert.equal(gpu!.supportsOp(topK(long, 3)), false);
  },
});

Deno.test({
  name: "webgpu: tri, diagMaskInf and fill planned in place match the CPU",
  ignore: gpu === null,
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    using cpu = new CpuBackend({ threads: 2 });
    const results: Uint8Array[] = [];
    for (const backend of [cpu, gpu!] as Backend[]) {
      const ctx = new Context();
      const x = ctx.newTensor("f32", [9, 9, 2], "x");
      const masked = diagMaskInf(tri(scale(x, 2), "lowerDiag"), 1);
      const out = add(masked, fill(scale(x, 3), 0.5));
      const graph = Graph.build(out);
      const plan = planGraph(graph, { alignment: backend.alignment });
      assert.match(plan.report(), /\) tri @\d+ .* in place of/);
      using _x = allocTensors(backend, [x]);
      using _nodes = plan.allocate(backend);
      backend.setTensor(x, new Rng(10).f32(9 * 9 * 2));
      backend.graphCompute(graph);
      const data = await backend.getTensorAsync(out);
      results.push(new Uint8Array(data.buffer, data.byteOffset, data.byteLength).slice());
    }
    assertBytesEqual(results[1]!, results[0]!, "in-place chain");
  },
});

closeSharedWebGpuTest();
