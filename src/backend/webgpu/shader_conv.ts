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
