/**
 * Graft's CPU mulMat against ggml's bit for bit, on the dot products SmolLM2 runs: q4_1 weights
 * x f32 (ggml_vec_dot_q4_1_q8_1 after quantizing src1 to q8_1, any column count: llamafile_sgemm
 * has no q4_1), the q8_0 output layer (ggml_vec_dot_q8_0_q8_0 for one column, tinyBLAS_Q0_AVX
 * from two on: the same sums), q5_0 and q5_1 weights (ggml_vec_dot_q5_0_q8_0 / _q5_1_q8_1;
 * q5_0 takes tinyBLAS_Q0_AVX from two columns on, the same sums), the k-quants of a Q4_K_M
 * file (q4_K, q5_K, q6_K, weights not repacked: ggml_vec_dot_q*_K_q8_K per element below 8
 * columns, ggml's tiled k-quant matmul from 8 on), and the f16 attention products K*q and V*softmax over strided
 * KV-cache views (ggml_vec_dot_f16 for one column or where tinyBLAS declines the shape, tinyBLAS
 * otherwise). Quantized cases below mul_mat_quant.zig's GEMM threshold of 20 columns run as
 * they are; those from 20 on (prefill) ask for ggml's arithmetic (`mulMat(a, b, { ggml: true })`,
 * as llama's graph does).
 * ggml's results are the fixtures tests/fixtures/ggml_exact_dots{,_avx2}.json, written by
 * bench/peers/ggml_exact_dots.sh from the pinned llama.cpp build (AVX-512) and a ggml-only AVX2
 * build of the same sources; inputs come from the seeded generator mirrored in
 * ggml_exact_dots_cases.ts.
 *
 * Bitwise on every kernel build the CPU has, with 1 and 2 threads, each build against ggml's
 * build of the same SIMD level (the quantized dots are the same bits in both ggml builds, and
 * the AVX2 fixture records the k-quant ones to show it; the f16 ones sum 16-lane vectors in one
 * and 8-lane ones in the other, as Graft's builds do).
 *
 * A second test regenerates the fixtures with the llama.cpp builds and checks they are
 * unchanged; it is skipped with a message where the pinned build is absent (CI).
 */

import assert from "node:assert/strict";
import { ArgumentError, Context, mulMat } from "../mod.ts";
import { compute } from "./compute_builds.ts";
import {
  build,
  type Case,
  cases,
  casesAvx2,
  fixtureBits,
  label,
  wanted,
} from "./ggml_exact_dots_cases.ts";

/** From this many columns on, mul_mat_quant.zig's GEMM takes a product unless asked not to. */
const GEMM_COLUMNS_MIN = 20;

Deno.test("mulMat equals ggml's CPU mul_mat bit for bit (q4_1, q8_0, q5_0, q5_1, k-quants, f16 attention)", () => {
  for (const c of cases) {
    const ggml = c.kind === "quant" && c.n >= GEMM_COLUMNS_MIN;
    // Every kernel build at 1 and 2 threads (bitwise equal to each other, checked inside).
    for (const [simd, got] of compute(() => build(c, ggml))) {
      const want = fixtureBits(wanted(c, simd));
      assert.equal(got.length, want.length, label(c));
      const gotBits = new Uint32Array(got.buffer, got.byteOffset, got.length);
      const wantF = new Float32Array(want.buffer);
      let differ = 0, worst = 0;
      for (let i = 0; i < want.length; i++) {
        if (gotBits[i] !== want[i]) {
          differ++;
          const scale = Math.max(Math.abs(wantF[i]!), 1e-3);
          worst = Math.max(worst, Math.abs(got[i]! - wantF[i]!) / scale);
        }
      }
      assert.equal(
        differ,
        0,
        `${simd} ${
          label(c)
        }: ${differ}/${want.length} elements differ from ggml (worst rel ${worst})`,
      );
    }
  }
});

Deno.test("mulMat with repack: products ggml does not repack keep the plain ggml bits", () => {
  // q4_1, q8_0, q5_*, q5_K, q6_K, and q4_K with rows no multiple of 8: params[1] = 2 computes
  // them as params[1] = 1 (the plain fixture cases), so a model can ask for it everywhere.
  for (const c of cases) {
    if (c.kind !== "quant" || c.repack || (c.type === "q4_K" && c.m % 8 === 0)) continue;
    for (const [simd, got] of compute(() => build({ ...c, repack: true }))) {
      const want = fixtureBits(wanted(c, simd));
      const gotBits = new Uint32Array(got.buffer, got.byteOffset, got.length);
      assert.deepEqual(gotBits, want, `${simd} ${label(c)} with repack`);
    }
  }
});

Deno.test("mulMat's repack option without ggml is a typed error naming it", () => {
  const ctx = new Context();
  const a = ctx.newTensor("q4_0", [32, 8]);
  const b = ctx.newTensor("f32", [32, 1]);
  assert.throws(() => mulMat(a, b, { repack: true }), (e: unknown) => {
    return e instanceof ArgumentError && /mulMat/.test(e.message) && /repack/.test(e.message);
  });
});

const LLAMA_BUILD = `${
  Deno.env.get("GRAFT_CACHE") ?? `${Deno.env.get("HOME")}/.cache/graft`
}/llama.cpp-0.3.36/build-avx512/bin/libggml-cpu.so`;

function haveBuild(): boolean {
  try {
    return Deno.statSync(LLAMA_BUILD).isFile;
  } catch {
    return false;
  }
}

Deno.test("the fixture is what the pinned llama.cpp build computes now", async () => {
  if (!haveBuild()) {
    console.log(
      `skipped: no llama.cpp build at ${LLAMA_BUILD} (deno task llama:build); the fixture test above still ran`,
    );
    return;
  }
  const out = await Deno.makeTempDir();
  try {
    const script = new URL("../bench/peers/ggml_exact_dots.sh", import.meta.url).pathname;
    const run = await new Deno.Command(script, { args: [out], stdout: "piped", stderr: "piped" })
      .output();
    assert.ok(run.success, new TextDecoder().decode(run.stderr));
    for (
      const [name, recorded] of [["ggml_exact_dots.json", cases], [
        "ggml_exact_dots_avx2.json",
        casesAvx2,
      ]] as const
    ) {
      const fresh: Case[] = JSON.parse(await Deno.readTextFile(`${out}/${name}`)).cases;
      assert.equal(fresh.length, recorded.length, name);
      for (let i = 0; i < recorded.length; i++) {
        assert.equal(fresh[i]!.bits, recorded[i]!.bits, `${name}: ${label(recorded[i]!)}`);
      }
    }
  } finally {
    await Deno.remove(out, { recursive: true });
  }
});
