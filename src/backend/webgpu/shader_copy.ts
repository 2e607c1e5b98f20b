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
 * getRows: D[i0, n, b, c] = S0[i0, S1[n, b, c], b, c]. An index outside [0, rows) writes 0 and
 * sets word 0 of the status binding to 1, which the backend reports on its next synchronize.
 * bf16 and block-quantized tables are decoded element by element (`shader_quant.ts`).
 */
export function getRowsShader(table: DType): string {
  const bindings = isWeightDType(table)
    ? weightBindings(table, ["i32"])
    : tensorBindings("f32", [table, "i32"]);
  const load = isWeightDType(table)
    ? weightLoad(table, "c.x", "u32(row), c.z, c.w")
    : "S0_f32(at(1u, vec4<u32>(c.x, u32(row), c.z, c.w)))";
  return `${PARAMS_WGSL}
${bindings}
${bindingWgsl("STATUS", 4, "i32", true)}
${
    flatKernel(`  let c = coords(0u, i);
  let row = bitcast<i32>(S1_bits(at(2u, vec4<u32>(c.y, c.z, c.w, 0u))));
  if (row < 0 || u32(row) >= P.t[1].ne.y) {
    D_set_f32(at(0u, c), 0.0);
    STATUS_set_bits(0u, 1u);
    return;
  }
  D_set_f32(at(0u, c), ${load});`)
  }`;
}

/**
 * setRows, one item per element of the rows written (S0): D[i0, S1[n, b, c], b, c] =
 * S0[i0, n, b, c]. An index outside [0, R) skips the element and sets word 0 of the status
 * binding to 1, which the backend reports on its next synchronize (other elements may have been
 * written by then: the CPU checks every index first).
 */
export function setRowsShader(to: DType): string {
  return `${PARAMS_WGSL}
${tensorBindings(to, ["f32", "i32"])}
${bindingWgsl("STATUS", 4, "i32", true)}
${
    flatKernel(`  let c = coords(1u, i);
  let row = bitcast<i32>(S1_bits(at(2u, vec4<u32>(c.y, c.z, c.w, 0u))));
  if (row < 0 || u32(row) >= P.t[0].ne.y) {
    STATUS_set_bits(0u, 1u);
    return;
  }
  D_set_f32(at(0u, vec4<u32>(c.x, u32(row), c.z, c.w)), S0_f32(at(1u, c)));`)
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
