#!/usr/bin/env bash
# Graft's CPU row-wise ops (rms_norm, rms_norm*weight, silu, swiglu, soft_max, rope) against ggml's,
# element by element, for both kernel builds: bench/peers/ggml_exact_ops.sh [--record].
# Builds bench/peers/ggml_exact_ops.c against the pinned llama.cpp/ggml (bench/peers/ggml_peer.sh,
# GGML_NATIVE: AVX-512 here) and against the AVX2 build of the same sources (GRAFT_LLAMA_SIMD=avx2
# tools/llama_build.sh: GGML_NATIVE=OFF, AVX2/FMA/F16C/BMI2; $cache/llama.cpp-0.3.36/build-avx2, a
# few minutes the first time): ggml_v_expf differs between the two, and Graft's AVX2 kernels match
# the second.
# Prints, per build and thread count, the cases whose outputs differ. --record also rewrites
# tests/fixtures/ggml_exact_ops.json (the SHA-256 of ggml's outputs, which the test checks in CI).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exe512="$("$here/ggml_peer.sh" ggml_exact_ops)"
# The AVX2 ggml (not native: what an AVX2-only CPU's build computes), from tools/llama_build.sh.
exe2="$(GRAFT_LLAMA_SIMD=avx2 GRAFT_LLAMA_TARGETS="ggml ggml-base ggml-cpu" \
  "$here/ggml_peer.sh" ggml_exact_ops)"
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
