/**
 * `deno task generate`: text generation from a GGUF model, as llama.cpp's `llama-completion`.
 *
 *   deno task generate [--model FILE] (--prompt TEXT | --prompt-ids 1,2,3) [-n N] [--temp T]
 *     [--seed S] [--chat] [--system TEXT] [--backend cpu|webgpu] [-g GPU_LAYERS] [--threads N] [--ignore-eos]
 *     [--rpc HOST:PORT,...] [-fa on|off] [--no-repack] [--json]
 *
 * Streams the text to stdout as it is made; timings go to stderr. `--prompt` text is tokenized
 * with special tokens parsed (as llama.cpp's CLI); `--chat` wraps it as a user turn in the
 * model's chat template. `--json` prints one object instead: `{"prompt_ids":[…],"ids":[…],
 * "text":"…"}`. `--rpc` (llama.cpp's flag) runs every block and the output on those ggml RPC
 * servers (`ggml-rpc-server`, or Graft's), split by their free memory; with several the embedding
 * stays local, with one the whole model runs there. `-fa on` (`--flash-attn on`, llama.cpp's
 * flag) runs attention as one fused kernel per block; the default, off, is llama.cpp's
 * non-flash graph, whose logits Graft gives bit for bit. `--no-repack` (llama.cpp's flag) computes
 * q4_0 and q4_K weights as llama.cpp does with it; by default they take the order of its
 * repacked kernels, llama.cpp's default on x86 CPUs with AVX2 (`LLMLoadOptions.repack`).
 * The model defaults to the cached SmolLM2 file (fetched on first use).
 * @module
 */

import { loadModel, parseLlmArgs, runCli, timingLine, UsageError } from "./llm_cli.ts";

const USAGE = `usage: deno task generate [--model FILE] (--prompt TEXT | --prompt-ids 1,2,3)
  [-n N] [--temp T] [--seed S] [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty X]
  [--presence-penalty X] [-r STOP]... [--chat] [--system TEXT] [--backend cpu|webgpu]
  [--threads N] [-c CTX] [--ignore-eos] [--rpc HOST:PORT,...] [-fa on|off] [--no-repack]
  [--json]`;

async function main(args: string[]): Promise<number> {
  const options = parseLlmArgs(args, {
    prompt: { type: "string", short: "p" },
    "prompt-ids": { type: "string" },
    chat: { type: "boolean" },
    system: { type: "string" },
    json: { type: "boolean" },
  });
  const v = options.values;
  if (v.help) {
    console.log(USAGE);
    return 0;
  }
  const text = v.prompt;
  const idsText = v["prompt-ids"];
  if ((typeof text === "string") === (typeof idsText === "string")) {
    throw new UsageError("give exactly one of --prompt TEXT and --prompt-ids 1,2,3");
  }
  if (typeof idsText === "string" && v.chat) {
    throw new UsageError("--chat takes --prompt TEXT (the user's message), not --prompt-ids");
  }
  using llm = await loadModel(options);
  let prompt: number[];
  if (typeof idsText === "string") {
    prompt = idsText.split(",").map((s) => {
      const id = Number(s.trim());
      if (s.trim() === "" || !Number.isInteger(id)) {
        throw new UsageError(`--prompt-ids must be integers separated by commas, got ${s}`);
      }
      return id;
    });
  } else {
    const messages = [
      ...(typeof v.system === "string" ? [{ role: "system", content: v.system }] : []),
      { role: "user", content: text as string },
    ];
    const rendered = v.chat ? llm.applyChatTemplate(messages) : text as string;
    prompt = llm.tokenize(rendered, { addSpecial: true, parseSpecial: true });
  }
  const encoder = new TextEncoder();
  let out = "";
  const generation = llm.generate(prompt, {
    ...options.sampling,
    ...(options.nPredict >= 0 ? { maxTokens: options.nPredict } : {}),
    reuseCache: false,
  });
  for await (const piece of generation) {
    out += piece;
    if (!v.json) Deno.stdout.writeSync(encoder.encode(piece));
  }
  const stats = llm.lastGeneration!;
  if (v.json) {
    console.log(JSON.stringify({ prompt_ids: prompt, ids: stats.ids, text: out }));
  } else {
    Deno.stdout.writeSync(encoder.encode("\n"));
  }
  console.error(timingLine(llm));
  return 0;
}

await runCli("generate", USAGE, main);
