#!/usr/bin/env bash
# Builds bench/peers/ggml_gemv.c against the pinned llama.cpp/ggml of tools/llama_build.sh (which it
# runs first: seconds once built) into that build dir, then runs it with this script's arguments:
#   bench/peers/ggml_gemv.sh --type q4_0 --k 4096 --m 4096 --n 1 --threads 2 --seconds 2 [--repack]
# One result line on stdout; progress on stderr.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="$("$here/../../tools/llama_build.sh" | tail -n 1)"
src="$(dirname "$build")/src"
bin="$build/bin"
exe="$bin/ggml_gemv"
# Recompile when the C file or ggml's libs are newer than the binary.
if [ ! -x "$exe" ] || [ "$here/ggml_gemv.c" -nt "$exe" ] || [ "$bin/libggml-cpu.so" -nt "$exe" ]; then
  gcc -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -o "$exe.part" "$here/ggml_gemv.c" \
    -I"$src/ggml/include" -L"$bin" -lggml -lggml-cpu -lggml-base -lm -Wl,-rpath,"$bin"
  mv "$exe.part" "$exe"
fi
exec "$exe" "$@"
