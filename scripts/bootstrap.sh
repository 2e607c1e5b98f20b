#!/usr/bin/env bash
# Puts the pinned Deno and Zig on PATH, installing them into .tools/ (git-ignored) when the
# right versions are not already there. Sourced by scripts/deno and scripts/zig.
set -euo pipefail
GRAFT_DENO_VERSION=2.9.6
GRAFT_ZIG_VERSION=0.15.2
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="$root/.tools"

deno_bin="$tools/deno/node_modules/deno/deno"
if [ ! -x "$deno_bin" ] || ! "$deno_bin" --version 2>/dev/null | grep -q "deno $GRAFT_DENO_VERSION "; then
  echo "graft: installing deno $GRAFT_DENO_VERSION into .tools/deno (npm)" >&2
  mkdir -p "$tools/deno"
  npm install --prefix "$tools/deno" --no-save --no-audit --no-fund --loglevel=error \
    "deno@$GRAFT_DENO_VERSION" >&2
  if [ ! -x "$deno_bin" ]; then
    # Some npm versions skip install scripts; the binary comes from the platform package.
    cp "$tools/deno/node_modules/@deno/linux-x64-glibc/deno" "$deno_bin"
  fi
fi

zig_bin="$tools/zig/ziglang/zig"
if [ ! -x "$zig_bin" ] || [ "$("$zig_bin" version 2>/dev/null)" != "$GRAFT_ZIG_VERSION" ]; then
  echo "graft: installing zig $GRAFT_ZIG_VERSION into .tools/zig (pip)" >&2
  rm -rf "$tools/zig"
  python3 -m pip install --quiet --disable-pip-version-check --target "$tools/zig" \
    "ziglang==$GRAFT_ZIG_VERSION" >&2
fi

export PATH="$(dirname "$deno_bin"):$(dirname "$zig_bin"):$PATH"
