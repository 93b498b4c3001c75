"""Benchmark: loading the packaged SmolLM2 from its GGUF file against loading its converted copy.

    .venv/bin/python scripts/bench_gguf_copy.py [--rounds 2]

Each round starts from an empty cache folder: one load reads the GGUF file and writes the copy
(``fre_protocol.text.gguf_copy``), the next reads the copy. Prints one JSON line: the seconds of
each load per round, their medians and ratio, and the copy's size on disk.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="cold/warm pairs, each in a fresh cache (default: 2)")
    args = parser.parse_args()
    from fre_protocol.text.gguf_copy import copy_folder, load_gguf_model
    from fre_protocol.text.paraphraser import smollm2_location

    folder, gguf = smollm2_location()
    cold, warm, size = [], [], 0
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as cache:
            start = time.perf_counter()
            load_gguf_model(str(folder), gguf, cache_dir=Path(cache))
            cold.append(time.perf_counter() - start)
            start = time.perf_counter()
            load_gguf_model(str(folder), gguf, cache_dir=Path(cache))
            warm.append(time.perf_counter() - start)
            size = sum(p.stat().st_size for p in copy_folder(folder / gguf, Path(cache)).iterdir())
    print(json.dumps({
        "model": gguf, "machine": platform.processor() or platform.machine(),
        "gguf_and_write_s": [round(s, 2) for s in cold], "copy_s": [round(s, 2) for s in warm],
        "median_ratio": round(statistics.median(cold) / statistics.median(warm), 1), "copy_bytes": size,
    }))


if __name__ == "__main__":
    main()
