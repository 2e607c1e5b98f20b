/**
 * Graft's CPU mulMat against ggml's bit for bit, on the dot products SmolLM2 runs: q4_1 weights
 * x f32 (ggml_vec_dot_q4_1_q8_1 after quantizing src1 to q8_1, any column count: llamafile_sgemm
 * has no q4_1), the q8_0 output layer (ggml_vec_dot_q8_0_q8_0 for one column, tinyBLAS_Q0_AVX
 * from two on: the same sums), and the f16 attention products K*q and V*softmax over strided
 * KV-cache views (ggml_vec_dot_f16 for one column or where tinyBLAS declines the shape, tinyBLAS
 * otherwise). Quantized cases stay below mul_mat_quant.zig's GEMM threshold of 20 columns.
 * ggml's results are the fixtures tests/fixtures/ggml_exact_dots{,_avx2}.json, written by
 * bench/peers/ggml_exact_dots.sh from the pinned llama.cpp build (AVX-512) and a ggml-only AVX2
 * build of the same sources; inputs come from the seeded generator mirrored below.
 *
 * Bitwise on every kernel build the CPU has, with 1 and 2 threads, each build against ggml's
 * build of the same SIMD level (the quantized dots are the same bits in both ggml builds; the
 * f16 ones sum 16-lane vectors in one and 8-lane ones in the other, as Graft's builds do).
 *
 * A second test regenerates the fixtures with the llama.cpp builds and checks they are
 * unchanged; it is skipped with a message where the pinned build is absent (CI).
 */

import assert from "node:assert/strict";
import { compute } from "./compute_builds.ts";
import { Context, mulMat, permute, type Tensor, view } from "../mod.ts";

interface Case {
  kind: "quant" | "kq" | "kqv";
  type: string;
  k: number;
  m: number;
  n: number;
  n_kv: number;
  seed: number;
  bits: string;
}

const FIXTURE = new URL("./fixtures/ggml_exact_dots.json", import.meta.url);
const FIXTURE_AVX2 = new URL("./fixtures/ggml_exact_dots_avx2.json", import.meta.url);
const CELLS = 256, EMBD = 192, HEAD = 64, KV_HEADS = 3, Q_HEADS = 9;

/** bench/peers/ggml_exact_dots.c's xorshift32 generator. */
class XorShift {
  #x: number;
  constructor(seed: number) {
    this.#x = seed >>> 0;
  }
  u32(): number {
    let x = this.#x;
    x = (x ^ (x << 13)) >>> 0;
    x = (x ^ (x >>> 17)) >>> 0;
    x = (x ^ (x << 5)) >>> 0;
    this.#x = x;
    return x;
  }
  signed(): number {
    return (this.u32() >>> 8) / 8388608 - 1;
  }
  unit(): number {
    return (this.u32() >>> 8) / 16777216;
  }
  f16(): number {
    const r = this.u32() >>> 16;
    return (r & 0x8000) | ((12 + ((r >> 10) & 3)) << 10) | (r & 0x3ff);
  }
}

function genBlocks(rng: XorShift, type: string, out: Uint8Array): void {
  const dv = new DataView(out.buffer, out.byteOffset, out.byteLength);
  if (type === "q4_1") {
    for (let p = 0; p < out.length; p += 20) {
      dv.setUint16(p, 0x2000 | (rng.u32() & 0x3ff), true);
      dv.setUint16(p + 2, 0xac00 | (rng.u32() & 0x3ff), true);
      for (let i = 0; i < 16; i++) out[p + 4 + i] = rng.u32() & 0xff;
    }
  } else {
    for (let p = 0; p < out.length; p += 34) {
      dv.setUint16(p, 0x1c00 | (rng.u32() & 0x3ff), true);
      for (let i = 0; i < 32; i++) out[p + 2 + i] = ((rng.u32() % 255) - 127) & 0xff;
    }
  }
}

/** The case's graph in a fresh context, its inputs, and its output. */
function build(c: Case): { ctx: Context; inputs: [Tensor, Uint8Array][]; output: Tensor } {
  const ctx = new Context();
  const rng = new XorShift(c.seed);
  let a: Tensor, b: Tensor, output: Tensor;
  if (c.kind === "quant") {
    a = ctx.newTensor(c.type as "q4_1" | "q8_0", [c.k, c.m]);
    b = ctx.newTensor("f32", [c.k, c.n]);
    output = mulMat(a, b);
  } else if (c.kind === "kq") {
    a = ctx.newTensor("f16", [EMBD, CELLS]);
    b = ctx.newTensor("f32", [HEAD, Q_HEADS, c.n]);
    const k = view(a, [HEAD, c.n_kv, KV_HEADS], { nb: [2, EMBD * 2, HEAD * 2, EMBD * 2 * c.n_kv] });
    output = mulMat(k, permute(b, [0, 2, 1, 3]));
  } else {
    a = ctx.newTensor("f16", [CELLS, EMBD]);
    b = ctx.newTensor("f32", [c.n_kv, c.n, Q_HEADS]);
    const row = CELLS * 2;
    const v = view(a, [c.n_kv, HEAD, KV_HEADS], {
      nb: [2, row, row * HEAD, row * HEAD * KV_HEADS],
    });
    output = mulMat(v, b);
  }
  const aBytes = new Uint8Array(a.nbytes);
  if (c.kind === "quant") genBlocks(rng, c.type, aBytes);
  else {
    const h = new Uint16Array(aBytes.buffer);
    for (let i = 0; i < h.length; i++) h[i] = rng.f16();
  }
  const bValues = new Float32Array(b.nelements);
  for (let i = 0; i < bValues.length; i++) {
    bValues[i] = c.kind === "quant"
      ? rng.signed() * (1 << ((i >> 5) % 4))
      : c.kind === "kq"
      ? rng.signed()
      : rng.unit();
  }
  return { ctx, inputs: [[a, aBytes], [b, new Uint8Array(bValues.buffer)]], output };
}

function label(c: Case): string {
  return c.kind === "quant"
    ? `${c.type} [${c.k}, ${c.m}] x [${c.k}, ${c.n}]`
    : `${c.kind} n_kv=${c.n_kv} n=${c.n}`;
}

const cases: Case[] = JSON.parse(Deno.readTextFileSync(FIXTURE)).cases;
/** The AVX2 build's f16 results (its quantized ones are the AVX-512 build's). */
const casesAvx2: Case[] = JSON.parse(Deno.readTextFileSync(FIXTURE_AVX2)).cases;

function key(c: Case): string {
  return `${c.kind} ${c.type} ${c.k} ${c.m} ${c.n} ${c.n_kv} ${c.seed}`;
}

/** ggml's result for `c` from the build matching Graft's kernel build `simd`. */
function wanted(c: Case, simd: string): string {
  if (simd === "avx512" || c.kind === "quant") return c.bits;
  const twin = casesAvx2.find((d) => key(d) === key(c));
  assert.ok(twin, `no AVX2 fixture for ${label(c)}`);
  return twin.bits;
}

Deno.test("mulMat equals ggml's CPU mul_mat bit for bit (q4_1, q8_0 and f16 attention dots)", () => {
  for (const c of cases) {
    // Every kernel build at 1 and 2 threads (bitwise equal to each other, checked inside).
    for (const [simd, got] of compute(() => build(c))) {
      const want = new Uint32Array(
        Uint8Array.from(atob(wanted(c, simd)), (ch) => ch.charCodeAt(0)).buffer,
      );
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
