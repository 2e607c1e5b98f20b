/**
 * Token sampling over a vector of logits, with llama.cpp's default sampler chain and parameter
 * semantics (src/llama-sampler.cpp, common/sampling.cpp): logit bias → penalties → top-k →
 * (typical: not implemented, llama.cpp's default 1.0 is off) → top-p → min-p → temperature →
 * dist. The random draws come from an MT19937 generator and `uniform_real_distribution<double>`
 * as libstdc++ computes it, so with the same seed and the same logits the draws are those of
 * llama.cpp's `dist` sampler (see {@link Sampler} for where results can still differ).
 *
 * Also {@link StopChecker}: end-of-generation tokens and stop strings over streamed text pieces.
 * @module
 */

import { ArgumentError } from "../errors.ts";

/** Options of a {@link Sampler}. Defaults are llama.cpp's (common_params_sampling). */
export interface SamplerOptions {
  /** Divides the logits before the draw. 0 = greedy: the highest logit, ties to the lowest id. Default 0.8. */
  temperature?: number;
  /** Keep the k highest logits; k <= 0 = off. Integer. Default 40. */
  topK?: number;
  /** Keep the smallest set of most likely tokens whose probability sum is >= p; 1 = off. In [0, 1]. Default 0.95. */
  topP?: number;
  /** Keep tokens whose probability is >= minP times the highest one; 0 = off. In [0, 1]. Default 0.05. */
  minP?: number;
  /** top-p and min-p keep at least this many tokens. Integer >= 0. Default 0. */
  minKeep?: number;
  /** Divides positive logits and multiplies the others of tokens in the window; 1 = off. > 0. Default 1. */
  repeatPenalty?: number;
  /** Subtracted once from the logit of every token in the window; 0 = off. Default 0. */
  presencePenalty?: number;
  /** Subtracted from a token's logit times its count in the window; 0 = off. Default 0. */
  frequencyPenalty?: number;
  /** The window of penalties: the last n tokens; 0 = no penalties; -1 = the whole history. Default 64. */
  penaltyLastN?: number;
  /**
   * MT19937 seed, an integer in [0, 2^32 - 1]. Absent or 0xFFFFFFFF (llama.cpp's
   * LLAMA_DEFAULT_SEED) = a random seed, drawn again on every `reset()`, as llama.cpp does.
   */
  seed?: number;
  /** Added to the logits of these token ids before anything else (-Infinity bans a token). */
  logitBias?: Readonly<Record<number, number>>;
}

const DEFAULT_SEED = 0xffffffff;

const OPTION_NAMES = new Set([
  "temperature",
  "topK",
  "topP",
  "minP",
  "minKeep",
  "repeatPenalty",
  "presencePenalty",
  "frequencyPenalty",
  "penaltyLastN",
  "seed",
  "logitBias",
]);

function bad(name: string, value: unknown, expected: string): never {
  const shown = typeof value === "bigint"
    ? `${value}n`
    : typeof value === "string"
    ? JSON.stringify(value)
    : String(value);
  throw new ArgumentError(`Sampler option ${name} must be ${expected}, got ${shown}`);
}

function num(
  o: SamplerOptions,
  name: keyof SamplerOptions,
  dflt: number,
  ok: (v: number) => boolean,
  expected: string,
  integer = false,
): number {
  const v = (o as Record<string, unknown>)[name];
  if (v === undefined) return dflt;
  if (typeof v !== "number" || !Number.isFinite(v) || (integer && !Number.isInteger(v)) || !ok(v)) {
    bad(name, v, expected);
  }
  return v;
}

/**
 * MT19937 (std::mt19937), 32-bit outputs. With seed 5489 the 10000th output is 4123659995, as
 * the C++ standard requires.
 */
export class MT19937 {
  #mt = new Uint32Array(624);
  #i = 624;

  /** A generator seeded as `std::mt19937(seed)`. */
  constructor(seed = 5489) {
    this.seed(seed);
  }

  /** Reseeds as `std::mt19937::seed(seed)`. */
  seed(seed: number): void {
    const mt = this.#mt;
    mt[0] = seed >>> 0;
    for (let i = 1; i < 624; i++) {
      const p = mt[i - 1]! ^ (mt[i - 1]! >>> 30);
      mt[i] = (Math.imul(1812433253, p) + i) >>> 0;
    }
    this.#i = 624;
  }

