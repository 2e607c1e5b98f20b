#!/usr/bin/env bash
# Graft's CPU row-wise ops (rms_norm, rms_norm*weight, silu, swiglu, soft_max, rope) against ggml's,
# element by element, for both kernel builds: bench/peers/ggml_exact_ops.sh [--record].
# Builds bench/peers/ggml_exact_ops.c against the pinned llama.cpp/ggml (bench/peers/ggml_peer.sh,
# GGML_NATIVE: AVX-512 here) and against a second, ggml-only build of the same sources for AVX2
# (GGML_NATIVE=OFF, AVX2/FMA/F16C/BMI2; $cache/llama.cpp-0.3.36/build-ggml-avx2, a few minutes
# the first time): ggml_v_expf differs between the two, and Graft's AVX2 kernels match the second.
# Prints, per build and thread count, the cases whose outputs differ. --record also rewrites
# tests/fixtures/ggml_exact_ops.json (the SHA-256 of ggml's outputs, which the test checks in CI).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exe512="$("$here/ggml_peer.sh" ggml_exact_ops)"
build512="$(dirname "$(dirname "$exe512")")"
root="$(dirname "$build512")"
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
exe2="$bin2/ggml_exact_ops"
if [ ! -x "$exe2" ] || [ "$here/ggml_exact_ops.c" -nt "$exe2" ] || [ "$bin2/libggml-cpu.so" -nt "$exe2" ]; then
  gcc -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -o "$exe2.part" "$here/ggml_exact_ops.c" \
    -I"$src/ggml/include" -L"$bin2" -lggml -lggml-cpu -lggml-base -lm -Wl,-rpath,"$bin2" >&2
  mv "$exe2.part" "$exe2"
fi
"$here/../../scripts/zig" build
deno="$here/../../scripts/deno"
if [ "${1:-}" = "--record" ]; then
  "$deno" run -A "$here/ggml_exact_ops_record.ts" "$exe512" "$exe2"
fi
for threads in 1 2; do
  if grep -qw avx512f /proc/cpuinfo; then
    "$deno" run -A "$here/ggml_exact_ops_compare.ts" "$exe512" avx512 "$threads"
  fi
  "$deno" run -A "$here/ggml_exact_ops_compare.ts" "$exe2" avx2 "$threads"
done
