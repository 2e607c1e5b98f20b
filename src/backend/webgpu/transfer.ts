/**
 * Moves bytes between host and device memory. WebGPU writes and copies whole 4-byte words, and
 * tensors need not start or end on one (odd-length f16 tensors, views): words only partly
 * written are merged on the device by a one-thread patch kernel, so no read-back is needed.
 * All of it is queued in order with compute work.
 * @module
 */

import { PATCH_SHADER } from "./shader_copy.ts";
import type { PipelineCache } from "./pipelines.ts";
import { UINTS_AT, UNIFORM_SLOT_BYTES } from "./wgsl_common.ts";

/** Queues writing `bytes` at byte `at` of `target`. */
export function writeBytes(
  device: GPUDevice,
  pipelines: PipelineCache,
  target: GPUBuffer,
  at: number,
  bytes: Uint8Array<ArrayBuffer>,
  alignment: number,
): void {
  const end = at + bytes.length;
  const wordStart = Math.ceil(at / 4) * 4;
  const wordEnd = Math.floor(end / 4) * 4;
  if (wordStart < wordEnd) {
    device.queue.writeBuffer(target, wordStart, bytes, wordStart - at, wordEnd - wordStart);
  }
  const partial = new Set<number>();
  if (at % 4 !== 0) partial.add(at - (at % 4));
  if (end % 4 !== 0) partial.add(end - (end % 4));
  for (const word of partial) {
    let mask = 0;
    let value = 0;
    for (let byte = 0; byte < 4; byte++) {
      const position = word + byte;
      if (position < at || position >= end) continue;
      mask |= 0xff << (byte * 8);
      value |= bytes[position - at]! << (byte * 8);
    }
    patchWord(device, pipelines, target, word, mask >>> 0, value >>> 0, alignment);
  }
}

function patchWord(
  device: GPUDevice,
  pipelines: PipelineCache,
  target: GPUBuffer,
  word: number,
  mask: number,
  value: number,
  alignment: number,
): void {
  const start = Math.floor(word / alignment) * alignment;
  const uniforms = device.createBuffer({
    size: UNIFORM_SLOT_BYTES,
    usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST,
    label: "graft patch uniforms",
  });
  const words = new Uint32Array(UNIFORM_SLOT_BYTES / 4);
  words.set([0, (word - start) / 4, mask, value], UINTS_AT / 4);
  device.queue.writeBuffer(uniforms, 0, words);
  const layout = pipelines.layout(["w"]);
  const bindGroup = device.createBindGroup({
    layout,
    entries: [
      { binding: 0, resource: { buffer: uniforms } },
      { binding: 1, resource: { buffer: target, offset: start, size: word - start + 4 } },
    ],
  });
  const encoder = device.createCommandEncoder({ label: "graft patch" });
  const pass = encoder.beginComputePass();
  pass.setPipeline(pipelines.pipeline("patch", ["w"], false, () => PATCH_SHADER));
  pass.setBindGroup(0, bindGroup);
  pass.dispatchWorkgroups(1);
  pass.end();
  device.queue.submit([encoder.finish()]);
  // Freed once the submitted patch has run.
  uniforms.destroy();
}

/** Reads `length` bytes at byte `at` of `source` once queued work before it has finished. */
export async function readBytes(
  device: GPUDevice,
  source: GPUBuffer,
  at: number,
  length: number,
): Promise<Uint8Array> {
  const start = Math.floor(at / 4) * 4;
  const end = Math.ceil((at + length) / 4) * 4;
  const out = new Uint8Array(length);
  if (length === 0) return out;
  const staging = device.createBuffer({
    size: end - start,
    usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
    label: "graft read-back",
  });
  try {
    const encoder = device.createCommandEncoder({ label: "graft read-back" });
    encoder.copyBufferToBuffer(source, start, staging, 0, end - start);
    device.queue.submit([encoder.finish()]);
    await staging.mapAsync(GPUMapMode.READ);
    out.set(new Uint8Array(staging.getMappedRange(), at - start, length));
    staging.unmap();
  } finally {
    staging.destroy();
  }
  return out;
}
