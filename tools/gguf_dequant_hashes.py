#!/usr/bin/env python3
"""For each tensor of a GGUF file, the sha256 of its values dequantized to f32 by llama.cpp's own
Python package (PyPI gguf==0.19.0, gguf.quants.dequantize), as JSON {name: hex}. Graft's
dequantized values are checked against these (tests/gguf_test.ts).

Usage: python3 tools/gguf_dequant_hashes.py FILE [FILE...]
One JSON document per file, one per line.
"""
import hashlib
import json
import sys
from importlib.metadata import version as installed_version

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

PINNED = "0.19.0"


def main() -> None:
    if installed_version("gguf") != PINNED:
        sys.exit(f"this script is pinned to gguf=={PINNED}")
    for path in sys.argv[1:]:
        reader = GGUFReader(path)
        hashes = {}
        for t in reader.tensors:
            values = dequantize(t.data, t.tensor_type).astype(np.float32, copy=False)
            hashes[t.name] = hashlib.sha256(np.ascontiguousarray(values).tobytes()).hexdigest()
        json.dump(hashes, sys.stdout)
        sys.stdout.write("\n")


if __name__ == "__main__":
    main()
