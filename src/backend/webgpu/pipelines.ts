/**
 * Compute pipelines, compiled once per shader key, binding shape and device. Layouts are
 * explicit (binding 0 a uniform block, then one storage binding per tensor that has its own,
 * read-write or read-only as the {@link BindingShape} says, then the status word where the kernel
 * reports bad input), so one layout serves every shader bound the same way.
 * @module
 */

import { type BindingShape, expandBindings, shapeKey, UNIFORM_SLOT_BYTES } from "./wgsl_common.ts";

/** Pipelines and layouts of one device. */
export class PipelineCache {
  readonly #device: GPUDevice;
  readonly #pipelines = new Map<string, GPUComputePipeline>();
  readonly #layouts = new Map<string, GPUBindGroupLayout>();

  constructor(device: GPUDevice) {
    this.#device = device;
  }

  /**
   * The bind group layout with a uniform slot, the storage bindings of `shape` (tensor k's at
   * binding 1 + k) and, with `status`, a read-write binding after them.
   */
  layout(shape: BindingShape, status = false): GPUBindGroupLayout {
    const key = `${shapeKey(shape)}${status ? "+status" : ""}`;
    let layout = this.#layouts.get(key);
    if (!layout) {
      const entries: GPUBindGroupLayoutEntry[] = [{
        binding: 0,
        visibility: GPUShaderStage.COMPUTE,
        buffer: { type: "uniform", minBindingSize: UNIFORM_SLOT_BYTES },
      }];
      shape.forEach((entry, k) => {
        if (typeof entry === "number") return; // shares tensor `entry`'s binding
        entries.push({
          binding: 1 + k,
          visibility: GPUShaderStage.COMPUTE,
          buffer: { type: entry === "w" ? "storage" : "read-only-storage" },
        });
      });
      if (status) {
        entries.push({
          binding: 1 + shape.length,
          visibility: GPUShaderStage.COMPUTE,
          buffer: { type: "storage" },
        });
      }
      layout = this.#device.createBindGroupLayout({ entries, label: `graft ${key}` });
      this.#layouts.set(key, layout);
    }
    return layout;
  }

  /**
   * The pipeline for `key` bound as `shape`, compiling `source()` (its tensor bindings expanded
   * for the shape) on first use.
   */
  pipeline(
    key: string,
    shape: BindingShape,
    status: boolean,
    source: () => string,
  ): GPUComputePipeline {
    const full = `${key}|${shapeKey(shape)}`;
    let pipeline = this.#pipelines.get(full);
    if (!pipeline) {
      const code = expandBindings(source(), shape);
      const module = this.#device.createShaderModule({ code, label: full });
      pipeline = this.#device.createComputePipeline({
        layout: this.#device.createPipelineLayout({
          bindGroupLayouts: [this.layout(shape, status)],
        }),
        compute: { module, entryPoint: "main" },
        label: full,
      });
      this.#pipelines.set(full, pipeline);
    }
    return pipeline;
  }

  /** Pipelines compiled so far. */
  get size(): number {
    return this.#pipelines.size;
  }
}
