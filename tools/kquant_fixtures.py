#!/usr/bin/env python3
"""Writes the k-quant fixtures of tests/fixtures/quant/ (q4_K, q5_K, q6_K, q8_K): the bytes
llama.cpp's own C code writes, for tests/quant_test.ts to compare Graft's with bit for bit.

gguf-py (0.19.0) can dequantize q4_K, q5_K and q6_K but quantizes none of the k-quants, so the
quantized bytes come from ggml itself: a small C harness linked with ggml/src/ggml-quants.c from
llama-cpp-python 0.3.36's vendored llama.cpp (sha256 pinned below), compiled with
`gcc -O2 -ffp-contract=off -DNDEBUG` for baseline x86-64 (as ggml-base is: plain f32, no fused
multiply-add). The harness calls quantize_row_q{4,5,6,8}_K_ref and dequantize_row_*.

Pinned inputs:
    pip install gguf==0.19.0   (numpy 2.x)
    the llama-cpp-python 0.3.36 sdist, e.g.
        pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d /tmp
    (pip unpacks it to prepare metadata; the .tar.gz it fetched is what this script needs)
    gcc

Run from the repository root:
    python3 tools/kquant_fixtures.py /tmp/llama_cpp_python-0.3.36.tar.gz

Files (little-endian, raw), listed with sizes and sha256 in kquant_manifest.json:
  kquant_input.f32          seeded f32 rows of 256 values (see rows())
  <type>.bin                ggml's quantize_row_<type>_ref(kquant_input)
  <type>.dequant.f32        ggml's dequantize_row_<type>(<type>.bin)
  <type>.random.bin         random block bytes with finite random scales, 4 blocks
  <type>.random.dequant.f32 ggml's dequantize_row_<type> of those
For q4_K, q5_K and q6_K the script also checks that gguf.quants.dequantize gives the same f32
bits as ggml for both .bin files (it stops if not), so two implementations agree.
"""

import hashlib
import importlib.metadata
import json
import pathlib
import subprocess
import sys
import tarfile
import tempfile

import numpy as np

GGUF_VERSION = "0.19.0"
SDIST = "llama_cpp_python-0.3.36"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
SEED = 20261205
QK_K = 256
CFLAGS = ["-O2", "-ffp-contract=off", "-DNDEBUG", "-march=x86-64", "-std=gnu11"]

# name: (ggml type id, block bytes)
TYPES = {"q4_K": (12, 144), "q5_K": (13, 176), "q6_K": (14, 210), "q8_K": (15, 292)}

have = importlib.metadata.version("gguf")
if have != GGUF_VERSION:
    sys.exit(f"kquant_fixtures.py is pinned to gguf=={GGUF_VERSION}; this Python has gguf {have}")

import gguf.quants as quants  # noqa: E402
from gguf import GGMLQuantizationType as T  # noqa: E402

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "quant"
GGUF_TYPES = {"q4_K": T.Q4_K, "q5_K": T.Q5_K, "q6_K": T.Q6_K}

HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ggml-quants.h"

/* What ggml-quants.c links against outside the quantize/dequantize functions used here. */
void ggml_abort(const char * file, int line, const char * fmt, ...) {
    fprintf(stderr, "ggml_abort %s:%d %s\n", file, line, fmt);
    abort();
}
size_t ggml_row_size(enum ggml_type type, int64_t ne) { (void) type; (void) ne; abort(); }
const char * ggml_type_name(enum ggml_type type) { (void) type; return "?"; }
size_t ggml_type_size(enum ggml_type type) { (void) type; abort(); }

