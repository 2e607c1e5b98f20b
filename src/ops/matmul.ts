/**
 * Matrix multiplication with ggml's orientation and batch broadcasting.
 * @module
 */

import { ArgumentError, ShapeError } from "../errors.ts";
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
  /**
   * With `ggml`, compute as llama.cpp's CPU backend does by default on an x86 CPU with AVX2
   * (default false): there q4_0 and q4_K weights whose row count `a.ne[1]` is a multiple of 8
   * live in its CPU_REPACK buffer (8 rows interleaved) and multiply with other kernels
   * (`ggml_gemm_*_8x8` on `b`'s columns in groups of 4, `ggml_gemv_*_8x8` on the rest), which sum
   * in another order than `ggml: true` alone (llama.cpp run with `--no-repack`). The node takes
   * that order exactly where ggml's CPU backend would use those kernels (q4_0 or q4_K `a`, 2-D,
   * `a.ne[1] % 8 == 0`, `b.ne[3] == 1`, `b`'s rows contiguous); any other product computes as
   * with `ggml: true` alone, so a whole model can set it on every product. Requires `ggml`.
   */
  repack?: boolean;
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
  if (options.repack && !options.ggml) {
    throw new ArgumentError(
      "mulMat: option repack needs ggml: true (it picks among ggml's orders of summing)",
    );
  }
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
    // Slot 0 is the plan's prepack flag (node_table.ts); slot 1 asks for ggml's arithmetic:
    // 1 as ggml with plain weights, 2 as ggml with its repacked q4_0 / q4_K weights.
    ...(options.ggml ? { params: [0, options.repack ? 2 : 1] } : {}),
  });
}
