import assert from "node:assert/strict";
import { ArgumentError, createSampler, Sampler, type SamplerOptions, StopChecker } from "../mod.ts";
import { MT19937 } from "../internal.ts";

/** Every filter off, so one option at a time can be tested. */
const OFF: SamplerOptions = { temperature: 1, topK: 0, topP: 1, minP: 0, penaltyLastN: 0, seed: 1 };

/** A small deterministic generator for test data (not the sampler's). */
function lcg(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 4294967296;
  };
}

/** Distinct random float32 logits in [-6, 6). */
function randomLogits(n: number, seed: number): Float32Array {
  const r = lcg(seed);
  const seen = new Set<number>();
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    let v;
    do v = Math.fround(r() * 12 - 6); while (seen.has(v));
    seen.add(v);
    out[i] = v;
  }
  return out;
}

function softmax64(logits: ArrayLike<number>): number[] {
  let max = -Infinity;
  for (let i = 0; i < logits.length; i++) max = Math.max(max, logits[i]!);
  const e = Array.from(logits, (l) => Math.exp(l - max));
  const sum = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / sum);
}

/** Ids by descending logit (the logits are distinct). */
function ranked(logits: Float32Array): number[] {
  return [...logits.keys()].sort((a, b) => logits[b]! - logits[a]!);
}

const sorted = (ids: ArrayLike<number>) => Array.from(ids).sort((a, b) => a - b);

// --- f64 references ---
function refTopK(logits: Float32Array, k: number): number[] {
  return sorted(ranked(logits).slice(0, k <= 0 ? logits.length : k));
}
/** Smallest most-likely prefix whose probability reaches p; null when too close to call in f32. */
function refTopP(logits: Float32Array, p: number): number[] | null {
  const probs = softmax64(logits);
  const order = ranked(logits);
  let cum = 0;
  for (let i = 0; i < order.length; i++) {
    cum += probs[order[i]!]!;
    if (Math.abs(cum - p) < 1e-5) return null;
    if (cum >= p) return sorted(order.slice(0, i + 1));
  }
  return sorted(order);
}
function refMinP(logits: Float32Array, p: number): number[] | null {
  const probs = softmax64(logits);
  const pmax = Math.max(...probs);
  const kept = [];
  for (let i = 0; i < probs.length; i++) {
    if (Math.abs(probs[i]! / pmax - p) < 1e-5) return null;
    if (probs[i]! >= p * pmax) kept.push(i);
  }
  return kept;
}

Deno.test("MT19937 and uniform_real_distribution<double> equal libstdc++ (g++ reference values)", () => {
  const g = new MT19937(5489);
  let v = 0;
  for (let i = 0; i < 10000; i++) v = g.nextUint32();
  assert.equal(v, 4123659995);
  // std::mt19937 r(42); std::uniform_real_distribution<double> d(0, 1); d(r) x4, printed %.17g
  const r = new MT19937(42);
  assert.deepEqual([r.nextDouble(), r.nextDouble(), r.nextDouble(), r.nextDouble()], [
    0.79654298428784598,
    0.18343478789336848,
    0.77969099761266125,
    0.59685016158005655,
  ]);
});

Deno.test("greedy (temperature 0) is the argmax, ties to the lowest id", () => {
  const s = new Sampler({ ...OFF, temperature: 0 });
  assert.equal(s.sample(new Float32Array([0.1, 2, -1, 1.5])), 1);
  assert.equal(s.sample(new Float32Array([3, 1, 3, 3])), 0);
  assert.equal(s.sample(new Float32Array([-5, 7, 1, 7])), 1);
  for (let seed = 0; seed < 20; seed++) {
    const l = randomLogits(500, seed);
    const argmax = ranked(l)[0]!;
    // with the default filters too
    assert.equal(new Sampler({ temperature: 0, seed: 3 }).sample(l), argmax);
    assert.equal(s.sample(l), argmax);
  }
  // ties survive top-k in id order
  assert.equal(
    new Sampler({ ...OFF, temperature: 0, topK: 2 }).sample(new Float32Array([1, 4, 0, 4, 4])),
    1,
  );
});

