/**
 * The shape and indexing ops (concat, pad, padExt, padReflect1d, roll, repeatBack, argsort,
 * topK, tri, diagMaskInf, fill, arange; getRows and setRows with i64 indices) on the CPU
 * against a float64 reference, on odd sizes, contiguous, transposed and strided sources, in
 * f32, f16 and i32 where the op takes them. Each case runs on every kernel build the CPU has,
 * with 1 and 2 threads (bitwise equal). The element-moving ops must be exact (bit copies);
 * repeatBack sums in f64 and rounds once; arange is start + step * i in f32, emulated exactly.
 */

import assert from "node:assert/strict";
import { assertNothingLive } from "./leaks.ts";
import {
  add,
  allocTensors,
  arange,
  argsort,
  concat,
  Context,
  CpuBackend,
  diagMaskInf,
  DTypeError,
  fill,
  getRows,
  Graph,
  liveAllocations,
  NativeError,
  Op,
  OutOfBoundsError,
  pad,
  padExt,
  padReflect1d,
  planGraph,
  repeatBack,
  roll,
  scale,
  setRows,
  ShapeError,
  simdLevels,
  Tensor,
  topK,
  transpose,
  tri,
  type TriKind,
  view,
} from "../mod.ts";
import {
  assertBytesEqual,
  assertClose,
  dims,
  type Dims4,
  F32_ULP,
  forEachIndex,
  fromBytes,
  type RefDType,
  refGetRows,
  refSetRows,
  RefTensor,
  refTranspose,
  refView,
  Rng,
  roundF16,
  TOL_EXACT,
  type Tolerance,
} from "./reference.ts";

const baseline = liveAllocations();
const SIMD_LEVELS = simdLevels();

type Layout = "contiguous" | "transposed" | "strided";
const LAYOUTS: readonly Layout[] = ["contiguous", "transposed", "strided"];
const MOVED: readonly RefDType[] = ["f32", "f16", "i32"];

interface Check {
  tensor: Tensor;
  want: RefTensor;
  tol: Tolerance;
  label: string;
}

const SIZE: Readonly<Record<RefDType, number>> = { f32: 4, f16: 2, i32: 4 };

/** Seeded inputs of a case and their reference values. */
class Feed {
  readonly ctx = new Context();
  readonly inputs: [Tensor, Uint8Array][] = [];
  readonly rng: Rng;

  constructor(seed: number) {
    this.rng = new Rng(seed);
  }

  /** Values of a dtype: f32/f16 in [lo, hi) (never 0), i32 in [-1000, 1000). */
  values(dtype: RefDType, count: number, lo = -1, hi = 1): Uint8Array {
    const data = dtype === "f32"
      ? this.rng.f32(count, lo, hi)
      : dtype === "f16"
      ? this.rng.f16(count, lo, hi)
      : Int32Array.from({ length: count }, () => this.rng.int(2000) - 1000);
    return new Uint8Array(data.buffer);
  }

  raw(dtype: RefDType | "i64", shape: readonly number[], bytes: Uint8Array): Tensor {
    const t = this.ctx.newTensor(dtype, dims(shape));
    this.inputs.push([t, bytes]);
    return t;
  }

  /** An input of `shape` laid out as `layout`, with its reference. */
  input(dtype: RefDType, shape: readonly number[], layout: Layout, lo = -1, hi = 1): [
    Tensor,
    RefTensor,
  ] {
    const ne = dims(shape);
    const base: Dims4 = layout === "transposed"
      ? [ne[1], ne[0], ne[2], ne[3]]
      : layout === "strided"
      ? [ne[0] + 3, ne[1], ne[2], ne[3]]
      : ne;
    const count = base[0] * base[1] * base[2] * base[3];
    const bytes = this.values(dtype, count, lo, hi);
    const t = this.raw(dtype, base, bytes);
    const r = fromBytes(bytes, dtype, base, [
      SIZE[dtype],
      SIZE[dtype] * base[0],
      SIZE[dtype] * base[0] * base[1],
      SIZE[dtype] * base[0] * base[1] * base[2],
    ]);
    if (layout === "transposed") return [transpose(t), refTranspose(r)];
    if (layout === "strided") {
      const s = SIZE[dtype];
      const st: Dims4 = [1, base[0], base[0] * ne[1], base[0] * ne[1] * ne[2]];
      const v = view(t, ne, { nb: [s, st[1] * s, st[2] * s, st[3] * s], offset: 2 * s });
      return [v, refView(r, ne, st, 2)];
    }
    return [t, r];
  }
}

