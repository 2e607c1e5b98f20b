/**
 * Every op against the f64 reference (tests/reference.ts), on odd sizes, 3-4 dim shapes and
 * non-contiguous sources. Each case is computed with 1 and 2 threads (results must be bitwise
 * identical) on every kernel build the CPU has (avx2, and avx512 when supported), and on the
 * WebAssembly core (SIMD128, one thread).
 */

import assert from "node:assert/strict";
import { assertNothingLive, NOTHING_LIVE } from "./leaks.ts";
import {
  add,
  allocTensors,
  cont,
  Context,
  CpuBackend,
  cpy,
  div,
  gelu,
  getRows,
  Graph,
  liveAllocations,
  mean,
  mul,
  mulMat,
  norm,
  Op,
  permute,
  relu,
  repeat,
  reshape,
  rmsNorm,
  scale,
  setRows,
  type Shape,
  silu,
  simdLevels,
  softmax,
  sqr,
  sqrt,
  sub,
  sum,
  type Tensor,
  type TensorData,
  type TensorDType,
  transpose,
  view,
} from "../mod.ts";
import {
  assertBytesEqual,
  assertClose,
  dims,
  type Dims4,
  fromBytes,
  refAdd,
  refCont,
  refCpy,
  refDiv,
  type RefDType,
  refF32,
  refGelu,
  refGetRows,
  refMean,
  refMul,
  refMulMat,
  refNorm,
  refPermute,
  refRelu,
  refRepeat,
  refReshape,
  refRmsNorm,
  refScale,
  refScatter,
  refSetRows,
  refSilu,
  refSoftmax,
  refSqr,
  refSqrt,
  refSub,
  refSum,
  RefTensor,
  refTranspose,
  refView,
  Rng,
  roundF16,
  TOL_ACTIVATION,
  TOL_ELEMENTWISE,
  TOL_EXACT,
  TOL_NORM,
  TOL_REDUCTION,
  TOL_SOFTMAX,
  type Tolerance,
  tolMulMat,
} from "./reference.ts";
import { WasmBackend } from "../src/backend/wasm/backend.ts";

type Simd = "avx2" | "avx512" | "neon" | "simd128";

// Loads the library outside any test, so its resource is not reported as a test's leak.
const baseline = liveAllocations();

// The builds this process may use: the CPU's, capped by GRAFT_CPU (GRAFT_CPU=avx2 runs the
// suite on the AVX2 kernels of an AVX-512 machine).
const SIMD_LEVELS: readonly Simd[] = simdLevels();
// The WebAssembly core runs every case too (one thread, so no thread comparison): one backend
// for the file, disposed by the leak check at the end.
const wasm = await WasmBackend.create();
const BUILDS: readonly Simd[] = [...SIMD_LEVELS, "simd128"];
for (const simd of ["avx2", "avx512"] as const) {
  // A build the CPU lacks is skipped by name, never failed.
  Deno.test({
    name: `kernel build ${simd} runs every op case`,
    ignore: !SIMD_LEVELS.includes(simd),
    fn: () => assert.ok(SIMD_LEVELS.includes(simd)),
  });
}

/** One result to check: a tensor of the graph and its reference value. */
interface Check {
  tensor: Tensor;
  want: RefTensor;
  tol: Tolerance;
  label?: string;
}

/** Makes a case's input tensors and their data (seeded: every run sees the same values). */
class Feed {
  readonly ctx = new Context();
  readonly inputs: [Tensor, TensorData][] = [];
  readonly rng = new Rng(0x9e3779b9);

  /** A contiguous input with the given data. */
  data(dtype: TensorDType, shape: Shape, data: TensorData): [Tensor, RefTensor] {
    const t = this.ctx.newTensor(dtype, shape);
    this.inputs.push([t, data]);
    return [t, RefTensor.of(shape, data)];
  }

  f32(shape: Shape, lo = -1, hi = 1): [Tensor, RefTensor] {
    return this.data("f32", shape, this.rng.f32(count(shape), lo, hi));
  }

  f16(shape: Shape, lo = -1, hi = 1): [Tensor, RefTensor] {
    return this.data("f16", shape, this.rng.f16(count(shape), lo, hi));
  }

  i32(shape: Shape, values: readonly number[]): [Tensor, RefTensor] {
    return this.data("i32", shape, Int32Array.from(values));
  }

  /** A [ne0, ne1, ...] transpose of a contiguous [ne1, ne0, ...] input: nb[0] > nb[1]. */
  transposed(dtype: TensorDType, shape: Shape, lo = -1, hi = 1): [Tensor, RefTensor] {
    const [ne0, ne1, ne2, ne3] = dims(shape);
    const [t, r] = this.make(dtype, [ne1, ne0, ne2, ne3], lo, hi);
    return [transpose(t), refTranspose(r)];
  }

  /** `shape` as a permutation (by `axes`) of a contiguous input. */
  permuted(dtype: TensorDType, shape: Shape, axes: Dims4, lo = -1, hi = 1): [Tensor, RefTensor] {
    const want = dims(shape);
    const source = [0, 1, 2, 3].map((i) => want[axes[i]!]!);
    const [t, r] = this.make(dtype, source as unknown as Shape, lo, hi);
    return [permute(t, axes), refPermute(r, axes)];
  }