Deno.test("top-k, top-p, min-p keep the f64 reference sets", () => {
  let checked = 0;
  for (let seed = 0; seed < 40; seed++) {
    const n = seed % 2 ? 64 : 3000; // 3000 exercises llama.cpp's partial-sort path of top-p (> 1024)
    const l = randomLogits(n, 100 + seed);
    for (const k of [-1, 0, 1, 5, 40, n, n + 10]) {
      const got = new Sampler({ ...OFF, topK: k }).candidates(l);
      assert.deepEqual(sorted(got.ids), refTopK(l, k), `top-k ${k}`);
      if (k > 0) {
        assert.deepEqual(
          Array.from(got.ids),
          ranked(l).slice(0, k),
          "top-k keeps them in rank order",
        );
      }
    }
    for (const p of [0, 0.1, 0.5, 0.9, 0.95, 0.999, 1]) {
      const want = refTopP(l, p);
      if (!want) continue;
      assert.deepEqual(
        sorted(new Sampler({ ...OFF, topP: p }).candidates(l).ids),
        want,
        `top-p ${p} seed ${seed}`,
      );
      checked++;
    }
    for (const p of [0, 0.01, 0.05, 0.2, 0.5, 1]) {
      const want = refMinP(l, p);
      if (!want) continue;
      assert.deepEqual(
        sorted(new Sampler({ ...OFF, minP: p }).candidates(l).ids),
        want,
        `min-p ${p}`,
      );
      checked++;
    }
    // the chain: top-k then top-p (renormalised over the k) then min-p
    const k = 40, p = 0.9, mp = 0.05;
    const afterK = refTopK(l, k);
    const sub = new Float32Array(afterK.map((i) => l[i]!));
    const afterP = refTopP(sub, p);
    if (afterP) {
      const sub2 = new Float32Array(afterP.map((i) => sub[i]!));
      const afterM = refMinP(sub2, mp);
      if (afterM) {
        const want = sorted(afterM.map((i) => afterK[afterP[i]!]!));
        const got = new Sampler({ ...OFF, topK: k, topP: p, minP: mp }).candidates(l);
        assert.deepEqual(sorted(got.ids), want, "chain");
      }
    }
  }
  assert.ok(checked > 350, `checked ${checked}`);
  // minKeep
  const l = new Float32Array([10, 0, -1, -2]);
  assert.deepEqual(sorted(new Sampler({ ...OFF, topP: 0.5, minKeep: 3 }).candidates(l).ids), [
    0,
    1,
    2,
  ]);
  assert.deepEqual(sorted(new Sampler({ ...OFF, minP: 0.5, minKeep: 2 }).candidates(l).ids), [
    0,
    1,
  ]);
});

Deno.test("temperature divides the logits", () => {
  const l = new Float32Array([1, -2, 3.5, 0]);
  for (const t of [0.5, 1, 2, 0.8]) {
    const c = new Sampler({ ...OFF, temperature: t }).candidates(l);
    assert.deepEqual(Array.from(c.ids), [0, 1, 2, 3]);
    assert.deepEqual(Array.from(c.logits), Array.from(l, (x) => Math.fround(x / t)));
  }
});

Deno.test("penalties: repeat divides positive and multiplies negative logits, presence and frequency subtract", () => {
  const l = new Float32Array([2, -2, 1, 0.5, 3]);
  const history = [0, 1, 1, 3, 3, 3, 9];
  const c = new Sampler({
    ...OFF,
    repeatPenalty: 2,
    presencePenalty: 0.25,
    frequencyPenalty: 0.5,
    penaltyLastN: 64,
  }).candidates(l, history);
  const f = Math.fround;
  assert.deepEqual(Array.from(c.logits), [
    f(2 / 2 - (1 * 0.5 + 0.25)),
    f(-2 * 2 - (2 * 0.5 + 0.25)),
    1, // not in the history
    f(0.5 / 2 - (3 * 0.5 + 0.25)),
    3,
  ]);
  // the window: the last 2 tokens are [3, 9] (9 is outside the vocabulary: ignored)
  const w = new Sampler({ ...OFF, repeatPenalty: 2, penaltyLastN: 2 }).candidates(l, history);
  assert.deepEqual(Array.from(w.logits), [2, -2, 1, 0.25, 3]);
  // accept() feeds the same window; reset() clears it; penaltyLastN 0 disables
  const s = new Sampler({ ...OFF, repeatPenalty: 2, penaltyLastN: 3 });
  for (const t of [4, 4, 0, 2]) s.accept(t);
  assert.deepEqual(Array.from(s.candidates(l).logits), [1, -2, 0.5, 0.5, 1.5]);
  s.reset();
  assert.deepEqual(Array.from(s.candidates(l).logits), Array.from(l));
  const off = new Sampler({ ...OFF, repeatPenalty: 2, penaltyLastN: 0 });
  off.accept(0);
  assert.deepEqual(Array.from(off.candidates(l, [0]).logits), Array.from(l));
  // -1: the whole history
  assert.equal(
    new Sampler({ ...OFF, repeatPenalty: 2, penaltyLastN: -1 }).candidates(l, [
      0,
      ...Array(500).fill(2),
    ]).logits[0],
    1,
  );
  // penalties run before top-k (llama.cpp's order): a penalised token can fall out
  const k = new Sampler({ ...OFF, topK: 1, repeatPenalty: 10, penaltyLastN: 64 }).candidates(l, [
    4,
  ]);
  assert.deepEqual(Array.from(k.ids), [0]);
  // logit bias: -Infinity bans
  assert.equal(new Sampler({ ...OFF, temperature: 0, logitBias: { 4: -Infinity } }).sample(l), 0);
});

