/**
 * Float64 reference implementations of every Graft op, and the helpers the op tests share: a
 * seeded PRNG, decoding a tensor's logical values from raw bytes and strides, and a normalized
 * error comparison (test-backend-ops style) with the tolerances stated per op.
 *
 * The reference works on {@link RefTensor}: a Float64Array with a shape and element strides, so
 * views (view, permute, transpose) are strided accesses of the same storage, as in the engine.
 * Every op reads its inputs through the strides and returns a contiguous result.
 * @module
 */

import { AssertionError } from "node:assert/strict";

/** A shape or stride tuple in ggml order (`ne[0]` innermost). */
export type Dims4 = readonly [number, number, number, number];

/** Element types the engine stores. */
export type RefDType = "f32" | "f16" | "i32";

const ELEMENT_BYTES: Readonly<Record<RefDType, number>> = { f32: 4, f16: 2, i32: 4 };

/** Contiguous element strides for a shape. */
export function contiguousElementStrides(ne: Dims4): Dims4 {
  return [1, ne[0], ne[0] * ne[1], ne[0] * ne[1] * ne[2]];
}

/** Pads a 1-4 dimensional shape to four dimensions. */
export function dims(shape: readonly number[]): Dims4 {
  return [shape[0] ?? 1, shape[1] ?? 1, shape[2] ?? 1, shape[3] ?? 1];
}

/** Calls `fn` for every index of `ne` in row-major logical order (`i0` fastest). */
export function forEachIndex(
  ne: Dims4,
  fn: (i0: number, i1: number, i2: number, i3: number, linear: number) => void,
): void {
  let linear = 0;
  for (let i3 = 0; i3 < ne[3]; i3++) {
    for (let i2 = 0; i2 < ne[2]; i2++) {
      for (let i1 = 0; i1 < ne[1]; i1++) {
        for (let i0 = 0; i0 < ne[0]; i0++) fn(i0, i1, i2, i3, linear++);
      }
    }
  }
}

/** A tensor of f64 values: element (i0, i1, i2, i3) is `data[offset + Σ i_d·st[d]]`. */
export class RefTensor {
  readonly ne: Dims4;
  readonly data: Float64Array;
  /** Element strides. */
  readonly st: Dims4;
  /** Element offset of (0, 0, 0, 0) in `data`. */
  readonly offset: number;

  constructor(ne: Dims4, data: Float64Array, st?: Dims4, offset = 0) {
    this.ne = ne;
    this.data = data;
    this.st = st ?? contiguousElementStrides(ne);
    this.offset = offset;
  }

  /** A contiguous tensor holding `values` in logical order. */
  static of(shape: readonly number[], values: ArrayLike<number>): RefTensor {
    const ne = dims(shape);
    const count = ne[0] * ne[1] * ne[2] * ne[3];
    if (values.length !== count) {
      throw new RangeError(`RefTensor.of: ${values.length} values for shape ${ne.join("x")}`);
    }
    return new RefTensor(ne, Float64Array.from(values));
  }

  static zeros(shape: readonly number[]): RefTensor {
    const ne = dims(shape);
    return new RefTensor(ne, new Float64Array(ne[0] * ne[1] * ne[2] * ne[3]));
  }

  get count(): number {
    return this.ne[0] * this.ne[1] * this.ne[2] * this.ne[3];
  }

  index(i0: number, i1: number, i2: number, i3: number): number {
    return this.offset + i0 * this.st[0] + i1 * this.st[1] + i2 * this.st[2] + i3 * this.st[3];
  }

  at(i0: number, i1 = 0, i2 = 0, i3 = 0): number {
    return this.data[this.index(i0, i1, i2, i3)]!;
  }

  /** The logical values, contiguous, `i0` fastest. */
  values(): Float64Array {
    const out = new Float64Array(this.count);
    forEachIndex(this.ne, (i0, i1, i2, i3, k) => {
      out[k] = this.at(i0, i1, i2, i3);
    });
    return out;
  }
}

// ---------------------------------------------------------------------------------------------
// Data: seeded PRNG, rounding to storage types, decoding raw bytes.

/** A small deterministic PRNG (mulberry32): the same seed gives the same data on every run. */
export class Rng {
  #state: number;

  constructor(seed: number) {
    this.#state = seed >>> 0;
  }