  /** `shape` as a strided view (rows padded by 3 elements, starting 2 elements in). */
  strided(dtype: TensorDType, shape: Shape, lo = -1, hi = 1): [Tensor, RefTensor] {
    const [ne0, ne1, ne2, ne3] = dims(shape);
    const row = ne0 + 3;
    const [t, r] = this.make(dtype, [row, ne1, ne2, ne3], lo, hi);
    const size = dtype === "f16" ? 2 : 4;
    const st: Dims4 = [1, row, row * ne1, row * ne1 * ne2];
    const v = view(t, shape, {
      nb: [size, st[1] * size, st[2] * size, st[3] * size],
      offset: 2 * size,
    });
    return [v, refView(r, shape, st, 2)];
  }

  make(dtype: TensorDType, shape: Shape, lo: number, hi: number): [Tensor, RefTensor] {
    return dtype === "f16" ? this.f16(shape, lo, hi) : this.f32(shape, lo, hi);
  }
}

function count(shape: readonly number[]): number {
  return shape.reduce((a, b) => a * b, 1);
}

function bytesOf(data: TensorData): Uint8Array {
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength).slice();
}

/** Owners of memory in a graph (views and cpy results use their source's). */
function memoryOwners(graph: Graph): Tensor[] {
  return [...graph.leafs, ...graph.nodes].filter((t) => !t.viewSource && t.op !== Op.cpy);
}

/**
 * Builds the case on a fresh backend of kernel build `simd`, computes it with 1 and then 2
 * threads (outputs poisoned with NaN before each run) and returns each check's bytes per run.
 * The kernel build is process-wide in the core, so each run gets its own backend.
 */
function computeCase(simd: Simd, build: (feed: Feed) => Check[]): {
  checks: Check[];
  runs: Uint8Array[][];
} {
  using native = simd === "simd128" ? null : new CpuBackend({ simd, threads: 1 });
  const cpu = native ?? wasm;
  const feed = new Feed();
  const checks = build(feed);
  const graph = Graph.build(...checks.map((c) => c.tensor));
  using _memory = allocTensors(cpu, [...feed.ctx.tensors, ...graph.leafs, ...graph.nodes]);
  const owners = memoryOwners(graph);
  const runs: Uint8Array[][] = [];
  for (const threads of simd === "simd128" ? [1] : [1, 2]) {
    if (cpu.threads !== threads) cpu.setThreads(threads);
    for (const t of owners) cpu.setTensor(t, new Uint8Array(t.nbytes).fill(0xff));
    for (const [t, data] of feed.inputs) cpu.setTensor(t, data);
    assert.equal(cpu.simd, simd, "the backend runs the kernel build it was made with");
    cpu.graphCompute(graph);
    runs.push(checks.map((c) => bytesOf(cpu.getTensor(c.tensor))));
  }
  return { checks, runs };
}

function checkCase(build: (feed: Feed) => Check[]): void {
  for (const simd of BUILDS) {
    const { checks, runs } = computeCase(simd, build);
    checks.forEach((check, i) => {
      const label = `${simd}: ${check.label ?? `output ${i}`} ${check.tensor.label}`;
      if (runs.length > 1) {
        assertBytesEqual(runs[0]![i]!, runs[1]![i]!, `${label}: 1 thread vs 2 threads`);
      }
      const t = check.tensor;
      const got = fromBytes(runs[0]![i]!, t.dtype as RefDType, t.ne, t.nb);
      assertClose(got, check.want, check.tol, label);
    });
  }
}

function opCase(name: string, build: (feed: Feed) => Check[]): void {
  Deno.test(name, () => checkCase(build));
}

// ---------------------------------------------------------------------------------------------
// Binary ops with broadcasting.

const binaryOps = [
  { name: "add", op: add, ref: refAdd },
  { name: "sub", op: sub, ref: refSub },
  { name: "mul", op: mul, ref: refMul },
  { name: "div", op: div, ref: refDiv },
] as const;

/** b's data: divisors stay away from zero. */
function operandB(feed: Feed, name: string, shape: Shape): [Tensor, RefTensor] {
  if (name !== "div") return feed.f32(shape);
  return feed.data("f32", shape, feed.rng.signedMagnitude(count(shape), 0.25, 2));
}

