/**
 * Tensors are metadata only: dtype, shape and byte strides in ggml order (`ne[0]` innermost),
 * the op that makes them and its sources. Memory is attached later by an allocator.
 * @module
 */

import { DTYPES, parseTensorDType, rowBytes, type TensorDType } from "./dtype.ts";
import { ShapeError } from "./errors.ts";
import { showValue } from "./args.ts";
import { isViewOp, Op, type OpCode, opName } from "./op.ts";
import type { BackendBuffer } from "./backend/backend.ts";

/** A shape or stride tuple in ggml order. */
export type Dims = readonly [number, number, number, number];

/** Where a tensor's memory is: a buffer and a byte offset in it. */
export interface Placement {
  /** The buffer holding the memory. */
  readonly buffer: BackendBuffer;
  /** Byte offset of the first element in the buffer. */
  readonly offset: number;
}

let nextId = 1;

/** Options of {@link Tensor}'s constructor; op builders fill them in. */
export interface TensorInit {
  /** Element type. */
  dtype: TensorDType;
  /** Shape, ggml order. */
  ne: Dims;
  /** Byte strides (default: contiguous). */
  nb?: Dims;
  /** The op that computes it (default: none, an input). */
  op?: OpCode;
  /** Sources of the op. */
  src?: readonly Tensor[];
  /** Op parameters. */
  params?: readonly number[];
  /** For views: the tensor whose memory is shared. */
  viewSource?: Tensor | null;
  /** For views: byte offset into the source. */
  viewOffset?: number;
  /** A name for messages and reports. */
  name?: string;
}

/**
 * Checks a shape (or strides) where it enters: four integer numbers, each at least `min` and
 * at most 2^53 (BigInt, NaN, fractional and negative values are named in the ShapeError).
 */
function requireDims(what: string, role: string, dims: unknown, min: number): void {
  if (!Array.isArray(dims) || dims.length !== 4) {
    throw new ShapeError(`${what}: ${role} must have 4 entries, got ${showValue(dims)}`);
  }
  for (let d = 0; d < 4; d++) {
    const n: unknown = dims[d];
    if (typeof n !== "number" || !Number.isSafeInteger(n) || n < min) {
      throw new ShapeError(
        `${what}: ${role}[${d}] must be an integer number ${
          min > 0 ? `>= ${min}` : "that is not negative"
        } (and below 2^53), got ${showValue(n)} in ${showValue(dims)}`,
      );
    }
  }
  if (role === "shape") {
    const count = (dims[0] as number) * (dims[1] as number) * (dims[2] as number) *
      (dims[3] as number);
    if (!Number.isSafeInteger(count)) {
      throw new ShapeError(`${what}: shape ${showValue(dims)} has more than 2^53 elements`);
    }
  }
}

/** Contiguous byte strides for a shape. */
export function contiguousStrides(dtype: TensorDType, ne: Dims): Dims {
  // As ggml: nb[0] is one block's bytes (one element's for plain types), nb[1] a row's.
  const row = rowBytes(dtype, ne[0]);
  return [DTYPES[dtype].blockBytes, row, row * ne[1], row * ne[1] * ne[2]];
}

/** Formats a shape for messages: `[4, 3]`, trailing ones dropped. */
export function formatShape(ne: Dims): string {
  let last = 3;
  while (last > 0 && ne[last] === 1) last--;
  return `[${ne.slice(0, last + 1).join(", ")}]`;
}

/** Counts, per buffer, the tensors taken out of it (see {@link unplaceEpoch}). */
const unplaceEpochs = new WeakMap<BackendBuffer, number>();
/** A process-unique number per buffer object, for plan identities. */
const bufferIds = new WeakMap<BackendBuffer, number>();
let nextBufferId = 1;

function bumpUnplaceEpoch(buffer: BackendBuffer): void {
  unplaceEpochs.set(buffer, (unplaceEpochs.get(buffer) ?? 0) + 1);
}

/**
 * How many times a tensor was unplaced from `buffer`. A tensor's memory can only change by
 * an unplace (placement happens once otherwise), so a plan that recorded these counts for its
 * buffers knows in O(1) per buffer whether anything it uses may have moved.
 */
export function unplaceEpoch(buffer: BackendBuffer): number {
  return unplaceEpochs.get(buffer) ?? 0;
}

/** A number that tells buffer objects apart for the life of the process. */
export function bufferId(buffer: BackendBuffer): number {
  let id = bufferIds.get(buffer);
  if (id === undefined) {
    id = nextBufferId++;
    bufferIds.set(buffer, id);
  }
  return id;
}

/**
 * A node of a compute graph: an input (op `none`) or the result of an op.
 *
 * @example
 * ```ts
 * import { Context } from "./context.ts";
 * const ctx = new Context();
 * const x = ctx.newTensor("f32", [4, 3]);
 * console.log(x.ne, x.nbytes); // [4, 3, 1, 1] 48
 * ```
 */
