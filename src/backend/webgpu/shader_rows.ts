/**
 * WGSL for reductions and row-wise ops: sum (one workgroup over every element), mean, norm,
 * rmsNorm and softmax (one workgroup per row, a tree reduction in workgroup memory). Sums are
 * compensated (Kahan) per thread, since WGSL has no f64 and the CPU sums in f64.
 * @module
 */

import { PARAMS_WGSL, tensorBindings, WORKGROUP_SIZE } from "./wgsl_common.ts";

/** Row kinds computed by {@link rowShader}. */
export type RowKind = "mean" | "norm" | "rmsNorm" | "softmax" | "softmaxMask";

/** Workgroup tree reductions (`reduce_sum`, `reduce_max`) over one value per thread. */
export const REDUCE_WGSL = `
var<workgroup> red: array<f32, ${WORKGROUP_SIZE}>;

// Tree reduction of every thread's value; all threads get the result.
fn reduce_sum(lid: u32, value: f32) -> f32 {
  red[lid] = value;
  workgroupBarrier();
  for (var s = ${WORKGROUP_SIZE / 2}u; s > 0u; s = s >> 1u) {
    if (lid < s) {
      red[lid] = red[lid] + red[lid + s];
    }
    workgroupBarrier();
  }
  let total = red[0];
  workgroupBarrier();
  return total;
}

fn reduce_max(lid: u32, value: f32) -> f32 {
  red[lid] = value;
  workgroupBarrier();
  for (var s = ${WORKGROUP_SIZE / 2}u; s > 0u; s = s >> 1u) {
    if (lid < s) {
      red[lid] = max(red[lid], red[lid + s]);
    }
    workgroupBarrier();
  }
  let total = red[0];
  workgroupBarrier();
  return total;
}
`;

/** The entry of a kernel of one workgroup per row (`P.u.x` rows): the row `r`, the thread `lid`. */
export function workgroupRowEntry(body: string): string {
  return `
@compute @workgroup_size(${WORKGROUP_SIZE})
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let r = wid.y * nwg.x + wid.x;
  if (r >= P.u.x) {
    return;
  }
${body}
}`;
}

/** The entry of a one-workgroup-per-row kernel: `r`, its coordinates `rc` and length `n`. */
export function rowEntry(body: string): string {
  return workgroupRowEntry(`  let rc = row_coords(1u, r);
  let n = P.t[1].ne.x;
${body}`);
}

// Compensated sum over the row of S0, optionally centred: (x - centre)^2 when squared.
const ROW_SUM = (value: string): string => `
  var sum = 0.0;
  var carry = 0.0;
  for (var j = lid; j < n; j = j + ${WORKGROUP_SIZE}u) {
    let x = S0_f32(at(1u, rc + vec4<u32>(j, 0u, 0u, 0u)));
    let y = ${value} - carry;
    let t = sum + y;
    carry = (t - sum) - y;
    sum = t;
  }`;

const bodies: Readonly<Record<RowKind, string>> = {
  mean: `${ROW_SUM("x")}
  let total = reduce_sum(lid, sum);
  if (lid == 0u) {
    D_set_f32(at(0u, rc), total / f32(n));
  }`,
  norm: `${ROW_SUM("x")}
  let mean = reduce_sum(lid, sum) / f32(n);
  var sq = 0.0;
  for (var j = lid; j < n; j = j + ${WORKGROUP_SIZE}u) {
    let d = S0_f32(at(1u, rc + vec4<u32>(j, 0u, 0u, 0u))) - mean;
    sq = sq + d * d;
  }
  let variance = reduce_sum(lid, sq) / f32(n);
  let scale = 1.0 / sqrt(variance + P.f.x);
  for (var j = lid; j < n; j = j + ${WORKGROUP_SIZE}u) {
    let e = rc + vec4<u32>(j, 0u, 0u, 0u);
    D_set_f32(at(0u, e), (S0_f32(at(1u, e)) - mean) * scale);
  }`,
  rmsNorm: `${ROW_SUM("x * x")}
  let scale = 1.0 / sqrt(reduce_sum(lid, sum) / f32(n) + P.f.x);
  for (var j = lid; j < n; j = j + ${WORKGROUP_SIZE}u) {
    let e = rc + vec4<u32>(j, 0u, 0u, 0u);
    D_set_f32(at(0u, e), S0_f32(at(1u, e)) * scale);
  }`,
  softmax: softmaxBody(false),
  softmaxMask: softmaxBody(true),
};

