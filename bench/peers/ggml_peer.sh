#!/usr/bin/env bash
# Compiles one C harness of bench/peers/ against the pinned llama.cpp/ggml of tools/llama_build.sh
# (which it runs first: seconds once built), into that build's bin/, and prints the binary's path.
# Recompiles when ggml's libs are newer than the binary (or the C file changed: a new name).
# Usage: bench/peers/ggml_peer.sh NAME   (builds bench/peers/NAME.c into <build>/bin/NAME-<hash>)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
name="$1"
build="$("$here/../../tools/llama_build.sh" | tail -n 1)"
src="$(dirname "$build")/src"
bin="$build/bin"
# The binary's name carries the source's hash: checkouts of other revisions share the build's
# bin/ (CI's clone and a working tree), and each must run its own harness, not the newest one.
hash="$(sha256sum "$here/$name.c" | cut -c1-12)"
exe="$bin/$name-$hash"
if [ ! -x "$exe" ] || [ "$bin/libggml-cpu.so" -nt "$exe" ]; then
  gcc -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -o "$exe.part" "$here/$name.c" \
    -I"$src/ggml/include" -L"$bin" -lggml -lggml-cpu -lggml-base -lm -Wl,-rpath,"$bin" >&2
  mv "$exe.part" "$exe"
fi
echo "$exe"