  /** Uniform in [0, 1). */
  next(): number {
    this.#state = (this.#state + 0x6d2b79f5) >>> 0;
    let t = this.#state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  /** Uniform in [lo, hi), never exactly 0 (zeros hide sign and scaling bugs). */
  uniform(lo = -1, hi = 1): number {
    for (;;) {
      const value = lo + (hi - lo) * this.next();
      if (value !== 0) return value;
    }
  }

  /** An integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.next() * n);
  }

  /** `count` f32 values uniform in [lo, hi), none zero after rounding. */
  f32(count: number, lo = -1, hi = 1): Float32Array {
    const out = new Float32Array(count);
    for (let i = 0; i < count; i++) {
      do out[i] = this.uniform(lo, hi); while (out[i] === 0);
    }
    return out;
  }

  /** `count` f16 values uniform in [lo, hi), none zero after rounding. */
  f16(count: number, lo = -1, hi = 1): Float16Array {
    const out = new Float16Array(count);
    for (let i = 0; i < count; i++) {
      do out[i] = this.uniform(lo, hi); while (out[i] === 0);
    }
    return out;
  }

  /** `count` values with magnitude in [lo, hi) and a random sign (divisors away from zero). */
  signedMagnitude(count: number, lo: number, hi: number): Float32Array {
    const out = new Float32Array(count);
    for (let i = 0; i < count; i++) {
      out[i] = (this.next() < 0.5 ? -1 : 1) * this.uniform(lo, hi);
    }
    return out;
  }
}

const f16Scratch = new Float16Array(1);

/** Rounds to the nearest f16 (ties to even), as a f32 -> f16 copy must. */
export function roundF16(x: number): number {
  f16Scratch[0] = x;
  return f16Scratch[0];
}

const f32Scratch = new Float32Array(1);
const u32Scratch = new Uint32Array(f32Scratch.buffer);

/** The f32 next to x (an f32), away from zero (up) or toward it. */
function nextF32(x: number, up: boolean): number {
  f32Scratch[0] = x;
  u32Scratch[0] = u32Scratch[0]! + (up ? 1 : -1);
  return f32Scratch[0];
}

/**
 * a * b + c of f32 values rounded once to f32, as a fused multiply-add (_mm256_fmadd_ps,
 * `@mulAdd`) gives it: the product is exact in f64 (48 bits), TwoSum gives the sum's f64
 * rounding error, which decides where the f64 sum lies halfway between two f32s.
 */
export function fmaF32Exact(a: number, b: number, c: number): number {
  const p = a * b;
  const s = p + c;
  const bb = s - p;
  const e = (p - (s - bb)) + (c - bb);
  const r = Math.fround(s);
  if (r === s || e === 0) return r;
  const other = nextF32(r, Math.abs(r) < Math.abs(s));
  if (Math.abs(s - r) !== Math.abs(other - s)) return r;
  // s lies halfway between two f32s: the exact sum is on e's side.
  return (other - s) * e > 0 ? other : r;
}

/**
 * A tensor's logical values from its raw bytes: element (i0..i3) is read at byte
 * `offsetBytes + Σ i_d·nb[d]` (little-endian), as the engine lays it out.
 */
export function fromBytes(
  bytes: Uint8Array,
  dtype: RefDType,
  ne: Dims4,
  nb: Dims4,
  offsetBytes = 0,
): RefTensor {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const size = ELEMENT_BYTES[dtype];
  const out = new Float64Array(ne[0] * ne[1] * ne[2] * ne[3]);
  forEachIndex(ne, (i0, i1, i2, i3, k) => {
    const at = offsetBytes + i0 * nb[0] + i1 * nb[1] + i2 * nb[2] + i3 * nb[3];
    if (at < 0 || at + size > bytes.byteLength) {
      throw new RangeError(`fromBytes: element (${i0}, ${i1}, ${i2}, ${i3}) at byte ${at}`);
    }
    switch (dtype) {
      case "f32":
        out[k] = view.getFloat32(at, true);
        break;
      case "f16":
        out[k] = decodeF16(view.getUint16(at, true));
        break;
      case "i32":
        out[k] = view.getInt32(at, true);
        break;
    }
  });
  return new RefTensor(ne, out);
}

/** IEEE binary16 bits to a number (independent of Float16Array, to check the engine's f16). */
export function decodeF16(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exponent = (bits >> 10) & 0x1f;
  const fraction = bits & 0x3ff;
  if (exponent === 0) return sign * fraction * 2 ** -24;
  if (exponent === 0x1f) return fraction ? NaN : sign * Infinity;
  return sign * (1 + fraction / 1024) * 2 ** (exponent - 15);
}

// ---------------------------------------------------------------------------------------------
// Views: strided accesses of the same storage.

/** `a`'s storage seen with shape `shape`, element strides `st` and element offset `offset`. */
export function refView(a: RefTensor, shape: readonly number[], st?: Dims4, offset = 0): RefTensor {
  const ne = dims(shape);
  return new RefTensor(ne, a.data, st ?? contiguousElementStrides(ne), a.offset + offset);
}

/** Logical values of `a` (contiguous) with a new shape of the same count. */
export function refReshape(a: RefTensor, shape: readonly number[]): RefTensor {
  return RefTensor.of(shape, a.values());
}

/** Source dimension `i` becomes dimension `axes[i]` (ggml_permute). */
export function refPermute(a: RefTensor, axes: Dims4): RefTensor {
  const ne = [1, 1, 1, 1];
  const st = [0, 0, 0, 0];
  for (let i = 0; i < 4; i++) {
    ne[axes[i]!] = a.ne[i]!;
    st[axes[i]!] = a.st[i]!;
  }
  return new RefTensor(dims(ne), a.data, dims(st), a.offset);
}

export function refTranspose(a: RefTensor): RefTensor {
  return refPermute(a, [1, 0, 2, 3]);
}

export function refCont(a: RefTensor): RefTensor {
  return new RefTensor(a.ne, a.values());
}

/** `a` rounded to f32: what the engine stores for an intermediate result. */
export function refF32(a: RefTensor): RefTensor {
  return new RefTensor(a.ne, a.values().map(Math.fround));
}

// ---------------------------------------------------------------------------------------------
// Elementwise ops.

function map(a: RefTensor, fn: (x: number) => number): RefTensor {
  const out = new Float64Array(a.count);
  forEachIndex(a.ne, (i0, i1, i2, i3, k) => {
    out[k] = fn(a.at(i0, i1, i2, i3));
  });
  return new RefTensor(a.ne, out);
}

/** `b` repeated to `a`'s shape (index modulo `b.ne`), combined elementwise. */
function binary(a: RefTensor, b: RefTensor, fn: (x: number, y: number) => number): RefTensor {
  for (let d = 0; d < 4; d++) {
    if (a.ne[d]! % b.ne[d]! !== 0) throw new RangeError("reference binary: b does not tile a");
  }
  const out = new Float64Array(a.count);
  forEachIndex(a.ne, (i0, i1, i2, i3, k) => {
    const y = b.at(i0 % b.ne[0], i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3]);
    out[k] = fn(a.at(i0, i1, i2, i3), y);
  });
  return new RefTensor(a.ne, out);
}

