import assert from "node:assert/strict";
import { SMOLLM2_PATH, smolLM2Cached } from "../tools/model_cache.ts";
import {
  type ChatMessage,
  ChatTemplate,
  GGUFFile,
  GraftError,
  TemplateError,
  Tokenizer,
} from "../mod.ts";

// Fixtures: tools/chat_template_fixtures.sh renders each case with llama.cpp's own Jinja engine.
interface Case {
  template: string;
  messages: string;
  addGenerationPrompt: boolean;
  expected?: string;
  error?: string;
  llamaPrompt?: string | { error: string };
  llamaTokenIds?: number[];
}
interface Fixture {
  templates: Record<string, { source: string; bosToken: string; eosToken: string }>;
  messageSets: Record<string, ChatMessage[]>;
  cases: Case[];
}
const fixture = JSON.parse(
  await Deno.readTextFile(new URL("./fixtures/chat/templates.json", import.meta.url)),
) as Fixture;

const haveModel = smolLM2Cached();
if (!haveModel) {
  console.log(
    `chat_template_test: ${SMOLLM2_PATH} is missing (deno task model:fetch): the SmolLM2 token checks are skipped`,
  );
}

function renderCase(c: Case): string {
  const t = fixture.templates[c.template]!;
  const tmpl = new ChatTemplate(t.source, { bosToken: t.bosToken, eosToken: t.eosToken });
  return tmpl.render(fixture.messageSets[c.messages]!, {
    addGenerationPrompt: c.addGenerationPrompt,
  });
}

for (const c of fixture.cases) {
  Deno.test(`chat template ${c.template}: ${c.messages}, add_generation_prompt=${c.addGenerationPrompt}`, () => {
    if (c.error !== undefined) {
      // llama.cpp's message is "Jinja Exception: <raise_exception's text>".
      const reason = c.error.replace(/^Jinja Exception: /, "");
      assert.throws(() => renderCase(c), (e: unknown) => {
        assert.ok(e instanceof TemplateError, String(e));
        assert.equal(e.reason, reason);
        assert.match(e.message, /^\d+:\d+: /);
        return true;
      });
    } else {
      assert.equal(renderCase(c), c.expected);
    }
  });
}

Deno.test("chat template fixtures: SmolLM2's cases equal llama.cpp's --jinja prompt", () => {
  const smol = fixture.cases.filter((c) => c.template === "smollm2");
  assert.equal(smol.length, 8);
  for (const c of smol) {
    assert.equal(
      c.llamaPrompt,
      undefined,
      "llama.cpp's pipeline rendered SmolLM2 as the engine did",
    );
    assert.ok(c.llamaTokenIds && c.llamaTokenIds.length > 0);
  }
});

Deno.test({
  name:
    "chat template: SmolLM2's GGUF template, rendered and tokenized, equals llama.cpp token for token",
  ignore: !haveModel,
  fn(): void {
    using file = GGUFFile.open(SMOLLM2_PATH);
    const entry = file.header.metadata.find((e) => e.key === "tokenizer.chat_template");
    assert.ok(entry && typeof entry.value === "string", "the GGUF has tokenizer.chat_template");
    assert.equal(entry.value, fixture.templates.smollm2!.source);
    const tmpl = new ChatTemplate(entry.value, { eosToken: "<|im_end|>" });
    const tok = Tokenizer.fromGGUF(file);
    for (const c of fixture.cases.filter((c) => c.template === "smollm2")) {
      const prompt = tmpl.render(fixture.messageSets[c.messages]!, {
        addGenerationPrompt: c.addGenerationPrompt,
      });
      assert.equal(prompt, c.expected);
      assert.deepEqual(
        tok.tokenize(prompt, { addSpecial: true, parseSpecial: true }),
        c.llamaTokenIds,
        `${c.messages}, add_generation_prompt=${c.addGenerationPrompt}`,
      );
    }
  },
});

// Unit tests. Each expected string was checked against llama.cpp's engine (the fixture harness).
const user: ChatMessage[] = [{ role: "user", content: "hi" }];
function r(source: string, extra?: Record<string, unknown>): string {
  return new ChatTemplate(source).render(user, { addGenerationPrompt: true, extra });
}

