/**
 * rope on the CPU against f64 references (tests/reference.ts, refRope), both modes, two bases,
 * two frequency scales, nDims below and equal to the head size, positions from 0 to 4095 (and a
 * negative one), contiguous and permuted inputs, 1 and 2 threads (bitwise identical); bad
 * arguments are typed errors at build time.
 *
 * Tolerances, per element, relative to the magnitude m = |x0| + |x1| of the rotated input pair
 * (an output can cancel to near 0, so relative-to-output is meaningless):
 * - against the reference with ggml's f32 angles (same recurrence, each step rounded to f32):
 *   |err| <= 2^-21 m (cos and sin rounded to f32, two f32 products and a sum: a few f32 ulps);
 * - against the same recurrence in f64: the f32 angle itself is off by up to about
 *   (3k + 2) 2^-24 |angle_k| for pair k (theta_scale's rounding and one rounding per step), so
 *   |err| <= ((3k + 2) 2^-24 |angle_k| + 2^-21) m. At position 4095 that is about 1e-4 m for
 *   the first pairs: it is ggml's own f32 arithmetic, which the kernel matches.
 */

import assert from "node:assert/strict";
import { assertNothingLive } from "./leaks.ts";
import {
  allocTensors,
  ArgumentError,
  Context,
  CpuBackend,
  DTypeError,
  Graph,
  liveAllocations,
  permute,
  planGraph,
  rope,
  type RopeMode,
  scale,
  ShapeError,
  type Tensor,
} from "../mod.ts";
import { fromBytes, refPermute, refRope, RefTensor, Rng } from "./reference.ts";

const baseline = liveAllocations();

interface RopeCase {
  headDim: number;
  nDims: number;
  mode: RopeMode;
  freqBase: number;
  freqScale: number;
  /** Input as a permutation of a contiguous [headDim, tokens, heads] tensor. */
  permuted?: boolean;
  ne3?: number;
}

const HEADS = 3;
const POSITIONS = [0, 4095, 17, -3, 1];
const TOKENS = POSITIONS.length;

/** Max errors seen, per reference kind, for the report at the end. */
const worst = { f32Abs: 0, f32Ratio: 0, f64Abs: 0, f64Ratio: 0 };

function runCase(c: RopeCase, threads: number): { got: RefTensor; input: RefTensor } {
  using cpu = new CpuBackend({ threads });
  const ctx = new Context();
  const rng = new Rng(0x5eed + c.headDim + c.nDims);
  const ne3 = c.ne3 ?? 1;
  const shape = [c.headDim, HEADS, TOKENS, ne3] as const;
  let a: Tensor;
  let input: RefTensor;
  let source: Tensor;
  const data = rng.f32(shape.reduce((x, y) => x * y, 1), -2, 2);
  if (c.permuted) {
    source = ctx.newTensor("f32", [c.headDim, TOKENS, HEADS, ne3]);
    a = permute(source, [0, 2, 1, 3]);
    input = refPermute(RefTensor.of([c.headDim, TOKENS, HEADS, ne3], data), [0, 2, 1, 3]);
    assert.ok(!a.isContiguous, "a permuted input is strided");
  } else {
    source = ctx.newTensor("f32", shape);
    a = source;
    input = RefTensor.of(shape, data);
  }
  const positions = ctx.newTensor("i32", [TOKENS]);
  const out = rope(a, positions, c);
  const graph = Graph.build(out);
  using _memory = allocTensors(cpu, [...ctx.tensors, ...graph.leafs, ...graph.nodes]);
  cpu.setTensor(out, new Float32Array(out.nelements).fill(NaN));
  cpu.setTensor(source, data);
  cpu.setTensor(positions, Int32Array.from(POSITIONS));
  cpu.graphCompute(graph);
  const bytes = cpu.getTensor(out);
  const raw = new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength).slice();
  return { got: fromBytes(raw, "f32", out.ne, out.nb), input };
}

