/**
 * WGSL for mulMat: D[m, n] = sum_k S0[k, m] * S1[k, n] per batch, S0 broadcast over batches as
 * ggml does. A 16x16 workgroup computes a 64x64 tile of D, each thread a 4x4 block held in
 * registers; K advances 16 at a time through tiles of S0 and S1 in workgroup memory. Loads go
 * through the sources' strides, so transposed and permuted views work, and f16 S0 is widened
 * on load (S1 then rounded to f16, as ggml converts src1 to f16 for f16 weights); bf16 and block-quantized S0 are decoded element by element as the tile is loaded
 * (`shader_quant.ts`), so each weight is decoded once per workgroup that reads it.
 * @module
 */

import type { DType } from "../../dtype.ts";
import {
  ACT_Q8_WGSL,
  hasMinTerm,
  isWeightDType,
  quantizesActivations,
  weightBindings,
  weightLoad,
} from "./shader_quant.ts";
import { matmulPrologue, PARAMS_WGSL, tensorBindings } from "./wgsl_common.ts";

/** Output tile edge (M and N) of one workgroup. */
export const MATMUL_TILE = 64;
const TK = 16;

/** The kernel for an S0 of dtype `a` (S1 and D are f32). */
export function matmulShader(a: DType): string {
  const bindings = isWeightDType(a)
    ? weightBindings(a, ["f32"])
    : tensorBindings("f32", [a, "f32"]);
  // q4_1 and q5_1 load d * q; each block's min times the activations' q8_1 s is added apart.
  const minTerm = hasMinTerm(a);
  const load = isWeightDType(a)
    ? weightLoad(a, "k", "m0 + rr, a2, a3").replace("W_value(", minTerm ? "W_scaled(" : "W_value(")
    : "S0_f32(at(1u, vec4<u32>(k, m0 + rr, a2, a3)))";
  // f16 weights multiply S1 rounded to f16, as ggml (and the CPU backend) do; q8_0, q4_*, q5_*
  // weights multiply S1 quantized to q8 blocks of 32 (the block's largest magnitude read here).
  const b = "S1_f32(at(2u, vec4<u32>(k, n0 + rr, i2, i3)))";
  const quantize = quantizesActivations(a);
  const loadB = a === "f16"
    ? `f16_to_f32(f32_to_f16(${b}))`
    : quantize
    ? `act_q8(${b}, block_amax(k - k % 32u, n0 + rr, i2, i3))`
    : b;
  const amax = quantize
    ? `${ACT_Q8_WGSL}
fn block_amax(kb: u32, n: u32, i2: u32, i3: u32) -> f32 {
  var amax = 0.0;
  for (var t = 0u; t < 32u; t = t + 1u) {
    amax = max(amax, abs(S1_f32(at(2u, vec4<u32>(kb + t, n, i2, i3)))));
  }
  return amax;
}`
    : "";
  // Per 32-block (every other TK step): the tile rows' mins and the tile columns' q8_1 s.
  const minDecl = minTerm
    ? `var<workgroup> Ms: array<f32, ${MATMUL_TILE}>;
var<workgroup> Ss: array<f32, ${MATMUL_TILE}>;
fn block_s(kb: u32, n: u32, i2: u32, i3: u32) -> f32 {
  let amax = block_amax(kb, n, i2, i3);
  var sq = 0.0;
  for (var t = 0u; t < 32u; t = t + 1u) {
    sq = sq + act_q8_int(S1_f32(at(2u, vec4<u32>(kb + t, n, i2, i3))), amax);
  }
  return act_q8_s(amax, sq);
}`
    : "";
  const minLoad = minTerm
    ? `if (k0 % 32u == 0u) {
      if (lid < ${MATMUL_TILE}u) {
        var mv = 0.0;
        if (m0 + lid < M) {
          mv = W_min(at(1u, vec4<u32>(k0 / 32u, m0 + lid, a2, a3)));
        }
        Ms[lid] = mv;
      } else if (lid < ${2 * MATMUL_TILE}u) {
        let c = lid - ${MATMUL_TILE}u;
        var sv = 0.0;
        if (n0 + c < N) {
          sv = block_s(k0, n0 + c, i2, i3);
        }
        Ss[c] = sv;
      }
    }`
    : "";
  const minAdd = minTerm
    ? `if (k0 % 32u == 0u) {
      for (var x = 0u; x < 4u; x = x + 1u) {
        for (var y = 0u; y < 4u; y = y + 1u) {
          acc[x * 4u + y] = acc[x * 4u + y] + Ms[lid3.x + 16u * x] * Ss[lid3.y + 16u * y];
        }
      }
    }`
    : "";
  return `${PARAMS_WGSL}
${bindings}
${amax}
${minDecl}
var<workgroup> As: array<f32, ${TK * MATMUL_TILE}>;
var<workgroup> Bs: array<f32, ${TK * MATMUL_TILE}>;

@compute @workgroup_size(16, 16)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_id) lid3: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
${matmulPrologue(`${MATMUL_TILE}u`, `${MATMUL_TILE}u`)}
  var acc: array<f32, 16>;
  for (var q = 0u; q < 16u; q = q + 1u) {
    acc[q] = 0.0;
  }
  for (var k0 = 0u; k0 < K; k0 = k0 + ${TK}u) {
    // 1024 elements per tile, 4 per thread; k is fastest so neighbours read neighbours.
    for (var l = 0u; l < 4u; l = l + 1u) {
      let e = lid + 256u * l;
      let kk = e % ${TK}u;
      let rr = e / ${TK}u;
      let k = k0 + kk;
      var va = 0.0;
      if (k < K && m0 + rr < M) {
        va = ${load};
      }
      As[kk * ${MATMUL_TILE}u + rr] = va;
      var vb = 0.0;
      if (k < K && n0 + rr < N) {
        vb = ${loadB};
      }
      Bs[kk * ${MATMUL_TILE}u + rr] = vb;
    }
    ${minLoad}
    workgroupBarrier();
    for (var kk = 0u; kk < ${TK}u; kk = kk + 1u) {
      var av: array<f32, 4>;
      var bv: array<f32, 4>;
      for (var q = 0u; q < 4u; q = q + 1u) {
        av[q] = As[kk * ${MATMUL_TILE}u + lid3.x + 16u * q];
        bv[q] = Bs[kk * ${MATMUL_TILE}u + lid3.y + 16u * q];
      }
      for (var x = 0u; x < 4u; x = x + 1u) {
        for (var y = 0u; y < 4u; y = y + 1u) {
          acc[x * 4u + y] = acc[x * 4u + y] + av[x] * bv[y];
        }
      }
    }
    ${minAdd}
    workgroupBarrier();
  }
  for (var x = 0u; x < 4u; x = x + 1u) {
    let m = m0 + lid3.x + 16u * x;
    for (var y = 0u; y < 4u; y = y + 1u) {
      let n = n0 + lid3.y + 16u * y;
      if (m < M && n < N) {
        D_set_f32(at(0u, vec4<u32>(m, n, i2, i3)), acc[x * 4u + y]);
      }
    }
  }
}`;
}