const UNITS: Array<[string, string, string]> = [
  ["string escapes and ~", `{{ 'a\\tb\\n' ~ "c\\"d" ~ '\\\\' }}`, 'a\tb\nc"d\\'],
  [
    "arithmetic",
    "{{ 1 + 2 * 3 - 4 }}|{{ 7 % 3 }}|{{ 7 / 2 }}|{{ 1.5 + 1 }}|{{ -3 }}|{{ 2 * -1 }}",
    "3|1|3.5|2.5|-3|-2",
  ],
  [
    "comparisons",
    "{{ 1 < 2 }}|{{ 2 <= 1 }}|{{ 'a' == 'a' }}|{{ 1 != 1.0 }}",
    "True|False|True|False",
  ],
  [
    "and/or/not",
    "{{ true and false }}|{{ true or false }}|{{ not true }}|{{ none or 'x' }}|{{ '' and 'y' }}",
    "False|True|False|x|",
  ],
  [
    "in / not in",
    "{{ 'b' in 'abc' }}|{{ 2 in [1, 2] }}|{{ 'k' in {'k': 1} }}|{{ 3 not in [1] }}|{{ 'x' in nope }}",
    "True|True|True|True|False",
  ],
  [
    "ternary",
    "{{ 'yes' if 1 > 0 else 'no' }}|{{ 'yes' if 0 > 1 else 'no' }}|{{ 'only' if false }}|",
    "yes|no||",
  ],
  [
    "subscripts and attributes",
    "{{ [1, 2, 3][0] }}|{{ [1, 2, 3][-1] }}|{{ {'a': 'b'}['a'] }}|{{ {'a': 'b'}.a }}|{{ 'abc'[1] }}",
    "1|3|b|b|b",
  ],
  [
    "slices",
    "{{ [1, 2, 3, 4][1:] }}|{{ [1, 2, 3, 4][:2] }}|{{ [1, 2, 3, 4][::-1] }}|{{ 'hello'[1:3] }}|" +
    "{{ 'hello'[::-1] }}|{{ [1,2,3,4,5][::2] }}",
    "234|12|4321|el|olleh|135",
  ],
  [
    "string filters",
    "{{ '  x  ' | trim }}|{{ 'abc' | length }}|{{ [1, 2] | length }}|{{ 'aBc' | upper }}|" +
    "{{ 'aBc' | lower }}|{{ 'hello wORLD' | title }}|{{ 'hello World' | capitalize }}",
    "x|3|2|ABC|abc|Hello World|Hello world",
  ],
  [
    "default, join, first, last, list",
    "{{ nope | default('d') }}|{{ '' | default('d') }}|{{ '' | default('d', true) }}|" +
    "{{ [1, 2] | join('-') }}|{{ [1, 2] | first }}|{{ [1, 2] | last }}|{{ [3, 4] | list | join(',') }}",
    "d||d|1-2|1|2|3,4",
  ],
  [
    "replace, string, int",
    "{{ 'aXbX' | replace('X', '-') }}|{{ 'x' | string }}|{{ 5 | string }}|{{ '42' | int + 1 }}|" +
    "{{ 3.7 | int }}",
    "a-b-|x|5|43|3",
  ],
  [
    "indent",
    "{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}",
    "a\n  b\n\n  c|  a\n  b",
  ],
  [
    "items and dict methods",
    "{% for k, v in {'a': 1, 'b': 2} | items %}{{ k }}={{ v }};{% endfor %}|" +
    "{% for k, v in {'a': 1}.items() %}{{ k }}{{ v }}{% endfor %}|{{ {'a': 1}.get('a') }}|" +
    "{{ {'a': 1}.get('z', 'dflt') }}",
    "a=1;b=2;|a1|1|dflt",
  ],
  [
    "selectattr, rejectattr, map(attribute=)",
    "{{ [{'r': 'u'}, {'r': 'a'}, {'r': 'u'}] | selectattr('r', 'equalto', 'u') | list | length }}|" +
    "{{ [{'r': 'u'}, {'r': 'a'}] | rejectattr('r', 'equalto', 'u') | map(attribute='r') | join }}|" +
    "{{ [{'r': 'u', 'x': 1}, {'r': 'a'}] | selectattr('x') | list | length }}",
    "2|a|1",
  ],
  [
    "tests",
    "{{ x is defined }}|{{ x is undefined }}|{{ none is none }}|{{ 'a' is string }}|{{ 1 is number }}|" +
    "{{ 1.5 is number }}|{{ {} is mapping }}|{{ [] is iterable }}|{{ 'a' is iterable }}|" +
    "{{ [] is sequence }}|{{ true is true }}|{{ 1 is true }}|{{ false is false }}|{{ 1 is not none }}",
    "False|True|True|True|True|True|True|True|True|True|True|False|True|True",
  ],
  [
    "string methods",
    "{{ 'hello'.startswith('he') }}|{{ 'hello'.endswith('lo') }}|{{ '  a  '.strip() }}|" +
    "{{ 'xxaxx'.lstrip('x') }}|{{ '  a  '.rstrip() }}|{{ 'a b  c'.split() | length }}|" +
    "{{ 'a,b'.split(',') | join('+') }}|{{ 'ab'.upper() }}{{ 'AB'.lower() }}|" +
    "{{ 'aa'.replace('a', 'b') }}|{{ 'hi there'.title() }}",
    "True|True|a|axx|  a|4|a+b|ABab|bb|Hi There",
  ],
  [
    "namespace() and ns.attr assignment",
    "{% set ns = namespace(n=0, s='') %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}" +
    "{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}",
    "6 123",
  ],
  [
    "loop variables",
    "{% for i in [10, 20, 30] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}" +
    "{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
    "1032TrueFalse3;2121FalseFalse3;3210FalseTrue3;",
  ],
  [
    "for-else and elif",
    "{% for i in [] %}x{% else %}empty{% endfor %}|" +
    "{% if 0 %}a{% elif '' %}b{% elif 1 %}c{% else %}d{% endif %}",
    "empty|c",
  ],
  [
    "macros",
    "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} " +
    "{{ greet('B', '?') }} {{ greet(name='C', punct='.') }}",
    "Hi A! Hi B? Hi C.",
  ],
  [
    "set scoping, unpacking, block set",
    "{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}|" +
    "{% set a, b = [1, 2] %}{{ a }}{{ b }}|{% set blk %}in{{ 1 }}{% endset %}{{ blk }}",
    "1|12|in1",
  ],
  [
    "tojson",
    `{{ {'a': 1, 'b': [true, none, 'q"']} | tojson }}|{{ ['é', 1.5, 2] | tojson }}|` +
    "{{ {'a': []} | tojson(indent=2) }}",
    '{"a": 1, "b": [true, null, "q\\""]}|["é", 1.5, 2]|{\n  "a": []\n}',
  ],
  [
    "printing undefined, none, lists, booleans, floats",
    "{{ nope }}|{{ nope.attr }}|{{ nope['k'] }}|{{ none }}|{{ [1, 'a'] }}|{{ true }}|{{ 3.0 }}|" +
    "{{ 10 / 4 }}",
    "||||1a|True|3.0|2.5",
  ],
  [
    "whitespace control, trim_blocks, lstrip_blocks",
    "  {%- if true %}\n    A\n  {%- endif %}\n  {% if true %}\n  B\n  {% endif %}\n" +
    "C {# comment #}\nD {{- ' E ' -}} F\n{% if true %}  G{% endif %}\n",
    "    A  B\nC D E F\n  G",
  ],
  [
    "filter blocks, str.format, int dict keys, range, for-if, continue",
    "{% filter upper %}ab{{ 'c' }}{% endfilter %}|{{ '{}-{}'.format(1, 'x') }}|" +
    "{% set d = {0: 'z', 512: 'y'} %}{{ d[512] }}{% for k, v in d | dictsort %}{{ k + 1 }}{{ v }}" +
    "{% endfor %}|{{ 512 in d }}|{% for i in range(3) %}{{ i }}{% endfor %}|" +
    "{% for x in [1,2,3,4] if x is even %}{{ x }}{{ loop.index }}{% endfor %}|" +
    "{% for i in [1,2,3] %}{% if i == 2 %}{% continue %}{% endif %}{{ i }}{% endfor %}",
    "ABC|1-x|y1z513y|True|012|2142|13",
  ],
];