for (const { name, op, ref } of binaryOps) {
  opCase(`${name} matches the reference on equal contiguous shapes [1031, 3] and [1]`, (f) => {
    const [a, ra] = f.f32([1031, 3]);
    const [b, rb] = operandB(f, name, [1031, 3]);
    const [c, rc] = f.f32([1]);
    const [d, rd] = operandB(f, name, [1]);
    return [
      { tensor: op(a, b), want: ref(ra, rb), tol: TOL_ELEMENTWISE },
      { tensor: op(c, d), want: ref(rc, rd), tol: TOL_ELEMENTWISE },
    ];
  });

  opCase(`${name} broadcasts b by repetition over a 4-D a [33, 7, 3, 2]`, (f) => {
    const [a, ra] = f.f32([33, 7, 3, 2]);
    return ([[33, 1, 3, 1], [1, 7, 1, 2], [1], [33, 7, 3, 2]] as const).map((shape) => {
      const [b, rb] = operandB(f, name, shape);
      return { tensor: op(a, b), want: ref(ra, rb), tol: TOL_ELEMENTWISE, label: `b ${shape}` };
    });
  });

  opCase(`${name} matches the reference on non-contiguous inputs (transposed, strided)`, (f) => {
    const [a, ra] = f.transposed("f32", [33, 7, 2]);
    const [b, rb] = name === "div"
      ? operandStrided(f, [33, 7, 2], true)
      : f.strided("f32", [33, 7, 2]);
    const [c, rc] = f.permuted("f32", [7, 5, 3, 2], [2, 0, 3, 1]);
    const [d, rd] = name === "div"
      ? operandStrided(f, [7, 1, 3, 1], true)
      : f.strided("f32", [7, 1, 3, 1]);
    return [
      { tensor: op(a, b), want: ref(ra, rb), tol: TOL_ELEMENTWISE, label: "transposed/strided" },
      { tensor: op(c, d), want: ref(rc, rd), tol: TOL_ELEMENTWISE, label: "permuted/broadcast" },
    ];
  });
}

function operandStrided(f: Feed, shape: Shape, away: boolean): [Tensor, RefTensor] {
  // Divisors: magnitude in [0.25, 2], so strided like Feed.strided but with chosen data.
  const [ne0, ne1, ne2, ne3] = dims(shape);
  const row = ne0 + 3;
  const source: Shape = [row, ne1, ne2, ne3];
  const [t, r] = away
    ? f.data("f32", source, f.rng.signedMagnitude(count(source), 0.25, 2))
    : f.f32(source);
  const st: Dims4 = [1, row, row * ne1, row * ne1 * ne2];
  const v = view(t, shape, { nb: [4, st[1] * 4, st[2] * 4, st[3] * 4], offset: 8 });
  return [v, refView(r, shape, st, 2)];
}

// ---------------------------------------------------------------------------------------------
// Unary ops.

const unaryOps = [
  {
    name: "scale by 0.37",
    op: (t: Tensor) => scale(t, 0.37),
    ref: (r: RefTensor) => refScale(r, 0.37),
    tol: TOL_ELEMENTWISE,
    lo: -1,
    hi: 1,
  },
  {
    name: "scale by -3.5",
    op: (t: Tensor) => scale(t, -3.5),
    ref: (r: RefTensor) => refScale(r, -3.5),
    tol: TOL_ELEMENTWISE,
    lo: -1,
    hi: 1,
  },
  { name: "sqr", op: sqr, ref: refSqr, tol: TOL_ELEMENTWISE, lo: -2, hi: 2 },
  { name: "sqrt (positive inputs)", op: sqrt, ref: refSqrt, tol: TOL_ELEMENTWISE, lo: 1e-3, hi: 4 },
  { name: "gelu", op: gelu, ref: refGelu, tol: TOL_ACTIVATION, lo: -6, hi: 6 },
  { name: "silu", op: silu, ref: refSilu, tol: TOL_ACTIVATION, lo: -8, hi: 8 },
  { name: "relu", op: relu, ref: refRelu, tol: TOL_EXACT, lo: -1, hi: 1 },
] as const;

for (const { name, op, ref, tol, lo, hi } of unaryOps) {
  opCase(`${name} matches the reference on contiguous and non-contiguous sources`, (f) => {
    const [a, ra] = f.f32([1031, 3], lo, hi);
    const [b, rb] = f.transposed("f32", [33, 7, 3], lo, hi);
    const [c, rc] = f.permuted("f32", [7, 5, 3, 2], [3, 1, 0, 2], lo, hi);
    const [d, rd] = f.strided("f32", [1, 7], lo, hi);
    return [
      { tensor: op(a), want: ref(ra), tol, label: "contiguous" },
      { tensor: op(b), want: ref(rb), tol, label: "transposed" },
      { tensor: op(c), want: ref(rc), tol, label: "permuted" },
      { tensor: op(d), want: ref(rd), tol, label: "strided" },
    ];
  });
}

// ---------------------------------------------------------------------------------------------
// Reductions, repeat.

opCase("sum adds every element of contiguous, single-element and permuted tensors", (f) => {
  const [a, ra] = f.f32([1031, 7]);
  const [b, rb] = f.f32([1]);
  const [c, rc] = f.permuted("f32", [7, 5, 3, 2], [1, 3, 0, 2]);
  const [d, rd] = f.transposed("f32", [33, 7, 3]);
  return [
    { tensor: sum(a), want: refSum(ra), tol: TOL_REDUCTION, label: "contiguous" },
    { tensor: sum(b), want: refSum(rb), tol: TOL_REDUCTION, label: "[1]" },
    { tensor: sum(c), want: refSum(rc), tol: TOL_REDUCTION, label: "permuted" },
    { tensor: sum(d), want: refSum(rd), tol: TOL_REDUCTION, label: "transposed" },
  ];
});