function bytesOf(data: ArrayBufferView): Uint8Array {
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength).slice();
}

/** Runs a case on every kernel build with 1 and 2 threads and checks each result. */
function checkCase(seed: number, build: (feed: Feed) => Check[]): void {
  for (const simd of SIMD_LEVELS) {
    using cpu = new CpuBackend({ simd, threads: 1 });
    const feed = new Feed(seed);
    const checks = build(feed);
    const graph = Graph.build(...checks.map((c) => c.tensor));
    using _memory = allocTensors(cpu, [...feed.ctx.tensors, ...graph.leafs, ...graph.nodes]);
    const owners = graph.nodes.filter((t) => !t.viewSource);
    const runs: Uint8Array[][] = [];
    for (const threads of [1, 2]) {
      if (cpu.threads !== threads) cpu.setThreads(threads);
      for (const t of owners) cpu.setTensor(t, new Uint8Array(t.nbytes).fill(0xff));
      for (const [t, data] of feed.inputs) cpu.setTensor(t, data);
      cpu.graphCompute(graph);
      runs.push(checks.map((c) => bytesOf(cpu.getTensor(c.tensor))));
    }
    checks.forEach((check, i) => {
      const label = `${simd}: ${check.label}`;
      assertBytesEqual(runs[0]![i]!, runs[1]![i]!, `${label}: 1 thread vs 2 threads`);
      const t = check.tensor;
      const got = fromBytes(runs[0]![i]!, t.dtype as RefDType, t.ne, t.nb);
      assertClose(got, check.want, check.tol, label);
    });
  }
}

// ---------------------------------------------------------------------------------------------
// References (float64, on logical values).

function build(
  ne: Dims4,
  fn: (i0: number, i1: number, i2: number, i3: number) => number,
): RefTensor {
  const out = new Float64Array(ne[0] * ne[1] * ne[2] * ne[3]);
  forEachIndex(ne, (i0, i1, i2, i3, k) => {
    out[k] = fn(i0, i1, i2, i3);
  });
  return new RefTensor(ne, out);
}

function refConcat(a: RefTensor, b: RefTensor, dim: number): RefTensor {
  const ne = [...a.ne] as [number, number, number, number];
  ne[dim] = a.ne[dim]! + b.ne[dim]!;
  return build(ne, (...i) => {
    if (i[dim]! < a.ne[dim]!) return a.at(...i);
    const j = [...i] as [number, number, number, number];
    j[dim] = j[dim]! - a.ne[dim]!;
    return b.at(...j);
  });
}

function refPad(a: RefTensor, left: Dims4, right: Dims4): RefTensor {
  const ne = a.ne.map((n, d) => n + left[d]! + right[d]!) as unknown as Dims4;
  return build(ne, (...i) => {
    const j = i.map((x, d) => x - left[d]!) as [number, number, number, number];
    return j.every((x, d) => x >= 0 && x < a.ne[d]!) ? a.at(...j) : 0;
  });
}

function refPadReflect1d(a: RefTensor, p0: number, p1: number): RefTensor {
  const n = a.ne[0];
  return build([n + p0 + p1, a.ne[1], a.ne[2], a.ne[3]], (i0, i1, i2, i3) => {
    let j = i0 - p0;
    if (j < 0) j = -j;
    if (j >= n) j = 2 * (n - 1) - j;
    return a.at(j, i1, i2, i3);
  });
}

function refRoll(a: RefTensor, shifts: Dims4): RefTensor {
  return build(a.ne, (...i) => {
    const j = i.map((x, d) => (((x - shifts[d]!) % a.ne[d]!) + a.ne[d]!) % a.ne[d]!);
    return a.at(...(j as [number, number, number, number]));
  });
}

