/**
 * One ONNX Conv run by onnxruntime-node: the peer of bench/neural_perf.ts's conv2d case. ONNX's
 * NCHW input and [OC, IC, KH, KW] weights are, element for element, ggml's [W, H, C, N] image
 * and [KW, KH, IC, OC] kernel, so both get the same arrays.
 * @module
 */

import { encodeModel } from "./onnx_proto.ts";
import { ortSession } from "./onnx_block.ts";

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

/** Builds the session, or returns null (printing why) if onnxruntime-node cannot load. */
export async function onnxConv(
  shape: ConvShape,
  image: Float32Array,
  weights: Float32Array,
  threads: number,
): Promise<OnnxConv | null> {
  const { width, height, channels, outChannels, kernel, pad } = shape;
  const outW = width + 2 * pad - kernel + 1;
  const outH = height + 2 * pad - kernel + 1;
  const model = (): Uint8Array =>
    encodeModel(
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
  const opened = await ortSession(model, threads, "deno task bench:neural");
  if (!opened) return null;
  const { Tensor, session } = opened;
  const feeds = { x: new Tensor("float32", image, [1, channels, height, width]) };
  return {
    run: async () => (await session.run(feeds)).y!.data as Float32Array,
    close: () => session.release(),
  };
}
