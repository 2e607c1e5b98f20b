/// <reference lib="dom" />
/**
 * The browser benchmark page's script (`deno task bench:web` bundles it into dist/bench.js and
 * opens web/bench/index.html in headless Chromium): sgemm n=512 and the demo's transformer
 * block on Graft's WebAssembly backend, on onnxruntime-web (wasm execution provider) and on
 * TensorFlow.js's wasm backend, in the same page, with the thread count of the page's
 * `?threads=` (the peers fix their thread count when their wasm starts, so each thread count is
 * its own page load). Times are medians of several rounds after a warm-up; the cases are
 * measured in alternation, so a noisy machine slows all of them alike. Results go to
 * `globalThis.benchResults` for the driver (bench/web_perf.ts) to print.
 * @module
 */

import {
  allocTensors,
  Context,
  type CoreBackend,
  Graph,
  mulMat,
  planGraph,
  WasmBackend,
} from "../../mod.ts";
import { blockData, buildBlock, DEFAULT_BLOCK, setBlockInputs } from "../../demo/block.ts";
import { buildModel, transposed } from "../../bench/peers/onnx_block.ts";
import { encodeModel } from "../../bench/peers/onnx_proto.ts";

/** The sgemm size of the target. */
const SGEMM_N = 512;
/** Timed rounds per case; the median round is reported. */
const ROUNDS = 7;
/** Each round calls a case until this much time has passed. */
const ROUND_MS = 120;
/** Where the driver serves the peers' npm packages (bench/web/node_modules). */
const PEERS = "/peers/";

/** One measured case: milliseconds per call for Graft and each peer that ran. */
export interface BenchCase {
  name: string;
  /** Floating-point operations per call (0: report times, not rates). */
  flops: number;
  ms: Record<string, number>;
}

/** What the page leaves for the driver. */
export interface BenchState {
  done: boolean;
  threads: number;
  isolated: boolean;
  graftBuild: string;
  cases: BenchCase[];
  notes: string[];
  error?: string;
}

declare global {
  var benchResults: BenchState;
}

// The peers' APIs, as far as the page calls them. Declared here, not imported from their type
// definitions, so that type-checking the repository never needs the npm packages.
interface OrtTensor {
  data: unknown;
}
interface OrtSession {
  run(feeds: Record<string, OrtTensor>): Promise<Record<string, OrtTensor>>;
  release(): Promise<void>;
}
interface Ort {
  env: { wasm: { numThreads: number; wasmPaths: string; proxy: boolean } };
  InferenceSession: {
    create(model: Uint8Array, options: Record<string, unknown>): Promise<OrtSession>;
  };
  Tensor: new (type: "float32", data: Float32Array, dims: number[]) => OrtTensor;
}
interface TfTensor {
  dataSync(): Float32Array;
  dispose(): void;
}
interface Tf {
  setBackend(name: string): Promise<boolean>;
  ready(): Promise<void>;
  getBackend(): string;
  tensor(data: Float32Array, shape: number[]): TfTensor;
  tensor1d(data: Float32Array): TfTensor;
  scalar(value: number): TfTensor;
  tidy(fn: () => TfTensor): TfTensor;
  matMul(a: TfTensor, b: TfTensor): TfTensor;
  add(a: TfTensor, b: TfTensor): TfTensor;
  mul(a: TfTensor, b: TfTensor): TfTensor;
  div(a: TfTensor, b: TfTensor): TfTensor;
  sqrt(a: TfTensor): TfTensor;
  mean(a: TfTensor, axis: number, keepDims: boolean): TfTensor;
  reshape(a: TfTensor, shape: number[]): TfTensor;
  transpose(a: TfTensor, perm: number[]): TfTensor;
  softmax(a: TfTensor): TfTensor;
  sigmoid(a: TfTensor): TfTensor;
  wasm: { setWasmPaths(prefix: string): void; setThreadsCount(count: number): void };
}

/** A case on one engine: a call to time, and its cleanup. */
interface Runner {
  run: () => unknown;
  close: () => unknown;
}

function sgemmData(n: number): Float32Array {
  return new Float32Array(n * n).map((_, i) => ((i * 7919) % 1000) / 1000 - 0.5);
}

function graftSgemm(backend: CoreBackend, n: number): Runner {
  const ctx = new Context();
  const a = ctx.newTensor("f32", [n, n]);
  const b = ctx.newTensor("f32", [n, n]);
  const c = mulMat(a, b);
  const graph = Graph.build(c);
  const memory = allocTensors(backend, [a, b, ...graph.nodes]);
  backend.setTensor(a, sgemmData(n));
  backend.setTensor(b, sgemmData(n));
  const plan = backend.graphPlanCreate(graph);
  return {
    run: () => backend.graphPlanCompute(plan),
    close: () => {
      plan.dispose();
      memory.dispose();
    },
  };
}

