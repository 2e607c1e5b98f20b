#!/usr/bin/env python3
"""Writes tests/fixtures/quant/: ggml's quantized formats as an independent implementation
produces them, for tests/quant_test.ts to compare Graft's bytes with bit for bit.

The independent implementation is gguf-py's numpy port of ggml-quants.c, pinned:

    pip install gguf==0.19.0   (numpy 2.x)

Run from the repository root:  python3 tools/quant_fixtures.py

Files (all little-endian, raw):
  manifest.json            seed, gguf version, the rows of input.f32 and every file below
  input.f32                seeded f32 rows (random, zeros, all equal, large, tiny, negative only,
                           outliers, f16-overflowing scales, blocks where a fused
                           multiply-add would round differently), whole 32-value blocks
  <type>.bin               gguf.quants.quantize(input, type), for bf16 q8_0 q4_0 q4_1 q5_0 q5_1
  <type>.dequant.f32       gguf.quants.dequantize(<type>.bin, type)
  <type>.random.bin        random block bytes (finite f16 scales, any quants), 4 blocks
                           (bf16: 64 random bit patterns, NaNs included)
  <type>.random.dequant.f32  gguf.quants.dequantize of those
  bf16_special.f32         NaNs (quiet, signalling, negative), infinities, rounding ties,
                           subnormals, the largest floats
  bf16_special.bin         gguf.quants.quantize(bf16_special, BF16)

gguf.quants has no q8_1 (ggml makes it only for its dot products): the test checks q8_1
against an f64 re-statement of ggml's quantize_row_q8_1_ref written in the test itself.
"""

import hashlib
import importlib.metadata
import json
import pathlib
import sys

import numpy as np

GGUF_VERSION = "0.19.0"
SEED = 20261204
BLOCK = 32

have = importlib.metadata.version("gguf")
if have != GGUF_VERSION:
    sys.exit(f"quant_fixtures.py is pinned to gguf=={GGUF_VERSION}; this Python has gguf {have}")

import gguf.quants as quants  # noqa: E402
from gguf import GGMLQuantizationType as T  # noqa: E402

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "quant"
TYPES = {"bf16": T.BF16, "q8_0": T.Q8_0, "q4_0": T.Q4_0, "q4_1": T.Q4_1, "q5_0": T.Q5_0, "q5_1": T.Q5_1}


def rows(rng: np.random.Generator) -> list[tuple[str, np.ndarray]]:
    """Named rows of f32 values, each whole blocks."""
    u = lambda n: rng.uniform(-1, 1, n)  # noqa: E731
    outliers = rng.normal(0, 1, 64)
    outliers[[3, 40, 41]] = [25.0, -60.0, 59.99]
    tiny = u(64) * 1e-6  # f16 scales are subnormal
    tiny[32:] *= 1e-30  # f16 scales flush to zero
    mixed_blocks = np.concatenate([np.zeros(BLOCK), np.full(BLOCK, -2.5), u(BLOCK) * 3])
    return [
        ("normal", rng.normal(0, 1, 128)),
        ("uniform", u(64)),
        ("zeros", np.zeros(BLOCK)),
        ("all_equal", np.full(BLOCK, 0.3)),
        ("all_equal_negative", np.full(BLOCK, -7.0)),
        ("large", u(64) * 3e4),
        ("f16_overflow", u(BLOCK) * 1e9),  # d = amax / 127 overflows f16 to infinity
        ("tiny", tiny),
        ("negative_only", -rng.uniform(0.1, 5, 64)),
        ("positive_only", rng.uniform(2, 3, BLOCK)),
        ("outliers", outliers),
        ("integers", np.arange(-16, 16, dtype=np.float64)),
        ("zero_equal_random", mixed_blocks),
        ("fma_sensitive", fma_sensitive_blocks()),
    ]


