/**
 * rope on the CPU against f64 references (tests/reference.ts, refRope), both modes, bases,
 * frequency scales, YaRN (ext_factor, attn_factor, betas, n_ctx_orig), frequency factors, f16
 * input and result, nDims below and equal to the head size, odd head sizes, positions from 0 to
 * 4095 (and a negative one), contiguous and permuted inputs, 1 and 2 threads (bitwise
 * identical); bad arguments are typed errors at build time.
 *
 * Tolerances, per element, relative to the magnitude m = s (|x0| + |x1|) of the rotated input
 * pair, s the scale of cos and sin (attnFactor, times YaRN's 1 + 0.1 ln(1/freqScale)); an output
 * can cancel to near 0, so relative-to-output is meaningless:
 * - against the reference with ggml's f32 angles (same recurrence, each step rounded to f32):
 *   |err| <= 2^-21 m (cos and sin rounded to f32, two f32 products and a sum: a few f32 ulps);
 * - against the same recurrence in f64: the f32 angle itself is off by up to about
 *   (3k + 2) 2^-24 |angle_k| for pair k (theta_scale's rounding and one rounding per step), and
 *   four roundings more with frequency factors and YaRN's mix, so |err| <= ((3k + 6) 2^-24
 *   |angle_k| + 2^-21) m, angle_k the extrapolated angle pos theta_scale^k / factor_k. At
 *   position 4095 that is about 1e-4 m for the first pairs: it is ggml's own f32 arithmetic,
 *   which the kernel matches.
 * - an f16 result is the f32 one rounded to f16: half an f16 ulp more (2^-11 relative).
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
  type RopeOptions,
  scale,
  ShapeError,
  type Tensor,
} from "../mod.ts";
import { fromBytes, refPermute, refRope, type RefRopeParams, RefTensor, Rng } from "./reference.ts";

const baseline = liveAllocations();

/** A case: rope's parameters as the reference takes them (mode by name), and the input. */
interface RopeCase extends Omit<RefRopeParams, "mode" | "freqFactors"> {
  headDim: number;
  mode: RopeMode;
  /** src2's values (a vector of nDims/2, or more). */
  freqFactors?: number[];
  /** Input and result dtype (default f32). */
  dtype?: "f32" | "f16";
  /** Input as a permutation of a contiguous [headDim, tokens, heads] tensor. */
  permuted?: boolean;
  ne3?: number;
  heads?: number;
}

const HEADS = 3;
const POSITIONS = [0, 4095, 17, -3, 1];
const TOKENS = POSITIONS.length;

/** Max errors seen, per reference kind, for the report at the end. */
const worst = { f32Abs: 0, f32Ratio: 0, f64Abs: 0, f64Ratio: 0 };
/** The largest error / bound ratio of the f16 results. */
let worstF16 = 0;

function ropeOptions(c: RopeCase, factors: Tensor | undefined): RopeOptions {
  const { nDims, mode, freqBase, freqScale, extFactor, attnFactor, betaFast, betaSlow } = c;
  return {
    nDims,
    mode,
    freqBase,
    freqScale,
    ...(extFactor === undefined ? {} : { extFactor }),
    ...(attnFactor === undefined ? {} : { attnFactor }),
    ...(betaFast === undefined ? {} : { betaFast }),
    ...(betaSlow === undefined ? {} : { betaSlow }),
    ...(c.nCtxOrig === undefined ? {} : { nCtxOrig: c.nCtxOrig }),
    ...(factors ? { freqFactors: factors } : {}),
  };
}

