/**
 * The llama graph (llama.cpp's `llm_build_llama`) for a batch of tokens at given positions,
 * reading and writing the KV cache. Its inputs are tensors of their own (token ids, positions,
 * the attention mask), so one graph and one plan serve every call with the same shape: the
 * number of tokens, the number of cache positions attention reads (`nKv`, bucketed by the
 * caller) and whether every position's logits are wanted.
 *
 * Attention multiplies each query head alone, as llama.cpp does: `K·Q` is one product per head
 * with nTokens columns, the kv head that a group of heads shares (GQA) broadcast to them, and so
 * is `V·p`; the mask has a row per token. With `flashAttn`, each block's attention is one fused
 * `flashAttnExt` over the same views (llama.cpp's `-fa on` graph), its values cached as the keys.
 * @module
 */

import { ModelError, ropeFactorsName } from "./hparams.ts";
import type { LlamaHParams } from "./hparams.ts";
import type { KvCache } from "./kv_cache.ts";
import { Context } from "../context.ts";
import { dtypeSize } from "../dtype.ts";
import { Graph } from "../graph.ts";
import type { Tensor } from "../tensor.ts";
import { add, mul, silu } from "../ops/elementwise.ts";
import { rmsNorm, softmax } from "../ops/norm.ts";
import { mulMat as mulMatAny } from "../ops/matmul.ts";
import { cont, getRows, setRows } from "../ops/copy.ts";
import { permute, reshape, view } from "../ops/view.ts";
import { rope, type RopeOptions } from "../ops/rope.ts";
import { flashAttnExt } from "../ops/attention.ts";
import { ArgumentError } from "../errors.ts";

/** One layer's weights. */
export interface LlamaLayerWeights {
  /** `attn_norm.weight`, the attention's RMS norm gain. */
  readonly attnNorm: Tensor;
  /** `attn_q.weight`. */
  readonly wq: Tensor;
  /** `attn_k.weight`. */
  readonly wk: Tensor;
  /** `attn_v.weight`. */
  readonly wv: Tensor;
  /** `attn_output.weight`. */
  readonly wo: Tensor;
  /** `ffn_norm.weight`, the feed-forward's RMS norm gain. */
  readonly ffnNorm: Tensor;
  /** `ffn_gate.weight`. */
  readonly wGate: Tensor;
  /** `ffn_up.weight`. */
  readonly wUp: Tensor;
  /** `ffn_down.weight`. */
  readonly wDown: Tensor;
  /**
   * The rope frequency factors (`rope_freqs.weight`, f32 [nRot/2]), when the file has them: one
   * tensor for every block, as llama.cpp, here the copy on the block's backend.
   */
  readonly ropeFactors?: Tensor;
}

/** Options of {@link llamaWeights}. */
export interface LlamaWeightsOptions {
  /** The output projection to use (a copy of a tied embedding on another backend). */
  readonly output?: Tensor;
  /**
   * Block `il`'s copy of the rope factors tensor (named by `ropeFactorsName`), where stages on
   * several backends each hold one; default: the one in `tensors`, if any.
   */
  readonly ropeFactors?: (il: number) => Tensor | undefined;
  /**
   * The context the model runs with, which picks LongRoPE's long or short factors (default:
   * the trained context).
   */
  readonly nCtx?: number;
}

/** The model's weights, by role. */
export interface LlamaWeights {
  /** `token_embd.weight`. */
  readonly tokenEmbd: Tensor;
  /** `output_norm.weight`. */
  readonly outputNorm: Tensor;
  /** `output.weight`, or the token embedding when the file ties them. */
  readonly output: Tensor;
  /** The blocks, in order. */
  readonly layers: readonly LlamaLayerWeights[];
}

/**
 * Picks the weights out of a GGUF's tensors by llama.cpp's names; a missing one, or one of the
 * wrong shape or type, is a ModelError. The rope factors are optional, as in llama.cpp.
 */
