#!/usr/bin/env bash
# Runs a command with OpenBLAS on its best kernels for this CPU. Debian's OpenBLAS does not know
# every AVX-512 CPU (Zen 4/5 get its slower Haswell kernels), so where the CPU has AVX-512 it is
# told SkylakeX; elsewhere that choice dies with SIGILL, so OpenBLAS picks from CPUID itself.
# An OPENBLAS_CORETYPE already set is kept. Usage: scripts/openblas_env.sh CMD [ARGS...]
set -euo pipefail
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
  export OPENBLAS_CORETYPE=SkylakeX
fi
exec "$@"
