/**
 * WGSL for ggml-cpu's exact arithmetic (the functions that `zig/kernels/common.zig` calls
 * ggml's): a fused multiply-add with one rounding, error-free sums and products, float-float
 * sums standing in for ggml's f64 totals, and ggml_v_expf / ggml_v_silu as ggml's AVX2 build
 * computes them. The WebGPU kernels of the ops llama.cpp's graph runs use them so that a model
 * gives the CPU backend's bits (which are ggml's): llama.cpp quantizes activations to q8 before
 * each product, so one ulp anywhere can flip a quant and grow over 30 layers.
 *
 * Two properties of the shader compiler matter, both measured on Mesa's lavapipe (the software
 * Vulkan of CI) by tests/webgpu_exact_test.ts:
 * - WGSL's `fma()` is not fused there (it gives `a * b + c` with two roundings), so the fused
 *   operation is emulated (Boldo and Melquiond's rounding to odd over Dekker's exact product).
 * - Mesa's NIR applies real-number identities to float arithmetic (`s - (s - a)` becomes `a`),
 *   which erase exactly the rounding errors these functions compute. Each such step goes through
 *   {@link EXACT_WGSL}'s `opaque`, an OR with a uniform word that is always 0
 *   (`P.t[0].off.w`, never written: the plan's uniform slots start zeroed), which the compiler
 *   cannot fold.
 *
 * Exact while no product or sum overflows or falls to subnormals (ggml's activations stay far
 * from both).
 * @module
 */

/**
 * The helpers (needs `PARAMS_WGSL` before it):
 * - `opaque(x)`: x, hidden from the compiler's algebra.
 * - `two_sum(a, b)`, `two_prod(a, b)`: (s, e) with a + b = s + e, a * b = s + e exactly.
 * - `fma_exact(a, b, c)`: a * b + c rounded once (x86's vfmadd).
 * - `ff_add(acc, x)`, `ff_join(a, b)`: float-float sums (hi, lo), about 48 bits: ggml's f64
 *   totals of f32 values, whose f32 roundings they give but where the total lies within about
 *   2^-40 of a rounding boundary (ggml rounds f64 totals to f32 before using them).
 * - `ff_mul(a, b)`: the float-float product (glibc's double arithmetic in the emulations).
 * - `ff_div_f32(acc, d)`, `ff_recip_f32(acc)`: (float)(total / d), (float)(1.0 / total).
 */
export const EXACT_WGSL = `
// x, through an operation the shader compiler cannot see through (P.t[0].off.w is always 0).
fn opaque(x: f32) -> f32 {
  return bitcast<f32>(bitcast<u32>(x) | P.t[0].off.w);
}

// Dekker's split of a into two halves of 12 significant bits, both exact.
fn exact_split(a: f32) -> vec2<f32> {
  let t = opaque(4097.0 * a);
  let hi = opaque(t - opaque(t - a));
  return vec2<f32>(hi, opaque(a - hi));
}

// a * b = p + e exactly.
fn two_prod(a: f32, b: f32) -> vec2<f32> {
  let p = opaque(a * b);
  let x = exact_split(a);
  let y = exact_split(b);
  let e = opaque(opaque(opaque(opaque(x.x * y.x) - p) + opaque(x.x * y.y)) + opaque(x.y * y.x)) +
    opaque(x.y * y.y);
  return vec2<f32>(p, e);
}

// a + b = s + e exactly (Knuth's TwoSum).
fn two_sum(a: f32, b: f32) -> vec2<f32> {
  let s = opaque(a + b);
  let bb = opaque(s - a);
  let e = opaque(a - opaque(s - bb)) + opaque(b - bb);
  return vec2<f32>(s, e);
}

// a + b rounded to odd: the nearest sum when exact, else of the two floats around the exact sum
// the one whose last bit is 1.
fn add_round_odd(a: f32, b: f32) -> f32 {
  let t = two_sum(a, b);
  let bits = bitcast<u32>(t.x);
  if (t.y == 0.0 || (bits & 1u) == 1u) {
    return t.x;
  }
  let away = ((bitcast<u32>(t.y) ^ bits) & 0x80000000u) == 0u;
  return bitcast<f32>(select(bits - 1u, bits + 1u, away));
}

// a * b + c with one rounding.
fn fma_exact(a: f32, b: f32, c: f32) -> f32 {
  let u = two_prod(a, b);
  let t = two_sum(c, u.x);
  return t.x + add_round_odd(t.y, u.y);
}

// Float-float (hi, lo) plus an f32, renormalized.
fn ff_add(acc: vec2<f32>, x: f32) -> vec2<f32> {
  let s = two_sum(acc.x, x);
  return two_sum(s.x, s.y + acc.y);
}

// The sum of two float-floats, renormalized.
fn ff_join(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
  let s = two_sum(a.x, b.x);
  return two_sum(s.x, opaque(s.y + a.y) + b.y);
}

// The product of two float-floats, renormalized.
fn ff_mul(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
  let p = two_prod(a.x, b.x);
  return two_sum(p.x, p.y + (a.x * b.y + a.y * b.x));
}

// (float)(total / d) for a float-float total: the quotient of hi, corrected by the remainder.
fn ff_div_f32(acc: vec2<f32>, d: f32) -> f32 {
  let q = acc.x / d;
  let p = two_prod(q, d);
  let r = opaque(opaque(acc.x - p.x) - p.y) + acc.y;
  return q + r / d;
}

// (float)(1.0 / total) for a float-float total.
fn ff_recip_f32(acc: vec2<f32>) -> f32 {
  let q = 1.0 / acc.x;
  let p = two_prod(q, acc.x);
  let r = opaque(opaque(1.0 - p.x) - p.y) - q * acc.y;
  return q + q * r;
}
`;

