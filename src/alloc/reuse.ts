/**
 * Which planned tensors share their memory with a later tensor of the same plan. After a
 * compute such a tensor's bytes are the later tensor's, so reading it is refused with an error
 * that says how to keep it, instead of returning another tensor's data without a word.
 * @module
 */

import { PlacementError } from "../errors.ts";
import type { Tensor } from "../tensor.ts";

const overwrittenBy = new WeakMap<Tensor, Tensor>();
/** Intermediates a CPU plan fuses away (never written), with the plan's fused result. */
const fusedInto = new WeakMap<Tensor, Tensor>();

/** Records that `later` is placed over `earlier`'s memory (after its last use). */
export function markOverwritten(earlier: Tensor, later: Tensor): void {
  overwrittenBy.set(earlier, later);
}

/** Forgets a tensor's record (it is being placed anew). */
export function clearOverwritten(tensor: Tensor): void {
  overwrittenBy.delete(tensor);
}

/**
 * Records whether the latest plan made for `intermediate` fuses it into `result` (so computes
 * never write it) or computes it itself (`result` null).
 */
export function markFused(intermediate: Tensor, result: Tensor | null): void {
  if (result) fusedInto.set(intermediate, result);
  else fusedInto.delete(intermediate);
}

/**
 * Throws PlacementError when `tensor`'s memory (or its owner's, for a view) is reused by a later
 * tensor of its memory plan; the message names both and says to use `keep` or make it an output.
 */
export function requireReadable(verb: string, tensor: Tensor): void {
  const fused = fusedInto.get(tensor);
  if (fused) {
    throw new PlacementError(
      `${verb}: ${tensor.label} is computed inside ${fused.label} by a fused CPU plan and never ` +
        `written; make it a graph output or create the plan with { fuse: false } to read it`,
    );
  }
  const owner = tensor.memoryOwner;
  const later = overwrittenBy.get(owner);
  if (!later) return;
  throw new PlacementError(
    `${verb}: ${tensor.label} is an intermediate whose memory the plan gives to ${later.label} ` +
      `after its last use, so it holds ${later.label}'s bytes after a compute; plan with ` +
      `allocGraph(backend, graph, { keep: new Set([tensor]) }) or make ` +
      `it a graph output to read it`,
  );
}
