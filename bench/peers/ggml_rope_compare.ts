/**
 * Graft's CPU rope against ggml's (bench/peers/ggml_rope.c, run by bench/peers/ggml_rope.sh):
 * the same input and positions through both, every element compared. Usage: ggml_rope_compare.ts
 * <path of the ggml_rope executable>.
 * @module
 */

import { allocTensors, Context, CpuBackend, Graph, rope } from "../../mod.ts";

const exe = Deno.args[0];
if (!exe) throw new Error("usage: ggml_rope_compare.ts <ggml_rope executable>");
const dir = Deno.makeTempDirSync();
const POSITIONS = [0, 4095, 17, -3, 1];
const cases: [number, number, 0 | 2, number, number][] = [];
for (const mode of [0, 2] as const) {
  for (const [hd, nd] of [[64, 48], [96, 64], [64, 64], [128, 128]] as const) {
    for (const base of [10000, 100000, 500000]) {
      for (const scale of [1, 0.25]) cases.push([hd, nd, mode, base, scale]);
    }
  }
}
let worstAbs = 0;
let equal = 0;
let total = 0;
for (const [hd, nd, mode, base, scale] of cases) {
  const args = [hd, nd, mode, base, scale].map(String).concat(`${dir}/out.bin`, `${dir}/in.bin`);
  const run = new Deno.Command(exe, { args }).outputSync();
  if (!run.success) throw new Error(`ggml_rope ${args.join(" ")} failed`);
  const want = new Float32Array(Deno.readFileSync(`${dir}/out.bin`).buffer);
  const input = new Float32Array(Deno.readFileSync(`${dir}/in.bin`).buffer);
  using cpu = new CpuBackend({ threads: 2 });
  const ctx = new Context();
  const a = ctx.newTensor("f32", [hd, 3, POSITIONS.length]);
  const p = ctx.newTensor("i32", [POSITIONS.length]);
  const options = { nDims: nd, mode: mode === 0 ? "normal" : "neox", freqBase: base } as const;
  const out = rope(a, p, { ...options, freqScale: scale });
  const graph = Graph.build(out);
  using _memory = allocTensors(cpu, [...ctx.tensors, ...graph.nodes]);
  cpu.setTensor(a, input);
  cpu.setTensor(p, Int32Array.from(POSITIONS));
  cpu.graphCompute(graph);
  const got = cpu.getTensor(out) as Float32Array;
  for (let i = 0; i < got.length; i++) {
    total++;
    if (Object.is(got[i], want[i])) equal++;
    worstAbs = Math.max(worstAbs, Math.abs(got[i]! - want[i]!));
  }
}
Deno.removeSync(dir, { recursive: true });
console.log(
  `rope vs ggml: ${cases.length} cases, ${equal}/${total} elements bitwise equal ` +
    `(${(100 * equal / total).toFixed(1)}%), max |diff| ${worstAbs.toExponential(2)} ` +
    `(inputs up to 1.7)`,
);
