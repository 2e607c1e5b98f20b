/**
 * Convolutions as ggml builds them: `im2col` unfolds every receptive field of the image into
 * one row, and a matrix product with the kernel does the rest (ggml_conv_1d, ggml_conv_2d,
 * ggml_conv_2d_dw).
 * @module
 */

import { ArgumentError, ShapeError } from "../errors.ts";
import { Op } from "../op.ts";
import { formatShape, Tensor } from "../tensor.ts";
import { requireDType } from "./check.ts";
import { mulMat } from "./matmul.ts";
import { cont } from "./copy.ts";
import { permute, reshape, transpose } from "./view.ts";

/** Stride, padding and dilation of a convolution, per spatial dim (x, then y). */
export interface ConvOptions {
  /** Step between receptive fields (>= 1). Default 1. */
  stride?: number | readonly [number, number];
  /** Zeros added on each side (>= 0). Default 0. */
  padding?: number | readonly [number, number];
  /** Step between kernel taps (>= 1). Default 1. */
  dilation?: number | readonly [number, number];
}

/** Options of {@link im2col}. */
export interface Im2colOptions extends ConvOptions {
  /** A 2D unfolding (default) or a 1D one (kernel `[KW, IC, OC]`, image `[IW, IC, N]`). */
  is2D?: boolean;
  /** The result's dtype, f32 (default) or f16 (as ggml's `dst_type`). */
  dtype?: "f32" | "f16";
  /**
   * Graft's planar layout (2D only): the same values as `[OW, OH, IC*KH*KW, N]`, pixels first,
   * so each row is a run of one image row (a contiguous copy). Transposed, it is the `[K, P]`
   * matrix conv2d multiplies without gathers. Default false (ggml's layout).
   */
  planar?: boolean;
}

function pair(
  op: string,
  name: string,
  value: number | readonly [number, number] | undefined,
  fallback: number,
  min: number,
): [number, number] {
  const [x, y] = typeof value === "number" || value === undefined
    ? [value ?? fallback, value ?? fallback]
    : value;
  for (const v of [x, y]) {
    if (!Number.isInteger(v) || v < min || v > 1 << 20) {
      throw new ArgumentError(`${op}: ${name} must be an integer in [${min}, 2^20], got ${v}`);
    }
  }
  return [x, y];
}

/** ggml_calc_conv_output_size. */
function outputSize(
  size: number,
  kernel: number,
  stride: number,
  pad: number,
  dilation: number,
): number {
  return Math.floor((size + 2 * pad - dilation * (kernel - 1) - 1) / stride) + 1;
}

/**
 * ggml_im2col: every receptive field of `image` as one row. 2D: kernel `[KW, KH, IC, OC]` (only
 * its shape is read), image f32 `[IW, IH, IC, N]`, result `[IC*KH*KW, OW, OH, N]`, element
 * `ic*KH*KW + kh*KW + kw` of row (ow, oh, n) being image (ow*s0 + kw*d0 - p0, oh*s1 + kh*d1 -
 * p1, ic, n), 0 in the padding. 1D: kernel `[KW, IC, OC]`, image `[IW, IC, N]`, result
 * `[IC*KW, OW, N]`.
 *
 * @example
 * ```ts
 * import { Context, im2col } from "../../mod.ts";
 * const ctx = new Context();
 * const kernel = ctx.newTensor("f32", [3, 3, 8, 16]);
 * const image = ctx.newTensor("f32", [32, 32, 8]);
 * console.log(im2col(kernel, image, { padding: 1 }).ne); // [72, 32, 32, 1]
 * ```
 */
export function im2col(kernel: Tensor, image: Tensor, options: Im2colOptions = {}): Tensor {
  requireDType("im2col", image, ["f32"]);
  const is2D = options.is2D ?? true;
  const dtype = options.dtype ?? "f32";
  if (dtype !== "f32" && dtype !== "f16") {
    throw new ArgumentError(`im2col: dtype must be f32 or f16, got ${dtype}`);
  }
  const [s0, s1] = pair("im2col", "stride", options.stride, 1, 1);
  const [p0, p1] = pair("im2col", "padding", options.padding, 0, 0);
  const [d0, d1] = pair("im2col", "dilation", options.dilation, 1, 1);
  const channels = is2D ? kernel.ne[2] : kernel.ne[1];
  const imageChannels = is2D ? image.ne[2] : image.ne[1];
  const what = `kernel ${formatShape(kernel.ne)}, image ${formatShape(image.ne)}`;
  if (channels !== imageChannels || (!is2D && image.ne[3] !== 1)) {
    throw new ShapeError(
      `im2col: ${what}: the kernel's input channels (dim ${is2D ? 2 : 1}) must equal the ` +
        `image's${is2D ? "" : ", and a 1D image has 3 dims"}`,
    );
  }
  const ow = outputSize(image.ne[0], kernel.ne[0], s0, p0, d0);
  const oh = is2D ? outputSize(image.ne[1], kernel.ne[1], s1, p1, d1) : 1;
  if (ow < 1 || oh < 1) {
    throw new ShapeError(`im2col: ${what}: the image is smaller than the dilated kernel`);
  }
  if (image.nb[0] !== 4) throw new ShapeError(`im2col: image ${image.label} needs contiguous rows`);
  const planar = options.planar ?? false;
  if (planar && !is2D) throw new ArgumentError("im2col: the planar layout is 2D only");
  const taps = channels * kernel.ne[1] * kernel.ne[0];
  const ne: [number, number, number, number] = is2D
    ? (planar ? [ow, oh, taps, image.ne[3]] : [taps, ow, oh, image.ne[3]])
    : [channels * kernel.ne[0], ow, image.ne[2], 1];
  return new Tensor({
    dtype,
    ne,
    op: Op.im2col,
    src: [kernel, image],
    // A 1D unfolding has no y: its y stride, padding and dilation are 1, 0 and 1.
    params: is2D ? [s0, s1, p0, p1, d0, d1, 1, planar ? 1 : 0] : [s0, 1, p0, 0, d0, 1, 0, 0],
  });
}

