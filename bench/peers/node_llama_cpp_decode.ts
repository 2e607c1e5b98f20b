/**
 * Drives bench/peers/node_llama_cpp_decode.mjs: a node process holding node-llama-cpp's context,
 * asked for one decode step (or a history reset) per line. The peer of bench/decode_bench.ts's
 * group; a step's time includes one line each way over a pipe (tens of microseconds, against
 * milliseconds for the step).
 * @module
 */

import { NODE_LLAMA_CPP_VERSION, nodeLlamaCppDir, nodeLlamaCppMissing } from "./node_llama_cpp.ts";

const SCRIPT = new URL("./node_llama_cpp_decode.mjs", import.meta.url).pathname;

/** A running decode server. */
export interface NodeLlamaCppDecoder {
  /** The pinned node-llama-cpp version. */
  readonly version: string;
  /** One decode step of `id` at the next position. */
  step(id: number): Promise<void>;
  /** Clears the context's history. */
  reset(): Promise<void>;
  /** Ends the process. */
  close(): Promise<void>;
}

/**
 * Starts the server for `model` with `threads` threads and `nCtx` positions; a string saying why
 * (and how to get it) when node or node-llama-cpp is missing or the process fails to start.
 */
export async function startNodeLlamaCppDecoder(
  model: string,
  threads: number,
  nCtx: number,
): Promise<NodeLlamaCppDecoder | string> {
  const missing = nodeLlamaCppMissing();
  if (missing) return missing;
  const child = new Deno.Command("node", {
    args: [SCRIPT, model, String(threads), String(nCtx)],
    env: { NODE_LLAMA_CPP_DIR: nodeLlamaCppDir() },
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const writer = child.stdin.getWriter();
  const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  const encoder = new TextEncoder();
  let buffered = "";
  const readLine = async (): Promise<string> => {
    for (;;) {
      const newline = buffered.indexOf("\n");
      if (newline >= 0) {
        const line = buffered.slice(0, newline);
        buffered = buffered.slice(newline + 1);
        return line;
      }
      const { value, done } = await lines.read();
      if (done) throw new Error("node-llama-cpp decode server exited");
      buffered += value;
    }
  };
  const ask = async (command: string): Promise<void> => {
    await writer.write(encoder.encode(`${command}\n`));
    const reply = await readLine();
    if (reply !== "ok") throw new Error(`node-llama-cpp decode server: ${reply}`);
  };
  try {
    const first = await readLine();
    if (first !== "ready") throw new Error(`expected "ready", got ${first}`);
  } catch (error) {
    child.kill();
    await child.status;
    return `node-llama-cpp decode server failed to start: ${String(error)}`;
  }
  return {
    version: NODE_LLAMA_CPP_VERSION,
    step: (id) => ask(`e ${id}`),
    reset: () => ask("r"),
    close: async () => {
      await writer.close();
      await lines.cancel();
      await child.status;
    },
  };
}
