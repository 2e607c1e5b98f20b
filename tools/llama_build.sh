#!/usr/bin/env bash
# Builds a pinned llama.cpp/ggml (the copy vendored in PyPI's llama-cpp-python 0.3.36 sdist, llama.cpp
# commit 0c1e5709) into a cache outside the repository, for benchmarks and interop tests, and prints
# the build dir as its last stdout line. Re-runs reuse the sources and the build (seconds).
# Cache: $GRAFT_CACHE, else ~/.cache/graft; the tree is $cache/llama.cpp-0.3.36/{src,build-<simd>}.
set -euo pipefail
version="0.3.36"
sha256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
root="${GRAFT_CACHE:-$HOME/.cache/graft}/llama.cpp-$version"
src="$root/src"

# Sources: PyPI is the only registry reachable here that carries llama.cpp, as the sdist's vendor/.
if [ ! -f "$src/CMakeLists.txt" ]; then
  mkdir -p "$root"
  sdist="$root/llama_cpp_python-$version.tar.gz"
  if [ ! -f "$sdist" ]; then
    echo "graft: downloading llama-cpp-python==$version sdist (PyPI) for llama.cpp sources" >&2
    python3 -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
      "llama-cpp-python==$version" -d "$root" >&2
  fi
  actual="$(sha256sum "$sdist" | cut -d' ' -f1)"
  if [ "$actual" != "$sha256" ]; then
    echo "graft: $sdist has sha256 $actual, not $sha256; delete it and run again" >&2
    exit 1
  fi
  # Unpack beside, then rename, so an interrupted unpack is never taken for a finished one.
  rm -rf "$src.part"
  mkdir -p "$src.part"
  tar -xzf "$sdist" -C "$src.part" --strip-components=3 "llama_cpp_python-$version/vendor/llama.cpp"
  mv "$src.part" "$src"
fi

# Tools: only what is missing, so a prepared machine never touches apt.
missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v ninja >/dev/null || missing+=(ninja-build)
command -v gcc >/dev/null || missing+=(gcc)
command -v g++ >/dev/null || missing+=(g++)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "graft: installing ${missing[*]}" >&2
  apt-get update >&2
  apt-get install -y "${missing[@]}" >&2
fi

# GGML_NATIVE compiles for this CPU (-march=native): a build from an AVX-512 machine dies with SIGILL
# on an AVX2-only one, so each SIMD level gets its own build dir. (Finer differences within a level,
# e.g. AVX-512 BF16 or AMX, are not told apart; delete the dir if a machine change breaks it.)
# GRAFT_LLAMA_SIMD=avx2 builds the AVX2 variant on an AVX-512 machine too (not native: AVX2, FMA,
# F16C, BMI2), what an AVX2-only CPU's native build computes: its fixtures are the AVX2 kernels'.
native=ON
simd_flags=()
if [ "${GRAFT_LLAMA_SIMD:-}" = avx2 ]; then
  simd=avx2
  native=OFF
  simd_flags=(-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON)
elif grep -qw avx512f /proc/cpuinfo; then
  simd=avx512
elif grep -qw avx2 /proc/cpuinfo; then
  simd=avx2
else
  simd=generic
fi
build="$root/build-$simd"

# Configure once: build.ninja is written last, so its presence means a finished configure.
# LLAMA_BUILD_SERVER=OFF: the server's web UI is fetched from the network at build time, which is
# not reachable here, and no benchmark needs the server. LLAMA_OPENSSL=OFF: nothing here downloads.
if [ ! -f "$build/build.ninja" ]; then
  CC=gcc CXX=g++ cmake -S "$src" -B "$build" -G Ninja \
    -DGGML_RPC=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=ON -DGGML_NATIVE="$native" \
    ${simd_flags[@]+"${simd_flags[@]}"} \
    -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF >&2
fi

# ggml, ggml-base, ggml-cpu, ggml-rpc: the shared libs (build/bin/lib*.so) the C peers link against.
# GRAFT_LLAMA_TARGETS narrows the targets (the fixture scripts need llama-completion only).
targets=(llama-completion llama-bench ggml-rpc-server test-backend-ops llama-quantize
  ggml ggml-base ggml-cpu ggml-rpc)
if [ -n "${GRAFT_LLAMA_TARGETS:-}" ]; then read -r -a targets <<<"$GRAFT_LLAMA_TARGETS"; fi
nice -n 10 ninja -C "$build" -j2 "${targets[@]}" >&2
echo "$build"
