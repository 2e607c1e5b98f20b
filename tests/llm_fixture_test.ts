// Validates tests/fixtures/llm/smollm2_greedy.json (llama.cpp's greedy SmolLM2 generations, written
// by tools/llm_fixtures.sh): its shape, internal consistency, and that its prompt ids are what
// Graft's tokenizer produces. Comparing Graft's model against the fixture is another test's job.
import assert from "node:assert/strict";
import { SMOLLM2_PATH, smolLM2Cached } from "../tools/model_cache.ts";
import { GGUFFile, Tokenizer } from "../mod.ts";

const haveModel = smolLM2Cached();
if (!haveModel) {
  console.log(
    `llm_fixture_test: ${SMOLLM2_PATH} is missing (deno task model:fetch): the tokenizer check is skipped`,
  );
}

type TopK = [number, number][];

interface Run {
  ids: number[];
  raw_argmax: number[];
  eos_step: number;
  margins: number[];
  raw_margins: number[];
  top: TopK[];
}

interface Case extends Run {
  name: string;
  text: string;
  prompt_ids: number[];
  generated_text: string | null;
  prompt_top: Record<string, TopK>;
  all_logits_run: {
    ids_equal: boolean;
    first_diff_step: number | null;
    max_abs_logit_diff: number;
  };
}

interface BatchCase extends Partial<Run> {
  name: string;
  prompt_ids: number[];
  n_batch: number;
  ids: number[];
  eos_step: number;
  margins: number[];
  cli_checked: boolean;
  ids_equal_to_batched: boolean;
  first_diff_step: number | null;
  max_abs_logit_diff_vs_batched: number;
}

interface Fixture {
  source: {
    llama_cpp: string;
    model: string;
    model_sha256: string;
    params: {
      n_ctx: number;
      n_batch: number;
      n_ubatch: number;
      flash_attn: string;
      type_k: string;
      type_v: string;
      threads: number;
      use_extra_bufts: boolean;
    };
    eog_ids: number[];
    n_vocab: number;
  };
  cases: Case[];
  batch_cases: BatchCase[];
}

/** The AVX-512 build's fixture, and the AVX2 build's when it was recorded. */
const FIXTURES: [string, Fixture][] = [];
for (const file of ["smollm2_greedy.json", "smollm2_greedy_avx2.json"]) {
  try {
    const url = new URL(`./fixtures/llm/${file}`, import.meta.url);
    FIXTURES.push([file, JSON.parse(await Deno.readTextFile(url)) as Fixture]);
  } catch (error) {
    if (!(error instanceof Deno.errors.NotFound)) throw error;
  }
}
const fixture = FIXTURES[0]![1];

const N_VOCAB = 49152;
const N_GEN = 64;
const TOP = 8;
const EOG = new Set([0, 2, 4]); // every fixture's eog_ids (checked below)

function assertIds(ids: unknown, what: string): asserts ids is number[] {
  assert.ok(Array.isArray(ids) && ids.length > 0, `${what}: not a non-empty array`);
  for (const id of ids) {
    assert.ok(Number.isInteger(id) && id >= 0 && id < N_VOCAB, `${what}: id ${id} out of range`);
  }
}

function assertTop(top: TopK, what: string): void {
  assert.equal(top.length, TOP, `${what}: ${top.length} entries, not ${TOP}`);
  const seen = new Set<number>();
  for (let k = 0; k < TOP; k++) {
    const [id, logit] = top[k]!;
    assertIds([id], what);
    assert.ok(Number.isFinite(logit), `${what}: logit ${logit}`);
    assert.ok(!seen.has(id), `${what}: id ${id} twice`);
    seen.add(id);
    if (k > 0) assert.ok(top[k - 1]![1] >= logit, `${what}: not sorted at ${k}`);
  }
}

// The greedy ids, margins and EOS step must follow from the recorded logits (ignore-eos: EOG ids
// are masked before the argmax; at most 3 EOG ids, so the choice and runner-up are in the top 8).
function assertRun(r: Partial<Run> & { ids: number[]; margins: number[] }, what: string): void {
  assertIds(r.ids, `${what}.ids`);
  assert.equal(r.ids.length, N_GEN, `${what}: ${r.ids.length} ids`);
  assert.equal(r.margins.length, N_GEN);
  for (const [s, id] of r.ids.entries()) {
    assert.ok(!EOG.has(id), `${what}: step ${s} chose EOG id ${id}`);
    assert.ok(r.margins[s]! >= 0, `${what}: step ${s} margin ${r.margins[s]}`);
  }
  if (!r.top) return;
  assert.equal(r.top.length, N_GEN);
  assert.equal(r.raw_argmax?.length, N_GEN);
  assert.equal(r.raw_margins?.length, N_GEN);
  let eos = -1;
  for (const [s, top] of r.top.entries()) {
    assertTop(top, `${what}.top[${s}]`);
    assert.equal(top[0]![0], r.raw_argmax![s], `${what}: step ${s} raw argmax`);
    if (eos < 0 && EOG.has(top[0]![0])) eos = s;
    const allowed = top.filter(([id]) => !EOG.has(id));
    assert.equal(allowed[0]![0], r.ids[s], `${what}: step ${s} id is not the best non-EOG id`);
    const margin = allowed[0]![1] - allowed[1]![1];
    assert.ok(Math.abs(margin - r.margins[s]!) < 1e-3, `${what}: step ${s} margin`);
    const raw = top[0]![1] - top[1]![1];
    assert.ok(Math.abs(raw - r.raw_margins![s]!) < 1e-3, `${what}: step ${s} raw margin`);
  }
  assert.equal(r.eos_step, eos, `${what}: eos_step`);
}