function graftBlock(backend: CoreBackend): Runner {
  const built = buildBlock(DEFAULT_BLOCK);
  const weights = allocTensors(backend, built.ctx.tensors);
  const activations = planGraph(built.graph, { alignment: backend.alignment }).allocate(backend);
  setBlockInputs(built, blockData(DEFAULT_BLOCK));
  const plan = backend.graphPlanCreate(built.graph, { prepackWeights: true });
  return {
    run: () => backend.graphPlanCompute(plan),
    close: () => {
      plan.dispose();
      activations.dispose();
      weights.dispose();
    },
  };
}

/** The sgemm as one ONNX MatMul: x [n, n] (fed each run) times the constant w [n, n]. */
function matMulModel(n: number): Uint8Array {
  return encodeModel(
    [{ op: "MatMul", inputs: ["x", "w"], outputs: ["out"] }],
    [{ name: "w", dims: [n, n], data: sgemmData(n) }],
    { name: "x", dims: [n, n] },
    { name: "out", dims: [n, n] },
  );
}

async function ortRunner(
  ort: Ort,
  model: Uint8Array,
  x: Float32Array,
  dims: number[],
): Promise<Runner> {
  const session = await ort.InferenceSession.create(model, {
    executionProviders: ["wasm"],
    graphOptimizationLevel: "all",
    executionMode: "sequential",
  });
  const feeds = { x: new ort.Tensor("float32", x, dims) };
  return {
    run: () => session.run(feeds),
    close: () => session.release(),
  };
}

function tfSgemm(tf: Tf, n: number): Runner {
  const a = tf.tensor(sgemmData(n), [n, n]);
  const b = tf.tensor(sgemmData(n), [n, n]);
  return {
    run: () => {
      const c = tf.matMul(a, b);
      c.dataSync();
      c.dispose();
    },
    close: () => {
      a.dispose();
      b.dispose();
    },
  };
}

/** The demo block in TensorFlow.js ops, weights transposed once to [in, out] as for ONNX. */
function tfBlock(tf: Tf): Runner {
  const { dim, heads, seq, ffn, eps } = DEFAULT_BLOCK;
  const hd = dim / heads;
  const d = blockData(DEFAULT_BLOCK);
  const t = (data: Float32Array, shape: number[]): TfTensor => tf.tensor(data, shape);
  const w = {
    x: t(d.x, [seq, dim]),
    mask: t(d.mask, [seq, seq]),
    attnNorm: tf.tensor1d(d.attnNorm),
    ffnNorm: tf.tensor1d(d.ffnNorm),
    wq: t(transposed(d.wq, dim, dim), [dim, dim]),
    wk: t(transposed(d.wk, dim, dim), [dim, dim]),
    wv: t(transposed(d.wv, dim, dim), [dim, dim]),
    wo: t(transposed(d.wo, dim, dim), [dim, dim]),
    wGate: t(transposed(d.wGate, dim, ffn), [dim, ffn]),
    wUp: t(transposed(d.wUp, dim, ffn), [dim, ffn]),
    wDown: t(transposed(d.wDown, ffn, dim), [ffn, dim]),
    eps: tf.scalar(eps),
    scale: tf.scalar(1 / Math.sqrt(hd)),
  };
  const rms = (x: TfTensor, gain: TfTensor): TfTensor =>
    tf.mul(tf.div(x, tf.sqrt(tf.add(tf.mean(tf.mul(x, x), -1, true), w.eps))), gain);
  const split = (x: TfTensor, perm: number[]): TfTensor =>
    tf.transpose(tf.reshape(x, [seq, heads, hd]), perm);
  const forward = (): TfTensor => {
    const h = rms(w.x, w.attnNorm);
    const q = split(tf.matMul(h, w.wq), [1, 0, 2]);
    const k = split(tf.matMul(h, w.wk), [1, 2, 0]);
    const v = split(tf.matMul(h, w.wv), [1, 0, 2]);
    const p = tf.softmax(tf.add(tf.mul(tf.matMul(q, k), w.scale), w.mask));
    const merged = tf.reshape(tf.transpose(tf.matMul(p, v), [1, 0, 2]), [seq, dim]);
    const h1 = tf.add(w.x, tf.matMul(merged, w.wo));
    const n2 = rms(h1, w.ffnNorm);
    const gate = tf.matMul(n2, w.wGate);
    const gated = tf.mul(tf.mul(gate, tf.sigmoid(gate)), tf.matMul(n2, w.wUp));
    return tf.add(h1, tf.matMul(gated, w.wDown));
  };
  return {
    run: () => {
      const out = tf.tidy(forward);
      out.dataSync();
      out.dispose();
    },
    close: () => Object.values(w).forEach((x) => x.dispose()),
  };
}

