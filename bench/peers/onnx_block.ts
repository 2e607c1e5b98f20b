/**
 * The demo's transformer block as an ONNX model run by onnxruntime-node: the peer of the
 * `block_seq128_d768` benchmark. Same weights, same shapes, row-major [seq, dim] activations.
 * @module
 */

import type { BlockConfig, BlockWeights } from "../../demo/block.ts";
import { encodeModel, type Initializer, type OnnxNode } from "./onnx_proto.ts";

type Data = Record<keyof BlockWeights, Float32Array>;

/** ggml stores a weight as M rows of K; ONNX MatMul wants [K, M]. */
export function transposed(w: Float32Array, k: number, m: number): Float32Array {
  const out = new Float32Array(k * m);
  for (let i = 0; i < m; i++) for (let c = 0; c < k; c++) out[c * m + i] = w[i * k + c]!;
  return out;
}

/** The block as an ONNX model (opset 17): input `x` [seq, dim], output `out` [seq, dim]. */
export function buildModel(c: BlockConfig, w: Data): Uint8Array {
  const { dim, heads, seq, ffn, eps } = c;
  const hd = dim / heads;
  const inits: Initializer[] = [
    { name: "wq", dims: [dim, dim], data: transposed(w.wq, dim, dim) },
    { name: "wk", dims: [dim, dim], data: transposed(w.wk, dim, dim) },
    { name: "wv", dims: [dim, dim], data: transposed(w.wv, dim, dim) },
    { name: "wo", dims: [dim, dim], data: transposed(w.wo, dim, dim) },
    { name: "w_gate", dims: [dim, ffn], data: transposed(w.wGate, dim, ffn) },
    { name: "w_up", dims: [dim, ffn], data: transposed(w.wUp, dim, ffn) },
    { name: "w_down", dims: [ffn, dim], data: transposed(w.wDown, ffn, dim) },
    { name: "attn_norm", dims: [dim], data: w.attnNorm },
    { name: "ffn_norm", dims: [dim], data: w.ffnNorm },
    { name: "mask", dims: [seq, seq], data: w.mask },
    { name: "eps", dims: [], data: new Float32Array([eps]) },
    { name: "scale", dims: [], data: new Float32Array([1 / Math.sqrt(hd)]) },
    {
      name: "heads_shape",
      dims: [3],
      data: new BigInt64Array([BigInt(seq), BigInt(heads), BigInt(hd)]),
    },
    { name: "merged_shape", dims: [2], data: new BigInt64Array([BigInt(seq), BigInt(dim)]) },
  ];
  const nodes: OnnxNode[] = [];
  const op = (
    type: string,
    inputs: string[],
    output: string,
    attributes?: OnnxNode["attributes"],
  ): string => {
    nodes.push({ op: type, inputs, outputs: [output], ...(attributes ? { attributes } : {}) });
    return output;
  };
  const rms = (x: string, gain: string, p: string): string => {
    const sq = op("Mul", [x, x], `${p}_sq`);
    const ms = op("ReduceMean", [sq], `${p}_ms`, [{ name: "axes", ints: [-1] }]);
    const rmsValue = op("Sqrt", [op("Add", [ms, "eps"], `${p}_mse`)], `${p}_rms`);
    return op("Mul", [op("Div", [x, rmsValue], `${p}_n`), gain], `${p}_out`);
  };
  const h = rms("x", "attn_norm", "rms1");
  const split = (t: string, name: string, perm: number[]): string =>
    op(
      "Transpose",
      [op("Reshape", [op("MatMul", [h, t], `${name}_p`), "heads_shape"], `${name}_r`)],
      `${name}_t`,
      [
        { name: "perm", ints: perm },
      ],
    );
  const q = split("wq", "q", [1, 0, 2]); // [heads, seq, hd]
  const k = split("wk", "k", [1, 2, 0]); // [heads, hd, seq]
  const v = split("wv", "v", [1, 0, 2]); // [heads, seq, hd]
  const scores = op("Mul", [op("MatMul", [q, k], "qk"), "scale"], "qk_s");
  const p = op("Softmax", [op("Add", [scores, "mask"], "qk_m")], "p", [{ name: "axis", int: -1 }]);
  const attn = op("MatMul", [p, v], "pv"); // [heads, seq, hd]
  const merged = op(
    "Reshape",
    [op("Transpose", [attn], "pv_t", [{ name: "perm", ints: [1, 0, 2] }]), "merged_shape"],
    "merged",
  );
  const h1 = op("Add", ["x", op("MatMul", [merged, "wo"], "o")], "h1");
  const n2 = rms(h1, "ffn_norm", "rms2");
  const gate = op("MatMul", [n2, "w_gate"], "gate");
  const silu = op("Mul", [gate, op("Sigmoid", [gate], "gate_sig")], "gate_silu");
  const gated = op("Mul", [silu, op("MatMul", [n2, "w_up"], "up")], "gated");
  op("Add", [h1, op("MatMul", [gated, "w_down"], "down")], "out");
  return encodeModel(nodes, inits, { name: "x", dims: [seq, dim] }, {
    name: "out",
    dims: [seq, dim],
  });
}

