/**
 * The WebGPU backend: device buffers, WGSL kernels for every op of the foundation set, and
 * graph plans that submit a whole graph as one command buffer. Runs on Deno's `navigator.gpu`,
 * including software adapters (Mesa's lavapipe or llvmpipe): no optional feature is needed.
 * @module
 */

import { dtypeSize, holdsRawBytes, type TensorData, typedView } from "../../dtype.ts";
import {
  DisposedError,
  GraftError,
  OutOfBoundsError,
  PlacementError,
  StalePlanError,
} from "../../errors.ts";
import type { Graph } from "../../graph.ts";
import type { Tensor } from "../../tensor.ts";
import type { Backend, BufferType, GraphPlan } from "../backend.ts";
import { isViewOp, opInfo } from "../../op.ts";
import { kernelFor } from "./kernels.ts";
import {
  requireSameLayout,
  requireTensorData,
  requireTensorRange,
  requireWholeTensorArray,
} from "../checks.ts";
import { requireReadable } from "../../alloc/reuse.ts";
import { type TensorBinding, tensorBinding } from "./binding.ts";
import { WebGpuBuffer } from "./buffer.ts";
import { PipelineCache } from "./pipelines.ts";
import { type PlanHost, WebGpuPlan } from "./plan.ts";
import { readBytes, writeBytes } from "./transfer.ts";

// writeBuffer takes memory of an ArrayBuffer; shared memory is copied first.
function hostBytes(data: ArrayBufferView): Uint8Array<ArrayBuffer> {
  if (data.buffer instanceof ArrayBuffer) {
    return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  }
  const copy = new Uint8Array(data.byteLength);
  copy.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
  return copy;
}

/** Options of {@link WebGpuBackend.create}. */
export interface WebGpuBackendOptions {
  /** Passed to `navigator.gpu.requestAdapter`. */
  powerPreference?: GPUPowerPreference;
  /**
   * Passed to `navigator.gpu.requestAdapter`: `"compatibility"` also takes adapters of the
   * WebGPU compatibility mode (Chromium's OpenGL ES backend, which reaches Mesa's lavapipe
   * through ANGLE where Dawn's Vulkan backend lists only SwiftShader). Default `"core"`.
   */
  featureLevel?: "core" | "compatibility";
}

/** Thrown by {@link WebGpuBackend.create} when there is no WebGPU adapter to run on. */
export class WebGpuUnavailableError extends GraftError {
  /** The error's class name. */
  override name = "WebGpuUnavailableError";
}

/**
 * The WebGPU backend. Reads are asynchronous only (`getTensorAsync`); everything else is queued
 * in order on the device, so results are ready when a read or {@link synchronize} resolves.
 *
 * @example
 * ```ts
 * import { add, allocTensors, Context, Graph } from "../../../mod.ts";
 * import { WebGpuBackend } from "./backend.ts";
 * using gpu = await WebGpuBackend.create();
 * const ctx = new Context();
 * const a = ctx.newTensor("f32", [3]);
 * const b = ctx.newTensor("f32", [3]);
 * const c = add(a, b);
 * const graph = Graph.build(c);
 * using buffer = allocTensors(gpu, [a, b, ...graph.nodes]);
 * gpu.setTensor(a, new Float32Array([1, 2, 3]));
 * gpu.setTensor(b, new Float32Array([10, 20, 30]));
 * gpu.graphCompute(graph);
 * console.log(await gpu.getTensorAsync(c)); // Float32Array [11, 22, 33]
 * ```
 */