// logit(j) = x * scale (+ mask row i1, mask dims 2-3 broadcast). A row whose maximum is -inf
// (fully masked) becomes zeros, as the CPU kernel: the test is on the bits, which no compiler
// folds away, and exp of a difference below -88 is taken as 0 so -inf never reaches exp.
// The mask is multiplied by ALiBi's slope of head rc.z (P.f.y = m0, P.f.z = m1, P.f.w =
// n_head_log2; all slopes are exactly 1 when m0 = m1 = 1).
function softmaxBody(masked: boolean): string {
  const logit = masked
    ? `S0_f32(at(1u, e)) * P.f.x + slope * S1_f32(at(2u, vec4<u32>(j, rc.y, ` +
      `rc.z % P.t[2].ne.z, rc.w % P.t[2].ne.w)))`
    : "S0_f32(at(1u, e)) * P.f.x";
  const slope = masked
    ? `let head = f32(rc.z);
  let slope = select(pow(P.f.z, 2.0 * (head - P.f.w) + 1.0), pow(P.f.y, head + 1.0), head < P.f.w);`
    : "";
  return `
  ${slope}
  var m = neg_inf();
  for (var j = lid; j < n; j = j + ${WORKGROUP_SIZE}u) {
    let e = rc + vec4<u32>(j, 0u, 0u, 0u);
    m = max(m, ${logit});
  }
  let top = reduce_max(lid, m);
  let hidden = bitcast<u32>(top) == 0xff800000u;
  var sum = 0.0;
  for (var j = lid; j < n; j = j + ${WORKGROUP_SIZE}u) {
    let e = rc + vec4<u32>(j, 0u, 0u, 0u);
    let d = ${logit} - top;
    sum = sum + select(exp(d), 0.0, d < -88.0 || hidden);
  }
  let total = reduce_sum(lid, sum);
  let inverse = select(1.0 / total, 0.0, hidden);
  for (var j = lid; j < n; j = j + ${WORKGROUP_SIZE}u) {
    let e = rc + vec4<u32>(j, 0u, 0u, 0u);
    let d = ${logit} - top;
    D_set_f32(at(0u, e), select(exp(d), 0.0, d < -88.0 || hidden) * inverse);
  }`;
}

/** One workgroup per row of S0 (`P.u.x` rows); `P.f.x` is eps or the softmax scale. */
export function rowShader(kind: RowKind): string {
  const sources = kind === "softmaxMask" ? ["f32", "f32"] as const : ["f32"] as const;
  return `${PARAMS_WGSL}
${tensorBindings("f32", sources)}
${REDUCE_WGSL}
${rowEntry(bodies[kind])}`;
}

/** Sum of every element of S0 (`P.u.x` of them) by a single workgroup. */
export function sumShader(): string {
  return `${PARAMS_WGSL}
${tensorBindings("f32", ["f32"])}
${REDUCE_WGSL}
@compute @workgroup_size(${WORKGROUP_SIZE})
fn main(@builtin(local_invocation_index) lid: u32) {
  var sum = 0.0;
  var carry = 0.0;
  for (var j = lid; j < P.u.x; j = j + ${WORKGROUP_SIZE}u) {
    let y = S0_f32(at(1u, coords(1u, j))) - carry;
    let t = sum + y;
    carry = (t - sum) - y;
    sum = t;
  }
  let total = reduce_sum(lid, sum);
  if (lid == 0u) {
    D_set_f32(at(0u, vec4<u32>(0u)), total);
  }
}`;
}