function checkCase(c: RopeCase): void {
  const label = JSON.stringify(c);
  const one = runCase(c, 1);
  const two = runCase(c, 2);
  assert.deepEqual(two.got.values(), one.got.values(), `${label}: 1 vs 2 threads`);
  const { got, input } = one;
  const mode = c.mode === "normal" ? 0 : 2;
  const exact = refRope(input, POSITIONS, c.nDims, mode, c.freqBase, c.freqScale, "f32");
  const wide = refRope(input, POSITIONS, c.nDims, mode, c.freqBase, c.freqScale, "f64");
  const half = c.nDims / 2;
  const thetaScale = Math.pow(c.freqBase, -2 / c.nDims);
  for (let i3 = 0; i3 < got.ne[3]; i3++) {
    for (let i2 = 0; i2 < TOKENS; i2++) {
      for (let i1 = 0; i1 < HEADS; i1++) {
        for (let k = 0; k < half; k++) {
          const [j0, j1] = mode === 0 ? [2 * k, 2 * k + 1] : [k, k + half];
          const m = Math.abs(input.at(j0, i1, i2, i3)) + Math.abs(input.at(j1, i1, i2, i3));
          const angle = Math.abs(POSITIONS[i2]! * c.freqScale * thetaScale ** k);
          const exactBound = 2 ** -21 * m;
          const wideBound = ((3 * k + 2) * 2 ** -24 * angle + 2 ** -21) * m;
          for (const j of [j0, j1]) {
            const at = `${label}: element (${j}, ${i1}, ${i2}, ${i3})`;
            const value = got.at(j, i1, i2, i3);
            const e1 = Math.abs(value - exact.at(j, i1, i2, i3));
            const e2 = Math.abs(value - wide.at(j, i1, i2, i3));
            assert.ok(e1 <= exactBound, `${at}: ${e1} from f32-angle reference > ${exactBound}`);
            assert.ok(e2 <= wideBound, `${at}: ${e2} from f64-angle reference > ${wideBound}`);
            worst.f32Abs = Math.max(worst.f32Abs, e1);
            worst.f32Ratio = Math.max(worst.f32Ratio, e1 / exactBound);
            worst.f64Abs = Math.max(worst.f64Abs, e2);
            worst.f64Ratio = Math.max(worst.f64Ratio, e2 / wideBound);
          }
        }
        for (let i0 = c.nDims; i0 < c.headDim; i0++) {
          assert.equal(got.at(i0, i1, i2, i3), input.at(i0, i1, i2, i3), `${label}: pass-through`);
        }
      }
    }
  }
}

for (const mode of ["normal", "neox"] as const) {
  for (const [headDim, nDims] of [[64, 48], [96, 64], [64, 64]] as const) {
    Deno.test(`rope ${mode}: headDim ${headDim}, nDims ${nDims}, bases and scales`, () => {
      for (const freqBase of [10000, 100000]) {
        for (const freqScale of [1, 0.25]) checkCase({ headDim, nDims, mode, freqBase, freqScale });
      }
    });
  }
  Deno.test(`rope ${mode}: a permuted (strided) input over two batches (ne3 = 2)`, () => {
    checkCase({
      headDim: 96,
      nDims: 32,
      mode,
      freqBase: 10000,
      freqScale: 0.25,
      permuted: true,
      ne3: 2,
    });
  });
}

Deno.test("rope: 15360 elements, enough to split over 2 threads, match bitwise", () => {
  checkCase({ headDim: 128, nDims: 128, mode: "neox", freqBase: 500000, freqScale: 1, ne3: 8 });
});