export class WebGpuBackend implements Backend {
  readonly name = "webgpu";
  /** The device's minStorageBufferOffsetAlignment: tensors are bound at their own offset. */
  readonly alignment: number;
  /** The device: its `limits` say how large buffers and bindings may be. */
  readonly device: GPUDevice;
  /** What the adapter says about itself (description "llvmpipe ..." on software). */
  readonly adapterInfo: GPUAdapterInfo;
  /**
   * Device memory (not host visible), offsets at minStorageBufferOffsetAlignment, buffers up
   * to the device's maxBufferSize; a tensor takes its footprint rounded up to 4 bytes (shaders
   * bind whole words).
   */
  readonly bufferType: BufferType;
  readonly #pipelines: PipelineCache;
  readonly #statusBuffer: GPUBuffer;
  readonly #host: PlanHost;
  #disposed = false;
  #statusDirty = false;
  #errors: string[] = [];

  /** False for backends made over a caller's device: their dispose leaves it alive. */
  readonly #ownsDevice: boolean;

  private constructor(device: GPUDevice, info: GPUAdapterInfo, ownsDevice: boolean) {
    this.#ownsDevice = ownsDevice;
    this.device = device;
    this.adapterInfo = info;
    this.alignment = device.limits.minStorageBufferOffsetAlignment;
    this.bufferType = {
      name: "webgpu",
      alignment: this.alignment,
      maxSize: device.limits.maxBufferSize,
      hostVisible: false,
      allocSize: (tensor: Tensor): number => Math.ceil(tensor.nbytes / 4) * 4,
    };
    this.#pipelines = new PipelineCache(device);
    this.#statusBuffer = device.createBuffer({
      size: 16,
      usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
      label: "graft status",
    });
    this.#host = {
      device,
      pipelines: this.#pipelines,
      statusBuffer: this.#statusBuffer,
      maxBindingSize: device.limits.maxStorageBufferBindingSize,
      bindingOf: (tensor, verb) => this.#bindingOf(tensor, verb),
    };
    // Validation errors surface asynchronously; they are reported by the next synchronize.
    device.addEventListener("uncapturederror", (event: Event): void => {
      const message = event instanceof GPUUncapturedErrorEvent ? event.error.message : event.type;
      this.#errors.push(message);
    });
  }

  /**
   * Opens the default WebGPU adapter with its largest buffer limits. Throws
   * {@link WebGpuUnavailableError} when Deno finds no adapter.
   */
  static async create(options: WebGpuBackendOptions = {}): Promise<WebGpuBackend> {
    const gpu = (globalThis.navigator as Navigator | undefined)?.gpu;
    if (!gpu) {
      throw new WebGpuUnavailableError("WebGpuBackend.create: navigator.gpu is not available");
    }
    // featureLevel is newer than the GPURequestAdapterOptions of Deno's type library.
    const request: GPURequestAdapterOptions & { featureLevel?: string } = {};
    if (options.powerPreference) request.powerPreference = options.powerPreference;
    if (options.featureLevel) request.featureLevel = options.featureLevel;
    const adapter = await gpu.requestAdapter(request);
    if (!adapter) {
      throw new WebGpuUnavailableError(
        "WebGpuBackend.create: no WebGPU adapter found (on Linux without a GPU, install Mesa's " +
          "software drivers: mesa-vulkan-drivers or libgl1-mesa-dri + libegl-mesa0)",
      );
    }
    const limits = adapter.limits;
    // An adapter asked for in compatibility mode may be a core one: then take core's rules.
    const core = "core-features-and-limits" as GPUFeatureName;
    const device = await adapter.requestDevice({
      requiredFeatures: adapter.features.has(core) ? [core] : [],
      requiredLimits: {
        maxBufferSize: limits.maxBufferSize,
        maxStorageBufferBindingSize: limits.maxStorageBufferBindingSize,
        maxStorageBuffersPerShaderStage: limits.maxStorageBuffersPerShaderStage,
        // Compatibility mode's defaults (128 invocations) are below the kernels' workgroups.
        maxComputeWorkgroupSizeX: limits.maxComputeWorkgroupSizeX,
        maxComputeWorkgroupSizeY: limits.maxComputeWorkgroupSizeY,
        maxComputeWorkgroupSizeZ: limits.maxComputeWorkgroupSizeZ,
        maxComputeInvocationsPerWorkgroup: limits.maxComputeInvocationsPerWorkgroup,
        maxComputeWorkgroupStorageSize: limits.maxComputeWorkgroupStorageSize,
      },
      label: "graft",
    });
    return new WebGpuBackend(device, adapter.info, true);
  }
  /**
   * A backend over a device the caller already has (one device can serve several backends).
   * Disposing this backend frees what it made but leaves the device alive: its owner destroys it.
   */
  static fromDevice(device: GPUDevice, adapterInfo: GPUAdapterInfo): WebGpuBackend {
    return new WebGpuBackend(device, adapterInfo, false);
  }

  #alive(verb: string): void {
    if (this.#disposed) throw new DisposedError(`WebGpuBackend.${verb}: backend is disposed`);
  }

  allocBuffer(size: number): WebGpuBuffer {
    this.#alive("allocBuffer");
    return new WebGpuBuffer(this, this.device, size, this.alignment);
  }

  /** The buffer of this backend holding `tensor`; throws if it has no memory here. */
  bufferOf(tensor: Tensor, verb: string): WebGpuBuffer {
    const placement = tensor.placement;
    if (!placement) throw new PlacementError(`${verb}: ${tensor.label} has no memory`);
    const buffer = placement.buffer;
    if (!(buffer instanceof WebGpuBuffer) || buffer.backend !== this) {
      throw new PlacementError(
        `${verb}: ${tensor.label} lives on ${buffer.backend.name}, not on this webgpu backend`,
      );
    }
    if (buffer.disposed) {
      throw new DisposedError(`${verb}: the buffer holding ${tensor.label} was disposed`);
    }
    return buffer;
  }

  /**
   * Whether a WGSL kernel computes `tensor`: an op this backend has a shader for, elements
   * naturally aligned (shaders address words and half words), and every operand within the
   * device's maxStorageBufferBindingSize. bf16 and block-quantized tensors (q8_0, q4_0, q4_1,
   * q5_0, q5_1, q4_K, q5_K, q6_K) are taken as getRows' table and mulMat's weights, with
   * adjacent blocks in a row; shaders decode them in place, from any byte offset. Views need
   * no kernel.
   */
  supportsOp(tensor: Tensor): boolean {
    if (isViewOp(tensor.op)) return true;
    // The op table's support column, where an op declares it, lists the dtypes it has here.
    if (!(opInfo(tensor.op).support?.webgpu.includes(tensor.dtype) ?? true)) return false;
    try {
      kernelFor(tensor);
    } catch {
      return false;
    }
    const limit = this.device.limits.maxStorageBufferBindingSize;
    for (const t of [tensor, ...tensor.src]) {
      // Raw bytes are fetched byte by byte from words: any stride will do.
      const size = holdsRawBytes(t.dtype) ? 1 : dtypeSize[t.dtype];
      if (t.nb.some((stride) => stride % size !== 0)) return false;
      // The binding starts up to one alignment before the tensor and ends on a word.
      if (this.alignment + Math.ceil(t.nbytes / 4) * 4 > limit) return false;
    }
    return true;
  }

  #bindingOf(tensor: Tensor, verb: string): TensorBinding {
    const buffer = this.bufferOf(tensor, verb);
    const limit = this.device.limits.maxStorageBufferBindingSize;
    return tensorBinding(tensor, buffer, tensor.placement!.offset, this.alignment, limit, verb);
  }

  /** Queues the write; it happens before any work queued after it. */
  setTensor(tensor: Tensor, data: ArrayBufferView, offset = 0): void {
    requireTensorData("setTensor", tensor, data);
    this.#alive("setTensor");
    const buffer = this.bufferOf(tensor, "setTensor");
    requireTensorRange("setTensor", tensor, offset, data.byteLength);
    const at = tensor.placement!.offset + offset;
    writeBytes(this.device, this.#pipelines, buffer.gpuBuffer, at, hostBytes(data), this.alignment);
    buffer.markWritten();
  }

  /** Always throws: WebGPU cannot read device memory synchronously. */
  getTensor(tensor: Tensor, _offset?: number, _size?: number): TensorData {
    throw new GraftError(
      `WebGpuBackend.getTensor: WebGPU cannot read ${tensor.label} synchronously; ` +
        "use `await backend.getTensorAsync(tensor)`",
    );
  }

  setTensorAsync(tensor: Tensor, data: ArrayBufferView, offset = 0): Promise<void> {
    try {
      requireTensorData("setTensorAsync", tensor, data);
    } catch (error) {
      return Promise.reject(error);
    }
    try {
      this.setTensor(tensor, data, offset);
      return Promise.resolve();
    } catch (error) {
      return Promise.reject(error);
    }
  }

  async getTensorAsync(tensor: Tensor, offset = 0, size?: number): Promise<TensorData> {
    this.#alive("getTensorAsync");
    requireReadable("getTensorAsync", tensor);
    const buffer = this.bufferOf(tensor, "getTensorAsync");
    const length = size ?? tensor.nbytes - offset;
    requireTensorRange("getTensorAsync", tensor, offset, length);
    const at = tensor.placement!.offset + offset;
    const bytes = await readBytes(this.device, buffer.gpuBuffer, at, length);
    await this.#report("getTensorAsync");
    const count = Math.floor(length / dtypeSize[tensor.dtype]);
    return typedView(tensor.dtype, bytes.buffer as ArrayBuffer, count);
  }

  /** Reads all of `tensor` into `into` (through a mapped staging buffer, then one copy). */
  async getTensorIntoAsync(tensor: Tensor, into: ArrayBufferView): Promise<void> {
    requireWholeTensorArray("getTensorIntoAsync", tensor, into);
    const data = await this.getTensorAsync(tensor);
    new Uint8Array(into.buffer, into.byteOffset, into.byteLength)
      .set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
  }

  /** Waits for all queued work; rejects with the device errors and bad inputs it met. */
  async synchronize(): Promise<void> {
    this.#alive("synchronize");
    await this.device.queue.onSubmittedWorkDone();
    await this.#report("synchronize");
  }

  // Device validation errors, then the status word of kernels that check their input.
  async #report(verb: string): Promise<void> {
    if (this.#errors.length > 0) {
      const errors = this.#errors;
      this.#errors = [];
      throw new GraftError(`${verb}: the WebGPU device reported: ${errors.join("; ")}`);
    }
    if (!this.#statusDirty) return;
    this.#statusDirty = false;
    const status = new Uint32Array((await readBytes(this.device, this.#statusBuffer, 0, 4)).buffer);
    if (status[0] !== 0) {
      this.device.queue.writeBuffer(this.#statusBuffer, 0, new Uint32Array(4));
      throw new OutOfBoundsError(
        `${verb}: a getRows index was outside its table; the rows it named were written as 0`,
      );
    }
  }

  cpyTensorFrom(src: Tensor, dst: Tensor): Promise<void> {
    requireSameLayout("cpyTensorFrom", src, dst);
    const srcBuffer = src.placement?.buffer;
    if (!srcBuffer) {
      return Promise.reject(new PlacementError(`cpyTensorFrom: ${src.label} has no memory`));
    }
    if (srcBuffer instanceof WebGpuBuffer && srcBuffer.backend === this) {
      return this.#copyLocal(src, dst, "cpyTensorFrom");
    }
    return srcBuffer.backend.getTensorAsync(src).then((data) => this.setTensor(dst, data));
  }

  cpyTensorTo(src: Tensor, dst: Tensor): Promise<void> {
    requireSameLayout("cpyTensorTo", src, dst);
    const dstBuffer = dst.placement?.buffer;
    if (!dstBuffer) {
      return Promise.reject(new PlacementError(`cpyTensorTo: ${dst.label} has no memory`));
    }
    if (dstBuffer instanceof WebGpuBuffer && dstBuffer.backend === this) {
      return this.#copyLocal(src, dst, "cpyTensorTo");
    }
    return this.getTensorAsync(src).then((data) => dstBuffer.backend.setTensorAsync(dst, data));
  }

  // copyBufferToBuffer on the device; it moves whole words, so other spans go through the host.
  #copyLocal(src: Tensor, dst: Tensor, verb: string): Promise<void> {
    try {
      this.#alive(verb);
      const from = this.bufferOf(src, verb);
      const to = this.bufferOf(dst, verb);
      const at = src.placement!.offset;
      const into = dst.placement!.offset;
      if (at % 4 !== 0 || into % 4 !== 0 || src.nbytes % 4 !== 0) {
        return this.getTensorAsync(src).then((data) => this.setTensor(dst, data));
      }
      const encoder = this.device.createCommandEncoder({ label: "graft tensor copy" });
      // WebGPU forbids a copy within one buffer: that one goes through a temporary buffer.
      const temporary = from === to
        ? this.device.createBuffer({
          size: src.nbytes,
          usage: GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
          label: "graft copy temporary",
        })
        : null;
      if (temporary) {
        encoder.copyBufferToBuffer(from.gpuBuffer, at, temporary, 0, src.nbytes);
        encoder.copyBufferToBuffer(temporary, 0, to.gpuBuffer, into, src.nbytes);
      } else {
        encoder.copyBufferToBuffer(from.gpuBuffer, at, to.gpuBuffer, into, src.nbytes);
      }
      this.device.queue.submit([encoder.finish()]);
      to.markWritten();
      temporary?.destroy();
      return Promise.resolve();
    } catch (error) {
      return Promise.reject(error);
    }
  }

  graphPlanCreate(graph: Graph): WebGpuPlan {
    this.#alive("graphPlanCreate");
    return new WebGpuPlan(this.#host, this, graph);
  }

  #checkPlan(plan: GraphPlan, graph: Graph | undefined): WebGpuPlan {
    this.#alive("graphPlanCompute");
    if (!(plan instanceof WebGpuPlan) || plan.backend !== this) {
      throw new StalePlanError("graphPlanCompute: the plan was made by another backend");
    }
    if (plan.disposed) throw new DisposedError("graphPlanCompute: the plan was freed");
    plan.identity.check("graphPlanCompute", graph);
    plan.checkBuffers("graphPlanCompute");
    return plan;
  }

  /** Queues the plan's dispatches as one command buffer; read results asynchronously. */
  graphPlanCompute(plan: GraphPlan, graph?: Graph): void {
    const gpuPlan = this.#checkPlan(plan, graph);
    const encoder = this.device.createCommandEncoder({ label: "graft graph" });
    gpuPlan.encode(encoder);
    this.device.queue.submit([encoder.finish()]);
    gpuPlan.markLeafWrites();
    if (gpuPlan.reportsStatus) this.#statusDirty = true;
  }

  graphPlanFree(plan: GraphPlan): void {
    plan.dispose();
  }

  /** Plans, queues and frees; the plan's memory is released once its work has run. */
  graphCompute(graph: Graph): void {
    using plan = this.graphPlanCreate(graph);
    this.graphPlanCompute(plan);
  }

  /** True once disposed. */
  get disposed(): boolean {
    return this.#disposed;
  }

  /** Destroys the device. Buffers and plans are disposed separately. */
  dispose(): void {
    if (this.#disposed) throw new DisposedError("WebGpuBackend.dispose: already disposed");
    this.#disposed = true;
    this.#statusBuffer.destroy();
    if (this.#ownsDevice) this.device.destroy();
  }

  /** Disposes unless already disposed (for `using`). */
  [Symbol.dispose](): void {
    if (!this.#disposed) this.dispose();
  }
}
