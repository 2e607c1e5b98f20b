#!/usr/bin/env bash
# Installs the benchmark peers that come from Debian: OpenBLAS (libopenblas0).
set -euo pipefail
if [ ! -e /usr/lib/x86_64-linux-gnu/libopenblas.so.0 ]; then
  echo "bench: installing libopenblas0 (Debian)" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libopenblas0 >&2
fi
