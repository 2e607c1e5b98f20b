/**
 * GGUF loading: opening the SmolLM2 Q4_1 file and placing every weight in a CPU buffer, against
 * reading the same file into memory with Deno.readFile (the read bound), measured alternately;
 * and the process's RSS growth against the tensor data's size. Needs `deno task model:fetch`.
 *
 *   perf gguf_load_smollm2 graft=<ms> read_file=<ms> ratio=<graft/read>
 *   perf gguf_load_smollm2_rss graft=<MB> tensor_data=<MB> ratio=<growth/data>
 * @module
 */

import { CpuBackend, GGUFFile } from "../mod.ts";
import { compare } from "./timing.ts";

const MODEL = `${
  Deno.env.get("GRAFT_MODEL_CACHE") ?? `${Deno.env.get("HOME")}/.cache/graft/models`
}/SmolLM2-135M-Instruct.Q4_1.gguf`;

function rss(): number {
  return Deno.memoryUsage().rss;
}

if (import.meta.main) {
  using cpu = new CpuBackend({ threads: 2 });
  const before = rss();
  let data = 0;
  {
    // RSS growth of one load kept alive (the weights stay resident, as in use).
    using file = GGUFFile.open(MODEL);
    data = file.header.tensors.reduce((sum, t) => sum + t.nbytes, 0);
    using _weights = file.load(cpu);
    const growth = rss() - before;
    const mb = (n: number): string => `${(n / 1e6).toFixed(1)}MB`;
    console.log(
      `perf gguf_load_smollm2_rss graft=${mb(growth)} tensor_data=${mb(data)} ` +
        `ratio=${(growth / data).toFixed(3)}`,
    );
  }
  const load = (): void => {
    using file = GGUFFile.open(MODEL);
    using _weights = file.load(cpu);
  };
  const read = (): void => {
    Deno.readFileSync(MODEL);
  };
  const [tg, tr] = compare(load, read, 3, 300);
  console.log(
    `perf gguf_load_smollm2 graft=${(tg * 1e3).toFixed(1)}ms read_file=${
      (tr * 1e3).toFixed(1)
    }ms ` +
      `ratio=${(tg / tr).toFixed(3)}`,
  );
}
