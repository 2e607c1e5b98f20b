/**
 * WGSL for rope (the CPU's `zig/kernels/rope.zig`): one thread per rotated pair, and one per
 * element past nDims (copied), so each thread reads every input it writes over and dst may alias
 * src0. The angle follows ggml's f32 recurrence `theta *= theta_scale` (WGSL's f32 product is
 * correctly rounded, so without frequency factors and YaRN the angles are the CPU's bit for bit;
 * WGSL's division (2.5 ulp) and fma (fused or not, as the device does it) make those within an
 * ulp or two), divided by the pair's frequency factor, then YaRN's mix of interpolated and
 * extrapolated angles over the corr dims (ggml's rope_yarn); cos and sin are taken after a
 * Cody-Waite reduction by pi/2 with Cephes' single-precision polynomials, because WGSL's
 * built-ins only promise an absolute 2^-11 within [-pi, pi] and angles reach thousands.
 * @module
 */

import { flatKernel, PARAMS_WGSL, tensorBindings } from "./wgsl_common.ts";

/** How a rope kernel pairs dimensions (ggml's modes 0 and 2). */
export type RopeKind = "normal" | "neox";

const SINCOS_WGSL = `
// (cos x, sin x): x = r + j pi/2 with pi/2 split in three (the first two parts have few bits,
// so j * part is exact for |j| < 2^13), then degree-7/8 polynomials on |r| <= pi/4 (Cephes sinf
// and cosf, about an ulp).
fn rope_cos_sin(x: f32) -> vec2<f32> {
  let j = round(x * 0.63661977236758134);
  var r = x - j * 1.5703125;
  r = r - j * 4.837512969970703125e-4;
  r = r - j * 7.54978995489188216e-8;
  let z = r * r;
  let s = r + r * z * (-1.6666654611e-1 + z * (8.3321608736e-3 + z * -1.9515295891e-4));
  let c = 1.0 - 0.5 * z +
    z * z * (4.166664568298827e-2 + z * (-1.388731625493765e-3 + z * 2.443315711809948e-5));
  let q = ((i32(j) % 4) + 4) % 4;
  if (q == 0) {
    return vec2<f32>(c, s);
  }
  if (q == 1) {
    return vec2<f32>(-s, c);
  }
  if (q == 2) {
    return vec2<f32>(-c, -s);
  }
  return vec2<f32>(s, -c);
}
`;

/**
 * `P.u.x` items: per row of S0, nDims/2 pairs then ne0 - nDims copies (ne0 - nDims/2 a row).
 * `P.f`: nDims, theta_scale (ggml's powf, rounded to f32 on the host), freqScale, extFactor;
 * `P.g`: the scale of cos and sin, YaRN's corr dims (low, high). `dtype` is src0's and dst's;
 * with `factors` S2 holds the f32 frequency factors.
 */
export function ropeShader(kind: RopeKind, dtype: "f32" | "f16", factors: boolean): string {
  const pair = kind === "normal" ? "vec2<u32>(2u * k, 2u * k + 1u)" : "vec2<u32>(k, k + half)";
  const sources = factors ? [dtype, "i32", "f32"] as const : [dtype, "i32"] as const;
  const factor = factors ? "S2_f32(at(3u, vec4<u32>(k, 0u, 0u, 0u)))" : "1.0";
  return `${PARAMS_WGSL}
${tensorBindings(dtype, sources)}
${SINCOS_WGSL}
${
    flatKernel(`  let nd = u32(P.f.x);
  let half = nd / 2u;
  let per_row = P.t[1].ne.x - half;
  let rc = row_coords(1u, i / per_row);
  let u = i % per_row;
  if (u >= half) {
    let e = rc + vec4<u32>(nd + u - half, 0u, 0u, 0u);
    D_set_f32(at(0u, e), S0_f32(at(1u, e)));
    return;
  }
  let k = u;
  var theta = f32(bitcast<i32>(S1_bits(at(2u, vec4<u32>(rc.z, 0u, 0u, 0u)))));
  for (var step = 0u; step < k; step = step + 1u) {
    theta = theta * P.f.y;
  }
  let extrap = theta / ${factor};
  let interp = P.f.z * extrap;
  var angle = interp;
  if (P.f.w != 0.0) {
    // rope_yarn_ramp with C's MAX and MIN (the second operand when the comparison fails).
    let width = select(P.g.z - P.g.y, 0.001, 0.001 > P.g.z - P.g.y);
    let y = (f32(k) - P.g.y) / width;
    let clamped = select(select(y, 0.0, 0.0 > y), 1.0, 1.0 < select(y, 0.0, 0.0 > y));
    let mix = (1.0 - clamped) * P.f.w;
    angle = fma(interp, 1.0 - mix, extrap * mix);
  }
  let cs = rope_cos_sin(angle) * P.g.x;
  let p = ${pair};
  let e0 = rc + vec4<u32>(p.x, 0u, 0u, 0u);
  let e1 = rc + vec4<u32>(p.y, 0u, 0u, 0u);
  let x0 = S0_f32(at(1u, e0));
  let x1 = S0_f32(at(1u, e1));
  D_set_f32(at(0u, e0), x0 * cs.x - x1 * cs.y);
  D_set_f32(at(0u, e1), x0 * cs.y + x1 * cs.x);`)
  }`;
}
