#!/usr/bin/env bash
# Greedy-generation fixtures from the pinned llama.cpp build (tools/llama_build.sh) for
# SmolLM2-135M-Instruct Q4_1: compiles tools/llama_greedy.c against that build's libllama, runs it
# on a list of prompts (64 tokens each, --ignore-eos semantics), cross-checks every prompt against
# the real llama-completion CLI (generated text and --verbose-prompt prompt ids must match, and the
# one-token-at-a-time ids against `llama-completion -b 1 -ub 1`), and writes
# tests/fixtures/llm/smollm2_greedy.json. Fails on any mismatch.
#
# Both run with flash attention off (-fa off; see FLASH_ATTN below) and weight repacking off
# (the CLI's --no-repack, the harness's default): on an AMX CPU, llama.cpp's default puts the Q4_1 weights in ggml's AMX buffer type,
# and the VM this was recorded on faults on AMX's ldtilecfg (SIGSEGV/SIGILL in
# ggml_backend_amx_mul_mat). Repacking has no Q4_1 layout, so without AMX the weights take the
# same plain CPU buffers either way.
# Usage: tools/llm_fixtures.sh [MODEL [NAME]]   (default: scripts/model_fetch.sh's cached SmolLM2,
# written as smollm2_greedy; tools/llm_requant_fixtures.sh passes its requantized file and a name)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
model="${1:-$("$here/scripts/model_fetch.sh")}"
name="${2:-smollm2_greedy}"
# GRAFT_LLAMA_SIMD=avx2 records from the AVX2 build (tools/llama_build.sh) into
# NAME_avx2.json: the AVX2 kernels' llama.cpp (its f16 sums and exp run on 8 lanes, not
# 16, so its logits differ from the AVX-512 build's in the last bits, then more).
suffix=""
if [ "${GRAFT_LLAMA_SIMD:-}" = avx2 ]; then suffix="_avx2"; fi
# GRAFT_LLAMA_REPACK=1 records llama.cpp's default weight repacking instead of --no-repack, into
# NAME_repack[_avx2].json: the q4_0 and q4_K matrices whose ne[1] is a multiple of 8 go to ggml's
# CPU_REPACK buffer type (8 rows interleaved, other kernels and summation orders), which is what
# llama.cpp does by default on x86 CPUs with AVX2 and without AMX. The harness gets the list of
# those tensors (--repack REGEX, from Graft's `gguf info --json`) so that it never touches AMX. The
# CLI cross-check then runs llama-completion without --no-repack, which is the same placement
# only in a build without AMX: the AVX2 build. The AVX-512 build (-march=native on an AMX Xeon)
# would put them in AMX buffers, which fault on this VM, so its repack fixture has the harness
# alone (the cross-check of the harness itself stands on the other fixtures).
repack=""
if [ "${GRAFT_LLAMA_REPACK:-}" = 1 ]; then
  suffix="_repack$suffix"
  repack="$("$here/scripts/deno" run --allow-read --allow-ffi --allow-env "$here/tools/gguf.ts" \
    info "$model" --json | python3 -c '
import json, re, sys
tensors = json.load(sys.stdin)["tensors"]
embd = [t for t in tensors if t["name"] == "token_embd.weight" and t["type"] in ("q4_0", "q4_K")]
if embd and not any(t["name"] == "output.weight" for t in tensors):
    # llama.cpp then loads token_embd twice (get_rows in a plain buffer, the tied output
    # repacked) under one name, which one name pattern cannot tell apart.
    sys.exit("graft: llm_fixtures: a q4_0/q4_K tied token_embd is not supported with GRAFT_LLAMA_REPACK")
names = [t["name"] for t in tensors
         if t["type"] in ("q4_0", "q4_K") and len(t["dims"]) == 2 and t["dims"][1] % 8 == 0
         and t["name"] != "token_embd.weight"]
if not names:
    sys.exit("graft: llm_fixtures: no q4_0/q4_K matrix to repack in this model")
print("^(" + "|".join(re.escape(n) for n in names) + ")$")
')"
fi
out="$here/tests/fixtures/llm/$name$suffix.json"
build="$(GRAFT_LLAMA_TARGETS="${GRAFT_LLAMA_TARGETS:-llama-completion llama-tokenize}" \
  "$here/tools/llama_build.sh" | tail -n 1)"
