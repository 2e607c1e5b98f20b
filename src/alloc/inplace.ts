/**
 * Which ops may write their result over their first source's memory, and the layout rule that
 * makes it safe. The planner asks {@link inPlaceRule} per op; the rules live in the op table
 * (`src/op.ts`), with reasons that come from reading the Zig kernels in `zig/kernels/`.
 * @module
 */

import { type InPlaceRule, type OpCode, opInfo } from "../op.ts";
import type { Tensor } from "../tensor.ts";

export type { InPlaceRule };

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
  return opInfo(op).inPlace;
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