  /** The next 32-bit output, an integer in [0, 2^32 - 1]. */
  nextUint32(): number {
    const mt = this.#mt;
    if (this.#i >= 624) {
      for (let k = 0; k < 624; k++) {
        const y = (mt[k]! & 0x80000000) | (mt[(k + 1) % 624]! & 0x7fffffff);
        mt[k] = mt[(k + 397) % 624]! ^ (y >>> 1) ^ ((y & 1) ? 0x9908b0df : 0);
      }
      this.#i = 0;
    }
    let y = mt[this.#i++]!;
    y ^= y >>> 11;
    y ^= (y << 7) & 0x9d2c5680;
    y ^= (y << 15) & 0xefc60000;
    y ^= y >>> 18;
    return y >>> 0;
  }

  /**
   * A double in [0, 1): `std::uniform_real_distribution<double>(0, 1)` over this generator as
   * libstdc++ computes it (generate_canonical with two 32-bit outputs: (a + b * 2^32) / 2^64).
   */
  nextDouble(): number {
    const a = this.nextUint32();
    const b = this.nextUint32();
    const r = (a + b * 4294967296) / 18446744073709551616;
    return r >= 1 ? 1 - 2 ** -53 : r;
  }
}

/** The candidate list of one sampling step (llama_token_data_array). */
interface Candidates {
  ids: Int32Array;
  logit: Float32Array;
  p: Float32Array;
  size: number;
  sorted: boolean;
}

/** true when candidate a ranks before b: higher logit, then lower id. */
function before(c: Candidates, a: number, b: number): boolean {
  const la = c.logit[a]!, lb = c.logit[b]!;
  return la > lb || (la === lb && c.ids[a]! < c.ids[b]!);
}

/** Positions of the m best candidates in rank order (heap selection when m is small). */
function bestPositions(c: Candidates, m: number): Uint32Array {
  const n = c.size;
  if (m * 8 >= n) {
    const pos = new Uint32Array(n);
    for (let i = 0; i < n; i++) pos[i] = i;
    const { logit, ids } = c;
    pos.sort((
      a,
      b,
    ) => (logit[a]! > logit[b]! ? -1 : logit[a]! < logit[b]! ? 1 : ids[a]! - ids[b]!));
    return pos.subarray(0, m);
  }
  // min-heap (worst at the root) of the m best seen so far
  const heap = new Uint32Array(m);
  let size = 0;
  const worse = (a: number, b: number) => before(c, b, a);
  const down = (i: number) => {
    for (;;) {
      const l = 2 * i + 1, r = l + 1;
      let w = i;
      if (l < size && worse(heap[l]!, heap[w]!)) w = l;
      if (r < size && worse(heap[r]!, heap[w]!)) w = r;
      if (w === i) return;
      const t = heap[i]!;
      heap[i] = heap[w]!;
      heap[w] = t;
      i = w;
    }
  };
  for (let i = 0; i < n; i++) {
    if (size < m) {
      heap[size] = i;
      let j = size++;
      while (j > 0) {
        const parent = (j - 1) >> 1;
        if (!worse(heap[j]!, heap[parent]!)) break;
        const t = heap[j]!;
        heap[j] = heap[parent]!;
        heap[parent] = t;
        j = parent;
      }
    } else if (m > 0 && before(c, i, heap[0]!)) {
      heap[0] = i;
      down(0);
    }
  }
  return heap.sort((a, b) => (before(c, a, b) ? -1 : before(c, b, a) ? 1 : 0));
}

/** Moves the candidates at `pos` (rank order) to the front and keeps only them. */
function keep(c: Candidates, pos: Uint32Array): void {
  const m = pos.length;
  const ids = new Int32Array(m), logit = new Float32Array(m), p = new Float32Array(m);
  for (let i = 0; i < m; i++) {
    const j = pos[i]!;
    ids[i] = c.ids[j]!;
    logit[i] = c.logit[j]!;
    p[i] = c.p[j]!;
  }
  c.ids.set(ids);
  c.logit.set(logit);
  c.p.set(p);
  c.size = m;
  c.sorted = true;
}

function maxLogit(c: Candidates): number {
  if (c.sorted) return c.logit[0]!;
  let m = c.logit[0]!;
  for (let i = 1; i < c.size; i++) if (c.logit[i]! > m) m = c.logit[i]!;
  return m;
}

/** llama_sampler_softmax_impl(cur_p, false): float32 probabilities in the current order. */
function softmax(c: Candidates): void {
  const maxL = maxLogit(c);
  let sum = 0;
  for (let i = 0; i < c.size; i++) {
    const p = Math.fround(Math.exp(c.logit[i]! - maxL));
    c.p[i] = p;
    sum = Math.fround(sum + p);
  }
  for (let i = 0; i < c.size; i++) c.p[i] = c.p[i]! / sum;
}

function topK(c: Candidates, k: number): void {
  if (k <= 0) return;
  k = Math.min(k, c.size);
  if (!c.sorted) keep(c, bestPositions(c, k));
  c.size = k;
}

function topP(c: Candidates, p: number, minKeep: number): void {
  if (p >= 1) return;
  softmax(c);
  let pos: Uint32Array | null = null;
  if (!c.sorted) pos = bestPositions(c, c.size > 1024 ? Math.min(256, c.size) : c.size);
  let cum = 0;
  let last = c.size;
  for (let i = 0; i < c.size; i++) {
    cum = Math.fround(cum + c.p[pos ? pos[i]! : i]!);
    if (cum >= p && i + 1 >= minKeep) {
      last = i + 1;
      break;
    }
    if (pos && i === pos.length - 1 && pos.length < c.size) pos = bestPositions(c, c.size);
  }
  if (pos) keep(c, pos.subarray(0, last));
  c.size = last;
}

function minP(c: Candidates, p: number, minKeep: number): void {
  if (p <= 0 || c.size === 0) return;
  const logP = Math.fround(Math.log(p));
  if (!c.sorted) {
    // llama.cpp's unsorted path: filter in place, keeping the order
    let maxL = -3.4028234663852886e38;
    for (let i = 0; i < c.size; i++) if (c.logit[i]! > maxL) maxL = c.logit[i]!;
    const minL = Math.fround(maxL + logP);
    let n = 0;
    for (let i = 0; i < c.size; i++) if (c.logit[i]! >= minL) n++;
    if (n > 0 && n >= minKeep) {
      n = 0;
      for (let i = 0; i < c.size; i++) {
        if (c.logit[i]! >= minL) {
          c.ids[n] = c.ids[i]!;
          c.logit[n] = c.logit[i]!;
          c.p[n] = c.p[i]!;
          n++;
        }
      }
      c.size = n;
      return;
    }
    // too few passed: llama.cpp sorts and uses the sorted path
    keep(c, bestPositions(c, c.size));
  }
  const minL = Math.fround(c.logit[0]! + logP);
  let i = 1;
  for (; i < c.size; i++) if (c.logit[i]! < minL && i >= minKeep) break;
  c.size = i;
}

/**
 * Samples token ids from logits with llama.cpp's default chain (common_sampler without
 * grammar, DRY, XTC, typical, top-n-sigma or mirostat, all off by default there):
 * logit bias → penalties → top-k → top-p → min-p → temperature → dist.
 *
 * `sample()` does not add the token to the history (as llama.cpp's common_sampler_sample);
 * call `accept(token)` for every token that enters the context, prompt tokens included if
 * they should count for the penalties.
 *
 * Against llama.cpp: the same parameter semantics and the same float32 arithmetic, and the same
 * random draws for the same seed (MT19937 + libstdc++'s uniform_real_distribution<double>);
 * equal logits are ranked by lower id, where llama.cpp's std::partial_sort leaves their order
 * unspecified, so with ties in the kept set the picked token may differ. `Math.exp` rounded to
 * float32 stands for `expf` (both are within an ulp). Greedy (temperature 0) returns the
 * first highest logit directly; llama.cpp's dist still draws once then, and so does this one,
 * to keep the generator in step.
 *
 * @example
 * ```ts
 * import { Sampler } from "../../mod.ts";
 * const sampler = new Sampler({ temperature: 0.7, topK: 40, topP: 0.9, seed: 42 });
 * const logits = new Float32Array([1, 3, 2, 0.5]);
 * const token = sampler.sample(logits);
 * sampler.accept(token);
 * ```
 */
export class Sampler {
  /** The options in effect, defaults filled in. */
  readonly options: Readonly<Required<Omit<SamplerOptions, "seed" | "logitBias">>> & {
    readonly seed: number;
    readonly logitBias: ReadonlyMap<number, number>;
  };
  #rng = new MT19937();
  #seedCur = 0;
  #history: number[] = [];
  #c: Candidates | null = null;

