/**
 * WGSL for reductions and row-wise ops: sum (one workgroup over every element), mean, norm,
 * rmsNorm and softmax (one workgroup per row, a tree reduction in workgroup memory). mean's and
 * norm's sums are compensated (Kahan) per thread, since WGSL has no f64 and the CPU sums in f64.
 *
 * rmsNorm and softmax give ggml-cpu's AVX2 bits (`zig/kernels/norm.zig`, `soft_max.zig`), with
 * ggml's f64 totals carried as float-floats (`EXACT_WGSL`), which round as the f64 ones except
 * where a total lies within about 2^-40 of a rounding boundary:
 * - rmsNorm: the squares rounded to f32, their total, mean = (float)(total / n), scale =
 *   1 / sqrt(mean + eps) in f32, then x * scale.
 * - softmax: logits x * scale + slope * mask (each rounded), minus the row's maximum; the exps
 *   of each full vector of 8 through ggml_v_expf, the vector's f32 sum in ggml's AVX2 order added
 *   to the total; the row's last n % 8 through glibc's expf (`expf_libc`), each added to the
 *   total; then each exp times (float)(1 / total). A fully masked row gives zeros.
 * @module
 */

import { EXACT_WGSL, GGML_EXP_WGSL } from "./wgsl_exact.ts";
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

/** Workgroup tree reduction of float-float totals (`reduce_ff`); needs `EXACT_WGSL` before it. */
const REDUCE_FF_WGSL = `
var<workgroup> red_ff: array<vec2<f32>, ${WORKGROUP_SIZE}>;

// The float-float sum of every thread's total; all threads get it.
fn reduce_ff(lid: u32, value: vec2<f32>) -> vec2<f32> {
  red_ff[lid] = value;
  workgroupBarrier();
  for (var s = ${WORKGROUP_SIZE / 2}u; s > 0u; s = s >> 1u) {
    if (lid < s) {
      red_ff[lid] = ff_join(red_ff[lid], red_ff[lid + s]);
    }
    workgroupBarrier();
  }
  let total = red_ff[0];
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
  // ggml_compute_forward_rms_norm_f32: each square rounded to f32, summed as a float-float.
  rmsNorm: `
  var acc = vec2<f32>(0.0, 0.0);
  for (var j = lid; j < n; j = j + ${WORKGROUP_SIZE}u) {
    let x = S0_f32(at(1u, rc + vec4<u32>(j, 0u, 0u, 0u)));
    acc = ff_add(acc, x * x);
  }
  let mean = ff_div_f32(reduce_ff(lid, acc), f32(n));
  // opaque: 1 / sqrt(y) must stay a correctly rounded root and quotient, not an rsqrt.
  let scale = 1.0 / opaque(sqrt(mean + P.f.x));
  for (var j = lid; j < n; j = j + ${WORKGROUP_SIZE}u) {
    let e = rc + vec4<u32>(j, 0u, 0u, 0u);
    D_set_f32(at(0u, e), S0_f32(at(1u, e)) * scale);
  }`,
  softmax: softmaxBody(false),
  softmaxMask: softmaxBody(true),
};

// logit(j) = x * scale (+ slope * mask row i1, mask dims 2-3 broadcast), each rounded as ggml.
// The mask is multiplied by ALiBi's slope of head rc.z (P.f.y = m0, P.f.z = m1, P.f.w =
// n_head_log2; all slopes are exactly 1 when m0 = m1 = 1). A row whose maximum is -inf (fully
// masked) becomes zeros, as the CPU kernel: the test is on the bits, which no compiler folds away.
// The logit is opaque before the maximum is subtracted: Mesa otherwise reassociates
// (x * scale + mask) - top, one rounding off.
// Thread t takes the row's full vectors of 8 t, t + ${WORKGROUP_SIZE}, ...: their exps (ggml_v_expf
// lane by lane; 0 below -104, as ggml_v_expf's there) go to D and their sums, in ggml's AVX2
// order, into the thread's float-float total; threads t < n % 8 take the tail element 8 (n / 8) +
// t through glibc's expf. The last pass scales the exps each thread wrote itself.
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
  let vectors = n / 8u;
  let tail = vectors * 8u + lid;
  var acc = vec2<f32>(0.0, 0.0);
  if (!hidden) {
    for (var v = lid; v < vectors; v = v + ${WORKGROUP_SIZE}u) {
      var lanes: array<f32, 8>;
      for (var l = 0u; l < 8u; l = l + 1u) {
        let j = 8u * v + l;
        let e = rc + vec4<u32>(j, 0u, 0u, 0u);
        let d = opaque(${logit}) - top;
        var y = 0.0;
        if (d >= -104.0) {
          y = ggml_v_expf(d);
        }
        lanes[l] = y;
        D_set_f32(at(0u, e), y);
      }
      let lo = vec4<f32>(lanes[0], lanes[1], lanes[2], lanes[3]);
      let hi = vec4<f32>(lanes[4], lanes[5], lanes[6], lanes[7]);
      acc = ff_add(acc, ggml_reduce_add8(lo, hi));
    }
    if (tail < n) {
      let j = tail;
      let e = rc + vec4<u32>(j, 0u, 0u, 0u);
      let y = expf_libc(opaque(${logit}) - top);
      D_set_f32(at(0u, e), y);
      acc = ff_add(acc, y);
    }
  }
  let inverse = ff_recip_f32(reduce_ff(lid, acc));
  for (var j = 8u * lid; j < 8u * vectors; j = j + ${8 * WORKGROUP_SIZE}u) {
    for (var l = 0u; l < 8u; l = l + 1u) {
      let e = rc + vec4<u32>(j + l, 0u, 0u, 0u);
      D_set_f32(at(0u, e), select(D_f32(at(0u, e)) * inverse, 0.0, hidden));
    }
  }
  if (tail < n) {
    let e = rc + vec4<u32>(tail, 0u, 0u, 0u);
    D_set_f32(at(0u, e), select(D_f32(at(0u, e)) * inverse, 0.0, hidden));
  }`;
}

/** The exact-arithmetic WGSL each row kind calls (ggml's bits: rmsNorm and softmax). */
const exactParts: Readonly<Record<RowKind, () => string>> = {
  mean: () => "",
  norm: () => "",
  rmsNorm: () => `${EXACT_WGSL}${REDUCE_FF_WGSL}`,
  softmax: () => `${EXACT_WGSL}${GGML_EXP_WGSL}${REDUCE_FF_WGSL}`,
  softmaxMask: () => `${EXACT_WGSL}${GGML_EXP_WGSL}${REDUCE_FF_WGSL}`,
};

/** One workgroup per row of S0 (`P.u.x` rows); `P.f.x` is eps or the softmax scale. */
export function rowShader(kind: RowKind): string {
  const sources = kind === "softmaxMask" ? ["f32", "f32"] as const : ["f32"] as const;
  return `${PARAMS_WGSL}
${tensorBindings("f32", sources)}
${REDUCE_WGSL}
${exactParts[kind]()}
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