/** A C hexadecimal double literal's value ("0x1.921fb54442d18p0"): exact; JS has no such syntax. */
export function hexDouble(literal: string): number {
  const [, digits, exponent] = /^0x1\.([0-9a-f]+)p([-+]?\d+)$/i.exec(literal)!;
  return (1 + parseInt(digits!, 16) / 16 ** digits!.length) * 2 ** Number(exponent);
}

/** An f32 value as a WGSL hexadecimal float literal, exact (`v` must be a normal f32 or 0). */
export function hexF32(v: number): string {
  if (v === 0) return "0.0";
  const bits = new Uint32Array(new Float32Array([v]).buffer)[0]!;
  const exponent = ((bits >>> 23) & 0xff) - 127;
  const mantissa = ((bits & 0x7fffff) << 1).toString(16).padStart(6, "0");
  return `${bits >>> 31 ? "-" : ""}0x1.${mantissa}p${exponent}`;
}

/** A double split into f32s whose sum is the double (to about 2^-48, or exactly with three). */
export function splitF64(d: number, parts: 2 | 3): number[] {
  const out: number[] = [];
  let rest = d;
  for (let i = 0; i < parts; i++) {
    out.push(Math.fround(rest));
    rest -= out[i]!;
  }
  return out;
}

/** A float-float WGSL constant of a double. */
export function ffLiteral(d: number): string {
  const [hi, lo] = splitF64(d, 2);
  return `vec2<f32>(${hexF32(hi!)}, ${hexF32(lo!)})`;
}

// glibc's expf (sysdeps/ieee754/flt-32/e_expf.c and e_exp2f_data.c, glibc 2.27 on): 2^(i/32)
// for i < 32 as the bits of doubles, less i << 47 (the exponent's share the code adds back).
// deno-fmt-ignore
const GLIBC_EXP2F_TABLE = [
  0x3ff0000000000000n, 0x3fefd9b0d3158574n, 0x3fefb5586cf9890fn, 0x3fef9301d0125b51n,
  0x3fef72b83c7d517bn, 0x3fef54873168b9aan, 0x3fef387a6e756238n, 0x3fef1e9df51fdee1n,
  0x3fef06fe0a31b715n, 0x3feef1a7373aa9cbn, 0x3feedea64c123422n, 0x3feece086061892dn,
  0x3feebfdad5362a27n, 0x3feeb42b569d4f82n, 0x3feeab07dd485429n, 0x3feea47eb03a5585n,
  0x3feea09e667f3bcdn, 0x3fee9f75e8ec5f74n, 0x3feea11473eb0187n, 0x3feea589994cce13n,
  0x3feeace5422aa0dbn, 0x3feeb737b0cdc5e5n, 0x3feec49182a3f090n, 0x3feed503b23e255dn,
  0x3feee89f995ad3adn, 0x3feeff76f2fb5e47n, 0x3fef199bdd85529cn, 0x3fef3720dcef9069n,
  0x3fef5818dcfba487n, 0x3fef7c97337b9b5fn, 0x3fefa4afa2a490dan, 0x3fefd0765b6e4540n,
];
const GLIBC_N = 32;
const GLIBC_INV_LN2_N = hexDouble("0x1.71547652b82fep+0") * GLIBC_N;
const GLIBC_POLY = [
  hexDouble("0x1.c6af84b912394p-5") / GLIBC_N ** 3,
  hexDouble("0x1.ebfce50fac4f3p-3") / GLIBC_N ** 2,
  hexDouble("0x1.62e42ff0c52d6p-1") / GLIBC_N,
];

