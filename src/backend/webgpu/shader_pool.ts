/**
 * WGSL for pool1d and pool2d: one thread per output element, the window walked as in the CPU
 * kernel (kernels/pool.zig). `P.f` = (k0, k1, s0, s1) and `P.u.z`, `P.u.w` = p0, p1 (k1 = s1 =
 * 1, p1 = 0 in 1D); the shader variant fixes max or average and 1D or 2D.
 * @module
 */

import type { DType } from "../../dtype.ts";
import { flatKernel, PARAMS_WGSL, tensorBindings } from "./wgsl_common.ts";

/** Pooling of a `src` (f32 or f16) input; `average` picks the mean, `is2D` the window. */
export function poolShader(src: DType, average: boolean, is2D: boolean): string {
  const combine = average ? "res = res + v;" : "res = select(v, res, v < res);";
  const finish = average
    ? (is2D ? "res = res / (P.f.x * P.f.y);" : "res = select(0.0, res / f32(count), count > 0u);")
    : "";
  const row = is2D ? "vec4<u32>(u32(x), u32(y), c.z, c.w)" : "vec4<u32>(u32(x), c.y, c.z, c.w)";
  return `${PARAMS_WGSL}
${tensorBindings("f32", [src])}
${
    flatKernel(`  let c = coords(0u, i);
  let ix = i32(c.x) * i32(P.f.z) - i32(P.u.z);
  let iy = ${is2D ? "i32(c.y) * i32(P.f.w) - i32(P.u.w)" : "0"};
  let ne = P.t[1].ne;
  var res = ${average ? "0.0" : "-3.40282346638528859812e+38"};
  var count = 0u;
  for (var ky = 0; ky < i32(P.f.y); ky = ky + 1) {
    let y = iy + ky;
    if (${is2D ? "y < 0 || y >= i32(ne.y)" : "false"}) {
      continue;
    }
    for (var kx = 0; kx < i32(P.f.x); kx = kx + 1) {
      let x = ix + kx;
      if (x < 0 || x >= i32(ne.x)) {
        continue;
      }
      let v = S0_f32(at(1u, ${row}));
      ${combine}
      count = count + 1u;
    }
  }
  ${finish}
  D_set_f32(at(0u, c), res);`)
  }`;
}
