/**
 * WGSL shared by every WebGPU kernel: the per-node uniform block (shape, byte strides and byte
 * offset of the destination and up to three sources), address arithmetic, f16 <-> f32
 * conversion in integer arithmetic, and typed accessors for each storage binding.
 *
 * Every storage binding is an `array<u32>`: f32 and i32 elements are whole words, f16 elements
 * are half words addressed by byte offset. This needs no `shader-f16` feature, so it runs on
 * software adapters too.
 * @module
 */

import type { DType } from "../../dtype.ts";

/** Threads per workgroup of the one-dimensional kernels. */
export const WORKGROUP_SIZE = 256;

/** Uniform slot of one node: 4 tensor descriptors of 48 bytes, 4 f32 and 4 u32 parameters. */
export const UNIFORM_SLOT_BYTES = 256;
/** Byte offset of a tensor descriptor's fields inside the slot. */
export const DESC_BYTES = 48;
/** Byte offset of the f32 parameters. */
export const FLOATS_AT = 4 * DESC_BYTES;
/** Byte offset of the u32 parameters. */
export const UINTS_AT = FLOATS_AT + 16;

/**
 * Descriptor `t[k]`: k = 0 is the destination, 1-3 the sources. `off.x` is the tensor's byte
 * offset within its binding (bindings start at aligned offsets, tensors and views need not).
 */
export const PARAMS_WGSL = `
struct Desc { ne: vec4<u32>, nb: vec4<u32>, off: vec4<u32> }
struct Params { t: array<Desc, 4>, f: vec4<f32>, u: vec4<u32> }
@group(0) @binding(0) var<uniform> P: Params;

// -inf, made at run time: a WGSL constant expression may not evaluate to an infinity (Chromium's
// Tint rejects bitcast<f32>(0xff800000u)), so the bits come from a private variable.
var<private> NEG_INF_BITS: u32 = 0xff800000u;
fn neg_inf() -> f32 {
  return bitcast<f32>(NEG_INF_BITS);
}

// Byte address of element c of tensor k within its binding.
fn at(k: u32, c: vec4<u32>) -> u32 {
  let d = P.t[k];
  return d.off.x + c.x * d.nb.x + c.y * d.nb.y + c.z * d.nb.z + c.w * d.nb.w;
}

// Coordinates of the i-th element of tensor k in ggml order (ne[0] fastest).
fn coords(k: u32, i: u32) -> vec4<u32> {
  let ne = P.t[k].ne;
  let plane = ne.x * ne.y;
  return vec4<u32>(i % ne.x, (i / ne.x) % ne.y, (i / plane) % ne.z, i / (plane * ne.z));
}

// Coordinates of row r (every ne[0] elements) of tensor k.
fn row_coords(k: u32, r: u32) -> vec4<u32> {
  let ne = P.t[k].ne;
  return vec4<u32>(0u, r % ne.y, (r / ne.y) % ne.z, r / (ne.y * ne.z));
}

// Exact: every f16 is an f32. Written with integers so no adapter flushes subnormals.
fn f16_to_f32(h: u32) -> f32 {
  let s = (h & 0x8000u) << 16u;
  let e = (h >> 10u) & 0x1fu;
  let m = h & 0x3ffu;
  if (e == 0u) {
    return bitcast<f32>(s | bitcast<u32>(f32(m) * 5.9604644775390625e-8));
  }
  if (e == 31u) {
    return bitcast<f32>(s | 0x7f800000u | (m << 13u));
  }
  return bitcast<f32>(s | ((e + 112u) << 23u) | (m << 13u));
}

// Round to nearest even, overflow to infinity, as the CPU kernels (WGSL leaves the rounding of
// pack2x16float to the implementation, so it is done by hand).
fn f32_to_f16(v: f32) -> u32 {
  let x = bitcast<u32>(v);
  let s = (x >> 16u) & 0x8000u;
  let a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) {
    return s | 0x7c00u | select(0u, 0x200u | ((a >> 13u) & 0x3ffu), a > 0x7f800000u);
  }
  if (a >= 0x477ff000u) {
    return s | 0x7c00u;
  }
  if (a >= 0x38800000u) {
    let r = a - 0x38000000u;
    return s | ((r + 0xfffu + ((r >> 13u) & 1u)) >> 13u);
  }
  let e = a >> 23u;
  if (e < 102u) {
    return s;
  }
  let m = (a & 0x7fffffu) | 0x800000u;
  let shift = 126u - e;
  var q = m >> shift;
  let rest = m & ((1u << shift) - 1u);
  let half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (q & 1u) == 1u)) {
    q = q + 1u;
  }
  return s | q;
}
`;

/**
 * Declares storage binding `index` as `name` with typed accessors for `dtype`:
 * `name_bits(byte)` / `name_f32(byte)` to read, and with `writable`, `name_set_bits` /
 * `name_set_f32` to write. f16 destinations are atomic words: two threads may write the two
 * halves of one word, and each clears and sets only its own half.
 */
export function bindingWgsl(name: string, index: number, dtype: DType, writable: boolean): string {
  const head = `@group(0) @binding(${index}) var<storage, read_write> ${name}`;
  if (dtype !== "f16") {
    const set = writable
      ? `fn ${name}_set_bits(b: u32, v: u32) { ${name}[b >> 2u] = v; }
fn ${name}_set_f32(b: u32, v: f32) { ${name}[b >> 2u] = bitcast<u32>(v); }`
      : "";
    return `${head}: array<u32>;
fn ${name}_bits(b: u32) -> u32 { return ${name}[b >> 2u]; }
fn ${name}_f32(b: u32) -> f32 { return bitcast<f32>(${name}[b >> 2u]); }
${set}`;
  }
  if (!writable) {
    return `${head}: array<u32>;
fn ${name}_bits(b: u32) -> u32 { return (${name}[b >> 2u] >> ((b & 2u) * 8u)) & 0xffffu; }
fn ${name}_f32(b: u32) -> f32 { return f16_to_f32(${name}_bits(b)); }`;
  }
  return `${head}: array<atomic<u32>>;
fn ${name}_bits(b: u32) -> u32 {
  return (atomicLoad(&${name}[b >> 2u]) >> ((b & 2u) * 8u)) & 0xffffu;
}
fn ${name}_f32(b: u32) -> f32 { return f16_to_f32(${name}_bits(b)); }
fn ${name}_set_bits(b: u32, v: u32) {
  let s = (b & 2u) * 8u;
  atomicAnd(&${name}[b >> 2u], ~(0xffffu << s));
  atomicOr(&${name}[b >> 2u], (v & 0xffffu) << s);
}
fn ${name}_set_f32(b: u32, v: f32) { ${name}_set_bits(b, f32_to_f16(v)); }`;
}

/** The standard bindings: `D` (destination, binding 1) and sources `S0`, `S1`, ... after it. */
export function tensorBindings(dst: DType, sources: readonly DType[]): string {
  const parts = [bindingWgsl("D", 1, dst, true)];
  sources.forEach((dtype, i) => parts.push(bindingWgsl(`S${i}`, 2 + i, dtype, false)));
  return parts.join("\n");
}

/**
 * A kernel with one thread per element of a flat range of `P.u.x` items; the workgroup grid is
 * two-dimensional because one dimension holds at most 65535 workgroups.
 */
export function flatKernel(body: string): string {
  return `
@compute @workgroup_size(${WORKGROUP_SIZE})
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let i = (wid.y * nwg.x + wid.x) * ${WORKGROUP_SIZE}u + lid;
  if (i >= P.u.x) {
    return;
  }
${body}
}`;
}
