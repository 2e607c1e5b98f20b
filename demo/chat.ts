/**
 * The main demo (`deno task demo`): fetches SmolLM2-135M-Instruct (98 MB, cached after the
 * first run), asks it a question through its chat template and streams the answer, then prints
 * the speed. `--prompt TEXT` asks something else; the other options are `deno task generate`'s.
 * @module
 */

import { loadModel, parseLlmArgs, runCli, timingLine } from "../tools/llm_cli.ts";
import { liveAllocations } from "../mod.ts";

const DEFAULT_PROMPT = "What is the capital of France? Answer in one sentence.";

async function main(args: string[]): Promise<number> {
  const options = parseLlmArgs(args, { prompt: { type: "string", short: "p" } });
  const question = typeof options.values.prompt === "string"
    ? options.values.prompt
    : DEFAULT_PROMPT;
  {
    using llm = await loadModel(options);
    const prompt = llm.applyChatTemplate([{ role: "user", content: question }]);
    const encoder = new TextEncoder();
    console.log(`> ${question}`);
    for await (
      const piece of llm.generate(prompt, {
        temperature: 0,
        maxTokens: options.nPredict >= 0 ? options.nPredict : 256,
        ...options.sampling,
      })
    ) {
      Deno.stdout.writeSync(encoder.encode(piece));
    }
    console.log();
    console.log(timingLine(llm));
  }
  const live = liveAllocations();
  const alive = live.buffers + live.allocators + live.pools + live.plans + live.mappings;
  if (alive !== 0) {
    console.error(`demo: native objects still alive: ${JSON.stringify(live)}`);
    return 1;
  }
  return 0;
}

await runCli("demo", "usage: deno task demo [--prompt TEXT] [generate's options]", main);