opCase("mean averages each row of contiguous, transposed and one-column tensors", (f) => {
  const [a, ra] = f.f32([1031, 3]);
  const [b, rb] = f.transposed("f32", [33, 7]);
  const [c, rc] = f.f32([1, 5]);
  const [d, rd] = f.permuted("f32", [7, 5, 3, 2], [2, 0, 3, 1]);
  return [
    { tensor: mean(a), want: refMean(ra), tol: TOL_REDUCTION, label: "contiguous" },
    { tensor: mean(b), want: refMean(rb), tol: TOL_REDUCTION, label: "transposed" },
    { tensor: mean(c), want: refMean(rc), tol: TOL_REDUCTION, label: "ne0 = 1" },
    { tensor: mean(d), want: refMean(rd), tol: TOL_REDUCTION, label: "permuted" },
  ];
});

opCase("repeat tiles contiguous and transposed sources to larger 4-D shapes", (f) => {
  const [a, ra] = f.f32([7, 1, 3]);
  const [b, rb] = f.transposed("f32", [5, 3]);
  const [c, rc] = f.f32([1]);
  return [
    { tensor: repeat(a, [14, 4, 3, 2]), want: refRepeat(ra, [14, 4, 3, 2]), tol: TOL_EXACT },
    { tensor: repeat(b, [10, 6, 2, 1]), want: refRepeat(rb, [10, 6, 2, 1]), tol: TOL_EXACT },
    { tensor: repeat(c, [33, 7, 1, 1]), want: refRepeat(rc, [33, 7]), tol: TOL_EXACT },
  ];
});

// ---------------------------------------------------------------------------------------------
// mulMat.

function mm(a: [Tensor, RefTensor], b: [Tensor, RefTensor], label: string): Check {
  // f16 `a` multiplies `b` rounded to f16, as ggml converts src1 to f16 (its vec_dot_type).
  const bRef = a[0].dtype === "f16" ? RefTensor.of(b[1].ne, b[1].values().map(roundF16)) : b[1];
  return {
    tensor: mulMat(a[0], b[0]),
    want: refMulMat(a[1], bRef),
    tol: tolMulMat(a[0].ne[0]),
    label,
  };
}

opCase("mulMat f32 matches the reference for matrix-vector [1031, 33] x [1031, 1]", (f) => {
  return [mm(f.f32([1031, 33]), f.f32([1031, 1]), "matvec")];
});

opCase("mulMat f32 matches the reference for few columns [1031, 33] x [1031, 7]", (f) => {
  return [mm(f.f32([1031, 33]), f.f32([1031, 7]), "N = 7")];
});

opCase("mulMat f32 matches the reference across cache blocks [300, 260] x [300, 70]", (f) => {
  return [mm(f.f32([300, 260]), f.f32([300, 70]), "K, M, N past the block sizes")];
});

opCase("mulMat f32 broadcasts a [33, 7, 2, 1] over batched b [33, 9, 4, 3]", (f) => {
  return [
    mm(f.f32([33, 7, 2, 1]), f.f32([33, 9, 4, 3]), "small N"),
    mm(f.f32([33, 7, 2, 1]), f.f32([33, 70, 4, 3]), "packed N"),
  ];
});

opCase("mulMat f32 matches the reference on non-contiguous transposed/permuted inputs", (f) => {
  return [
    mm(f.transposed("f32", [33, 7]), f.f32([33, 9]), "transposed a"),
    mm(f.f32([33, 7]), f.transposed("f32", [33, 70]), "transposed b, packed N"),
    mm(f.transposed("f32", [33, 7]), f.permuted("f32", [33, 9, 3], [0, 2, 1, 3]), "permuted b"),
    mm(f.strided("f32", [33, 7, 2]), f.strided("f32", [33, 66, 4]), "strided, broadcast"),
  ];
});

opCase("mulMat f16 a matches the reference for few columns [1031, 17] x [1031, 5]", (f) => {
  return [mm(f.f16([1031, 17]), f.f32([1031, 5]), "f16 N = 5")];
});

opCase("mulMat f16 a matches the reference across cache blocks [300, 40] x [300, 70]", (f) => {
  return [mm(f.f16([300, 40]), f.f32([300, 70]), "f16 packed")];
});

opCase("mulMat f16 a matches the reference transposed and broadcast over batches", (f) => {
  return [
    mm(f.transposed("f16", [33, 7]), f.f32([33, 9]), "f16 transposed a"),
    mm(f.f16([33, 7, 2]), f.f32([33, 66, 4]), "f16 broadcast"),
    mm(f.permuted("f16", [33, 7, 2], [0, 2, 1, 3]), f.f32([33, 5, 4]), "f16 permuted"),
  ];
});

// ---------------------------------------------------------------------------------------------
// Views and copies.

