/**
 * The demo: one transformer block with random weights on the CPU backend, checked against a
 * float64 reference. Prints the checksum, node count, buffer bytes and time per run.
 *
 *   deno task demo [--dim 256] [--seq 64] [--heads 8] [--ffn 704] [--threads N] [--runs 20]
 *                  [--profile]   (per-node times of the last run)
 *                  [--no-prepack] (pack the weights on every run, as without prepacking)
 * @module
 */

import { allocTensors, CpuBackend, type CpuPlan, opName, planGraph } from "../mod.ts";
import { blockData, buildBlock, setBlockInputs } from "./block.ts";
import { finishDemo, parseDemoArgs } from "./cli.ts";
import { referenceBlock, relativeError } from "./block_reference.ts";

const TOLERANCE = 1e-4;

const { config, runs, threads, flags } = parseDemoArgs(Deno.args, 20, ["profile", "no-prepack"]);
const prepackWeights = !flags.has("no-prepack");

function main(): number {
  using cpu = new CpuBackend(threads ? { threads } : {});
  const block = buildBlock(config);
  const data = blockData(config);
  using weights = allocTensors(cpu, block.ctx.tensors);
  const memory = planGraph(block.graph, { alignment: cpu.alignment });
  using activations = memory.allocate(cpu);
  setBlockInputs(block, data);
  // Weights are constant across runs: the plan packs them once, on the first compute.
  using plan = cpu.graphPlanCreate(block.graph, { prepackWeights });
  cpu.graphPlanCompute(plan);
  const out = cpu.getTensor(block.output);
  const started = performance.now();
  for (let i = 0; i < runs; i++) cpu.graphPlanCompute(plan);
  const msPerRun = (performance.now() - started) / runs;

  const expected = referenceBlock(config, data);
  const error = relativeError(out, expected);
  let checksum = 0;
  for (const v of out) checksum += v;
  const c = config;
  console.log(
    `graft demo: transformer block dim=${c.dim} heads=${c.heads} seq=${c.seq} ffn=${c.ffn}`,
  );
  console.log(
    `  backend        cpu (${cpu.simd}, ${cpu.threads} threads, ` +
      `${
        prepackWeights
          ? `prepacked weights: ${plan.prepacked.length} products`
          : "weights packed per run"
      })`,
  );
  console.log(
    `  nodes          ${block.graph.nodes.length} (${plan.nodeCount} computed, rest views)`,
  );
  console.log(`  weights        ${weights.size} bytes`);
  console.log(
    `  activations    ${activations.size} bytes planned (${memory.strategy}; lower bound ` +
      `${memory.lowerBound}, every tensor its own block ${memory.naiveSize})`,
  );
  console.log(`  work buffer    ${plan.workSize} bytes`);
  console.log(`  checksum       ${checksum.toFixed(6)}`);
  console.log(`  time per run   ${msPerRun.toFixed(3)} ms (mean of ${runs})`);
  console.log(
    `  vs float64     max relative error ${error.toExponential(2)} (tolerance ${TOLERANCE})`,
  );
  if (flags.has("profile")) printProfile(cpu, plan);
  return error <= TOLERANCE ? 0 : 1;
}

function printProfile(cpu: CpuBackend, plan: CpuPlan): void {
  plan.enableProfiling();
  cpu.graphPlanCompute(plan);
  console.log("  profile (ms per node, last run):");
  for (const { tensor, ms, fused } of plan.nodeTimings()) {
    const op = fused.map((t) => opName(t.op)).join("+");
    console.log(`    ${ms.toFixed(3).padStart(8)}  ${op.padEnd(11)} ${tensor.label}`);
  }
}

finishDemo(main());
