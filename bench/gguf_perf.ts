/**
 * GGUF loading, both ways `GGUFFile.load` places the SmolLM2 Q4_1 weights on the CPU: mapped
 * (the default: the file mmap'ed read-only, tensors read in place) and streamed
 * (`mmap: false`: the data copied into CPU buffers). For each: the warm time of opening the file
 * and placing every weight, against reading the same file with Deno.readFile (the read bound),
 * measured alternately; and the process's RSS growth right after loading and after touching
 * every page of every weight once (one byte per 4 KiB read back through the core), against the
 * tensor data's size. The mapped run comes first, so the streamed buffers' pages cannot be
 * counted in its growth. Needs `deno task model:fetch`.
 *
 *   perf gguf_load_smollm2_<mode> graft=<ms> read_file=<ms> ratio=<graft/read>
 *   perf gguf_load_smollm2_rss_<mode> graft=<MB> tensor_data=<MB> ratio=<growth/data>
 *   perf gguf_load_smollm2_rss_touched_<mode> graft=<MB> tensor_data=<MB> ratio=<growth/data>
 *
 * with <mode> mmap or stream.
 * @module
 */

import { CpuBackend, GGUFFile, type LoadedWeights, type Tensor } from "../mod.ts";
import { check, loadCore } from "../src/core/core.ts";
import { compare } from "./timing.ts";
import { SMOLLM2_PATH } from "../tools/model_cache.ts";

const MODEL = SMOLLM2_PATH;

const PAGE = 4096;

function rss(): number {
  return Deno.memoryUsage().rss;
}

const mb = (n: number): string => `${(n / 1e6).toFixed(1)}MB`;

/**
 * Reads one byte of every page every weight spans (through the core, into one reused byte, so
 * the JS heap does not grow while touching), so each page is resident once; returns their sum.
 */
function touchEveryPage(cpu: CpuBackend, weights: LoadedWeights): number {
  const lib = loadCore();
  const byte = new Uint8Array(1);
  let sum = 0;
  const read = (tensor: Tensor, at: number): void => {
    const buffer = cpu.bufferOf(tensor, "touch");
    check(
      lib,
      lib.graft_buffer_read(buffer.handle, BigInt(tensor.placement!.offset + at), byte, 1n),
      "touch",
    );
    sum += byte[0]!;
  };
  for (const tensor of weights.tensors.values()) {
    for (let at = 0; at < tensor.nbytes; at += PAGE) read(tensor, at);
    read(tensor, tensor.nbytes - 1);
  }
  return sum;
}

if (import.meta.main) {
  using cpu = new CpuBackend({ threads: 2 });
  const modes = [["mmap", true], ["stream", false]] as const;
  // Warm: the file in the page cache and the code compiled before anything is measured.
  for (const [, mmap] of modes) {
    using file = GGUFFile.open(MODEL);
    using weights = file.load(cpu, { mmap });
    touchEveryPage(cpu, weights);
  }
  for (const [mode, mmap] of modes) {
    // RSS growth of one load kept alive (the weights stay resident, as in use).
    const before = rss();
    using file = GGUFFile.open(MODEL);
    const data = file.header.tensors.reduce((sum, t) => sum + t.nbytes, 0);
    using weights = file.load(cpu, { mmap });
    const loaded = rss() - before;
    touchEveryPage(cpu, weights);
    const touched = rss() - before;
    console.log(
      `perf gguf_load_smollm2_rss_${mode} graft=${mb(loaded)} tensor_data=${mb(data)} ` +
        `ratio=${(loaded / data).toFixed(3)}`,
    );
    console.log(
      `perf gguf_load_smollm2_rss_touched_${mode} graft=${mb(touched)} tensor_data=${mb(data)} ` +
        `ratio=${(touched / data).toFixed(3)}`,
    );
  }
  for (const [mode, mmap] of modes) {
    const load = (): void => {
      using file = GGUFFile.open(MODEL);
      using _weights = file.load(cpu, { mmap });
    };
    const read = (): void => {
      Deno.readFileSync(MODEL);
    };
    const [tg, tr] = compare(load, read, 3, 300);
    console.log(
      `perf gguf_load_smollm2_${mode} graft=${(tg * 1e3).toFixed(1)}ms ` +
        `read_file=${(tr * 1e3).toFixed(1)}ms ratio=${(tg / tr).toFixed(3)}`,
    );
  }
}
