/**
 * The neural-network ops (flashAttnExt, ...) on the CPU backend against float64 references, on
 * odd shapes (head dims that are no multiple of a vector, token counts that are no multiple of
 * a block), f16 and f32 operands, grouped-query heads and non-contiguous (permuted) K and V.
 * Every case runs on each kernel build of this CPU with 1 and 2 threads (bitwise equal,
 * tests/compute_builds.ts). flashAttnExt is also checked against the unfused attention graph
 * (mulMat, softmax with the mask, mulMat) that it replaces.
 */

import assert from "node:assert/strict";
import {
  allocTensors,
  cont,
  Context,
  conv1d,
  conv2d,
  conv2dDw,
  convTranspose1d,
  convTranspose2d,
  CpuBackend,
  cpy,
  DTypeError,
  flashAttnExt,
  type FlashAttnOptions,
  Graph,
  groupNorm,
  im2col,
  interpolate,
  l2Norm,
  mulMat,
  permute,
  pool1d,
  pool2d,
  ShapeError,
  softmax,
  type Tensor,
  timestepEmbedding,
  transpose,
} from "../mod.ts";
import { compute } from "./compute_builds.ts";
import { assertClose, RefTensor, Rng, type Tolerance } from "./reference.ts";

type Dims4 = [number, number, number, number];

/** An input: the tensor the graph reads and its logical values (for the reference). */
interface Input {
  tensor: Tensor;
  /** Element (i0, i1, i2, i3) of the tensor as the engine sees it. */
  at(i0: number, i1: number, i2: number, i3: number): number;
}

/** Builds inputs in one context and remembers the data to upload. */
class Feed {
  readonly ctx = new Context();
  readonly inputs: [Tensor, ArrayBufferView][] = [];
  readonly rng: Rng;

  constructor(seed: number) {
    this.rng = new Rng(seed);
  }

  /** A contiguous tensor of `values` (f16 rounds them). */
  of(dtype: "f32" | "f16", ne: Dims4, values: ArrayLike<number>): Input {
    const t = this.ctx.newTensor(dtype, ne);
    const data = dtype === "f16" ? Float16Array.from(values) : Float32Array.from(values);
    this.inputs.push([t, data]);
    const [n0, n1, n2] = ne;
    return {
      tensor: t,
      at: (i0, i1, i2, i3) => data[i0 + n0 * (i1 + n1 * (i2 + n2 * i3))]!,
    };
  }

  random(dtype: "f32" | "f16", ne: Dims4, lo = -1, hi = 1): Input {
    return this.of(dtype, ne, this.rng.f32(ne[0] * ne[1] * ne[2] * ne[3], lo, hi));
  }

  /**
   * `ne` as a permuted view: the data is stored with dims 1 and 2 swapped (a KV cache laid out
   * [D, heads, positions]), so the view's nb[1] > nb[2].
   */
  swapped12(dtype: "f32" | "f16", ne: Dims4): Input {
    const stored = this.random(dtype, [ne[0], ne[2], ne[1], ne[3]]);
    return {
      tensor: permute(stored.tensor, [0, 2, 1, 3]),
      at: (i0, i1, i2, i3) => stored.at(i0, i2, i1, i3),
    };
  }
}

/** A causal mask [nKv, rows] for queries at positions nKv - T .. nKv - 1 (rows >= T: padding). */
function causal(nKv: number, rows: number, t: number): number[] {
  const out: number[] = [];
  for (let i = 0; i < rows; i++) {
    for (let j = 0; j < nKv; j++) out.push(j <= nKv - t + i ? 0 : -Infinity);
  }
  return out;
}

/** ggml's ALiBi slope of head h of `heads` (1 without maxBias). */
function slope(maxBias: number, h: number, heads: number): number {
  if (maxBias <= 0) return 1;
  const log2 = 2 ** Math.floor(Math.log2(heads));
  const m0 = 2 ** (-maxBias / log2);
  const m1 = 2 ** (-(maxBias / 2) / log2);
  return h < log2 ? m0 ** (h + 1) : m1 ** (2 * (h - log2) + 1);
}

/** float64 flash attention: dst [Dv, Hq, T, B]. */
function refFlashAttn(
  q: Input,
  k: Input,
  v: Input,
  mask: Input | undefined,
  options: FlashAttnOptions,
): RefTensor {
  const [d, t, hq, b] = q.tensor.ne;
  const [, nKv, hk, bk] = k.tensor.ne;
  const [dv, , hv, bv] = v.tensor.ne;
  const scale = options.scale ?? 1;
  const softcap = options.softcap ?? 0;
  const out = new Float64Array(dv * hq * t * b);
  const s = new Float64Array(nKv);
  for (let i3 = 0; i3 < b; i3++) {
    for (let h = 0; h < hq; h++) {
      const m = slope(options.maxBias ?? 0, h, hq);
      const [kh, kb] = [Math.floor(h / (hq / hk)), Math.floor(i3 / (b / bk))];
      const [vh, vb] = [Math.floor(h / (hq / hv)), Math.floor(i3 / (b / bv))];
      for (let i1 = 0; i1 < t; i1++) {
        let top = -Infinity;
        for (let j = 0; j < nKv; j++) {
          let dot = 0;
          for (let e = 0; e < d; e++) dot += q.at(e, i1, h, i3) * k.at(e, j, kh, kb);
          let logit = dot * scale;
          if (softcap > 0) logit = softcap * Math.tanh(logit / softcap);
          if (mask) {
            const [, , m2, m3] = mask.tensor.ne;
            logit += m * mask.at(j, i1, h % m2, i3 % m3);
          }
          s[j] = logit;
          top = Math.max(top, logit);
        }
        let total = 0;
        for (let j = 0; j < nKv; j++) {
          s[j] = top === -Infinity ? 0 : Math.exp(s[j]! - top);
          total += s[j]!;
        }
        for (let e = 0; e < dv; e++) {
          let acc = 0;
          for (let j = 0; j < nKv; j++) acc += s[j]! * v.at(e, j, vh, vb);
          out[e + dv * (h + hq * (i1 + t * i3))] = total === 0 ? 0 : acc / total;
        }
      }
    }
  }
  return new RefTensor([dv, hq, t, b], out);
}

/**
 * f32 accumulation over up to a few hundred positions: dot products of D terms in [-1, 1] and a
 * weighted mean of V rows, each within ~sqrt(n) f32 roundings; exp within a few ulps. Outputs
 * are means of values in [-1, 1], so an absolute floor of 2e-5 has margin and still catches a
 * wrong position, head or scale.
 */
const TOL_ATTENTION: Tolerance = { nmse: 1e-9, rtol: 1e-4, atol: 2e-5 };

interface AttnCase {
  name: string;
  q: Dims4;
  kv: [number, number, number, number, number]; // D(k), nKv, Hkv, Bkv, Dv
  dtype: "f32" | "f16";
  mask?: "causal" | "random" | "hidden" | "prefix" | "tails";
  /** For a "prefix" mask: the positions visible from the start (the rest -inf). */
  visible?: number;
  maskDType?: "f32" | "f16";
  maskRows?: number;
  options?: FlashAttnOptions;
  permutedKv?: boolean;
}

