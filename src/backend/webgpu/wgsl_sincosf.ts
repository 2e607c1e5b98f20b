/**
 * WGSL for the C library's `sinf` and `cosf` as the CPU backend calls them for rope (and ggml
 * does): glibc 2.28 to 2.40's (sysdeps/ieee754/flt-32 s_sinf.c, s_cosf.c, s_sincosf.h,
 * sincosf_poly.h, s_sincosf_data.c, from Arm's optimized routines). They are not correctly
 * rounded (1.4% of rope's angles at SmolLM2's base differ from the nearest float), so the WebGPU
 * rope follows their algorithm: the reduction by pi/2 (one multiply-subtract below 120, the
 * 192-bit table of 4/pi and 64-bit integer products above) and the same polynomials, their double
 * arithmetic carried out in float-float (about 46 bits; `EXACT_WGSL`). The result is glibc's
 * float except where its double result lies within about 2^-44 of a halfway point between two
 * floats (none among the 262,144 angles of tests/webgpu_exact_test.ts).
 * @module
 */

import { ffLiteral, hexDouble, hexF32, splitF64 } from "./wgsl_exact.ts";

// s_sincosf_data.c's table (the second entry negates the cosine polynomial) and constants.
const C0 = 1, C1 = -hexDouble("0x1.ffffffd0c621cp-2"), C2 = hexDouble("0x1.55553e1068f19p-5");
const C3 = -hexDouble("0x1.6c087e89a359dp-10"), C4 = hexDouble("0x1.99343027bf8c3p-16");
const S1 = -hexDouble("0x1.555545995a603p-3"),
  S2 = hexDouble("0x1.1107605230bc4p-7"),
  S3 = -hexDouble("0x1.994eb3774cf24p-13");
const HPI = hexDouble("0x1.921FB54442D18p0");
const HPI_INV = hexDouble("0x1.45F306DC9C883p-1");
const PI63 = hexDouble("0x1.921FB54442D18p-62");
const INV_PIO4 = [
  0xa2,
  0xa2f9,
  0xa2f983,
  0xa2f9836e,
  0xf9836e4e,
  0x836e4e44,
  0x6e4e4415,
  0x4e441529,
  0x441529fc,
  0x1529fc27,
  0x29fc2757,
  0xfc2757d1,
  0x2757d1f5,
  0x57d1f534,
  0xd1f534dd,
  0xf534ddc0,
  0x34ddc0db,
  0xddc0db62,
  0xc0db6295,
  0xdb629599,
  0x6295993c,
  0x95993c43,
  0x993c4390,
  0x3c439041,
];
const [H1, H2, H3] = splitF64(HPI, 3) as [number, number, number];

/**
 * `glibc_sinf(y)`, `glibc_cosf(y)` (needs `PARAMS_WGSL` and `EXACT_WGSL` before it). NaN and
 * infinities give NaN, as glibc's (which also sets errno).
 */
