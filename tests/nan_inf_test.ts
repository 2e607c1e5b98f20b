/**
 * NaN and infinities on the CPU, per op, as ggml's CPU backend defines them (each op's JSDoc
 * says the same). WebGPU is best effort here: WGSL lets implementations assume no NaN or Inf.
 */

import assert from "node:assert/strict";
import {
  allocTensors,
  Context,
  CpuBackend,
  gelu,
  Graph,
  liveAllocations,
  norm,
  relu,
  rmsNorm,
  silu,
  softmax,
  sqr,
  sqrt,
  type Tensor,
} from "../mod.ts";
import { assertNothingLive } from "./leaks.ts";

const baseline = liveAllocations();
const specials = [NaN, Infinity, -Infinity, 0, -0];

function run(cpu: CpuBackend, values: readonly number[], op: (x: Tensor) => Tensor): number[] {
  const ctx = new Context();
  const x = ctx.newTensor("f32", [values.length]);
  const y = op(x);
  using _memory = allocTensors(cpu, [x, y]);
  cpu.setTensor(x, new Float32Array(values));
  cpu.graphCompute(Graph.build(y));
  return Array.from(cpu.getTensor(y));
}

/** Same values, NaN equal to NaN and -0 told from +0. */
function same(got: number[], want: number[], label: string): void {
  assert.equal(got.length, want.length);
  got.forEach((g, i) => assert.ok(Object.is(g, want[i]), `${label}[${i}]: ${g} vs ${want[i]}`));
}

Deno.test("unary ops on NaN, +Inf, -Inf, +0, -0 (values NaN, Inf, -Inf, 0, -0)", () => {
  using cpu = new CpuBackend({ threads: 1 });
  // relu: (x > 0) ? x : 0, so NaN and -0 give +0.
  same(run(cpu, specials, relu), [0, Infinity, 0, 0, 0], "relu");
  // gelu: 0 for x <= -10, x for x >= 10 (ggml's CPU gelu), NaN stays NaN.
  same(run(cpu, specials, gelu), [NaN, Infinity, 0, 0, -0], "gelu");
  // silu: x / (1 + e^-x); at -Inf that is -Inf / Inf = NaN, as ggml's.
  same(run(cpu, specials, silu), [NaN, Infinity, NaN, 0, -0], "silu");
  same(run(cpu, specials, sqr), [NaN, Infinity, Infinity, 0, 0], "sqr");
  same(run(cpu, [...specials, -1], sqrt), [NaN, Infinity, NaN, 0, -0, NaN], "sqrt");
});

Deno.test("softmax: a NaN or +Inf poisons its row; a fully masked row (all -Inf) gives zeros", () => {
  using cpu = new CpuBackend({ threads: 1 });
  same(run(cpu, [NaN, 1, 2], softmax), [NaN, NaN, NaN], "NaN row");
  same(run(cpu, [Infinity, 1, 2], softmax), [NaN, NaN, NaN], "+Inf row");
  same(run(cpu, [-Infinity, -Infinity, -Infinity], softmax), [0, 0, 0], "masked row");
  const partly = run(cpu, [-Infinity, 1, 2], softmax);
  assert.equal(partly[0], 0);
  assert.ok(Math.abs(partly[1]! + partly[2]! - 1) < 1e-6);
});

Deno.test("norms: NaN poisons its row; +Inf gives NaN where x is infinite and 0 elsewhere", () => {
  using cpu = new CpuBackend({ threads: 1 });
  same(run(cpu, [NaN, 1, 2], (x) => rmsNorm(x, 1e-6)), [NaN, NaN, NaN], "rmsNorm NaN");
  // rms = Inf, so the scale is 0: Inf * 0 = NaN, finite * 0 = 0.
  same(run(cpu, [Infinity, 1, 2], (x) => rmsNorm(x, 1e-6)), [NaN, 0, 0], "rmsNorm Inf");
  same(run(cpu, [NaN, 1, 2], (x) => norm(x, 1e-6)), [NaN, NaN, NaN], "norm NaN");
  // The mean is Inf, every deviation Inf - Inf or finite - Inf: the variance is NaN.
  same(run(cpu, [Infinity, 1, 2], (x) => norm(x, 1e-6)), [NaN, NaN, NaN], "norm Inf");
  same(run(cpu, [0, 0, 0], (x) => rmsNorm(x, 1e-6)), [0, 0, 0], "rmsNorm zeros");
});

Deno.test("NaN/Inf: nothing native is left alive", () => assertNothingLive(baseline));
