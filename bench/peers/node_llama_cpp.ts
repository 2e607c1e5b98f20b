/**
 * node-llama-cpp, the optional second peer of `deno task bench:llm`: where its install is and how
 * bench/peers/node_llama_cpp_bench.mjs runs under it. Not a dependency of the repository; the
 * benchmark skips it (with how to get it) when it is missing.
 * @module
 */

import { runWithPeakRss } from "../peak_rss.ts";

/** The pinned version. */
export const NODE_LLAMA_CPP_VERSION = "3.21.1";

const SCRIPT = new URL("./node_llama_cpp_bench.mjs", import.meta.url).pathname;

/** The install dir ($NODE_LLAMA_CPP_DIR, else $GRAFT_CACHE or ~/.cache/graft + /node-llama-cpp). */
export function nodeLlamaCppDir(): string {
  const cache = Deno.env.get("GRAFT_CACHE") ?? `${Deno.env.get("HOME")}/.cache/graft`;
  return Deno.env.get("NODE_LLAMA_CPP_DIR") ?? `${cache}/node-llama-cpp`;
}

/** Undefined when node and the install are there, else why not and how to get them. */
export function nodeLlamaCppMissing(): string | undefined {
  const dir = nodeLlamaCppDir();
  const how = `mkdir -p ${dir} && cd ${dir} && npm i -E node-llama-cpp@${NODE_LLAMA_CPP_VERSION}`;
  try {
    Deno.statSync(`${dir}/node_modules/node-llama-cpp/package.json`);
  } catch {
    return `no node-llama-cpp in ${dir}; install it with \`${how}\``;
  }
  try {
    new Deno.Command("node", { args: ["--version"] }).outputSync();
  } catch {
    return "no `node` on PATH";
  }
  return undefined;
}

/** One node-llama-cpp run: tokens/s per repetition of each test, and its peak RSS. */
export interface NodeLlamaCppResult {
  version: string;
  pp?: number[];
  tg?: number[];
  peakRssBytes: number;
}

/** Runs the node script (CPU only) with the shared settings; throws with its stderr when it fails. */
export async function runNodeLlamaCpp(s: {
  model: string;
  threads: number;
  nPrompt: number;
  nGen: number;
  nCtxPP: number;
  nCtxTG: number;
  reps: number;
  seed: number;
  /** Flash attention on (its `flashAttention` context option); default off. */
  flashAttention?: boolean;
}): Promise<NodeLlamaCppResult> {
  const args = [s.model, s.threads, s.nPrompt, s.nGen, s.nCtxPP, s.nCtxTG, s.reps, s.seed]
    .map(String);
  args.push(s.flashAttention ? "1" : "0");
  const run = await runWithPeakRss("node", [SCRIPT, ...args], {
    NODE_LLAMA_CPP_DIR: nodeLlamaCppDir(),
  });
  if (!run.success) {
    throw new Error(`node-llama-cpp failed (exit ${run.code}): ${run.stderr.trim().slice(-400)}`);
  }
  const out = JSON.parse(run.stdout.trim().split("\n").at(-1)!) as {
    version: string;
    pp?: { samples_ts: number[] };
    tg?: { samples_ts: number[] };
  };
  return {
    version: out.version,
    pp: out.pp?.samples_ts,
    tg: out.tg?.samples_ts,
    peakRssBytes: run.peakRssBytes,
  };
}
