/** Build-time checks shared by the op builders. Every message names the op and the shapes. */

import type { DType } from "../dtype.ts";
import { DTypeError, ShapeError } from "../errors.ts";
import { type Dims, formatShape, type Tensor } from "../tensor.ts";

export function requireDType(op: string, tensor: Tensor, allowed: readonly DType[]): void {
  if (!allowed.includes(tensor.dtype)) {
    throw new DTypeError(
      `${op}: ${tensor.label} has dtype ${tensor.dtype}; ${op} takes ${allowed.join(" or ")}`,
    );
  }
}

export function requireSameShape(op: string, a: Tensor, b: Tensor): void {
  if (!sameDims(a.ne, b.ne)) {
    throw new ShapeError(`${op}: shapes ${formatShape(a.ne)} and ${formatShape(b.ne)} differ`);
  }
}

export function sameDims(a: Dims, b: Dims): boolean {
  return a[0] === b[0] && a[1] === b[1] && a[2] === b[2] && a[3] === b[3];
}

/** ggml_can_repeat: `small` tiles `large` exactly in every dimension. */
export function canRepeat(small: Dims, large: Dims): boolean {
  return large.every((n, d) => n % small[d]! === 0);
}

export function requireRepeatable(op: string, small: Tensor, large: Tensor): void {
  if (!canRepeat(small.ne, large.ne)) {
    throw new ShapeError(
      `${op}: ${formatShape(small.ne)} does not tile ${formatShape(large.ne)} ` +
        `(each dimension of the second must be a multiple of the first's)`,
    );
  }
}

export function requireFinite(op: string, name: string, value: number): void {
  if (!Number.isFinite(value)) throw new ShapeError(`${op}: ${name} must be finite, got ${value}`);
}