  /** A sampler; throws ArgumentError naming a bad option and its value. */
  constructor(options: SamplerOptions = {}) {
    if (options === null || typeof options !== "object") bad("options", options, "an object");
    for (const key of Object.keys(options)) {
      if (!OPTION_NAMES.has(key)) {
        bad(key, (options as Record<string, unknown>)[key], "a known option (not a typo)");
      }
    }
    const o = options;
    const temperature = num(o, "temperature", 0.8, (v) => v >= 0, "a finite number >= 0");
    const topKv = num(o, "topK", 40, () => true, "an integer (<= 0 = off)", true);
    const topPv = num(o, "topP", 0.95, (v) => v >= 0 && v <= 1, "a number in [0, 1]");
    const minPv = num(o, "minP", 0.05, (v) => v >= 0 && v <= 1, "a number in [0, 1]");
    const minKeep = num(o, "minKeep", 0, (v) => v >= 0, "an integer >= 0", true);
    const repeatPenalty = num(o, "repeatPenalty", 1, (v) => v > 0, "a finite number > 0");
    const presencePenalty = num(o, "presencePenalty", 0, () => true, "a finite number");
    const frequencyPenalty = num(o, "frequencyPenalty", 0, () => true, "a finite number");
    const penaltyLastN = num(o, "penaltyLastN", 64, (v) => v >= -1, "an integer >= -1", true);
    const seed = num(
      o,
      "seed",
      DEFAULT_SEED,
      (v) => v >= 0 && v <= 0xffffffff,
      "an integer in [0, 2^32 - 1]",
      true,
    );
    const logitBias = new Map<number, number>();
    if (o.logitBias !== undefined) {
      if (o.logitBias === null || typeof o.logitBias !== "object") {
        bad("logitBias", o.logitBias, "an object of token id → bias");
      }
      for (const [k, v] of Object.entries(o.logitBias)) {
        const id = Number(k);
        if (!Number.isInteger(id) || id < 0) {
          bad("logitBias", k, "keyed by token ids (integers >= 0)");
        }
        if (typeof v !== "number" || Number.isNaN(v) || v === Infinity) {
          bad(`logitBias[${k}]`, v, "a number or -Infinity");
        }
        logitBias.set(id, v);
      }
    }
    this.options = {
      temperature,
      topK: topKv,
      topP: topPv,
      minP: minPv,
      minKeep,
      repeatPenalty,
      presencePenalty,
      frequencyPenalty,
      penaltyLastN,
      seed,
      logitBias,
    };
    this.reset();
  }

