#!/usr/bin/env bash
# Tokenizer fixtures from the pinned llama.cpp build (tools/llama_build.sh): runs llama-tokenize
# (--ids, with and without special-token parsing) on SmolLM2-135M-Instruct for a list of varied
# strings and writes tests/fixtures/tokenizer/smollm2.json. Builds the llama-tokenize target if
# the cached build lacks it. Model: $GRAFT_CACHE (else ~/.cache/graft)/models/SmolLM2-135M-Instruct.Q4_1.gguf.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cache="${GRAFT_CACHE:-$HOME/.cache/graft}"
model="${1:-$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
out="$here/tests/fixtures/tokenizer/smollm2.json"
build="$("$here/tools/llama_build.sh" | tail -n 1)"
if [ ! -x "$build/bin/llama-tokenize" ]; then
  nice ninja -C "$build" llama-tokenize >&2
fi
[ -f "$model" ] || { echo "graft: no model at $model" >&2; exit 1; }

TOKENIZE="$build/bin/llama-tokenize" MODEL="$model" OUT="$out" python3 - <<'PY'
import json, os, subprocess, tempfile

strings = [
    "Hello world",
    "Hello, world! How are you?",
    "",
    " ",
    "a",
    "The quick brown fox jumps over the lazy dog.",
    "12345",
    "3.14",
    "1,000,000 and 42 and 0.5%",
    "I'm sure you're right, they've said we'll go; it's John's and I'd",
    "DON'T SHOUT, I'LL LEAVE",
    "   leading spaces",
    "trailing spaces   ",
    "multiple    spaces   inside",
    "line one\nline two\n\nline four\n",
    "\n\n\n",
    "tab\tseparated\tvalues",
    "\t\tdouble tab",
    "carriage\r\nreturn",
    "def add(a, b):\n    return a + b\n",
    "for (int i = 0; i < n; ++i) { x[i] *= 2; }",
    "const f = (x) => x ** 2; // comment",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}",
    "https://example.com/path?q=1&r=two#frag",
    "emoji: 😀🎉👍🏽 done",
    "👨‍👩‍👧‍👦",
    "你好，世界！",
    "日本語のテキストです。",
    "한국어 텍스트",
    "café naïve résumé façade Ångström",
    "Привет, мир!",
    "مرحبا بالعالم",
    "Ελληνικά γράμματα",
    "math: ∑ x² ≤ ∞ → ∀ε>0",
    "non\u00a0breaking\u3000space",
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>text after",
    "text<|im_end|>more",
    "!!!??? ... --- ___",
    "a\u0301 combining accent",
    "$100 & €50 = ¥?",
    "\ufeffbyte-order mark, then ſ and İ",
]

tok = os.environ["TOKENIZE"]
model = os.environ["MODEL"]

def run(text, parse_special):
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        f.write(text.encode("utf-8"))
        path = f.name
    try:
        args = [tok, "-m", model, "-f", path, "--no-escape", "--ids", "--log-disable"]
        if not parse_special:
            args.append("--no-parse-special")
        res = subprocess.run(args, capture_output=True, check=True)
        line = res.stdout.decode().strip().splitlines()[-1]
        return json.loads(line)
    finally:
        os.unlink(path)

cases = []
for s in strings:
    cases.append({"text": s, "parseSpecial": False, "ids": run(s, False)})
    cases.append({"text": s, "parseSpecial": True, "ids": run(s, True)})

doc = {
    "source": "llama.cpp 0.3.36 (llama-cpp-python sdist, commit 0c1e5709) llama-tokenize --ids",
    "model": os.path.basename(model),
    "addSpecial": True,
    "cases": cases,
}
with open(os.environ["OUT"], "w", encoding="utf-8") as f:
    json.dump(doc, f, ensure_ascii=False, indent=1)
    f.write("\n")
print(f"graft: wrote {len(cases)} cases to {os.environ['OUT']}")
PY
# The repository's formatter owns JSON layout: format so a rerun reproduces the committed file.
"$here/scripts/deno" fmt --quiet "$out"