/** A prepared onnxruntime session of the block. */
export interface OnnxBlock {
  /** Computes the block once; resolves with the output, [seq, dim] row-major. */
  run: () => Promise<Float32Array>;
  close: () => Promise<void>;
}

/** The onnxruntime-node version the benchmark pins (bench/deno.json's import map and lock). */
export const ONNXRUNTIME_VERSION = "1.23.2";

/**
 * The part of onnxruntime-node's API the benchmark calls. It is declared here rather than taken
 * from the package's types so that type-checking the repository (and every task outside bench/)
 * never downloads the package: it is a benchmark peer only (issue 15's lean demo path).
 */
interface Ort {
  InferenceSession: {
    create(model: Uint8Array, options: Record<string, unknown>): Promise<{
      run(feeds: Record<string, unknown>): Promise<Record<string, { data: unknown }>>;
      release(): Promise<void>;
    }>;
  };
  Tensor: new (type: "float32", data: Float32Array, dims: number[]) => unknown;
}

/**
 * The bare name bench/deno.json maps to `npm:onnxruntime-node@1.23.2`. Held in a variable so the
 * module graph of a type check has no npm edge; the import resolves when the benchmark runs under
 * bench/deno.json (`deno task bench`, `deno task bench:cpu`), and fails (the peer skipped, with
 * how to run it) under the repository's own config, whose lock holds no benchmark peer.
 */
const ONNXRUNTIME_SPECIFIER = "onnxruntime-node";

/** A session of onnxruntime-node over one model, and the package's Tensor constructor. */
export interface OrtSession {
  Tensor: Ort["Tensor"];
  session: Awaited<ReturnType<Ort["InferenceSession"]["create"]>>;
}

/**
 * Loads onnxruntime-node and creates a session of `model()` on `threads` intra-op threads
 * (sequential, all graph optimizations), or returns null, printing why and that `task` runs it
 * under bench/deno.json, when the package cannot load. The peers of bench/ share it.
 */
export async function ortSession(
  model: () => Uint8Array,
  threads: number,
  task: string,
): Promise<OrtSession | null> {
  let ort: Ort;
  try {
    ort = await import(ONNXRUNTIME_SPECIFIER) as Ort;
  } catch (error) {
    console.warn(
      `onnxruntime-node ${ONNXRUNTIME_VERSION} unavailable (run with --config bench/deno.json, ` +
        `as \`${task}\` does): ${String(error)}`,
    );
    return null;
  }
  const session = await ort.InferenceSession.create(model(), {
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    executionMode: "sequential",
    graphOptimizationLevel: "all",
  });
  return { Tensor: ort.Tensor, session };
}

/** Builds the session, or returns null (printing why) if onnxruntime-node cannot load. */
export async function onnxBlock(
  c: BlockConfig,
  w: Data,
  threads: number,
): Promise<OnnxBlock | null> {
  const opened = await ortSession(() => buildModel(c, w), threads, "deno task bench");
  if (!opened) return null;
  const { Tensor, session } = opened;
  const feeds = { x: new Tensor("float32", w.x, [c.seq, c.dim]) };
  return {
    run: async () => (await session.run(feeds)).out!.data as Float32Array,
    close: () => session.release(),
  };
}
