/**
 * Compute pipelines, compiled once per shader key and device. Layouts are explicit (binding 0
 * a uniform block, then n storage bindings) so one layout serves every shader with n storage
 * bindings, including those that do not read all of them.
 * @module
 */

import { UNIFORM_SLOT_BYTES } from "./wgsl_common.ts";

/** Pipelines and layouts of one device. */
export class PipelineCache {
  readonly #device: GPUDevice;
  readonly #pipelines = new Map<string, GPUComputePipeline>();
  readonly #layouts = new Map<number, GPUBindGroupLayout>();

  constructor(device: GPUDevice) {
    this.#device = device;
  }

  /** The bind group layout with a uniform slot and `storage` read-write storage bindings. */
  layout(storage: number): GPUBindGroupLayout {
    let layout = this.#layouts.get(storage);
    if (!layout) {
      // Every storage binding is read-write: WebGPU lets several writable bindings of one buffer
      // share a dispatch, but not a writable one with a read-only one (dst and src may alias).
      const entries: GPUBindGroupLayoutEntry[] = [{
        binding: 0,
        visibility: GPUShaderStage.COMPUTE,
        buffer: { type: "uniform", minBindingSize: UNIFORM_SLOT_BYTES },
      }];
      for (let i = 0; i < storage; i++) {
        entries.push({
          binding: 1 + i,
          visibility: GPUShaderStage.COMPUTE,
          buffer: { type: "storage" },
        });
      }
      layout = this.#device.createBindGroupLayout({ entries, label: `graft ${storage} storage` });
      this.#layouts.set(storage, layout);
    }
    return layout;
  }

  /** The pipeline for `key`, compiling `source()` on first use. */
  pipeline(key: string, storage: number, source: () => string): GPUComputePipeline {
    let pipeline = this.#pipelines.get(key);
    if (!pipeline) {
      const module = this.#device.createShaderModule({ code: source(), label: key });
      pipeline = this.#device.createComputePipeline({
        layout: this.#device.createPipelineLayout({ bindGroupLayouts: [this.layout(storage)] }),
        compute: { module, entryPoint: "main" },
        label: key,
      });
      this.#pipelines.set(key, pipeline);
    }
    return pipeline;
  }

  /** Pipelines compiled so far. */
  get size(): number {
    return this.#pipelines.size;
  }
}