export function llamaWeights(
  tensors: ReadonlyMap<string, Tensor>,
  hparams: LlamaHParams,
  options: LlamaWeightsOptions = {},
): LlamaWeights {
  const get = (name: string): Tensor => {
    const t = tensors.get(name);
    if (!t) throw new ModelError(`model: tensor ${name} is missing`);
    return t;
  };
  const factorsName = ropeFactorsName(hparams, options.nCtx ?? hparams.nCtxTrain);
  const factorsOf = options.ropeFactors ?? ((): Tensor | undefined => tensors.get(factorsName));
  const layers: LlamaLayerWeights[] = [];
  for (let il = 0; il < hparams.nLayer; il++) {
    const p = `blk.${il}.`;
    const ropeFactors = factorsOf(il);
    if (ropeFactors) {
      // ggml's rope reads f32 factors, one per rotated pair; llama.cpp checks the shape at load.
      if (ropeFactors.dtype !== "f32") {
        throw new ModelError(
          `model: ${factorsName} is ${ropeFactors.dtype}; rope frequency factors must be f32`,
        );
      }
      const n = hparams.nRot / 2;
      if (ropeFactors.nelements !== n || ropeFactors.ne[0] !== n) {
        throw new ModelError(
          `model: ${factorsName} is [${ropeFactors.ne.join(", ")}], expected [${n}] ` +
            `(rope.dimension_count / 2)`,
        );
      }
    }
    layers.push({
      ...(ropeFactors ? { ropeFactors } : {}),
      attnNorm: get(`${p}attn_norm.weight`),
      wq: get(`${p}attn_q.weight`),
      wk: get(`${p}attn_k.weight`),
      wv: get(`${p}attn_v.weight`),
      wo: get(`${p}attn_output.weight`),
      ffnNorm: get(`${p}ffn_norm.weight`),
      wGate: get(`${p}ffn_gate.weight`),
      wUp: get(`${p}ffn_up.weight`),
      wDown: get(`${p}ffn_down.weight`),
    });
  }
  const tokenEmbd = get("token_embd.weight");
  const kv = hparams.headDim * hparams.nHeadKv;
  const expect = (t: Tensor, ne0: number, ne1: number): void => {
    if (t.ne[0] !== ne0 || t.ne[1] !== ne1 || t.ne[2] !== 1 || t.ne[3] !== 1) {
      throw new ModelError(
        `model: ${t.name} is [${t.ne.join(", ")}], expected [${ne0}, ${ne1}, 1, 1]`,
      );
    }
  };
  const { nEmbd, nFf, nVocab } = hparams;
  expect(tokenEmbd, nEmbd, nVocab);
  for (const l of layers) {
    expect(l.attnNorm, nEmbd, 1);
    expect(l.wq, nEmbd, hparams.headDim * hparams.nHead);
    expect(l.wk, nEmbd, kv);
    expect(l.wv, nEmbd, kv);
    expect(l.wo, hparams.headDim * hparams.nHead, nEmbd);
    expect(l.ffnNorm, nEmbd, 1);
    expect(l.wGate, nEmbd, nFf);
    expect(l.wUp, nEmbd, nFf);
    expect(l.wDown, nFf, nEmbd);
  }
  const out = options.output ?? tensors.get("output.weight") ?? tokenEmbd;
  expect(out, nEmbd, nVocab);
  const outputNorm = get("output_norm.weight");
  expect(outputNorm, nEmbd, 1);
  return { tokenEmbd, outputNorm, output: out, layers };
}

/** The shape a graph is built for. */
export interface LlamaGraphShape {
  /** Tokens evaluated at once. */
  readonly nTokens: number;
  /** Cache positions attention reads (from 0): the filled ones and masked padding. */
  readonly nKv: number;
  /** Logits of every token (true) or of the last one only. */
  readonly allLogits: boolean;
}

