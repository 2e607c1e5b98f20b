/**
 * Writing Graft tensors as a GGUF file: each tensor's bytes are read from the backend that holds
 * it (CPU, WebGPU, RPC: `getTensorAsync`), one tensor at a time, and streamed out.
 * @module
 */

import { DTYPES } from "../dtype.ts";
import { ArgumentError, PlacementError } from "../errors.ts";
import type { Tensor } from "../tensor.ts";
import type { GGUFMetadataEntry } from "./reader.ts";
import { GGUF_DEFAULT_ALIGNMENT } from "./reader.ts";
import { ggmlType } from "./types.ts";
import { type GGUFSink, layoutTensors, writeGGUFStream } from "./writer.ts";

/** What {@link writeTensorsGGUF} writes. */
export interface TensorsGGUFInput {
  /** Metadata entries, in this order (`general.alignment` sets the data alignment). */
  readonly metadata?: readonly GGUFMetadataEntry[];
  /**
   * The tensors, in this order: each placed in a buffer of any backend, contiguous, with a
   * name (unique, under 64 bytes as ggml requires) that becomes its name in the file.
   */
  readonly tensors: readonly Tensor[];
  /** Called with a warning of the writer (nested metadata arrays). */
  readonly onWarning?: (message: string) => void;
}

/** ggml's GGML_MAX_NAME: llama.cpp rejects tensor names of this many bytes or more. */
const MAX_NAME_BYTES = 64;

const utf8 = new TextEncoder();

/** ggml_n_dims: the dims up to the last that is not 1 (at least one). */
function fileDims(tensor: Tensor): number[] {
  let n = 4;
  while (n > 1 && tensor.ne[n - 1] === 1) n--;
  return tensor.ne.slice(0, n);
}

/** Elements stored densely in ggml order (strides of dims with one element do not matter). */
function isDense(tensor: Tensor): boolean {
  const { blockSize, blockBytes } = DTYPES[tensor.dtype];
  let stride = blockBytes;
  for (let d = 0; d < 4; d++) {
    if (tensor.ne[d] !== 1 && tensor.nb[d] !== stride) return false;
    stride *= d === 0 ? tensor.ne[0] / blockSize : tensor.ne[d]!;
  }
  return true;
}

/**
 * Writes `tensors` as a GGUF v3 file to `target` (a path, created or truncated; or a sink),
 * reading each tensor's bytes from its backend with `getTensorAsync` as the writer reaches it:
 * the header and one tensor's bytes are in memory at a time. Their dtypes are written as ggml's
 * types (`DTYPES[dtype].ggmlType`), dims as ggml writes them (trailing 1s dropped). Resolves to
 * the bytes written.
 *
 * Throws an ArgumentError for a tensor without a name, with a name used twice or too long, or
 * not contiguous (write `cont(view)` instead), and a PlacementError for a tensor without memory;
 * each names the tensor, and is thrown before anything is written.
 *
 * @example
 * ```ts
 * import { allocTensors, Context, CpuBackend, GGUFFile, writeTensorsGGUF } from "../../mod.ts";
 * using cpu = new CpuBackend();
 * const ctx = new Context();
 * const w = ctx.newTensor("f32", [4, 2], "w");
 * using _memory = allocTensors(cpu, [w]);
 * cpu.setTensor(w, new Float32Array([1, 2, 3, 4, 5, 6, 7, 8]));
 * const path = await Deno.makeTempFile({ suffix: ".gguf" });
 * await writeTensorsGGUF(path, {
 *   metadata: [{ key: "general.name", type: "string", value: "tiny" }],
 *   tensors: [w],
 * });
 * using file = GGUFFile.open(path);
 * console.log(file.tensor("w").dims); // [4, 2]
 * ```
 */
export async function writeTensorsGGUF(
  target: string | URL | GGUFSink,
  input: TensorsGGUFInput,
): Promise<number> {
  const what = "writeTensorsGGUF";
  const metadata = input.metadata ?? [];
  const names = new Set<string>();
  for (const tensor of input.tensors) {
    if (!tensor.name) {
      throw new ArgumentError(`${what}: tensor ${tensor.label} has no name; GGUF needs one`);
    }
    if (names.has(tensor.name)) {
      throw new ArgumentError(`${what}: two tensors are named ${JSON.stringify(tensor.name)}`);
    }
    names.add(tensor.name);
    if (utf8.encode(tensor.name).length >= MAX_NAME_BYTES) {
      throw new ArgumentError(
        `${what}: tensor name ${JSON.stringify(tensor.name)} has ${
          utf8.encode(tensor.name).length
        } bytes; llama.cpp reads names of fewer than ${MAX_NAME_BYTES}`,
      );
    }
    if (!isDense(tensor)) {
      throw new ArgumentError(
        `${what}: tensor ${tensor.label} is not contiguous (strides ${
          tensor.nb.join(", ")
        }); write cont() of it`,
      );
    }
    if (!tensor.placement) {
      throw new PlacementError(`${what}: tensor ${tensor.label} has no memory`);
    }
  }
  const alignmentEntry = metadata.find((m) => m.key === "general.alignment");
  const alignment = typeof alignmentEntry?.value === "number"
    ? alignmentEntry.value
    : GGUF_DEFAULT_ALIGNMENT;
  const infos = layoutTensors(
    input.tensors.map((t) => ({
      name: t.name,
      dims: fileDims(t),
      type: ggmlType(DTYPES[t.dtype].ggmlType)!,
      nbytes: t.nbytes,
    })),
    alignment,
  );
  return await writeGGUFStream(target, {
    metadata,
    tensors: infos,
    onWarning: input.onWarning,
    data: async (i) => {
      const tensor = input.tensors[i]!;
      const placement = tensor.placement;
      if (!placement) throw new PlacementError(`${what}: tensor ${tensor.label} has no memory`);
      const data = await placement.buffer.backend.getTensorAsync(tensor);
      return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    },
  });
}