  /** The seed in use (the drawn one when the options asked for a random seed). */
  get seed(): number {
    return this.#seedCur;
  }

  /** The accepted tokens that the penalties can still see (at most penaltyLastN unless -1). */
  get history(): readonly number[] {
    return this.#history;
  }

  /** Adds a token to the history (the penalties' window). */
  accept(token: number): void {
    if (!Number.isInteger(token) || token < 0) {
      throw new ArgumentError(
        `Sampler.accept: token must be an integer >= 0, got ${String(token)}`,
      );
    }
    const n = this.options.penaltyLastN;
    if (n === 0) return;
    this.#history.push(token);
    if (n > 0 && this.#history.length > 2 * n + 64) {
      this.#history.splice(0, this.#history.length - n);
    }
  }

  /** Clears the history and reseeds the generator (a fresh random seed if none was given). */
  reset(): void {
    this.#history = [];
    const s = this.options.seed;
    this.#seedCur = s === DEFAULT_SEED ? crypto.getRandomValues(new Uint32Array(1))[0]! : s;
    this.#rng.seed(this.#seedCur);
  }

  /**
   * The next token id for these logits (one per vocabulary id). `history`, when given, is the
   * token window for the penalties instead of the accepted tokens (its last penaltyLastN).
   */
  sample(logits: Float32Array, history?: readonly number[]): number {
    const c = this.#prepare(logits, history);
    if (this.options.temperature <= 0) {
      this.#rng.nextDouble();
      return c.ids[0]!;
    }
    return this.#dist(c);
  }