opCase("view exposes strided windows with offsets that ops and cont read correctly", (f) => {
  const [a, ra] = f.f32([1031]);
  const v2 = view(a, [33, 7], { nb: [4, 37 * 4, 37 * 7 * 4, 37 * 7 * 4], offset: 5 * 4 });
  const r2 = refView(ra, [33, 7], [1, 37, 37 * 7, 37 * 7], 5);
  const v3 = view(a, [5, 4, 3], { nb: [8, 11 * 4, 50 * 4, 150 * 4], offset: 100 * 4 });
  const r3 = refView(ra, [5, 4, 3], [2, 11, 50, 150], 100);
  const [b, rb] = f.f32([33, 7]);
  return [
    { tensor: v2, want: r2, tol: TOL_EXACT, label: "the view itself" },
    { tensor: cont(v2), want: refCont(r2), tol: TOL_EXACT, label: "cont of a 2-D view" },
    { tensor: add(v2, b), want: refAdd(r2, rb), tol: TOL_ELEMENTWISE, label: "add reads it" },
    { tensor: cont(v3), want: refCont(r3), tol: TOL_EXACT, label: "cont of a 3-D view" },
  ];
});

opCase("reshape of inputs and of computed tensors keeps the logical order", (f) => {
  const [a, ra] = f.f32([6, 35]);
  const [b, rb] = f.f32([5, 1, 6]);
  const [c, rc] = f.f32([7, 30]);
  const [d, rd] = f.f32([7, 30]);
  const r = reshape(a, [5, 7, 6]);
  const rr = refReshape(ra, [5, 7, 6]);
  const node = reshape(add(c, d), [3, 10, 7]);
  const rnode = refReshape(refF32(refAdd(rc, rd)), [3, 10, 7]);
  return [
    { tensor: mul(r, b), want: refMul(rr, rb), tol: TOL_ELEMENTWISE, label: "mul of reshape" },
    { tensor: cont(r), want: rr, tol: TOL_EXACT, label: "cont of reshape" },
    { tensor: sqr(node), want: refSqr(rnode), tol: TOL_ELEMENTWISE, label: "reshape of a node" },
  ];
});

opCase("permute moves every axis; the view and its cont agree with the reference", (f) => {
  const [a, ra] = f.f32([7, 5, 3, 2]);
  const p = permute(a, [2, 0, 3, 1]);
  const rp = refPermute(ra, [2, 0, 3, 1]);
  assert.deepEqual(p.ne, [5, 2, 7, 3]);
  const [b, rb] = f.f32([7, 5, 3, 2]);
  const [c, rc] = f.f32([7, 5, 3, 2]);
  const q = permute(add(b, c), [1, 2, 0, 3]);
  const rq = refPermute(refF32(refAdd(rb, rc)), [1, 2, 0, 3]);
  return [
    { tensor: p, want: rp, tol: TOL_EXACT, label: "the permuted view" },
    { tensor: cont(p), want: refCont(rp), tol: TOL_EXACT, label: "cont of permute" },
    { tensor: cont(q), want: refCont(rq), tol: TOL_EXACT, label: "permute of a node" },
  ];
});

opCase("transpose swaps dims 0 and 1 of inputs and computed tensors", (f) => {
  const [a, ra] = f.f32([33, 7, 3]);
  const [b, rb] = f.f32([1031, 2]);
  return [
    { tensor: cont(transpose(a)), want: refCont(refTranspose(ra)), tol: TOL_EXACT },
    {
      tensor: cont(transpose(scale(b, 2))),
      want: refCont(refTranspose(refScale(rb, 2))),
      tol: TOL_ELEMENTWISE,
    },
  ];
});

opCase("cont copies f32 and f16 permuted and strided views to contiguous memory", (f) => {
  const [a, ra] = f.permuted("f32", [7, 5, 3, 2], [3, 2, 1, 0]);
  const [b, rb] = f.permuted("f16", [33, 7, 3], [1, 2, 0, 3]);
  const [c, rc] = f.strided("f32", [1031, 2]);
  const tensors = [cont(a), cont(b), cont(c)];
  for (const t of tensors) assert.ok(t.isContiguous);
  return [
    { tensor: tensors[0]!, want: refCont(ra), tol: TOL_EXACT, label: "f32 permuted" },
    { tensor: tensors[1]!, want: refCont(rb), tol: TOL_EXACT, label: "f16 permuted" },
    { tensor: tensors[2]!, want: refCont(rc), tol: TOL_EXACT, label: "f32 strided" },
  ];
});

opCase("cpy converts f32 to f16 with round-to-nearest-even, including edge values", (f) => {
  const [a, ra] = f.f32([1031, 3]);
  const [b] = f.f16([1031, 3]);
  const edges = Float32Array.from([
    1 + 2 ** -11, // tie: rounds to even (1)
    1 + 3 * 2 ** -11, // tie: rounds to even (1 + 2^-9)
    2 ** -25, // tie between 0 and the smallest subnormal: 0
    3 * 2 ** -25, // tie between subnormals: the even one, 2^-23
    5.96e-8,
    6.1e-5,
    -2.5e-7,
    65504,
    65519,
    65520, // halfway to 65536: overflows to Infinity
    -1e6,
    Infinity,
    -Infinity,
    NaN,
    -0,
    0.1,
    -0.3333333,
  ]);
  const [e, re] = f.data("f32", [edges.length], edges);
  const [g] = f.f16([edges.length]);
  return [
    { tensor: cpy(a, b), want: refCpy(ra, [1031, 3], "f16"), tol: TOL_EXACT, label: "random" },
    { tensor: cpy(e, g), want: refCpy(re, [edges.length], "f16"), tol: TOL_EXACT, label: "edges" },
  ];
});

