#!/usr/bin/env bash
# Installs the browser benchmark's peers (onnxruntime-web, TensorFlow.js wasm), pinned exactly in
# bench/web/package.json and its lock, into bench/web/node_modules, unless they are there.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../bench/web"
if [ ! -e node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "bench:web: installing the peers (npm ci in bench/web)" >&2
  npm ci --no-audit --no-fund --ignore-scripts >&2
fi
