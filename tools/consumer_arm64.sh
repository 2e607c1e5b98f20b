#!/usr/bin/env bash
# The consumer test (tools/consumer_test.ts) for the linux-arm64 platform package, on an x86-64
# Linux machine: the consumer runs in the aarch64 build of the pinned Deno (npm's
# @deno/linux-arm64-glibc, cached in ~/.cache/graft/deno-linux-arm64) under qemu-user, with
# Debian's aarch64 glibc as its root. So the arm64 library is loaded and computes a graph, not
# only built. Needs qemu-aarch64-static and /usr/aarch64-linux-gnu (apt: qemu-user-static
# libc6-arm64-cross libgcc-s1-arm64-cross); exits 0 with a message where they are missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

deno_version=2.9.6 # scripts/bootstrap.sh's GRAFT_DENO_VERSION
sysroot=/usr/aarch64-linux-gnu
qemu="$(command -v qemu-aarch64-static || command -v qemu-aarch64 || true)"
if [ -z "$qemu" ] || [ ! -e "$sysroot/lib/ld-linux-aarch64.so.1" ]; then
  echo "consumer_arm64: skipped: needs qemu-aarch64(-static) and $sysroot (apt-get install" \
    "qemu-user-static libc6-arm64-cross libgcc-s1-arm64-cross)"
  exit 0
fi

cache="${HOME}/.cache/graft/deno-linux-arm64"
deno_arm64="$cache/$deno_version/package/deno"
if [ ! -x "$deno_arm64" ]; then
  mkdir -p "$cache/$deno_version"
  if ! (cd "$cache/$deno_version" &&
    npm pack --silent "@deno/linux-arm64-glibc@$deno_version" >/dev/null &&
    tar xzf "deno-linux-arm64-glibc-$deno_version.tgz" &&
    rm "deno-linux-arm64-glibc-$deno_version.tgz"); then
    echo "consumer_arm64: skipped: npm could not fetch @deno/linux-arm64-glibc@$deno_version"
    exit 0
  fi
fi
"$qemu" -L "$sysroot" "$deno_arm64" --version | grep -q "aarch64" # the emulator runs it

./scripts/zig build dist -Ddist-platform=linux-arm64
GRAFT_CONSUMER_PLATFORM=linux-arm64 GRAFT_CONSUMER_DENO="$qemu -L $sysroot $deno_arm64" \
  ./scripts/deno test --allow-all tools/consumer_test.ts
