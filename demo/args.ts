/**
 * Command-line options shared by the demos: the block's sizes and how many runs to time.
 * @module
 */

import { parseArgs } from "node:util";
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
