#!/usr/bin/env bash
# Greedy-generation fixtures from the pinned llama.cpp build for SmolLM2-135M-Instruct requantized
# to Q4_K_M (q4_K and q6_K ffn_down, q5_0 and q8_0 where a row of 576 takes no k-quant): the
# k-quant counterpart of tools/llm_fixtures.sh, written to
# tests/fixtures/llm/smollm2_q4_K_M_greedy[_avx2].json.
#
# The model is Graft's own `deno task gguf quantize Q4_1 OUT --type q4_K_M` of the cached Q4_1
# file (scripts/model_fetch.sh): tests/llm_kquant_test.ts makes the same file again in seconds
# instead of caching a second 105 MB download. This script first checks that llama.cpp's
# `llama-quantize --allow-requantize ... Q4_K_M` writes the very same bytes (Graft's quantizer
# against ggml's), then records llama.cpp's greedy runs of that file with tools/llm_fixtures.sh
# (same prompts, flash attention and repacking off). The fixture's model_sha256 is the file's.
# GRAFT_LLAMA_SIMD=avx2 records from the AVX2 build, as tools/llm_fixtures.sh.
# Usage: tools/llm_kquant_fixtures.sh
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
q4_1="$("$here/scripts/model_fetch.sh")"
build="$(GRAFT_LLAMA_TARGETS="llama-quantize llama-completion llama-tokenize" \
  "$here/tools/llama_build.sh" | tail -n 1)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
model="$work/SmolLM2-135M-Instruct.Q4_K_M-from-Q4_1.gguf"

"$here/scripts/deno" run --allow-read --allow-write --allow-ffi --allow-env "$here/tools/gguf.ts" \
  quantize "$q4_1" "$model" --type q4_K_M >&2
LD_LIBRARY_PATH="$build/bin" "$build/bin/llama-quantize" --allow-requantize "$q4_1" \
  "$work/llama.gguf" Q4_K_M 2 >/dev/null 2>&1
graft_sha="$(sha256sum "$model" | cut -d' ' -f1)"
llama_sha="$(sha256sum "$work/llama.gguf" | cut -d' ' -f1)"
if [ "$graft_sha" != "$llama_sha" ]; then
  echo "graft: llm_kquant_fixtures: MISMATCH: Graft's Q4_K_M file has sha256 $graft_sha," \
    "llama-quantize's $llama_sha" >&2
  exit 1
fi
echo "graft: Graft's and llama-quantize's Q4_K_M files are identical (sha256 $graft_sha)" >&2
"$here/tools/llm_fixtures.sh" "$model" smollm2_q4_K_M_greedy
