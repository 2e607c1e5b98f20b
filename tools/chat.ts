/**
 * `deno task chat`: an interactive chat on a terminal with a GGUF model (the cached SmolLM2 by
 * default), as llama.cpp's `llama-cli`. Each turn renders the whole conversation with the
 * model's chat template; the KV cache keeps the earlier turns, so only the new tokens are
 * evaluated. `/reset` starts over, `/exit` (or Ctrl-D) leaves.
 *
 *   deno task chat [--model FILE] [--system TEXT] [--temp T] [-n N] [--threads N] [-c CTX] ...
 * @module
 */

import { type ChatMessage, ContextFullError } from "../mod.ts";
import { loadModel, parseLlmArgs, runCli, timingLine } from "./llm_cli.ts";

const USAGE = `usage: deno task chat [--model FILE] [--system TEXT] [--temp T] [-n N] [--seed S]
  [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty X] [--backend cpu|webgpu] [-g GPU_LAYERS]
  [--threads N] [-c CTX] [-fa on|off] [--no-repack] [--verbose]
Type a message and press Enter. /reset forgets the conversation, /exit or Ctrl-D leaves.`;

async function* lines(): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let pending = "";
  for await (const chunk of Deno.stdin.readable) {
    pending += decoder.decode(chunk, { stream: true });
    let at;
    while ((at = pending.indexOf("\n")) >= 0) {
      yield pending.slice(0, at).replace(/\r$/, "");
      pending = pending.slice(at + 1);
    }
  }
  if (pending) yield pending;
}

async function main(args: string[]): Promise<number> {
  const options = parseLlmArgs(args, {
    system: { type: "string" },
    verbose: { type: "boolean" },
  });
  const v = options.values;
  if (v.help) {
    console.log(USAGE);
    return 0;
  }
  using llm = await loadModel(options);
  const system: ChatMessage[] = typeof v.system === "string"
    ? [{ role: "system", content: v.system }]
    : [];
  let messages: ChatMessage[] = [...system];
  const encoder = new TextEncoder();
  const write = (text: string): void => {
    Deno.stdout.writeSync(encoder.encode(text));
  };
  const interactive = Deno.stdin.isTerminal();
  console.error(`chat with ${options.model} (${llm.nCtx} tokens of context). /exit to leave.`);
  if (interactive) write("> ");
  for await (const line of lines()) {
    const input = line.trim();
    if (input === "/exit" || input === "/quit") break;
    if (input === "/reset") {
      messages = [...system];
      llm.reset();
      console.error("(conversation reset)");
    } else if (input !== "") {
      messages.push({ role: "user", content: input });
      const prompt = llm.applyChatTemplate(messages);
      let reply = "";
      try {
        for await (
          const piece of llm.generate(prompt, {
            ...options.sampling,
            ...(options.nPredict >= 0 ? { maxTokens: options.nPredict } : {}),
          })
        ) {
          reply += piece;
          write(piece);
        }
      } catch (error) {
        if (!(error instanceof ContextFullError)) throw error;
        console.error(`\n(the context is full: ${error.message}; /reset to start over)`);
        messages.pop();
      }
      if (reply !== "" || messages.at(-1)?.role === "user") {
        messages.push({ role: "assistant", content: reply });
      }
      write("\n");
      if (v.verbose) console.error(timingLine(llm));
    }
    if (interactive) write("> ");
  }
  return 0;
}

await runCli("chat", USAGE, main);
