/**
 * The split demo: the transformer block of the main demo with its attention weights on WebGPU
 * and its MLP weights (and the input) on the CPU. The scheduler assigns every node, cuts the
 * graph into splits, copies what crosses, and plans one buffer per backend. The output must
 * match the CPU-only run.
 *
 *   deno task demo:split [--dim 256] [--seq 64] [--heads 8] [--ffn 704] [--runs 10] [--explain]
 * @module
 */

import { allocGraph, allocTensors, type Backend, CpuBackend, Op, Schedule } from "../mod.ts";
import { WebGpuBackend, WebGpuUnavailableError } from "../src/backend/webgpu/backend.ts";
import { blockData, buildBlock, setBlockInputs } from "./block.ts";
import { finishDemo, parseDemoArgs } from "./cli.ts";
import { relativeError } from "./block_reference.ts";

/** f32 on two backends whose reductions run in different orders: 1e-4 relative, as the demo. */
const TOLERANCE = 1e-4;

const { config, runs, flags } = parseDemoArgs(Deno.args, 10, ["explain"]);

async function openAccelerator(): Promise<Backend> {
  try {
    return await WebGpuBackend.create();
  } catch (error) {
    if (!(error instanceof WebGpuUnavailableError)) throw error;
    console.log(`  no WebGPU: ${error.message}`);
    console.log("  splitting across two CPU backends instead (two memory spaces all the same)");
    return new CpuBackend({ name: "cpu2", threads: 1 });
  }
}

function cpuOnly(cpu: CpuBackend, data: ReturnType<typeof blockData>): Float32Array {
  const block = buildBlock(config);
  using _weights = allocTensors(cpu, block.ctx.tensors);
  using _activations = allocGraph(cpu, block.graph);
  setBlockInputs(block, data);
  cpu.graphCompute(block.graph);
  return cpu.getTensor(block.output) as Float32Array;
}

async function main(): Promise<number> {
  console.log(`graft split demo: transformer block dim=${config.dim} seq=${config.seq}`);
  using cpu = new CpuBackend();
  using accelerator = await openAccelerator();
  const data = blockData(config);
  const expected = cpuOnly(cpu, data);

  const block = buildBlock(config);
  const w = block.inputs;
  const attention = [w.attnNorm, w.wq, w.wk, w.wv, w.wo];
  using _onAccelerator = allocTensors(accelerator, attention);
  using _onCpu = allocTensors(cpu, block.ctx.tensors.filter((t) => !attention.includes(t)));
  setBlockInputs(block, data);
  // Accelerator first: it is preferred where nothing else decides; the CPU is the fallback.
  using schedule = Schedule.create(block.graph, {
    backends: [accelerator, cpu],
    allocate: allocGraph,
  });
  const attentionEnd = block.graph.nodes.find((n) => n.op === Op.add)!;
  using manual = Schedule.fromCuts(block.graph, [
    { upTo: attentionEnd, backend: accelerator },
    { upTo: block.output, backend: cpu },
  ], allocGraph);

  console.log(`  backends       ${accelerator.name}, ${cpu.name}`);
  console.log(
    `  splits (automatic, ${schedule.splits.length}; hand-marked cut, ${manual.splits.length}):`,
  );
  for (const line of schedule.report().split("\n")) console.log(`    ${line}`);
  if (flags.has("explain")) {
    for (const line of schedule.explain().split("\n")) console.log(`    ${line}`);
  }

  const first = await schedule.compute();
  // Without profiling nothing waits between splits: the wall time a caller sees.
  const wallStarted = performance.now();
  let stats = first;
  for (let i = 0; i < runs; i++) stats = await schedule.compute();
  const wallMs = (performance.now() - wallStarted) / runs;
  const totals = new Map<string, { copyMs: number; computeMs: number }>();
  for (let i = 0; i < runs; i++) {
    const profiled = await schedule.compute({ profile: true });
    for (const [name, t] of Object.entries(profiled.backends)) {
      const sum = totals.get(name) ?? { copyMs: 0, computeMs: 0 };
      totals.set(name, { copyMs: sum.copyMs + t.copyMs, computeMs: sum.computeMs + t.computeMs });
    }
  }
  const out = await schedule.getOutput(block.output);
  await manual.compute();
  const manualOut = await manual.getOutput(block.output);
  console.log(
    `  bytes copied   ${first.bytesCopied} in the first run, then ${stats.bytesCopied} per run ` +
      `(${stats.copiesSkipped} unchanged inputs not copied again)`,
  );
  console.log(`  wall time      ${wallMs.toFixed(3)} ms per run (mean of ${runs})`);
  for (const [name, t] of totals) {
    console.log(
      `  ${name.padEnd(14)} copy ${(t.copyMs / runs).toFixed(3)} ms, compute ` +
        `${(t.computeMs / runs).toFixed(3)} ms per run (profiled: each step waited for)`,
    );
  }
  const error = relativeError(out, expected);
  const manualError = relativeError(manualOut, expected);
  console.log(
    `  vs cpu only    max relative error ${error.toExponential(2)} (manual cut ` +
      `${manualError.toExponential(2)}; tolerance ${TOLERANCE})`,
  );
  const ok = error <= TOLERANCE && manualError <= TOLERANCE &&
    schedule.splits.length <= manual.splits.length;
  return ok ? 0 : 1;
}

finishDemo(await main());
