#!/usr/bin/env bash
# Builds bench/peers/ggml_rope.c against the pinned llama.cpp/ggml of tools/llama_build.sh and
# compares Graft's CPU rope with ggml's on 48 cases (both modes, 4 head shapes, 3 bases, 2
# scales): bench/peers/ggml_rope.sh. Prints the bitwise-equal share and the largest differences.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="$("$here/../../tools/llama_build.sh" | tail -n 1)"
src="$(dirname "$build")/src"
bin="$build/bin"
exe="$bin/ggml_rope"
if [ ! -x "$exe" ] || [ "$here/ggml_rope.c" -nt "$exe" ] || [ "$bin/libggml-cpu.so" -nt "$exe" ]; then
  gcc -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -o "$exe.part" "$here/ggml_rope.c" \
    -I"$src/ggml/include" -L"$bin" -lggml -lggml-cpu -lggml-base -lm -Wl,-rpath,"$bin"
  mv "$exe.part" "$exe"
fi
"$here/../../scripts/zig" build
exec "$here/../../scripts/deno" run --allow-ffi --allow-env --allow-read --allow-write --allow-run \
  "$here/ggml_rope_compare.ts" "$exe"
