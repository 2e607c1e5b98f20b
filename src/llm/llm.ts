/**
 * A llama-family language model loaded from a GGUF file: its weights on a backend, its KV
 * cache, tokenizer and chat template, and the plans that evaluate tokens. `eval` runs tokens
 * through the model at the next positions of the cache; `generate` streams text.
 * @module
 */

import type { Backend } from "../backend/backend.ts";
import { CpuBackend } from "../backend/cpu/backend.ts";
import { WebGpuBackend } from "../backend/webgpu/backend.ts";
import { RpcBackend } from "../backend/rpc/backend.ts";
import { ArgumentError, GraftError } from "../errors.ts";
import { GGUFFile, type LoadedWeights } from "../gguf/file.ts";
import { type LlamaHParams, readLlamaHParams, ropeFactorsName } from "./hparams.ts";
import { KvCache, type KvCacheType } from "./kv_cache.ts";
import { type LlamaGraphOptions, type LlamaWeights, llamaWeights } from "./llama_graph.ts";
import { type LayerSplit, type LayerStage, PlanCache } from "./plan_cache.ts";
import { type TokenizeOptions, Tokenizer } from "./tokenizer.ts";
import { Sampler, type SamplerOptions, StopChecker } from "./sampling.ts";
import { type ChatMessage, ChatTemplate } from "./chat_template.ts";
import { metadataValue } from "../gguf/reader.ts";
import type { MemoryPlan } from "../alloc/planner.ts";

/** Out of context: the cache holds `nCtx` positions and the tokens would not fit. */
export class ContextFullError extends GraftError {
  /** The error class name. */
  override name = "ContextFullError";
}

/** Options of {@link LLM.load}. */
export interface LLMLoadOptions {
  /** `"cpu"` (default) or `"webgpu"`; or a backend of your own (not disposed with the model). */
  readonly backend?: "cpu" | "webgpu" | Backend;
  /** CPU threads (default: the CPU backend's default). */
  readonly threads?: number;
  /**
   * With the CPU backend: run the last `gpuLayers` blocks and the output on WebGPU (llama.cpp's
   * `-ngl`), the rest on the CPU, through the scheduler; their weights and KV cache live there.
   * Default 0.
   */
  readonly gpuLayers?: number;
  /** The WebGPU backend for `gpuLayers` (default: one the model makes and disposes). */
  readonly gpuBackend?: Backend;
  /**
   * RPC servers (llama.cpp's `--rpc host:port,...`), as "host:port" strings (connected, and
   * disconnected with the model) or backends of your own: every block and the output run on
   * them, in order, each taking a share of the blocks in proportion to its free memory
   * (GET_DEVICE_MEMORY). With several, the embedding and the graph's inputs stay on the local
   * backend, as llama.cpp keeps the token embedding on the CPU; with one, the whole model runs
   * on it (the embedding too, and the inputs are written there), as with `backend` set to
   * that server, so no local backend is used. Not with `gpuLayers`.
   */
  readonly rpc?: readonly (string | Backend)[];
  /**
   * On RPC servers, store each block's q, k and v projections as one matrix, and its gate and
   * up projections as another, so that a decoding step is two matrix products a block fewer
   * on the server, with the same logits bit for bit (default true). False sends llama.cpp's
   * graph shape.
   */
  readonly fuseProjections?: boolean;
  /** Milliseconds one RPC command may take (default: RpcBackend's). */
  readonly rpcTimeoutMs?: number;
  /** Context size: positions the KV cache holds (default min(4096, the trained context)). */
  readonly nCtx?: number;
  /** Most tokens evaluated in one graph; longer inputs go in several (default 256). */
  readonly nBatch?: number;
  /** KV cache element type (default `"f16"`, as llama.cpp's default). */
  readonly cacheType?: KvCacheType;
  /**
   * Attention reads the cache in buckets of this many positions (default 256, as llama.cpp
   * pads its KV length): one plan per bucket, the positions past the filled ones masked.
   */
  readonly kvBucket?: number;
  /**
   * `"ggml"` (default): every matrix product computes as ggml's CPU backend does, so on the CPU
   * the logits are llama.cpp's bit for bit (x86, same SIMD level; `tests/llm_test.ts`).
   * `"fast"`: prompts of 20+ tokens multiply quantized weights in Graft's f32 GEMM instead,
   * about twice as fast and nearer the exact product, but not llama.cpp's bits.
   */
  readonly arithmetic?: "ggml" | "fast";
  /**
   * With `arithmetic: "ggml"`, multiply q4_0 and q4_K weights whose row count is a multiple of 8
   * in the summation order of llama.cpp's repacked CPU kernels (its CPU_REPACK buffer type: what
   * llama.cpp does by default on x86 CPUs with AVX2 and without AMX), so that Q4_0 and Q4_K_M
   * models give a default llama.cpp run's logits bit for bit (`tests/llm_repack_test.ts`).
   * Default true; false gives llama.cpp's `--no-repack` instead. Other weight types, and models
   * without such weights (SmolLM2 Q4_1), compute the same either way.
   */
  readonly repack?: boolean;
  /**
   * Flash attention (llama.cpp's `-fa on`): each block's attention is one fused
   * `flashAttnExt` that never holds the `[nKv, nTokens, nHead]` scores, and the V cache stores
   * a position's values as a row, as the keys. Default false: llama.cpp's non-flash graph, whose
   * logits `arithmetic: "ggml"` gives bit for bit; the fused kernel sums in its own order (in f32
   * throughout), so its logits are near those, not equal (`tests/llm_test.ts` states how near).
   */
  readonly flashAttn?: boolean;
  /** Map the file (CPU default) or copy the weights into backend buffers. */
  readonly mmap?: boolean;
  /** Loading progress, bytes of weights done of the total. */
  readonly onProgress?: (done: number, total: number) => void;
}

