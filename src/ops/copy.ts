/**
 * Copies and gathers: `cont` (a contiguous copy), `cpy` (into an existing tensor, converting
 * f32 <-> f16, f32/f16 <-> q8_0/q4_0) `getRows` (an embedding lookup) and `setRows` (its scatter: writes into a KV cache).
 * @module
 */

import { DTypeError, ShapeError } from "../errors.ts";
import { Op } from "../op.ts";
import { formatShape, Tensor } from "../tensor.ts";
import { requireDType } from "./check.ts";
import { WEIGHT_DTYPES } from "../dtype.ts";
import { sameDims } from "./check.ts";
import { DTYPES } from "../dtype.ts";

/**
 * Refuses a copy whose source and destination share memory without being the same elements
 * in the same layout (as `cpy(transpose(s), s)`): the kernels copy in chunks across threads,
 * so such a copy would read elements it has already overwritten.
 */
function requireNoOverlap(a: Tensor, b: Tensor): void {
  if (a.memoryOwner !== b.memoryOwner) return;
  const aBegin = a.offsetInOwner, bBegin = b.offsetInOwner;
  const disjoint = aBegin + a.nbytes <= bBegin || bBegin + b.nbytes <= aBegin;
  const same = aBegin === bBegin && a.dtype === b.dtype && sameDims(a.ne, b.ne) &&
    sameDims(a.nb, b.nb);
  if (!disjoint && !same) {
    throw new ShapeError(
      `cpy: source ${a.label} and destination ${b.label} overlap in memory (bytes ` +
        `[${aBegin}, ${aBegin + a.nbytes}) and [${bBegin}, ${bBegin + b.nbytes}) of ` +
        `${a.memoryOwner.label}); copy through a separate tensor (cont) first`,
    );
  }
}

/** A contiguous copy of `a` (of a permuted or strided view, typically). */
export function cont(a: Tensor): Tensor {
  requireDType("cont", a, ["f32", "f16", "i32"]);
  return new Tensor({ dtype: a.dtype, ne: a.ne, op: Op.cont, src: [a] });
}

/**
 * Copies `a` into `b` (same element count; elements in row-major order), converting between
 * f32 and f16, or (on the CPU) quantizing f32/f16 rows into q8_0/q4_0 blocks and back, bit for
 * bit as `quantize`/`dequantize` (f16 through f32, as ggml does); a quantizing copy needs equal
 * row lengths and adjacent elements in a row. The result is a view of `b`: computing it writes
 * `b`'s memory.
 *
 * @example
 * ```ts
 * import { Context, cpy } from "../../mod.ts";
 * const ctx = new Context();
 * const cache = ctx.newTensor("f16", [64, 128]);
 * const written = cpy(ctx.newTensor("f32", [64, 128]), cache);
 * ```
 */
export function cpy(a: Tensor, b: Tensor): Tensor {
  if (a.nelements !== b.nelements) {
    throw new ShapeError(
      `cpy: ${formatShape(a.ne)} has ${a.nelements} elements, ${
        formatShape(b.ne)
      } has ${b.nelements}`,
    );
  }
  const converts: readonly string[] = DTYPES[a.dtype].convertsTo;
  if (!converts.includes(b.dtype)) {
    throw new DTypeError(
      `cpy: cannot copy ${a.dtype} into ${b.dtype} (${a.dtype} converts to ${converts.join(", ")})`,
    );
  }
  requireNoOverlap(a, b);
  if (DTYPES[a.dtype].quantized || DTYPES[b.dtype].quantized) {
    // A quantizing copy works row by row: equal row lengths, each row's elements adjacent.
    const rowsAdjacent = (t: Tensor): boolean => t.nb[0] === DTYPES[t.dtype].blockBytes;
    if (a.ne[0] !== b.ne[0] || !rowsAdjacent(a) || !rowsAdjacent(b)) {
      throw new ShapeError(
        `cpy: ${a.dtype} ${formatShape(a.ne)} -> ${b.dtype} ${
          formatShape(b.ne)
        } quantizes row by ` +
          `row: both need the same ne[0] and adjacent elements in a row (nb[0] one element or block)`,
      );
    }
  }
  return new Tensor({ dtype: b.dtype, ne: b.ne, nb: b.nb, op: Op.cpy, src: [a, b], viewSource: b });
}

