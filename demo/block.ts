/**
 * A pre-norm transformer block (LLaMA style): RMS norm, multi-head causal self-attention, RMS
 * norm, SiLU-gated MLP, residuals. Shared by the demo, the benchmarks and the tests.
 * @module
 */

import {
  add,
  cont,
  Context,
  Graph,
  mul,
  mulMat,
  permute,
  reshape,
  rmsNorm,
  silu,
  softmax,
  type Tensor,
} from "../mod.ts";

/** Sizes of a block. */
export interface BlockConfig {
  dim: number;
  heads: number;
  seq: number;
  ffn: number;
  eps: number;
}

/** The demo's default sizes (small enough for the f64 reference to run in a moment). */
export const DEFAULT_BLOCK: BlockConfig = { dim: 256, heads: 8, seq: 64, ffn: 704, eps: 1e-5 };

/** The block's input tensors, in creation order. */
export interface BlockWeights {
  x: Tensor;
  mask: Tensor;
  attnNorm: Tensor;
  wq: Tensor;
  wk: Tensor;
  wv: Tensor;
  wo: Tensor;
  ffnNorm: Tensor;
  wGate: Tensor;
  wUp: Tensor;
  wDown: Tensor;
}

/** The block's graph and its inputs. */
export interface Block {
  config: BlockConfig;
  ctx: Context;
  inputs: BlockWeights;
  output: Tensor;
  graph: Graph;
}

/** Builds the block's graph: `out = h + mlp(norm(h))`, `h = x + attn(norm(x))`. */
export function buildBlock(config: BlockConfig = DEFAULT_BLOCK): Block {
  const { dim, heads, seq, ffn, eps } = config;
  const headDim = dim / heads;
  const ctx = new Context();
  const inputs: BlockWeights = {
    x: ctx.newTensor("f32", [dim, seq], "x"),
    mask: ctx.newTensor("f32", [seq, seq], "causal_mask"),
    attnNorm: ctx.newTensor("f32", [dim], "attn_norm"),
    wq: ctx.newTensor("f32", [dim, dim], "wq"),
    wk: ctx.newTensor("f32", [dim, dim], "wk"),
    wv: ctx.newTensor("f32", [dim, dim], "wv"),
    wo: ctx.newTensor("f32", [dim, dim], "wo"),
    ffnNorm: ctx.newTensor("f32", [dim], "ffn_norm"),
    wGate: ctx.newTensor("f32", [dim, ffn], "w_gate"),
    wUp: ctx.newTensor("f32", [dim, ffn], "w_up"),
    wDown: ctx.newTensor("f32", [ffn, dim], "w_down"),
  };
  const w = inputs;
  const h = mul(rmsNorm(w.x, eps), w.attnNorm);
  // [dim, seq] -> [headDim, heads, seq] -> [headDim, seq, heads]: one matrix per head.
  const heads3 = (t: Tensor): Tensor => permute(reshape(t, [headDim, heads, seq]), [0, 2, 1, 3]);
  const q = heads3(mulMat(w.wq, h));
  const k = heads3(mulMat(w.wk, h));
  // V transposed per head, [seq, headDim, heads], so that kqv = mulMat(vT, p).
  const vT = cont(permute(reshape(mulMat(w.wv, h), [headDim, heads, seq]), [1, 2, 0, 3]));
  const scores = mulMat(k, q); // [seq_k, seq_q, heads]
  const p = softmax(scores, { mask: w.mask, scale: 1 / Math.sqrt(headDim) });
  const kqv = mulMat(vT, p); // [headDim, seq_q, heads]
  const merged = reshape(cont(permute(kqv, [0, 2, 1, 3])), [dim, seq]);
  const h1 = add(w.x, mulMat(w.wo, merged));
  const n2 = mul(rmsNorm(h1, eps), w.ffnNorm);
  const gated = mul(silu(mulMat(w.wGate, n2)), mulMat(w.wUp, n2));
  const output = add(h1, mulMat(w.wDown, gated));
  output.name = "out";
  return { config, ctx, inputs, output, graph: Graph.build(output) };
}

/** Deterministic pseudo-random values in [-scale, scale], never exactly zero. */
export function randomValues(count: number, seed: number, scale = 1): Float32Array {
  const out = new Float32Array(count);
  let state = seed >>> 0 || 1;
  for (let i = 0; i < count; i++) {
    // xorshift32
    state ^= state << 13;
    state >>>= 0;
    state ^= state >>> 17;
    state ^= state << 5;
    state >>>= 0;
    const unit = (state + 0.5) / 4294967296; // (0, 1)
    out[i] = (unit * 2 - 1) * scale || scale * 1e-3;
  }
  return out;
}

/** The causal mask: 0 where key j <= query i, -Infinity after. Laid out [seq_k, seq_q]. */
export function causalMask(seq: number): Float32Array {
  const mask = new Float32Array(seq * seq);
  for (let i = 0; i < seq; i++) {
    for (let j = 0; j < seq; j++) mask[i * seq + j] = j <= i ? 0 : -Infinity;
  }
  return mask;
}

/** Random weights and input for a block, with scales that keep activations O(1). */
export function blockData(config: BlockConfig, seed = 1): BlockData {
  const { dim, seq, ffn } = config;
  const ones = (n: number, s: number): Float32Array => randomValues(n, s, 0.1).map((v) => 1 + v);
  return {
    x: randomValues(dim * seq, seed),
    mask: causalMask(seq),
    attnNorm: ones(dim, seed + 1),
    wq: randomValues(dim * dim, seed + 2, 1 / Math.sqrt(dim)),
    wk: randomValues(dim * dim, seed + 3, 1 / Math.sqrt(dim)),
    wv: randomValues(dim * dim, seed + 4, 1 / Math.sqrt(dim)),
    wo: randomValues(dim * dim, seed + 5, 1 / Math.sqrt(dim)),
    ffnNorm: ones(dim, seed + 6),
    wGate: randomValues(dim * ffn, seed + 7, 1 / Math.sqrt(dim)),
    wUp: randomValues(dim * ffn, seed + 8, 1 / Math.sqrt(dim)),
    wDown: randomValues(ffn * dim, seed + 9, 1 / Math.sqrt(ffn)),
  };
}

/** The data `blockData` makes, one array per input tensor. */
export type BlockData = Record<keyof BlockWeights, Float32Array>;

/** Writes each input of the block through the backend whose memory holds it. */
export function setBlockInputs(block: Block, data: BlockData): void {
  for (const [name, tensor] of Object.entries(block.inputs)) {
    const placement = tensor.placement;
    if (!placement) throw new Error(`setBlockInputs: ${tensor.label} has no memory`);
    placement.buffer.backend.setTensor(tensor, data[name as keyof BlockWeights]);
  }
}
