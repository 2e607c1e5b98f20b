/**
 * The backend interface: the reference design's verbs. A backend owns a memory space (buffers)
 * and runs graphs whose tensors live in it. Optional verbs say so in their JSDoc.
 * @module
 */

import type { TensorData } from "../dtype.ts";
import type { Graph } from "../graph.ts";
import type { Tensor } from "../tensor.ts";

/** A block of a backend's memory that tensors are placed in. */
export interface BackendBuffer extends Disposable {
  /** The backend whose memory this is. */
  readonly backend: Backend;
  /** Size in bytes. */
  readonly size: number;
  /** Alignment the backend needs for tensor offsets. */
  readonly alignment: number;
  /** True once disposed. */
  readonly disposed: boolean;
  /**
   * Optional: a count that changes whenever the buffer is written through its backend. Where
   * present, schedules copy a leaf out of this buffer only after it changed. Absent: every
   * compute copies.
   */
  readonly writeGeneration?: number;
  /** Frees the memory; tensors placed in it can no longer be used. */
  dispose(): void;
}

/** A graph prepared for repeated computation on one backend. */
export interface GraphPlan extends Disposable {
  /** The graph it was made for (computes check its identity: structure and placement). */
  readonly graph: Graph;
  /** Bytes of scratch memory the plan holds. */
  readonly workSize: number;
  /** Frees the plan. */
  dispose(): void;
}

/** A compute backend (CPU, WebGPU, ...). */
export interface Backend extends Disposable {
  /** A short name: "cpu", "webgpu". */
  readonly name: string;
  /** Allocates `size` bytes of this backend's memory. */
  allocBuffer(size: number): BackendBuffer;
  /** Alignment of tensor offsets within this backend's buffers. */
  readonly alignment: number;
  /** Writes `data` into the tensor's memory, starting `offset` bytes in. */
  setTensor(tensor: Tensor, data: ArrayBufferView, offset?: number): void;
  /** Reads the tensor's bytes (from `offset`, `size` bytes; default all) as its dtype. */
  getTensor(tensor: Tensor, offset?: number, size?: number): TensorData;
  /** Like {@link setTensor}; completes in order with other async work. */
  setTensorAsync(tensor: Tensor, data: ArrayBufferView, offset?: number): Promise<void>;
  /** Like {@link getTensor}; completes in order with other async work. */
  getTensorAsync(tensor: Tensor, offset?: number, size?: number): Promise<TensorData>;
  /** Waits for all queued work of this backend. */
  synchronize(): Promise<void>;
  /** Copies `src` (on any backend) into `dst` on this backend; same layout required. */
  cpyTensorFrom(src: Tensor, dst: Tensor): void;
  /** Copies `src` on this backend into `dst` (on any backend); same layout required. */
  cpyTensorTo(src: Tensor, dst: Tensor): void;
  /** Prepares a graph whose tensors all live on this backend. */
  graphPlanCreate(graph: Graph): GraphPlan;
  /** Computes a plan; with `graph`, first checks the plan was made for it. */
  graphPlanCompute(plan: GraphPlan, graph?: Graph): void;
  /** Frees a plan (same as `plan.dispose()`). */
  graphPlanFree(plan: GraphPlan): void;
  /**
   * Optional: whether this backend can compute `tensor`'s op with its dtypes and layout.
   * Default when absent: every op is supported.
   */
  supportsOp?(tensor: Tensor): boolean;
  /** Plans, computes and frees: for one-off graphs. */
  graphCompute(graph: Graph): void;
  /** Frees the backend's native resources. */
  dispose(): void;
}