opCase("cpy converts f16 to f32 exactly, also into a differently shaped destination", (f) => {
  const [a, ra] = f.f16([33, 7]);
  const [b] = f.f32([33, 7]);
  const [c, rc] = f.f16([33, 7]);
  const [d] = f.f32([77, 3]);
  return [
    { tensor: cpy(a, b), want: refCpy(ra, [33, 7], "f32"), tol: TOL_EXACT, label: "same shape" },
    { tensor: cpy(c, d), want: refCpy(rc, [77, 3], "f32"), tol: TOL_EXACT, label: "reshaped" },
  ];
});

opCase("cpy f32 -> f32 writes into a differently shaped and a strided destination", (f) => {
  const [a, ra] = f.f32([35, 6]);
  const [b] = f.f32([7, 5, 6]);
  // A [7, 5] window of a [16, 9] tensor, starting at (3, 2); the source is transposed.
  const [src, rsrc] = f.transposed("f32", [7, 5]);
  const [big, rbig] = f.f32([16, 9]);
  const window = view(big, [7, 5], { nb: [4, 64, 320, 320], offset: (2 * 16 + 3) * 4 });
  const written = cpy(src, window);
  const values = refCpy(rsrc, [7, 5], "f32");
  return [
    { tensor: cpy(a, b), want: refCpy(ra, [7, 5, 6], "f32"), tol: TOL_EXACT, label: "reshaped" },
    { tensor: written, want: values, tol: TOL_EXACT, label: "strided window" },
    {
      tensor: big,
      want: refScatter(rbig, [7, 5, 1, 1], [1, 16, 144, 144], 2 * 16 + 3, values),
      tol: TOL_EXACT,
      label: "the window's owner (untouched elements kept)",
    },
  ];
});

opCase("cpy f32 -> f16 reads a transposed source row by row", (f) => {
  const [a, ra] = f.transposed("f32", [33, 7, 2]);
  const [b] = f.f16([33, 7, 2]);
  const [c, rc] = f.permuted("f32", [7, 5, 3], [2, 0, 1, 3]);
  const [d] = f.f16([35, 3]);
  return [
    { tensor: cpy(a, b), want: refCpy(ra, [33, 7, 2], "f16"), tol: TOL_EXACT },
    { tensor: cpy(c, d), want: refCpy(rc, [35, 3], "f16"), tol: TOL_EXACT },
  ];
});

opCase("setRows writes rows at indices into f32, f16 and transposed (strided) targets", (f) => {
  const [a, ra] = f.f32([64, 10]);
  const [r, rr] = f.f32([64, 3]);
  const [i, ri] = f.i32([3], [7, 0, 9]);
  const [b, rb] = f.f16([33, 5, 3]);
  const [s, rs] = f.f32([33, 2, 3]);
  const [j, rj] = f.i32([2, 3], [4, 0, 1, 2, 3, 3]);
  // A V cache stored transposed, [positions, channels]: its rows are columns of memory.
  const [c, rc] = f.transposed("f16", [33, 10]);
  const [t, rt] = f.f32([33, 4]);
  const [k, rk] = f.i32([4], [0, 9, 4, 5]);
  return [
    { tensor: setRows(a, r, i), want: refSetRows(ra, rr, ri, "f32"), tol: TOL_EXACT },
    { tensor: setRows(b, s, j), want: refSetRows(rb, rs, rj, "f16"), tol: TOL_EXACT },
    { tensor: setRows(c, t, k), want: refSetRows(rc, rt, rk, "f16"), tol: TOL_EXACT },
  ];
});

opCase("getRows gathers f32 rows, with repeats, first and last rows", (f) => {
  const [a, ra] = f.f32([1031, 9]);
  const [i, ri] = f.i32([5], [0, 8, 3, 3, 7]);
  const [b, rb] = f.f32([7, 5, 2]);
  const [j, rj] = f.i32([6, 2], [4, 0, 1, 1, 2, 3, 0, 0, 4, 4, 2, 1]);
  const [c, rc] = f.transposed("f32", [33, 9]);
  const [k, rk] = f.i32([3], [8, 0, 5]);
  return [
    { tensor: getRows(a, i), want: refGetRows(ra, ri), tol: TOL_EXACT, label: "1031 wide" },
    { tensor: getRows(b, j), want: refGetRows(rb, rj), tol: TOL_EXACT, label: "batched" },
    { tensor: getRows(c, k), want: refGetRows(rc, rk), tol: TOL_EXACT, label: "transposed" },
  ];
});

opCase("getRows gathers f16 rows into f32, batched", (f) => {
  const [a, ra] = f.f16([33, 7, 3]);
  const [i, ri] = f.i32([4, 3], [6, 0, 2, 2, 1, 1, 5, 3, 0, 6, 6, 4]);
  const [b, rb] = f.f16([1031, 4]);
  const [j, rj] = f.i32([2], [3, 0]);
  return [
    { tensor: getRows(a, i), want: refGetRows(ra, ri), tol: TOL_EXACT, label: "f16 batched" },
    { tensor: getRows(b, j), want: refGetRows(rb, rj), tol: TOL_EXACT, label: "f16 1031 wide" },
  ];
});

