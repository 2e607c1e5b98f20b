/**
 * WGSL for copies and gathers: cpy/cont (element i of the destination, in row-major logical
 * order, gets element i of the source, converting f32 <-> f16), getRows and its scatter setRows,
 * and the word patch used
 * to write byte ranges that do not start or end on a 4-byte boundary.
 * @module
 */

import type { DType } from "../../dtype.ts";
import { isWeightDType, weightBindings, weightLoad } from "./shader_quant.ts";
import { bindingWgsl, flatKernel, PARAMS_WGSL, tensorBindings } from "./wgsl_common.ts";

/** cpy from `from` to `to`: bit copies for one dtype, f32 <-> f16 conversions otherwise. */
export function cpyShader(from: DType, to: DType): string {
  const move = from === to
    ? "D_set_bits(at(0u, coords(0u, i)), S0_bits(at(1u, coords(1u, i))));"
    : "D_set_f32(at(0u, coords(0u, i)), S0_f32(at(1u, coords(1u, i))));";
  return `${PARAMS_WGSL}
${tensorBindings(to, [from])}
${flatKernel(`  ${move}`)}`;
}

/**
 * The row index at byte `b` of S1, and whether it lies in [0, rows): i32 indices are one word,
 * i64 indices two (little endian; in range only with a zero high word).
 */
function indexWgsl(index: DType): string {
  return index === "i64"
    ? `fn row_index(b: u32, rows: u32) -> vec2<u32> {
  let lo = S1_bits(b);
  return vec2<u32>(lo, select(0u, 1u, S1_bits(b + 4u) == 0u && lo < rows));
}`
    : `fn row_index(b: u32, rows: u32) -> vec2<u32> {
  let v = bitcast<i32>(S1_bits(b));
  return vec2<u32>(u32(v), select(0u, 1u, v >= 0 && u32(v) < rows));
}`;
}

/**
 * getRows: D[i0, n, b, c] = S0[i0, S1[n, b, c], b, c]. An index outside [0, rows) writes 0 and
 * sets word 0 of the status binding to 1, which the backend reports on its next synchronize.
 * bf16 and block-quantized tables are decoded element by element (`shader_quant.ts`); an i32
 * table is copied as bits into an i32 D.
 */
export function getRowsShader(table: DType, index: DType = "i32"): string {
  const bindings = isWeightDType(table)
    ? weightBindings(table, [index])
    : tensorBindings(table === "i32" ? "i32" : "f32", [table, index]);
  const load = isWeightDType(table)
    ? weightLoad(table, "c.x", "row.x, c.z, c.w")
    : "S0_f32(at(1u, vec4<u32>(c.x, row.x, c.z, c.w)))";
  const store = table === "i32"
    ? "D_set_bits(at(0u, c), S0_bits(at(1u, vec4<u32>(c.x, row.x, c.z, c.w))));"
    : `D_set_f32(at(0u, c), ${load});`;
  return `${PARAMS_WGSL}
${bindings}
${bindingWgsl("STATUS", 4, "i32", true)}
${indexWgsl(index)}
${
    flatKernel(`  let c = coords(0u, i);
  let row = row_index(at(2u, vec4<u32>(c.y, c.z, c.w, 0u)), P.t[1].ne.y);
  if (row.y == 0u) {
    D_set_bits(at(0u, c), 0u);
    STATUS_set_bits(0u, 1u);
    return;
  }
  ${store}`)
  }`;
}

/**
 * setRows, one item per element of the rows written (S0): D[i0, S1[n, b, c], b, c] =
 * S0[i0, n, b, c], the indices' batches broadcast (b mod S1.ne[1], c mod S1.ne[2]). An index outside [0, R) skips the element and sets word 0 of the status
 * binding to 1, which the backend reports on its next synchronize (other elements may have been
 * written by then: the CPU checks every index first).
 */
export function setRowsShader(to: DType, from: DType = "f32", index: DType = "i32"): string {
  return `${PARAMS_WGSL}
${tensorBindings(to, [from, index])}
${bindingWgsl("STATUS", 4, "i32", true)}
${indexWgsl(index)}
${
    flatKernel(`  let c = coords(1u, i);
  let b = vec4<u32>(c.y, c.z % P.t[2].ne.y, c.w % P.t[2].ne.z, 0u);
  let row = row_index(at(2u, b), P.t[0].ne.y);
  if (row.y == 0u) {
    STATUS_set_bits(0u, 1u);
    return;
  }
  D_set_f32(at(0u, vec4<u32>(c.x, row.x, c.z, c.w)), S0_f32(at(1u, c)));`)
  }`;
}

/**
 * Replaces the bytes of one word selected by mask `P.u.z` with those of `P.u.w`; the word is
 * `P.u.y` of the binding. One thread, one word: queue.writeBuffer takes whole words only.
 */
export const PATCH_SHADER = `${PARAMS_WGSL}
@group(0) @binding(1) var<storage, read_write> D: array<u32>;
@compute @workgroup_size(1)
fn main() {
  let w = P.u.y;
  D[w] = (D[w] & ~P.u.z) | (P.u.w & P.u.z);
}`;
