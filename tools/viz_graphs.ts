/**
 * The graphs `deno task graph:dot` and `deno task plan:svg` draw: the demo transformer block
 * (optionally split over two backends, as `deno task demo:split` does), a GGUF model's graph for
 * a batch of tokens (the one-token decode graph by default), and a GPT-2 decoder. Each comes
 * with its weights placed and a schedule over its backends, so pictures can colour tensors by
 * backend and box the splits; nothing is computed.
 * @module
 */

import {
  allocTensors,
  buildLlamaGraph,
  CpuBackend,
  GGUFFile,
  type Graph,
  KvCache,
  llamaWeights,
  readLlamaHParams,
  Schedule,
} from "../mod.ts";
import { type BlockConfig, buildBlock, DEFAULT_BLOCK } from "../demo/block.ts";
import { buildGpt2, GPT2_SMALL } from "../bench/planner_perf.ts";

/** A graph to draw, its schedule, and what holds their memory until disposed. */
export interface VizSubject extends Disposable {
  /** A short name for titles and file names. */
  readonly name: string;
  /** The graph. */
  readonly graph: Graph;
  /** The graph scheduled over its backends. */
  readonly schedule: Schedule;
}

/** Disposes `items` last first, as `using` would. */
function disposer(items: Disposable[]): () => void {
  return () => {
    for (const item of items.reverse()) item[Symbol.dispose]();
  };
}

/**
 * The demo block. With `split`, its attention weights live on a second CPU backend ("cpu2":
 * a memory space of its own, as an accelerator's would be), so the schedule has splits and copies
 * between them; otherwise everything is on one CPU backend.
 */
export function demoBlockSubject(split: boolean, config: BlockConfig = DEFAULT_BLOCK): VizSubject {
  const held: Disposable[] = [];
  try {
    const block = buildBlock(config);
    const cpu = new CpuBackend({ threads: 1 });
    held.push(cpu);
    const backends = [cpu];
    let onCpu = block.ctx.tensors;
    if (split) {
      const second = new CpuBackend({ threads: 1, name: "cpu2" });
      held.push(second);
      backends.unshift(second);
      const w = block.inputs;
      const attention = [w.attnNorm, w.wq, w.wk, w.wv, w.wo];
      held.push(allocTensors(second, attention));
      onCpu = onCpu.filter((t) => !attention.includes(t));
    }
    held.push(allocTensors(cpu, onCpu));
    const schedule = Schedule.create(block.graph, { backends });
    held.push(schedule);
    return {
      name: split ? "block_split" : "block",
      graph: block.graph,
      schedule,
      [Symbol.dispose]: disposer(held),
    };
  } catch (error) {
    disposer(held)();
    throw error;
  }
}

/**
 * A llama-family GGUF model's graph for `nTokens` tokens attending over `nKv` cache positions
 * (the weights mapped on a CPU backend, a KV cache of `nKv` positions), as `LLM.eval` builds it.
 */
export function modelSubject(path: string, nTokens = 1, nKv = 256): VizSubject {
  const held: Disposable[] = [];
  try {
    const file = GGUFFile.open(path);
    held.push(file);
    const hparams = readLlamaHParams(file.header);
    const cpu = new CpuBackend({ threads: 1 });
    held.push(cpu);
    const loaded = file.load(cpu);
    held.push(loaded);
    const cache = new KvCache(cpu, hparams, nKv, "f16");
    held.push(cache);
    const built = buildLlamaGraph(hparams, llamaWeights(loaded.tensors, hparams), cache, {
      nTokens,
      nKv,
      allLogits: false,
    });
    held.push(allocTensors(cpu, built.inputs));
    const schedule = Schedule.create(built.graph, { backends: [cpu] });
    held.push(schedule);
    const base = path.split("/").at(-1)!.replace(/\.gguf$/, "");
    return {
      name: `${base}_${nTokens}tok`,
      graph: built.graph,
      schedule,
      [Symbol.dispose]: disposer(held),
    };
  } catch (error) {
    disposer(held)();
    throw error;
  }
}

/** A GPT-2 small decoder of `layers` layers over 128 tokens (graph only: nothing placed). */
export function gpt2Graph(layers: number): { name: string; graph: Graph } {
  return { name: `gpt2_${layers}l_seq128`, graph: buildGpt2({ ...GPT2_SMALL, layers }).graph };
}