export class Tensor {
  /** Unique within the process; graphs and plans key tensors by it. */
  readonly id: number = nextId++;
  /** Element type. */
  readonly dtype: TensorDType;
  /** Elements per dimension, `ne[0]` innermost. */
  readonly ne: Dims;
  /** Byte stride per dimension. */
  readonly nb: Dims;
  /** The op that computes this tensor (`Op.none` for inputs). */
  readonly op: OpCode;
  /** The op's sources. */
  readonly src: readonly Tensor[];
  /** Op parameters (all f32 in the node table). */
  readonly params: readonly number[];
  /** For views: the tensor whose memory this one shares. */
  readonly viewSource: Tensor | null;
  /** For views: byte offset into the view source's memory. */
  readonly viewOffset: number;
  /** A name for messages and reports. */
  name: string;
  #placement: Placement | null = null;
  /** Marks a graph output: the planner never reuses or frees its memory. */
  isOutput = false;

  /** Op builders create tensors; use `Context.newTensor` for inputs. */
  constructor(init: TensorInit) {
    const what = init.op ? opName(init.op) : "newTensor";
    this.dtype = parseTensorDType(what, init.dtype);
    requireDims(what, "shape", init.ne, 1);
    const { blockSize } = DTYPES[this.dtype];
    if (init.ne[0] % blockSize !== 0) {
      throw new ShapeError(
        `${what}: ${this.dtype} stores blocks of ${blockSize} elements; shape[0] = ${init.ne[0]} ` +
          `is not a multiple of ${blockSize}`,
      );
    }
    if (init.nb) requireDims(what, "strides", init.nb, 0);
    if (init.viewOffset !== undefined) {
      requireDims(what, "view offset", [init.viewOffset, 0, 0, 0] as unknown as Dims, 0);
    }
    // Frozen copies: plans are checked against a tensor's metadata once, at creation, so it
    // must not change afterwards (placement is the one thing that can; see unplace).
    this.ne = Object.freeze([...init.ne]) as unknown as Dims;
    this.nb = Object.freeze([
      ...(init.nb ?? contiguousStrides(init.dtype, init.ne)),
    ]) as unknown as Dims;
    this.op = init.op ?? Op.none;
    this.src = Object.freeze([...(init.src ?? [])]);
    this.params = Object.freeze([...(init.params ?? [])]);
    this.viewSource = init.viewSource ?? null;
    this.viewOffset = init.viewOffset ?? 0;
    this.name = init.name ?? "";
  }

  /** Number of elements. */
  get nelements(): number {
    return this.ne[0] * this.ne[1] * this.ne[2] * this.ne[3];
  }

  /** Number of rows (elements of dims 1-3). */
  get nrows(): number {
    return this.ne[1] * this.ne[2] * this.ne[3];
  }

  /** Bytes from the first element to one past the last (its memory footprint). */
  get nbytes(): number {
    // As ggml_nbytes: a row's blocks, then the strides of the outer dimensions.
    const { blockSize, blockBytes } = DTYPES[this.dtype];
    let last = blockSize === 1
      ? (this.ne[0] - 1) * this.nb[0] + blockBytes
      : (this.ne[0] / blockSize) * this.nb[0];
    for (let d = 1; d < 4; d++) last += (this.ne[d]! - 1) * this.nb[d]!;
    return last;
  }

  /** True when elements are stored densely in ggml order. */
  get isContiguous(): boolean {
    const c = contiguousStrides(this.dtype, this.ne);
    return c[0] === this.nb[0] && c[1] === this.nb[1] && c[2] === this.nb[2] &&
      c[3] === this.nb[3];
  }

  /** True for tensors that only describe their source's memory. */
  get isView(): boolean {
    return isViewOp(this.op);
  }

  /** The tensor that owns this one's memory (itself unless a view). */
  get memoryOwner(): Tensor {
    let owner = this.viewSource;
    if (!owner) return this;
    while (owner.viewSource) owner = owner.viewSource;
    return owner;
  }

  /** Byte offset of this tensor within its memory owner. */
  get offsetInOwner(): number {
    let offset = this.viewOffset;
    for (let t = this.viewSource; t?.viewSource; t = t.viewSource) offset += t.viewOffset;
    return offset;
  }

  /** Where this tensor's memory is, following views to their owner; null if not placed. */
  get placement(): Placement | null {
    if (this.viewSource) {
      const owner = this.memoryOwner.#placement;
      return owner ? { buffer: owner.buffer, offset: owner.offset + this.offsetInOwner } : null;
    }
    return this.#placement;
  }

  /**
   * Gives this tensor memory. Views take their owner's; a tensor is placed once, so a plan
   * made from its address can never go stale by re-placement.
   */
  place(buffer: BackendBuffer, offset: number): void {
    if (this.viewSource) {
      throw new ShapeError(`tensor ${this.label} is a view: it uses its source's memory`);
    }
    if (this.#placement) {
      throw new ShapeError(`tensor ${this.label} already has memory`);
    }
    if (offset < 0 || offset + this.nbytes > buffer.size) {
      throw new ShapeError(
        `tensor ${this.label} (${this.nbytes} bytes) does not fit at offset ${offset} of a ` +
          `${buffer.size}-byte buffer`,
      );
    }
    this.#placement = { buffer, offset };
  }

  /**
   * Forgets this tensor's memory (the buffer was disposed or is being re-planned). Plans made
   * while it was placed notice at their next compute and throw StalePlanError.
   */
  unplace(): void {
    if (this.#placement) bumpUnplaceEpoch(this.#placement.buffer);
    this.#placement = null;
  }

  /** A short description for messages: name or id, op, dtype and shape. */
  get label(): string {
    const name = this.name || `#${this.id}`;
    return `${name} (${this.dtype} ${formatShape(this.ne)})`;
  }
}
