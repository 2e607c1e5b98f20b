/**
 * A WebGPU graph plan: for every compute node a pipeline, a bind group and a uniform slot,
 * made once, so computing the plan only encodes one dispatch per node into one command buffer.
 * @module
 */

import { DisposedError, LimitError, StalePlanError, Status } from "../../errors.ts";
import type { Graph } from "../../graph.ts";
import type { Tensor } from "../../tensor.ts";
import type { Backend, GraphPlan } from "../backend.ts";
import { writesLeaf } from "../checks.ts";
import { PlanIdentity } from "../plan_identity.ts";
import { computeNodes } from "../cpu/node_table.ts";
import type { TensorBinding } from "./binding.ts";
import type { WebGpuBuffer } from "./buffer.ts";
import { type Kernel, kernelFor } from "./kernels.ts";
import type { PipelineCache } from "./pipelines.ts";
import {
  type BindingShape,
  DESC_BYTES,
  FLOATS_AT,
  MORE_FLOATS_AT,
  UINTS_AT,
  UNIFORM_SLOT_BYTES,
} from "./wgsl_common.ts";

/** What a plan needs from its backend. */
export interface PlanHost {
  readonly device: GPUDevice;
  readonly pipelines: PipelineCache;
  /** One word that kernels set to report bad input (getRows indices). */
  readonly statusBuffer: GPUBuffer;
  /** The device's maxStorageBufferBindingSize: a merged binding must fit it too. */
  readonly maxBindingSize: number;
  /** The binding of a placed tensor of this backend; throws if it has no memory here. */
  bindingOf(tensor: Tensor, verb: string): TensorBinding;
}

interface Dispatch {
  readonly pipeline: GPUComputePipeline;
  readonly bindGroup: GPUBindGroup;
  readonly workgroups: readonly [number, number, number];
}

function encodeSlot(view: DataView, at: number, kernel: Kernel, bindings: TensorBinding[]): void {
  const described = kernel.described ?? kernel.tensors.map((_, k) => k);
  described.forEach((index, k) => {
    const tensor = kernel.tensors[index]!;
    const base = at + k * DESC_BYTES;
    for (let d = 0; d < 4; d++) {
      view.setUint32(base + d * 4, tensor.ne[d]!, true);
      view.setUint32(base + 16 + d * 4, tensor.nb[d]!, true);
    }
    view.setUint32(base + 32, bindings[index]!.relative, true);
  });
  // Floats 0-3 are P.f, 4-7 P.g (after the u32 parameters).
  kernel.floats.forEach((value, i) => {
    const offset = i < 4 ? FLOATS_AT + i * 4 : MORE_FLOATS_AT + (i - 4) * 4;
    view.setFloat32(at + offset, value, true);
  });
  view.setUint32(at + UINTS_AT, kernel.count, true);
  // A kernel that leaves its destination undescribed finds its byte offset in P.u.y.
  if (kernel.described) view.setUint32(at + UINTS_AT + 4, bindings[0]!.relative, true);
  kernel.uints?.forEach((value, i) => view.setUint32(at + UINTS_AT + 8 + i * 4, value, true));
}

/** The bindings of one dispatch: its shape and each tensor's binding range within it. */
interface ShapedBindings {
  readonly shape: BindingShape;
  /** Per tensor: the range of the binding it reads (shared ones alike) and its offset there. */
  readonly bindings: readonly TensorBinding[];
}

/**
 * Binds the tensors of one dispatch (destination first) as WebGPU allows (see BindingShape):
 * tensors of the destination's buffer read-write, those whose ranges overlap merged into one
 * binding (sweeping the ranges sorted by offset), and tensors of other buffers read-only.
 */
export function shapeBindings(
  bound: readonly TensorBinding[],
  maxSize: number,
  label: string,
): ShapedBindings {
  const target = bound[0]!.buffer;
  const shape: (BindingShape[number])[] = bound.map(() => "r");
  const bindings = [...bound];
  const writable = bound.map((b, k) => ({ b, k })).filter(({ b }) => b.buffer === target);
  writable.sort((x, y) => x.b.offset - y.b.offset || x.k - y.k);
  let group: typeof writable = [];
  const close = (): void => {
    if (group.length === 0) return;
    const start = group[0]!.b.offset;
    const end = Math.max(...group.map(({ b }) => b.offset + b.size));
    if (end - start > maxSize) {
      throw new LimitError(
        Status.limitReached,
        `graphPlanCreate: ${label} binds ${end - start} bytes of one buffer as one binding ` +
          `(its tensors overlap), more than maxStorageBufferBindingSize (${maxSize})`,
      );
    }
    const owner = Math.min(...group.map(({ k }) => k));
    for (const { b, k } of group) {
      shape[k] = k === owner ? "w" : owner;
      bindings[k] = {
        ...b,
        offset: start,
        size: end - start,
        relative: b.offset + b.relative - start,
      };
    }
    group = [];
  };
  let end = -1;
  for (const item of writable) {
    if (item.b.offset >= end) close();
    group.push(item);
    end = Math.max(end, item.b.offset + item.b.size);
  }
  close();
  return { shape, bindings };
}