for (const [file, fixture] of FIXTURES) {
  Deno.test(`llm fixture ${file}: source records the llama.cpp build, model and context params`, () => {
    const s = fixture.source;
    assert.match(s.llama_cpp, /0\.3\.36.*0c1e5709/);
    assert.equal(s.model, "SmolLM2-135M-Instruct.Q4_1.gguf");
    assert.equal(
      s.model_sha256,
      "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    );
    assert.equal(s.n_vocab, N_VOCAB);
    assert.deepEqual(s.eog_ids, [0, 2, 4]);
    assert.deepEqual(
      { ...s.params },
      {
        n_ctx: 8192,
        n_batch: 2048,
        n_ubatch: 512,
        flash_attn: "off (resolved: disabled)",
        type_k: "f16",
        type_v: "f16",
        threads: 2,
        use_extra_bufts: false,
      },
    );
  });

  Deno.test(`llm fixture ${file}: cases are well-formed and self-consistent`, () => {
    const names = fixture.cases.map((c) => c.name);
    assert.ok(names.length >= 6, `${names.length} cases`);
    assert.equal(new Set(names).size, names.length, "duplicate case names");
    for (const name of ["plain_short", "plain_long", "code", "chat_default_system", "chat_long"]) {
      assert.ok(names.includes(name), `no case ${name}`);
    }
    for (const c of fixture.cases) {
      assert.equal(typeof c.text, "string");
      assertIds(c.prompt_ids, `${c.name}.prompt_ids`);
      assertRun(c, c.name);
      assert.ok(c.generated_text === null || typeof c.generated_text === "string");
      const positions = Object.keys(c.prompt_top).map(Number);
      assert.ok(positions.includes(0) && positions.includes(c.prompt_ids.length - 1));
      for (const p of positions) {
        assert.ok(Number.isInteger(p) && p >= 0 && p < c.prompt_ids.length, `${c.name}: pos ${p}`);
        assertTop(c.prompt_top[String(p)]!, `${c.name}.prompt_top[${p}]`);
      }
      // The last prompt position's logits are the first step's (same decode, same batch shape only
      // when the whole-prompt runs agree, which all_logits_run records).
      if (c.all_logits_run.max_abs_logit_diff === 0) {
        assert.deepEqual(c.prompt_top[String(c.prompt_ids.length - 1)], c.top[0]);
      }
    }
    const long = fixture.cases.filter((c) => c.name === "plain_long" || c.name === "chat_long");
    for (const c of long) assert.ok(c.prompt_ids.length >= 100, `${c.name} is short`);
    const chat = fixture.cases.find((c) => c.name === "chat_default_system")!;
    assert.equal(
      chat.text,
      "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face" +
        "<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n" +
        "<|im_start|>assistant\n",
    );
  });

  Deno.test(`llm fixture ${file}: one-token-at-a-time batch cases`, () => {
    assert.ok(fixture.batch_cases.length > 0);
    for (const b of fixture.batch_cases) {
      const c = fixture.cases.find((c) => c.name === b.name);
      assert.ok(c, `batch case ${b.name} has no case`);
      assert.deepEqual(b.prompt_ids, c.prompt_ids);
      assert.equal(b.n_batch, 1);
      assertRun(b, `batch:${b.name}`);
      const same = b.ids.every((id, i) => id === c.ids[i]);
      assert.equal(b.ids_equal_to_batched, same, `${b.name}: ids_equal_to_batched`);
    }
    const short = fixture.batch_cases.find((b) => b.name === "plain_short");
    assert.ok(short?.top && short.cli_checked, "plain_short batch case needs top and a CLI check");
  });
}

Deno.test({
  name: "llm fixture: prompt ids equal Graft's tokenizer; generated ids detokenize to the CLI text",
  ignore: !haveModel,
  fn: () => {
    using file = GGUFFile.open(SMOLLM2_PATH);
    const tok = Tokenizer.fromGGUF(file);
    assert.equal(tok.vocabSize, N_VOCAB);
    for (const c of fixture.cases) {
      const ids = tok.tokenize(c.text, { addSpecial: true, parseSpecial: true });
      assert.deepEqual(ids, c.prompt_ids, `${c.name}: prompt ids`);
      if (c.generated_text !== null) {
        assert.equal(tok.detokenize(c.ids), c.generated_text, `${c.name}: generated text`);
      }
    }
  },
});
