/**
 * Which ops may write their result over their first source's memory, and the layout rule that
 * makes it safe. The planner asks {@link inPlaceRule} per op; the reasons below come from
 * reading the Zig kernels in `zig/kernels/`, which is where a wrong entry would corrupt data.
 * @module
 */

import { Op, type OpCode } from "../op.ts";
import type { Tensor } from "../tensor.ts";

/** Why an op can or cannot run in place (shown in plan reports and tests). */
export interface InPlaceRule {
  /** True when dst may alias src0 exactly (same dtype, shape and strides). */
  readonly safe: boolean;
  /** The kernel property that makes it safe or unsafe. */
  readonly reason: string;
}

const elementwise: InPlaceRule = {
  safe: true,
  // elementwise.zig: dst[i] depends only on src0[i] (and src1 at the broadcast index); each
  // chunk is loaded before the same chunk of dst is stored.
  reason: "each dst element depends only on the src0 element at the same index",
};

const rowRead: InPlaceRule = {
  safe: true,
  // norm.zig reduces the whole row (mean, variance) before scale_row writes it, chunk by chunk
  // at the index it just read; soft_max.zig reads chunk k of src0 before storing chunk k of dst
  // and its last pass reads only dst. Rows are split across threads, never within a row.
  reason: "the kernel reads each row element before writing the same element",
};

const RULES: ReadonlyMap<OpCode, InPlaceRule> = new Map<OpCode, InPlaceRule>([
  [Op.add, elementwise],
  [Op.sub, elementwise],
  [Op.mul, elementwise],
  [Op.div, elementwise],
  [Op.scale, elementwise],
  [Op.sqr, elementwise],
  [Op.sqrt, elementwise],
  [Op.gelu, elementwise],
  [Op.silu, elementwise],
  [Op.relu, elementwise],
  [Op.norm, rowRead],
  [Op.rmsNorm, rowRead],
  [Op.softmax, rowRead],
  // copy.zig uses memmove for the same-layout byte copy, so a cont onto itself is harmless;
  // with any other layout the same-layout check below already refuses it.
  [Op.cont, { safe: true, reason: "a same-layout copy is a memmove onto itself" }],
  [Op.mulMat, {
    safe: false,
    reason: "every dst element reads a whole row of src0 and of src1 (across threads)",
  }],
  [Op.getRows, { safe: false, reason: "dst row n reads src0 row indices[n], any row" }],
  [Op.repeat, { safe: false, reason: "dst element i reads src0 element i mod ne" }],
  [Op.sum, { safe: false, reason: "a reduction reads every src0 element for one dst element" }],
  [Op.mean, { safe: false, reason: "a reduction reads a whole row for one dst element" }],
  [Op.cpy, { safe: false, reason: "cpy writes its second source's memory, owning none" }],
]);

const UNLISTED: InPlaceRule = { safe: false, reason: "no in-place rule for this op" };

/**
 * The in-place rule of an op. Views and ops without an entry are never in place.
 *
 * @example
 * ```ts
 * import { inPlaceRule } from "./inplace.ts";
 * import { Op } from "../op.ts";
 * console.log(inPlaceRule(Op.silu).safe, inPlaceRule(Op.mulMat).safe); // true false
 * ```
 */
export function inPlaceRule(op: OpCode): InPlaceRule {
  return RULES.get(op) ?? UNLISTED;
}

/** Same dtype, shape and strides: element i is at the same byte in both. */
export function sameLayout(a: Tensor, b: Tensor): boolean {
  if (a.dtype !== b.dtype) return false;
  for (let d = 0; d < 4; d++) {
    if (a.ne[d] !== b.ne[d] || a.nb[d] !== b.nb[d]) return false;
  }
  return true;
}

/**
 * True when `other` reads exactly the bytes of `parent` at the same element indices, so an
 * element-local kernel that overwrites `parent` in place still reads each value before it
 * changes (e.g. `add(p, p)`). Any other alias, such as a broadcast row of `parent`, would be
 * read after part of it has been overwritten.
 */
export function identicalAlias(parent: Tensor, other: Tensor): boolean {
  return other.memoryOwner === parent.memoryOwner &&
    other.offsetInOwner === parent.offsetInOwner && sameLayout(parent, other);
}
