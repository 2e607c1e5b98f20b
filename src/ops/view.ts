/**
 * Views: tensors that describe part or a rearrangement of another tensor's memory. They own no
 * memory, are never computed, and keep their source alive in the planner.
 * @module
 */

import { DTYPES } from "../dtype.ts";
import { ShapeError } from "../errors.ts";
import { Op } from "../op.ts";
import { type Dims, formatShape, Tensor } from "../tensor.ts";
import { type Shape, toDims } from "../context.ts";

/**
 * A view of `a`'s memory with shape `shape`, byte strides `nb` (default: contiguous) starting
 * `offset` bytes into `a`. The view must lie within `a`'s memory.
 */
export function view(
  a: Tensor,
  shape: Shape,
  options: { nb?: Dims; offset?: number } = {},
): Tensor {
  const ne = toDims(shape);
  const offset = options.offset ?? 0;
  const t = new Tensor({
    dtype: a.dtype,
    ne,
    ...(options.nb ? { nb: options.nb } : {}),
    op: Op.view,
    src: [a],
    viewSource: a,
    viewOffset: offset,
  });
  if (!Number.isInteger(offset) || offset < 0 || offset + t.nbytes > a.nbytes) {
    throw new ShapeError(
      `view: ${formatShape(ne)} at byte offset ${offset} does not lie within ${a.label} ` +
        `(${a.nbytes} bytes)`,
    );
  }
  if (options.nb && options.nb[0] % DTYPES[a.dtype].blockBytes !== 0) {
    throw new ShapeError(
      `view: stride nb[0]=${options.nb[0]} is not a multiple of the element size`,
    );
  }
  return t;
}

/** `a` with a new shape of the same element count; `a` must be contiguous. */
export function reshape(a: Tensor, shape: Shape): Tensor {
  const ne = toDims(shape);
  const count = ne[0] * ne[1] * ne[2] * ne[3];
  if (count !== a.nelements) {
    throw new ShapeError(
      `reshape: ${a.label} has ${a.nelements} elements, ${formatShape(ne)} has ${count}`,
    );
  }
  if (!a.isContiguous) {
    throw new ShapeError(`reshape: ${a.label} is not contiguous; use cont() first`);
  }
  return new Tensor({ dtype: a.dtype, ne, op: Op.reshape, src: [a], viewSource: a });
}

/**
 * Reorders dimensions: source dimension `i` becomes dimension `axes[i]` (ggml_permute).
 *
 * @example
 * ```ts
 * import { Context, permute } from "../../mod.ts";
 * const ctx = new Context();
 * const q = ctx.newTensor("f32", [64, 12, 128]); // head_dim, heads, tokens
 * console.log(permute(q, [0, 2, 1, 3]).ne); // [64, 128, 12, 1]
 * ```
 */
export function permute(a: Tensor, axes: readonly [number, number, number, number]): Tensor {
  const sorted = [...axes].sort();
  if (sorted.join() !== "0,1,2,3") {
    throw new ShapeError(`permute: axes ${JSON.stringify(axes)} are not a permutation of 0..3`);
  }
  const ne = [1, 1, 1, 1];
  const nb = [0, 0, 0, 0];
  for (let i = 0; i < 4; i++) {
    ne[axes[i]!] = a.ne[i]!;
    nb[axes[i]!] = a.nb[i]!;
  }
  return new Tensor({
    dtype: a.dtype,
    ne: ne as unknown as Dims,
    nb: nb as unknown as Dims,
    op: Op.permute,
    src: [a],
    params: [...axes],
    viewSource: a,
  });
}

/** Swaps dimensions 0 and 1. */
export function transpose(a: Tensor): Tensor {
  const t = permute(a, [1, 0, 2, 3]);
  return new Tensor({
    dtype: t.dtype,
    ne: t.ne,
    nb: t.nb,
    op: Op.transpose,
    src: [a],
    viewSource: a,
  });
}