function requireContiguousKernel(op: string, kernel: Tensor): void {
  requireDType(op, kernel, ["f32", "f16"]);
  if (!kernel.isContiguous) {
    throw new ShapeError(`${op}: kernel ${kernel.label} must be contiguous (it is reshaped)`);
  }
}

/**
 * ggml_conv_2d: kernel `[KW, KH, IC, OC]` (f32 or f16) over image f32 `[IW, IH, IC, N]` ->
 * f32 `[OW, OH, OC, N]`, through {@link im2col} and one mulMat.
 *
 * @example
 * ```ts
 * import { Context, conv2d } from "../../mod.ts";
 * const ctx = new Context();
 * const kernel = ctx.newTensor("f32", [3, 3, 64, 64]);
 * const image = ctx.newTensor("f32", [56, 56, 64]);
 * console.log(conv2d(kernel, image, { padding: 1 }).ne); // [56, 56, 64, 1]
 * ```
 */
export function conv2d(kernel: Tensor, image: Tensor, options: ConvOptions = {}): Tensor {
  requireContiguousKernel("conv2d", kernel);
  // The planar unfolding [OW, OH, K, N], seen as [K, OW*OH, N] (pixels adjacent: the GEMM packs
  // it with plain loads), times the kernel as mulMat's a ([K, OC], f32 or f16): the product's
  // [OC, OW*OH, N] is written with pixels adjacent, which is the result's [OW, OH, OC, N]
  // layout, so no copy follows (ggml's im2col + mulMat + permute + cont gives the same values).
  const cols = im2col(kernel, image, { ...options, planar: true });
  const [ow, oh, k, n] = cols.ne;
  const oc = kernel.ne[3];
  const pixels = ow * oh;
  const fields = transpose(reshape(cols, [pixels, k, n]));
  const weights = reshape(kernel, [k, oc]);
  const checked = mulMat(weights, fields); // shapes and dtypes checked there: [OC, P, N]
  const product = new Tensor({
    dtype: "f32",
    ne: checked.ne,
    nb: [pixels * 4, 4, pixels * oc * 4, pixels * oc * n * 4],
    op: Op.mulMat,
    src: [weights, fields],
  });
  return reshape(transpose(product), [ow, oh, oc, n]);
}

/**
 * ggml_conv_1d: kernel `[KW, IC, OC]` (f32 or f16) over f32 `[IW, IC, N]` -> f32 `[OW, OC, N]`.
 *
 * @example
 * ```ts
 * import { Context, conv1d } from "../../mod.ts";
 * const ctx = new Context();
 * const kernel = ctx.newTensor("f32", [3, 80, 384]); // Whisper's first layer
 * const audio = ctx.newTensor("f32", [3000, 80]);
 * console.log(conv1d(kernel, audio, { padding: 1 }).ne); // [3000, 384, 1, 1]
 * ```
 */
export function conv1d(
  kernel: Tensor,
  input: Tensor,
  options: { stride?: number; padding?: number; dilation?: number } = {},
): Tensor {
  requireContiguousKernel("conv1d", kernel);
  const cols = im2col(kernel, input, { ...options, is2D: false }); // [IC*KW, OW, N]
  const [k, ow, n] = cols.ne;
  const oc = kernel.ne[2];
  const flat = reshape(cols, [k, ow * n]);
  const weights = reshape(kernel, [k, oc]);
  if (kernel.dtype === "f32") {
    const product = mulMat(flat, weights); // [OW*N, OC]
    if (n === 1) return reshape(product, [ow, oc, 1]);
    return cont(permute(reshape(product, [ow, n, oc]), [0, 2, 1, 3]));
  }
  const product = mulMat(weights, flat); // [OC, OW*N]
  return cont(permute(reshape(product, [oc, ow, n]), [1, 0, 2, 3]));
}

/**
 * ggml_conv_2d_dw: a depthwise convolution, kernel `[KW, KH, 1, C]` (f32 or f16; one filter
 * per channel) over f32 `[IW, IH, C, N]` -> f32 `[OW, OH, C, N]`.
 *
 * @example
 * ```ts
 * import { Context, conv2dDw } from "../../mod.ts";
 * const ctx = new Context();
 * const kernel = ctx.newTensor("f32", [3, 3, 1, 32]);
 * const image = ctx.newTensor("f32", [28, 28, 32]);
 * console.log(conv2dDw(kernel, image, { padding: 1 }).ne); // [28, 28, 32, 1]
 * ```
 */
