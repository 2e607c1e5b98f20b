/**
 * One ONNX Conv run by onnxruntime-node: the peer of bench/neural_perf.ts's conv2d case. ONNX's
 * NCHW input and [OC, IC, KH, KW] weights are, element for element, ggml's [W, H, C, N] image
 * and [KW, KH, IC, OC] kernel, so both get the same arrays.
 * @module
 */

import { encodeModel } from "./onnx_proto.ts";
import { ONNXRUNTIME_VERSION } from "./onnx_block.ts";

/** A prepared session of one convolution. */
export interface OnnxConv {
  /** Computes the convolution once; resolves with the NCHW output. */
  run: () => Promise<Float32Array>;
  close: () => Promise<void>;
}

/** Shape of the convolution: a square kernel, stride 1, `pad` zeros on every side. */
export interface ConvShape {
  width: number;
  height: number;
  channels: number;
  outChannels: number;
  kernel: number;
  pad: number;
}

/** The part of onnxruntime-node's API used here (see onnx_block.ts for why it is declared). */
interface Ort {
  InferenceSession: {
    create(model: Uint8Array, options: Record<string, unknown>): Promise<{
      run(feeds: Record<string, unknown>): Promise<Record<string, { data: unknown }>>;
      release(): Promise<void>;
    }>;
  };
  Tensor: new (type: "float32", data: Float32Array, dims: number[]) => unknown;
}

/** The bare name bench/deno.json maps to onnxruntime-node (a variable: see onnx_block.ts). */
const ONNXRUNTIME_SPECIFIER = "onnxruntime-node";

/** Builds the session, or returns null (printing why) if onnxruntime-node cannot load. */
export async function onnxConv(
  shape: ConvShape,
  image: Float32Array,
  weights: Float32Array,
  threads: number,
): Promise<OnnxConv | null> {
  let ort: Ort;
  try {
    ort = await import(ONNXRUNTIME_SPECIFIER) as Ort;
  } catch (error) {
    console.warn(
      `onnxruntime-node ${ONNXRUNTIME_VERSION} unavailable (run with --config bench/deno.json, ` +
        `as \`deno task bench:neural\` does): ${String(error)}`,
    );
    return null;
  }
  const { width, height, channels, outChannels, kernel, pad } = shape;
  const outW = width + 2 * pad - kernel + 1;
  const outH = height + 2 * pad - kernel + 1;
  const model = encodeModel(
    [{
      op: "Conv",
      inputs: ["x", "w"],
      outputs: ["y"],
      attributes: [
        { name: "kernel_shape", ints: [kernel, kernel] },
        { name: "pads", ints: [pad, pad, pad, pad] },
        { name: "strides", ints: [1, 1] },
      ],
    }],
    [{ name: "w", dims: [outChannels, channels, kernel, kernel], data: weights }],
    { name: "x", dims: [1, channels, height, width] },
    { name: "y", dims: [1, outChannels, outH, outW] },
  );
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    executionMode: "sequential",
    graphOptimizationLevel: "all",
  });
  const feeds = { x: new ort.Tensor("float32", image, [1, channels, height, width]) };
  return {
    run: async () => (await session.run(feeds)).y!.data as Float32Array,
    close: () => session.release(),
  };
}
