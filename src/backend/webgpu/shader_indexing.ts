/**
 * WGSL for the shape and indexing ops (`src/ops/indexing.ts`, `src/ops/sort.ts`): one thread
 * per destination element (per source element for the sorts). The moving ops copy bits, so
 * they match the CPU exactly for f32, f16 and i32; whole-number params arrive as f32 in `P.f`
 * (exact below 2^24, which kernels.ts checks).
 *
 * The sorts rank each element by counting the elements of its row that come before it (a
 * stable order, NaN above every number, as kernels/sort.zig): O(n^2) per row, fine for the
 * rows of masks and routing logits, slow for a vocabulary-sized row.
 * @module
 */

import type { DType } from "../../dtype.ts";
import { flatKernel, PARAMS_WGSL, tensorBindings } from "./wgsl_common.ts";

/** The shape and indexing kernels of this file. */
export type IndexingKind =
  | "concat"
  | "pad"
  | "padCircular"
  | "padReflect1d"
  | "roll"
  | "tri"
  | "diagMaskInf"
  | "fill"
  | "arange"
  | "repeatBack";

const bodies: Readonly<Record<IndexingKind, string>> = {
  // P.f.x: dim. Elements past src0's extent in dim come from src1.
  concat: `  var c = coords(0u, i);
  let dim = u32(P.f.x);
  let extent = P.t[1].ne[dim];
  if (c[dim] < extent) {
    D_set_bits(at(0u, c), S0_bits(at(1u, c)));
  } else {
    var s = c;
    s[dim] = s[dim] - extent;
    D_set_bits(at(0u, c), S1_bits(at(2u, s)));
  }`,
  // P.f: the left pads of dims 0-3 (the right pads are what dst adds beyond them).
  pad: `  let c = coords(0u, i);
  let left = vec4<u32>(u32(P.f.x), u32(P.f.y), u32(P.f.z), u32(P.f.w));
  var v = 0u;
  if (all(c >= left) && all(c - left < P.t[1].ne)) {
    v = S0_bits(at(1u, c - left));
  }
  D_set_bits(at(0u, c), v);`,
  // P.f: the left pads of dims 0-3; every coordinate wraps around src0 (ggml_wrap_around; WGSL's
  // i32 % keeps the dividend's sign, hence the second %).
  padCircular: `  let c = coords(0u, i);
  let ne = vec4<i32>(P.t[1].ne);
  let left = vec4<i32>(i32(P.f.x), i32(P.f.y), i32(P.f.z), i32(P.f.w));
  let s = vec4<u32>(((vec4<i32>(c) - left) % ne + ne) % ne);
  D_set_bits(at(0u, c), S0_bits(at(1u, s)));`,
  // P.f.x: p0. [a, b, c, d] with p0 = p1 = 1 -> [b, a, b, c, d, c].
  padReflect1d: `  let c = coords(0u, i);
  let p0 = u32(P.f.x);
  let n = P.t[1].ne.x;
  var j = 0u;
  if (c.x < p0) {
    j = p0 - c.x;
  } else if (c.x < p0 + n) {
    j = c.x - p0;
  } else {
    j = 2u * (n - 1u) - (c.x - p0);
  }
  D_set_bits(at(0u, c), S0_bits(at(1u, vec4<u32>(j, c.y, c.z, c.w))));`,
  // P.f: the shifts of dims 0-3, |shift| < ne.
  roll: `  let c = coords(0u, i);
  let ne = vec4<i32>(P.t[1].ne);
  let shift = vec4<i32>(i32(P.f.x), i32(P.f.y), i32(P.f.z), i32(P.f.w));
  let s = vec4<u32>((vec4<i32>(c) - shift + ne) % ne);
  D_set_bits(at(0u, c), S0_bits(at(1u, s)));`,
  // P.f.x: ggml_tri_type (0 upper_diag, 1 upper, 2 lower_diag, 3 lower).
  tri: `  let c = coords(0u, i);
  let kind = u32(P.f.x);
  var keep = c.x < c.y;
  if (kind == 0u) {
    keep = c.x >= c.y;
  } else if (kind == 1u) {
    keep = c.x > c.y;
  } else if (kind == 2u) {
    keep = c.x <= c.y;
  }
  D_set_bits(at(0u, c), select(0u, S0_bits(at(1u, c)), keep));`,
  // P.f.x: n_past; column i of row j is -inf when i > n_past + j.
  diagMaskInf: `  let c = coords(0u, i);
  if (c.x > u32(P.f.x) + c.y) {
    D_set_f32(at(0u, c), neg_inf());
  } else {
    D_set_bits(at(0u, c), S0_bits(at(1u, c)));
  }`,
  // P.f.x: the value (rounded to nearest even for f16 by D_set_f32).
  fill: `  D_set_f32(at(0u, coords(0u, i)), P.f.x);`,
  // P.f.x: start, P.f.y: step.
  arange: `  let c = coords(0u, i);
  D_set_f32(at(0u, c), P.f.x + P.f.y * f32(c.x));`,
  // Compensated f32 sum over the tiles (the CPU sums in f64).
  repeatBack: `  let c = coords(0u, i);
  let ne = P.t[0].ne;
  let r = P.t[1].ne / ne;
  var sum = 0.0;
  var carry = 0.0;
  for (var t3 = 0u; t3 < r.w; t3 = t3 + 1u) {
    for (var t2 = 0u; t2 < r.z; t2 = t2 + 1u) {
      for (var t1 = 0u; t1 < r.y; t1 = t1 + 1u) {
        for (var t0 = 0u; t0 < r.x; t0 = t0 + 1u) {
          let y = S0_f32(at(1u, c + ne * vec4<u32>(t0, t1, t2, t3))) - carry;
          let t = sum + y;
          carry = (t - sum) - y;
          sum = t;
        }
      }
    }
  }
  D_set_f32(at(0u, c), sum);`,
};

