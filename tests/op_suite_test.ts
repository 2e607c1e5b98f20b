/**
 * The op suite on the CPU backend (see `op_suite.ts`): every case against its float64
 * reference with the stated per-dtype tolerance, at 1 and 2 threads; NaN and infinities through
 * every unary math op as ggml's CPU defines them; the op table's CPU `support` declarations
 * verified both ways; and `docs/ops.md` up to date with the table.
 */

import assert from "node:assert/strict";
import { argmax, cumsum, maxRows, minRows, sumRows, type Tensor } from "../mod.ts";
import { CpuBackend } from "../src/backend/cpu/backend.ts";
import { OPS } from "../src/op.ts";
import { opsDoc } from "../tools/ops_doc.ts";
import { CASES, checkDeclarations, Inputs, runGraph, SPECIALS, UNARY_MATH } from "./op_suite.ts";
import { assertClose, RefTensor, roundF16 } from "./reference.ts";

const backends = [new CpuBackend({ threads: 1 }), new CpuBackend({ threads: 2 })];
globalThis.addEventListener("unload", () => backends.forEach((b) => b.dispose()));

for (const c of CASES) {
  Deno.test(`op suite cpu: ${c.name}`, async () => {
    for (const backend of backends) {
      const inputs = new Inputs(c.name);
      const { out, ref } = c.build(inputs);
      const got = await runGraph(backend, inputs, out);
      assertClose(RefTensor.of(ref.ne, got), ref, c.tol, `cpu ${c.name}`);
    }
  });
}

Deno.test("op suite cpu: NaN and infinities through the unary math ops, as ggml's CPU", async () => {
  for (const [name, s] of Object.entries(UNARY_MATH)) {
    for (const dtype of ["f32", "f16"] as const) {
      const inputs = new Inputs(name);
      const a = inputs.fixed(dtype, SPECIALS);
      const out = s!.build(a.t);
      const got = await runGraph(backends[1]!, inputs, out);
      SPECIALS.forEach((x, k) => {
        const want = dtype === "f16" ? roundF16(s!.ref(x)) : Math.fround(s!.ref(x));
        const value = got[k]!;
        // Non-finite results exactly; finite ones (of 0 and ±1) within the cases' tolerance.
        const same = Number.isFinite(want)
          ? Math.abs(value - want) <= 1e-5 * Math.abs(want) + 1e-7
          : Object.is(value, want) || (Number.isNaN(value) && Number.isNaN(want));
        assert.ok(same, `${name} ${dtype}(${x}) is ${value}, ggml's CPU gives ${want}`);
      });
    }
  }
});

Deno.test("op suite cpu: NaN never wins argmax, maxRows or minRows; sums and scans carry it", async () => {
  const values = [1, NaN, 3, NaN, -Infinity, 3];
  const cases: [string, (a: Tensor) => Tensor, number[]][] = [
    ["argmax", argmax, [2]],
    ["maxRows", maxRows, [3]],
    ["minRows", minRows, [-Infinity]],
    ["sumRows", sumRows, [NaN]],
    ["cumsum", cumsum, [1, NaN, NaN, NaN, NaN, NaN]],
  ];
  for (const [name, op, want] of cases) {
    const inputs = new Inputs(name);
    const got = await runGraph(backends[0]!, inputs, op(inputs.fixed("f32", values).t));
    assert.deepEqual([...got], want, name);
  }
  const allNaN = new Inputs("all NaN");
  const nan = allNaN.fixed("f32", [NaN, NaN]).t;
  assert.deepEqual([...await runGraph(backends[0]!, allNaN, argmax(nan))], [0]);
});

Deno.test("op suite cpu: the op table's cpu support declarations hold both ways", async () => {
  const problems = await checkDeclarations(backends[0]!, "cpu");
  assert.deepEqual(problems, []);
});

Deno.test("op suite: every op of the table has cases or is covered by backend_ops_test", () => {
  const covered = new Set(CASES.map((c) => c.op));
  for (const name of Object.keys(UNARY_MATH)) assert.ok(covered.has(name as never), name);
  const named = ["sumRows", "argmax", "maxRows", "minRows", "countEqual", "cumsum"];
  for (const name of [...named, "acc", "set", "padCircular", "interpolate"]) {
    assert.ok(covered.has(name as never), `no suite case for ${name}`);
  }
  assert.ok(Object.keys(OPS).length > 0);
});

Deno.test("docs/ops.md is generated from the op table (run `deno task docs:ops` if not)", async () => {
  const onDisk = await Deno.readTextFile(new URL("../docs/ops.md", import.meta.url));
  assert.ok(
    onDisk === opsDoc(),
    "docs/ops.md is stale: run `deno task docs:ops` and commit the result",
  );
});
