/**
 * Simple allocation: every tensor in its own block of one buffer, sized exactly by a measure
 * pass. Used for weights and inputs, and for graphs when memory reuse is not wanted.
 * @module
 */

import type { Backend, BackendBuffer } from "../backend/backend.ts";
import { GraftError } from "../errors.ts";
import { Op } from "../op.ts";
import type { Tensor } from "../tensor.ts";

/** The tensors among `tensors` that own memory and have none yet (views and cpy excluded). */
export function unplacedOwners(tensors: readonly Tensor[]): Tensor[] {
  const seen = new Set<number>();
  return tensors.filter((t) => {
    if (t.viewSource || t.op === Op.cpy || t.placement || seen.has(t.id)) return false;
    seen.add(t.id);
    return true;
  });
}

/**
 * Gives each tensor without memory its own block in one new buffer of `backend`, and returns
 * the buffer (dispose it to free them all).
 *
 * @example
 * ```ts
 * import { allocTensors, Context, CpuBackend } from "../../mod.ts";
 * using cpu = new CpuBackend();
 * const ctx = new Context();
 * ctx.newTensor("f32", [1024, 1024]);
 * using weights = allocTensors(cpu, ctx.tensors);
 * console.log(weights.size); // 4194304
 * ```
 */
export function allocTensors(backend: Backend, tensors: readonly Tensor[]): BackendBuffer {
  const owners = unplacedOwners(tensors);
  if (owners.length === 0) throw new GraftError("allocTensors: every tensor already has memory");
  // Each tensor its own block, in order: the offsets a fresh best-fit allocator would give,
  // computed directly (no allocator, so nothing native is needed to size the buffer).
  const alignment = backend.alignment;
  const offsets: number[] = [];
  let end = 0;
  for (const t of owners) {
    offsets.push(end);
    end += Math.ceil(Math.max(t.nbytes, 1) / alignment) * alignment;
  }
  const buffer = backend.allocBuffer(end);
  const placed: Tensor[] = [];
  try {
    owners.forEach((t, i) => {
      t.place(buffer, offsets[i]!);
      placed.push(t);
    });
  } catch (error) {
    // Nothing half-done survives a failure: the tensors placed so far lose their memory and
    // the buffer is freed (it used to leak).
    for (const t of placed) t.unplace();
    buffer.dispose();
    throw error;
  }
  return buffer;
}