/** `kind`'s shader for destination dtype `dst` and source dtypes `sources`. */
export function indexingShader(kind: IndexingKind, dst: DType, sources: readonly DType[]): string {
  return `${PARAMS_WGSL}
${tensorBindings(dst, sources)}
${flatKernel(bodies[kind])}`;
}

/** The sorts: `argsort` (P.f.x: 0 ascending, 1 descending) and `topK` (descending, k = D's ne0). */
export type SortKind = "argsort" | "topK";

/**
 * One thread per element of S0: its rank in its row (elements strictly before it, then equal
 * ones with a lower column) is where its column index goes in D.
 */
export function sortShader(kind: SortKind, src: DType): string {
  const descending = kind === "topK" ? "true" : "P.f.x > 0.5";
  return `${PARAMS_WGSL}
${tensorBindings("i32", [src])}
fn is_nan(v: f32) -> bool {
  return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}
// x strictly before y in the row's order (NaN above every number).
fn before(x: f32, y: f32, descending: bool) -> bool {
  if (descending) {
    return x > y || (is_nan(x) && !is_nan(y));
  }
  return x < y || (!is_nan(x) && is_nan(y));
}
${
    flatKernel(`  let c = coords(1u, i);
  let n = P.t[1].ne.x;
  let descending = ${descending};
  let x = S0_f32(at(1u, c));
  var rank = 0u;
  for (var j = 0u; j < n; j = j + 1u) {
    let y = S0_f32(at(1u, vec4<u32>(j, c.y, c.z, c.w)));
    if (before(y, x, descending) || (j < c.x && !before(x, y, descending))) {
      rank = rank + 1u;
    }
  }
  if (rank < P.t[0].ne.x) {
    D_set_bits(at(0u, vec4<u32>(rank, c.y, c.z, c.w)), c.x);
  }`)
  }`;
}
