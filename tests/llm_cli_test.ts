/**
 * `deno task generate` and `deno task chat` as a user runs them (subprocesses): JSON output,
 * streaming text, usage errors with exit status 2, a piped chat. Skipped without the cached
 * SmolLM2 file or without --allow-run.
 */

import assert from "node:assert/strict";
import { CpuBackend } from "../mod.ts";
import { SMOLLM2_PATH, smolLM2Cached } from "../tools/model_cache.ts";
import { llamaFixtureFor, requantizedSmolLM2 } from "./llm_fixture.ts";

const canRun = Deno.permissions.querySync({ name: "run" }).state === "granted";
const ignore = !smolLM2Cached() || !canRun;
if (ignore) console.log("llm_cli_test: needs the cached SmolLM2 file and --allow-run: skipped");

const root = new URL("../", import.meta.url);

async function run(
  script: string,
  args: string[],
  stdin = "",
): Promise<{ code: number; stdout: string; stderr: string }> {
  const command = new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-all", script, "--model", SMOLLM2_PATH, "--threads", "2", ...args],
    cwd: root,
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  });
  const child = command.spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(stdin));
  await writer.close();
  const out = await child.output();
  const decode = (b: Uint8Array): string => new TextDecoder().decode(b);
  return { code: out.code, stdout: decode(out.stdout), stderr: decode(out.stderr) };
}

Deno.test({
  name: "generate --prompt-ids --json prints one object of ids and text",
  ignore,
  async fn(): Promise<void> {
    const r = await run("tools/generate.ts", [
      "--prompt-ids",
      "504,3575,282,4649,314",
      "-n",
      "4",
      "--temp",
      "0",
      "--json",
    ]);
    assert.equal(r.code, 0, r.stderr);
    const out = JSON.parse(r.stdout) as { prompt_ids: number[]; ids: number[]; text: string };
    assert.deepEqual(out.prompt_ids, [504, 3575, 282, 4649, 314]);
    assert.deepEqual(out.ids, [7042, 30, 198, 198]);
    assert.equal(out.text, " Paris.\n\n");
    assert.match(r.stderr, /generation: 4 tokens/);
  },
});

Deno.test({
  name: "generate --prompt streams the text; --chat wraps it in the chat template",
  ignore,
  async fn(): Promise<void> {
    const plain = await run("tools/generate.ts", [
      "--prompt",
      "The capital of France is",
      "-n",
      "2",
      "--temp",
      "0",
    ]);
    assert.equal(plain.code, 0, plain.stderr);
    assert.equal(plain.stdout, " Paris.\n");
    const chat = await run("tools/generate.ts", [
      "--prompt",
      "What is the capital of France? Answer in one sentence.",
      "--chat",
      "--temp",
      "0",
      "--json",
    ]);
    assert.equal(chat.code, 0, chat.stderr);
    const out = JSON.parse(chat.stdout) as { prompt_ids: number[]; text: string };
    assert.equal(out.prompt_ids[0], 1); // <|im_start|>, parsed as a special token
    assert.equal(out.text, "The capital of France is Paris.");
  },
});

Deno.test({
  name: "generate: usage errors exit with status 2 and say what to do",
  ignore,
  async fn(): Promise<void> {
    const both = await run("tools/generate.ts", ["--prompt", "x", "--prompt-ids", "1"]);
    assert.equal(both.code, 2);
    assert.match(both.stderr, /exactly one of --prompt TEXT and --prompt-ids/);
    assert.match(both.stderr, /usage: deno task generate/);
    const bad = await run("tools/generate.ts", ["--prompt", "x", "--temp", "hot"]);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--temp must be a number >= 0, got "hot"/);
    const unknown = await run("tools/generate.ts", ["--prompt", "x", "--frobnicate"]);
    assert.equal(unknown.code, 2);
    const ids = await run("tools/generate.ts", ["--prompt-ids", "1,x"]);
    assert.equal(ids.code, 2);
    assert.match(ids.stderr, /--prompt-ids must be integers/);
    const fa = await run("tools/generate.ts", ["--prompt", "x", "-fa", "auto"]);
    assert.equal(fa.code, 2);
    assert.match(fa.stderr, /--flash-attn \(-fa\) must be on or off, got "auto"/);
  },
});

Deno.test({
  name: "generate -fa on (llama.cpp's flag; --flash-attn on) runs the fused attention",
  ignore,
  async fn(): Promise<void> {
    const args = ["--prompt-ids", "504,3575,282,4649,314", "-n", "4", "--temp", "0", "--json"];
    for (const flag of [["-fa", "on"], ["--flash-attn", "on"]]) {
      const r = await run("tools/generate.ts", [...args, ...flag]);
      assert.equal(r.code, 0, r.stderr);
      // The first ids are far from ties (measured margins above 1): the same as without.
      assert.deepEqual((JSON.parse(r.stdout) as { ids: number[] }).ids, [7042, 30, 198, 198]);
    }
  },
});

Deno.test({
  name: "generate --no-repack (llama.cpp's flag) on a Q4_0 model: llama.cpp's ids with and without",
  ignore,
  async fn(): Promise<void> {
    // SmolLM2 requantized to Q4_0: every q4_0 matrix is one llama.cpp repacks by default. On the
    // "code" prompt the two placements' greedy ids part at step 9 (AVX-512 build's fixtures) and
    // 17 (AVX2's), so 24 ids tell them apart.
    const simd = ((): string => {
      using cpu = new CpuBackend({ threads: 1 });
      return cpu.simd;
    })();
    const dir = await Deno.makeTempDir({ prefix: "graft-cli-q4_0-" });
    try {
      const model = await requantizedSmolLM2("q4_0", dir);
      for (const repack of [true, false]) {
        const want = llamaFixtureFor(`smollm2_q4_0_greedy${repack ? "_repack" : ""}`, simd);
        if (!want) continue; // no fixture for this SIMD level: llm_requant_test says so
        const c = want.cases.find((c) => c.name === "code")!;
        const r = await run("tools/generate.ts", [
          ...["--model", model, "--prompt-ids", c.prompt_ids.join(","), "-n", "24"],
          ...["--temp", "0", "--ignore-eos", "--json", ...(repack ? [] : ["--no-repack"])],
        ]);
        assert.equal(r.code, 0, r.stderr);
        assert.deepEqual((JSON.parse(r.stdout) as { ids: number[] }).ids, c.ids.slice(0, 24));
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: "chat: a piped conversation answers each line and keeps the history",
  ignore,
  async fn(): Promise<void> {
    const r = await run(
      "tools/chat.ts",
      ["--temp", "0", "-n", "24"],
      "What is the capital of France? Answer in one sentence.\n/reset\n/exit\n",
    );
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /The capital of France is Paris\./);
    assert.match(r.stderr, /conversation reset/);
  },
});