for (const [name, source, want] of UNITS) {
  Deno.test(`chat template expression: ${name}`, () => {
    assert.equal(r(source), want);
  });
}

Deno.test("chat template: globals and options", () => {
  const t = new ChatTemplate(
    "{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ messages | length }}|{{ who }}",
    { bosToken: "<s>", eosToken: "</s>" },
  );
  assert.equal(t.render(user, { extra: { who: "me" } }), "<s>|</s>||1|me");
  assert.equal(t.render([], { addGenerationPrompt: true }), "<s>|</s>|True|0|");
  assert.equal(
    new ChatTemplate("{{ cfg.a[1] }}{{ cfg.b.c }}").render([], {
      extra: { cfg: { a: [1, 2], b: { c: "x" } } },
    }),
    "2x",
  );
});

Deno.test("chat template: strftime_now formats the render's time", () => {
  const t = new ChatTemplate(
    "{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%B %d, %Y %H:%M') }}",
  );
  assert.equal(
    t.render([], { now: new Date(2024, 6, 26, 9, 5) }),
    "26 Jul 2024|July 26, 2024 09:05",
  );
});

function assertTemplateError(
  fn: () => unknown,
  line: number,
  column: number,
  reason: RegExp,
): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof TemplateError, String(e));
    assert.ok(e instanceof GraftError);
    assert.equal(`${e.line}:${e.column}`, `${line}:${column}`, e.message);
    assert.match(e.reason, reason);
    assert.ok(e.message.startsWith(`${line}:${column}: `));
    return true;
  });
}