src="$(dirname "$build")/src"
bin="$build/bin"
exe="$bin/llama_greedy"
[ -f "$model" ] || { echo "graft: no model at $model" >&2; exit 1; }
if [ ! -x "$exe" ] || [ "$here/tools/llama_greedy.c" -nt "$exe" ] || [ "$bin/libllama.so" -nt "$exe" ]; then
  gcc -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -o "$exe.part" "$here/tools/llama_greedy.c" \
    -I"$src/include" -I"$src/ggml/include" -L"$bin" -lllama -lggml -lggml-base -lm -Wl,-rpath,"$bin" >&2
  mv "$exe.part" "$exe"
fi
mkdir -p "$(dirname "$out")"

HARNESS="$exe" CLI="$bin/llama-completion" MODEL="$model" OUT="$out" REPACK="$repack" \
  SIMD="${GRAFT_LLAMA_SIMD:-avx512}" nice python3 - <<'PY'
import hashlib, json, os, re, subprocess, sys, tempfile

N_GEN = 64
THREADS = 2
# Flash attention off: Graft's attention is llama.cpp's non-flash path (K·Q, softmax with the
# mask, V·p); llama.cpp's CPU flash kernel accumulates V in f16 below 64 query rows and in f32
# from 64 on, which moves logits by up to about 0.3 on this model (the default, auto, turns it
# on). bench:llm runs llama-bench with -fa 0 for the same reason.
FLASH_ATTN = "off"
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

def chat(turns, system=SYSTEM):
    s = f"<|im_start|>system\n{system}<|im_end|>\n"
    for role, text in turns:
        s += f"<|im_start|>{role}\n{text}<|im_end|>\n"
    return s + "<|im_start|>assistant\n"

LONG_PROSE = (
    "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg "
    "combined movable metal type, oil-based ink and a wooden screw press into a system that could "
    "produce books far faster than scribes copying by hand. Before his workshop in Mainz began "
    "operating, most books in Europe were rare and expensive objects owned by monasteries, "
    "universities and wealthy families. Within fifty years, printing shops had spread to more than "
    "two hundred cities, and millions of volumes were in circulation. Scholars could compare "
    "identical copies of a text, merchants could distribute price lists, and reformers could spread "
    "pamphlets across borders in a matter of weeks. Historians still debate how much of the "
    "scientific revolution depended on"
)
LONG_USER = (
    "I am planning a week-long trip to Japan in the spring with my two children, who are eight and "
    "eleven years old. We will arrive in Tokyo on a Monday morning and leave from Osaka the "
    "following Sunday evening. My kids love trains, animals, and trying new food, but they get "
    "tired if we walk too much in one day. I would like to see a few temples and gardens, and my "
    "partner wants to visit at least one museum. We have a moderate budget and would prefer to "
    "stay in one or two hotels rather than moving every night. Could you suggest a simple "
    "day-by-day plan, including how we should travel between the cities?"
)

PROMPTS = [
    ("plain_short", "The capital of France is"),
    ("plain_long", LONG_PROSE),
    ("code", "def fibonacci(n):\n"),
    ("chat_default_system", chat([("user", "What is the capital of France?")])),
    ("chat_system_two_turns", chat([
        ("user", "What is the largest planet in the solar system?"),
        ("assistant", "Jupiter is the largest planet in the solar system."),
        ("user", "How many moons does it have?"),
    ], system="You are a concise assistant. Answer in one or two sentences.")),
    ("chat_long", chat([("user", LONG_USER)])),
]

harness, cli, model, out, repack = (os.environ[k] for k in ("HARNESS", "CLI", "MODEL", "OUT", "REPACK"))
# The CLI's placement equals the harness's --repack only where CPU_REPACK is the only extra
# buffer type (see GRAFT_LLAMA_REPACK above).
cli_check = not repack or os.environ["SIMD"] == "avx2"

def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()

def fail(msg):
    print(f"graft: llm_fixtures: MISMATCH: {msg}", file=sys.stderr)
    sys.exit(1)

def run_harness(text):
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        f.write(text.encode("utf-8"))
        path = f.name
    try:
        res = subprocess.run([harness, "-m", model, "-f", path, "-n", str(N_GEN), "-t", str(THREADS),
                              "-fa", FLASH_ATTN, *(["--repack", repack] if repack else [])],
                             capture_output=True, check=True)
    finally:
        os.unlink(path)
    return json.loads(res.stdout)

