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

/**
 * Uniform slot of one node: 4 tensor descriptors of 48 bytes, 4 f32 and 4 u32 parameters, and 4
 * more f32 parameters.
 */
export const UNIFORM_SLOT_BYTES = 256;
/** Byte offset of a tensor descriptor's fields inside the slot. */
export const DESC_BYTES = 48;
/** Byte offset of the f32 parameters. */
export const FLOATS_AT = 4 * DESC_BYTES;
/** Byte offset of the u32 parameters. */
export const UINTS_AT = FLOATS_AT + 16;
/** Byte offset of the second four f32 parameters (`P.g`). */
export const MORE_FLOATS_AT = UINTS_AT + 16;

/**
 * Descriptor `t[k]`: k = 0 is the destination, 1-3 the sources. `off.x` is the tensor's byte
 * offset within its binding (bindings start at aligned offsets, tensors and views need not).
 */
export const PARAMS_WGSL = `
struct Desc { ne: vec4<u32>, nb: vec4<u32>, off: vec4<u32> }
struct Params { t: array<Desc, 4>, f: vec4<f32>, u: vec4<u32>, g: vec4<f32> }
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
 * How one dispatch binds its tensors (destination first, then the sources), one entry each:
 * `"w"` its own read-write binding, `"r"` its own read-only binding, or the index of an earlier
 * tensor whose binding it shares. WebGPU (Chromium's Dawn above all) refuses two bindings of one
 * buffer in a dispatch when either is writable and their ranges overlap, and a buffer bound
 * writable may not also be bound read-only: so every tensor in the destination's buffer is bound
 * read-write, overlapping ranges (in-place ops, views, tensors sharing an aligned window) as one
 * binding, and tensors of other buffers read-only. Tensor k's own binding is `@binding(1 + k)`.
 */
export type BindingShape = readonly ("r" | "w" | number)[];

/** The shape of a dispatch whose tensors all have their own bindings, the destination writable. */
export function separateShape(tensors: number): BindingShape {
  return Array.from({ length: tensors }, (_, k) => (k === 0 ? "w" : "r"));
}

/** A short string naming a shape, for pipeline and layout cache keys. */
export function shapeKey(shape: BindingShape): string {
  return shape.join(",");
}

/** Typed accessors of tensor `name` over words read by the WGSL expression `word(i)`. */
function accessors(name: string, dtype: DType, word: (i: string) => string): string {
  const head = `fn ${name}_word(i: u32) -> u32 { return ${word("i")}; }`;
  if (dtype !== "f16") {
    return `${head}
fn ${name}_bits(b: u32) -> u32 { return ${name}_word(b >> 2u); }
fn ${name}_f32(b: u32) -> f32 { return bitcast<f32>(${name}_word(b >> 2u)); }`;
  }
  return `${head}
fn ${name}_bits(b: u32) -> u32 { return (${name}_word(b >> 2u) >> ((b & 2u) * 8u)) & 0xffffu; }
fn ${name}_f32(b: u32) -> f32 { return f16_to_f32(${name}_bits(b)); }`;
}

/** Writers of tensor `name` (bound as WGSL variable `store`, atomic when `atomic`). */
function writers(name: string, store: string, dtype: DType, atomic: boolean): string {
  if (dtype !== "f16") {
    return `fn ${name}_set_bits(b: u32, v: u32) { ${store}[b >> 2u] = v; }
fn ${name}_set_f32(b: u32, v: f32) { ${store}[b >> 2u] = bitcast<u32>(v); }`;
  }
  // f16 destinations are atomic words: two threads may write the two halves of one word, and
  // each clears and sets only its own half.
  if (!atomic) throw new Error(`webgpu: f16 ${name} written through a plain binding`);
  return `fn ${name}_set_bits(b: u32, v: u32) {
  let s = (b & 2u) * 8u;
  atomicAnd(&${store}[b >> 2u], ~(0xffffu << s));
  atomicOr(&${store}[b >> 2u], (v & 0xffffu) << s);
}
fn ${name}_set_f32(b: u32, v: f32) { ${name}_set_bits(b, f32_to_f16(v)); }`;
}

/**
 * Declares storage binding `index` as `name` with typed accessors for `dtype`:
 * `name_word(i)`, `name_bits(byte)` / `name_f32(byte)` to read, and with `writable`,
 * `name_set_bits` / `name_set_f32` to write (f16 destinations are atomic words).
 */
export function bindingWgsl(name: string, index: number, dtype: DType, writable: boolean): string {
  const atomic = writable && dtype === "f16";
  const access = writable ? "read_write" : "read";
  const element = atomic ? "atomic<u32>" : "u32";
  const word = (i: string): string => (atomic ? `atomicLoad(&${name}[${i}])` : `${name}[${i}]`);
  return `@group(0) @binding(${index}) var<storage, ${access}> ${name}: array<${element}>;
