#!/usr/bin/env bash
# Builds bench/peers/ggml_exact_dots.c against the pinned llama.cpp/ggml (bench/peers/ggml_peer.sh)
# and writes ggml's mul_mat results on its seeded cases to tests/fixtures/ggml_exact_dots.json
# (or to the path given), the fixture tests/ggml_exact_dots_test.ts checks Graft against.
#   bench/peers/ggml_exact_dots.sh [out.json]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exe="$("$here/ggml_peer.sh" ggml_exact_dots)"
out="${1:-$here/../../tests/fixtures/ggml_exact_dots.json}"
"$exe" "$out"
echo "wrote $out" >&2