function runCase(c: RopeCase, threads: number): { got: RefTensor; input: RefTensor } {
  using cpu = new CpuBackend({ threads });
  const ctx = new Context();
  const rng = new Rng(0x5eed + c.headDim + c.nDims);
  const ne3 = c.ne3 ?? 1;
  const heads = c.heads ?? HEADS;
  const dtype = c.dtype ?? "f32";
  const shape = [c.headDim, heads, TOKENS, ne3] as const;
  let a: Tensor;
  let input: RefTensor;
  let source: Tensor;
  const raw = rng.f32(shape.reduce((x, y) => x * y, 1), -2, 2);
  const data = dtype === "f32" ? raw : new Float16Array(raw);
  const values = Float64Array.from(data);
  if (c.permuted) {
    source = ctx.newTensor(dtype, [c.headDim, TOKENS, heads, ne3]);
    a = permute(source, [0, 2, 1, 3]);
    input = refPermute(RefTensor.of([c.headDim, TOKENS, heads, ne3], values), [0, 2, 1, 3]);
    assert.ok(!a.isContiguous, "a permuted input is strided");
  } else {
    source = ctx.newTensor(dtype, shape);
    a = source;
    input = RefTensor.of(shape, values);
  }
  const positions = ctx.newTensor("i32", [TOKENS]);
  const factors = c.freqFactors ? ctx.newTensor("f32", [c.freqFactors.length]) : undefined;
  const out = rope(a, positions, ropeOptions(c, factors));
  assert.equal(out.dtype, dtype);
  const graph = Graph.build(out);
  using _memory = allocTensors(cpu, [...ctx.tensors, ...graph.leafs, ...graph.nodes]);
  cpu.setTensor(out, new Uint8Array(out.nbytes).fill(0xff)); // NaN in either dtype
  cpu.setTensor(source, data);
  cpu.setTensor(positions, Int32Array.from(POSITIONS));
  if (factors) cpu.setTensor(factors, Float32Array.from(c.freqFactors!));
  cpu.graphCompute(graph);
  const bytes = cpu.getTensor(out);
  const outBytes = new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength).slice();
  return { got: fromBytes(outBytes, dtype, out.ne, out.nb), input };
}

function refParams(c: RopeCase): RefRopeParams {
  return {
    nDims: c.nDims,
    mode: c.mode === "normal" ? 0 : 2,
    freqBase: c.freqBase,
    freqScale: c.freqScale,
    extFactor: c.extFactor ?? 0,
    attnFactor: c.attnFactor ?? 1,
    betaFast: c.betaFast ?? 32,
    betaSlow: c.betaSlow ?? 1,
    nCtxOrig: c.nCtxOrig ?? 0,
    ...(c.freqFactors ? { freqFactors: c.freqFactors } : {}),
  };
}

/**
 * The largest |cos|, |sin| scale of the case: attnFactor, times YaRN's 1 + 0.1 ln(1/freqScale).
 */
function magnitudeOf(c: RopeCase): number {
  const yarn = (c.extFactor ?? 0) !== 0 ? 1 + 0.1 * Math.log(1 / c.freqScale) : 1;
  return Math.abs((c.attnFactor ?? 1) * yarn);
}

