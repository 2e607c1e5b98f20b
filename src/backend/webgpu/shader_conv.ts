/**
 * WGSL for im2col (ggml_im2col): one thread per destination element. Element k of row
 * (ow, oh, n) is tap (kx, ky) = (k % KW, (k / KW) % KH) of channel k / (KW * KH), read from the
 * image at (ow*s0 + kx*d0 - p0, oh*s1 + ky*d1 - p1), 0 outside it. `P.f` = (s0, s1, p0, p1),
 * `P.u.z`, `P.u.w` = d0, d1; the kernel (binding S0) only gives its shape. The planar layout
 * (2D) holds the same values at (ow, oh, k, n).
 * @module
 */

import type { DType } from "../../dtype.ts";
import { flatKernel, PARAMS_WGSL, tensorBindings } from "./wgsl_common.ts";

/** im2col into a `dst` (f32 or f16) destination; `is2D` picks the layout (see conv.ts). */
export function im2colShader(dst: DType, is2D: boolean, planar: boolean): string {
  // Destination coordinates as (k, ow, oh or image, image): the planar layout is (ow, oh, k, n).
  const unfold = planar ? "let c = vec4<u32>(d.z, d.x, d.y, d.w);" : "let c = d;";
  const image = is2D ? "vec4<u32>(u32(sx), u32(sy), ic, c.w)" : "vec4<u32>(u32(sx), ic, c.z, 0u)";
  return `${PARAMS_WGSL}
${tensorBindings(dst, ["f32", "f32"])}
${
    flatKernel(`  let d = coords(0u, i);
  ${unfold}
  let kw = P.t[1].ne.x;
  let kh = ${is2D ? "P.t[1].ne.y" : "1u"};
  let kx = c.x % kw;
  let ky = (c.x / kw) % kh;
  let ic = c.x / (kw * kh);
  let oh = ${is2D ? "c.z" : "0u"};
  let sx = i32(c.y) * i32(P.f.x) + i32(kx) * i32(P.u.z) - i32(P.f.z);
  let sy = i32(oh) * i32(P.f.y) + i32(ky) * i32(P.u.w) - i32(P.f.w);
  let iw = i32(P.t[2].ne.x);
  let ih = ${is2D ? "i32(P.t[2].ne.y)" : "1"};
  var value = 0.0;
  if (sx >= 0 && sx < iw && sy >= 0 && sy < ih) {
    value = S1_f32(at(2u, ${image}));
  }
  D_set_f32(at(0u, d), value);`)
  }`;
}

/**
 * conv_transpose_1d / _2d as a gather, one thread per destination element (the CPU kernel's
 * loops, kernels/conv_transpose.zig); `P.u.z` = the stride.
 */
export function convTransposeShader(kernel: DType, is2D: boolean): string {
  const tap = is2D ? "vec4<u32>(kx, ky, oc, ic)" : "vec4<u32>(kx, oc, ic, 0u)";
  const pixel = is2D ? "vec4<u32>(ix, iy, ic, image)" : "vec4<u32>(ix, ic, 0u, 0u)";
  return `${PARAMS_WGSL}
${tensorBindings("f32", [kernel, "f32"])}
${
    flatKernel(`  let c = coords(0u, i);
  let s = P.u.z;
  let kn = P.t[1].ne;
  let inn = P.t[2].ne;
  let y = ${is2D ? "c.y" : "0u"};
  let oc = ${is2D ? "c.z" : "c.y"};
  let image = ${is2D ? "c.w" : "0u"};
  let kh = ${is2D ? "kn.y" : "1u"};
  let channels = ${is2D ? "kn.w" : "kn.z"};
  let height = ${is2D ? "inn.y" : "1u"};
  var total = 0.0;
  for (var ky = 0u; ky < kh; ky = ky + 1u) {
    if (ky > y || (y - ky) % s != 0u) {
      continue;
    }
    let iy = (y - ky) / s;
    if (iy >= height) {
      continue;
    }
    for (var kx = 0u; kx < kn.x; kx = kx + 1u) {
      if (kx > c.x || (c.x - kx) % s != 0u) {
        continue;
      }
      let ix = (c.x - kx) / s;
      if (ix >= inn.x) {
        continue;
      }
      for (var ic = 0u; ic < channels; ic = ic + 1u) {
        total = total + S0_f32(at(1u, ${tap})) * S1_f32(at(2u, ${pixel}));
      }
    }
  }
  D_set_f32(at(0u, c), total);`)
  }`;
}