CLI_FLAGS = ["-no-cnv", "--temp", "0", "-n", str(N_GEN), "-t", str(THREADS), "--ignore-eos", "-fa", FLASH_ATTN,
             "-s", "1", "--verbose-prompt", "--no-display-prompt", *([] if repack else ["--no-repack"])]

def run_cli(text, extra=()):
    args = [cli, "-m", model, *CLI_FLAGS, *extra, "-p", text]
    res = subprocess.run(args, capture_output=True)
    if res.returncode != 0:
        sys.stderr.write(res.stderr.decode(errors="replace")[-4000:])
        fail(f"llama-completion exited with {res.returncode}")
    err = res.stderr.decode("utf-8", errors="replace")
    m = re.search(r"number of tokens in prompt = (\d+)\n", err)
    if not m:
        fail("no --verbose-prompt token list in llama-completion's log")
    n = int(m.group(1))
    ids = [int(x) for x in re.findall(r"(?m)^\S+ I +(\d+) -> '", err[m.end():])[:n]]
    if len(ids) != n:
        fail(f"parsed {len(ids)} of {n} verbose-prompt ids")
    return ids, res.stdout

def utf8_or_none(b):
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return None

def trim_run(r):
    return {"ids": r["ids"], "raw_argmax": r["raw_argmax"], "eos_step": r["eos_step"],
            "margins": r["margins"], "raw_margins": r["raw_margins"], "top": r["top"]}

cases, batch_cases, params = [], [], None
for name, text in PROMPTS:
    h = run_harness(text)
    p = {k: h[k] for k in ("n_ctx", "n_batch", "n_ubatch", "flash_attn", "type_k", "type_v",
                           "use_extra_bufts", "repack", "threads", "n_vocab", "eog", "system_info")}
    if params is None:
        params = p
    elif p != params:
        fail(f"{name}: harness params changed: {p} vs {params}")
    runs = h["runs"]
    last, allr, single = runs["last"], runs["all"], runs["single"]
    text_bytes = bytes.fromhex(last["text_hex"])

    # Cross-check 1: llama-completion's prompt ids and generated text.
    if cli_check:
        cli_ids, cli_out = run_cli(text)
        if cli_ids != h["prompt_ids"]:
            fail(f"{name}: prompt ids: llama-completion {cli_ids} vs harness {h['prompt_ids']}")
        if cli_out != text_bytes + b"\n\n":
            fail(f"{name}: text: llama-completion {cli_out!r} vs harness {text_bytes!r} + 2 newlines")
    # Cross-check 2: the one-token-at-a-time run against llama-completion -b 1 -ub 1. Only for
    # prompts without EOG ids: llama-completion stops ("[end of text]") whenever a decoded batch
    # ends in an EOG id, and with -b 1 a prompt's own <|im_end|> is such a batch.
    cli_b1 = cli_check and not any(t in params["eog"] for t in h["prompt_ids"])
    single_bytes = bytes.fromhex(single["text_hex"])
    if cli_b1:
        cli_ids1, cli_out1 = run_cli(text, ("-b", "1", "-ub", "1"))
    if cli_b1 and (cli_ids1 != h["prompt_ids"] or cli_out1 != single_bytes + b"\n\n"):
        fail(f"{name}: -b 1 -ub 1: llama-completion {cli_ids1} {cli_out1!r} vs harness {single_bytes!r} + 2 newlines")

    def first_diff(a, b):
        return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)

    cases.append({
        "name": name,
        "text": text,
        "prompt_ids": h["prompt_ids"],
        **trim_run(last),
        # llama-completion's stdout for the ids (null if 64 tokens end inside a UTF-8 sequence).
        "generated_text": utf8_or_none(text_bytes),
        "prompt_top": allr["prompt_top"],
        "all_logits_run": {
            "ids_equal": allr["ids"] == last["ids"],
            "first_diff_step": first_diff(allr["ids"], last["ids"]),
            "max_abs_logit_diff": max(allr["max_abs_diff_vs_last"]),
        },
    })
    batch_cases.append({
        "name": name,
        "prompt_ids": h["prompt_ids"],
        "n_batch": 1,
        **(trim_run(single) if name == "plain_short" else
           {"ids": single["ids"], "eos_step": single["eos_step"], "margins": single["margins"]}),
        "cli_checked": cli_b1,
        "ids_equal_to_batched": single["ids"] == last["ids"],
        "first_diff_step": first_diff(single["ids"], last["ids"]),
        "max_abs_logit_diff_vs_batched": max(single["max_abs_diff_vs_last"]),
    })
    m32 = min(last["margins"][:32])
    print(f"graft: {name}: {len(h['prompt_ids'])} prompt ids, eos_step {last['eos_step']}, "
          f"min margin (32 steps) {m32:.4g}, all-logits ids equal {allr['ids'] == last['ids']} "
          f"(max |dlogit| {max(allr['max_abs_diff_vs_last']):.3g}), one-at-a-time ids equal "
          f"{single['ids'] == last['ids']} (max |dlogit| {max(single['max_abs_diff_vs_last']):.3g}); " +
          ("no llama-completion check (see GRAFT_LLAMA_REPACK)" if not cli_check else
           f"llama-completion agrees{'' if cli_b1 else ' (batched only: EOG in prompt)'}"),
          file=sys.stderr)