function glibcExp2Table(): string {
  const view = new DataView(new ArrayBuffer(8));
  const entries = GLIBC_EXP2F_TABLE.map((bits, i) => {
    view.setBigUint64(0, bits + (BigInt(i) << 47n));
    return ffLiteral(view.getFloat64(0));
  });
  return `array<vec2<f32>, ${GLIBC_N}>(\n  ${entries.join(",\n  ")},\n)`;
}

/**
 * ggml's exp and silu as its AVX2 build computes them, and the C library's expf that ggml calls
 * for a row's scalar tail (needs {@link EXACT_WGSL} before it):
 * - `ggml_v_expf(x)`: one lane of ggml_v_expf (AVX2 + FMA, ggml-cpu's vec.h; `zig/kernels/common.zig`
 *   `ggml_expf` with 8 lanes), its fused multiply-adds through `fma_exact`: bit for bit.
 * - `ggml_v_silu(x)`: one lane of ggml_v_silu, x / (1 + ggml_v_expf(0 - x)): bit for bit.
 * - `ggml_reduce_add8(lo, hi)`: the f32 sum of 8 lanes in the order of ggml's AVX2 horizontal
 *   adds (`ggml_reduce_add`): lane i plus lane i + 4, then (v0 + v2) + (v1 + v3).
 * - `expf_libc(x)`: glibc's expf (its algorithm since 2.27: a 32-entry table of 2^(i/32) and a
 *   cubic, in double), its double arithmetic carried in float-floats of about 48 bits: glibc's
 *   result except where glibc's double lies within about 2^-46 (relative) of the midpoint between
 *   two floats, subnormal results included.
 * - `ggml_silu_f32(x)`: ggml's scalar silu, x / (1 + expf(-x)) with `expf_libc`.
 */
