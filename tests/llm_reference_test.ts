/**
 * The float64 llama reference (tests/llm_reference.ts) checked on its own: on a tiny synthetic
 * llama GGUF against a second, naive, separately written formula (and for properties: causality,
 * RoPE is the identity at position 0, the position selection), and on SmolLM2-135M, whose
 * greedy continuation of "The capital of France is" is " Paris" in llama.cpp.
 */

import assert from "node:assert/strict";
import { GGUFFile } from "../src/gguf/file.ts";
import { Tokenizer } from "../src/llm/tokenizer.ts";
import { SMOLLM2_PATH, smolLM2Cached } from "../tools/model_cache.ts";
import { loadReferenceModel, referenceLogits, type ReferenceModel } from "./llm_reference.ts";
import {
  BASE,
  E,
  EPS,
  FF,
  HD,
  LAYERS,
  NH,
  NKV,
  type TinyWeight,
  tinyWeights,
  V,
  writeTiny,
} from "./tiny_llama.ts";

// A tiny llama (tests/tiny_llama.ts): 2 blocks, 4 query heads sharing 2 kv heads of 8 dims,
// mixed weight types.

/** The epsilon as the file stores it (an f32), which is what the model computes with. */
const FILE_EPS = Math.fround(EPS);

// ---------------------------------------------------------------------------------------------
// The naive formula: nested arrays, a matrix as a function of (out, in), RoPE as a complex
// rotation, attention as a full masked score matrix. Options switch to the wrong conventions, to
// show the comparison can tell them apart.

interface NaiveOptions {
  /** Rotate (x[i], x[i + d/2]) instead of adjacent pairs. */
  neox?: boolean;
  /** Map query head h to kv head h % n_kv instead of floor(h / (n_head / n_kv)). */
  interleavedGroups?: boolean;
}

function naiveLogits(
  w: Map<string, TinyWeight>,
  layers: number,
  ids: number[],
  options: NaiveOptions = {},
): number[][] {
  const get = (name: string) => w.get(name)!.values;
  /** W (ggml order [nIn, nOut]) at output o, input i. */
  const at = (m: Float32Array, nIn: number) => (o: number, i: number) => m[o * nIn + i]!;
  const apply = (m: Float32Array, nIn: number, nOut: number, x: number[]): number[] => {
    const W = at(m, nIn);
    const y: number[] = [];
    for (let o = 0; o < nOut; o++) {
      let s = 0;
      for (let i = 0; i < nIn; i++) s += W(o, i) * x[i]!;
      y.push(s);
    }
    return y;
  };
  const norm = (x: number[], g: Float32Array): number[] => {
    const ms = x.reduce((s, v) => s + v * v, 0) / x.length;
    return x.map((v, i) => (v / Math.sqrt(ms + FILE_EPS)) * g[i]!);
  };
  /** One head's vector turned for position p. */
  const rotate = (head: number[], p: number): number[] => {
    const out = head.slice();
    for (let j = 0; j < HD / 2; j++) {
      const [a, b] = options.neox ? [j, j + HD / 2] : [2 * j, 2 * j + 1];
      const angle = p * BASE ** ((-2 * j) / HD);
      // (re + i im) * e^{i angle}
      const re = head[a]!;
      const im = head[b]!;
      out[a] = re * Math.cos(angle) - im * Math.sin(angle);
      out[b] = re * Math.sin(angle) + im * Math.cos(angle);
    }
    return out;
  };
  const heads = (x: number[], n: number) =>
    Array.from({ length: n }, (_, h) => x.slice(h * HD, (h + 1) * HD));
  const embd = get("token_embd.weight");
  let xs = ids.map((id) => Array.from(embd.subarray(id * E, (id + 1) * E)));
  const T = ids.length;
  for (let l = 0; l < layers; l++) {
    const p = (name: string) => get(`blk.${l}.${name}.weight`);
    const hs = xs.map((x) => norm(x, p("attn_norm")));
    const Q = hs.map((h, t) =>
      heads(apply(p("attn_q"), E, NH * HD, h), NH).map((v) => rotate(v, t))
    );
    const K = hs.map((h, t) =>
      heads(apply(p("attn_k"), E, NKV * HD, h), NKV).map((v) => rotate(v, t))
    );
    const Vv = hs.map((h) => heads(apply(p("attn_v"), E, NKV * HD, h), NKV));
    const attended = xs.map(() => [] as number[]);
    for (let h = 0; h < NH; h++) {
      const kv = options.interleavedGroups ? h % NKV : Math.floor(h / (NH / NKV));
      // Full T x T scores, future masked to -Infinity.
      const S = Q.map((q, t) =>
        K.map((k, s) =>
          s > t ? -Infinity : q[h]!.reduce((acc, v, d) => acc + v * k[kv]![d]!, 0) / Math.sqrt(HD)
        )
      );
      for (let t = 0; t < T; t++) {
        const e = S[t]!.map(Math.exp);
        const z = e.reduce((a, b) => a + b, 0);
        const out = new Array<number>(HD).fill(0);
        for (let s = 0; s < T; s++) {
          for (let d = 0; d < HD; d++) out[d]! += (e[s]! / z) * Vv[s]![kv]![d]!;
        }
        attended[t]!.push(...out);
      }
    }
    xs = xs.map((x, t) => {
      const o = apply(p("attn_output"), NH * HD, E, attended[t]!);
      const x1 = x.map((v, i) => v + o[i]!);
      const f = norm(x1, p("ffn_norm"));
      const g = apply(p("ffn_gate"), E, FF, f);
      const u = apply(p("ffn_up"), E, FF, f);
      const a = g.map((v, i) => (v * u[i]!) / (1 + Math.exp(-v)));
      const d = apply(p("ffn_down"), FF, E, a);
      return x1.map((v, i) => v + d[i]!);
    });
  }
  const out = w.get("output.weight")?.values ?? embd;
  return xs.map((x) => apply(out, E, V, norm(x, get("output_norm.weight"))));
}

function maxRelDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  assert.equal(a.length, b.length);
  let scale = 0;
  for (let i = 0; i < a.length; i++) scale = Math.max(scale, Math.abs(b[i]!));
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff = Math.max(diff, Math.abs(a[i]! - b[i]!));
  return diff / scale;
}

async function withTiny<T>(
  untied: boolean,
  fn: (path: string, weights: Map<string, TinyWeight>) => Promise<T>,
): Promise<T> {
  const dir = await Deno.makeTempDir();
  try {
    const weights = tinyWeights(untied ? 11 : 7, { untied });
    const path = `${dir}/tiny.gguf`;
    await writeTiny(path, weights);
    return await fn(path, weights);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

const IDS = [3, 9, 0, 7, 3];

Deno.test("tiny llama, one block, 3 positions: the reference matches the naive formula", async () => {
  await withTiny(false, async (path, weights) => {
    const model = await loadReferenceModel(path, { layers: 1 });
    assert.equal(model.nLayer, 1);
    assert.equal(model.tiedOutput, true);
    assert.equal(model.output, model.tokenEmbd);
    assert.deepEqual(
      [model.nEmbd, model.nHead, model.nHeadKV, model.headDim, model.nFF, model.nVocab],
      [E, NH, NKV, HD, FF, V],
    );
    const ids = IDS.slice(0, 3);
    const got = referenceLogits(model, ids);
    const want = naiveLogits(weights, 1, ids);
    assert.equal(got.length, 3);
    for (let t = 0; t < 3; t++) assert.ok(maxRelDiff(got[t]!, want[t]!) < 1e-12, `position ${t}`);
    // The comparison tells the wrong conventions apart (after position 0, where RoPE does nothing
    // and a query attends to its own value only).
    const neox = naiveLogits(weights, 1, ids, { neox: true });
    const groups = naiveLogits(weights, 1, ids, { interleavedGroups: true });
    assert.ok(maxRelDiff(neox[0]!, want[0]!) < 1e-12);
    for (const wrong of [neox, groups]) {
      assert.ok(maxRelDiff(got[2]!, wrong[2]!) > 1e-3);
    }
  });
});

Deno.test("tiny llama, all blocks, untied output: the reference matches the naive formula", async () => {
  await withTiny(true, async (path, weights) => {
    const model = await loadReferenceModel(path);
    assert.equal(model.nLayer, LAYERS);
    assert.equal(model.tiedOutput, false);
    const got = referenceLogits(model, IDS);
    const want = naiveLogits(weights, LAYERS, IDS);
    for (let t = 0; t < IDS.length; t++) {
      assert.ok(maxRelDiff(got[t]!, want[t]!) < 1e-12, `position ${t}`);
    }
  });
});

Deno.test("tiny llama: causal, positions pick rows, RoPE is the identity at position 0", async () => {
  await withTiny(false, async (path) => {
    const model = await loadReferenceModel(path);
    const all = referenceLogits(model, IDS);
    // Rows of a prefix do not depend on later tokens (same arithmetic: bit-equal).
    for (let t = 1; t <= IDS.length; t++) {
      const prefix = referenceLogits(model, IDS.slice(0, t));
      for (let s = 0; s < t; s++) assert.deepEqual(prefix[s], all[s]);
    }
    assert.deepEqual(referenceLogits(model, IDS, [4, 1]), [all[4], all[1]]);
    assert.throws(() => referenceLogits(model, IDS, [5]), RangeError);
    assert.throws(() => referenceLogits(model, [V]), RangeError);
    // Another RoPE base changes nothing at position 0 and everything after.
    const other: ReferenceModel = { ...model, ropeBase: 37 };
    const moved = referenceLogits(other, IDS);
    assert.deepEqual(moved[0], all[0]);
    for (let t = 1; t < IDS.length; t++) assert.ok(maxRelDiff(moved[t]!, all[t]!) > 1e-6);
    // No blocks: the output head on the normed embedding.
    const bare = await loadReferenceModel(path, { layers: 0 });
    const [row] = referenceLogits(bare, [4]);
    const embd = model.tokenEmbd.subarray(4 * E, 5 * E);
    const rms = Math.sqrt(embd.reduce((s, v) => s + v * v, 0) / E + FILE_EPS);
    for (let o = 0; o < V; o++) {
      let dot = 0;
      for (let i = 0; i < E; i++) {
        dot += (embd[i]! / rms) * model.outputNorm[i]! * model.tokenEmbd[o * E + i]!;
      }
      assert.ok(Math.abs(row![o]! - dot) <= 1e-12 * Math.abs(dot) + 1e-12);
    }
  });
});

// ---------------------------------------------------------------------------------------------
// SmolLM2-135M-Instruct (Q4_1).

Deno.test({
  name: "SmolLM2: the greedy next token of 'The capital of France is' is ' Paris'",
  ignore: !smolLM2Cached(),
  fn: async () => {
    const model = await loadReferenceModel(SMOLLM2_PATH);
    assert.deepEqual([model.nEmbd, model.nLayer, model.nHead, model.nHeadKV], [576, 30, 9, 3]);
    assert.equal(model.tiedOutput, true);
    using file = GGUFFile.open(SMOLLM2_PATH);
    const tokenizer = Tokenizer.fromGGUF(file);
    const ids = tokenizer.tokenize("The capital of France is", {
      addSpecial: true,
      parseSpecial: true,
    });
    const started = performance.now();
    const [last] = referenceLogits(model, ids, [ids.length - 1]);
    const ms = performance.now() - started;
    const top = [...last!.keys()].sort((a, b) => last![b]! - last![a]!).slice(0, 5);
    console.log(
      `SmolLM2 reference: ${ids.length} tokens [${ids}] in ${ms.toFixed(0)} ms; top-5 at the ` +
        `last position: ${
          top.map((id) => `${id} ${JSON.stringify(tokenizer.detokenize([id]))} ${last![id]}`)
            .join(", ")
        }`,
    );
    assert.equal(tokenizer.detokenize([top[0]!]), " Paris");
  },
});