export const SINCOSF_WGSL = `
const INV_PIO4 = array<u32, 24>(${INV_PIO4.map((w) => `${w}u`).join(", ")});

// sincosf_poly.h's sinf_poly: the sine polynomial for an even quadrant, else the cosine's
// (negated with the table's second entry, \`negate\`); the double result rounded to float.
fn glibc_sinf_poly(x: vec2<f32>, x2: vec2<f32>, negate: bool, odd: bool) -> f32 {
  if (!odd) {
    let x3 = ff_mul(x, x2);
    let s1 = ff_join(${ffLiteral(S2)}, ff_mul(x2, ${ffLiteral(S3)}));
    let x7 = ff_mul(x3, x2);
    let s = ff_join(x, ff_mul(x3, ${ffLiteral(S1)}));
    return ff_join(s, ff_mul(x7, s1)).x;
  }
  let g = select(1.0, -1.0, negate);
  let x4 = ff_mul(x2, x2);
  let c2 = ff_join(${ffLiteral(C3)} * g, ff_mul(x2, ${ffLiteral(C4)} * g));
  let c1 = ff_join(${ffLiteral(C0)} * g, ff_mul(x2, ${ffLiteral(C1)} * g));
  let x6 = ff_mul(x4, x2);
  let c = ff_join(c1, ff_mul(x4, ${ffLiteral(C2)} * g));
  return ff_join(c, ff_mul(x6, c2)).x;
}

// s_sincosf.h's reduce_fast (|y| < 120): n = the nearest quadrant, x - n * hpi with hpi the
// double pi/2 (its three f32 parts times n are exact).
fn glibc_reduce_fast(y: f32) -> vec3<f32> {
  let r = ff_mul(vec2<f32>(y, 0.0), ${ffLiteral(HPI_INV)});
  let whole = floor(r.x);
  let rest = ff_join(r, vec2<f32>(-whole, 0.0));
  let n = whole + select(0.0, 1.0, rest.x + rest.y >= 0.5);
  let p1 = two_prod(n, ${hexF32(H1)});
  var x = ff_join(vec2<f32>(y, 0.0), -p1);
  let p2 = two_prod(n, ${hexF32(H2)});
  x = ff_join(x, -p2);
  x = ff_join(x, vec2<f32>(-(n * ${hexF32(H3)}), 0.0));
  return vec3<f32>(x, n);
}

// (lo, hi) words of the 64-bit product a * b.
fn mul_wide(a: u32, b: u32) -> vec2<u32> {
  let a0 = a & 0xffffu;
  let a1 = a >> 16u;
  let b0 = b & 0xffffu;
  let b1 = b >> 16u;
  let p00 = a0 * b0;
  let p01 = a0 * b1;
  let p10 = a1 * b0;
  let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
  return vec2<u32>((p00 & 0xffffu) | (mid << 16u), a1 * b1 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u));
}

// s_sincosf.h's reduce_large (|y| >= 120): the 2.62 fixed-point product of the mantissa by 4/pi
// modulo 4, its quadrant n, and the remainder (a signed 64-bit integer) times 2pi * 2^-64.
fn glibc_reduce_large(bits: u32) -> vec3<f32> {
  let at = (bits >> 26u) & 15u;
  let xi = ((bits & 0xffffffu) | 0x800000u) << ((bits >> 23u) & 7u);
  let low = xi * INV_PIO4[at];
  let r1 = mul_wide(xi, INV_PIO4[at + 4u]);
  let r2 = mul_wide(xi, INV_PIO4[at + 8u]);
  // res0 = (res2 >> 32) | (low << 32), plus res1.
  let lo = r2.y + r1.x;
  var hi = low + r1.y + select(0u, 1u, lo < r2.y);
  let n = (hi + 0x20000000u) >> 30u;
  hi = hi - (n << 30u);
  // The signed 64-bit value hi:lo in three exact f32 parts.
  let top = f32(bitcast<i32>(hi) >> 8u) * 1099511627776.0;
  let middle = f32(((hi & 0xffu) << 16u) | (lo >> 16u)) * 65536.0;
  let bottom = f32(lo & 0xffffu);
  let v = ff_add(two_sum(top, middle), bottom);
  return vec3<f32>(ff_mul(v, ${ffLiteral(PI63)}), f32(n));
}

// sinf (cosf when \`cosine\`) of y.
fn glibc_sincosf(y: f32, cosine: bool) -> f32 {
  let bits = bitcast<u32>(y);
  let top = (bits >> 20u) & 0x7ffu;
  if (top < 0x3f4u) {
    if (top < 0x398u) {
      return select(y, 1.0, cosine);
    }
    let x = vec2<f32>(y, 0.0);
    return glibc_sinf_poly(x, two_prod(y, y), false, cosine);
  }
  if (top >= 0x7f8u) {
    return y - y;
  }
  // The quadrant n picks the polynomial; n plus the sign (reduce_large works on |y|) picks
  // the sign of x and which table entry.
  var reduced: vec3<f32>;
  var n: u32;
  var signs: u32;
  if (top < 0x42fu) {
    reduced = glibc_reduce_fast(y);
    n = u32(i32(reduced.z));
    signs = n & 3u;
  } else {
    reduced = glibc_reduce_large(bits);
    n = u32(reduced.z);
    signs = (n + (bits >> 31u)) & 3u;
  }
  let x = reduced.xy;
  let s = select(1.0, -1.0, signs == 1u || signs == 2u);
  let odd = (n & 1u) == 1u;
  return glibc_sinf_poly(x * s, ff_mul(x, x), (signs & 2u) != 0u, odd != cosine);
}

fn glibc_sinf(y: f32) -> f32 {
  return glibc_sincosf(y, false);
}

fn glibc_cosf(y: f32) -> f32 {
  return glibc_sincosf(y, true);
}
`;