// ---------------------------------------------------------------------------------------------
// Norms and softmax.

opCase("norm normalizes rows of contiguous, transposed and one-element rows", (f) => {
  const [a, ra] = f.f32([1031, 3], -1, 3);
  const [b, rb] = f.transposed("f32", [33, 7, 2]);
  const [c, rc] = f.f32([1, 5]);
  const [d, rd] = f.permuted("f32", [7, 5, 3, 2], [2, 3, 0, 1]);
  return [
    { tensor: norm(a), want: refNorm(ra, 1e-5), tol: TOL_NORM, label: "contiguous" },
    { tensor: norm(b, 1e-3), want: refNorm(rb, 1e-3), tol: TOL_NORM, label: "transposed" },
    { tensor: norm(c), want: refNorm(rc, 1e-5), tol: TOL_NORM, label: "ne0 = 1" },
    { tensor: norm(d), want: refNorm(rd, 1e-5), tol: TOL_NORM, label: "permuted" },
  ];
});

opCase("rmsNorm normalizes rows of contiguous, permuted and one-element rows", (f) => {
  const [a, ra] = f.f32([1031, 3]);
  const [b, rb] = f.permuted("f32", [33, 7, 2], [1, 2, 0, 3]);
  const [c, rc] = f.f32([1, 4]);
  const [d, rd] = f.strided("f32", [33, 7]);
  return [
    { tensor: rmsNorm(a), want: refRmsNorm(ra, 1e-6), tol: TOL_NORM, label: "contiguous" },
    { tensor: rmsNorm(b, 1e-4), want: refRmsNorm(rb, 1e-4), tol: TOL_NORM, label: "permuted" },
    { tensor: rmsNorm(c), want: refRmsNorm(rc, 1e-6), tol: TOL_NORM, label: "ne0 = 1" },
    { tensor: rmsNorm(d), want: refRmsNorm(rd, 1e-6), tol: TOL_NORM, label: "strided" },
  ];
});

opCase("softmax without a mask matches the reference on long, transposed and [1] rows", (f) => {
  const [a, ra] = f.f32([1031, 3], -4, 4);
  const [b, rb] = f.transposed("f32", [7, 5, 2], -4, 4);
  const [c, rc] = f.f32([1, 4]);
  return [
    { tensor: softmax(a), want: refSoftmax(ra), tol: TOL_SOFTMAX, label: "1031 wide" },
    { tensor: softmax(b), want: refSoftmax(rb), tol: TOL_SOFTMAX, label: "transposed" },
    { tensor: softmax(c), want: refSoftmax(rc), tol: TOL_SOFTMAX, label: "ne0 = 1" },
  ];
});

opCase("softmax applies scale then a taller mask, broadcast over dims 2-3", (f) => {
  const [a, ra] = f.f32([33, 7, 3], -4, 4);
  const [m, rm] = f.f32([33, 9], -2, 2);
  const [b, rb] = f.f32([33, 7, 4, 2], -4, 4);
  const [n, rn] = f.f32([33, 7, 2, 1], -2, 2);
  return [
    {
      tensor: softmax(a, { mask: m, scale: 0.125 }),
      want: refSoftmax(ra, rm, 0.125),
      tol: TOL_SOFTMAX,
      label: "mask [33, 9]",
    },
    {
      tensor: softmax(b, { mask: n, scale: 1.7 }),
      want: refSoftmax(rb, rn, 1.7),
      tol: TOL_SOFTMAX,
      label: "mask [33, 7, 2] over [33, 7, 4, 2]",
    },
  ];
});

/** A causal mask [kv, q]: query i sees keys j <= i + shift; rows in `hidden` see nothing. */
function causalMask(kv: number, q: number, shift: number, hidden: readonly number[]): Float32Array {
  const out = new Float32Array(kv * q);
  for (let i = 0; i < q; i++) {
    for (let j = 0; j < kv; j++) {
      out[i * kv + j] = j <= i + shift && !hidden.includes(i) ? 0 : -Infinity;
    }
  }
  return out;
}

Deno.test("softmax with a causal -Infinity mask gives zeros for a fully masked row", () => {
  const build = (f: Feed): Check[] => {
    const [a, ra] = f.f32([7, 7, 2], -4, 4);
    const [m, rm] = f.data("f32", [7, 7], causalMask(7, 7, 0, [3]));
    const [b, rb] = f.f32([33, 20], -4, 4);
    const [n, rn] = f.data("f32", [33, 20], causalMask(33, 20, 13, []));
    return [
      {
        tensor: softmax(a, { mask: m, scale: 0.5 }),
        want: refSoftmax(ra, rm, 0.5),
        tol: TOL_SOFTMAX,
        label: "[7, 7, 2], row 3 hidden",
      },
      {
        tensor: softmax(b, { mask: n, scale: 0.25 }),
        want: refSoftmax(rb, rn, 0.25),
        tol: TOL_SOFTMAX,
        label: "[33, 20], shifted",
      },
    ];
  };
  checkCase(build);
  // The hidden row is exactly zero (not NaN), and every other row sums to one.
  for (const simd of BUILDS) {
    const { checks, runs } = computeCase(simd, build);
    const t = checks[0]!.tensor;
    const got = fromBytes(runs[0]![0]!, t.dtype as RefDType, t.ne, t.nb);
    for (let h = 0; h < 2; h++) {
      for (let i = 0; i < 7; i++) {
        let total = 0;
        for (let j = 0; j < 7; j++) {
          const p = got.at(j, i, h);
          if (i === 3 || j > i) assert.equal(p, 0, `${simd}: p[${j}, ${i}, ${h}] is masked`);
          total += p;
        }
        if (i !== 3) assert.ok(Math.abs(total - 1) < 1e-5, `${simd}: row ${i} sums to ${total}`);
      }
    }
  }
});