def fma_sensitive_blocks() -> np.ndarray:
    """One q4_0 block and one q5_0 block whose quants differ when x * id + 8.5 (16.5) is one
    fused multiply-add instead of ggml's two f32 roundings (gguf-py, like ggml-base, does two):
    a build that contracted them would fail on this row. Found by a seeded search."""
    rng = np.random.default_rng(1)
    found = {}
    while len(found) < 2:
        x = rng.normal(0, 1, (20000, BLOCK)).astype(np.float32)
        for name, div, add, top in (("q4_0", -8, 8.5, 15), ("q5_0", -16, 16.5, 31)):
            imax = abs(x).argmax(axis=-1, keepdims=True)
            d = np.take_along_axis(x, imax, axis=-1) / np.float32(div)
            inv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
            separate = np.minimum(top, np.trunc((x * inv).astype(np.float32) + np.float32(add)))
            fused = np.trunc((x.astype(np.float64) * inv.astype(np.float64) + add).astype(np.float32))
            fused = np.minimum(top, fused)  # f64 then f32: a fused multiply-add, nearly always
            differ = np.nonzero((separate != fused).any(axis=1))[0]
            if len(differ) and name not in found:
                found[name] = x[differ[0]]
    return np.concatenate([found["q4_0"], found["q5_0"]])


def random_blocks(rng: np.random.Generator, name: str, qtype: T, blocks: int) -> np.ndarray:
    """Block bytes with random quants and finite random f16 scales (and minimums)."""
    block_size, type_size = quants.GGML_QUANT_SIZES[qtype]
    data = rng.integers(0, 256, size=(blocks, type_size), dtype=np.uint8)
    if name == "bf16":
        return data  # any bit pattern, NaNs included
    halves = 2 if name in ("q4_1", "q5_1") else 1
    scales = rng.uniform(-4, 4, (blocks, halves)).astype(np.float16)
    data[:, : 2 * halves] = scales.view(np.uint8).reshape(blocks, 2 * halves)
    return data


def bf16_special() -> np.ndarray:
    bits = [
        0x7FC00000, 0x7F800001, 0xFF81FFFF, 0x7FFFFFFF, 0xFFC00001,  # NaNs
        0x7F800000, 0xFF800000, 0x7F7FFFFF, 0xFF7FFFFF,  # infinities, largest floats
        0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF, 0xBF808000,  # ties and neighbours
        0x00000001, 0x00008000, 0x00018000, 0x807FFFFF, 0x00000000, 0x80000000,  # subnormals, zeros
        0x7F7F8000, 0x7F7F7FFF, 0x3F800000, 0x40490FDB,  # carry into the exponent, 1, pi
    ]
    return np.array(bits + [0x3F800000] * (BLOCK - len(bits)), dtype=np.uint32).view(np.float32)


def write(name: str, data: np.ndarray, files: dict) -> None:
    raw = np.ascontiguousarray(data).tobytes()
    (OUT / name).write_bytes(raw)
    files[name] = {"bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    named = rows(rng)
    manifest_rows = []
    offset = 0
    for name, values in named:
        assert len(values) % BLOCK == 0, name
        manifest_rows.append({"name": name, "offset": offset, "length": len(values)})
        offset += len(values)
    x = np.concatenate([v for _, v in named]).astype(np.float32).reshape(-1, BLOCK)
    files: dict = {}
    write("input.f32", x, files)
    with np.errstate(all="ignore"):  # the f16_overflow row makes inf * 0 on purpose
        for name, qtype in TYPES.items():
            q = quants.quantize(x, qtype)
            write(f"{name}.bin", q, files)
            write(f"{name}.dequant.f32", quants.dequantize(q, qtype).astype(np.float32), files)
            r = random_blocks(rng, name, qtype, 64 if name == "bf16" else 4)
            write(f"{name}.random.bin", r, files)
            write(f"{name}.random.dequant.f32", quants.dequantize(r, qtype).astype(np.float32), files)
        special = bf16_special().reshape(1, -1)
        write("bf16_special.f32", special, files)
        write("bf16_special.bin", quants.quantize(special, T.BF16), files)
    manifest = {
        "generator": "tools/quant_fixtures.py",
        "gguf": GGUF_VERSION,
        "numpy": np.__version__,
        "seed": SEED,
        "rows": manifest_rows,
        "types": list(TYPES),
        "files": files,
    }
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    total = sum(f["bytes"] for f in files.values())
    print(f"wrote {len(files)} files, {total} bytes, to {OUT}")


if __name__ == "__main__":
    main()