function refRepeatBack(a: RefTensor, ne: Dims4, round: (x: number) => number): RefTensor {
  const sums = build(ne, () => 0);
  forEachIndex(a.ne, (...i) => {
    const k = sums.index(i[0] % ne[0], i[1] % ne[1], i[2] % ne[2], i[3] % ne[3]);
    sums.data[k] = sums.data[k]! + a.at(i[0], i[1], i[2], i[3]);
  });
  return new RefTensor(ne, sums.data.map(round));
}

const TRI_KEEPS: Readonly<Record<TriKind, (c: number, r: number) => boolean>> = {
  upperDiag: (c, r) => c >= r,
  upper: (c, r) => c > r,
  lowerDiag: (c, r) => c <= r,
  lower: (c, r) => c < r,
};

function refTri(a: RefTensor, kind: TriKind): RefTensor {
  return build(a.ne, (...i) => TRI_KEEPS[kind](i[0], i[1]) ? a.at(...i) : 0);
}

function refDiagMaskInf(a: RefTensor, nPast: number): RefTensor {
  return build(a.ne, (...i) => i[0] > nPast + i[1] ? -Infinity : a.at(...i));
}

/** The stable order of a row (NaN above every number), ascending or descending. */
function sortedColumns(values: number[], descending: boolean): number[] {
  const key = (x: number): number => Number.isNaN(x) ? Infinity : x;
  const rank = (x: number): number => Number.isNaN(x) ? 1 : 0;
  const columns = values.map((_, i) => i);
  // Array.prototype.sort is stable.
  return columns.sort((p, q) => {
    const x = values[p]!, y = values[q]!;
    const order = key(x) - key(y) || rank(x) - rank(y);
    return descending ? -order : order;
  });
}

function refArgsort(a: RefTensor, descending: boolean, k = a.ne[0]): RefTensor {
  const rows = new Map<string, number[]>();
  return build([k, a.ne[1], a.ne[2], a.ne[3]], (i0, i1, i2, i3) => {
    const key = `${i1},${i2},${i3}`;
    let order = rows.get(key);
    if (!order) {
      const values = Array.from({ length: a.ne[0] }, (_, j) => a.at(j, i1, i2, i3));
      order = sortedColumns(values, descending);
      rows.set(key, order);
    }
    return order[i0]!;
  });
}

// ---------------------------------------------------------------------------------------------
// Cases.

Deno.test("concat joins along every dim, f32/f16/i32, contiguous and non-contiguous", () => {
  checkCase(1, (f) => {
    const checks: Check[] = [];
    for (const dtype of MOVED) {
      for (let dim = 0; dim < 4; dim++) {
        const layout = LAYOUTS[dim % 3]!;
        const sa = [7, 5, 3, 2];
        const sb = [...sa];
        sb[dim] = dim === 0 ? 33 : 2;
        const [a, ra] = f.input(dtype, sa, layout);
        const [b, rb] = f.input(dtype, sb, LAYOUTS[(dim + 1) % 3]!);
        checks.push({
          tensor: concat(a, b, dim),
          want: refConcat(ra, rb, dim),
          tol: TOL_EXACT,
          label: `concat ${dtype} dim ${dim}`,
        });
      }
    }
    return checks;
  });
});

Deno.test("pad and padExt add zeros before and after each dim (ggml_pad, ggml_pad_ext)", () => {
  checkCase(2, (f) => {
    const checks: Check[] = [];
    for (const dtype of MOVED) {
      for (const layout of LAYOUTS) {
        const [a, ra] = f.input(dtype, [9, 4, 3, 2], layout);
        checks.push({
          tensor: pad(a, [3, 1, 2, 0]),
          want: refPad(ra, [0, 0, 0, 0], [3, 1, 2, 0]),
          tol: TOL_EXACT,
          label: `pad ${dtype} ${layout}`,
        });
        const left: Dims4 = [2, 1, 0, 1];
        const right: Dims4 = [1, 0, 2, 1];
        checks.push({
          tensor: padExt(a, { left, right }),
          want: refPad(ra, left, right),
          tol: TOL_EXACT,
          label: `padExt ${dtype} ${layout}`,
        });
      }
    }
    return checks;
  });
});