Deno.test("rope: the planner runs it in place over a computed src0, with the same bits", () => {
  const compute = (planned: boolean): { bits: Uint8Array; inPlace: boolean } => {
    using cpu = new CpuBackend({ threads: 2 });
    const ctx = new Context();
    const x = ctx.newTensor("f32", [96, HEADS, TOKENS, 8]);
    const positions = ctx.newTensor("i32", [TOKENS]);
    const q = scale(x, 0.5);
    const out = scale(rope(q, positions, { nDims: 64, mode: "neox", freqBase: 1e6 }), 2);
    const r = out.src[0]!;
    const graph = Graph.build(out);
    using _inputs = allocTensors(cpu, graph.leafs);
    const plan = planGraph(graph, { alignment: cpu.alignment });
    const inPlace = plan.blocks.find((b) => b.tensor === r)?.inPlaceOf === q;
    using _memory = planned ? plan.allocate(cpu) : allocTensors(cpu, graph.nodes);
    cpu.setTensor(x, new Rng(7).f32(x.nelements));
    cpu.setTensor(positions, Int32Array.from(POSITIONS));
    cpu.graphCompute(graph);
    const data = cpu.getTensor(out);
    return { bits: new Uint8Array(data.buffer, data.byteOffset, data.byteLength).slice(), inPlace };
  };
  const planned = compute(true);
  assert.ok(planned.inPlace, "rope takes over its src0's memory");
  assert.deepEqual(planned.bits, compute(false).bits);
});

Deno.test("rope: nDims 2 rotates one pair, rest copied; position 0 is the identity", () => {
  checkCase({ headDim: 6, nDims: 2, mode: "normal", freqBase: 10000, freqScale: 1 });
});

Deno.test("rope: bad arguments are typed errors naming the op, argument and value", () => {
  const ctx = new Context();
  const a = ctx.newTensor("f32", [64, 3, 5]);
  const pos = ctx.newTensor("i32", [5]);
  const throwsWith = (fn: () => unknown, type: new (...args: never[]) => Error, words: string[]) =>
    assert.throws(fn, (e: Error) => {
      assert.ok(e instanceof type, `${e.name}: ${e.message}`);
      for (const w of words) assert.ok(e.message.includes(w), `"${e.message}" lacks "${w}"`);
      return true;
    });
  const ok = { nDims: 64, mode: "normal" } as const;
  throwsWith(() => rope(ctx.newTensor("f16", [64, 3, 5]), pos, ok), DTypeError, ["rope", "f16"]);
  throwsWith(() => rope(a, ctx.newTensor("f32", [5]), ok), DTypeError, ["rope", "f32", "i32"]);
  throwsWith(() => rope(a, ctx.newTensor("i32", [4]), ok), ShapeError, [
    "rope",
    "[4]",
    "[64, 3, 5]",
  ]);
  throwsWith(() => rope(a, ctx.newTensor("i32", [5, 2]), ok), ShapeError, ["rope", "positions"]);
  for (const nDims of [0, 3, 66, 2.5, NaN, -2]) {
    throwsWith(() => rope(a, pos, { ...ok, nDims }), ArgumentError, ["rope", "nDims", `${nDims}`]);
  }
  throwsWith(
    () => rope(a, pos, { nDims: 64, mode: "glm" as RopeMode }),
    ArgumentError,
    ["rope", "mode", "glm"],
  );
  for (const freqBase of [0, -1, Infinity, NaN, 1e39]) {
    throwsWith(() => rope(a, pos, { ...ok, freqBase }), ArgumentError, ["rope", "freqBase"]);
  }
  for (const freqScale of [Infinity, NaN, -1e39]) {
    throwsWith(() => rope(a, pos, { ...ok, freqScale }), ArgumentError, ["rope", "freqScale"]);
  }
});

Deno.test("rope: measured max errors against both references", () => {
  // Runs after the cases above (Deno runs a file's tests in order).
  console.log(
    `rope max |err|: ${worst.f32Abs.toExponential(2)} vs f32-angle reference ` +
      `(${(worst.f32Ratio * 100).toFixed(1)}% of bound), ${worst.f64Abs.toExponential(2)} vs ` +
      `f64-angle reference (${(worst.f64Ratio * 100).toFixed(1)}% of bound)`,
  );
  assert.ok(worst.f32Abs > 0 || worst.f64Abs > 0, "the cases ran");
});

Deno.test("rope_test leaves no native buffers, pools or plans alive", () => {
  assertNothingLive(baseline);
});
