/**
 * WGSL for the row reductions and scans of `src/ops/reduce_rows.ts`: sumRows, maxRows, minRows
 * and argmax (one workgroup per row, a tree reduction in workgroup memory), cumsum (one thread
 * per row, a compensated running sum) and countEqual (one workgroup over every element). f32 or
 * f16 sources; the comparisons are the CPU's (`x > best`, the lowest index on ties), so NaN
 * never wins.
 * @module
 */

import type { DType } from "../../dtype.ts";
import { flatKernel, PARAMS_WGSL, tensorBindings, WORKGROUP_SIZE } from "./wgsl_common.ts";
import { rowEntry } from "./shader_rows.ts";

/** The kinds {@link rowReduceShader} computes. */
export type RowReduceKind = "sumRows" | "maxRows" | "minRows" | "argmax";

const ENTRY = (body: string): string => `
var<workgroup> values: array<f32, ${WORKGROUP_SIZE}>;
var<workgroup> places: array<u32, ${WORKGROUP_SIZE}>;
${rowEntry(body)}`;

const SUM = `
  var sum = 0.0;
  var carry = 0.0;
  for (var j = lid; j < n; j = j + ${WORKGROUP_SIZE}u) {
    let y = S0_f32(at(1u, rc + vec4<u32>(j, 0u, 0u, 0u))) - carry;
    let t = sum + y;
    carry = (t - sum) - y;
    sum = t;
  }
  values[lid] = sum;
  workgroupBarrier();
  for (var s = ${WORKGROUP_SIZE / 2}u; s > 0u; s = s >> 1u) {
    if (lid < s) {
      values[lid] = values[lid] + values[lid + s];
    }
    workgroupBarrier();
  }
  if (lid == 0u) {
    D_set_f32(at(0u, rc), values[0]);
  }`;

// The best value and its first index: each thread scans its elements in order, then pairs
// merge keeping the lower index among equals.
function extreme(
  better: (a: string, b: string) => string,
  start: string,
  argmax: boolean,
): string {
  const store = argmax
    ? "D_set_bits(at(0u, vec4<u32>(rc.y, rc.z, rc.w, 0u)), places[0]);"
    : "D_set_f32(at(0u, rc), values[0]);";
  return `
  var best = bitcast<f32>(${start});
  var place = 0u;
  for (var j = lid; j < n; j = j + ${WORKGROUP_SIZE}u) {
    let x = S0_f32(at(1u, rc + vec4<u32>(j, 0u, 0u, 0u)));
    if (${better("x", "best")}) {
      best = x;
      place = j;
    }
  }
  values[lid] = best;
  places[lid] = place;
  workgroupBarrier();
  for (var s = ${WORKGROUP_SIZE / 2}u; s > 0u; s = s >> 1u) {
    if (lid < s) {
      let v = values[lid + s];
      let p = places[lid + s];
      if (${better("v", "values[lid]")} || (v == values[lid] && p < places[lid])) {
        values[lid] = v;
        places[lid] = p;
      }
    }
    workgroupBarrier();
  }
  if (lid == 0u) {
    ${store}
  }`;
}

const greater = (a: string, b: string): string => `${a} > ${b}`;
const less = (a: string, b: string): string => `${a} < ${b}`;

const bodies: Readonly<Record<RowReduceKind, string>> = {
  sumRows: SUM,
  maxRows: extreme(greater, "0xff800000u", false),
  minRows: extreme(less, "0x7f800000u", false),
  argmax: extreme(greater, "0xff800000u", true),
};

/** One workgroup per row of S0 (`P.u.x` rows). */
export function rowReduceShader(kind: RowReduceKind, dtype: DType): string {
  const dst = kind === "argmax" ? "i32" : dtype;
  return `${PARAMS_WGSL}
${tensorBindings(dst, [dtype])}
${ENTRY(bodies[kind])}`;
}

/** Running sums along each row (`P.u.x` rows), one thread a row, compensated in f32. */
export function cumsumShader(dtype: DType): string {
  return `${PARAMS_WGSL}
${tensorBindings(dtype, [dtype])}
${
    flatKernel(`  let rc = row_coords(1u, i);
  var sum = 0.0;
  var carry = 0.0;
  for (var j = 0u; j < P.t[1].ne.x; j = j + 1u) {
    let e = rc + vec4<u32>(j, 0u, 0u, 0u);
    let y = S0_f32(at(1u, e)) - carry;
    let t = sum + y;
    carry = (t - sum) - y;
    sum = t;
    D_set_f32(at(0u, e), sum);
  }`)
  }`;
}

/**
 * The number of equal elements of S0 and S1 (i32, `P.u.x` of them), by one workgroup, into an
 * i64 D: its low word the count, its high word 0 (a storage binding holds below 2^32 elements).
 */
export function countEqualShader(): string {
  // D is bound as words: the i64 is two of them, little endian.
  return `${PARAMS_WGSL}
${tensorBindings("i32", ["i32", "i32"])}
var<workgroup> counts: array<u32, ${WORKGROUP_SIZE}>;

@compute @workgroup_size(${WORKGROUP_SIZE})
fn main(@builtin(local_invocation_index) lid: u32) {
  var count = 0u;
  for (var j = lid; j < P.u.x; j = j + ${WORKGROUP_SIZE}u) {
    let c = coords(1u, j);
    count = count + select(0u, 1u, S0_bits(at(1u, c)) == S1_bits(at(2u, c)));
  }
  counts[lid] = count;
  workgroupBarrier();
  for (var s = ${WORKGROUP_SIZE / 2}u; s > 0u; s = s >> 1u) {
    if (lid < s) {
      counts[lid] = counts[lid] + counts[lid + s];
    }
    workgroupBarrier();
  }
  if (lid == 0u) {
    let d = at(0u, vec4<u32>(0u));
    D_set_bits(d, counts[0]);
    D_set_bits(d + 4u, 0u);
  }
}`;
}