  /**
   * The candidates that the draw would choose from for these logits, in the chain's order,
   * with their logits after penalties and temperature (greedy: only the chosen token). Does
   * not draw; for inspection and tests.
   */
  candidates(
    logits: Float32Array,
    history?: readonly number[],
  ): { ids: Int32Array; logits: Float32Array } {
    const c = this.#prepare(logits, history);
    return { ids: c.ids.slice(0, c.size), logits: c.logit.slice(0, c.size) };
  }

  #prepare(logits: Float32Array, history?: readonly number[]): Candidates {
    if (!(logits instanceof Float32Array)) {
      throw new ArgumentError(
        `Sampler.sample: logits must be a Float32Array, got ${
          Object.prototype.toString.call(logits)
        }`,
      );
    }
    const n = logits.length;
    if (n === 0) throw new ArgumentError("Sampler.sample: logits must not be empty, got length 0");
    const o = this.options;
    let c = this.#c;
    if (!c || c.ids.length !== n) {
      c = this.#c = {
        ids: new Int32Array(n),
        logit: new Float32Array(n),
        p: new Float32Array(n),
        size: n,
        sorted: false,
      };
    }
    for (let i = 0; i < n; i++) c.ids[i] = i;
    c.logit.set(logits);
    c.size = n;
    c.sorted = false;

    for (const [id, b] of o.logitBias) if (id < n) c.logit[id] = c.logit[id]! + b;

    this.#penalties(c, history ?? this.#history);
    topK(c, o.topK);
    topP(c, o.topP, o.minKeep);
    minP(c, o.minP, o.minKeep);

    if (o.temperature <= 0) {
      // llama_sampler_temp_impl: the first highest logit in the current order
      let best = 0;
      for (let i = 1; i < c.size; i++) if (c.logit[i]! > c.logit[best]!) best = i;
      c.ids[0] = c.ids[best]!;
      c.logit[0] = c.logit[best]!;
      c.size = 1;
      return c;
    }
    for (let i = 0; i < c.size; i++) c.logit[i] = c.logit[i]! / o.temperature;
    return c;
  }

  #penalties(c: Candidates, history: readonly number[]): void {
    const o = this.options;
    const lastN = o.penaltyLastN;
    if (
      lastN === 0 || (o.repeatPenalty === 1 && o.frequencyPenalty === 0 && o.presencePenalty === 0)
    ) return;
    const start = lastN < 0 ? 0 : Math.max(0, history.length - lastN);
    const counts = new Map<number, number>();
    for (let i = start; i < history.length; i++) {
      const t = history[i]!;
      if (Number.isInteger(t) && t >= 0 && t < c.size) counts.set(t, (counts.get(t) ?? 0) + 1);
    }
    const f = Math.fround(o.frequencyPenalty),
      pr = Math.fround(o.presencePenalty),
      rp = Math.fround(o.repeatPenalty);
    for (const [t, count] of counts) {
      // ids are still in vocabulary order here (nothing has sorted yet)
      let l = c.logit[t]!;
      l = Math.fround(l <= 0 ? l * rp : l / rp);
      c.logit[t] = l - Math.fround(Math.fround(count * f) + pr);
    }
    c.sorted = false;
  }

  /** llama_sampler_dist_apply. */
  #dist(c: Candidates): number {
    if (c.size === 1) {
      this.#rng.nextDouble();
      return c.ids[0]!;
    }
    const maxL = maxLogit(c);
    let sumCum = 0;
    for (let i = 0; i < c.size; i++) {
      const p = Math.fround(Math.exp(c.logit[i]! - maxL));
      c.p[i] = p;
      sumCum += p;
    }
    const rnd = this.#rng.nextDouble();
    const target = sumCum * rnd;
    let run = 0;
    for (let i = 0; i < c.size; i++) {
      run += c.p[i]!;
      if (run >= target) return c.ids[i]!;
    }
    return c.ids[c.size - 1]!;
  }
}

/** A {@link Sampler} with these options. */
export function createSampler(options: SamplerOptions = {}): Sampler {
  return new Sampler(options);
}

