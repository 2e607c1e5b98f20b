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