/* harness quantize|dequantize TYPE IN OUT NELEMENTS */
int main(int argc, char ** argv) {
    if (argc != 6) return 2;
    const int quantize = strcmp(argv[1], "quantize") == 0;
    const char * type = argv[2];
    const long n = atol(argv[5]);
    size_t block = 0;
    if (!strcmp(type, "q4_K")) block = sizeof(block_q4_K);
    else if (!strcmp(type, "q5_K")) block = sizeof(block_q5_K);
    else if (!strcmp(type, "q6_K")) block = sizeof(block_q6_K);
    else if (!strcmp(type, "q8_K")) block = sizeof(block_q8_K);
    else return 3;
    const size_t qbytes = n / QK_K * block;
    const size_t in_bytes = quantize ? n * sizeof(float) : qbytes;
    const size_t out_bytes = quantize ? qbytes : n * sizeof(float);
    void * in = calloc(1, in_bytes);
    void * out = calloc(1, out_bytes); /* zeroed: q8_K leaves an all-zero block's bsums unwritten */
    FILE * f = fopen(argv[3], "rb");
    if (!f || fread(in, 1, in_bytes, f) != in_bytes) return 4;
    fclose(f);
    if (quantize) {
        if (!strcmp(type, "q4_K")) quantize_row_q4_K_ref(in, out, n);
        if (!strcmp(type, "q5_K")) quantize_row_q5_K_ref(in, out, n);
        if (!strcmp(type, "q6_K")) quantize_row_q6_K_ref(in, out, n);
        if (!strcmp(type, "q8_K")) quantize_row_q8_K_ref(in, out, n);
    } else {
        if (!strcmp(type, "q4_K")) dequantize_row_q4_K(in, out, n);
        if (!strcmp(type, "q5_K")) dequantize_row_q5_K(in, out, n);
        if (!strcmp(type, "q6_K")) dequantize_row_q6_K(in, out, n);
        if (!strcmp(type, "q8_K")) dequantize_row_q8_K(in, out, n);
    }
    f = fopen(argv[4], "wb");
    if (!f || fwrite(out, 1, out_bytes, f) != out_bytes) return 5;
    fclose(f);
    return 0;
}
"""


def build_harness(sdist: pathlib.Path, work: pathlib.Path) -> pathlib.Path:
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        sys.exit(f"{sdist}: sha256 {digest}, expected {SDIST_SHA256} ({SDIST}.tar.gz)")
    prefix = f"{SDIST}/vendor/llama.cpp/ggml/"
    with tarfile.open(sdist) as tar:
        members = [
            m for m in tar.getmembers()
            if m.name.startswith(prefix + "include/")
            or (m.name.startswith(prefix + "src/") and m.name.count("/") == 5
                and m.name.endswith((".c", ".h")))
            or (m.name.startswith(prefix + "src/ggml-cpu/") and m.name.count("/") == 6
                and m.name.endswith(".h"))
        ]
        tar.extractall(work, members=members, filter="data")
    ggml = work / prefix
    (work / "harness.c").write_text(HARNESS)
    exe = work / "harness"
    includes = ["-I", str(ggml / "include"), "-I", str(ggml / "src")]
    subprocess.run(
        ["gcc", *CFLAGS, *includes, str(work / "harness.c"), str(ggml / "src" / "ggml-quants.c"),
         "-o", str(exe), "-lm"],
        check=True,
    )
    return exe


def run(exe: pathlib.Path, work: pathlib.Path, mode: str, name: str, data: bytes, n: int) -> bytes:
    src, dst = work / "in.bin", work / "out.bin"
    src.write_bytes(data)
    subprocess.run([str(exe), mode, name, str(src), str(dst), str(n)], check=True)
    return dst.read_bytes()


def rows(rng: np.random.Generator) -> list[tuple[str, np.ndarray]]:
    """Named rows of f32 values, each whole 256-value super-blocks."""
    u = lambda n: rng.uniform(-1, 1, n)  # noqa: E731
    outliers = rng.normal(0, 1, QK_K)
    outliers[[3, 40, 41, 200]] = [25.0, -60.0, 59.99, 31.0]
    # Sub-blocks of 32 that are zero, all equal, positive only, negative only, or random.
    mixed = np.concatenate([
        np.zeros(32), np.full(32, -2.5), np.full(32, 0.75), rng.uniform(1, 2, 32),
        -rng.uniform(1, 2, 32), u(32) * 3, np.zeros(16), u(16), u(32) * 1e-3,
    ])
    return [
        ("normal", rng.normal(0, 1, 2 * QK_K)),
        ("uniform", u(QK_K)),
        ("zeros", np.zeros(QK_K)),
        ("all_equal", np.full(QK_K, 0.3)),
        ("all_equal_negative", np.full(QK_K, -7.0)),
        ("large", u(QK_K) * 3e4),
        ("tiny", u(QK_K) * 1e-6),  # f16 d and dmin subnormal
        ("negative_only", -rng.uniform(0.1, 5, QK_K)),
        ("positive_only", rng.uniform(2, 3, QK_K)),
        ("outliers", outliers),
        ("integers", np.arange(-128, 128, dtype=np.float64)),
        ("mixed_sub_blocks", mixed),
        ("weights_like", rng.normal(0, 0.02, QK_K)),
        ("specials", specials(rng)),
    ]


def specials(rng: np.random.Generator) -> np.ndarray:
    """Three super-blocks: one NaN; infinities; the largest floats (nearest_int's argument
    out of its exact range). ggml's C is well defined on them with asserts off (-DNDEBUG, as
    release builds are): it turns floats into ints only through nearest_int's bit trick."""
    x = rng.normal(0, 1, 3 * QK_K)
    x[17] = np.nan
    x[QK_K + 5], x[QK_K + 200] = np.inf, -np.inf
    x[2 * QK_K + 9], x[2 * QK_K + 100] = 3.4e38, -3.0e38
    return x