/** A prepared graph. Use {@link WebGpuBackend.graphPlanCreate}. */
export class WebGpuPlan implements GraphPlan {
  readonly graph: Graph;
  /** The graph and placement the plan was made for; checked before every compute. */
  readonly identity: PlanIdentity;
  /** Bytes of the uniform buffer holding every node's parameters. */
  readonly workSize: number;
  /** The backend that made the plan. */
  readonly backend: Backend;
  /** Nodes dispatched (views excluded). */
  readonly nodeCount: number;
  /** True when a node reports bad input through the status word. */
  readonly reportsStatus: boolean;
  readonly #dispatches: Dispatch[] = [];
  readonly #buffers = new Set<WebGpuBuffer>();
  /** Buffers holding leafs that a node writes (a `cpy` into a leaf). */
  readonly #leafWrites: readonly WebGpuBuffer[];
  readonly #uniforms: GPUBuffer;
  #disposed = false;

  /** Use {@link WebGpuBackend.graphPlanCreate}. */
  constructor(host: PlanHost, backend: Backend, graph: Graph) {
    for (const tensor of [...graph.leafs, ...graph.nodes]) {
      host.bindingOf(tensor, "graphPlanCreate");
    }
    const nodes = computeNodes(graph.nodes);
    this.#leafWrites = [
      ...new Set(nodes.filter(writesLeaf).map((t) => host.bindingOf(t, "graphPlanCreate").buffer)),
    ];
    const kernels = nodes.map(kernelFor);
    const shaped = kernels.map((kernel, i) =>
      shapeBindings(
        kernel.tensors.map((t) => host.bindingOf(t, "graphPlanCreate")),
        host.maxBindingSize,
        nodes[i]!.label,
      )
    );
    const bindings = shaped.map((s) => [...s.bindings]);
    const size = Math.max(1, kernels.length) * UNIFORM_SLOT_BYTES;
    const data = new ArrayBuffer(size);
    const view = new DataView(data);
    kernels.forEach((kernel, i) => encodeSlot(view, i * UNIFORM_SLOT_BYTES, kernel, bindings[i]!));
    const device = host.device;
    this.#uniforms = device.createBuffer({
      size,
      usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST,
      label: "graft plan uniforms",
    });
    device.queue.writeBuffer(this.#uniforms, 0, data);
    kernels.forEach((kernel, i) => {
      const { shape, bindings: bound } = shaped[i]!;
      const entries: GPUBindGroupEntry[] = [{
        binding: 0,
        resource: { buffer: this.#uniforms, offset: i * UNIFORM_SLOT_BYTES, size: 256 },
      }];
      bound.forEach((b, k) => {
        this.#buffers.add(b.buffer);
        if (typeof shape[k] === "number") return; // reads another tensor's binding
        entries.push({
          binding: 1 + k,
          resource: { buffer: b.buffer.gpuBuffer, offset: b.offset, size: b.size },
        });
      });
      if (kernel.status) {
        entries.push({ binding: 1 + bound.length, resource: { buffer: host.statusBuffer } });
      }
      const layout = host.pipelines.layout(shape, kernel.status);
      this.#dispatches.push({
        pipeline: host.pipelines.pipeline(kernel.key, shape, kernel.status, kernel.source),
        bindGroup: device.createBindGroup({ layout, entries }),
        workgroups: kernel.workgroups,
      });
    });
    this.graph = graph;
    this.identity = new PlanIdentity(graph);
    this.backend = backend;
    this.workSize = size;
    this.nodeCount = nodes.length;
    this.reportsStatus = kernels.some((k) => k.status);
  }

  /** True once freed. */
  get disposed(): boolean {
    return this.#disposed;
  }

  /** Throws if a buffer the plan binds was disposed since it was made. */
  checkBuffers(verb: string): void {
    for (const buffer of this.#buffers) {
      if (buffer.disposed) {
        throw new StalePlanError(`${verb}: a buffer the plan uses was disposed; plan again`);
      }
    }
  }

  /** Counts this compute's writes into leaf memory (the backend calls it once per compute). */
  markLeafWrites(): void {
    for (const buffer of this.#leafWrites) buffer.markWritten();
  }

  /** Records every dispatch into one compute pass of `encoder`. */
  encode(encoder: GPUCommandEncoder): void {
    if (this.#dispatches.length === 0) return;
    const pass = encoder.beginComputePass({ label: "graft graph" });
    for (const dispatch of this.#dispatches) {
      pass.setPipeline(dispatch.pipeline);
      pass.setBindGroup(0, dispatch.bindGroup);
      pass.dispatchWorkgroups(...dispatch.workgroups);
    }
    pass.end();
  }

  dispose(): void {
    if (this.#disposed) throw new DisposedError("graphPlanFree: plan already freed");
    this.#disposed = true;
    this.#uniforms.destroy();
  }

  /** Disposes unless already disposed (for `using`). */
  [Symbol.dispose](): void {
    if (!this.#disposed) this.dispose();
  }
}