Deno.test("padReflect1d mirrors dim 0 about its edges (ggml_pad_reflect_1d)", () => {
  checkCase(3, (f) => {
    const checks: Check[] = [];
    for (const dtype of MOVED) {
      for (const layout of LAYOUTS) {
        const [a, ra] = f.input(dtype, [11, 3, 2], layout);
        for (const [p0, p1] of [[3, 5], [10, 10], [0, 1], [1, 0]] as const) {
          checks.push({
            tensor: padReflect1d(a, p0, p1),
            want: refPadReflect1d(ra, p0, p1),
            tol: TOL_EXACT,
            label: `padReflect1d ${dtype} ${layout} ${p0},${p1}`,
          });
        }
      }
    }
    return checks;
  });
  // The example of ggml.h: [a, b, c, d] -> [b, a, b, c, d, c].
  const r = refPadReflect1d(RefTensor.of([4], [1, 2, 3, 4]), 1, 1);
  assert.deepEqual(Array.from(r.values()), [2, 1, 2, 3, 4, 3]);
});

Deno.test("roll shifts every dim with wrap-around, either sign (ggml_roll)", () => {
  checkCase(4, (f) => {
    const checks: Check[] = [];
    for (const dtype of MOVED) {
      for (const layout of LAYOUTS) {
        const [a, ra] = f.input(dtype, [13, 5, 3, 2], layout);
        for (const shifts of [[3, -2, 1, 1], [-12, 4, -2, 0], [0, 0, 0, 0]] as const) {
          checks.push({
            tensor: roll(a, shifts),
            want: refRoll(ra, shifts),
            tol: TOL_EXACT,
            label: `roll ${dtype} ${layout} ${shifts}`,
          });
        }
      }
    }
    return checks;
  });
});

Deno.test("repeatBack sums every tile into the smaller shape, f32 and f16", () => {
  checkCase(5, (f) => {
    const checks: Check[] = [];
    for (const dtype of ["f32", "f16"] as const) {
      for (const layout of LAYOUTS) {
        const [a, ra] = f.input(dtype, [35, 6, 4, 2], layout);
        for (const shape of [[7, 3, 2, 1], [35, 1, 1, 1], [1, 1, 1, 1], [35, 6, 4, 2]] as const) {
          const round = dtype === "f32" ? Math.fround : roundF16;
          checks.push({
            tensor: repeatBack(a, shape),
            want: refRepeatBack(ra, shape, round),
            // One rounding of an f64 sum (f16: through f32, a double rounding).
            tol: dtype === "f32"
              ? { nmse: 1e-13, rtol: F32_ULP, atol: 0 }
              : { nmse: 1e-7, rtol: 2 ** -10, atol: 0 },
            label: `repeatBack ${dtype} ${layout} -> ${shape}`,
          });
        }
      }
    }
    return checks;
  });
});

Deno.test("argsort orders each row ascending and descending; topK picks the k largest", () => {
  checkCase(6, (f) => {
    const checks: Check[] = [];
    for (const dtype of ["f32", "f16"] as const) {
      for (const layout of LAYOUTS) {
        const [a, ra] = f.input(dtype, [37, 5, 2], layout);
        checks.push({
          tensor: argsort(a, "asc"),
          want: refArgsort(ra, false),
          tol: TOL_EXACT,
          label: `argsort asc ${dtype} ${layout}`,
        }, {
          tensor: argsort(a, "desc"),
          want: refArgsort(ra, true),
          tol: TOL_EXACT,
          label: `argsort desc ${dtype} ${layout}`,
        });
        for (const k of [1, 5, 37]) {
          checks.push({
            tensor: topK(a, k),
            want: refArgsort(ra, true, k),
            tol: TOL_EXACT,
            label: `topK ${k} ${dtype} ${layout}`,
          });
        }
      }
    }
    // Ties keep column order, NaN sorts above every number.
    const values = new Float32Array([2, NaN, -1, 2, 0, NaN, 2, -Infinity, Infinity]);
    const tied = f.raw("f32", [9], new Uint8Array(values.buffer));
    const r = RefTensor.of([9], values);
    checks.push(
      { tensor: argsort(tied, "asc"), want: refArgsort(r, false), tol: TOL_EXACT, label: "ties" },
      { tensor: argsort(tied, "desc"), want: refArgsort(r, true), tol: TOL_EXACT, label: "ties" },
      { tensor: topK(tied, 4), want: refArgsort(r, true, 4), tol: TOL_EXACT, label: "ties" },
    );
    return checks;
  });
  const r = refArgsort(RefTensor.of([5], [2, NaN, -1, 2, 0]), false);
  assert.deepEqual(Array.from(r.values()), [2, 4, 0, 3, 1]);
});