/** A built graph and the inputs a caller fills before each compute. */
export interface LlamaGraph {
  /** The shape it was built for. */
  readonly shape: LlamaGraphShape;
  /** The graph, ending at the logits. */
  readonly graph: Graph;
  /** i32 `[nTokens]` token ids. */
  readonly tokens: Tensor;
  /** i32 `[nTokens]` positions (cache rows written). */
  readonly positions: Tensor;
  /**
   * `[nKv, nTokens]`: 0 where token t may see key j, -Infinity elsewhere; f32, or f16 with
   * flash attention.
   */
  readonly mask: Tensor;
  /**
   * i32 `[width * nTokens]` (llama.cpp's `v_idxs`): where each value element of token t goes in
   * the transposed V cache, `c * nCtx + position[t]` for channel c (see {@link vCacheIndices});
   * read only by layers whose backend writes the V cache element by element.
   */
  readonly vIndices: Tensor;
  /** f32 `[nVocab, nTokens or 1]`. */
  readonly logits: Tensor;
  /** The input tensors (to give memory). */
  readonly inputs: readonly Tensor[];
}

/**
 * The products of the weights `ws` with `x`. Where the loader stored them as the consecutive
 * rows of one tensor (`GGUFLoadOptions.fuse`), one product with the whole and a view of each
 * one's rows: one matrix product for the backend instead of several (on an RPC server, one node
 * and one quantization of `x` fewer each), the same numbers (an output row is its weight row's
 * dot product alone). For several tokens the views are strided (a token's column of the whole
 * is `rows` apart): only where `strided` says the caller takes that; else, and for weights
 * apart, one product each. `name` names the whole product.
 */
function products(
  ws: readonly Tensor[],
  x: Tensor,
  mulMat: (a: Tensor, b: Tensor) => Tensor,
  name: (t: Tensor) => Tensor,
  strided = false,
): Tensor[] {
  const whole = ws[0]!.viewSource;
  let rows = 0;
  const consecutive = whole !== null && !whole.viewSource && ws.every((w) => {
    const next = w.viewSource === whole && w.viewOffset === rows * whole.nb[1]! &&
      w.ne[0] === whole.ne[0] && w.nb[1] === whole.nb[1];
    rows += w.ne[1]!;
    return next;
  }) && rows === whole.ne[1];
  const T = x.ne[1]!;
  if (!consecutive || (T !== 1 && !strided) || x.ne[2] !== 1 || x.ne[3] !== 1) {
    return ws.map((w) => mulMat(w, x));
  }
  const all = name(mulMat(whole, x)); // [rows, T]
  let offset = 0;
  return ws.map((w) => {
    // One token: each part is dense. Several: a token's column is the whole's rows apart.
    const nb = T === 1 ? {} : { nb: all.nb };
    const part = view(all, [w.ne[1]!, T], { offset, ...nb });
    offset += w.ne[1]! * all.nb[0]!;
    return part;
  });
}

/**
 * `rope` of the query and key heads. Where `q` and `k` are one token's adjacent parts of one
 * fused product (`products`), one rope over all their heads and a view of each: one node
 * fewer, the same numbers (rope turns each head alone). Else each its own.
 */
function ropeQK(
  q: Tensor,
  k: Tensor,
  hd: number,
  rope: (t: Tensor) => Tensor,
): [Tensor, Tensor] {
  const whole = q.viewSource;
  const adjacent = whole !== null && k.viewSource === whole && q.ne[1] === 1 &&
    q.isContiguous && k.isContiguous && k.viewOffset === q.viewOffset + q.nbytes;
  const nq = q.ne[0]! / hd;
  const nk = k.ne[0]! / hd;
  if (!adjacent) return [rope(heads(q, hd, nq)), rope(heads(k, hd, nk))];
  const both = rope(view(whole, [hd, nq + nk, 1], { offset: q.viewOffset }));
  return [
    view(both, [hd, nq, 1]),
    view(both, [hd, nk, 1], { offset: nq * both.nb[1]! }),
  ];
}

