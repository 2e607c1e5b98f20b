/**
 * What the demos share on the command line: the block's sizes, how many runs to time, and the
 * way they end (a leak check, then OK or MISMATCH and the exit status).
 * @module
 */

import { parseArgs } from "node:util";
import { liveAllocations } from "../mod.ts";
import { type BlockConfig, DEFAULT_BLOCK } from "./block.ts";

/** What the demos read from their command line. */
export interface DemoArgs {
  config: BlockConfig;
  runs: number;
  threads: number | undefined;
  flags: Set<string>;
}

/** Parses `--dim --seq --heads --ffn --threads --runs` and the boolean `flags` given. */
export function parseDemoArgs(args: string[], defaultRuns: number, flags: string[]): DemoArgs {
  const booleans = Object.fromEntries(flags.map((f) => [f, { type: "boolean" as const }]));
  const { values } = parseArgs({
    args,
    options: {
      dim: { type: "string" },
      seq: { type: "string" },
      heads: { type: "string" },
      ffn: { type: "string" },
      threads: { type: "string" },
      runs: { type: "string" },
      ...booleans,
    },
  });
  const number = (
    name: "dim" | "seq" | "heads" | "ffn" | "threads" | "runs",
  ): number | undefined => {
    const text = values[name];
    if (typeof text !== "string") return undefined;
    const parsed = Number(text);
    if (!Number.isInteger(parsed) || parsed < 1) {
      throw new Error(`--${name} must be a positive integer, got ${text}`);
    }
    return parsed;
  };
  const config: BlockConfig = {
    ...DEFAULT_BLOCK,
    dim: number("dim") ?? DEFAULT_BLOCK.dim,
    seq: number("seq") ?? DEFAULT_BLOCK.seq,
    heads: number("heads") ?? DEFAULT_BLOCK.heads,
    ffn: number("ffn") ?? DEFAULT_BLOCK.ffn,
  };
  if (config.dim % config.heads !== 0) {
    throw new Error(`--dim ${config.dim} must be a multiple of --heads ${config.heads}`);
  }
  const set = new Set(flags.filter((f) => (values as Record<string, unknown>)[f] === true));
  return { config, runs: number("runs") ?? defaultRuns, threads: number("threads"), flags: set };
}

/** Exits with `status` (0 when the results matched), or 2 if native objects were leaked. */
export function finishDemo(status: number): never {
  const live = liveAllocations();
  if (live.buffers + live.plans + live.pools + live.allocators !== 0) {
    console.error("leak:", live);
    Deno.exit(2);
  }
  console.log(status === 0 ? "  result         OK" : "  result         MISMATCH");
  Deno.exit(status);
}