Deno.test("seed: same seed same sequence, different seeds differ, reset() replays", () => {
  const l = randomLogits(1000, 7);
  const opts: SamplerOptions = { temperature: 1.5, topK: 0, topP: 1, minP: 0 };
  const run = (s: Sampler) => Array.from({ length: 200 }, () => s.sample(l));
  const a = new Sampler({ ...opts, seed: 1234 });
  const first = run(a);
  assert.deepEqual(run(new Sampler({ ...opts, seed: 1234 })), first);
  assert.notDeepEqual(run(new Sampler({ ...opts, seed: 1235 })), first);
  a.reset();
  assert.deepEqual(run(a), first);
  assert.equal(a.seed, 1234);
  // no seed: a random one, reported by .seed and replayable
  const r = createSampler(opts);
  const seq = run(r);
  assert.deepEqual(run(new Sampler({ ...opts, seed: r.seed })), seq);
  // the draw is llama.cpp's: the first token whose running sum reaches sum * rnd
  const l3 = new Float32Array([0, Math.log(2), Math.log(3)]); // probabilities 1/6, 2/6, 3/6
  const rnd = new MT19937(42).nextDouble(); // 0.7965...
  assert.ok(rnd > 0.5);
  assert.equal(new Sampler({ ...OFF, seed: 42 }).sample(l3), 2);
});

Deno.test("20,000 draws at temperature 1 follow softmax (chi-square, max abs diff)", () => {
  const l = new Float32Array([1, 2, 3, 0.5, -1, 2.5, 0, 1.7]);
  const probs = softmax64(l);
  const s = new Sampler({ ...OFF, seed: 2024 });
  const N = 20000;
  const counts = new Array(l.length).fill(0);
  for (let i = 0; i < N; i++) counts[s.sample(l)]++;
  let chi2 = 0, maxDiff = 0;
  for (let i = 0; i < l.length; i++) {
    chi2 += (counts[i] - N * probs[i]!) ** 2 / (N * probs[i]!);
    maxDiff = Math.max(maxDiff, Math.abs(counts[i] / N - probs[i]!));
  }
  // 7 degrees of freedom: P(chi2 > 24.32) = 0.001; max |freq - p| < 0.012 (> 4 sigma at p = 0.5)
  assert.ok(chi2 < 24.32, `chi2 ${chi2}`);
  assert.ok(maxDiff < 0.012, `max diff ${maxDiff}`);
  // with top-k 3 the draws follow the softmax of the 3 best
  const k = new Sampler({ ...OFF, topK: 3, seed: 5 });
  const sub = softmax64([3, 2.5, 2]);
  const c3 = new Map<number, number>();
  for (let i = 0; i < N; i++) {
    const t = k.sample(l);
    c3.set(t, (c3.get(t) ?? 0) + 1);
  }
  assert.deepEqual(sorted([...c3.keys()]), [1, 2, 5]);
  assert.ok(Math.abs(c3.get(2)! / N - sub[0]!) < 0.012);
  assert.ok(Math.abs(c3.get(5)! / N - sub[1]!) < 0.012);
});