/** Options of {@link LLM.eval}. */
export interface EvalOptions {
  /** Return the logits of every token evaluated (`nVocab` per token, in order), not the last only. */
  readonly allLogits?: boolean;
}

/** Options of {@link LLM.generate}. */
export interface GenerateOptions extends SamplerOptions {
  /** Most tokens to generate (default: until an end-of-generation token or the context's end). */
  readonly maxTokens?: number;
  /** Keep going past end-of-generation tokens (llama.cpp's `--ignore-eos`). */
  readonly ignoreEos?: boolean;
  /** Strings that end the generation (not included in the text). */
  readonly stop?: readonly string[];
  /**
   * Keep the cache (default true): a prompt that starts with the tokens already evaluated only
   * evaluates the rest, as a chat's turns do. false starts from an empty cache.
   */
  readonly reuseCache?: boolean;
  /** Tokenize a string prompt with special tokens parsed (default true, as llama.cpp's CLI). */
  readonly parseSpecial?: boolean;
  /** Called with each generated token id, before its text is yielded. */
  readonly onToken?: (id: number) => void;
}

/** Why {@link LLM.generate} stopped, and counts (`llm.lastGeneration`). */
export interface GenerationStats {
  /** Tokens in the prompt. */
  readonly promptTokens: number;
  /** Prompt tokens evaluated (fewer than promptTokens when the cache already held a prefix). */
  readonly promptEvaluated: number;
  /** Tokens generated (an end-of-generation token that stopped it included). */
  readonly generatedTokens: number;
  /** The generated ids. */
  readonly ids: readonly number[];
  /** An end-of-generation token, a stop string, maxTokens, or the end of the context. */
  readonly stopReason: "eog" | "stop" | "length" | "context";
  /** Milliseconds evaluating the prompt. */
  readonly promptMs: number;
  /** Milliseconds generating (sampling and one-token evaluations). */
  readonly generateMs: number;
}

/** llama.cpp's fallback template for a model without one. */
const CHATML = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + " +
  "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}" +
  "{{ '<|im_start|>assistant\\n' }}{% endif %}";

/** Control tokens that end a turn, by text, as llama.cpp's vocabulary collects them. */
const EOG_TEXTS = [
  "<|eot_id|>",
  "<|im_end|>",
  "<|end|>",
  "<end_of_turn>",
  "<|endoftext|>",
  "<|eom_id|>",
  "<EOT>",
  "_<EOT>",
  "<｜end▁of▁sentence｜>",
];

/**
 * A loaded model.
 *
 * @example
 * ```ts
 * import { LLM } from "../../mod.ts";
 * // The SmolLM2 GGUF `deno task model:fetch` caches (any llama-family GGUF works the same way).
 * const cache = Deno.env.get("GRAFT_MODEL_CACHE") ?? `${Deno.env.get("HOME")}/.cache/graft/models`;
 * const path = `${cache}/SmolLM2-135M-Instruct.Q4_1.gguf`;
 * using llm = await LLM.load(path, { threads: 2 });
 * const prompt = "The capital of France is";
 * for await (const text of llm.generate(prompt, { maxTokens: 4, temperature: 0 })) {
 *   Deno.stdout.writeSync(new TextEncoder().encode(text));
 * }
 * ```
 */
