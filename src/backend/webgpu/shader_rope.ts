/**
 * WGSL for rope (the CPU's `zig/kernels/rope.zig`), bit for bit: one thread per position and
 * rotated pair, over every head (the angle, its cos and sin are a position's and a pair's, as in
 * ggml's per-position cache), and one per element past nDims (copied); each thread reads every
 * input it writes over, so dst may alias src0. The angle follows ggml's f32 recurrence
 * `theta *= theta_scale`, divided by the pair's frequency factor, then YaRN's mix of interpolated
 * and extrapolated angles over the corr dims (ggml's rope_yarn, its contracted multiply-add one
 * `fma_exact`); cos and sin are glibc's (`wgsl_sincosf.ts`); the rotation is GCC's contraction of
 * ggml's `x0*cos - x1*sin` and `x0*sin + x1*cos` (the first product fused).
 * @module
 */

import { flatKernel, PARAMS_WGSL, tensorBindings } from "./wgsl_common.ts";
import { EXACT_WGSL } from "./wgsl_exact.ts";
import { SINCOSF_WGSL } from "./wgsl_sincosf.ts";

/** How a rope kernel pairs dimensions (ggml's modes 0 and 2). */
export type RopeKind = "normal" | "neox";

/**
 * `P.u.x` items: nDims/2 pairs per position (i2, i3), then ne0 - nDims copies per row of S0.
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
${EXACT_WGSL}
${SINCOSF_WGSL}
${
    flatKernel(`  let nd = u32(P.f.x);
  let half = nd / 2u;
  let ne = P.t[1].ne;
  let rotations = half * ne.z * ne.w;
  if (i >= rotations) {
    // Elements nd.. of every row pass through.
    let rest = ne.x - nd;
    let j = i - rotations;
    let e = row_coords(1u, j / rest) + vec4<u32>(nd + j % rest, 0u, 0u, 0u);
    D_set_f32(at(0u, e), S0_f32(at(1u, e)));
    return;
  }
  let k = i % half;
  let i2 = (i / half) % ne.z;
  let i3 = i / (half * ne.z);
  var theta = f32(bitcast<i32>(S1_bits(at(2u, vec4<u32>(i2, 0u, 0u, 0u)))));
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
    angle = fma_exact(interp, 1.0 - mix, extrap * mix);
  }
  let c = glibc_cosf(angle) * P.g.x;
  let s = glibc_sinf(angle) * P.g.x;
  let p = ${pair};
  for (var i1 = 0u; i1 < ne.y; i1 = i1 + 1u) {
    let e0 = vec4<u32>(p.x, i1, i2, i3);
    let e1 = vec4<u32>(p.y, i1, i2, i3);
    let x0 = S0_f32(at(1u, e0));
    let x1 = S0_f32(at(1u, e1));
    D_set_f32(at(0u, e0), fma_exact(x0, c, -(x1 * s)));
    D_set_f32(at(0u, e1), fma_exact(x0, s, x1 * c));
  }`)
  }`;
}
