#!/usr/bin/env bash
# Builds and runs the GEMM benchmark (bench/gemm_bench.zig) against the working tree's kernel.
# Usage: bench/gemm_bench.sh [CPU] [-- bench args]   CPU: native (default), x86_64_v3, x86_64_v4
# Bench args: --quick (shorter timing), --no-blas (skip OpenBLAS; install it with
# `apt-get install -y libopenblas0` to compare).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cpu="native"
if [[ $# -gt 0 && "$1" != "--" && "$1" != --* ]]; then cpu="$1"; shift; fi
if [[ $# -gt 0 && "$1" == "--" ]]; then shift; fi
zig="${ZIG:-$root/.tools/zig/ziglang/zig}"
command -v "$zig" >/dev/null 2>&1 || zig="zig"
# The kernel imports ../node.zig, so the bench is built in a copy of zig/ with itself at its root.
out="$root/bench/out/gemm"
rm -rf "$out/src"
mkdir -p "$out/src"
cp -r "$root/zig/." "$out/src/"
cp "$root/bench/gemm_bench.zig" "$out/src/gemm_bench.zig"
"$zig" build-exe "$out/src/gemm_bench.zig" -O ReleaseFast -mcpu "$cpu" -lc \
    -femit-bin="$out/gemm_bench" --cache-dir "$root/.zig-cache"
# OpenBLAS on its best kernels for this CPU (SkylakeX's only where the CPU has AVX-512).
exec "$root/scripts/openblas_env.sh" "$out/gemm_bench" "$@"
