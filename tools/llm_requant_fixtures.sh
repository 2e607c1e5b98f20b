#!/usr/bin/env bash
# Greedy-generation fixtures from the pinned llama.cpp build for SmolLM2-135M-Instruct requantized
# to another type mix, the counterpart of tools/llm_fixtures.sh for the Q4_1 file, written to
# tests/fixtures/llm/smollm2_TYPE_greedy[_repack][_avx2].json. SmolLM2's rows of 576 take no
# k-quant, so the k-quants are in ffn_down (rows of 1536):
#   q4_K_M: 16 q4_K and 14 q6_K ffn_down; q5_0 elsewhere, q8_0 for attn_v and the embeddings;
#   q5_K_M: 16 q5_K and 14 q6_K ffn_down; q5_1 elsewhere, q8_0 likewise;
#   q4_0:   q4_0 everywhere but the embeddings (q8_0).
#
# The model is Graft's own `deno task gguf quantize Q4_1 OUT --type TYPE` of the cached Q4_1
# file (scripts/model_fetch.sh): tests/llm_requant_test.ts makes the same file again in seconds
# instead of caching more downloads. This script first checks that llama.cpp's
# `llama-quantize --allow-requantize ... TYPE` writes the very same bytes (Graft's quantizer
# against ggml's), then records llama.cpp's greedy runs of that file with tools/llm_fixtures.sh
# (same prompts, flash attention off, weight repacking off unless GRAFT_LLAMA_REPACK=1, see
# there). The fixture's model_sha256 is the file's.
# GRAFT_LLAMA_SIMD=avx2 records from the AVX2 build, as tools/llm_fixtures.sh.
# Usage: tools/llm_requant_fixtures.sh [q4_K_M|q5_K_M|q4_0]   (default q4_K_M)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
type="${1:-q4_K_M}"
case "$type" in q4_K_M | q5_K_M | q4_0) ;; *) echo "graft: llm_requant_fixtures: TYPE is q4_K_M, q5_K_M or q4_0, not $type" >&2; exit 2 ;; esac
q4_1="$("$here/scripts/model_fetch.sh")"
build="$(GRAFT_LLAMA_TARGETS="llama-quantize llama-completion llama-tokenize" \
  "$here/tools/llama_build.sh" | tail -n 1)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
model="$work/SmolLM2-135M-Instruct.${type^^}-from-Q4_1.gguf"

"$here/scripts/deno" run --allow-read --allow-write --allow-ffi --allow-env "$here/tools/gguf.ts" \
  quantize "$q4_1" "$model" --type "$type" >&2
if ! LD_LIBRARY_PATH="$build/bin" "$build/bin/llama-quantize" --allow-requantize "$q4_1" \
  "$work/llama.gguf" "${type^^}" 2 >"$work/llama-quantize.log" 2>&1; then
  tail -n 20 "$work/llama-quantize.log" >&2
  echo "graft: llm_requant_fixtures: llama-quantize failed" >&2
  exit 1
fi
graft_sha="$(sha256sum "$model" | cut -d' ' -f1)"
llama_sha="$(sha256sum "$work/llama.gguf" | cut -d' ' -f1)"
if [ "$graft_sha" != "$llama_sha" ]; then
  echo "graft: llm_requant_fixtures: MISMATCH: Graft's $type file has sha256 $graft_sha," \
    "llama-quantize's $llama_sha" >&2
  exit 1
fi
echo "graft: Graft's and llama-quantize's $type files are identical (sha256 $graft_sha)" >&2
"$here/tools/llm_fixtures.sh" "$model" "smollm2_${type}_greedy"