Deno.test("tri keeps a triangle and diagMaskInf masks the future, as ggml", () => {
  checkCase(7, (f) => {
    const checks: Check[] = [];
    for (const dtype of MOVED) {
      for (const layout of LAYOUTS) {
        const [a, ra] = f.input(dtype, [9, 9, 3], layout);
        for (const kind of ["upperDiag", "upper", "lowerDiag", "lower"] as const) {
          checks.push({
            tensor: tri(a, kind),
            want: refTri(ra, kind),
            tol: TOL_EXACT,
            label: `tri ${kind} ${dtype} ${layout}`,
          });
        }
        if (dtype === "i32") continue;
        const [m, rm] = f.input(dtype, [13, 6, 2], layout);
        for (const nPast of [0, 3, 20]) {
          checks.push({
            tensor: diagMaskInf(m, nPast),
            want: refDiagMaskInf(rm, nPast),
            tol: TOL_EXACT,
            label: `diagMaskInf ${nPast} ${dtype} ${layout}`,
          });
        }
      }
    }
    return checks;
  });
});

Deno.test("fill writes one value (rounded for f16); arange counts in f32 steps", () => {
  checkCase(8, (f) => {
    const checks: Check[] = [];
    for (const dtype of ["f32", "f16"] as const) {
      const [a] = f.input(dtype, [33, 5, 2], "transposed");
      for (const value of [0.1, -3, 1e6]) {
        const round = dtype === "f32" ? Math.fround : roundF16;
        checks.push({
          tensor: fill(a, value),
          // The value travels as an f32 param, then rounds to f16 (ggml_fill's conversion).
          want: build(a.ne, () => round(Math.fround(value))),
          tol: TOL_EXACT,
          label: `fill ${dtype} ${value}`,
        });
      }
    }
    for (const [start, stop, step] of [[0, 10, 1], [-1, 1, 0.1], [5, -3, -0.75], [0.5, 1e4, 3.3]]) {
      const t = arange(start!, stop!, step!);
      const [s, d] = [Math.fround(start!), Math.fround(step!)];
      checks.push({
        tensor: t,
        want: build(t.ne, (i) => Math.fround(s + Math.fround(d * i))),
        tol: TOL_EXACT,
        label: `arange ${start} ${stop} ${step}`,
      });
    }
    return checks;
  });
  assert.deepEqual(arange(0, 5, 2).ne, [3, 1, 1, 1]);
  assert.deepEqual(arange(-1, 1, 0.1).ne, [20, 1, 1, 1]);
});

/** i64 indices as a raw-byte tensor of `shape`. */
function i64Indices(f: Feed, shape: readonly number[], values: readonly number[]): Tensor {
  const bytes = new Uint8Array(BigInt64Array.from(values.map(BigInt)).buffer);
  return f.raw("i64", shape, bytes);
}

