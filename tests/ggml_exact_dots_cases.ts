/**
 * The cases of tests/fixtures/ggml_exact_dots{,_avx2}.json (ggml's CPU mul_mat results, written
 * by bench/peers/ggml_exact_dots.sh) and the graphs and inputs that reproduce them: the inputs
 * come from bench/peers/ggml_exact_dots.c's seeded generator, mirrored here. Shared by the
 * tests that compare a backend's mulMat with ggml's bits (ggml_exact_dots_test.ts for the CPU,
 * webgpu_exact_quant_test.ts, webgpu_exact_kquant_test.ts and webgpu_exact_f16_test.ts for
 * WebGPU, with tests/gpu.ts's computeOnGpu), and the CPU runner and bit comparison they share.
 * @module
 */

import assert from "node:assert/strict";
import {
  allocTensors,
  Context,
  CpuBackend,
  Graph,
  mulMat,
  permute,
  quantize,
  type Tensor,
  view,
} from "../mod.ts";
import { rowBytes } from "../src/dtype.ts";
import type { QuantDType } from "../src/quant.ts";
import type { BuiltGraph } from "./gpu.ts";
import { Rng } from "./reference.ts";

/** One fixture case: a quantized product (`quant`) or an f16 attention product (`kq`, `kqv`). */
export interface Case {
  kind: "quant" | "kq" | "kqv";
  type: string;
  k: number;
  m: number;
  n: number;
  n_kv: number;
  seed: number;
  /**
   * quant only: the weights lived in ggml's CPU_REPACK buffer (its repacked 8x8 kernels), and
   * src1 was [k, n, batch]: Graft asks for them with `mulMat(a, b, { ggml: true, repack: true })`.
   */
  repack?: boolean;
  batch?: number;
  /**
   * Every 256-block of src1 holds -256 before +256 (plant_ties in the C harness, after the
   * generation): the tie where ggml's 4x8 q8_K quantizer and quantize_row_q8_K take opposite
   * signs.
   */
  ties?: boolean;
  /** ggml's output, f32 little-endian, base64. */
  bits: string;
}

const FIXTURE = new URL("./fixtures/ggml_exact_dots.json", import.meta.url);
const FIXTURE_AVX2 = new URL("./fixtures/ggml_exact_dots_avx2.json", import.meta.url);
const CELLS = 256, EMBD = 192, HEAD = 64, KV_HEADS = 3, Q_HEADS = 9;