${accessors(name, dtype, word)}
${writable ? writers(name, name, dtype, atomic) : ""}`;
}

/** WGSL name of tensor k of a kernel: `D`, then `S0`, `S1`, ... */
function tensorName(k: number): string {
  return k === 0 ? "D" : `S${k - 1}`;
}

/** The bindings and accessors of tensors of `dtypes` (destination first) bound as `shape`. */
export function shapedBindings(dtypes: readonly DType[], shape: BindingShape): string {
  if (dtypes.length !== shape.length) {
    throw new Error(`webgpu: a shader of ${dtypes.length} tensors bound as ${shape.length}`);
  }
  const ownerOf = (k: number): number => {
    const entry = shape[k]!;
    return typeof entry === "number" ? entry : k;
  };
  // A binding shared with an f16 destination is atomic: every access to it must be.
  const atomic = (owner: number): boolean => owner === 0 && dtypes[0] === "f16";
  const parts: string[] = [];
  dtypes.forEach((dtype, k) => {
    const owner = ownerOf(k);
    const entry = shape[owner];
    if (typeof entry === "number" || (entry === "r" && k === 0)) {
      throw new Error(`webgpu: binding shape ${shapeKey(shape)} is not well formed`);
    }
    const store = tensorName(owner);
    if (owner === k) {
      const element = atomic(k) ? "atomic<u32>" : "u32";
      const access = entry === "w" ? "read_write" : "read";
      parts.push(
        `@group(0) @binding(${1 + k}) var<storage, ${access}> ${store}: array<${element}>;`,
      );
    }
    const word = (i: string): string =>
      atomic(owner) ? `atomicLoad(&${store}[${i}])` : `${store}[${i}]`;
    parts.push(accessors(tensorName(k), dtype, word));
    if (k === 0) parts.push(writers("D", store, dtype, atomic(owner)));
  });
  return parts.join("\n");
}

const BINDINGS_MARK = /^\/\/ graft-bindings: ([a-z0-9_,]+)$/m;

/**
 * The standard bindings: `D` (destination, binding 1) and sources `S0`, `S1`, ... after it.
 * Which binding each name reads depends on where the tensors of one dispatch lie (see
 * {@link BindingShape}), so this leaves a mark that {@link expandBindings} replaces when the
 * pipeline for a shape is compiled.
 */
export function tensorBindings(dst: DType, sources: readonly DType[]): string {
  return `// graft-bindings: ${[dst, ...sources].join(",")}`;
}

/** `source` with its {@link tensorBindings} mark replaced by the bindings of `shape`. */
export function expandBindings(source: string, shape: BindingShape): string {
  const mark = BINDINGS_MARK.exec(source);
  if (!mark) return source;
  const dtypes = mark[1]!.split(",") as DType[];
  return source.replace(BINDINGS_MARK, () => shapedBindings(dtypes, shape));
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

/**
 * The opening of a mulMat kernel's `main` (S0 binding 1, S1 binding 2): K, M, N; the batch
 * (i2, i3) of S1 and D from `wid.z`, S0's batch (a2, a3) as ggml broadcasts it; and the tile's
 * first row and column m0, n0 for tiles of `rows` x `cols` (WGSL u32 expressions).
 */
export function matmulPrologue(rows: string, cols: string): string {
  return `  let K = P.t[1].ne.x;
  let M = P.t[1].ne.y;
  let N = P.t[2].ne.y;
  let i2 = wid.z % P.t[2].ne.z;
  let i3 = wid.z / P.t[2].ne.z;
  let a2 = i2 / (P.t[2].ne.z / P.t[1].ne.z);
  let a3 = i3 / (P.t[2].ne.w / P.t[1].ne.w);
  let m0 = wid.x * ${rows};
  let n0 = wid.y * ${cols};`;
}
