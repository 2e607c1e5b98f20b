/**
 * Simple allocation: every tensor in its own block of one buffer, sized exactly by a measure
 * pass. Used for weights and inputs, and for graphs when memory reuse is not wanted.
 * @module
 */

import type { Backend, BackendBuffer } from "../backend/backend.ts";
import { GraftError, PlacementError } from "../errors.ts";
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
  const { alignment, maxSize } = backend.bufferType;
  const offsets: number[] = [];
  let end = 0;
  for (const t of owners) {
    offsets.push(end);
    end += blockBytes(backend, t, alignment);
  }
  if (end > maxSize) {
    throw new PlacementError(
      `allocTensors: ${owners.length} tensors need ${end} bytes, more than one ` +
        `${backend.name} buffer holds (${maxSize}); use allocWeights to spread them over several`,
    );
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

/** Bytes a tensor's block takes in `backend`'s buffers: its alloc size, aligned. */
function blockBytes(backend: Backend, t: Tensor, alignment: number): number {
  return Math.ceil(Math.max(backend.bufferType.allocSize(t), 1) / alignment) * alignment;
}

/**
 * Tensors spread over several buffers of one backend (see {@link allocWeights}): disposing it
 * disposes them all.
 */
export class BufferSet implements Disposable {
  /** The buffers, in order. */
  readonly buffers: readonly BackendBuffer[];
  /** Bytes over all buffers. */
  readonly size: number;

  /** Use {@link allocWeights}. */
  constructor(buffers: readonly BackendBuffer[]) {
    this.buffers = buffers;
    this.size = buffers.reduce((sum, b) => sum + b.size, 0);
  }

  /** True once every buffer is disposed. */
  get disposed(): boolean {
    return this.buffers.every((b) => b.disposed);
  }

  /** Disposes every buffer that is still alive. */
  dispose(): void {
    for (const buffer of this.buffers) if (!buffer.disposed) buffer.dispose();
  }

  /** Same as {@link dispose} (for `using`). */
  [Symbol.dispose](): void {
    this.dispose();
  }
}

/**
 * Gives each tensor without memory its own block, in order, in as many buffers of `backend` as
 * its buffer type's `maxSize` needs (a 4 GiB model on a device whose buffers stop at 2 GiB):
 * each tensor lies wholly in one buffer. A tensor larger than `maxSize` alone is a
 * PlacementError naming it. On any failure nothing stays allocated or placed.
 *
 * @example
 * ```ts
 * import { allocWeights, Context, CpuBackend } from "../../mod.ts";
 * using cpu = new CpuBackend({ maxBufferSize: 1 << 20 });
 * const ctx = new Context();
 * for (let i = 0; i < 3; i++) ctx.newTensor("f32", [512, 256]); // 512 KiB each
 * using weights = allocWeights(cpu, ctx.tensors);
 * console.log(weights.buffers.length); // 2
 * ```
 */
export function allocWeights(backend: Backend, tensors: readonly Tensor[]): BufferSet {
  const owners = unplacedOwners(tensors);
  if (owners.length === 0) throw new GraftError("allocWeights: every tensor already has memory");
  const { alignment, maxSize } = backend.bufferType;
  // Greedy in order: a new buffer starts when the next tensor does not fit the current one.
  const groups: { tensors: Tensor[]; offsets: number[]; size: number }[] = [];
  for (const t of owners) {
    const bytes = blockBytes(backend, t, alignment);
    if (bytes > maxSize) {
      throw new PlacementError(
        `allocWeights: ${t.label} needs ${bytes} bytes, more than one ${backend.name} buffer ` +
          `holds (${maxSize})`,
      );
    }
    let group = groups[groups.length - 1];
    if (!group || group.size + bytes > maxSize) {
      group = { tensors: [], offsets: [], size: 0 };
      groups.push(group);
    }
    group.tensors.push(t);
    group.offsets.push(group.size);
    group.size += bytes;
  }
  const buffers: BackendBuffer[] = [];
  const placed: Tensor[] = [];
  try {
    for (const group of groups) {
      const buffer = backend.allocBuffer(group.size);
      buffers.push(buffer);
      group.tensors.forEach((t, i) => {
        t.place(buffer, group.offsets[i]!);
        placed.push(t);
      });
    }
  } catch (error) {
    for (const t of placed) t.unplace();
    for (const buffer of buffers) buffer.dispose();
    throw error;
  }
  return new BufferSet(buffers);
}
