#!/usr/bin/env bash
# Compiles one C harness of bench/peers/ against the pinned llama.cpp/ggml of tools/llama_build.sh
# (which it runs first: seconds once built), into that build's bin/, and prints the binary's path.
# Recompiles when the C file or ggml's libs are newer than the binary.
# Usage: bench/peers/ggml_peer.sh NAME   (builds bench/peers/NAME.c into <build>/bin/NAME)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
name="$1"
build="$("$here/../../tools/llama_build.sh" | tail -n 1)"
src="$(dirname "$build")/src"
bin="$build/bin"
exe="$bin/$name"
if [ ! -x "$exe" ] || [ "$here/$name.c" -nt "$exe" ] || [ "$bin/libggml-cpu.so" -nt "$exe" ]; then
  gcc -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -o "$exe.part" "$here/$name.c" \
    -I"$src/ggml/include" -L"$bin" -lggml -lggml-cpu -lggml-base -lm -Wl,-rpath,"$bin" >&2
  mv "$exe.part" "$exe"
fi
echo "$exe"
