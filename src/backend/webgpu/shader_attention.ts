/**
 * WGSL for flashAttnExt: one workgroup per query row (dst row r = h + Hq * (t + T * b)). The kv
 * positions go by in tiles of one per thread: each thread takes one logit (q . k_j from the row
 * cached in workgroup memory, scaled, soft-capped, plus the ALiBi-sloped mask), the workgroup
 * reduces the tile's maximum, and the running maximum, sum and output (one element of each
 * `WORKGROUP_SIZE`-th output dim per thread) are rescaled as in the CPU kernel (online softmax),
 * so no row of scores is ever stored.
 *
 * The node's uniform slot describes q, k, v and the mask in `P.t[0..3]` (the destination has
 * five bindings' worth of tensors, one more than a slot holds); the destination is contiguous
 * by construction and its byte offset is `P.u.y`. `P.f` = (scale / softcap or scale, softcap,
 * m0, m1), `P.u.z` = ALiBi's n_head_log2 (m0 = m1 = 1 without maxBias).
 * @module
 */

import type { DType } from "../../dtype.ts";
import { PARAMS_WGSL, tensorBindings, WORKGROUP_SIZE } from "./wgsl_common.ts";
import { workgroupRowEntry } from "./shader_rows.ts";

/** Output dims each thread accumulates: head dims up to this times the workgroup size. */
export const ATTENTION_DV_PER_THREAD = 4;
/** Longest q/k row the workgroup caches (f32 elements of workgroup memory). */
export const ATTENTION_DK_MAX = 1024;

/** The shader for K/V of `kv` dtypes (f32 or f16) and an optional mask of `mask` dtype. */
export function flashAttnShader(k: DType, v: DType, mask: DType | null): string {
  const sources: DType[] = ["f32", k, v, ...(mask ? [mask] : [])];
  const maskTerm = mask
    ? `s = s + slope * S3_f32(at(3u, vec4<u32>(j, t, h % P.t[3].ne.z, b % P.t[3].ne.w)));`
    : "";
  return `${PARAMS_WGSL}
${tensorBindings("f32", sources)}
var<workgroup> qrow: array<f32, ${ATTENTION_DK_MAX}>;
var<workgroup> weights: array<f32, ${WORKGROUP_SIZE}>;
var<workgroup> red: array<f32, ${WORKGROUP_SIZE}>;

fn reduce(lid: u32, value: f32, take_max: bool) -> f32 {
  red[lid] = value;
  workgroupBarrier();
  for (var s = ${WORKGROUP_SIZE / 2}u; s > 0u; s = s >> 1u) {
    if (lid < s) {
      red[lid] = select(red[lid] + red[lid + s], max(red[lid], red[lid + s]), take_max);
    }
    workgroupBarrier();
  }
  let total = red[0];
  workgroupBarrier();
  return total;
}

fn is_neg_inf(x: f32) -> bool {
  return bitcast<u32>(x) == 0xff800000u;
}

${
    workgroupRowEntry(`
  let qn = P.t[0].ne;
  let h = r % qn.z;
  let t = (r / qn.z) % qn.y;
  let b = r / (qn.z * qn.y);
  let dk = qn.x;
  let dv = P.t[2].ne.x;
  let nkv = P.t[1].ne.y;
  let kh = h / (qn.z / P.t[1].ne.z);
  let kb = b / (qn.w / P.t[1].ne.w);
  let vh = h / (qn.z / P.t[2].ne.z);
  let vb = b / (qn.w / P.t[2].ne.w);
  for (var e = lid; e < dk; e = e + ${WORKGROUP_SIZE}u) {
    qrow[e] = S0_f32(at(0u, vec4<u32>(e, t, h, b)));
  }
  workgroupBarrier();
  let log2h = P.u.z;
  let slope = select(pow(P.f.w, f32(2u * (h - log2h) + 1u)), pow(P.f.z, f32(h + 1u)), h < log2h);
  var m = neg_inf();
  var l = 0.0;
  var acc = array<f32, ${ATTENTION_DV_PER_THREAD}>();
  for (var j0 = 0u; j0 < nkv; j0 = j0 + ${WORKGROUP_SIZE}u) {
    let j = j0 + lid;
    var s = neg_inf();
    if (j < nkv) {
      var dot = 0.0;
      for (var e = 0u; e < dk; e = e + 1u) {
        dot = dot + qrow[e] * S1_f32(at(1u, vec4<u32>(e, j, kh, kb)));
      }
      s = dot * P.f.x;
      if (P.f.y > 0.0) {
        s = P.f.y * tanh(s);
      }
      ${maskTerm}
    }
    let top = max(m, reduce(lid, s, true));
    let hidden = is_neg_inf(top);
    let d = s - top;
    let p = select(exp(d), 0.0, hidden || is_neg_inf(s) || d < -88.0);
    let alpha = select(exp(m - top), 0.0, is_neg_inf(m));
    let factor = select(alpha, 1.0, hidden);
    weights[lid] = p;
    l = l * factor + reduce(lid, p, false);
    let count = min(${WORKGROUP_SIZE}u, nkv - j0);
    for (var i = 0u; i < ${ATTENTION_DV_PER_THREAD}u; i = i + 1u) {
      let e = lid + i * ${WORKGROUP_SIZE}u;
      if (e < dv) {
        var sum = acc[i] * factor;
        for (var jj = 0u; jj < count; jj = jj + 1u) {
          sum = sum + weights[jj] * S2_f32(at(2u, vec4<u32>(e, j0 + jj, vh, vb)));
        }
        acc[i] = sum;
      }
    }
    workgroupBarrier();
    m = select(top, m, hidden);
  }
  let inverse = select(1.0 / l, 0.0, l == 0.0);
  for (var i = 0u; i < ${ATTENTION_DV_PER_THREAD}u; i = i + 1u) {
    let e = lid + i * ${WORKGROUP_SIZE}u;
    if (e < dv) {
      D_set_f32(P.u.y + (e + dv * r) * 4u, acc[i] * inverse);
    }
  }
`)
  }`;
}