/** bench/peers/ggml_exact_dots.c's xorshift32 generator. */
export class XorShift {
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

/** The k-quant weight types of the fixtures. */
export const K_QUANTS: readonly string[] = ["q4_K", "q5_K", "q6_K"];

/** A k-quant super-block's f16 scale: magnitude in [2^-13, 2^-11), sign `sign`. */
function f16K(rng: XorShift, sign: number): number {
  return sign | 0x0800 | (rng.u32() & 0x7ff);
}

/**
 * One k-quant super-block (gen_k_block): q4_K / q5_K: d, dmin, 12 scale bytes, q5_K's 32 bytes
 * of fifth bits, 128 bytes of nibbles; q6_K: 208 bytes of quants and int8 scales, then d.
 */
function genKBlock(rng: XorShift, type: string, p: Uint8Array, dv: DataView): void {
  if (type === "q6_K") {
    for (let i = 0; i < 208; i++) p[i] = rng.u32() & 0xff;
    const sign = rng.u32() & 0x8000;
    dv.setUint16(208, f16K(rng, sign), true);
    return;
  }
  dv.setUint16(0, f16K(rng, 0), true);
  dv.setUint16(2, f16K(rng, 0), true);
  const rest = type === "q5_K" ? 12 + 32 + 128 : 12 + 128;
  for (let i = 0; i < rest; i++) p[4 + i] = rng.u32() & 0xff;
}

function genBlocks(rng: XorShift, type: string, out: Uint8Array): void {
  const dv = new DataView(out.buffer, out.byteOffset, out.byteLength);
  if (K_QUANTS.includes(type)) {
    const size = type === "q4_K" ? 144 : type === "q5_K" ? 176 : 210;
    for (let p = 0; p < out.length; p += size) {
      genKBlock(rng, type, out.subarray(p, p + size), new DataView(out.buffer, out.byteOffset + p));
    }
  } else if (type === "q5_0" || type === "q5_1") {
    // d (and q5_1's negative m), the 32 fifth bits, 16 bytes of nibbles.
    const withMin = type === "q5_1";
    for (let p = 0; p < out.length; p += withMin ? 24 : 22) {
      dv.setUint16(p, 0x2000 | (rng.u32() & 0x3ff), true);
      if (withMin) dv.setUint16(p + 2, 0xac00 | (rng.u32() & 0x3ff), true);
      dv.setUint32(p + (withMin ? 4 : 2), rng.u32(), true);
      for (let i = 0; i < 16; i++) out[p + (withMin ? 8 : 6) + i] = rng.u32() & 0xff;
    }
  } else if (type === "q4_0") {
    // d (magnitude in [2^-9, 2^-8), either sign), 16 bytes of nibbles.
    for (let p = 0; p < out.length; p += 18) {
      const r = rng.u32();
      dv.setUint16(p, (r & 0x8000) | 0x1c00 | (r & 0x3ff), true);
      for (let i = 0; i < 16; i++) out[p + 2 + i] = rng.u32() & 0xff;
    }
  } else if (type === "q4_1") {
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

/** The weight types of the fixtures' quantized cases. */
type QuantType = "q4_0" | "q4_1" | "q8_0" | "q5_0" | "q5_1" | "q4_K" | "q5_K" | "q6_K";

/** A case's graph in a fresh context, its inputs, and its output. */
export type CaseGraph = BuiltGraph;

/**
 * The case's graph in a fresh context, its inputs, and its output; `ggml` is mulMat's option
 * of that name (ggml's arithmetic at every column count: the fixtures' quantized cases have
 * fewer than 20 columns, where the CPU computes so without it). Repacked cases always ask for
 * ggml's arithmetic with `repack` (what llama.cpp computes with those weights in CPU_REPACK).
 */
export function build(c: Case, ggml = false): CaseGraph {
  const ctx = new Context();
  const rng = new XorShift(c.seed);
  let a: Tensor, b: Tensor, output: Tensor;
  if (c.kind === "quant") {
    a = ctx.newTensor(c.type as QuantType, [c.k, c.m]);
    b = ctx.newTensor("f32", [c.k, c.n, c.batch ?? 1]);
    output = mulMat(a, b, c.repack ? { ggml: true, repack: true } : { ggml });
  } else if (c.kind === "kq") {
    a = ctx.newTensor("f16", [EMBD, CELLS]);
    b = ctx.newTensor("f32", [HEAD, Q_HEADS, c.n]);
    const k = view(a, [HEAD, c.n_kv, KV_HEADS], { nb: [2, EMBD * 2, HEAD * 2, EMBD * 2 * c.n_kv] });
    output = mulMat(k, permute(b, [0, 2, 1, 3]), { ggml });
  } else {
    a = ctx.newTensor("f16", [CELLS, EMBD]);
    b = ctx.newTensor("f32", [c.n_kv, c.n, Q_HEADS]);
    const row = CELLS * 2;
    const v = view(a, [c.n_kv, HEAD, KV_HEADS], {
      nb: [2, row, row * HEAD, row * HEAD * KV_HEADS],
    });
    output = mulMat(v, b, { ggml });
  }
  const aBytes = new Uint8Array(a.nbytes);
  if (c.kind === "quant") genBlocks(rng, c.type, aBytes);
  else {
    const h = new Uint16Array(aBytes.buffer);
    for (let i = 0; i < h.length; i++) h[i] = rng.f16();
  }
  const bValues = new Float32Array(b.nelements);
  const kQuant = K_QUANTS.includes(c.type);
  for (let i = 0; i < bValues.length; i++) {
    // gen_activations_k (by 16, an outlier every 61), gen_activations (by 32), kq, kqv.
    bValues[i] = c.kind === "quant" && kQuant
      ? rng.signed() * (1 << ((i >> 4) % 4)) * (i % 61 === 0 ? 16 : 1)
      : c.kind === "quant"
      ? rng.signed() * (1 << ((i >> 5) % 4))
      : c.kind === "kq"
      ? rng.signed()
      : rng.unit();
  }
  if (c.ties) plantTies(rng, bValues);
  return { ctx, inputs: [[a, aBytes], [b, new Uint8Array(bValues.buffer)]], output };
}

/** plant_ties: in each 256-block, element i = -256 and element j > i = +256. */
function plantTies(rng: XorShift, x: Float32Array): void {
  for (let at = 0; at + 256 <= x.length; at += 256) {
    const i = rng.u32() % 255;
    const j = i + 1 + rng.u32() % (255 - i);
    x[at + i] = -256;
    x[at + j] = 256;
  }
}

/** A short name of the case for messages. */
export function label(c: Case): string {
  return c.kind === "quant"
    ? `${c.type} [${c.k}, ${c.m}] x [${c.k}, ${c.n}${c.batch ? `, ${c.batch}` : ""}]` +
      (c.repack ? " repacked" : "") + (c.ties ? " with -amax, +amax ties" : "")
    : `${c.kind} n_kv=${c.n_kv} n=${c.n}`;
}

/** The cases with the pinned llama.cpp build's (AVX-512) results. */
export const cases: Case[] = JSON.parse(Deno.readTextFileSync(FIXTURE)).cases;
/**
 * The AVX2 build's f16 and k-quant results (its other quantized ones are the AVX-512 build's;
 * its k-quant ones are too, recorded to show it).
 */
export const casesAvx2: Case[] = JSON.parse(Deno.readTextFileSync(FIXTURE_AVX2)).cases;

function key(c: Case): string {
  return `${c.kind} ${c.type} ${c.k} ${c.m} ${c.n} ${c.n_kv} ${c.seed}`;
}

/** ggml's result for `c` from the build matching Graft's kernel build `simd`. */
export function wanted(c: Case, simd: string): string {
  if (simd === "avx512" || (c.kind === "quant" && !K_QUANTS.includes(c.type) && !c.repack)) {
    return c.bits;
  }
  const twin = casesAvx2.find((d) => key(d) === key(c));
  assert.ok(twin, `no AVX2 fixture for ${label(c)}`);
  return twin.bits;
}

/** The f32 bits of a fixture's base64 result. */
export function fixtureBits(bits: string): Uint32Array {
  return new Uint32Array(Uint8Array.from(atob(bits), (ch) => ch.charCodeAt(0)).buffer);
}

/** `built`'s output on the CPU backend's AVX2 build (2 threads): ggml's AVX2 bits. */
export function computeOnCpuAvx2(built: CaseGraph): Float32Array {
  const { ctx, inputs, output } = built;
  using cpu = new CpuBackend({ simd: "avx2", threads: 2 });
  const graph = Graph.build(output);
  using _memory = allocTensors(cpu, [...ctx.tensors, ...graph.leafs, ...graph.nodes]);
  for (const [t, data] of inputs) cpu.setTensor(t, data);
  cpu.graphCompute(graph);
  const got = cpu.getTensor(output);
  assert.ok(got instanceof Float32Array);
  return got;
}

/** Asserts `got` has `want`'s bits, naming how many elements differ and the first. */
export function assertBits(
  got: Float32Array,
  want: Float32Array | Uint32Array,
  what: string,
): void {
  assert.equal(got.length, want.length, what);
  const bits = new Uint32Array(got.buffer, got.byteOffset, got.length);
  const wantBits = new Uint32Array(want.buffer, want.byteOffset, want.length);
  let differ = 0, first = -1;
  for (let i = 0; i < wantBits.length; i++) {
    if (bits[i] !== wantBits[i]) {
      differ++;
      if (first < 0) first = i;
    }
  }
  const at = first < 0 ? "" : ` (first at ${first}: ${got[first]} for ` +
    `${new Float32Array(wantBits.buffer, wantBits.byteOffset, wantBits.length)[first]})`;
  assert.equal(differ, 0, `${what}: ${differ}/${wantBits.length} elements differ${at}`);
}

/**
 * A quantized product the WebGPU exact-kernel tests build beyond the fixture's cases (and check
 * against `computeOnCpuAvx2`): `dtype` weights [k, m] x f32 [k, n], with batches and an offset.
 */
export interface QuantShape {
  dtype: QuantDType;
  k: number;
  m: number;
  n: number;
  /** Batches of the weights and of the activations (a multiple of the weights'). */
  batches?: [number, number];
  /** Weights start this many rows into their buffer (a byte offset, no multiple of 4 here). */
  skipRows?: number;
}

/** A shape's name in test names. */
export function quantShapeLabel(s: QuantShape): string {
  const [wb, ab] = s.batches ?? [1, 1];
  return `${s.dtype} [${s.k}, ${s.m}, ${wb}] x [${s.k}, ${s.n}, ${ab}]` +
    (s.skipRows ? ` at row ${s.skipRows}` : "");
}

/**
 * The graph of a shape with ggml's arithmetic: uniform weights in [-0.1, 0.1) quantized to its
 * dtype, activations from `activations` (each test's mix of block magnitudes), both from `seed`.
 */
export function buildQuantShape(
  s: QuantShape,
  seed: number,
  activations: (rng: Rng, count: number) => Float32Array,
): CaseGraph {
  const rng = new Rng(seed);
  const [wb, ab] = s.batches ?? [1, 1];
  const skip = s.skipRows ?? 0;
  const rows = s.m * wb + skip;
  const weights = new Float32Array(s.k * rows);
  for (let i = 0; i < weights.length; i++) weights[i] = rng.uniform() * 0.1;
  const ctx = new Context();
  const full = ctx.newTensor(s.dtype, [s.k, rows]);
  const a = skip === 0 && wb === 1 ? full : view(full, [s.k, s.m, wb], {
    offset: skip * rowBytes(s.dtype, s.k),
  });
  const b = ctx.newTensor("f32", [s.k, s.n, ab]);
  return {
    ctx,
    inputs: [[full, quantize(weights, s.dtype)], [b, activations(rng, b.nelements)]],
    output: mulMat(a, b, { ggml: true }),
  };
}