export function conv2dDw(kernel: Tensor, image: Tensor, options: ConvOptions = {}): Tensor {
  requireContiguousKernel("conv2dDw", kernel);
  const [kw, kh, one, c] = kernel.ne;
  if (one !== 1 || c !== image.ne[2]) {
    throw new ShapeError(
      `conv2dDw: kernel ${formatShape(kernel.ne)} must be [KW, KH, 1, C] with C = the image's ` +
        `channels (${formatShape(image.ne)})`,
    );
  }
  if (!image.isContiguous) {
    throw new ShapeError(`conv2dDw: image ${image.label} must be contiguous (it is reshaped)`);
  }
  // Each (channel, image) is a one-channel image; its fields are rows of KH*KW.
  const planes = reshape(image, [image.ne[0], image.ne[1], 1, c * image.ne[3]]);
  const filters = reshape(kernel, [kw, kh, 1, c]);
  const cols = im2col(filters, planes, options); // [KH*KW, OW, OH, C*N]
  const [k, ow, oh] = cols.ne;
  const fields = reshape(cols, [k, ow * oh, c, image.ne[3]]);
  const weights = reshape(kernel, [k, 1, c, 1]);
  // ggml's orientation: the filters are mulMat's a (f16 allowed), each channel's fields its b.
  const product = mulMat(weights, fields); // [1, OW*OH, C, N]
  return reshape(product, [ow, oh, c, image.ne[3]]);
}

function requireStride(op: string, stride: number): void {
  if (!Number.isInteger(stride) || stride < 1 || stride > 1 << 20) {
    throw new ArgumentError(`${op}: stride must be an integer in [1, 2^20], got ${stride}`);
  }
}

/**
 * ggml_conv_transpose_1d (no padding, no dilation): kernel `[K, OC, IC]` (f32 or f16) over f32
 * `[L, IC]` -> f32 `[(L - 1) * stride + K, OC]`.
 *
 * @example
 * ```ts
 * import { Context, convTranspose1d } from "../../mod.ts";
 * const ctx = new Context();
 * const kernel = ctx.newTensor("f32", [4, 16, 32]);
 * const x = ctx.newTensor("f32", [100, 32]);
 * console.log(convTranspose1d(kernel, x, 2).ne); // [202, 16, 1, 1]
 * ```
 */
export function convTranspose1d(kernel: Tensor, input: Tensor, stride = 1): Tensor {
  requireDType("convTranspose1d", kernel, ["f32", "f16"]);
  requireDType("convTranspose1d", input, ["f32"]);
  requireStride("convTranspose1d", stride);
  if (
    kernel.ne[2] !== input.ne[1] || kernel.ne[3] !== 1 || input.ne[2] !== 1 || input.ne[3] !== 1
  ) {
    throw new ShapeError(
      `convTranspose1d: kernel ${formatShape(kernel.ne)} must be [K, OC, IC] and input ` +
        `${formatShape(input.ne)} [L, IC]`,
    );
  }
  return new Tensor({
    dtype: "f32",
    ne: [(input.ne[0] - 1) * stride + kernel.ne[0], kernel.ne[1], 1, 1],
    op: Op.convTranspose1d,
    src: [kernel, input],
    params: [stride],
  });
}

/**
 * ggml_conv_transpose_2d_p0: kernel `[KW, KH, OC, IC]` (f32 or f16) over f32 `[W, H, IC, N]`
 * -> f32 `[(W - 1) * stride + KW, (H - 1) * stride + KH, OC, N]` (no padding).
 *
 * @example
 * ```ts
 * import { Context, convTranspose2d } from "../../mod.ts";
 * const ctx = new Context();
 * const kernel = ctx.newTensor("f16", [2, 2, 64, 128]);
 * const x = ctx.newTensor("f32", [16, 16, 128]);
 * console.log(convTranspose2d(kernel, x, 2).ne); // [32, 32, 64, 1]
 * ```
 */
export function convTranspose2d(kernel: Tensor, input: Tensor, stride = 1): Tensor {
  requireDType("convTranspose2d", kernel, ["f32", "f16"]);
  requireDType("convTranspose2d", input, ["f32"]);
  requireStride("convTranspose2d", stride);
  if (kernel.ne[3] !== input.ne[2]) {
    throw new ShapeError(
      `convTranspose2d: kernel ${formatShape(kernel.ne)} has ${kernel.ne[3]} input channels ` +
        `(dim 3), input ${formatShape(input.ne)} ${input.ne[2]} (dim 2)`,
    );
  }
  return new Tensor({
    dtype: "f32",
    ne: [
      (input.ne[0] - 1) * stride + kernel.ne[0],
      (input.ne[1] - 1) * stride + kernel.ne[1],
      kernel.ne[2],
      input.ne[3],
    ],
    op: Op.convTranspose2d,
    src: [kernel, input],
    params: [stride],
  });
}