/**
 * Gathers rows: `getRows(a[ne0, rows, B], indices[N, B] i32 or i64) -> [ne0, N, B]` f32 (i32
 * for an i32 `a`, as ggml), where output row n of batch b is row `indices[n, b]` of `a` (an
 * embedding lookup). Out-of-range indices are an error at compute time. i64 indices travel as
 * raw bytes (a Uint8Array over a BigInt64Array's buffer). `a` may be any dtype of `WEIGHT_DTYPES`: f32, f16, or bf16 and ggml's
 * block types (q8_0, q4_0, q4_1, q5_0, q5_1, q4_K, q5_K, q6_K; rows are dequantized exactly as
 * `dequantize` does).
 */
export function getRows(a: Tensor, indices: Tensor): Tensor {
  requireDType("getRows", a, [...WEIGHT_DTYPES, "i32"]);
  requireDType("getRows", indices, ["i32", "i64"]);
  if (a.ne[3] !== 1 || indices.ne[2] !== 1 || indices.ne[3] !== 1 || indices.ne[1] !== a.ne[2]) {
    throw new ShapeError(
      `getRows: rows ${formatShape(a.ne)} and indices ${formatShape(indices.ne)} do not match ` +
        `(a is [ne0, rows, B], indices [N, B])`,
    );
  }
  return new Tensor({
    // As ggml_get_rows: an i32 table gives i32 rows, every other one f32.
    dtype: a.dtype === "i32" ? "i32" : "f32",
    ne: [a.ne[0], indices.ne[0], a.ne[2], 1],
    op: Op.getRows,
    src: [a, indices],
  });
}

/**
 * Scatters rows into an existing tensor (ggml's `set_rows`): row `n` of batch `(b, c)` of
 * `rows` is written, converted, to row `indices[n, b, c]` of batch `(b, c)` of `target`, and the
 * result is `target` itself (a view of its memory, so later reads of it come after the write).
 * This is how a graph writes new tokens into a KV cache at positions given as an input, so that
 * one plan serves every position. `rows` is f32 or f16 `[ne0, N, B, C]`, `indices` i32 or i64
 * (raw bytes of a BigInt64Array) `[N, B, C]`,
 * `target` f32 or f16 `[ne0, R, B, C]` with any strides (a transposed view of a cache is fine).
 * As ggml's, the indices may be `[N, B', C']` with B' dividing B and C' dividing C: batch (b, c)
 * uses the indices of batch (b mod B', c mod C').
 * An index outside `[0, R)` is an error at compute time, before anything is written.
 *
 * @example
 * ```ts
 * import { Context, setRows } from "../../mod.ts";
 * const ctx = new Context();
 * const cache = ctx.newTensor("f16", [64, 512]); // 512 positions of 64 values
 * const k = ctx.newTensor("f32", [64, 4]); // 4 new tokens
 * const positions = ctx.newTensor("i32", [4]);
 * const written = setRows(cache, k, positions); // cache, after the 4 rows are written
 * console.log(written.ne); // [64, 512, 1, 1]
 * ```
 */
export function setRows(target: Tensor, rows: Tensor, indices: Tensor): Tensor {
  requireDType("setRows", target, ["f32", "f16"]);
  requireDType("setRows", rows, ["f32", "f16"]);
  requireDType("setRows", indices, ["i32", "i64"]);
  if (
    target.ne[0] !== rows.ne[0] || target.ne[2] !== rows.ne[2] || target.ne[3] !== rows.ne[3] ||
    indices.ne[0] !== rows.ne[1] || rows.ne[2] % indices.ne[1] !== 0 ||
    rows.ne[3] % indices.ne[2] !== 0 || indices.ne[3] !== 1
  ) {
    throw new ShapeError(
      `setRows: rows ${formatShape(rows.ne)} with indices ${formatShape(indices.ne)} do not ` +
        `fit target ${formatShape(target.ne)} (target [ne0, R, B, C], rows [ne0, N, B, C], ` +
        `indices [N, B', C'] with B' dividing B and C' dividing C)`,
    );
  }
  requireNoOverlap(rows, target);
  return new Tensor({
    dtype: target.dtype,
    ne: target.ne,
    nb: target.nb,
    op: Op.setRows,
    src: [rows, indices, target],
    viewSource: target,
  });
}
