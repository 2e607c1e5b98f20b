/**
 * Chat templates: renders a GGUF's `tokenizer.chat_template` (a Jinja subset) the way llama.cpp's
 * bundled Jinja engine (common/jinja, used by `--jinja`, the default) does, whitespace rules and
 * lenient undefined values included.
 * @module
 */

import type { Stmt } from "./jinja/ast.ts";
import { TemplateError } from "./jinja/error.ts";
import { tokenize } from "./jinja/lexer.ts";
import { parse } from "./jinja/parser.ts";
import { render } from "./jinja/runtime.ts";
import { fromJS, type Value } from "./jinja/value.ts";

export { TemplateError };

/** One chat turn. */
export interface ChatMessage {
  /** `system`, `user`, `assistant`, ... */
  role: string;
  /** The turn's text. */
  content: string;
}

/** Options of {@linkcode ChatTemplate}. */
export interface ChatTemplateOptions {
  /** The `bos_token` variable (default `""`). */
  bosToken?: string;
  /** The `eos_token` variable (default `""`). */
  eosToken?: string;
}

/** Options of {@linkcode ChatTemplate.render}. */
export interface ChatRenderOptions {
  /** Sets `add_generation_prompt` (left undefined when false, as llama.cpp does). */
  addGenerationPrompt?: boolean;
  /** More template variables (JSON-like values); they override the defaults. */
  extra?: Record<string, unknown>;
  /** The time `strftime_now()` formats (local time; default: now). */
  now?: Date;
}

/**
 * A parsed chat template. Parsing happens once, in the constructor; {@linkcode render} fills in
 * `messages`, `bos_token`, `eos_token`, `add_generation_prompt` (and `enable_thinking: true`, as
 * llama.cpp does). Errors are {@linkcode TemplateError}s naming the template's line:col.
 *
 * @example
 * ```ts
 * import { ChatTemplate } from "@graft/graft";
 * const t = new ChatTemplate(
 *   "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}" +
 *     "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
 * );
 * const prompt = t.render([{ role: "user", content: "Hi" }], { addGenerationPrompt: true });
 * // "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
 * ```
 */
export class ChatTemplate {
  /** The template source as given. */
  readonly source: string;
  private readonly normalized: string;
  private readonly body: Stmt[];
  private readonly bosToken: string;
  private readonly eosToken: string;

  /** Parses `source`; throws a {@linkcode TemplateError} on a syntax error. */
  constructor(source: string, options: ChatTemplateOptions = {}) {
    this.source = source;
    const lexed = tokenize(source);
    this.normalized = lexed.source;
    this.body = parse(lexed.tokens, lexed.source);
    this.bosToken = options.bosToken ?? "";
    this.eosToken = options.eosToken ?? "";
  }

  /** Renders the conversation into a prompt; throws a {@linkcode TemplateError} on failure. */
  render(messages: readonly ChatMessage[], options: ChatRenderOptions = {}): string {
    const vars = new Map<string, Value>([
      ["messages", fromJS(messages.map((m) => ({ role: m.role, content: m.content })))],
      ["bos_token", this.bosToken],
      ["eos_token", this.eosToken],
      ["enable_thinking", true],
    ]);
    if (options.addGenerationPrompt) vars.set("add_generation_prompt", true);
    for (const [k, v] of Object.entries(options.extra ?? {})) vars.set(k, fromJS(v));
    return render(this.body, this.normalized, vars, options.now);
  }
}
