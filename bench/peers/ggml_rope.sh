#!/usr/bin/env bash
# Builds bench/peers/ggml_rope.c against the pinned llama.cpp/ggml (bench/peers/ggml_peer.sh) and
# compares Graft's CPU rope with ggml's on 48 cases (both modes, 4 head shapes, 3 bases, 2
# scales): bench/peers/ggml_rope.sh. Prints the bitwise-equal share and the largest differences.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exe="$("$here/ggml_peer.sh" ggml_rope)"
"$here/../../scripts/zig" build
exec "$here/../../scripts/deno" run --allow-ffi --allow-env --allow-read --allow-write --allow-run \
  "$here/ggml_rope_compare.ts" "$exe"