const CASES: AttnCase[] = [
  { name: "f32, no mask, odd head dim", q: [40, 7, 3, 1], kv: [40, 37, 3, 1, 40], dtype: "f32" },
  {
    name: "f16 K/V, GQA 6:2, 2 batches, causal f16 mask padded to 8 rows, scale",
    q: [64, 5, 6, 2],
    kv: [64, 70, 2, 2, 64],
    dtype: "f16",
    mask: "causal",
    maskDType: "f16",
    maskRows: 8,
    options: { scale: 0.125 },
  },
  {
    name: "Dv != Dk, f32 random mask, softcap and ALiBi (5 heads: both slope ranges)",
    q: [24, 9, 5, 1],
    kv: [24, 33, 5, 1, 33],
    dtype: "f32",
    mask: "random",
    maskDType: "f32",
    options: { scale: 0.3, softcap: 2.5, maxBias: 8 },
  },
  {
    name: "permuted K and V (a [D, heads, positions] cache), 1 query row",
    q: [32, 1, 4, 1],
    kv: [32, 50, 4, 1, 32],
    dtype: "f16",
    permutedKv: true,
    options: { scale: 0.2 },
  },
  {
    name: "enough rows for 2 threads, f32 causal mask, head dim 64",
    q: [64, 40, 4, 1],
    kv: [64, 100, 1, 1, 64],
    dtype: "f32",
    mask: "causal",
    maskDType: "f32",
    options: { scale: 0.125 },
  },
  // One query token (q.ne[1] == 1) takes the one-token path: chunks of 64 positions combined
  // after a barrier.
  {
    name:
      "one token: f16 K/V, GQA 9:3, 2 batches, f16 mask visible to 450 of 700 (a decoding step)",
    q: [64, 1, 9, 2],
    kv: [64, 700, 3, 2, 64],
    dtype: "f16",
    mask: "prefix",
    maskDType: "f16",
    visible: 450,
    options: { scale: 0.125 },
  },
  {
    name: "one token: odd head dims (Dk 40, Dv 33), f32 random mask, softcap and ALiBi",
    q: [40, 1, 5, 1],
    kv: [40, 130, 5, 1, 33],
    dtype: "f32",
    mask: "random",
    maskDType: "f32",
    options: { scale: 0.3, softcap: 2.5, maxBias: 8 },
  },
  {
    name: "one token, no mask, f32 K/V over 3 heads: 2 chunks, the last of 1 position",
    q: [24, 1, 3, 1],
    kv: [24, 65, 3, 1, 24],
    dtype: "f32",
  },
  {
    name: "one token: 16 heads on 1 kv head (groups of 8), a mask row per head hiding its own tail",
    q: [32, 1, 16, 1],
    kv: [32, 150, 1, 1, 32],
    dtype: "f16",
    mask: "tails",
    maskDType: "f32",
    options: { scale: 0.2 },
  },
  {
    name: "one token whose every position is hidden: zeros",
    q: [16, 1, 2, 1],
    kv: [16, 90, 2, 1, 16],
    dtype: "f16",
    mask: "hidden",
    maskDType: "f16",
  },
  {
    name: "mask hides every position of some rows: those rows are zeros",
    q: [16, 6, 2, 1],
    kv: [16, 20, 2, 1, 16],
    dtype: "f32",
    mask: "hidden",
    maskDType: "f16",
  },
];

function buildCase(c: AttnCase, seed: number): {
  feed: Feed;
  q: Input;
  k: Input;
  v: Input;
  mask?: Input;
  options: FlashAttnOptions;
} {
  const feed = new Feed(seed);
  const [dk, nKv, hkv, bkv, dv] = c.kv;
  const q = feed.random("f32", c.q);
  const k = c.permutedKv ? feed.swapped12(c.dtype, [dk, nKv, hkv, bkv]) : feed.random(c.dtype, [
    dk,
    nKv,
    hkv,
    bkv,
  ]);
  const v = c.permutedKv ? feed.swapped12(c.dtype, [dv, nKv, hkv, bkv]) : feed.random(c.dtype, [
    dv,
    nKv,
    hkv,
    bkv,
  ]);
  let mask: Input | undefined;
  const rows = c.maskRows ?? c.q[1];
  if (c.mask === "causal") {
    mask = feed.of(c.maskDType!, [nKv, rows, 1, 1], causal(nKv, rows, c.q[1]));
  }
  if (c.mask === "random") {
    const values = Array.from(feed.rng.f32(nKv * rows, -2, 2));
    for (let i = 0; i < values.length; i += 7) values[i] = -Infinity;
    mask = feed.of(c.maskDType!, [nKv, rows, 1, 1], values);
  }
  if (c.mask === "hidden") {
    const values = Array.from(feed.rng.f32(nKv * rows, -1, 1));
    for (const row of [0, 3]) values.fill(-Infinity, row * nKv, (row + 1) * nKv);
    mask = feed.of(c.maskDType!, [nKv, rows, 1, 1], values);
  }
  if (c.mask === "tails") {
    // [nKv, rows, heads]: head h sees positions below nKv - 9h - 3.
    const heads = c.q[2];
    const values = Array.from(
      { length: nKv * rows * heads },
      (_, i) => i % nKv < nKv - 9 * Math.floor(i / (nKv * rows)) - 3 ? 0 : -Infinity,
    );
    mask = feed.of(c.maskDType!, [nKv, rows, heads, 1], values);
  }
  if (c.mask === "prefix") {
    const values = Array.from(
      { length: nKv * rows },
      (_, i) => i % nKv < c.visible! ? 0 : -Infinity,
    );
    mask = feed.of(c.maskDType!, [nKv, rows, 1, 1], values);
  }
  const options = { ...c.options, ...(mask ? { mask: mask.tensor } : {}) };
  return { feed, q, k, v, mask, options };
}

for (const [index, c] of CASES.entries()) {
  Deno.test(`flashAttnExt matches float64: ${c.name}`, () => {
    let reference: RefTensor | undefined;
    const results = compute(() => {
      const { feed, q, k, v, mask, options } = buildCase(c, 1000 + index);
      reference ??= refFlashAttn(q, k, v, mask, options);
      const output = flashAttnExt(q.tensor, k.tensor, v.tensor, options);
      return { ctx: feed.ctx, inputs: feed.inputs, output };
    });
    for (const [simd, got] of results) {
      assertClose(
        new RefTensor(reference!.ne, Float64Array.from(got)),
        reference!,
        TOL_ATTENTION,
        `${c.name} (${simd})`,
      );
    }
  });
}

/** The unfused graph of the same attention (llama.cpp's non-flash path). */
function unfused(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | undefined, scale: number): Tensor {
  const scores = mulMat(k, q); // [nKv, T, H]
  const p = softmax(scores, { ...(mask ? { mask } : {}), scale });
  const vt = cont(transpose(v)); // [nKv, Dv, H]
  const out = mulMat(vt, p); // [Dv, T, H]
  return cont(permute(out, [0, 2, 1, 3])); // [Dv, H, T]
}