export function refAdd(a: RefTensor, b: RefTensor): RefTensor {
  return binary(a, b, (x, y) => x + y);
}

export function refSub(a: RefTensor, b: RefTensor): RefTensor {
  return binary(a, b, (x, y) => x - y);
}

export function refMul(a: RefTensor, b: RefTensor): RefTensor {
  return binary(a, b, (x, y) => x * y);
}

export function refDiv(a: RefTensor, b: RefTensor): RefTensor {
  return binary(a, b, (x, y) => x / y);
}

/** `a * factor`; the factor travels as f32 in the node table, so it is rounded to f32 here. */
export function refScale(a: RefTensor, factor: number): RefTensor {
  const f = Math.fround(factor);
  return map(a, (x) => x * f);
}

export function refSqr(a: RefTensor): RefTensor {
  return map(a, (x) => x * x);
}

export function refSqrt(a: RefTensor): RefTensor {
  return map(a, Math.sqrt);
}

/** GELU, tanh approximation (ggml's formula, evaluated in f64). */
export function refGelu(a: RefTensor): RefTensor {
  const c = Math.sqrt(2 / Math.PI);
  return map(a, (x) => 0.5 * x * (1 + Math.tanh(c * (x + 0.044715 * x * x * x))));
}

export function refSilu(a: RefTensor): RefTensor {
  return map(a, (x) => x / (1 + Math.exp(-x)));
}

export function refRelu(a: RefTensor): RefTensor {
  return map(a, (x) => (x > 0 ? x : 0));
}

