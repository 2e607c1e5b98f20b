#!/usr/bin/env bash
# Builds bench/peers/ggml_exact_dots.c against the pinned llama.cpp/ggml and writes ggml's mul_mat
# results on its seeded cases, the fixtures tests/ggml_exact_dots_test.ts checks Graft against:
#   tests/fixtures/ggml_exact_dots.json       every case, the pinned build (bench/peers/ggml_peer.sh,
#                                             GGML_NATIVE: AVX-512 here)
#   tests/fixtures/ggml_exact_dots_avx2.json  the f16 cases, a ggml-only AVX2 build of the same
#                                             sources ($cache/llama.cpp-0.3.36/build-ggml-avx2, as
#                                             bench/peers/ggml_exact_ops.sh configures it; a few
#                                             minutes the first time): its vec_dot_f16 sums 8-lane
#                                             accumulators, as Graft's AVX2 build does
#   bench/peers/ggml_exact_dots.sh [outdir]   (default tests/fixtures)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/../../tests/fixtures}"
exe512="$("$here/ggml_peer.sh" ggml_exact_dots)"
root="$(dirname "$(dirname "$(dirname "$exe512")")")"
src="$root/src"
build2="$root/build-ggml-avx2"
if [ ! -f "$build2/build.ninja" ]; then
  CC=gcc CXX=g++ cmake -S "$src" -B "$build2" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
    -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF >&2
fi
nice -n 10 ninja -C "$build2" -j2 ggml ggml-base ggml-cpu >&2
bin2="$build2/bin"
exe2="$bin2/ggml_exact_dots"
if [ ! -x "$exe2" ] || [ "$here/ggml_exact_dots.c" -nt "$exe2" ] || [ "$bin2/libggml-cpu.so" -nt "$exe2" ]; then
  gcc -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -o "$exe2.part" "$here/ggml_exact_dots.c" \
    -I"$src/ggml/include" -L"$bin2" -lggml -lggml-cpu -lggml-base -lm -Wl,-rpath,"$bin2" >&2
  mv "$exe2.part" "$exe2"
fi
"$exe512" "$out/ggml_exact_dots.json"
"$exe2" "$out/ggml_exact_dots_avx2.json" f16
echo "wrote $out/ggml_exact_dots.json and $out/ggml_exact_dots_avx2.json" >&2
