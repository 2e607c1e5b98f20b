/**
 * Gated linear units, as ggml's GGML_OP_GLU defines them (`ggml_glu`, `ggml_glu_split`):
 * `act(x) * g`. Given one tensor, each row is split in half: x is the first half and g the
 * second (`swapped` exchanges them), as `ggml_swiglu(ctx, a)`; given two, x = a and g = b, as
 * `ggml_swiglu_split(ctx, a, b)`. The unit is built from its activation, views and `mul`, so
 * every backend that runs those runs it; the CPU plan fuses silu · mul into one kernel.
 * @module
 */

import { ShapeError } from "../errors.ts";
import { formatShape, type Tensor } from "../tensor.ts";
import { gelu, mul, relu, silu } from "./elementwise.ts";
import { geluErf, geluQuick } from "./unary.ts";
import { view } from "./view.ts";

/** The gate activations of ggml's GLU ops (ggml_reglu, ggml_geglu, ggml_swiglu, ...). */
export type GluKind = "reglu" | "geglu" | "swiglu" | "gegluErf" | "gegluQuick";

/** Options of {@link glu}. */
export interface GluOptions {
  /** With one tensor: the activation takes the second half of each row, the gate the first. */
  swapped?: boolean;
}

const ACTIVATIONS: Readonly<Record<GluKind, (a: Tensor) => Tensor>> = {
  reglu: relu,
  geglu: gelu,
  swiglu: silu,
  gegluErf: geluErf,
  gegluQuick: geluQuick,
};

/**
 * `act(x) * g` for the GLU `kind`. With `b`, x = `a` and g = `b` (same shape); without, the
 * rows of `a` (an even `ne[0]`) are split into x and g, and the result has half their width.
 *
 * @example
 * ```ts
 * import { Context, glu } from "../../mod.ts";
 * const ctx = new Context();
 * const h = ctx.newTensor("f32", [2 * 1536, 4]); // gate and up projections side by side
 * console.log(glu(h, "swiglu").ne); // [1536, 4, 1, 1]
 * ```
 */
export function glu(a: Tensor, kind: GluKind, b?: Tensor, options: GluOptions = {}): Tensor {
  const activation = ACTIVATIONS[kind];
  if (!activation) throw new ShapeError(`glu: kind ${String(kind)} is not a GLU kind`);
  if (b) {
    if (options.swapped) {
      throw new ShapeError(`${kind}: swapped applies to one tensor split in half, not to two`);
    }
    if (a.ne.some((n, d) => n !== b.ne[d])) {
      throw new ShapeError(
        `${kind}: a ${formatShape(a.ne)} and b ${formatShape(b.ne)} must have one shape`,
      );
    }
    return mul(activation(a), b);
  }
  if (a.ne[0] % 2 !== 0) {
    throw new ShapeError(`${kind}: a ${formatShape(a.ne)} needs an even ne[0] to split in half`);
  }
  const half = a.ne[0] / 2;
  const shape = [half, a.ne[1], a.ne[2], a.ne[3]] as const;
  const first = view(a, shape, { nb: a.nb, offset: 0 });
  const second = view(a, shape, { nb: a.nb, offset: half * a.nb[0] });
  const [x, g] = options.swapped ? [second, first] : [first, second];
  return mul(activation(x), g);
}

/** `silu(x) * g` ({@link glu} with "swiglu"): the feed-forward gate of llama-family models. */
export function swiglu(a: Tensor, b?: Tensor, options: GluOptions = {}): Tensor {
  return glu(a, "swiglu", b, options);
}

/** `gelu(x) * g` ({@link glu} with "geglu", gelu's tanh form). */
export function geglu(a: Tensor, b?: Tensor, options: GluOptions = {}): Tensor {
  return glu(a, "geglu", b, options);
}

/** `relu(x) * g` ({@link glu} with "reglu"). */
export function reglu(a: Tensor, b?: Tensor, options: GluOptions = {}): Tensor {
  return glu(a, "reglu", b, options);
}
