/**
 * WGSL for interpolate and timestepEmbedding, one thread per destination element, the same
 * arithmetic as the CPU kernels (kernels/interpolate.zig). interpolate: `P.f` = (sf0, sf1, sf2,
 * sf3) computed as the CPU does, `P.u.z` = the pixel offset's bits; timestepEmbedding: `P.f.x` =
 * ln(maxPeriod) (f32), `P.u.z` = dim.
 * @module
 */

import { flatKernel, PARAMS_WGSL, tensorBindings } from "./wgsl_common.ts";

/** How interpolateShader samples (the mode's low byte). */
export type InterpolateKind = "nearest" | "bilinear" | "bicubic";

/** ggml-cpu's bicubic convolution weights (alpha -0.75) and one 4-tap mix, as the CPU's. */
const BICUBIC_WGSL = `
fn cubic_w1(x: f32) -> f32 {
  return ((-0.75 + 2.0) * x - (-0.75 + 3.0)) * x * x + 1.0;
}
fn cubic_w2(x: f32) -> f32 {
  return ((-0.75 * x - 5.0 * -0.75) * x + 8.0 * -0.75) * x - 4.0 * -0.75;
}
fn cubic_mix(p: vec4<f32>, x: f32) -> f32 {
  return p.x * cubic_w2(x + 1.0) + p.y * cubic_w1(x + 0.0) + p.z * cubic_w1(1.0 - x) +
    p.w * cubic_w2(2.0 - x);
}
fn cubic_tap(x: i32, y: i32, i2: u32, i3: u32) -> f32 {
  let sn = vec2<i32>(P.t[1].ne.xy);
  let c = vec4<u32>(u32(clamp(x, 0, sn.x - 1)), u32(clamp(y, 0, sn.y - 1)), i2, i3);
  return S0_f32(at(1u, c));
}
fn cubic_row(x0: i32, y: i32, dx: f32, i2: u32, i3: u32) -> f32 {
  let p = vec4<f32>(cubic_tap(x0 - 1, y, i2, i3), cubic_tap(x0, y, i2, i3),
    cubic_tap(x0 + 1, y, i2, i3), cubic_tap(x0 + 2, y, i2, i3));
  return cubic_mix(p, dx);
}`;

const BICUBIC_BODY = `  let offset = bitcast<f32>(P.u.z);
  let y = (f32(c.y) + offset) / P.f.y - offset;
  let y0 = i32(floor(y));
  let dy = y - floor(y);
  let x = (f32(c.x) + offset) / P.f.x - offset;
  let x0 = i32(floor(x));
  let dx = x - floor(x);
  let rows = vec4<f32>(cubic_row(x0, y0 - 1, dx, i2, i3), cubic_row(x0, y0, dx, i2, i3),
    cubic_row(x0, y0 + 1, dx, i2, i3), cubic_row(x0, y0 + 2, dx, i2, i3));
  D_set_f32(at(0u, c), cubic_mix(rows, dy));`;

/** Nearest, bilinear or bicubic resampling of S0 into D. */
export function interpolateShader(kind: InterpolateKind): string {
  const bilinear = kind === "bilinear";
  const body = kind === "bicubic" ? BICUBIC_BODY : bilinear
    ? `  let offset = bitcast<f32>(P.u.z);
  let sn = P.t[1].ne;
  let y = (f32(c.y) + offset) / P.f.y - offset;
  let y0 = clamp(i32(floor(y)), 0, i32(sn.y) - 1);
  let y1 = clamp(i32(floor(y)) + 1, 0, i32(sn.y) - 1);
  let dy = clamp(y - f32(y0), 0.0, 1.0);
  let x = (f32(c.x) + offset) / P.f.x - offset;
  let x0 = clamp(i32(floor(x)), 0, i32(sn.x) - 1);
  let x1 = clamp(i32(floor(x)) + 1, 0, i32(sn.x) - 1);
  let dx = clamp(x - f32(x0), 0.0, 1.0);
  let a = S0_f32(at(1u, vec4<u32>(u32(x0), u32(y0), i2, i3)));
  let b = S0_f32(at(1u, vec4<u32>(u32(x1), u32(y0), i2, i3)));
  let cc = S0_f32(at(1u, vec4<u32>(u32(x0), u32(y1), i2, i3)));
  let d = S0_f32(at(1u, vec4<u32>(u32(x1), u32(y1), i2, i3)));
  D_set_f32(at(0u, c), a * (1.0 - dx) * (1.0 - dy) + b * dx * (1.0 - dy) + cc * (1.0 - dx) * dy + d * dx * dy);`
    : `  let i0 = u32(f32(c.x) / P.f.x);
  let i1 = u32(f32(c.y) / P.f.y);
  D_set_f32(at(0u, c), S0_f32(at(1u, vec4<u32>(i0, i1, i2, i3))));`;
  return `${PARAMS_WGSL}
${tensorBindings("f32", ["f32"])}
${kind === "bicubic" ? BICUBIC_WGSL : ""}
${
    flatKernel(`  let c = coords(0u, i);
  let i2 = u32(f32(c.z) / P.f.z);
  let i3 = u32(f32(c.w) / P.f.w);
${body}`)
  }`;
}

/** The sinusoidal embedding of each timestep of S0 (D is [dim, N]). */
export function timestepShader(): string {
  return `${PARAMS_WGSL}
${tensorBindings("f32", ["f32"])}
${
    flatKernel(`  let c = coords(0u, i);
  let dim = P.u.z;
  let half = dim / 2u;
  let t = S0_f32(at(1u, vec4<u32>(c.y, 0u, 0u, 0u)));
  let j = select(c.x - half, c.x, c.x < half);
  let arg = t * exp((-P.f.x * f32(j)) / f32(half));
  var value = 0.0;
  if (c.x < half) {
    value = cos(arg);
  } else if (c.x < 2u * half) {
    value = sin(arg);
  }
  D_set_f32(at(0u, c), value);`)
  }`;
}
