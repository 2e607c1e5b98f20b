/**
 * The transformer block of `block.ts` computed directly in float64, the yardstick the demo and
 * tests compare the engine with.
 * @module
 */

import type { BlockConfig, BlockWeights } from "./block.ts";

type Data = Record<keyof BlockWeights, Float32Array>;

/** out[n][m] = sum_k w[m][k] * x[n][k]  (ggml mulMat: w is [K, M], x is [K, N]). */
function matmul(
  w: ArrayLike<number>,
  x: ArrayLike<number>,
  k: number,
  m: number,
  n: number,
): Float64Array {
  const out = new Float64Array(m * n);
  for (let j = 0; j < n; j++) {
    for (let i = 0; i < m; i++) {
      let s = 0;
      for (let c = 0; c < k; c++) s += w[i * k + c]! * x[j * k + c]!;
      out[j * m + i] = s;
    }
  }
  return out;
}

function rmsNormRows(
  x: ArrayLike<number>,
  gain: ArrayLike<number>,
  dim: number,
  rows: number,
  eps: number,
): Float64Array {
  const out = new Float64Array(dim * rows);
  for (let r = 0; r < rows; r++) {
    let ss = 0;
    for (let i = 0; i < dim; i++) ss += x[r * dim + i]! ** 2;
    const inv = 1 / Math.sqrt(ss / dim + eps);
    for (let i = 0; i < dim; i++) out[r * dim + i] = x[r * dim + i]! * inv * gain[i]!;
  }
  return out;
}

function attention(
  q: Float64Array,
  k: Float64Array,
  v: Float64Array,
  c: BlockConfig,
): Float64Array {
  const { dim, heads, seq } = c;
  const hd = dim / heads;
  const scale = 1 / Math.sqrt(hd);
  const out = new Float64Array(dim * seq);
  const p = new Float64Array(seq);
  for (let h = 0; h < heads; h++) {
    for (let i = 0; i < seq; i++) {
      let max = -Infinity;
      for (let j = 0; j <= i; j++) {
        let s = 0;
        for (let d = 0; d < hd; d++) s += q[i * dim + h * hd + d]! * k[j * dim + h * hd + d]!;
        p[j] = s * scale;
        max = Math.max(max, p[j]!);
      }
      let total = 0;
      for (let j = 0; j <= i; j++) total += p[j] = Math.exp(p[j]! - max);
      for (let d = 0; d < hd; d++) {
        let s = 0;
        for (let j = 0; j <= i; j++) s += p[j]! * v[j * dim + h * hd + d]!;
        out[i * dim + h * hd + d] = s / total;
      }
    }
  }
  return out;
}

/** The block's output, [dim, seq] in float64. */
export function referenceBlock(c: BlockConfig, w: Data): Float64Array {
  const { dim, seq, ffn, eps } = c;
  const h = rmsNormRows(w.x, w.attnNorm, dim, seq, eps);
  const q = matmul(w.wq, h, dim, dim, seq);
  const k = matmul(w.wk, h, dim, dim, seq);
  const v = matmul(w.wv, h, dim, dim, seq);
  const attn = matmul(w.wo, attention(q, k, v, c), dim, dim, seq);
  const h1 = attn.map((a, i) => a + w.x[i]!);
  const n2 = rmsNormRows(h1, w.ffnNorm, dim, seq, eps);
  const gate = matmul(w.wGate, n2, dim, ffn, seq);
  const up = matmul(w.wUp, n2, dim, ffn, seq);
  const gated = gate.map((g, i) => (g / (1 + Math.exp(-g))) * up[i]!);
  const down = matmul(w.wDown, gated, ffn, dim, seq);
  return down.map((d, i) => d + h1[i]!);
}

/** max |a - b| / max |b|: the relative error the demo reports. */
export function relativeError(actual: ArrayLike<number>, expected: ArrayLike<number>): number {
  let diff = 0, scale = 0;
  for (let i = 0; i < expected.length; i++) {
    diff = Math.max(diff, Math.abs(actual[i]! - expected[i]!));
    scale = Math.max(scale, Math.abs(expected[i]!));
  }
  return diff / scale;
}