/** `t` ([hd * n, T], its rows perhaps strided: see `products`) as `[hd, n, T]`. */
function heads(t: Tensor, hd: number, n: number): Tensor {
  const T = t.ne[1]!;
  if (t.isContiguous) return reshape(t, [hd, n, T]);
  const [e, row] = [t.nb[0]!, t.nb[1]!];
  return view(t.viewSource!, [hd, n, T], { offset: t.viewOffset, nb: [e, hd * e, row, row * T] });
}

/** How {@link buildLlamaGraph} computes. */
export interface LlamaGraphOptions {
  /**
   * Every product computes as ggml's CPU backend does (`mulMat`'s `ggml` option), so logits are
   * llama.cpp's bit for bit on the CPU (default true); false lets prompts of 20+ tokens take the
   * f32 GEMM.
   */
  readonly ggml?: boolean;
  /**
   * With `ggml`, q4_0 and q4_K weights with a multiple of 8 rows take the order of llama.cpp's
   * repacked CPU kernels (`mulMat`'s `repack` option; llama.cpp's default on x86 CPUs with AVX2
   * and no AMX). Default true; false is llama.cpp's `--no-repack`.
   */
  readonly repack?: boolean;
  /**
   * Attention as one fused `flashAttnExt` per block (llama.cpp's `-fa on`): no `[nKv, T, nHead]`
   * scores in memory. The cache must store its values as the keys (`KvCache`'s `vTransposed`
   * false). Default false: scores, softmax and `V·p` as llama.cpp's non-flash graph.
   */
  readonly flashAttn?: boolean;
}

/**
 * Builds the llama graph for `shape` over `weights` and `cache`; `options` as
 * {@link LlamaGraphOptions} (a boolean is its `ggml`).
 *
 * @example
 * ```ts
 * import { buildLlamaGraph, CpuBackend, GGUFFile, KvCache, llamaWeights, readLlamaHParams } from "../../mod.ts";
 * const cache = Deno.env.get("GRAFT_MODEL_CACHE") ?? `${Deno.env.get("HOME")}/.cache/graft/models`;
 * using file = GGUFFile.open(`${cache}/SmolLM2-135M-Instruct.Q4_1.gguf`);
 * using cpu = new CpuBackend();
 * using loaded = file.load(cpu);
 * const hparams = readLlamaHParams(file.header);
 * using kv = new KvCache(cpu, hparams, 256, "f16", false);
 * const built = buildLlamaGraph(hparams, llamaWeights(loaded.tensors, hparams), kv, {
 *   nTokens: 8,
 *   nKv: 256,
 *   allLogits: false,
 * }, { flashAttn: true });
 * console.log(built.graph.nodes.length > 0);
 * ```
 */
