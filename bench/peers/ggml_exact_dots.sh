#!/usr/bin/env bash
# Builds bench/peers/ggml_exact_dots.c against the pinned llama.cpp/ggml and writes ggml's mul_mat
# results on its seeded cases, the fixtures tests/ggml_exact_dots_test.ts checks Graft against:
#   tests/fixtures/ggml_exact_dots.json       every case, the pinned build (bench/peers/ggml_peer.sh,
#                                             GGML_NATIVE: AVX-512 here)
#   tests/fixtures/ggml_exact_dots_avx2.json  the f16 and k-quant cases, the AVX2 build of the
#                                             same sources (GRAFT_LLAMA_SIMD=avx2 tools/llama_build.sh,
#                                             build-avx2; a few minutes the first time): its
#                                             vec_dot_f16 sums 8-lane accumulators, as Graft's AVX2
#                                             build does; its k-quant dots are the AVX-512 build's
#                                             code (both compile the __AVX2__ branch); it also
#                                             holds the repacked q4_0 / q4_K cases (src0 in
#                                             CPU_REPACK), the same bits in both builds
#   bench/peers/ggml_exact_dots.sh [outdir]   (default tests/fixtures)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/../../tests/fixtures}"
exe512="$("$here/ggml_peer.sh" ggml_exact_dots)"
# The AVX2 ggml (not native: what an AVX2-only CPU's build computes), from tools/llama_build.sh.
exe2="$(GRAFT_LLAMA_SIMD=avx2 GRAFT_LLAMA_TARGETS="ggml ggml-base ggml-cpu" \
  "$here/ggml_peer.sh" ggml_exact_dots)"
"$exe512" "$out/ggml_exact_dots.json"
"$exe2" "$out/ggml_exact_dots_avx2.json" avx2
echo "wrote $out/ggml_exact_dots.json and $out/ggml_exact_dots_avx2.json" >&2
