#!/usr/bin/env bash
# Builds bench/peers/ggml_gemv.c against the pinned llama.cpp/ggml (bench/peers/ggml_peer.sh),
# then runs it with this script's arguments:
#   bench/peers/ggml_gemv.sh --type q4_0 --k 4096 --m 4096 --n 1 --threads 2 --seconds 2 [--repack]
# One result line on stdout; progress on stderr.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exe="$("$here/ggml_peer.sh" ggml_gemv)"
exec "$exe" "$@"