def random_blocks(rng: np.random.Generator, name: str, blocks: int) -> np.ndarray:
    """Block bytes with random quants and scales, and finite random d (and dmin)."""
    _, size = TYPES[name]
    data = rng.integers(0, 256, size=(blocks, size), dtype=np.uint8)
    if name in ("q4_K", "q5_K"):
        data[:, 0:4] = rng.uniform(-2, 2, (blocks, 2)).astype(np.float16).view(np.uint8)
    elif name == "q6_K":
        data[:, 208:210] = rng.uniform(-2, 2, (blocks, 1)).astype(np.float16).view(np.uint8)
    else:  # q8_K: f32 d
        data[:, 0:4] = rng.uniform(-2, 2, (blocks, 1)).astype(np.float32).view(np.uint8)
    return data


def write(name: str, raw: bytes, files: dict) -> None:
    (OUT / name).write_bytes(raw)
    files[name] = {"bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(f"usage: python3 tools/kquant_fixtures.py PATH/{SDIST}.tar.gz")
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    named = rows(rng)
    manifest_rows = []
    offset = 0
    for name, values in named:
        assert len(values) % QK_K == 0, name
        manifest_rows.append({"name": name, "offset": offset, "length": len(values)})
        offset += len(values)
    with np.errstate(over="ignore"):
        x = np.concatenate([v for _, v in named]).astype(np.float32)
    files: dict = {}
    write("kquant_input.f32", x.tobytes(), files)
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        exe = build_harness(pathlib.Path(sys.argv[1]), work)
        for name, (_, size) in TYPES.items():
            q = run(exe, work, "quantize", name, x.tobytes(), len(x))
            deq = run(exe, work, "dequantize", name, q, len(x))
            r = random_blocks(rng, name, 4).tobytes()
            rdeq = run(exe, work, "dequantize", name, r, 4 * QK_K)
            if name in GGUF_TYPES:
                for what, raw, want in ((".bin", q, deq), (".random.bin", r, rdeq)):
                    blocks = np.frombuffer(raw, dtype=np.uint8).reshape(-1, size)
                    with np.errstate(all="ignore"):
                        mine = quants.dequantize(blocks, GGUF_TYPES[name]).astype(np.float32)
                    if mine.tobytes() != want:
                        sys.exit(f"{name}{what}: gguf.quants.dequantize differs from ggml's")
            write(f"{name}.bin", q, files)
            write(f"{name}.dequant.f32", deq, files)
            write(f"{name}.random.bin", r, files)
            write(f"{name}.random.dequant.f32", rdeq, files)
    manifest = {
        "generator": "tools/kquant_fixtures.py",
        "ggml": f"{SDIST}.tar.gz vendor/llama.cpp/ggml/src/ggml-quants.c",
        "sdist_sha256": SDIST_SHA256,
        "cflags": CFLAGS,
        "gguf": GGUF_VERSION,
        "gguf_dequantize_agrees": list(GGUF_TYPES),
        "numpy": np.__version__,
        "seed": SEED,
        "rows": manifest_rows,
        "types": list(TYPES),
        "files": files,
    }
    (OUT / "kquant_manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    total = sum(f["bytes"] for f in files.values())
    print(f"wrote {len(files)} files, {total} bytes, to {OUT}")


if __name__ == "__main__":
    main()
