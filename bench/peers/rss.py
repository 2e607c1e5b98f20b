#!/usr/bin/env python3
"""Runs a command and reports its peak RSS, the same way for every side of a benchmark.

    python3 bench/peers/rss.py CMD [ARGS...]

The child's stdout and stderr pass through unchanged; after it exits, one more stderr line
`peak_rss_kb=<N>` gives getrusage(RUSAGE_CHILDREN).ru_maxrss (kB on Linux): the largest resident
set of the child (or of any descendant it waited for), file-backed mapped pages included. Exits
with the child's status.
"""
import resource
import subprocess
import sys

if len(sys.argv) < 2:
    sys.exit("usage: rss.py CMD [ARGS...]")
status = subprocess.call(sys.argv[1:])
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(f"peak_rss_kb={peak}", file=sys.stderr, flush=True)
sys.exit(status if status >= 0 else 128 - status)
