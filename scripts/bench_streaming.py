"""Benchmark: wall time and peak RSS of ``fre-e2t simulate`` by driver and population size.

    .venv/bin/python scripts/bench_streaming.py --users 10000 100000 --driver streaming runner \\
        --out runs/bench-streaming

For each N it writes a synthetic population (clusters of ~1,000 users that clear the threshold,
plus 5% rare users; d = 768 by default) as ``.npy`` shards of at most 50,000 rows, then runs
``fre-e2t simulate --embeddings SHARDS --seed 1 --epsilon 8`` once per driver in a fresh process
and reads that process's own peak RSS (``wait4``). Writes ``OUT/bench.json`` and ``OUT/bench.md``;
the figures hold for the machine they ran on (its cores are printed beside them).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARD_ROWS = 50_000


def write_shards(n: int, dim: int, seed: int, directory: Path) -> None:
    """The population shard by shard (each with its own clusters), so it is never whole in memory."""
    sys.path.insert(0, str(ROOT))
    from mechanism.population import synthetic_population
    from primitives.randomness import RandomSource

    directory.mkdir(parents=True, exist_ok=True)
    for j, lo in enumerate(range(0, n, SHARD_ROWS)):
        rows = min(SHARD_ROWS, n - lo)
        rare = rows // 20
        clusters = max(1, (rows - rare) // 1000)
        sizes = [(rows - rare) // clusters + (1 if c < (rows - rare) % clusters else 0) for c in range(clusters)]
        pop = synthetic_population(
            clusters, sizes, rare, dim, 0.5, RandomSource.seeded(seed, f"bench/streaming/{j}"), spread=0.02
        )
        np.save(directory / f"{j:05d}.npy", np.asarray(pop.embeddings, dtype=np.float32))


def measure(driver: str, shards: Path, out: Path, epsilon: str, extra: list[str]) -> dict[str, object]:
    """One ``fre-e2t simulate`` in a fresh process: wall seconds and that process's peak RSS."""
    cmd = [
        sys.executable, "-m", "fre_protocol.cli", "simulate", "--embeddings", str(shards), "--driver", driver,
        "--seed", "1", "--epsilon", epsilon, "--out", str(out), *extra,
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    output = proc.stdout.read() if proc.stdout is not None else ""
    if status != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{output}")
    return {
        "driver": driver,
        "wall_s": round(wall, 1),
        "peak_rss_GiB": round(usage.ru_maxrss * 1024 / 2**30, 3),
        "user_cpu_s": round(usage.ru_utime, 1),
        "summary": output.strip().splitlines(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--driver", nargs="+", choices=["streaming", "runner"], default=["streaming", "runner"])
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--epsilon", default="8")
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("simulate_args", nargs="*", help="passed on to fre-e2t simulate (after --)")
    args = parser.parse_args()
    rows = []
    for n in args.users:
        shards = args.out / f"population-{n}"
        if not shards.is_dir():
            write_shards(n, args.dim, args.seed, shards)
        for driver in args.driver:
            result = measure(driver, shards, args.out / f"run-{driver}-{n}", args.epsilon, args.simulate_args)
            rows.append({"users": n, "dim": args.dim, "epsilon": args.epsilon, **result})
            print(f"N = {n:>9,}  {driver:9}  {result['wall_s']:>8} s  peak RSS {result['peak_rss_GiB']} GiB", flush=True)
    report = {"cores": os.cpu_count(), "runs": rows}
    (args.out / "bench.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [f"Machine: {os.cpu_count()} cores.", "", "| N | driver | wall (s) | peak RSS (GiB) |", "|---|---|---|---|"]
    lines += [f"| {r['users']:,} | {r['driver']} | {r['wall_s']} | {r['peak_rss_GiB']} |" for r in rows]
    (args.out / "bench.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