export class LLM implements Disposable {
  /** The hyperparameters. */
  readonly hparams: LlamaHParams;

  /** The backend the model runs on. */
  readonly backend: Backend;
  /** The GGUF file's header (metadata, tensor infos). */
  readonly file: GGUFFile;
  /** Positions the cache holds. */
  readonly nCtx: number;

  /** Counts of the last {@link generate}. */
  lastGeneration: GenerationStats | null = null;
  /** The layer split between the CPU and WebGPU (`gpuLayers`), or null. */
  readonly split: LayerSplit | null;

  readonly #owned: readonly Backend[];
  readonly #weights: readonly LoadedWeights[];
  readonly #cache: KvCache;
  readonly #plans: PlanCache;
  readonly #nBatch: number;
  #history: number[] = [];
  #tokenizer: Tokenizer | null = null;
  #eog: ReadonlySet<number> | null = null;
  #template: ChatTemplate | null = null;
  #logits: Float32Array | null = null;
  #disposed = false;
  #busy = false;

  private constructor(init: {
    file: GGUFFile;
    backend: Backend;
    owned: readonly Backend[];
    hparams: LlamaHParams;
    weights: readonly LoadedWeights[];
    model: LlamaWeights;
    cache: KvCache;
    nBatch: number;
    kvBucket: number;
    split: LayerSplit | null;
    graph: LlamaGraphOptions;
  }) {
    this.file = init.file;
    this.backend = init.backend;
    this.#owned = init.owned;
    this.hparams = init.hparams;
    this.#weights = init.weights;
    this.#cache = init.cache;
    this.nCtx = init.cache.nCtx;
    this.#nBatch = init.nBatch;
    this.split = init.split;
    this.#plans = new PlanCache(
      init.backend,
      init.hparams,
      init.model,
      init.cache,
      init.kvBucket,
      init.split,
      init.graph,
    );
  }

  /**
   * The tokenizer from the file, built on first use (its vocabulary and merges take tens of
   * megabytes of JS heap that evaluating token ids does not need).
   */
  get tokenizer(): Tokenizer {
    this.#tokenizer ??= Tokenizer.fromGGUF(this.file);
    return this.#tokenizer;
  }

  /** End-of-generation token ids: EOS and the control tokens that end a turn, as llama.cpp's. */
  get eogTokens(): ReadonlySet<number> {
    if (!this.#eog) {
      const eog = new Set<number>();
      if (this.tokenizer.eosId !== undefined) eog.add(this.tokenizer.eosId);
      for (const text of EOG_TEXTS) {
        const id = this.tokenizer.tokenId(text);
        if (id !== undefined) eog.add(id);
      }
      this.#eog = eog;
    }
    return this.#eog;
  }

  /**
   * Loads a GGUF model; a file Graft cannot run is a ModelError (or GGUFError) saying why. An
   * open {@link GGUFFile} (`GGUFFile.fromBytes` where there is no file system, as in a browser)
   * is taken over: the model closes it.
   */
  static async load(path: string | URL | GGUFFile, options: LLMLoadOptions = {}): Promise<LLM> {
    const file = path instanceof GGUFFile ? path : GGUFFile.open(path);
    const owned: Backend[] = [];
    const weights: LoadedWeights[] = [];
    try {
      const hparams = readLlamaHParams(file.header);
      const nCtx = positiveOption("nCtx", options.nCtx, Math.min(4096, hparams.nCtxTrain));
      const nBatch = positiveOption("nBatch", options.nBatch, 256);
      const kvBucket = positiveOption("kvBucket", options.kvBucket, 256);
      const gpuLayers = options.gpuLayers ?? 0;
      if (!Number.isInteger(gpuLayers) || gpuLayers < 0) {
        throw new ArgumentError(`LLM.load: gpuLayers must be an integer >= 0, got ${gpuLayers}`);
      }
      const arithmetic = options.arithmetic ?? "ggml";
      if (arithmetic !== "ggml" && arithmetic !== "fast") {
        throw new ArgumentError(
          `LLM.load: arithmetic must be "ggml" or "fast", got ${String(arithmetic)}`,
        );
      }
      const repack = options.repack ?? true;
      if (typeof repack !== "boolean") {
        throw new ArgumentError(`LLM.load: repack must be a boolean, got ${String(repack)}`);
      }
      const flashAttn = options.flashAttn ?? false;
      if (typeof flashAttn !== "boolean") {
        throw new ArgumentError(`LLM.load: flashAttn must be a boolean, got ${String(flashAttn)}`);
      }
      const cacheType = options.cacheType ?? "f16";
      if (cacheType !== "f16" && cacheType !== "f32") {
        throw new ArgumentError(`LLM.load: cacheType must be "f16" or "f32", got ${cacheType}`);
      }
      const choice = options.backend ?? "cpu";
      let backend: Backend;
      if (choice === "cpu") {
        backend = new CpuBackend(options.threads !== undefined ? { threads: options.threads } : {});
        owned.push(backend);
      } else if (choice === "webgpu") {
        backend = await WebGpuBackend.create();
        owned.push(backend);
      } else if (typeof choice === "object" && choice !== null && "graphPlanCreate" in choice) {
        backend = choice;
      } else {
        throw new ArgumentError(
          `LLM.load: backend must be "cpu", "webgpu" or a Backend, got ${String(choice)}`,
        );
      }
      const mmap = options.mmap !== undefined ? { mmap: options.mmap } : {};
      const progress = options.onProgress ? { onProgress: options.onProgress } : {};
      let stages: LayerStage[] = [];
      if (gpuLayers > 0 && choice !== "webgpu") {
        if (options.rpc && options.rpc.length > 0) {
          throw new ArgumentError("LLM.load: give gpuLayers or rpc, not both");
        }
        let second = options.gpuBackend;
        if (!second) {
          second = await WebGpuBackend.create();
          owned.push(second);
        }
        stages = [{ backend: second, from: Math.max(0, hparams.nLayer - gpuLayers) }];
      } else if (options.rpc && options.rpc.length > 0) {
        stages = await rpcStages(options.rpc, hparams.nLayer, owned, options.rpcTimeoutMs);
        if (stages.length === 1) {
          // One server takes every block and the output: the whole model runs there, the
          // embedding too (a tied output keeps a copy there anyway), and the inputs are written
          // straight to it. A token is then one compute and one read, with no local split
          // to compute and no copies across (ggml's scheduler would copy the inputs over).
          // A local backend the model made (CPU or WebGPU) has nothing to run: it goes.
          const made = owned.indexOf(backend);
          if (made >= 0) {
            owned.splice(made, 1);
            backend.dispose();
          }
          backend = stages[0]!.backend;
          stages = [];
        }
      }
      let split: LayerSplit | null = null;
      let model: LlamaWeights;
      const factorsName = ropeFactorsName(hparams, nCtx);
      if (stages.length > 0) {
        split = {
          first: backend,
          second: stages[0]!.backend,
          from: stages[0]!.from,
          ...(stages.length > 1 ? { more: stages.slice(1) } : {}),
        };
        const names = file.header.tensors.map((t) => t.name);
        const last = stages.length - 1;
        // -1: the local backend; else the stage whose blocks (or, for the output, the last).
        const stageOf = (name: string): number => {
          const block = /^blk\.(\d+)\./.exec(name);
          if (!block) return name.startsWith("output") ? last : -1;
          const il = Number(block[1]);
          return stages.findLastIndex((s) => il >= s.from);
        };
        weights.push(file.load(backend, { names: names.filter((n) => stageOf(n) < 0), ...mmap }));
        // The tied output reads the embedding: a copy of it goes to the last stage. Every block
        // reads the rope factors (one tensor, as in llama.cpp): a copy goes to every stage.
        const tied = !names.includes("output.weight");
        const factors = names.includes(factorsName) ? factorsName : null;
        for (let i = 0; i <= last; i++) {
          const stageNames = names.filter((n) => stageOf(n) === i);
          if (i === last && tied) stageNames.push("token_embd.weight");
          if (factors) stageNames.push(factors);
          const fuse = fuseFor(stages[i]!.backend, hparams.nLayer, options);
          weights.push(file.load(stages[i]!.backend, { names: stageNames, ...fuse, ...progress }));
        }
        // Where a name is loaded twice (the tied embedding), the local copy is the one blocks use.
        const all = new Map([...weights].reverse().flatMap((w) => [...w.tensors]));
        // weights[0] is the local backend's, weights[i + 1] stage i's.
        const stageWeights = (il: number): LoadedWeights =>
          weights[stages.findLastIndex((s) => il >= s.from) + 1]!;
        model = llamaWeights(all, hparams, {
          nCtx,
          ropeFactors: (il) => factors ? stageWeights(il).tensors.get(factors) : undefined,
          output: weights[weights.length - 1]!.tensors.get(
            tied ? "token_embd.weight" : "output.weight",
          ),
        });
      } else {
        weights.push(
          file.load(backend, {
            ...mmap,
            ...fuseFor(backend, hparams.nLayer, options),
            ...progress,
          }),
        );
        model = llamaWeights(weights[0]!.tensors, hparams, { nCtx });
      }
      const cache = new KvCache(
        (il) => stages.findLast((s) => il >= s.from)?.backend ?? backend,
        hparams,
        nCtx,
        cacheType,
        !flashAttn,
      );
      return new LLM({
        file,
        backend,
        owned,
        hparams,
        weights,
        model,
        cache,
        nBatch,
        kvBucket,
        split,
        graph: { ggml: arithmetic === "ggml", repack, flashAttn },
      });
    } catch (error) {
      for (const w of weights) w.dispose();
      for (const b of owned) b.dispose();
      file.close();
      throw error;
    }
  }

  /**
   * The activation memory plan of the graph that evaluates `nTokens` tokens at the cache's next
   * positions (default 1: a decoding step), for a timeline with `planToSvg`. Only metadata is
   * built: nothing is allocated or computed.
   *
   * @example
   * ```ts
   * import { LLM, planToSvg } from "../../mod.ts";
   * const cache = Deno.env.get("GRAFT_MODEL_CACHE") ?? `${Deno.env.get("HOME")}/.cache/graft/models`;
   * using llm = await LLM.load(`${cache}/SmolLM2-135M-Instruct.Q4_1.gguf`, { nCtx: 64 });
   * const svg = planToSvg(llm.memoryPlan(), { title: "one token" });
   * console.log(svg.startsWith("<svg"));
   * ```
   */
  memoryPlan(nTokens = 1): MemoryPlan {
    this.#alive("memoryPlan");
    positiveOption("nTokens", nTokens, 1);
    return this.#plans.memoryPlan(nTokens, this.#history.length);
  }

  /** Positions of the cache in use: the tokens evaluated since the last reset. */
  get nPast(): number {
    return this.#history.length;
  }

  /** The tokens in the cache, in order. */
  get history(): readonly number[] {
    return this.#history;
  }

  /** The logits of the last token evaluated (overwritten by later evals: copy to keep them). */
  get logits(): Float32Array {
    if (!this.#logits) throw new GraftError("LLM.logits: nothing has been evaluated yet");
    return this.#logits;
  }

  /** Bytes of the KV cache. */
  get cacheSize(): number {
    return this.#cache.size;
  }

  /** Text to token ids (special tokens parsed unless `parseSpecial: false`). */
  tokenize(text: string, options: TokenizeOptions = {}): number[] {
    return this.tokenizer.tokenize(text, { parseSpecial: true, ...options });
  }

  /** Token ids to text. */
  detokenize(ids: readonly number[]): string {
    return this.tokenizer.detokenize(ids);
  }

  /**
   * The model's chat template (`tokenizer.chat_template`, rendered as llama.cpp's `--jinja`
   * does); a model without one gets ChatML, as llama.cpp falls back to.
   */
  get chatTemplate(): ChatTemplate {
    if (!this.#template) {
      const source = metadataValue(this.file.header, "tokenizer.chat_template");
      const special = (id: number | undefined): string =>
        id === undefined ? "" : this.tokenizer.detokenize([id], { unparseSpecial: true });
      this.#template = new ChatTemplate(typeof source === "string" ? source : CHATML, {
        bosToken: special(this.tokenizer.bosId),
        eosToken: special(this.tokenizer.eosId),
      });
    }
    return this.#template;
  }

  /**
   * A conversation as the prompt text the model expects, ending with the assistant's turn
   * opened (unless `addGenerationPrompt: false`).
   */
  applyChatTemplate(messages: readonly ChatMessage[], addGenerationPrompt = true): string {
    return this.chatTemplate.render(messages, { addGenerationPrompt });
  }

  /** Drops the cache from position `keep` on (default 0: empty). */
  reset(keep = 0): void {
    this.#alive("reset");
    this.#idle("reset");
    if (!Number.isInteger(keep) || keep < 0 || keep > this.#history.length) {
      throw new ArgumentError(
        `LLM.reset: keep must be an integer in [0, ${this.#history.length}], got ${keep}`,
      );
    }
    this.#history.length = keep;
    this.#logits = null;
  }

  /**
   * Evaluates `ids` at the next positions of the cache, in batches of at most nBatch tokens,
   * and returns the logits of the last one (or of every one, with `allLogits`), as llama.cpp's
   * `llama_get_logits`: the array may be overwritten by the next eval, so copy (`slice()`) what
   * must outlive it. Running out of context is a ContextFullError and leaves the cache as it was.
   */
  async eval(ids: readonly number[], options: EvalOptions = {}): Promise<Float32Array> {
    this.#alive("eval");
    if (ids.length === 0) throw new ArgumentError("LLM.eval: give at least one token");
    const nVocab = this.hparams.nVocab;
    for (const id of ids) {
      if (!Number.isInteger(id) || id < 0 || id >= nVocab) {
        throw new ArgumentError(`LLM.eval: token id ${id} is outside [0, ${nVocab})`);
      }
    }
    if (this.#history.length + ids.length > this.nCtx) {
      throw new ContextFullError(
        `LLM.eval: ${ids.length} tokens do not fit: ${this.#history.length} of ${this.nCtx} ` +
          `positions are in use; reset() the cache or load with a larger nCtx`,
      );
    }
    this.#idle("eval");
    const all = options.allLogits ?? false;
    const out = all ? new Float32Array(ids.length * nVocab) : null;
    const start = this.#history.length;
    this.#busy = true;
    try {
      for (let at = 0; at < ids.length; at += this.#nBatch) {
        const chunk = ids.slice(at, at + this.#nBatch);
        const logits = await this.#plans.run(chunk, this.#history.length, all);
        this.#history.push(...chunk);
        if (out) out.set(logits, at * nVocab);
        else if (at + this.#nBatch >= ids.length) this.#logits = logits;
      }
    } catch (error) {
      this.#history.length = start;
      throw error;
    } finally {
      this.#busy = false;
    }
    if (out) this.#logits = out.subarray(out.length - nVocab);
    return out ?? this.#logits!;
  }

  /**
   * Generates text for `prompt` (text, or token ids), streaming each piece as whole UTF-8
   * characters. With `reuseCache` (default) a prompt that extends what the cache holds only
   * evaluates the new tokens. Stops at an end-of-generation token (unless `ignoreEos`), a stop
   * string, `maxTokens` or the end of the context; `lastGeneration` says which and the counts.
   */
  async *generate(
    prompt: string | readonly number[],
    options: GenerateOptions = {},
  ): AsyncGenerator<string, void, undefined> {
    this.#alive("generate");
    const {
      maxTokens,
      ignoreEos,
      stop,
      reuseCache,
      parseSpecial,
      onToken,
      ...samplerOptions
    } = options;
    const ids = typeof prompt === "string"
      ? this.tokenize(prompt, { parseSpecial: parseSpecial ?? true })
      : [...prompt];
    if (ids.length === 0) throw new ArgumentError("LLM.generate: the prompt has no tokens");
    const limit = maxTokens ?? Infinity;
    if (!(limit >= 0)) throw new ArgumentError(`LLM.generate: maxTokens ${maxTokens} < 0`);
    const sampler = new Sampler(samplerOptions);
    const stopper = new StopChecker({
      eogTokens: this.eogTokens,
      stopStrings: stop ?? [],
      ignoreEos: ignoreEos ?? false,
    });
    const decoder = this.tokenizer.decoder();
    // Reuse the longest common prefix; at least the last prompt token is evaluated again so
    // that its logits are fresh.
    let keep = 0;
    if (reuseCache ?? true) {
      const h = this.#history;
      while (keep < h.length && keep < ids.length - 1 && h[keep] === ids[keep]) keep++;
    }
    this.reset(keep);
    const t0 = performance.now();
    let logits = await this.eval(ids.slice(keep));
    const t1 = performance.now();
    for (const id of ids) sampler.accept(id);
    const generated: number[] = [];
    let reason: GenerationStats["stopReason"] = "length";
    while (generated.length < limit) {
      const id = sampler.sample(logits);
      sampler.accept(id);
      generated.push(id);
      onToken?.(id);
      const r = stopper.push(id, this.#isEog(id) && !ignoreEos ? "" : decoder.push(id));
      if (r.text) yield r.text;
      if (r.stop) {
        reason = r.reason ?? "stop";
        break;
      }
      if (generated.length >= limit) break;
      if (this.#history.length >= this.nCtx) {
        reason = "context";
        break;
      }
      logits = await this.eval([id]);
    }
    if (reason === "length" || reason === "context") {
      const rest = stopper.push(-1, decoder.flush()).text + stopper.flush();
      if (rest) yield rest;
    }
    this.lastGeneration = {
      promptTokens: ids.length,
      promptEvaluated: ids.length - keep,
      generatedTokens: generated.length,
      ids: generated,
      stopReason: reason,
      promptMs: t1 - t0,
      generateMs: performance.now() - t1,
    };
  }

  #isEog(id: number): boolean {
    return this.eogTokens.has(id);
  }

  // Evals share the cache and the plans' buffers: a second one while the first awaits its
  // backend would write the same positions.
  #idle(verb: string): void {
    if (this.#busy) {
      throw new GraftError(`LLM.${verb}: an eval is still running; await it first`);
    }
  }

  #alive(verb: string): void {
    if (this.#disposed) throw new GraftError(`LLM.${verb}: the model was disposed`);
  }

  /** Frees the plans, the cache, the weights and the backends it made. */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    this.#plans.dispose();
    this.#cache.dispose();
    for (const w of this.#weights) w.dispose();
    for (const b of this.#owned) b.dispose();
    this.file.close();
  }

  /** Same as {@link dispose}. */
  [Symbol.dispose](): void {
    this.dispose();
  }
}

/**
 * The weights an RPC server gets fused (`GGUFLoadOptions.fuse`): each block's q, k and v
 * projections, and its gate and up projections, so that a decoding step sends one matrix
 * product for each group (llama_graph.ts `products`). Elsewhere none: the CPU maps the file
 * (a fused copy would cost memory), and other backends keep the graph they were tested with.
 */
function fuseFor(
  backend: Backend,
  nLayer: number,
  options: LLMLoadOptions,
): { fuse?: string[][] } {
  if (!(backend instanceof RpcBackend) || options.fuseProjections === false) return {};
  const fuse: string[][] = [];
  for (let il = 0; il < nLayer; il++) {
    const blk = `blk.${il}.`;
    fuse.push([`${blk}attn_q.weight`, `${blk}attn_k.weight`, `${blk}attn_v.weight`]);
    fuse.push([`${blk}ffn_gate.weight`, `${blk}ffn_up.weight`]);
  }
  return { fuse };
}

function positiveOption(name: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || value < 1 || value > 1 << 20) {
    throw new ArgumentError(`LLM.load: ${name} must be an integer in [1, 2^20], got ${value}`);
  }
  return value;
}