/** Milliseconds per call of one round: calls `run` until ROUND_MS have passed. */
async function round(run: () => unknown): Promise<number> {
  let calls = 0;
  const start = performance.now();
  let elapsed = 0;
  while (elapsed < ROUND_MS || calls < 2) {
    await run();
    calls++;
    elapsed = performance.now() - start;
  }
  return elapsed / calls;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** Warms every runner up, then times them in alternation; medians in ms per call. */
async function measure(runners: Record<string, Runner>): Promise<Record<string, number>> {
  for (const runner of Object.values(runners)) {
    for (let i = 0; i < 3; i++) await runner.run();
  }
  const samples: Record<string, number[]> = {};
  for (let r = 0; r < ROUNDS; r++) {
    for (const [name, runner] of Object.entries(runners)) {
      (samples[name] ??= []).push(await round(runner.run));
    }
  }
  return Object.fromEntries(Object.entries(samples).map(([name, s]) => [name, median(s)]));
}

async function loadOrt(threads: number, notes: string[]): Promise<Ort | null> {
  try {
    // A runtime specifier: the bundler leaves the peer out of dist/bench.js.
    const url = `${PEERS}onnxruntime-web/dist/ort.wasm.min.mjs`;
    const ort = (await import(url)) as Ort;
    ort.env.wasm.numThreads = threads;
    ort.env.wasm.proxy = false;
    ort.env.wasm.wasmPaths = `${PEERS}onnxruntime-web/dist/`;
    return ort;
  } catch (error) {
    notes.push(`onnxruntime-web did not load: ${String(error)}`);
    return null;
  }
}

async function loadTf(threads: number, notes: string[]): Promise<Tf | null> {
  const tf = (globalThis as unknown as { tf?: Tf }).tf;
  if (!tf?.wasm) {
    notes.push("TensorFlow.js (tf-core.min.js, tf-backend-wasm.min.js) did not load");
    return null;
  }
  tf.wasm.setWasmPaths(`${PEERS}@tensorflow/tfjs-backend-wasm/dist/`);
  tf.wasm.setThreadsCount(threads);
  if (!(await tf.setBackend("wasm"))) {
    notes.push("TensorFlow.js could not start its wasm backend");
    return null;
  }
  await tf.ready();
  return tf;
}

async function main(): Promise<void> {
  const threads = Number(new URLSearchParams(location.search).get("threads") ?? "1");
  const state: BenchState = {
    done: false,
    threads,
    isolated: globalThis.crossOriginIsolated === true,
    graftBuild: "",
    cases: [],
    notes: [],
  };
  globalThis.benchResults = state;
  let wasm: WasmBackend;
  try {
    wasm = await WasmBackend.create({ threads });
  } catch (error) {
    // No shared memory here: the single-threaded core (the fallback).
    state.notes.push(`Graft on 1 thread (${String(error)})`);
    wasm = await WasmBackend.create();
  }
  state.graftBuild = `${WasmBackend.coreBuild()}, ${wasm.threads} thread(s)`;
  const ort = await loadOrt(threads, state.notes);
  const tf = await loadTf(threads, state.notes);

  const n = SGEMM_N;
  const sgemm: Record<string, Runner> = { graft: graftSgemm(wasm, n) };
  if (ort) sgemm.ort = await ortRunner(ort, matMulModel(n), sgemmData(n), [n, n]);
  if (tf) sgemm.tfjs = tfSgemm(tf, n);
  state.cases.push({ name: `sgemm_n${n}`, flops: 2 * n ** 3, ms: await measure(sgemm) });
  for (const runner of Object.values(sgemm)) await runner.close();

  const c = DEFAULT_BLOCK;
  const data = blockData(c);
  const block: Record<string, Runner> = { graft: graftBlock(wasm) };
  if (ort) {
    const model = buildModel(c, data);
    block.ort = await ortRunner(ort, model, data.x, [c.seq, c.dim]);
  }
  if (tf) block.tfjs = tfBlock(tf);
  state.cases.push({ name: "block", flops: 0, ms: await measure(block) });
  for (const runner of Object.values(block)) await runner.close();
  wasm.dispose();
}

main().then(
  () => (globalThis.benchResults.done = true),
  (error) => {
    globalThis.benchResults.error = error instanceof Error ? `${error.stack}` : String(error);
    globalThis.benchResults.done = true;
  },
);
