#!/usr/bin/env bash
# Builds and runs the quantized mat-vec benchmark (bench/gemv_bench.zig) against the working
# tree's kernels. Usage: bench/gemv_bench.sh [CPU] TYPE [ROTATION_MIB] [ROUNDS] [THREADS]
# CPU: avx512 (default: x86_64_v4 with VNNI, as build.zig's AVX-512 kernels) or avx2 (x86_64_v3).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cpu="x86_64_v4+avx512vnni"
if [[ "${1:-}" == "avx2" ]]; then cpu="x86_64_v3"; shift; fi
if [[ "${1:-}" == "avx512" ]]; then shift; fi
zig="${ZIG:-$root/.tools/zig/ziglang/zig}"
command -v "$zig" >/dev/null 2>&1 || zig="zig"
# The kernels import ../node.zig, so the bench is built in a copy of zig/ with itself at its root.
out="$root/bench/out/gemv/$cpu"
rm -rf "$out/src"
mkdir -p "$out/src"
cp -r "$root/zig/." "$out/src/"
cp "$root/bench/gemv_bench.zig" "$out/src/gemv_bench.zig"
"$zig" build-exe "$out/src/gemv_bench.zig" -O ReleaseFast -mcpu "$cpu" \
    -femit-bin="$out/gemv_bench" --cache-dir "$root/.zig-cache"
exec "$out/gemv_bench" "$@"