Deno.test("getRows and setRows take i64 indices, an i32 table and f16 rows", () => {
  checkCase(9, (f) => {
    const checks: Check[] = [];
    for (const dtype of MOVED) {
      const [table, rt] = f.input(dtype, [17, 9, 3], "strided");
      const picks = Array.from({ length: 5 * 3 }, () => f.rng.int(9));
      const idx = RefTensor.of([5, 3], picks);
      const i64 = i64Indices(f, [5, 3], picks);
      const i32 = f.raw("i32", [5, 3], new Uint8Array(Int32Array.from(picks).buffer));
      for (const [name, indices] of [["i64", i64], ["i32", i32]] as const) {
        checks.push({
          tensor: getRows(table, indices),
          want: refGetRows(rt, idx),
          tol: TOL_EXACT,
          label: `getRows ${dtype} table, ${name} indices`,
        });
      }
    }
    for (const from of ["f32", "f16"] as const) {
      for (const to of ["f32", "f16"] as const) {
        const [target, rtarget] = f.input(to, [19, 11, 2], "contiguous");
        const [rows, rrows] = f.input(from, [19, 4, 2], "transposed");
        const picks = [3, 0, 10, 7, 1, 2, 9, 5];
        const out = setRows(target, rows, i64Indices(f, [4, 2], picks));
        checks.push({
          tensor: out,
          want: refSetRows(rtarget, rrows, RefTensor.of([4, 2], picks), to),
          tol: TOL_EXACT,
          label: `setRows ${from} -> ${to}, i64 indices`,
        });
      }
    }
    // ggml_set_rows broadcasts the indices over batches: [4, 1] serves rows [19, 4, 2, 2].
    const [target, rtarget] = f.input("f16", [19, 11, 2, 2], "contiguous");
    const [rows, rrows] = f.input("f32", [19, 4, 2, 2], "strided");
    const picks = [6, 1, 8, 3];
    const full = RefTensor.of([4, 2, 2], [...picks, ...picks, ...picks, ...picks]);
    checks.push({
      tensor: setRows(target, rows, i64Indices(f, [4, 1, 1], picks)),
      want: refSetRows(rtarget, rrows, full, "f16"),
      tol: TOL_EXACT,
      label: "setRows with broadcast indices",
    });
    return checks;
  });
});

Deno.test("an i64 index out of range, either way, is an OutOfBoundsError before any write", () => {
  using cpu = new CpuBackend({ threads: 2 });
  for (const bad of [-1n, 9n, 1n << 40n]) {
    const ctx = new Context();
    const table = ctx.newTensor("f32", [4, 9]);
    const indices = ctx.newTensor("i64", [3]);
    const out = getRows(table, indices);
    const graph = Graph.build(out);
    using _m = allocTensors(cpu, [table, indices, out]);
    cpu.setTensor(table, new Float32Array(36));
    cpu.setTensor(indices, new Uint8Array(BigInt64Array.from([0n, bad, 2n]).buffer));
    assert.throws(() => cpu.graphCompute(graph), OutOfBoundsError);
  }
});

Deno.test("builders refuse bad shapes, params and dtypes with typed errors naming them", () => {
  const ctx = new Context();
  const a = ctx.newTensor("f32", [4, 3]);
  const q = ctx.newTensor("q8_0", [32, 2]);
  const e = (re: RegExp) => (error: unknown) =>
    (error instanceof ShapeError || error instanceof DTypeError) && re.test(error.message);
  assert.throws(() => concat(a, ctx.newTensor("f32", [5, 2]), 1), e(/concat: .*differ in dim 0/));
  assert.throws(() => concat(a, ctx.newTensor("f16", [4, 3]), 0), e(/concat: .*f16/));
  assert.throws(() => concat(a, a, 4), e(/concat: dim must be .* got 4/));
  assert.throws(() => concat(q, q, 0), e(/concat: .*q8_0/));
  assert.throws(() => pad(a, [-1, 0, 0, 0]), e(/pad: right\[0\] .* got -1/));
  assert.throws(() => padExt(a, { left: [0.5, 0, 0, 0] }), e(/padExt: left\[0\] .* got 0.5/));
  assert.throws(() => padReflect1d(a, 4, 0), e(/padReflect1d: p0 .*\[0, 3\].* got 4/));
  assert.throws(() => roll(a, [4, 0, 0, 0]), e(/roll: shifts\[0\] .* got 4/));
  assert.throws(() => repeatBack(a, [3, 3, 1, 1]), e(/repeatBack: .*dim 0/));
  assert.throws(() => repeatBack(ctx.newTensor("i32", [4]), [2, 1, 1, 1]), e(/repeatBack: .*i32/));
  assert.throws(() => argsort(a, "up" as "asc"), e(/argsort: order .*"up"/));
  assert.throws(() => argsort(ctx.newTensor("i32", [4]), "asc"), e(/argsort: .*i32/));
  assert.throws(() => topK(a, 5), e(/topK: k .*\[1, 4\].* got 5/));
  assert.throws(() => tri(a, "lowerDiag"), e(/tri: .* not square/));
  assert.throws(
    () => tri(ctx.newTensor("f32", [3, 3]), "left" as TriKind),
    e(/tri: kind .*"left"/),
  );
  assert.throws(() => diagMaskInf(a, -1), e(/diagMaskInf: nPast .* got -1/));
  assert.throws(() => diagMaskInf(ctx.newTensor("i32", [3]), 0), e(/diagMaskInf: .*i32/));
  assert.throws(() => fill(a, NaN), e(/fill: value .* NaN/));
  assert.throws(() => arange(0, 1, -1), e(/arange: .* -1/));
  assert.throws(() => arange(0, Infinity, 1), e(/arange: stop must be finite/));
  assert.throws(() => getRows(a, ctx.newTensor("f32", [2])), e(/getRows: .*i32 or i64/));
  assert.throws(
    () => setRows(a, ctx.newTensor("f32", [4, 1]), ctx.newTensor("f16", [1])),
    e(/setRows: .*i32 or i64/),
  );
});

