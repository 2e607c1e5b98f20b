/**
 * WGSL for l2Norm (one workgroup per row) and groupNorm (one workgroup per group of one
 * image): compensated f32 sums in each thread, a tree reduction in workgroup memory, then one
 * pass that scales every element, as the CPU kernels (kernels/group_norm.zig).
 * @module
 */

import { PARAMS_WGSL, tensorBindings, WORKGROUP_SIZE } from "./wgsl_common.ts";
import { REDUCE_WGSL, rowEntry, workgroupRowEntry } from "./shader_rows.ts";

/** One workgroup per row of S0 (`P.u.x` rows); `P.f.x` = eps. */
export function l2NormShader(): string {
  return `${PARAMS_WGSL}
${tensorBindings("f32", ["f32"])}
${REDUCE_WGSL}
${
    rowEntry(`
  var sum = 0.0;
  var carry = 0.0;
  for (var j = lid; j < n; j = j + ${WORKGROUP_SIZE}u) {
    let x = S0_f32(at(1u, rc + vec4<u32>(j, 0u, 0u, 0u)));
    let y = x * x - carry;
    let t = sum + y;
    carry = (t - sum) - y;
    sum = t;
  }
  let scale = 1.0 / max(sqrt(reduce_sum(lid, sum)), P.f.x);
  for (var j = lid; j < n; j = j + ${WORKGROUP_SIZE}u) {
    let e = rc + vec4<u32>(j, 0u, 0u, 0u);
    D_set_f32(at(0u, e), S0_f32(at(1u, e)) * scale);
  }
`)
  }`;
}

/**
 * One workgroup per (group, image): `P.u.x` = groups * N, `P.u.z` = groups, `P.u.w` =
 * channels per group; `P.f.x` = eps.
 */
export function groupNormShader(): string {
  return `${PARAMS_WGSL}
${tensorBindings("f32", ["f32"])}
${REDUCE_WGSL}

// Element j of the group: (x, y, channel begin + c, image).
fn group_coords(j: u32, begin: u32, image: u32) -> vec4<u32> {
  let ne = P.t[1].ne;
  return vec4<u32>(j % ne.x, (j / ne.x) % ne.y, begin + j / (ne.x * ne.y), image);
}
${
    workgroupRowEntry(`
  let ne = P.t[1].ne;
  let group = r % P.u.z;
  let image = r / P.u.z;
  let begin = min(ne.z, group * P.u.w);
  let end = min(ne.z, begin + P.u.w);
  let count = ne.x * ne.y * (end - begin);
  var sum = 0.0;
  var carry = 0.0;
  for (var j = lid; j < count; j = j + ${WORKGROUP_SIZE}u) {
    let y = S0_f32(at(1u, group_coords(j, begin, image))) - carry;
    let t = sum + y;
    carry = (t - sum) - y;
    sum = t;
  }
  let mean = reduce_sum(lid, sum) / f32(max(count, 1u));
  var squares = 0.0;
  carry = 0.0;
  for (var j = lid; j < count; j = j + ${WORKGROUP_SIZE}u) {
    let d = S0_f32(at(1u, group_coords(j, begin, image))) - mean;
    let y = d * d - carry;
    let t = squares + y;
    carry = (t - squares) - y;
    squares = t;
  }
  let variance = reduce_sum(lid, squares) / f32(max(count, 1u));
  let scale = 1.0 / sqrt(variance + P.f.x);
  for (var j = lid; j < count; j = j + ${WORKGROUP_SIZE}u) {
    let c = group_coords(j, begin, image);
    D_set_f32(at(0u, c), (S0_f32(at(1u, c)) - mean) * scale);
  }
`)
  }`;
}