Deno.test("StopChecker: stop strings across pieces, EOG tokens, ignoreEos", () => {
  const feed = (sc: StopChecker, pieces: [number, string][]) => {
    let out = "";
    for (const [id, p] of pieces) {
      const r = sc.push(id, p);
      out += r.text;
      if (r.stop) return { out, reason: r.reason, stopString: r.stopString };
    }
    return { out: out + sc.flush(), reason: undefined, stopString: undefined };
  };
  const opts = { eogTokens: [2, 7], stopStrings: ["\nUser:", "###"] };
  // a stop string split over three pieces; text before it released, the stop string not
  assert.deepEqual(
    feed(new StopChecker(opts), [[5, "Hello"], [6, " wor"], [8, "ld\nU"], [9, "se"], [
      10,
      "r: hi",
    ]]),
    {
      out: "Hello world",
      reason: "stop",
      stopString: "\nUser:",
    },
  );
  // held text is released once it can no longer start a stop string
  const sc = new StopChecker(opts);
  assert.deepEqual(sc.push(5, "a\nUs"), { text: "a", stop: false });
  assert.deepEqual(sc.push(5, "b"), { text: "\nUsb", stop: false });
  assert.deepEqual(sc.push(5, "#"), { text: "", stop: false });
  assert.deepEqual(sc.push(5, "#x"), { text: "##x", stop: false });
  // inside one piece, the earliest stop string wins
  assert.deepEqual(feed(new StopChecker(opts), [[5, "ab###c\nUser:"]]), {
    out: "ab",
    reason: "stop",
    stopString: "###",
  });
  // EOG: stops, its piece not released, held text released
  assert.deepEqual(feed(new StopChecker(opts), [[5, "x\nUse"], [7, "</s>"]]), {
    out: "x\nUse",
    reason: "eog",
    stopString: undefined,
  });
  // ignoreEos: EOG pieces are text
  assert.deepEqual(
    feed(new StopChecker({ ...opts, ignoreEos: true }), [[5, "a"], [2, "<eos>"], [5, "b"]]),
    {
      out: "a<eos>b",
      reason: undefined,
      stopString: undefined,
    },
  );
  // after a stop, nothing more
  const done = new StopChecker(opts);
  done.push(2, "");
  assert.equal(done.stopped, true);
  assert.deepEqual(done.push(5, "more"), { text: "", stop: true });
  done.reset();
  assert.deepEqual(done.push(5, "more"), { text: "more", stop: false });
});

Deno.test("bad options are ArgumentErrors naming the option and the value", () => {
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ temperature: -0.5 }, /temperature.*-0\.5/],
    [{ temperature: NaN }, /temperature.*NaN/],
    [{ topK: 2.5 }, /topK.*2\.5/],
    [{ topP: 1.5 }, /topP.*1\.5/],
    [{ topP: "0.9" }, /topP.*"0\.9"/],
    [{ minP: -0.1 }, /minP.*-0\.1/],
    [{ minKeep: -1 }, /minKeep.*-1/],
    [{ repeatPenalty: 0 }, /repeatPenalty.*0/],
    [{ presencePenalty: Infinity }, /presencePenalty.*Infinity/],
    [{ frequencyPenalty: NaN }, /frequencyPenalty.*NaN/],
    [{ penaltyLastN: -2 }, /penaltyLastN.*-2/],
    [{ seed: 2 ** 32 }, /seed.*4294967296/],
    [{ seed: -1 }, /seed.*-1/],
    [{ logitBias: { 3: NaN } }, /logitBias\[3\].*NaN/],
    [{ logitBias: { x: 1 } }, /logitBias.*x/],
    [{ top_k: 5 }, /top_k.*5/],
  ];
  for (const [o, re] of cases) {
    assert.throws(
      () => new Sampler(o as SamplerOptions),
      (e: unknown) => e instanceof ArgumentError && re.test(e.message),
    );
  }
  const s = new Sampler();
  assert.throws(() => s.sample(new Float32Array(0)), ArgumentError);
  assert.throws(() => s.sample([1, 2] as unknown as Float32Array), ArgumentError);
  assert.throws(() => s.accept(-1), /token.*-1/);
  assert.throws(() => new StopChecker({ stopStrings: [""] }), ArgumentError);
  assert.throws(() => new StopChecker({ eogTokens: [1.5] }), /eogTokens.*1\.5/);
});