/** Tiles `a` to `shape` (element i of the result is `a[i mod a.ne]`). */
export function refRepeat(a: RefTensor, shape: readonly number[]): RefTensor {
  const ne = dims(shape);
  const out = new Float64Array(ne[0] * ne[1] * ne[2] * ne[3]);
  forEachIndex(ne, (i0, i1, i2, i3, k) => {
    out[k] = a.at(i0 % a.ne[0], i1 % a.ne[1], i2 % a.ne[2], i3 % a.ne[3]);
  });
  return new RefTensor(ne, out);
}

// ---------------------------------------------------------------------------------------------
// Reductions and row ops.

/** The sum of every element, shape [1]. */
export function refSum(a: RefTensor): RefTensor {
  let total = 0;
  forEachIndex(a.ne, (i0, i1, i2, i3) => {
    total += a.at(i0, i1, i2, i3);
  });
  return RefTensor.of([1], [total]);
}

/** Calls `fn` with each row's values (dims 1-3 enumerated in order). */
function rows(a: RefTensor, fn: (row: Float64Array) => Float64Array | number): number[] {
  const out: number[] = [];
  const row = new Float64Array(a.ne[0]);
  for (let i3 = 0; i3 < a.ne[3]; i3++) {
    for (let i2 = 0; i2 < a.ne[2]; i2++) {
      for (let i1 = 0; i1 < a.ne[1]; i1++) {
        for (let i0 = 0; i0 < a.ne[0]; i0++) row[i0] = a.at(i0, i1, i2, i3);
        const result = fn(row);
        if (typeof result === "number") out.push(result);
        else out.push(...result);
      }
    }
  }
  return out;
}

/** The mean of each row: shape [1, ne1, ne2, ne3]. */
export function refMean(a: RefTensor): RefTensor {
  const out = rows(a, (row) => row.reduce((s, x) => s + x, 0) / row.length);
  return RefTensor.of([1, a.ne[1], a.ne[2], a.ne[3]], out);
}

/** Each row: `(x - mean) / sqrt(variance + eps)`. */
export function refNorm(a: RefTensor, eps: number): RefTensor {
  const e = Math.fround(eps);
  const out = rows(a, (row) => {
    const mean = row.reduce((s, x) => s + x, 0) / row.length;
    const variance = row.reduce((s, x) => s + (x - mean) ** 2, 0) / row.length;
    const inv = 1 / Math.sqrt(variance + e);
    return row.map((x) => (x - mean) * inv);
  });
  return RefTensor.of(a.ne, out);
}

/** Each row: `x / sqrt(mean(x^2) + eps)`. */
export function refRmsNorm(a: RefTensor, eps: number): RefTensor {
  const e = Math.fround(eps);
  const out = rows(a, (row) => {
    const meanSquare = row.reduce((s, x) => s + x * x, 0) / row.length;
    const inv = 1 / Math.sqrt(meanSquare + e);
    return row.map((x) => x * inv);
  });
  return RefTensor.of(a.ne, out);
}

/**
 * Each row: `softmax(x * scale + mask)`; row (i1, i2, i3) uses mask row (i1, i2 mod mask.ne2,
 * i3 mod mask.ne3). A row whose every logit is -Infinity becomes zeros (Graft's documented rule).
 */
export function refSoftmax(a: RefTensor, mask?: RefTensor, scale = 1): RefTensor {
  const s = Math.fround(scale);
  const ne = a.ne;
  const out = new Float64Array(a.count);
  const logits = new Float64Array(ne[0]);
  let k = 0;
  for (let i3 = 0; i3 < ne[3]; i3++) {
    for (let i2 = 0; i2 < ne[2]; i2++) {
      for (let i1 = 0; i1 < ne[1]; i1++) {
        let max = -Infinity;
        for (let i0 = 0; i0 < ne[0]; i0++) {
          let v = a.at(i0, i1, i2, i3) * s;
          if (mask) v += mask.at(i0, i1, i2 % mask.ne[2], i3 % mask.ne[3]);
          logits[i0] = v;
          if (v > max) max = v;
        }
        if (max === -Infinity) {
          k += ne[0];
          continue;
        }
        let total = 0;
        for (let i0 = 0; i0 < ne[0]; i0++) {
          logits[i0] = Math.exp(logits[i0]! - max);
          total += logits[i0]!;
        }
        for (let i0 = 0; i0 < ne[0]; i0++) out[k++] = logits[i0]! / total;
      }
    }
  }
  return new RefTensor(ne, out);
}

// ---------------------------------------------------------------------------------------------
// Matrix multiplication, copies, gathers.

