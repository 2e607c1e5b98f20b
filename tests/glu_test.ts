/**
 * Gated linear units (src/ops/glu.ts, ggml's GGML_OP_GLU): every kind, one tensor split in
 * half (plain and swapped) and two tensors, f32 and f16, a transposed input, on the CPU against
 * a float64 reference (the activation's tolerance of the op suite: rtol 1e-5 plus 1e-7 for f32,
 * one f16 ulp for f16 results), and the builders' shape errors.
 */

import assert from "node:assert/strict";
import { Context, CpuBackend, glu, type GluKind, ShapeError, transpose } from "../mod.ts";
import { Inputs, refErfc, runGraph } from "./op_suite.ts";

const ACT: Record<GluKind, (x: number) => number> = {
  reglu: (x) => x > 0 ? x : 0,
  geglu: (x) => 0.5 * x * (1 + Math.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))),
  swiglu: (x) => x / (1 + Math.exp(-x)),
  gegluErf: (x) => 0.5 * x * refErfc(-x / Math.SQRT2),
  gegluQuick: (x) => x / (1 + Math.exp(-1.702 * x)),
};

const cpu = new CpuBackend({ threads: 2 });
globalThis.addEventListener("unload", () => cpu.dispose());

/** Checks `got` against act(x) * g element by element. */
function check(
  label: string,
  got: Float64Array,
  want: number[],
  dtype: "f32" | "f16",
): void {
  assert.equal(got.length, want.length, label);
  const [rtol, atol] = dtype === "f32" ? [1e-5, 1e-7] : [2 ** -10, 2 ** -14];
  for (let i = 0; i < want.length; i++) {
    const bound = atol + rtol * Math.abs(want[i]!);
    assert.ok(
      Math.abs(got[i]! - want[i]!) <= bound,
      `${label} [${i}]: ${got[i]} vs ${want[i]} (bound ${bound})`,
    );
  }
}

for (const kind of Object.keys(ACT) as GluKind[]) {
  for (const dtype of ["f32", "f16"] as const) {
    Deno.test(`glu ${kind} ${dtype}: one tensor split in half, plain and swapped`, async () => {
      for (const swapped of [false, true]) {
        const inputs = new Inputs(`glu ${kind} ${dtype}`);
        const a = inputs.float(dtype, [2 * 37, 5, 3], 0.05, 3);
        const out = glu(a.t, kind, undefined, { swapped });
        assert.deepEqual(out.ne, [37, 5, 3, 1]);
        const want: number[] = [];
        for (let r = 0; r < 15; r++) {
          for (let j = 0; j < 37; j++) {
            const first = a.r.data[r * 74 + j]!, second = a.r.data[r * 74 + 37 + j]!;
            const [x, g] = swapped ? [second, first] : [first, second];
            want.push(ACT[kind](x) * g);
          }
        }
        check(`${kind} swapped=${swapped}`, await runGraph(cpu, inputs, out), want, dtype);
      }
    });
  }
  Deno.test(`glu ${kind}: two tensors, b transposed`, async () => {
    const inputs = new Inputs(`glu2 ${kind}`);
    const a = inputs.float("f32", [7, 33], 0.05, 3);
    const bT = inputs.float("f32", [33, 7], 0.05, 3);
    const out = glu(a.t, kind, transpose(bT.t));
    const want: number[] = [];
    for (let r = 0; r < 33; r++) {
      for (let j = 0; j < 7; j++) {
        want.push(ACT[kind](a.r.data[r * 7 + j]!) * bT.r.data[j * 33 + r]!);
      }
    }
    check(`${kind} split`, await runGraph(cpu, inputs, out), want, "f32");
  });
}

Deno.test("glu: shape errors name the op and the shapes", () => {
  const ctx = new Context();
  const odd = ctx.newTensor("f32", [7, 2]);
  assert.throws(() => glu(odd, "swiglu"), (e: unknown) => {
    assert.ok(e instanceof ShapeError);
    assert.match(e.message, /swiglu: a \[7, 2\] needs an even ne\[0\]/);
    return true;
  });
  const b = ctx.newTensor("f32", [7, 3]);
  assert.throws(() => glu(odd, "geglu", b), /geglu: a \[7, 2\] and b \[7, 3\] must have one shape/);
  assert.throws(() => glu(odd, "reglu", odd, { swapped: true }), /swapped applies to one tensor/);
});
