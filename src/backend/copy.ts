/** Checks shared by tensor copies between backends. */

import { ShapeError } from "../errors.ts";
import { formatShape, type Tensor } from "../tensor.ts";
import { sameDims } from "../ops/check.ts";

/** Tensor copies are raw bytes: both tensors need the same dtype, shape and strides. */
export function requireSameLayout(verb: string, src: Tensor, dst: Tensor): void {
  if (src.dtype !== dst.dtype || !sameDims(src.ne, dst.ne) || !sameDims(src.nb, dst.nb)) {
    throw new ShapeError(
      `${verb}: layouts differ: ${src.dtype} ${formatShape(src.ne)} strides ${src.nb.join(",")} ` +
        `vs ${dst.dtype} ${formatShape(dst.ne)} strides ${dst.nb.join(",")}`,
    );
  }
}