/**
 * `mulMat(a[K, M, A2, A3], b[K, N, B2, B3]) -> [M, N, B2, B3]`, out[m, n] = Σ_k a[k, m]·b[k, n].
 * Batch (i2, i3) of b uses batch (i2 / (B2/A2), i3 / (B3/A3)) of a, as ggml broadcasts. `roundB`
 * rounds b's elements first (f16 weights: ggml multiplies b rounded to f16).
 */
export function refMulMat(
  a: RefTensor,
  b: RefTensor,
  roundB: (x: number) => number = (x) => x,
): RefTensor {
  const [k, m] = a.ne;
  if (b.ne[0] !== k) throw new RangeError("reference mulMat: ne[0] differ");
  const n = b.ne[1];
  const r2 = b.ne[2] / a.ne[2];
  const r3 = b.ne[3] / a.ne[3];
  const ne: Dims4 = [m, n, b.ne[2], b.ne[3]];
  const out = new Float64Array(m * n * b.ne[2] * b.ne[3]);
  let at = 0;
  for (let i3 = 0; i3 < b.ne[3]; i3++) {
    for (let i2 = 0; i2 < b.ne[2]; i2++) {
      const a2 = Math.floor(i2 / r2);
      const a3 = Math.floor(i3 / r3);
      for (let j = 0; j < n; j++) {
        for (let i = 0; i < m; i++) {
          let total = 0;
          for (let p = 0; p < k; p++) total += a.at(p, i, a2, a3) * roundB(b.at(p, j, i2, i3));
          out[at++] = total;
        }
      }
    }
  }
  return new RefTensor(ne, out);
}

/**
 * cpy: `a`'s elements in row-major logical order, written in row-major logical order into a
 * tensor of shape `dstShape`, rounded to the destination dtype.
 */
export function refCpy(a: RefTensor, dstShape: readonly number[], dstDType: RefDType): RefTensor {
  const values = a.values();
  const round = dstDType === "f16" ? roundF16 : dstDType === "f32" ? Math.fround : (x: number) => x;
  return RefTensor.of(dstShape, values.map(round));
}

/**
 * Writes `values` (logical order of `ne`) into `storage` at element strides `st` from element
 * `offset`: a cpy into a strided view, seen from the view's owner.
 */
export function refScatter(
  storage: RefTensor,
  ne: Dims4,
  st: Dims4,
  offset: number,
  values: RefTensor,
): RefTensor {
  const data = Float64Array.from(storage.data);
  const flat = values.values();
  forEachIndex(ne, (i0, i1, i2, i3, k) => {
    data[offset + i0 * st[0] + i1 * st[1] + i2 * st[2] + i3 * st[3]] = flat[k]!;
  });
  return new RefTensor(storage.ne, data, storage.st, storage.offset);
}

/** `getRows(a[ne0, R, B], idx[N, B]) -> [ne0, N, B]`: out row (n, b) = a row (idx[n, b], b). */
export function refGetRows(a: RefTensor, idx: RefTensor): RefTensor {
  const ne: Dims4 = [a.ne[0], idx.ne[0], a.ne[2], 1];
  const out = new Float64Array(ne[0] * ne[1] * ne[2]);
  let k = 0;
  for (let b = 0; b < a.ne[2]; b++) {
    for (let n = 0; n < idx.ne[0]; n++) {
      const row = idx.at(n, b);
      if (!Number.isInteger(row) || row < 0 || row >= a.ne[1]) {
        throw new RangeError(`reference getRows: index ${row} outside [0, ${a.ne[1]})`);
      }
      for (let i = 0; i < a.ne[0]; i++) out[k++] = a.at(i, row, b, 0);
    }
  }
  return new RefTensor(ne, out);
}

/**
 * setRows: `target` (logical values) with row `idx[n, b, c]` of batch (b, c) replaced by row n of
 * `rows`, rounded to the target's dtype.
 */
