/**
 * Matrix multiplication with ggml's orientation and batch broadcasting.
 * @module
 */

import { ShapeError } from "../errors.ts";
import { Op } from "../op.ts";
import { formatShape, Tensor } from "../tensor.ts";
import { requireDType } from "./check.ts";
import { WEIGHT_DTYPES } from "../dtype.ts";

/** Options of {@link mulMat}. */
export interface MulMatOptions {
  /**
   * Compute as ggml's CPU backend does for any number of columns (default false). Weights of a
   * quantized type normally go through Graft's f32 GEMM (dequantized a block at a time) from
   * 20 columns of `b` on: faster, and nearer the exact product, but not ggml's bits. With
   * `ggml: true` every column quantizes `b` per block to the weights' activation type and takes
   * integer dots, as ggml's `mul_mat` does (k-quant weights from 8 columns on in the order of
   * its tiled matmul, as ggml), so a model matches llama.cpp token for token.
   */
  ggml?: boolean;
}

/**
 * `mulMat(a[K, M, ...], b[K, N, ...]) -> [M, N, ...]`: each output element is the dot product
 * of a row of `a` and a row of `b` (so `a` is usually a weight matrix stored row-major by output
 * feature). Dims 2-3 of `b` must be multiples of `a`'s (`a` is broadcast over batches). `a` may be
 * any dtype of `WEIGHT_DTYPES` (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_K, q5_K, q6_K;
 * quantized rows are whole blocks); `b` is f32; either may be non-contiguous.
 *
 * @example
 * ```ts
 * import { Context, mulMat } from "../../mod.ts";
 * const ctx = new Context();
 * const w = ctx.newTensor("f16", [768, 3072]); // K=768 inputs, M=3072 outputs
 * const x = ctx.newTensor("f32", [768, 128]); // N=128 tokens
 * console.log(mulMat(w, x).ne); // [3072, 128, 1, 1]
 * ```
 */
export function mulMat(a: Tensor, b: Tensor, options: MulMatOptions = {}): Tensor {
  requireDType("mulMat", a, WEIGHT_DTYPES);
  requireDType("mulMat", b, ["f32"]);
  if (a.ne[0] !== b.ne[0] || b.ne[2] % a.ne[2] !== 0 || b.ne[3] % a.ne[3] !== 0) {
    throw new ShapeError(
      `mulMat: cannot multiply ${formatShape(a.ne)} by ${formatShape(b.ne)} ` +
        `(ne[0] must match; b's dims 2-3 must be multiples of a's)`,
    );
  }
  return new Tensor({
    dtype: "f32",
    ne: [a.ne[1], b.ne[1], b.ne[2], b.ne[3]],
    op: Op.mulMat,
    src: [a, b],
    // Slot 0 is the plan's prepack flag (node_table.ts); slot 1 asks for ggml's arithmetic.
    ...(options.ggml ? { params: [0, 1] } : {}),
  });
}
