/**
 * WGSL for acc and set (ggml_acc, ggml_set; `src/ops/view_write.ts`): one thread per element
 * of the contiguous destination. A thread finds whether its element lies in the view that
 * src1 lands on, by dividing its offset past the view's start by the view's strides from the
 * outermost in (exact: the CPU's validation keeps the view's rows, planes and batches apart);
 * outside it copies src0, inside it writes src0 + src1 (acc, in f32) or src1 (set, as bits).
 * The view's strides nb1, nb2, nb3 and its offset, in elements, arrive as the bits of `P.f`.
 * @module
 */

import type { DType } from "../../dtype.ts";
import { GraftError, LimitError, Status } from "../../errors.ts";
import { Op, opName } from "../../op.ts";
import type { Tensor } from "../../tensor.ts";
import { grid, type Kernel } from "./kernels.ts";
import { flatKernel, PARAMS_WGSL, tensorBindings, WORKGROUP_SIZE } from "./wgsl_common.ts";

/** acc or set. */
export type ViewWriteKind = "acc" | "set";

/** The shader of `kind` for `dtype` (D, S0 and S1 alike). */
export function viewWriteShader(kind: ViewWriteKind, dtype: DType): string {
  const write = kind === "acc"
    ? `D_set_f32(at(0u, c), S0_f32(at(1u, c)) + S1_f32(at(2u, k)));`
    : `D_set_bits(at(0u, c), S1_bits(at(2u, k)));`;
  return `${PARAMS_WGSL}
${tensorBindings(dtype, [dtype, dtype])}
${
    flatKernel(`  let c = coords(0u, i);
  let dn = P.t[0].ne;
  let bn = P.t[2].ne;
  let nb = vec4<u32>(1u, bitcast<u32>(P.f.x), bitcast<u32>(P.f.y), bitcast<u32>(P.f.z));
  let start = bitcast<u32>(P.f.w);
  let e = c.x + dn.x * (c.y + dn.y * (c.z + dn.z * c.w));
  var inside = e >= start;
  var rest = e - start;
  var k = vec4<u32>(0u);
  for (var d = 3; d >= 1; d = d - 1) {
    if (bn[d] > 1u) {
      k[d] = rest / nb[d];
      rest = rest - k[d] * nb[d];
    }
  }
  k.x = rest;
  inside = inside && all(k < bn);
  if (inside) {
    ${write}
  } else {
    D_set_bits(at(0u, c), S0_bits(at(1u, c)));
  }`)
  }`;
}

/** The bits of a u32 as an f32 (a value below 0x7f800000 is no NaN, so it survives a write). */
function asF32Bits(value: number): number {
  return new Float32Array(new Uint32Array([value]).buffer)[0]!;
}

/** Largest view stride or offset in elements whose bits pass through `P.f` unchanged. */
const VIEW_ELEMENTS_MAX = 0x7f800000 - 1;

/** The kernel of an acc or set node; null for any other op. */
export function viewWriteKernel(node: Tensor): Kernel | null {
  if (node.op !== Op.acc && node.op !== Op.set) return null;
  const kind: ViewWriteKind = node.op === Op.acc ? "acc" : "set";
  const [a, b] = node.src as [Tensor, Tensor];
  if (!node.isContiguous) {
    throw new GraftError(`webgpu: ${opName(node.op)} ${node.label} needs a contiguous result`);
  }
  const p = node.params;
  const values = [0, 2, 4, 6].map((k) => p[k]! + p[k + 1]! * 2 ** 24);
  if (values.some((v) => v > VIEW_ELEMENTS_MAX)) {
    throw new LimitError(
      Status.limitReached,
      `webgpu: ${kind} ${node.label} has a view stride or offset past ${VIEW_ELEMENTS_MAX}`,
    );
  }
  const count = node.nelements;
  return {
    key: `viewWrite:${kind}:${node.dtype}`,
    source: () => viewWriteShader(kind, node.dtype),
    tensors: [node, a, b],
    status: false,
    count,
    floats: values.map(asF32Bits),
    workgroups: grid(Math.ceil(count / WORKGROUP_SIZE), `${kind} ${node.label}`),
  };
}