export function buildLlamaGraph(
  hparams: LlamaHParams,
  weights: LlamaWeights,
  cache: KvCache,
  shape: LlamaGraphShape,
  options: boolean | LlamaGraphOptions = true,
): LlamaGraph {
  const { ggml = true, repack = true, flashAttn = false } = typeof options === "boolean"
    ? { ggml: options }
    : options;
  if (flashAttn === cache.vTransposed) {
    throw new ArgumentError(
      `buildLlamaGraph: flashAttn ${flashAttn} needs a KvCache made with vTransposed ` +
        `${!flashAttn}, got one with vTransposed ${cache.vTransposed}`,
    );
  }
  const { nTokens: T, nKv } = shape;
  const { nEmbd, nHead, nHeadKv, headDim: hd, rmsEps } = hparams;
  const g = nHeadKv;
  const width = hd * g;
  const ctx = new Context();
  const tokens = ctx.newTensor("i32", [T], "tokens");
  const positions = ctx.newTensor("i32", [T], "positions");
  // f16 with flash attention, as llama.cpp's (ggml-cpu's flash_attn_ext reads it so; 0 and
  // -inf are exact in f16).
  const mask = ctx.newTensor(flashAttn ? "f16" : "f32", [nKv, T], "kq_mask");
  const vIndices = ctx.newTensor("i32", [width * T], "v_idxs");
  const kqScale = 1 / Math.sqrt(hd);
  // ggml_rope_ext as llama.cpp calls it (llm_build_llama): the same scaling for every block,
  // each block's rope factors added below.
  const ropeOptions: RopeOptions = {
    nDims: hparams.nRot,
    mode: "normal",
    freqBase: hparams.ropeFreqBase,
    freqScale: hparams.ropeFreqScale,
    extFactor: hparams.ropeExtFactor,
    attnFactor: hparams.ropeAttnFactor,
    betaFast: hparams.ropeBetaFast,
    betaSlow: hparams.ropeBetaSlow,
    nCtxOrig: hparams.nCtxOrigYarn,
  };
  const cacheBytes = dtypeSize[cache.type];
  // With `ggml`, every product computes as ggml's CPU backend does (activations quantized per
  // block at any token count), so the model follows llama.cpp's arithmetic; `repack` as
  // llama.cpp's default placement of q4_0/q4_K weights.
  const mulMat = (a: Tensor, b: Tensor): Tensor =>
    mulMatAny(a, b, ggml && repack ? { ggml, repack } : { ggml });
  const nCtx = cache.nCtx;

  let x = getRows(weights.tokenEmbd, tokens); // [nEmbd, T]
  x.name = "inp_embd";
  weights.layers.forEach((w, il) => {
    // Nodes carry llama.cpp's names (`attn_norm-3`), so both graphs can be compared node by node.
    const named = (t: Tensor, name: string): Tensor => {
      t.name = `${name}-${il}`;
      return t;
    };
    const layer = cache.layers[il]!;
    const layerRope = w.ropeFactors ? { ...ropeOptions, freqFactors: w.ropeFactors } : ropeOptions;
    const h = named(mul(rmsNorm(x, rmsEps), w.attnNorm), "attn_norm");
    // Fused, several tokens' q and k are strided views: rope reads them so.
    const [qCur, kCur, vCur] = products(
      [w.wq, w.wk, w.wv],
      h,
      mulMat,
      (t) => named(t, "qkv"),
      true,
    );
    const [qRoped, kRoped] = ropeQK(
      named(qCur!, "Qcur"),
      named(kCur!, "Kcur"),
      hd,
      (t) => rope(t, positions, layerRope),
    );
    const q = named(qRoped, "Qrope");
    const k = named(kRoped, "Krope");
    const v = named(vCur!.isContiguous ? vCur! : cont(vCur!), "Vcur"); // [width, T]
    const kWritten = setRows(layer.k, reshape(k, [width, T]), positions);
    // Keys of kv head j: [hd, nKv], rows a position apart.
    const keys = view(kWritten, [hd, nKv, g], {
      nb: [cacheBytes, width * cacheBytes, hd * cacheBytes, width * nCtx * cacheBytes],
    });
    // Each head alone, as llama.cpp: queries [hd, T, nHead] (a view), the kv head broadcast to
    // its r query heads (head h reads kv head h / r).
    const queries = permute(q, [0, 2, 1, 3]);
    let merged: Tensor; // [nEmbd, T]
    if (flashAttn) {
      // The V cache is [width, nCtx] as the keys: a position's values are a row.
      const vWritten = setRows(layer.v, v, positions);
      const values = view(vWritten, [hd, nKv, g], { nb: keys.nb });
      // ggml's flash_attn_ext gives [hd, nHead, T] (already permuted): one row a head.
      const kqv = named(flashAttnExt(queries, keys, values, { mask, scale: kqScale }), "fattn");
      merged = reshape(kqv, [hd * nHead, T]);
    } else {
      // The V cache is [nCtx, width]; its transpose's rows are positions.
      const vT = view(layer.v, [width, nCtx], {
        nb: [nCtx * cacheBytes, cacheBytes, width * nCtx * cacheBytes, width * nCtx * cacheBytes],
      });
      let vWritten = setRows(vT, v, positions);
      const vBackend = layer.v.placement?.buffer.backend;
      if (vBackend && !vBackend.supportsOp(vWritten)) {
        // A backend that writes contiguous rows only (ggml's set_rows: an RPC server) gets the
        // write as llama.cpp makes it for its transposed V: one-element rows at per-element
        // indices, `c * nCtx + position` (v_idxs). Same values; slower on the CPU, so not there.
        const vFlat = reshape(layer.v, [1, nCtx * width]);
        vWritten = setRows(vFlat, reshape(v, [1, width * T]), vIndices);
      }
      // Values of kv head j transposed: [nKv, hd], rows a channel apart.
      const values = view(vWritten, [nKv, hd, g], {
        nb: [cacheBytes, nCtx * cacheBytes, hd * nCtx * cacheBytes, width * nCtx * cacheBytes],
      });
      // mulMat's batch broadcast gives query head h kv head h / r.
      const scores = named(mulMat(keys, queries), "kq"); // [nKv, T, nHead]
      const p = named(softmax(scores, { mask, scale: kqScale }), "kq_soft_max");
      const kqv = named(mulMat(values, p), "kqv"); // [hd, T, nHead]
      // [hd, T, nHead] -> [hd, nHead, T] -> [nEmbd, T]
      merged = T === 1
        ? reshape(kqv, [hd * nHead, 1])
        : reshape(cont(permute(kqv, [0, 2, 1, 3])), [hd * nHead, T]);
    }
    let attnOut = named(mulMat(w.wo, merged), "attn_out");
    if (il === weights.layers.length - 1 && !shape.allLogits && T > 1) {
      // Only the last token's logits are read: as llama.cpp (its inp_out_ids), the last block's
      // feed-forward runs for that token alone. Views, so nothing is copied.
      const last = (t: Tensor): Tensor => view(t, [nEmbd, 1], { offset: (T - 1) * t.nb[1] });
      attnOut = last(attnOut);
      x = last(x);
    }
    x = named(add(x, attnOut), "ffn_inp");
    const n2 = named(mul(rmsNorm(x, rmsEps), w.ffnNorm), "ffn_norm");
    const [gateCur, upCur] = products([w.wGate, w.wUp], n2, mulMat, (t) => named(t, "ffn_gate_up"));
    const gate = named(gateCur!, "ffn_gate");
    const up = named(upCur!, "ffn_up");
    const gated = named(mul(silu(gate), up), "ffn_swiglu");
    x = add(x, named(mulMat(w.wDown, gated), "ffn_out"));
    x.name = `l_out-${il}`; // llama.cpp's name for the layer's output
  });
  // Without blocks, the last token is picked here.
  if (!shape.allLogits && x.ne[1] > 1) {
    x = view(x, [nEmbd, 1], { offset: (T - 1) * x.nb[1] });
  }
  const normed = mul(rmsNorm(x, rmsEps), weights.outputNorm);
  const logits = mulMat(weights.output, normed);
  logits.name = "logits";
  return {
    shape,
    graph: Graph.build(logits),
    tokens,
    positions,
    mask,
    vIndices,
    logits,
    inputs: ctx.tensors,
  };
}

/**
 * Fills `into` (`width * nTokens` entries) with the V cache indices of tokens at positions
 * `nPast...`: element c of token t goes to `c * nCtx + nPast + t` of the transposed cache.
 */
export function vCacheIndices(into: Int32Array, width: number, nCtx: number, nPast: number): void {
  const nTokens = into.length / width;
  for (let t = 0; t < nTokens; t++) {
    for (let c = 0; c < width; c++) into[t * width + c] = c * nCtx + nPast + t;
  }
}
