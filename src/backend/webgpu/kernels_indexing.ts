/**
 * The WebGPU kernels of the shape and indexing ops (op codes 70-99): which shader, which
 * tensors, which params. Split from kernels.ts so that op families add kernels side by side.
 * @module
 */

import { LimitError, Status } from "../../errors.ts";
import { Op, opName } from "../../op.ts";
import type { Tensor } from "../../tensor.ts";
import { grid, type Kernel } from "./kernels.ts";
import { type IndexingKind, indexingShader, type SortKind, sortShader } from "./shader_indexing.ts";
import { WORKGROUP_SIZE } from "./wgsl_common.ts";

/** Whole numbers travel to the shaders as f32, exact below this. */
const PARAM_EXACT_MAX = 2 ** 24;

/**
 * Longest row the rank-counting sorts take (n^2 reads per row): a longer one is refused, so
 * `supportsOp` says no and the scheduler runs the sort on the CPU (a vocabulary-sized row).
 */
export const SORT_COLUMNS_MAX = 4096;

const kinds: Partial<Record<number, IndexingKind>> = {
  [Op.concat]: "concat",
  [Op.pad]: "pad",
  [Op.padCircular]: "padCircular",
  [Op.padReflect1d]: "padReflect1d",
  [Op.roll]: "roll",
  [Op.tri]: "tri",
  [Op.diagMaskInf]: "diagMaskInf",
  [Op.fill]: "fill",
  [Op.arange]: "arange",
  [Op.repeatBack]: "repeatBack",
};

/** The shader's f32 params of a node (see shader_indexing.ts for each op's). */
function floats(node: Tensor): number[] {
  const p = node.params;
  switch (node.op) {
    case Op.pad:
    case Op.padCircular:
      return [p[0]!, p[2]!, p[4]!, p[6]!]; // the left pads
    case Op.arange:
      return [p[0]!, p[2]!]; // start, step
    default:
      return [...p];
  }
}

function requireExact(node: Tensor, values: readonly number[]): void {
  const sizes = [node, ...node.src].flatMap((t) => [...t.ne]);
  if (node.op === Op.arange || node.op === Op.fill) return; // real-valued params
  for (const v of [...values, ...sizes]) {
    if (Math.abs(v) >= PARAM_EXACT_MAX) {
      throw new LimitError(
        Status.limitReached,
        `webgpu: ${opName(node.op)} ${node.label} has a size or param of ${v} >= 2^24`,
      );
    }
  }
}

/** The kernel of a shape or indexing op; null for any other op. */
export function indexingKernel(node: Tensor): Kernel | null {
  const kind = kinds[node.op];
  if (kind) {
    const params = floats(node);
    requireExact(node, params);
    const sources = node.src.map((s) => s.dtype);
    const count = node.nelements;
    return {
      key: `indexing:${kind}:${node.dtype}:${sources.join(",")}`,
      source: () => indexingShader(kind, node.dtype, sources),
      tensors: [node, ...node.src],
      status: false,
      count,
      floats: params,
      workgroups: grid(Math.ceil(count / WORKGROUP_SIZE), `${kind} ${node.label}`),
    };
  }
  if (node.op !== Op.argsort && node.op !== Op.topK) return null;
  const sort: SortKind = node.op === Op.argsort ? "argsort" : "topK";
  const a = node.src[0]!;
  requireExact(node, []);
  if (a.ne[0] > SORT_COLUMNS_MAX) {
    throw new LimitError(
      Status.limitReached,
      `webgpu: ${sort} ${node.label} sorts rows of ${a.ne[0]} > ${SORT_COLUMNS_MAX} elements`,
    );
  }
  return {
    key: `sort:${sort}:${a.dtype}`,
    source: () => sortShader(sort, a.dtype),
    tensors: [node, a],
    status: false,
    count: a.nelements,
    floats: sort === "argsort" ? [node.params[0]!] : [],
    workgroups: grid(Math.ceil(a.nelements / WORKGROUP_SIZE), `${sort} ${node.label}`),
  };
}