/** Options of a {@link StopChecker}. */
export interface StopCheckerOptions {
  /** End-of-generation token ids (the vocabulary's EOS/EOT/EOG tokens). */
  eogTokens?: Iterable<number>;
  /** Strings that end the generation; the text from the stop string on is not released. */
  stopStrings?: readonly string[];
  /** Do not stop on end-of-generation tokens (their pieces are then ordinary text). Default false. */
  ignoreEos?: boolean;
}

/** What {@link StopChecker.push} says about one token. */
export interface StopResult {
  /** Text that can be shown now (held-back text that might start a stop string is not in it). */
  text: string;
  /** true when generation should stop. */
  stop: boolean;
  /** Why it stopped: an end-of-generation token or a stop string. */
  reason?: "eog" | "stop";
  /** The stop string found, when reason is "stop". */
  stopString?: string;
}

/**
 * Decides when to stop on streamed token pieces. A stop string may span pieces: text that could
 * be the start of a stop string is held back until it is known not to be; text before a stop
 * string is released, the stop string and what follows it are not. An end-of-generation token
 * stops (unless `ignoreEos`) and its piece is not released; text held back is released then.
 *
 * @example
 * ```ts
 * import { StopChecker } from "../../mod.ts";
 * const stop = new StopChecker({ eogTokens: [2], stopStrings: ["\nUser:"] });
 * let out = "";
 * for (const [id, piece] of [[5, "Hi"], [6, "\nUs"], [7, "er: more"]] as const) {
 *   const r = stop.push(id, piece);
 *   out += r.text;
 *   if (r.stop) break;
 * }
 * // out === "Hi"
 * ```
 */
export class StopChecker {
  #eog: Set<number>;
  #stops: string[];
  #ignoreEos: boolean;
  #pending = "";
  #stopped = false;

  /** A checker; throws ArgumentError on an empty stop string or a bad token id. */
  constructor(options: StopCheckerOptions = {}) {
    this.#eog = new Set();
    for (const t of options.eogTokens ?? []) {
      if (!Number.isInteger(t) || t < 0) {
        throw new ArgumentError(
          `StopChecker option eogTokens must hold integers >= 0, got ${String(t)}`,
        );
      }
      this.#eog.add(t);
    }
    this.#stops = [];
    for (const s of options.stopStrings ?? []) {
      if (typeof s !== "string" || s.length === 0) {
        throw new ArgumentError(
          `StopChecker option stopStrings must hold non-empty strings, got ${JSON.stringify(s)}`,
        );
      }
      this.#stops.push(s);
    }
    this.#ignoreEos = options.ignoreEos ?? false;
  }

  /** true once a stop was reported. */
  get stopped(): boolean {
    return this.#stopped;
  }

  /** Feeds one generated token and its text piece. */
  push(token: number, piece: string): StopResult {
    if (this.#stopped) return { text: "", stop: true };
    if (!this.#ignoreEos && this.#eog.has(token)) {
      this.#stopped = true;
      const text = this.#pending;
      this.#pending = "";
      return { text, stop: true, reason: "eog" };
    }
    const buf = this.#pending + piece;
    let at = -1, which = "";
    for (const s of this.#stops) {
      const i = buf.indexOf(s);
      if (i >= 0 && (at < 0 || i < at)) {
        at = i;
        which = s;
      }
    }
    if (at >= 0) {
      this.#stopped = true;
      this.#pending = "";
      return { text: buf.slice(0, at), stop: true, reason: "stop", stopString: which };
    }
    // hold back the longest suffix that is a proper prefix of a stop string
    let hold = 0;
    for (const s of this.#stops) {
      for (let k = Math.min(s.length - 1, buf.length); k > hold; k--) {
        if (buf.endsWith(s.slice(0, k))) {
          hold = k;
          break;
        }
      }
    }
    this.#pending = buf.slice(buf.length - hold);
    return { text: buf.slice(0, buf.length - hold), stop: false };
  }

  /** Text still held back (call when generation ends for another reason, as a length limit). */
  flush(): string {
    const text = this.#pending;
    this.#pending = "";
    return text;
  }

  /** Forgets held text and the stop, for a new generation. */
  reset(): void {
    this.#pending = "";
    this.#stopped = false;
  }
}
