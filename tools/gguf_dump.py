#!/usr/bin/env python3
"""Dumps a GGUF file as JSON with llama.cpp's own Python reader (PyPI gguf==0.19.0), the
independent view Graft's reader is checked against (tests/gguf_test.ts).

Usage: python3 tools/gguf_dump.py FILE [FILE...]   (pip install gguf==0.19.0)
One JSON document per file, one per line. Integers are written as strings (u64 does not fit a
JSON number); floats as numbers.
"""
import json
import sys
from importlib.metadata import version as installed_version

from gguf import GGUFReader

PINNED = "0.19.0"


def plain(value):
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return value
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def dump(path: str) -> dict:
    reader = GGUFReader(path)
    fields = []
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        types = [t.name for t in field.types]
        fields.append({"key": key, "types": types, "value": plain(field.contents())})
    tensors = [
        {
            "name": t.name,
            "type": t.tensor_type.name,
            "shape": [int(d) for d in t.shape],
            "data_offset": int(t.data_offset),
            "n_bytes": int(t.n_bytes),
        }
        for t in reader.tensors
    ]
    return {"fields": fields, "tensors": tensors}


def main() -> None:
    version = installed_version("gguf")
    if version != PINNED:
        sys.exit(f"gguf {version} installed; this script is pinned to gguf=={PINNED}")
    for path in sys.argv[1:]:
        json.dump(dump(path), sys.stdout)
        sys.stdout.write("\n")


if __name__ == "__main__":
    main()