// ---------------------------------------------------------------------------------------------
// A composed graph.

interface Attention {
  checks: Check[];
}

/** q, k, v per head; scores = k·q, p = softmax(scores·s + causal), out = vᵀ·p. */
function attention(f: Feed): Attention {
  const d = 16, kv = 9, q = 7, heads = 2;
  const [qIn, rq] = f.f32([d, heads, q]);
  const [kIn, rk] = f.f32([d, kv, heads]);
  const [vIn, rv] = f.f32([d, kv, heads]);
  const [mask, rmask] = f.data("f32", [kv, q], causalMask(kv, q, 2, []));
  const qp = permute(qIn, [0, 2, 1, 3]); // [d, q, heads]
  const scores = mulMat(kIn, qp); // [kv, q, heads]
  const p = softmax(scores, { mask, scale: 0.25 });
  const out = mulMat(cont(transpose(vIn)), p); // [d, q, heads]
  const rScores = refMulMat(rk, refPermute(rq, [0, 2, 1, 3]));
  const rp = refSoftmax(refF32(rScores), rmask, 0.25);
  const rOut = refMulMat(refCont(refTranspose(rv)), refF32(rp));
  return {
    checks: [
      { tensor: scores, want: rScores, tol: tolMulMat(d), label: "scores" },
      { tensor: p, want: rp, tol: TOL_SOFTMAX, label: "probabilities" },
      { tensor: out, want: rOut, tol: tolMulMat(kv), label: "attention output" },
    ],
  };
}

Deno.test("an attention-like graph (mulMat, scale, masked softmax, mulMat) matches", () => {
  checkCase((f) => attention(f).checks);
});

Deno.test("a plan recomputes the attention graph with new inputs; async agrees with sync", async () => {
  using cpu = new CpuBackend({ threads: 2 });
  const f = new Feed();
  const { checks } = attention(f);
  const graph = Graph.build(...checks.map((c) => c.tensor));
  using _memory = allocTensors(cpu, [...f.ctx.tensors, ...graph.nodes]);
  using plan = cpu.graphPlanCreate(graph);
  for (const [t, data] of f.inputs) cpu.setTensor(t, data);
  cpu.graphPlanCompute(plan, graph);
  const first = checks.map((c) => bytesOf(cpu.getTensor(c.tensor)));
  checks.forEach((c, i) => {
    assertClose(fromBytes(first[i]!, "f32", c.tensor.ne, c.tensor.nb), c.want, c.tol, c.label!);
  });
  // New q, k, v (same mask): the plan reads the new values.
  const g = new Feed();
  g.rng.next();
  const second = attention(g);
  for (const [i, [t]] of f.inputs.entries()) cpu.setTensor(t, g.inputs[i]![1]);
  cpu.graphPlanCompute(plan);
  checks.forEach((c, i) => {
    const got = fromBytes(bytesOf(cpu.getTensor(c.tensor)), "f32", c.tensor.ne, c.tensor.nb);
    assertClose(got, second.checks[i]!.want, c.tol, `recomputed ${c.label}`);
  });
  const sync = checks.map((c) => bytesOf(cpu.getTensor(c.tensor)));
  await cpu.graphComputeAsync(graph);
  checks.forEach((c, i) => {
    assertBytesEqual(bytesOf(cpu.getTensor(c.tensor)), sync[i]!, `async ${c.label}`);
  });
});

// ---------------------------------------------------------------------------------------------
// Kernel build selection.

Deno.test({
  name: "a backend keeps its simd build when another backend picks another",
  ignore: !SIMD_LEVELS.includes("avx512"),
  fn: () => {
    using avx2 = new CpuBackend({ simd: "avx2", threads: 1 });
    assert.equal(avx2.simd, "avx2");
    using avx512 = new CpuBackend({ simd: "avx512", threads: 1 });
    assert.equal(avx512.simd, "avx512");
    // The option is per backend; selecting avx512 for the second must not switch the first.
    assert.equal(avx2.simd, "avx2", "creating an avx512 backend switched the avx2 backend");
  },
});

Deno.test("ops_test leaves no native buffers, pools or plans alive", () => {
  wasm.dispose();
  assert.deepEqual(WasmBackend.liveAllocations(), NOTHING_LIVE, "the WebAssembly core");
  assertNothingLive(baseline);
});