function checkCase(c: RopeCase): void {
  const label = JSON.stringify(c);
  const one = runCase(c, 1);
  const two = runCase(c, 2);
  assert.deepEqual(two.got.values(), one.got.values(), `${label}: 1 vs 2 threads`);
  const { got, input } = one;
  const p = refParams(c);
  const exact = refRope(input, POSITIONS, p, "f32");
  const wide = refRope(input, POSITIONS, p, "f64");
  const half = c.nDims / 2;
  const thetaScale = Math.pow(c.freqBase, -2 / c.nDims);
  const scale = magnitudeOf(c);
  const f16 = c.dtype === "f16";
  for (let i3 = 0; i3 < got.ne[3]; i3++) {
    for (let i2 = 0; i2 < TOKENS; i2++) {
      for (let i1 = 0; i1 < got.ne[1]; i1++) {
        for (let k = 0; k < half; k++) {
          const [j0, j1] = p.mode === 0 ? [2 * k, 2 * k + 1] : [k, k + half];
          const m = scale *
            (Math.abs(input.at(j0, i1, i2, i3)) + Math.abs(input.at(j1, i1, i2, i3)));
          // The extrapolated angle bounds both YaRN's angles (freqScale <= 1 in these cases).
          const extrap = POSITIONS[i2]! * thetaScale ** k / (c.freqFactors?.[k] ?? 1);
          const angle = Math.abs(extrap * Math.max(1, Math.abs(c.freqScale)));
          const exactBound = 2 ** -21 * m;
          const wideBound = ((3 * k + 6) * 2 ** -24 * angle + 2 ** -21) * m;
          for (const j of [j0, j1]) {
            const at = `${label}: element (${j}, ${i1}, ${i2}, ${i3})`;
            const value = got.at(j, i1, i2, i3);
            // An f16 result is the f32 one rounded: half an f16 ulp more (2^-25 if subnormal).
            const f16Slack = (want: number): number =>
              f16 ? 2 ** -11 * (Math.abs(want) + exactBound) + 2 ** -25 : 0;
            const want1 = exact.at(j, i1, i2, i3), want2 = wide.at(j, i1, i2, i3);
            const e1 = Math.abs(value - want1);
            const e2 = Math.abs(value - want2);
            const b1 = exactBound + f16Slack(want1), b2 = wideBound + f16Slack(want2);
            assert.ok(e1 <= b1, `${at}: ${e1} from f32-angle reference > ${b1}`);
            assert.ok(e2 <= b2, `${at}: ${e2} from f64-angle reference > ${b2}`);
            if (f16) {
              worstF16 = Math.max(worstF16, e1 / b1, e2 / b2);
              continue;
            }
            worst.f32Abs = Math.max(worst.f32Abs, e1);
            worst.f32Ratio = Math.max(worst.f32Ratio, e1 / b1);
            worst.f64Abs = Math.max(worst.f64Abs, e2);
            worst.f64Ratio = Math.max(worst.f64Ratio, e2 / b2);
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

// YaRN as llama.cpp runs Qwen2/Mistral-style long-context models: ext_factor 1, freq_scale
// 1/4 (a factor-4 extension), n_ctx_orig 4096 (positions reach 4095 here), betas 32 and 1, and
// YaRN's attention factor; also with other betas, a partial ext_factor and nDims < ne0.
const YARN = { extFactor: 1, attnFactor: 1, betaFast: 32, betaSlow: 1, nCtxOrig: 4096 } as const;
for (const mode of ["normal", "neox"] as const) {
  Deno.test(`rope ${mode}: YaRN (ext_factor 1, freq_scale 1/4, n_ctx_orig 4096)`, () => {
    checkCase({ headDim: 64, nDims: 64, mode, freqBase: 10000, freqScale: 0.25, ...YARN });
    checkCase({
      headDim: 96,
      nDims: 48,
      mode,
      freqBase: 1e6,
      freqScale: 0.125,
      ...YARN,
      attnFactor: 0.75,
      betaFast: 16,
      betaSlow: 2,
      nCtxOrig: 2048,
    });
    checkCase({
      headDim: 70,
      nDims: 38,
      mode,
      freqBase: 500000,
      freqScale: 0.5,
      ...YARN,
      extFactor: 0.5,
    });
  });
  Deno.test(`rope ${mode}: frequency factors (Llama 3's rope_freqs) and attn_factor`, () => {
    // Llama 3.1's factors: 1 for high frequencies, up to 8 for low ones, smooth between.
    const factors = (n: number): number[] =>
      Array.from({ length: n }, (_, k) => 1 + 7 * Math.min(1, Math.max(0, (k - n / 4) / (n / 2))));
    checkCase({
      headDim: 64,
      nDims: 64,
      mode,
      freqBase: 500000,
      freqScale: 1,
      freqFactors: factors(32),
    });
    checkCase({
      headDim: 80,
      nDims: 40,
      mode,
      freqBase: 10000,
      freqScale: 0.5,
      attnFactor: 1.25,
      freqFactors: [...factors(20), 99, 99], // longer than nDims/2: the rest is unused
    });
    checkCase({
      headDim: 64,
      nDims: 32,
      mode,
      freqBase: 10000,
      freqScale: 0.25,
      ...YARN,
      freqFactors: factors(16),
      permuted: true,
    });
  });
  Deno.test(`rope ${mode}: f16 input and result, odd shapes, strided, YaRN and factors`, () => {
    checkCase({ headDim: 64, nDims: 64, mode, freqBase: 10000, freqScale: 1, dtype: "f16" });
    checkCase({
      headDim: 38,
      nDims: 26,
      mode,
      freqBase: 10000,
      freqScale: 0.25,
      ...YARN,
      dtype: "f16",
      heads: 5,
      ne3: 2,
    });
    checkCase({
      headDim: 96,
      nDims: 34,
      mode,
      freqBase: 1e6,
      freqScale: 1,
      freqFactors: Array.from({ length: 17 }, (_, k) => 1 + k / 4),
      dtype: "f16",
      permuted: true,
    });
  });
  Deno.test(`rope ${mode}: odd head sizes and one head (partial vectors)`, () => {
    for (const [headDim, nDims] of [[6, 6], [14, 10], [34, 34], [35, 2]] as const) {
      checkCase({ headDim, nDims, mode, freqBase: 10000, freqScale: 1, heads: 1 });
      checkCase({ headDim, nDims, mode, freqBase: 10000, freqScale: 0.5, ...YARN, heads: 1 });
    }
  });
}

Deno.test("rope: the defaults are ggml_rope_ext with YaRN off, bit for bit the explicit form", () => {
  const compute = (options: RopeOptions): Uint8Array => {
    using cpu = new CpuBackend({ threads: 1 });
    const ctx = new Context();
    const x = ctx.newTensor("f32", [64, HEADS, TOKENS]);
    const positions = ctx.newTensor("i32", [TOKENS]);
    const out = rope(x, positions, options);
    const graph = Graph.build(out);
    using _memory = allocTensors(cpu, [...ctx.tensors, ...graph.nodes]);
    cpu.setTensor(x, new Rng(3).f32(x.nelements));
    cpu.setTensor(positions, Int32Array.from(POSITIONS));
    cpu.graphCompute(graph);
    const data = cpu.getTensor(out);
    return new Uint8Array(data.buffer, data.byteOffset, data.byteLength).slice();
  };
  const base = { nDims: 64, mode: "normal", freqBase: 100000 } as const;
  const explicit = compute({
    ...base,
    freqScale: 1,
    extFactor: 0,
    attnFactor: 1,
    betaFast: 5,
    betaSlow: 3,
    nCtxOrig: 77,
  });
  assert.deepEqual(compute(base), explicit, "betas and nCtxOrig do nothing with extFactor 0");
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
  throwsWith(() => rope(ctx.newTensor("bf16", [64, 3, 5]), pos, ok), DTypeError, ["rope", "bf16"]);
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
  for (const name of ["extFactor", "attnFactor", "betaFast", "betaSlow"] as const) {
    for (const value of [Infinity, NaN, -1e39]) {
      throwsWith(() => rope(a, pos, { ...ok, [name]: value }), ArgumentError, [
        "rope",
        name,
        `${value}`,
      ]);
    }
  }
  for (const nCtxOrig of [-1, 2.5, NaN, 2 ** 31]) {
    throwsWith(() => rope(a, pos, { ...ok, nCtxOrig }), ArgumentError, [
      "rope",
      "nCtxOrig",
      `${nCtxOrig}`,
    ]);
  }
  const factors = (dtype: "f32" | "f16", ne: number[]): Tensor =>
    ctx.newTensor(dtype, ne as [number]);
  throwsWith(() => rope(a, pos, { ...ok, freqFactors: factors("f16", [32]) }), DTypeError, [
    "rope",
    "f16",
  ]);
  for (const ne of [[31], [32, 2], [16]]) {
    throwsWith(() => rope(a, pos, { ...ok, freqFactors: factors("f32", ne) }), ShapeError, [
      "rope",
      "freqFactors",
      `[${ne.join(", ")}]`,
    ]);
  }
  throwsWith(
    () => rope(a, pos, { ...ok, freqFactors: [1, 2] as unknown as Tensor }),
    ArgumentError,
    ["rope", "freqFactors"],
  );
});

Deno.test("rope: measured max errors against both references", () => {
  // Runs after the cases above (Deno runs a file's tests in order).
  console.log(
    `rope max |err|: ${worst.f32Abs.toExponential(2)} vs f32-angle reference ` +
      `(${(worst.f32Ratio * 100).toFixed(1)}% of bound), ${worst.f64Abs.toExponential(2)} vs ` +
      `f64-angle reference (${(worst.f64Ratio * 100).toFixed(1)}% of bound); f16 results ` +
      `${(worstF16 * 100).toFixed(1)}% of bound`,
  );
  assert.ok(worst.f32Abs > 0 || worst.f64Abs > 0, "the cases ran");
});

Deno.test("rope_test leaves no native buffers, pools or plans alive", () => {
  assertNothingLive(baseline);
});