Deno.test("chat template errors: parse errors name line:col", () => {
  assertTemplateError(() => new ChatTemplate("ab\n{{ x + }}"), 2, 8, /expected an expression/);
  assertTemplateError(() => new ChatTemplate("{% if x %}yes"), 1, 14, /end of template.*'endif'/);
  assertTemplateError(
    () => new ChatTemplate("{% frobnicate %}"),
    1,
    4,
    /unknown statement 'frobnicate'/,
  );
  assertTemplateError(() => new ChatTemplate("{{ 'a\\q' }}"), 1, 6, /unknown escape/);
  assertTemplateError(() => new ChatTemplate("x\n  {{ a ? b }}"), 2, 8, /unexpected character: \?/);
  assertTemplateError(() => new ChatTemplate("{# never closed"), 1, 1, /missing end of comment/);
  assertTemplateError(
    () => new ChatTemplate("{% for x in y %}{% endif %}"),
    1,
    20,
    /unexpected 'endif'/,
  );
});

Deno.test("chat template errors: raise_exception and runtime errors name line:col", () => {
  const t = new ChatTemplate(
    "{% for m in messages %}\n{% if m.role == 'user' %}\n  {{ raise_exception('users are not allowed') }}\n" +
      "{% endif %}{% endfor %}",
  );
  assertTemplateError(() => t.render(user), 3, 6, /^users are not allowed$/);
  assertTemplateError(() => r("{{ [1] - 2 }}"), 1, 8, /cannot apply '-'/);
  assertTemplateError(() => r("{{ 'a' | nosuchfilter }}"), 1, 8, /unknown filter 'nosuchfilter'/);
  assertTemplateError(() => r("{{ 1 is nosuchtest }}"), 1, 6, /unknown test 'nosuchtest'/);
  assertTemplateError(() => r("{{ nope() }}"), 1, 4, /'nope' is not callable/);
  assertTemplateError(
    () => r("{% set n = 1 %}{% set n.a = 2 %}"),
    1,
    24,
    /cannot set attribute 'a' on int/,
  );
});