doc = {
    "source": {
        "llama_cpp": "llama.cpp vendored in llama-cpp-python 0.3.36 (PyPI sdist sha256 "
                     "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e), commit 0c1e5709",
        "harness": "tools/llama_greedy.c via tools/llm_fixtures.sh",
        "model": os.path.basename(model),
        "model_sha256": sha256(model),
        "params": {
            "n_ctx": params["n_ctx"],
            "n_batch": params["n_batch"],
            "n_ubatch": params["n_ubatch"],
            "flash_attn": FLASH_ATTN + " (resolved: " + params["flash_attn"] + ")",
            "type_k": params["type_k"],
            "type_v": params["type_v"],
            "threads": params["threads"],
            "use_extra_bufts": params["use_extra_bufts"],
            "repack": params["repack"],
        },
        "eog_ids": params["eog"],
        "n_vocab": params["n_vocab"],
        "system_info": params["system_info"].strip(),
        "cli_cross_check": ("llama-completion -m MODEL " + " ".join(CLI_FLAGS) + " -p TEXT "
                            "(and with -b 1 -ub 1 for batch_cases): equal prompt ids and text")
                           if cli_check else
                           "none: this build's llama-completion puts the repacked weights in AMX "
                           "buffers (faults on the recording VM); the harness placed them in "
                           "CPU_REPACK by name (params.repack)",
    },
    "semantics": {
        "ids": "greedy with --ignore-eos: EOG ids masked, then argmax (lowest id on exact ties); "
               "prompt decoded in one batch with logits at the last position only, as "
               "llama-completion does; then one token per decode",
        "top": "per generated step, the 8 highest raw logits (EOG not masked) as [id, logit]",
        "margins": "per step, chosen logit minus the best other non-EOG logit",
        "generated_text": "llama-completion's printed text for ids (pieces, special tokens not "
                          "rendered); null if it ends inside a UTF-8 sequence",
        "raw_margins": "per step, raw top-1 minus top-2 logit (EOG included)",
        "raw_argmax": "per step, the unmasked argmax (an EOG id where the model would stop)",
        "eos_step": "first step whose raw argmax is an EOG id, or -1",
        "prompt_top": "prompt position -> top 8 [id, logit], from a decode of the whole prompt "
                      "in one batch with logits requested at every position",
        "all_logits_run": "that all-positions decode's own greedy run compared with ids",
        "batch_cases": "the prompt decoded one token per llama_decode (-b 1 -ub 1), then greedy; "
                       "cli_checked: compared with llama-completion -b 1 -ub 1 (not possible when "
                       "the prompt holds an EOG id: the CLI stops after any batch ending in one)",
    },
    "cases": cases,
    "batch_cases": batch_cases,
}
with open(out, "w", encoding="utf-8") as f:
    json.dump(doc, f, ensure_ascii=False, indent=1)
    f.write("\n")
print(f"graft: wrote {len(cases)} cases to {out}", file=sys.stderr)
PY
# The repository's formatter owns JSON layout: format so a rerun reproduces the committed file.
"$here/scripts/deno" fmt --quiet "$out"