/**
 * Connects the RPC servers (or takes the given backends) and gives each a run of blocks in
 * proportion to its free memory, every one at least one block, in the order given.
 */
async function rpcStages(
  servers: readonly (string | Backend)[],
  nLayer: number,
  owned: Backend[],
  timeoutMs: number | undefined,
): Promise<LayerStage[]> {
  if (servers.length > nLayer) {
    throw new ArgumentError(`LLM.load: ${servers.length} RPC servers for ${nLayer} blocks`);
  }
  const backends: Backend[] = [];
  for (const server of servers) {
    if (typeof server === "string") {
      const rpc = await RpcBackend.connect(server, timeoutMs !== undefined ? { timeoutMs } : {});
      owned.push(rpc);
      backends.push(rpc);
    } else {
      backends.push(server);
    }
  }
  const free = await Promise.all(
    backends.map(async (b) => b instanceof RpcBackend ? (await b.getDeviceMemory()).free : 1),
  );
  const total = free.reduce((sum, f) => sum + f, 0);
  const stages: LayerStage[] = [];
  let from = 0;
  let share = 0;
  for (let i = 0; i < backends.length; i++) {
    stages.push({ backend: backends[i]!, from });
    share += free[i]!;
    // Blocks up to this server's cumulative share, leaving one for each server after it.
    const end = Math.round((nLayer * share) / (total || 1));
    from = Math.min(Math.max(end, from + 1), nLayer - (backends.length - 1 - i));
  }
  return stages;
}