Deno.test("the op table declares the CPU's dtypes and the CPU backend answers by it", () => {
  using cpu = new CpuBackend({ threads: 1 });
  const ctx = new Context();
  const a = ctx.newTensor("f32", [4, 4]);
  const h = ctx.newTensor("f16", [4, 4]);
  for (
    const t of [concat(a, a, 0), pad(h, [1, 0, 0, 0]), argsort(h), topK(a, 2), arange(0, 3, 1)]
  ) {
    assert.ok(cpu.supportsOp(t), t.label);
  }
  // A hand-made tensor of a dtype the table does not list for the CPU is refused.
  const forged = new Tensor({
    dtype: "f16",
    ne: [4, 1, 1, 1],
    op: Op.argsort,
    src: [a],
  });
  assert.equal(cpu.supportsOp(forged), false);
});

Deno.test("the core refuses a node that breaks an op's rule with a status, never a crash", () => {
  using cpu = new CpuBackend({ threads: 1 });
  const ctx = new Context();
  const a = ctx.newTensor("f32", [4, 3]);
  // pad whose dst shape disagrees with its params, made past the builder's checks.
  const forged = new Tensor({
    dtype: "f32",
    ne: [9, 3, 1, 1],
    op: Op.pad,
    src: [a],
    params: [1, 1],
  });
  const graph = Graph.build(forged);
  using _m = allocTensors(cpu, [a, forged]);
  assert.throws(
    () => cpu.graphCompute(graph),
    (error: unknown) => error instanceof NativeError || error instanceof ShapeError,
  );
});

Deno.test("tri, diagMaskInf and fill run in place when the planner lets them", () => {
  using cpu = new CpuBackend({ threads: 2 });
  const ctx = new Context();
  const x = ctx.newTensor("f32", [9, 9, 2], "x");
  const masked = diagMaskInf(tri(scale(x, 2), "lowerDiag"), 1);
  const out = add(masked, fill(scale(x, 3), 0.5));
  const graph = Graph.build(out);
  const plan = planGraph(graph);
  // scale -> tri -> diagMaskInf, and scale -> fill, each overwrite their source's memory.
  for (const op of ["tri", "diagMaskInf", "fill"]) {
    assert.match(plan.report(), new RegExp(`\\) ${op} @\\d+ .* in place of`), plan.report());
  }
  using _x = allocTensors(cpu, [x]);
  using _nodes = plan.allocate(cpu);
  const rng = new Rng(10);
  const data = rng.f32(9 * 9 * 2);
  cpu.setTensor(x, data);
  cpu.graphCompute(graph);
  const r = RefTensor.of([9, 9, 2], Array.from(data, (v) => Math.fround(2 * v)));
  const want = refDiagMaskInf(refTri(r, "lowerDiag"), 1).values().map((v) => Math.fround(v + 0.5));
  assert.deepEqual(Array.from(cpu.getTensor(out) as Float32Array), Array.from(want));
});

Deno.test("ops_indexing_test leaves no native allocation behind", () => {
  assertNothingLive(baseline);
});