export function refSetRows(
  target: RefTensor,
  rows: RefTensor,
  idx: RefTensor,
  dtype: "f32" | "f16",
): RefTensor {
  const out = RefTensor.of(target.ne, target.values());
  const round = dtype === "f16" ? roundF16 : Math.fround;
  const [ne0, ne1, ne2] = target.ne;
  for (let c = 0; c < rows.ne[3]; c++) {
    for (let b = 0; b < rows.ne[2]; b++) {
      for (let n = 0; n < rows.ne[1]; n++) {
        const row = idx.at(n, b, c);
        if (!Number.isInteger(row) || row < 0 || row >= ne1) {
          throw new RangeError(`reference setRows: index ${row} outside [0, ${ne1})`);
        }
        for (let i = 0; i < ne0; i++) {
          out.data[i + ne0 * (row + ne1 * (b + ne2 * c))] = round(rows.at(i, n, b, c));
        }
      }
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Comparison.

/**
 * How close a result must be: the normalized squared error `Σ(got-want)² / Σwant²` at most `nmse`
 * (ggml test-backend-ops' measure), and every element within `atol + rtol·|want|`.
 */
export interface Tolerance {
  readonly nmse: number;
  readonly rtol: number;
  readonly atol: number;
}

/** One f32 ulp at 1, relative: 2^-23. */
export const F32_ULP = 2 ** -23;

/**
 * Data movement (views, cont, repeat, getRows, cpy, relu): values are copied or converted with
 * one IEEE rounding the reference applies too, so the result must be bit-identical.
 */
export const TOL_EXACT: Tolerance = { nmse: 0, rtol: 0, atol: 0 };

/**
 * add, sub, mul, div, scale, sqr, sqrt: one correctly rounded f32 operation per element of exact
 * f32 inputs, so the result is within half an f32 ulp of the f64 value; one ulp allows it.
 */
export const TOL_ELEMENTWISE: Tolerance = { nmse: 1e-13, rtol: F32_ULP, atol: 0 };

/**
 * gelu, silu: f32 evaluation through a vectorized exp (a few ulps); values near zero get an
 * absolute floor because relative error is meaningless there.
 */
export const TOL_ACTIVATION: Tolerance = { nmse: 1e-11, rtol: 1e-5, atol: 1e-7 };

/**
 * sum, mean: summing up to ~1e4 terms of magnitude ≤ 1; even f32 accumulation in any order stays
 * within n·ε·Σ|x|, far below these (the core sums in f64).
 */
export const TOL_REDUCTION: Tolerance = { nmse: 1e-11, rtol: 1e-6, atol: 1e-5 };

/**
 * norm, rmsNorm: statistics in f64, then `(x - mean)` and the scaling in f32: about two f32
 * roundings relative to |x|/σ, so a few ulps plus a small floor for values near the mean.
 */
export const TOL_NORM: Tolerance = { nmse: 1e-11, rtol: 1e-5, atol: 1e-6 };

/**
 * softmax: a vectorized f32 exp (a few ulps) and an f32 scaling by the reciprocal sum; outputs
 * are in [0, 1], so a tiny absolute floor covers the smallest probabilities.
 */
export const TOL_SOFTMAX: Tolerance = { nmse: 1e-11, rtol: 1e-5, atol: 1e-7 };

/**
 * mulMat (f32 or f16 `a`, f32 `b`, f32 accumulation): K products in [-1, 1] give results of
 * size ~√K/3, and rounding error of any summation order grows about √K·ε times the terms. ggml
 * allows nmse 5e-4 (for quantized types); f32 of K ≤ ~1e3 lands near 1e-12, so 1e-9 has margin
 * and still catches a single wrong term. The per-element floor scales with √K.
 */
export function tolMulMat(k: number): Tolerance {
  return { nmse: 1e-9, rtol: 1e-5, atol: 2e-6 * Math.sqrt(k) };
}

/** The normalized squared error `Σ(got-want)² / Σwant²` (0 when both are all zero). */
export function nmse(got: ArrayLike<number>, want: ArrayLike<number>): number {
  let err = 0;
  let norm = 0;
  for (let i = 0; i < want.length; i++) {
    const x = got[i]!;
    const y = want[i]!;
    // Equal values (also infinities and NaN, matched elementwise) contribute no error.
    if (x === y || (Number.isNaN(x) && Number.isNaN(y))) {
      if (Number.isFinite(y)) norm += y * y;
      continue;
    }
    err += (x - y) ** 2;
    norm += y * y;
  }
  if (norm === 0) return err === 0 ? 0 : Infinity;
  return err / norm;
}

/**
 * Asserts `got` matches the reference `want` within `tol` (both in logical order). The message
 * names the case, the worst element and its index.
 */
export function assertClose(
  got: RefTensor,
  want: RefTensor,
  tol: Tolerance,
  label: string,
): void {
  const g = got.values();
  const w = want.values();
  if (g.length !== w.length || got.ne.join() !== want.ne.join()) {
    throw new AssertionError({
      message: `${label}: shape [${got.ne}] but the reference is [${want.ne}]`,
    });
  }
  let worst = -1;
  let worstExcess = 0;
  for (let i = 0; i < w.length; i++) {
    const x = g[i]!;
    const y = w[i]!;
    if (x === y || Object.is(x, y)) continue;
    const excess = Number.isNaN(x) || Number.isNaN(y) ? Infinity : Math.abs(x - y) -
      (tol.atol + tol.rtol * Math.abs(y));
    if (excess > 0 && (worst < 0 || excess > worstExcess)) {
      worst = i;
      worstExcess = excess;
    }
  }
  if (worst >= 0) {
    throw new AssertionError({
      message: `${label}: element ${worst} (${indexOf(want.ne, worst)}) is ${g[worst]}, ` +
        `reference ${w[worst]} (atol ${tol.atol}, rtol ${tol.rtol})`,
    });
  }
  const error = nmse(g, w);
  if (!(error <= tol.nmse)) {
    throw new AssertionError({
      message: `${label}: normalized error ${error} exceeds ${tol.nmse}`,
    });
  }
}

function indexOf(ne: Dims4, linear: number): string {
  const i0 = linear % ne[0];
  const i1 = Math.floor(linear / ne[0]) % ne[1];
  const i2 = Math.floor(linear / (ne[0] * ne[1])) % ne[2];
  const i3 = Math.floor(linear / (ne[0] * ne[1] * ne[2]));
  return `[${i0}, ${i1}, ${i2}, ${i3}]`;
}

/** Asserts two byte arrays are identical, naming the first differing byte. */
export function assertBytesEqual(a: Uint8Array, b: Uint8Array, label: string): void {
  if (a.length !== b.length) {
    throw new AssertionError({ message: `${label}: ${a.length} bytes vs ${b.length} bytes` });
  }
  for (let i = 0; i < a.length; i++) {
    if (a[i] !== b[i]) {
      throw new AssertionError({
        message: `${label}: first difference at byte ${i} (${a[i]} vs ${b[i]})`,
      });
    }
  }
}

/** ggml_rope_ext's parameters for {@link refRope} (defaults as `rope`'s). */
export interface RefRopeParams {
  nDims: number;
  /** 0 normal (pairs (2k, 2k+1)), 2 neox (pairs (k, k + nDims/2)). */
  mode: 0 | 2;
  freqBase: number;
  freqScale: number;
  extFactor?: number;
  attnFactor?: number;
  betaFast?: number;
  betaSlow?: number;
  nCtxOrig?: number;
  /** Per-pair divisors of the angle (src2). */
  freqFactors?: readonly number[];
}

/** fma(a, b, c) of f32 values in f32: the product is exact in f64, one f64 rounding of the sum
 * (a double rounding differs from a single one only where the f64 sum ties at f32 precision). */
function fmaF32(a: number, b: number, c: number): number {
  return Math.fround(a * b + c);
}

/**
 * The cos and sin of each pair at `position`, as ggml_rope_cache_init and rope_yarn compute them.
 * With `theta: "f32"` every step is ggml's f32 operation (Math.fround after each, C's MAX/MIN,
 * the fused multiply-adds GCC forms, logf as the rounded f64 log); with `"f64"` the same formulas
 * run in f64 (the ideal ggml's f32 arithmetic approximates).
 */
export function refRopeAngles(
  p: RefRopeParams,
  position: number,
  theta: "f32" | "f64",
): { cos: number[]; sin: number[] } {
  const exact = theta === "f32";
  const f = exact ? Math.fround : (x: number) => x;
  const fma = exact ? fmaF32 : (a: number, b: number, c: number) => a * b + c;
  const max = (a: number, b: number): number => (a > b ? a : b);
  const min = (a: number, b: number): number => (a < b ? a : b);
  const freqBase = f(p.freqBase), freqScale = f(p.freqScale);
  const extFactor = f(p.extFactor ?? 0), attnFactor = f(p.attnFactor ?? 1);
  const nCtxOrig = f(p.nCtxOrig ?? 0);
  const corrDim = (nRot: number): number =>
    f(
      f(p.nDims * f(Math.log(f(nCtxOrig / f(f(nRot * 2) * f(Math.PI)))))) /
        f(2 * f(Math.log(freqBase))),
    );
  const low = max(0, Math.floor(corrDim(f(p.betaFast ?? 32))));
  const high = min(p.nDims - 1, Math.ceil(corrDim(f(p.betaSlow ?? 1))));
  const thetaScale = f(Math.pow(freqBase, f(-2 / p.nDims)));
  const cos: number[] = [], sin: number[] = [];
  let t = f(position);
  for (let k = 0; k < p.nDims / 2; k++) {
    const extrap = f(t / f(p.freqFactors?.[k] ?? 1));
    const interp = f(freqScale * extrap);
    let angle = interp;
    let mscale = attnFactor;
    if (extFactor !== 0) {
      const y = f(f(k - low) / max(f(0.001), f(high - low)));
      const rampMix = f(f(1 - min(1, max(0, y))) * extFactor);
      angle = fma(interp, f(1 - rampMix), f(extrap * rampMix));
      mscale = f(mscale * fma(f(0.1), f(Math.log(f(1 / freqScale))), 1));
    }
    cos.push(f(f(Math.cos(angle)) * mscale));
    sin.push(f(f(Math.sin(angle)) * mscale));
    t = f(t * thetaScale);
  }
  return { cos, sin };
}

/**
 * rope (ggml_rope_ext): each pair rotated by {@link refRopeAngles}' cos and sin (f64 rotation),
 * dims from nDims on copied. `positions` has one entry per i2.
 */
export function refRope(
  a: RefTensor,
  positions: readonly number[],
  p: RefRopeParams,
  theta: "f32" | "f64",
): RefTensor {
  const out = RefTensor.zeros(a.ne);
  const half = p.nDims / 2;
  for (let i2 = 0; i2 < a.ne[2]; i2++) {
    const { cos, sin } = refRopeAngles(p, positions[i2]!, theta);
    for (let i3 = 0; i3 < a.ne[3]; i3++) {
      for (let i1 = 0; i1 < a.ne[1]; i1++) {
        const set = (i0: number, v: number) => out.data[out.index(i0, i1, i2, i3)] = v;
        for (let k = 0; k < half; k++) {
          const [c, s] = [cos[k]!, sin[k]!];
          const [j0, j1] = p.mode === 0 ? [2 * k, 2 * k + 1] : [k, k + half];
          const x0 = a.at(j0, i1, i2, i3);
          const x1 = a.at(j1, i1, i2, i3);
          set(j0, x0 * c - x1 * s);
          set(j1, x0 * s + x1 * c);
        }
        for (let i0 = p.nDims; i0 < a.ne[0]; i0++) set(i0, a.at(i0, i1, i2, i3));
      }
    }
  }
  return out;
}

/** A batched product's shape: `a` [k, m, a2, a3] times `b` [k, n, b2, b3] (batches default 1). */
export interface BatchedMulMat {
  k: number;
  m: number;
  n: number;
  batchA?: readonly [number, number];
  batchB?: readonly [number, number];
}

/**
 * The f64 product of dense row-major `w` ([k, m, a2, a3]) and `b` ([k, n, b2, b3]), `w`
 * broadcast over `b`'s batches as ggml's mul_mat does, laid out [m, n, b2, b3]; and per output
 * the sum of the products' magnitudes (the scale of its rounding error).
 */
export function refMulMatBatched(
  w: Float32Array,
  b: Float32Array,
  c: BatchedMulMat,
): { sum: Float64Array; magnitude: Float64Array } {
  const [a2, a3] = c.batchA ?? [1, 1], [b2, b3] = c.batchB ?? [1, 1];
  const sum = new Float64Array(c.m * c.n * b2 * b3);
  const magnitude = new Float64Array(sum.length);
  for (let i3 = 0; i3 < b3; i3++) {
    for (let i2 = 0; i2 < b2; i2++) {
      const aBatch = Math.floor(i3 / (b3 / a3)) * a2 + Math.floor(i2 / (b2 / a2));
      const bBatch = i3 * b2 + i2;
      for (let n = 0; n < c.n; n++) {
        for (let m = 0; m < c.m; m++) {
          let total = 0, size = 0;
          for (let k = 0; k < c.k; k++) {
            const p = w[(aBatch * c.m + m) * c.k + k]! * b[(bBatch * c.n + n) * c.k + k]!;
            total += p;
            size += Math.abs(p);
          }
          sum[(bBatch * c.n + n) * c.m + m] = total;
          magnitude[(bBatch * c.n + n) * c.m + m] = size;
        }
      }
    }
  }
  return { sum, magnitude };
}