export const GGML_EXP_WGSL = `
// 2^e for e in [-126, 127], exact.
fn pow2(e: i32) -> f32 {
  return bitcast<f32>(u32(e + 127) << 23u);
}

// One lane of ggml_v_expf, AVX2 + FMA (at most 1.95 ulp from e^x; +inf above 88.38, 0 below
// -103.97): n = x log2(e) rounded by adding 1.5 * 2^23, the remainder b = x - n ln2 in two fused
// steps, a degree-5 polynomial j = e^b - 1, then 2^n (1 + j); lanes with |n| > 126 scale in two
// halves. Where ggml's fused operations are exact or scale by a power of two, plain arithmetic
// gives their single rounding:
// - n ln2_hi is exact for |n| < 512 (ln2_hi has 15 significant bits; lanes with |n| > 192 do
//   not use b), so fnmadd(n, ln2_hi, x) is x - n ln2_hi.
// - fmadd(j, k, k) with k = 2^n is k (1 + j) rounded once: k times 1 + j rounded, unless the
//   result is subnormal (n = -126, j < 0), where 1 + j rounds at 2^-23: (2 + j) - 1.
// - fmadd(s2, j, s2) likewise is s2 (1 + j) (s2 is at least 2^-67).
fn ggml_v_expf(x: f32) -> f32 {
  if (abs(x) > 150.0) {
    // |n| > 192 (ggml's s1 * s1: +inf or 0), infinities included (fma_exact would give NaN).
    return select(0.0, -neg_inf(), x > 0.0);
  }
  let r = 0x1.8p23;
  let z = fma_exact(x, 0x1.715476p+0, r);
  let n = opaque(z) - r;
  let b = fma_exact(-n, 0x1.7f7d1cp-20, x - n * 0x1.62e4p-1);
  let u = b * b;
  let j = fma_exact(
    fma_exact(fma_exact(0x1.0e4020p-7, b, 0x1.573e2ep-5), u, fma_exact(0x1.555e66p-3, b, 0x1.fffdb6p-2)),
    u,
    0x1.ffffecp-1 * b,
  );
  let e = bitcast<u32>(z) << 23u;
  if (!(abs(n) > 126.0)) {
    let k = bitcast<f32>(e + 0x3f800000u);
    let subnormal = n == -126.0 && j < 0.0;
    return k * select(opaque(1.0 + j), opaque(2.0 + j) - 1.0, subnormal);
  }
  let g = select(0u, 0x82000000u, n <= 0.0);
  let s1 = bitcast<f32>(g + 0x7f000000u);
  if (abs(n) > 192.0) {
    return s1 * s1;
  }
  let s2 = bitcast<f32>(e - g);
  return (s2 * opaque(1.0 + j)) * s1;
}

// One lane of ggml_v_silu.
fn ggml_v_silu(x: f32) -> f32 {
  return x / (1.0 + ggml_v_expf(0.0 - x));
}

// The sum of lanes lo (0-3) and hi (4-7) in ggml's AVX2 order.
fn ggml_reduce_add8(lo: vec4<f32>, hi: vec4<f32>) -> f32 {
  let h = vec4<f32>(opaque(hi.x + lo.x), opaque(hi.y + lo.y), opaque(hi.z + lo.z), opaque(hi.w + lo.w));
  return opaque(h.x + h.z) + opaque(h.y + h.w);
}

// (s.x + s.y) * 2^e rounded once to f32 (subnormal results too), for a renormalized s with s.x
// in [1/2, 2] and e in [-150, 128].
fn ff_ldexp_f32(s: vec2<f32>, e: i32) -> f32 {
  if (e >= -125) {
    // s.x is (s.x + s.y) rounded; the scaling is exact, or overflows to +inf.
    let half = e / 2;
    return (s.x * pow2(half)) * pow2(e - half);
  }
  let m = pow2(e + 126);
  let h = s.x * m;
  if (h >= 1.0) {
    return h * pow2(-126);
  }
  // A subnormal: 2^-126 (1 + h + l) rounds at 2^-149, the quantum of the result.
  let t = two_sum(1.0, h);
  let v = opaque(t.x + opaque(t.y + s.y * m));
  return opaque(v - 1.0) * pow2(-126);
}

// glibc's 2^(i/32), i < 32, as float-floats.
const GLIBC_EXP2_32 = ${glibcExp2Table()};

// glibc's expf: x (32/ln2) = k + r with k the nearest integer and |r| <= 1/2, e^x = 2^(k/32)
// 2^(r/32), the latter 1 + C2 r + (C0 r + C1) r^2; glibc's special cases first.
fn expf_libc(x: f32) -> f32 {
  if (x > ${hexF32(88.72283172607421875)}) {
    return -neg_inf();
  }
  if (!(x >= ${hexF32(-103.972076416015625)})) {
    // -inf and below log(2^-150): 0; NaN: NaN.
    return select(0.0, x + x, (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u);
  }
  if (x < ${hexF32(-103.27892303466796875)}) {
    return bitcast<f32>(1u); // 2^-149, as glibc's __math_may_uflowf
  }
  let c = array<f32, 3>(${splitF64(GLIBC_INV_LN2_N, 3).map(hexF32).join(", ")});
  let p = two_prod(x, c[0]);
  var k = round(p.x);
  let m = two_prod(x, c[1]);
  let s1 = two_sum(opaque(p.x - k), p.y);
  let s2 = two_sum(s1.x, m.x);
  var r = two_sum(s2.x, opaque(opaque(s1.y + s2.y) + m.y) + x * c[2]);
  // k rounds x (32/ln2) to nearest (ties to even: k, from round(), already is).
  if (r.x > 0.5 || (r.x == 0.5 && r.y > 0.0)) {
    k = k + 1.0;
    r = two_sum(opaque(r.x - 1.0), r.y);
  } else if (r.x < -0.5 || (r.x == -0.5 && r.y < 0.0)) {
    k = k - 1.0;
    r = two_sum(opaque(r.x + 1.0), r.y);
  }
  let r2 = ff_mul(r, r);
  let cubic = ff_join(${ffLiteral(GLIBC_POLY[1]!)}, ff_mul(${ffLiteral(GLIBC_POLY[0]!)}, r));
  let linear = ff_mul(${ffLiteral(GLIBC_POLY[2]!)}, r);
  let y = ff_join(vec2<f32>(1.0, 0.0), ff_join(linear, ff_mul(cubic, r2)));
  let ki = i32(k);
  let table = GLIBC_EXP2_32;
  return ff_ldexp_f32(ff_mul(y, table[ki & 31]), ki >> 5u);
}

// ggml_silu_f32: a row's scalar tail.
fn ggml_silu_f32(x: f32) -> f32 {
  return x / (1.0 + expf_libc(-x));
}
`;