Deno.test("flashAttnExt equals the unfused attention graph (mulMat, softmax with mask, mulMat)", () => {
  const ne: Dims4 = [64, 33, 4, 1];
  const nKv = 45;
  const run = (fused: boolean): Float32Array => {
    const results = compute(() => {
      const feed = new Feed(77);
      const q = feed.random("f32", ne);
      const k = feed.random("f32", [64, nKv, 4, 1]);
      const v = feed.random("f32", [64, nKv, 4, 1]);
      const mask = feed.of("f32", [nKv, ne[1], 1, 1], causal(nKv, ne[1], ne[1]));
      const output = fused
        ? flashAttnExt(q.tensor, k.tensor, v.tensor, { mask: mask.tensor, scale: 0.125 })
        : unfused(q.tensor, k.tensor, v.tensor, mask.tensor, 0.125);
      return { ctx: feed.ctx, inputs: feed.inputs, output };
    });
    return results[0]![1];
  };
  const fused = run(true);
  const plain = run(false);
  const ne4: Dims4 = [64, 4, 33, 1];
  assertClose(
    new RefTensor(ne4, Float64Array.from(fused)),
    new RefTensor(ne4, Float64Array.from(plain)),
    TOL_ATTENTION,
    "fused vs unfused",
  );
});

Deno.test("flashAttnExt refuses bad dtypes and shapes, naming the op and the argument", () => {
  const ctx = new Context();
  const q = ctx.newTensor("f32", [16, 4, 4]);
  const k = ctx.newTensor("f16", [16, 9, 2]);
  const v = ctx.newTensor("f16", [16, 9, 2]);
  assert.throws(() => flashAttnExt(ctx.newTensor("f16", [16, 4, 4]), k, v), DTypeError);
  assert.throws(() => flashAttnExt(q, ctx.newTensor("i32", [16, 9, 2]), v), DTypeError);
  assert.throws(() => flashAttnExt(q, ctx.newTensor("f16", [8, 9, 2]), v), /flashAttnExt: q/);
  assert.throws(() => flashAttnExt(q, k, ctx.newTensor("f16", [16, 9, 3])), ShapeError);
  assert.throws(
    () => flashAttnExt(q, k, v, { mask: ctx.newTensor("f16", [9, 3]) }),
    /flashAttnExt: mask \[9, 3/,
  );
  assert.throws(() => flashAttnExt(q, k, v, { maxBias: 1 }), /needs a mask/);
  assert.throws(() => flashAttnExt(q, k, v, { softcap: -1 }), /softcap/);
  assert.throws(() => flashAttnExt(q, k, v, { scale: NaN }), /scale/);
  assert.throws(() => flashAttnExt(q, transpose(k), v), ShapeError);
  const out = flashAttnExt(q, k, v);
  assert.deepEqual(out.ne, [16, 4, 4, 1]);
  assert.equal(out.dtype, "f32");
});

Deno.test("flashAttnExt: the CPU backend supports it and computes a one-row graph", () => {
  using cpu = new CpuBackend({ threads: 1 });
  const ctx = new Context();
  const q = ctx.newTensor("f32", [8, 2, 1]);
  const k = ctx.newTensor("f32", [8, 3, 1]);
  const v = ctx.newTensor("f32", [8, 3, 1]);
  const out = flashAttnExt(q, k, v);
  assert.ok(cpu.supportsOp(out));
  const graph = Graph.build(out);
  using _memory = allocTensors(cpu, [...ctx.tensors, ...graph.leafs, ...graph.nodes]);
  cpu.graphCompute(graph);
});

// ---------------------------------------------------------------------------------------------
// softmax with ALiBi slopes (ggml_soft_max_ext's max_bias).

/** float64 softmax(x * scale + slope(h) * mask) over rows of [n, rows, heads, batches]. */
function refSoftmaxAlibi(x: Input, mask: Input, scale: number, maxBias: number): RefTensor {
  const [n, rows, heads, batches] = x.tensor.ne;
  const [, , m2, m3] = mask.tensor.ne;
  const out = new Float64Array(n * rows * heads * batches);
  for (let i3 = 0; i3 < batches; i3++) {
    for (let h = 0; h < heads; h++) {
      const m = slope(maxBias, h, heads);
      for (let i1 = 0; i1 < rows; i1++) {
        const logits = Array.from(
          { length: n },
          (_, j) => x.at(j, i1, h, i3) * scale + m * mask.at(j, i1, h % m2, i3 % m3),
        );
        const top = Math.max(...logits);
        const e = logits.map((l) => top === -Infinity ? 0 : Math.exp(l - top));
        const total = e.reduce((s, v) => s + v, 0);
        e.forEach((v, j) => out[j + n * (i1 + rows * (h + heads * i3))] = total ? v / total : 0);
      }
    }
  }
  return new RefTensor([n, rows, heads, batches], out);
}

const TOL_SOFTMAX_ALIBI: Tolerance = { nmse: 1e-11, rtol: 1e-5, atol: 1e-7 };

for (
  const [name, ne, maskNe, maxBias] of [
    ["6 heads (slopes of both ranges), odd rows", [37, 5, 6, 1], [37, 7, 1, 1], 8],
    ["3 heads x 2 batches, per-head mask, max_bias 0.5", [50, 3, 3, 2], [50, 3, 3, 1], 0.5],
    ["max_bias 0 is the plain masked softmax", [19, 4, 2, 1], [19, 4, 1, 1], 0],
  ] as [string, Dims4, Dims4, number][]
) {
  Deno.test(`softmax with ALiBi slopes matches float64: ${name}`, () => {
    let reference: RefTensor | undefined;
    const results = compute(() => {
      const feed = new Feed(ne[0]);
      const x = feed.random("f32", ne, -3, 3);
      const values = Array.from(feed.rng.f32(maskNe[0] * maskNe[1] * maskNe[2], -2, 2));
      for (let i = 0; i < values.length; i += 5) values[i] = -Infinity;
      const mask = feed.of("f32", maskNe, values);
      reference ??= refSoftmaxAlibi(x, mask, 0.7, maxBias);
      const output = softmax(x.tensor, { mask: mask.tensor, scale: 0.7, maxBias });
      return { ctx: feed.ctx, inputs: feed.inputs, output };
    });
    for (const [simd, got] of results) {
      assertClose(
        new RefTensor(reference!.ne, Float64Array.from(got)),
        reference!,
        TOL_SOFTMAX_ALIBI,
        `${name} (${simd})`,
      );
    }
  });
}

Deno.test("softmax refuses a negative or maskless maxBias, naming the op and the argument", () => {
  const ctx = new Context();
  const x = ctx.newTensor("f32", [8, 4, 2]);
  const mask = ctx.newTensor("f32", [8, 4]);
  assert.throws(() => softmax(x, { maxBias: 1 }), /softmax: maxBias 1 needs a mask/);
  assert.throws(() => softmax(x, { mask, maxBias: -1 }), /softmax: maxBias must be >= 0, got -1/);
  assert.throws(() => softmax(x, { mask, maxBias: Infinity }), /softmax: maxBias must be finite/);
  assert.deepEqual(softmax(x, { mask, maxBias: 2 }).params, [1, 2]);
  assert.deepEqual(softmax(x, { mask }).params, [1]);
});

// ---------------------------------------------------------------------------------------------
// im2col and the convolutions built on it (ggml_conv_1d, ggml_conv_2d, ggml_conv_2d_dw).

interface ConvGeometry {
  stride: [number, number];
  padding: [number, number];
  dilation: [number, number];
}

/** float64 ggml_conv_2d: kernel [KW, KH, IC, OC], image [IW, IH, IC, N] -> [OW, OH, OC, N]. */
function refConv2d(kernel: Input, image: Input, g: ConvGeometry, depthwise = false): RefTensor {
  const [kw, kh, kc, oc] = kernel.tensor.ne;
  const [iw, ih, ic, n] = image.tensor.ne;
  const ow = Math.floor((iw + 2 * g.padding[0] - g.dilation[0] * (kw - 1) - 1) / g.stride[0]) + 1;
  const oh = Math.floor((ih + 2 * g.padding[1] - g.dilation[1] * (kh - 1) - 1) / g.stride[1]) + 1;
  const out = new Float64Array(ow * oh * oc * n);
  for (let b = 0; b < n; b++) {
    for (let o = 0; o < oc; o++) {
      for (let y = 0; y < oh; y++) {
        for (let x = 0; x < ow; x++) {
          let acc = 0;
          for (let c = 0; c < kc; c++) {
            const channel = depthwise ? o : c;
            for (let ky = 0; ky < kh; ky++) {
              for (let kx = 0; kx < kw; kx++) {
                const sx = x * g.stride[0] + kx * g.dilation[0] - g.padding[0];
                const sy = y * g.stride[1] + ky * g.dilation[1] - g.padding[1];
                if (sx < 0 || sx >= iw || sy < 0 || sy >= ih) continue;
                acc += kernel.at(kx, ky, c, o) * image.at(sx, sy, channel, b);
              }
            }
          }
          out[x + ow * (y + oh * (o + oc * b))] = acc;
        }
      }
    }
  }
  assert.ok(depthwise || kc === ic);
  return new RefTensor([ow, oh, oc, n], out);
}

/**
 * A sum of KW*KH*IC products of values in [-1, 1], in f32 (GEMM order): within ~sqrt(K)
 * roundings of the terms. f16 kernels are exact in the reference too; where mulMat rounds its
 * f32 operand to f16 (ggml's f16 dot), the error grows to ~1e-3 of each term.
 */
function tolConv(terms: number, f16: boolean): Tolerance {
  return f16
    ? { nmse: 1e-5, rtol: 1e-2, atol: 2e-3 * Math.sqrt(terms) }
    : { nmse: 1e-9, rtol: 1e-5, atol: 2e-6 * Math.sqrt(terms) };
}

const geometry = (
  stride: [number, number],
  padding: [number, number],
  dilation: [number, number],
): ConvGeometry => ({ stride, padding, dilation });

for (
  const [name, kne, ine, dtype, g, permuted] of [
    [
      "3x3, 5 -> 7 channels, 2 images, stride 2, pad 1",
      [3, 3, 5, 7],
      [11, 9, 5, 2],
      "f32",
      geometry([2, 2], [1, 1], [1, 1]),
    ],
    [
      "one image (no copy), 3x2 kernel, pad (2, 0)",
      [3, 2, 4, 6],
      [10, 8, 4, 1],
      "f32",
      geometry([1, 1], [2, 0], [1, 1]),
    ],
    [
      "f16 kernel, dilation 2, stride (1, 2), 2 images",
      [3, 3, 4, 5],
      [13, 12, 4, 2],
      "f16",
      geometry([1, 2], [1, 2], [2, 2]),
    ],
    [
      "1x1 kernel, 16 channels",
      [1, 1, 16, 3],
      [7, 5, 16, 1],
      "f32",
      geometry([1, 1], [0, 0], [1, 1]),
    ],
    // The fused conv_2d kernel's edges: taps over one KC block (256), output channels and
    // pixels off the micro-tile, rows longer than a panel or one pixel wide, a permuted image.
    [
      "37 -> 13 channels (333 taps), 23x19, pad 1, 2 images",
      [3, 3, 37, 13],
      [23, 19, 37, 2],
      "f32",
      geometry([1, 1], [1, 1], [1, 1]),
    ],
    [
      "f16 kernel, 30 -> 20 channels, stride (3, 1), dilation (1, 2), permuted image",
      [3, 3, 30, 20],
      [9, 8, 30, 2],
      "f16",
      geometry([3, 1], [2, 1], [1, 2]),
      true,
    ],
    [
      "70 pixels wide, pad 1, permuted image",
      [3, 3, 3, 4],
      [70, 5, 3, 1],
      "f32",
      geometry([1, 1], [1, 1], [1, 1]),
      true,
    ],
    [
      "one pixel wide output, 5x5 kernel over 5 columns",
      [5, 5, 2, 17],
      [5, 30, 2, 3],
      "f32",
      geometry([1, 1], [0, 3], [1, 1]),
    ],
  ] as [string, Dims4, Dims4, "f32" | "f16", ConvGeometry, boolean?][]
) {
  Deno.test(`conv2d matches float64: ${name}`, () => {
    let reference: RefTensor | undefined;
    const results = compute(() => {
      const feed = new Feed(kne[0] * 100 + ine[0]);
      const kernel = feed.random(dtype, kne);
      const image = permuted ? feed.swapped12("f32", ine) : feed.random("f32", ine);
      reference ??= refConv2d(kernel, image, g);
      const output = conv2d(kernel.tensor, image.tensor, g);
      return { ctx: feed.ctx, inputs: feed.inputs, output };
    });
    for (const [simd, got] of results) {
      assertClose(
        new RefTensor(reference!.ne, Float64Array.from(got)),
        reference!,
        tolConv(kne[0] * kne[1] * kne[2], dtype === "f16"),
        `${name} (${simd})`,
      );
    }
  });
}

for (
  const [name, kne, ine, dtype, g] of [
    [
      "3x3, 6 channels, 2 images, pad 1",
      [3, 3, 1, 6],
      [9, 10, 6, 2],
      "f32",
      geometry([1, 1], [1, 1], [1, 1]),
    ],
    [
      "f16 5x3 kernel, stride 2",
      [5, 3, 1, 4],
      [12, 7, 4, 1],
      "f16",
      geometry([2, 2], [2, 1], [1, 1]),
    ],
  ] as [string, Dims4, Dims4, "f32" | "f16", ConvGeometry][]
) {
  Deno.test(`conv2dDw matches float64: ${name}`, () => {
    let reference: RefTensor | undefined;
    const results = compute(() => {
      const feed = new Feed(kne[0] * 10 + ine[0]);
      const kernel = feed.random(dtype, kne);
      const image = feed.random("f32", ine);
      reference ??= refConv2d(kernel, image, g, true);
      const output = conv2dDw(kernel.tensor, image.tensor, g);
      return { ctx: feed.ctx, inputs: feed.inputs, output };
    });
    for (const [simd, got] of results) {
      assertClose(
        new RefTensor(reference!.ne, Float64Array.from(got)),
        reference!,
        tolConv(kne[0] * kne[1], dtype === "f16"),
        `${name} (${simd})`,
      );
    }
  });
}

for (
  const [name, kne, ine, dtype, stride, padding, dilation] of [
    [
      "kernel 3, 4 -> 5 channels, 2 inputs, stride 2, pad 1",
      [3, 4, 5, 1],
      [20, 4, 2, 1],
      "f32",
      2,
      1,
      1,
    ],
    ["f16 kernel 5, dilation 2, one input", [5, 3, 6, 1], [31, 3, 1, 1], "f16", 1, 3, 2],
  ] as [string, Dims4, Dims4, "f32" | "f16", number, number, number][]
) {
  Deno.test(`conv1d matches float64: ${name}`, () => {
    let reference: RefTensor | undefined;
    const results = compute(() => {
      const feed = new Feed(kne[0] * 7 + ine[0]);
      const kernel = feed.random(dtype, kne);
      const input = feed.random("f32", ine);
      // A 1D convolution is a 2D one of height 1: kernel [KW, 1, IC, OC], input [IW, 1, IC, N].
      const k2: Input = { tensor: kernel.tensor, at: (x, _y, c, o) => kernel.at(x, c, o, 0) };
      const i2: Input = { tensor: input.tensor, at: (x, _y, c, b) => input.at(x, c, b, 0) };
      const shaped = (t: Tensor, ne: Dims4): Tensor => ({ ...t, ne } as unknown as Tensor);
      const want = refConv2d(
        { ...k2, tensor: shaped(kernel.tensor, [kne[0], 1, kne[1], kne[2]]) },
        { ...i2, tensor: shaped(input.tensor, [ine[0], 1, ine[1], ine[2]]) },
        geometry([stride, 1], [padding, 0], [dilation, 1]),
      );
      const [ow, , oc, n] = want.ne;
      reference ??= new RefTensor([ow, oc, n, 1], want.values());
      const output = conv1d(kernel.tensor, input.tensor, { stride, padding, dilation });
      return { ctx: feed.ctx, inputs: feed.inputs, output };
    });
    for (const [simd, got] of results) {
      assertClose(
        new RefTensor(reference!.ne, Float64Array.from(got)),
        reference!,
        tolConv(kne[0] * kne[1], dtype === "f16"),
        `${name} (${simd})`,
      );
    }
  });
}

Deno.test("im2col into f16 from a permuted image matches float64 exactly (rounded once)", () => {
  const kne: Dims4 = [3, 2, 3, 4];
  const ine: Dims4 = [8, 6, 3, 2];
  const g = geometry([2, 1], [1, 1], [1, 2]);
  let reference: RefTensor | undefined;
  const results = compute(() => {
    const feed = new Feed(5);
    const kernel = feed.random("f32", kne);
    const image = feed.swapped12("f32", ine); // nb[1] > nb[2]: a permuted view
    const ow = Math.floor((ine[0] + 2 - 2 - 1) / 2) + 1;
    const oh = Math.floor((ine[1] + 2 - 2 - 1) / 1) + 1;
    const k = kne[0] * kne[1] * kne[2];
    const values = new Float64Array(k * ow * oh * ine[3]);
    for (let b = 0; b < ine[3]; b++) {
      for (let y = 0; y < oh; y++) {
        for (let x = 0; x < ow; x++) {
          for (let c = 0; c < kne[2]; c++) {
            for (let ky = 0; ky < kne[1]; ky++) {
              for (let kx = 0; kx < kne[0]; kx++) {
                const sx = x * 2 + kx - 1;
                const sy = y + ky * 2 - 1;
                const inside = sx >= 0 && sx < ine[0] && sy >= 0 && sy < ine[1];
                const at = (c * kne[1] + ky) * kne[0] + kx + k * (x + ow * (y + oh * b));
                values[at] = inside
                  ? Math.fround(new Float16Array([image.at(sx, sy, c, b)])[0]!)
                  : 0;
              }
            }
          }
        }
      }
    }
    reference ??= new RefTensor([k, ow, oh, ine[3]], values);
    const output = cont(im2col(kernel.tensor, image.tensor, { ...g, dtype: "f16" }));
    return { ctx: feed.ctx, inputs: feed.inputs, output: castF32(output) };
  });
  for (const [simd, got] of results) {
    assertClose(
      new RefTensor(reference!.ne, Float64Array.from(got)),
      reference!,
      { nmse: 0, rtol: 0, atol: 0 },
      `im2col f16 (${simd})`,
    );
  }
});

Deno.test("im2col and the convolutions refuse bad shapes and arguments, naming the op", () => {
  const ctx = new Context();
  const kernel = ctx.newTensor("f32", [3, 3, 4, 8]);
  const image = ctx.newTensor("f32", [10, 10, 4]);
  assert.throws(() => im2col(kernel, ctx.newTensor("f32", [10, 10, 5])), /im2col: kernel/);
  assert.throws(() => im2col(kernel, ctx.newTensor("f16", [10, 10, 4])), DTypeError);
  assert.throws(() => im2col(kernel, image, { stride: 0 }), /im2col: stride must be/);
  assert.throws(() => im2col(kernel, image, { padding: -1 }), /im2col: padding must be/);
  assert.throws(() => im2col(kernel, image, { dilation: 1.5 }), /im2col: dilation must be/);
  assert.throws(() => im2col(kernel, ctx.newTensor("f32", [2, 2, 4])), /smaller than/);
  assert.throws(() => conv2d(ctx.newTensor("i32", [3, 3, 4, 8]), image), DTypeError);
  assert.throws(() => conv2dDw(kernel, image), /conv2dDw: kernel/);
  assert.deepEqual(im2col(kernel, image, { padding: 1 }).ne, [36, 10, 10, 1]);
  assert.deepEqual(conv2d(kernel, image, { padding: 1, stride: 2 }).ne, [5, 5, 8, 1]);
});

/** An f32 copy of an f16 tensor (the compute helper reads f32 results). */
function castF32(t: Tensor): Tensor {
  const ctx = new Context();
  return cpy(t, ctx.newTensor("f32", t.ne));
}

Deno.test("im2col's planar layout holds ggml's values with the pixel dims first", () => {
  const run = (planar: boolean): Float32Array =>
    compute(() => {
      const feed = new Feed(9);
      const kernel = feed.random("f32", [3, 2, 3, 4]);
      const image = feed.random("f32", [10, 7, 3, 1]);
      const g = { stride: [2, 1], padding: [2, 1], dilation: [1, 2] } as const;
      const cols = im2col(kernel.tensor, image.tensor, { ...g, planar });
      // ggml's [K, OW, OH, N] permuted to [OW, OH, K, N] (dim 0 -> 2, 1 -> 0, 2 -> 1).
      const output = planar ? cols : cont(permute(cols, [2, 0, 1, 3]));
      return { ctx: feed.ctx, inputs: feed.inputs, output };
    })[0]![1];
  assert.deepEqual(run(true), run(false));
});

// ---------------------------------------------------------------------------------------------
// l2Norm and groupNorm.

function refL2Norm(x: Input, eps: number): RefTensor {
  const [n0, n1, n2, n3] = x.tensor.ne;
  const out = new Float64Array(n0 * n1 * n2 * n3);
  for (let r = 0; r < n1 * n2 * n3; r++) {
    const [i1, i2, i3] = [r % n1, Math.floor(r / n1) % n2, Math.floor(r / (n1 * n2))];
    let sum = 0;
    for (let j = 0; j < n0; j++) sum += x.at(j, i1, i2, i3) ** 2;
    const scale = 1 / Math.max(Math.sqrt(sum), eps);
    for (let j = 0; j < n0; j++) out[j + n0 * r] = x.at(j, i1, i2, i3) * scale;
  }
  return new RefTensor([n0, n1, n2, n3], out);
}

function refGroupNorm(x: Input, groups: number, eps: number): RefTensor {
  const [w, h, c, n] = x.tensor.ne;
  const out = new Float64Array(w * h * c * n);
  const per = Math.ceil(c / groups);
  for (let b = 0; b < n; b++) {
    for (let g = 0; g < groups; g++) {
      const begin = Math.min(c, g * per);
      const end = Math.min(c, begin + per);
      const values: [number, number][] = [];
      for (let ch = begin; ch < end; ch++) {
        for (let y = 0; y < h; y++) {
          for (let i = 0; i < w; i++) {
            values.push([i + w * (y + h * (ch + c * b)), x.at(i, y, ch, b)]);
          }
        }
      }
      if (values.length === 0) continue;
      const mean = values.reduce((s, [, v]) => s + v, 0) / values.length;
      const variance = values.reduce((s, [, v]) => s + (v - mean) ** 2, 0) / values.length;
      for (const [at, v] of values) out[at] = (v - mean) / Math.sqrt(variance + eps);
    }
  }
  return new RefTensor([w, h, c, n], out);
}

/** A reduction in f64, then one f32 subtraction and scaling: a few f32 roundings of |x|/sigma. */
const TOL_GROUP_NORM: Tolerance = { nmse: 1e-11, rtol: 1e-5, atol: 1e-6 };

for (
  const [name, ne, eps, swapped] of [
    ["odd rows", [37, 5, 3, 1], 1e-12, false],
    ["a permuted input, rows of 100", [100, 3, 4, 2], 1e-6, true],
    ["eps above the norm of tiny rows", [5, 4, 1, 1], 10, false],
  ] as [string, Dims4, number, boolean][]
) {
  Deno.test(`l2Norm matches float64: ${name}`, () => {
    let reference: RefTensor | undefined;
    const results = compute(() => {
      const feed = new Feed(ne[0] + 3);
      const x = swapped ? feed.swapped12("f32", ne) : feed.random("f32", ne);
      reference ??= refL2Norm(x, eps);
      return { ctx: feed.ctx, inputs: feed.inputs, output: l2Norm(x.tensor, eps) };
    });
    for (const [simd, got] of results) {
      assertClose(
        new RefTensor(reference!.ne, Float64Array.from(got)),
        reference!,
        TOL_GROUP_NORM,
        `${name} (${simd})`,
      );
    }
  });
}

for (
  const [name, ne, groups, swapped] of [
    ["32 channels in 8 groups, 2 images", [9, 7, 32, 2], 8, false],
    ["10 channels in 4 groups (the last short), permuted", [6, 5, 10, 1], 4, true],
    ["7 channels in 5 groups (groups of 2: the last empty)", [3, 4, 7, 1], 5, false],
  ] as [string, Dims4, number, boolean][]
) {
  Deno.test(`groupNorm matches float64: ${name}`, () => {
    let reference: RefTensor | undefined;
    const results = compute(() => {
      const feed = new Feed(ne[2] + 17);
      const x = swapped ? feed.swapped12("f32", ne) : feed.random("f32", ne, -2, 3);
      reference ??= refGroupNorm(x, groups, 1e-6);
      return { ctx: feed.ctx, inputs: feed.inputs, output: groupNorm(x.tensor, groups, 1e-6) };
    });
    for (const [simd, got] of results) {
      assertClose(
        new RefTensor(reference!.ne, Float64Array.from(got)),
        reference!,
        TOL_GROUP_NORM,
        `${name} (${simd})`,
      );
    }
  });
}

Deno.test("l2Norm and groupNorm refuse bad arguments, naming the op", () => {
  const ctx = new Context();
  const x = ctx.newTensor("f32", [8, 4, 6]);
  assert.throws(() => l2Norm(ctx.newTensor("f16", [8])), DTypeError);
  assert.throws(() => l2Norm(x, NaN), /l2Norm: eps must be finite/);
  assert.throws(() => groupNorm(x, 0), /groupNorm: groups must be an integer/);
  assert.throws(() => groupNorm(x, 2.5), /groupNorm: groups must be an integer/);
  assert.deepEqual(groupNorm(x, 3).params, [3, 1e-6]);
});

// ---------------------------------------------------------------------------------------------
// pool1d and pool2d.

/** float64 ggml_pool_2d (or pool_1d with k1 = s1 = 1, p1 = 0 and the 1D mean). */
function refPool(
  x: Input,
  average: boolean,
  k: [number, number],
  s: [number, number],
  p: [number, number],
  is2D: boolean,
): RefTensor {
  const [w, h, c, n] = x.tensor.ne;
  const ow = Math.floor((w + 2 * p[0] - k[0]) / s[0]) + 1;
  const oh = is2D ? Math.floor((h + 2 * p[1] - k[1]) / s[1]) + 1 : h;
  const out = new Float64Array(ow * oh * c * n);
  for (let b = 0; b < n; b++) {
    for (let ch = 0; ch < c; ch++) {
      for (let oy = 0; oy < oh; oy++) {
        for (let ox = 0; ox < ow; ox++) {
          let res = average ? 0 : -3.4028234663852886e38;
          let count = 0;
          for (let ky = 0; ky < (is2D ? k[1] : 1); ky++) {
            const y = is2D ? oy * s[1] - p[1] + ky : oy;
            if (y < 0 || y >= h) continue;
            for (let kx = 0; kx < k[0]; kx++) {
              const xi = ox * s[0] - p[0] + kx;
              if (xi < 0 || xi >= w) continue;
              const v = x.at(xi, y, ch, b);
              res = average ? res + v : Math.max(res, v);
              count++;
            }
          }
          if (average) res = is2D ? res / (k[0] * k[1]) : (count ? res / count : 0);
          out[ox + ow * (oy + oh * (ch + c * b))] = res;
        }
      }
    }
  }
  return new RefTensor([ow, oh, c, n], out);
}

/** Max is exact; the mean is a sum of at most a few dozen f32 values and one division. */
const TOL_POOL: Tolerance = { nmse: 1e-12, rtol: 1e-6, atol: 1e-7 };

for (
  const [name, ne, dtype, op, k, s, p, is2D, swapped] of [
    [
      "2D max 3x3 stride 2 pad 1, odd sizes",
      [11, 9, 3, 2],
      "f32",
      "max",
      [3, 3],
      [2, 2],
      [1, 1],
      true,
      false,
    ],
    [
      "2D avg 2x3 stride (1, 2) pad (1, 0), f16",
      [7, 8, 2, 1],
      "f16",
      "avg",
      [2, 3],
      [1, 2],
      [1, 0],
      true,
      false,
    ],
    ["2D avg on a permuted input", [6, 5, 4, 1], "f32", "avg", [3, 2], [3, 2], [1, 1], true, true],
    [
      "1D max kernel 3 stride 2 pad 1",
      [20, 3, 2, 1],
      "f32",
      "max",
      [3, 1],
      [2, 1],
      [1, 0],
      false,
      false,
    ],
    [
      "1D avg kernel 4 stride 3 pad 2, f16 (mean of the inside)",
      [17, 4, 1, 1],
      "f16",
      "avg",
      [4, 1],
      [3, 1],
      [2, 0],
      false,
      false,
    ],
  ] as [
    string,
    Dims4,
    "f32" | "f16",
    "max" | "avg",
    [number, number],
    [number, number],
    [number, number],
    boolean,
    boolean,
  ][]
) {
  Deno.test(`pool matches float64: ${name}`, () => {
    let reference: RefTensor | undefined;
    const results = compute(() => {
      const feed = new Feed(ne[0] * 3 + k[0]);
      const x = swapped ? feed.swapped12(dtype, ne) : feed.random(dtype, ne, -2, 2);
      reference ??= refPool(x, op === "avg", k, s, p, is2D);
      const output = is2D
        ? pool2d(x.tensor, op, k, { stride: s, padding: p })
        : pool1d(x.tensor, op, k[0], { stride: s[0], padding: p[0] });
      return { ctx: feed.ctx, inputs: feed.inputs, output };
    });
    for (const [simd, got] of results) {
      assertClose(
        new RefTensor(reference!.ne, Float64Array.from(got)),
        reference!,
        TOL_POOL,
        `${name} (${simd})`,
      );
    }
  });
}

Deno.test("pool1d and pool2d refuse bad arguments, naming the op", () => {
  const ctx = new Context();
  const x = ctx.newTensor("f32", [8, 6, 2]);
  assert.throws(() => pool2d(x, "max", 0), /pool2d: kernel must be/);
  assert.throws(() => pool2d(x, "max", 2, { padding: 2 }), /pool2d: padding 2 must be below/);
  assert.throws(() => pool2d(x, "sum" as "max", 2), /pool2d: op must be max or avg/);
  assert.throws(() => pool1d(x, "avg", 9), /pool1d: input .* smaller than the window/);
  assert.throws(() => pool2d(ctx.newTensor("i32", [4, 4]), "max", 2), DTypeError);
  assert.deepEqual(pool2d(x, "avg", 2).ne, [4, 3, 2, 1]);
});

// ---------------------------------------------------------------------------------------------
// interpolate and timestepEmbedding.

/** float64 ggml_interpolate (scale factors and positions in f32, as ggml computes them). */
function refInterpolate(x: Input, ne: Dims4, bilinear: boolean, alignCorners: boolean): RefTensor {
  const src = x.tensor.ne;
  const f = Math.fround;
  const sf = ne.map((n, d) => f(n / src[d]!));
  let offset = 0.5;
  if (alignCorners) {
    offset = 0;
    for (const d of [0, 1]) if (ne[d]! > 1 && src[d]! > 1) sf[d] = f((ne[d]! - 1) / (src[d]! - 1));
  }
  const near = (i: number, d: number): number => Math.trunc(f(i / sf[d]!));
  const out = new Float64Array(ne[0] * ne[1] * ne[2] * ne[3]);
  const sample = (i: number, d: number): [number, number, number] => {
    const p = f(f(f(i + offset) / sf[d]!) - offset);
    const low = Math.min(Math.max(Math.floor(p), 0), src[d]! - 1);
    const high = Math.min(Math.max(Math.floor(p) + 1, 0), src[d]! - 1);
    return [low, high, Math.min(Math.max(p - low, 0), 1)];
  };
  for (let i3 = 0; i3 < ne[3]; i3++) {
    for (let i2 = 0; i2 < ne[2]; i2++) {
      for (let i1 = 0; i1 < ne[1]; i1++) {
        for (let i0 = 0; i0 < ne[0]; i0++) {
          const [j2, j3] = [near(i2, 2), near(i3, 3)];
          let v: number;
          if (!bilinear) v = x.at(near(i0, 0), near(i1, 1), j2, j3);
          else {
            const [x0, x1, dx] = sample(i0, 0);
            const [y0, y1, dy] = sample(i1, 1);
            v = x.at(x0, y0, j2, j3) * (1 - dx) * (1 - dy) + x.at(x1, y0, j2, j3) * dx * (1 - dy) +
              x.at(x0, y1, j2, j3) * (1 - dx) * dy + x.at(x1, y1, j2, j3) * dx * dy;
          }
          out[i0 + ne[0] * (i1 + ne[1] * (i2 + ne[2] * i3))] = v;
        }
      }
    }
  }
  return new RefTensor(ne, out);
}

/** A copy (nearest) or a sum of four products of f32 weights (bilinear): a few f32 roundings. */
const TOL_INTERPOLATE: Tolerance = { nmse: 1e-12, rtol: 1e-6, atol: 1e-6 };

for (
  const [name, from, to, mode, align, swapped] of [
    ["nearest x2 in dims 0-1, x3 in dim 2", [5, 4, 2, 1], [10, 8, 6, 1], "nearest", false, false],
    ["nearest down-sampling, odd sizes", [9, 7, 3, 2], [4, 5, 3, 2], "nearest", false, false],
    ["bilinear 7x5 -> 16x9, permuted", [7, 5, 3, 1], [16, 9, 3, 1], "bilinear", false, true],
    ["bilinear with aligned corners", [6, 4, 2, 1], [11, 7, 2, 1], "bilinear", true, false],
    ["bilinear down-sampling", [12, 10, 1, 1], [5, 3, 1, 1], "bilinear", false, false],
  ] as [string, Dims4, Dims4, "nearest" | "bilinear", boolean, boolean][]
) {
  Deno.test(`interpolate matches float64: ${name}`, () => {
    let reference: RefTensor | undefined;
    const results = compute(() => {
      const feed = new Feed(from[0] * 11 + to[0]);
      const x = swapped ? feed.swapped12("f32", from) : feed.random("f32", from);
      reference ??= refInterpolate(x, to, mode === "bilinear", align);
      const output = interpolate(x.tensor, to, { mode, alignCorners: align });
      return { ctx: feed.ctx, inputs: feed.inputs, output };
    });
    for (const [simd, got] of results) {
      assertClose(
        new RefTensor(reference!.ne, Float64Array.from(got)),
        reference!,
        TOL_INTERPOLATE,
        `${name} (${simd})`,
      );
    }
  });
}

for (const [dim, period] of [[64, 10000], [33, 100]] as const) {
  Deno.test(`timestepEmbedding matches float64: dim ${dim}, max period ${period}`, () => {
    const times = [0, 1, 17.5, 999, 250];
    const half = Math.floor(dim / 2);
    const want = new Float64Array(dim * times.length);
    times.forEach((t, n) => {
      for (let j = 0; j < half; j++) {
        const arg = t * Math.exp(-Math.log(period) * j / half);
        want[n * dim + j] = Math.cos(arg);
        want[n * dim + j + half] = Math.sin(arg);
      }
    });
    const results = compute(() => {
      const feed = new Feed(1);
      const t = feed.of("f32", [times.length, 1, 1, 1], times);
      return {
        ctx: feed.ctx,
        inputs: feed.inputs,
        output: timestepEmbedding(t.tensor, dim, period),
      };
    });
    // f32 arguments up to 1000 radians: an ulp of the argument (6e-5) moves sin and cos by as
    // much, so the floor is 2e-4.
    for (const [simd, got] of results) {
      assertClose(
        new RefTensor([dim, times.length, 1, 1], Float64Array.from(got)),
        new RefTensor([dim, times.length, 1, 1], want),
        { nmse: 1e-8, rtol: 0, atol: 2e-4 },
        `timestep ${dim} (${simd})`,
      );
    }
  });
}

Deno.test("interpolate and timestepEmbedding refuse bad arguments, naming the op", () => {
  const ctx = new Context();
  const x = ctx.newTensor("f32", [4, 4]);
  assert.throws(() => interpolate(x, [8, 8], { mode: "cubic" as "nearest" }), /interpolate: mode/);
  assert.throws(() => interpolate(x, [8, 8], { alignCorners: true }), /alignCorners needs/);
  assert.throws(() => interpolate(ctx.newTensor("f16", [4]), [8]), DTypeError);
  assert.throws(() => timestepEmbedding(x, 8), /timesteps must be one-dimensional/);
  assert.throws(() => timestepEmbedding(ctx.newTensor("f32", [3]), 0), /dim must be an integer/);
  assert.deepEqual(timestepEmbedding(ctx.newTensor("f32", [3]), 7).ne, [7, 3, 1, 1]);
});

// ---------------------------------------------------------------------------------------------
// convTranspose1d and convTranspose2d.

/** float64 transposed convolution (scatter form): kernel [KW, KH, OC, IC], input [W, H, IC, N]. */
function refConvTranspose2d(kernel: Input, input: Input, s: number, ne: Dims4): RefTensor {
  const [kw, kh, oc, ic] = ne;
  const [w, h, , n] = input.tensor.ne;
  const ow = (w - 1) * s + kw;
  const oh = (h - 1) * s + kh;
  const out = new Float64Array(ow * oh * oc * n);
  for (let b = 0; b < n; b++) {
    for (let c = 0; c < ic; c++) {
      for (let y = 0; y < h; y++) {
        for (let x = 0; x < w; x++) {
          const v = input.at(x, y, c, b);
          for (let o = 0; o < oc; o++) {
            for (let ky = 0; ky < kh; ky++) {
              for (let kx = 0; kx < kw; kx++) {
                const at = x * s + kx + ow * (y * s + ky + oh * (o + oc * b));
                out[at] = out[at]! + kernel.at(kx, ky, o, c) * v;
              }
            }
          }
        }
      }
    }
  }
  return new RefTensor([ow, oh, oc, n], out);
}

for (
  const [name, kne, ine, dtype, stride] of [
    ["3x3, 4 -> 5 channels, stride 2, 2 images", [3, 3, 5, 4], [6, 5, 4, 2], "f32", 2],
    ["f16 2x2 kernel, stride 2 (U-Net up-sampling)", [2, 2, 3, 6], [7, 4, 6, 1], "f16", 2],
    ["4x3 kernel, stride 3 (windows overlap in x, not in y)", [4, 3, 2, 3], [5, 6, 3, 1], "f32", 3],
    ["stride 1", [3, 2, 2, 2], [4, 4, 2, 1], "f32", 1],
  ] as [string, Dims4, Dims4, "f32" | "f16", number][]
) {
  Deno.test(`convTranspose2d matches float64: ${name}`, () => {
    let reference: RefTensor | undefined;
    const results = compute(() => {
      const feed = new Feed(kne[0] * 13 + ine[0]);
      const kernel = feed.random(dtype, kne);
      const input = feed.random("f32", ine);
      reference ??= refConvTranspose2d(kernel, input, stride, kne);
      return {
        ctx: feed.ctx,
        inputs: feed.inputs,
        output: convTranspose2d(kernel.tensor, input.tensor, stride),
      };
    });
    for (const [simd, got] of results) {
      assertClose(
        new RefTensor(reference!.ne, Float64Array.from(got)),
        reference!,
        tolConv(kne[0] * kne[1] * kne[3], false),
        `${name} (${simd})`,
      );
    }
  });
}

for (
  const [name, kne, ine, dtype, stride] of [
    ["kernel 4, 3 -> 5 channels, stride 2", [4, 5, 3, 1], [9, 3, 1, 1], "f32", 2],
    ["f16 kernel 3, stride 1", [3, 2, 4, 1], [11, 4, 1, 1], "f16", 1],
  ] as [string, Dims4, Dims4, "f32" | "f16", number][]
) {
  Deno.test(`convTranspose1d matches float64: ${name}`, () => {
    let reference: RefTensor | undefined;
    const results = compute(() => {
      const feed = new Feed(kne[0] * 5 + ine[0]);
      const kernel = feed.random(dtype, kne);
      const input = feed.random("f32", ine);
      // A 1D transposed convolution is a 2D one of height 1.
      const k2: Input = { tensor: kernel.tensor, at: (x, _y, o, c) => kernel.at(x, o, c, 0) };
      const i2: Input = {
        tensor: { ne: [ine[0], 1, ine[1], 1] } as unknown as Tensor,
        at: (x, _y, c) => input.at(x, c, 0, 0),
      };
      const want = refConvTranspose2d(k2, i2, stride, [kne[0], 1, kne[1], kne[2]]);
      reference ??= new RefTensor([want.ne[0], kne[1], 1, 1], want.values());
      return {
        ctx: feed.ctx,
        inputs: feed.inputs,
        output: convTranspose1d(kernel.tensor, input.tensor, stride),
      };
    });
    for (const [simd, got] of results) {
      assertClose(
        new RefTensor(reference!.ne, Float64Array.from(got)),
        reference!,
        tolConv(kne[0] * kne[2], false),
        `${name} (${simd})`,
      );
    }
  });
}

Deno.test("convTranspose1d and convTranspose2d refuse bad shapes and strides, naming the op", () => {
  const ctx = new Context();
  const k2 = ctx.newTensor("f32", [3, 3, 4, 5]);
  assert.throws(
    () => convTranspose2d(k2, ctx.newTensor("f32", [6, 6, 4])),
    /convTranspose2d: kernel/,
  );
  assert.throws(() => convTranspose2d(k2, ctx.newTensor("f32", [6, 6, 5]), 0), /stride must be/);
  assert.throws(
    () => convTranspose1d(ctx.newTensor("f32", [3, 4, 5]), ctx.newTensor("f32", [9, 4])),
    /convTranspose1d: kernel/,
  );
  assert.throws(
    () => convTranspose1d(ctx.newTensor("i32", [3, 4, 5]), ctx.newTensor("f32", [9, 5])),
    DTypeError,
  );
  assert.deepEqual(convTranspose2d(k2, ctx.newTensor("f32", [6, 7, 5, 2]), 2).ne, [13, 15, 4, 2]);
});
