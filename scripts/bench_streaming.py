"""Benchmark and scaling report: wall time and peak RSS of ``fre-e2t simulate`` by driver,
engine and population size, a fit of the per-user cost, and projections to larger N.

    .venv/bin/python scripts/bench_streaming.py --num-users 10000 100000 --driver streaming runner \\
        --out runs/bench-streaming
    .venv/bin/python scripts/bench_streaming.py --num-users 10000 100000 \\
        --driver streaming dask1 dask2 --out runs/bench-scaling -- --transcript-mode sizes   # the scaling report
    .venv/bin/python scripts/bench_streaming.py --num-users 1000000 --driver streaming \\
        --out runs/bench-1m -- --transcript-mode sizes               # one more size, on its own
    .venv/bin/python scripts/bench_streaming.py --num-users --merge runs/bench-scaling/bench.json \\
        runs/bench-1m/bench.json --out runs/bench-report             # both in one table and fit

Arguments after ``--`` go to every ``fre-e2t simulate`` (``--transcript-mode sizes`` keeps the transcript
to a few hundred bytes a user: a full one takes ~10 kB a user on disk and its writing time;
``--progress`` shows its progress bars). Each run's output is passed through as it comes.
``--merge`` tables and fits the runs of earlier reports beside this one's.

For each N it writes a synthetic population (clusters of ~1,000 users that clear the threshold,
plus 5% rare users; d = 768 by default) as ``.npy`` shards of at most 50,000 rows, then runs
``fre-e2t simulate --embeddings SHARDS --seed 1 --epsilon 8`` once per driver in a fresh process
and reads that process's own peak RSS (``wait4``: the largest single process) and, with psutil, the
largest sum over the process and its descendants sampled every 0.2 s (for ``daskK``,
``--driver dask --processes K`` on a local cluster, and for ``streaming-pK``, ``--driver
streaming-processes --processes K``, that sum counts the worker processes). With two or more sizes
per driver it fits ``wall = a + b·N`` and ``RSS = m0 + m1·N`` by least squares and projects
N = 10^7 and 10^8: on the measured configuration, and on k workers under the stated assumption
that the per-user part b divides across workers while a stays serial (an optimistic bound: the
measured dask2/dask1 ratio says how far from it two workers already are). Writes
``OUT/bench.json`` and ``OUT/bench.md``; the figures hold for the machine they ran on (its cores
are printed beside them).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
SHARD_ROWS = 50_000


def write_shards(n: int, dim: int, seed: int, directory: Path) -> None:
    """The population shard by shard (each with its own clusters), so it is never whole in memory.

    Written under ``DIR.partial`` and renamed to ``directory`` once complete, so a run stopped
    half-way (or out of disk) never leaves a population that a later run would take as whole; the
    free space is checked first."""
    sys.path.insert(0, str(ROOT))
    from mechanism.population import synthetic_population
    from primitives.randomness import RandomSource

    need = n * dim * 4
    directory.parent.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(directory.parent).free
    if free < need:
        raise SystemExit(
            f"--num-users {n} at --dim {dim} needs {need / 2**30:.1f} GiB for its shards in {directory.parent}, "
            f"got {free / 2**30:.1f} GiB free"
        )
    partial = directory.with_name(directory.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    starts = range(0, n, SHARD_ROWS)
    for j, lo in enumerate(tqdm(starts, desc=f"population of {n:,}: shards", unit="shard")):
        rows = min(SHARD_ROWS, n - lo)
        rare = rows // 20
        clusters = max(1, (rows - rare) // 1000)
        sizes = [(rows - rare) // clusters + (1 if c < (rows - rare) % clusters else 0) for c in range(clusters)]
        pop = synthetic_population(
            clusters, sizes, rare, dim, 0.5, RandomSource.seeded(seed, f"bench/streaming/{j}"), spread=0.02
        )
        np.save(partial / f"{j:05d}.npy", np.asarray(pop.embeddings, dtype=np.float32))
    partial.rename(directory)


#: streaming-pK: the streaming driver with its users in K local worker processes.
DRIVERS = ("streaming", "streaming-p2", "streaming-p3", "runner", "dask1", "dask2")
PROJECT_N = (10_000_000, 100_000_000)
PROJECT_WORKERS = (1, 2, 8, 32)
#: The smallest N whose peak memory enters the memory fit (several windows of 16,384 users).
MEMORY_FIT_FROM = 100_000


def driver_flags(driver: str) -> list[str]:
    if driver.startswith("dask"):
        return ["--driver", "dask", "--processes", driver.removeprefix("dask")]
    if driver.startswith("streaming-p"):
        return ["--driver", "streaming-processes", "--processes", driver.removeprefix("streaming-p")]
    return ["--driver", driver]


def sample_tree_rss(pid: int, done: threading.Event, peak: list[int]) -> None:
    """The largest sum of RSS over ``pid`` and its descendants (Dask's worker processes), sampled
    every 0.2 s; wait4's figure is the largest single process, not the sum."""
    try:
        import psutil
    except ImportError:  # the figure stays 0: documented as absent
        return
    while not done.wait(0.2):
        try:
            root = psutil.Process(pid)
            total = root.memory_info().rss + sum(c.memory_info().rss for c in root.children(recursive=True))
        except psutil.Error:
            continue
        peak[0] = max(peak[0], total)


def pass_through(proc: subprocess.Popen[bytes], captured: list[bytes]) -> None:
    """Copy the run's output (its progress bars with ``-- --progress``) to ours as it comes, and
    keep it for the report: a run of 10^7 users takes hours."""
    assert proc.stdout is not None
    while chunk := os.read(proc.stdout.fileno(), 65536):
        captured.append(chunk)
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()


def summary_lines(output: str) -> list[str]:
    """The run's closing summary (from its ``fre-e2t simulate:`` line on), without progress bars:
    a bar redraws its line after ``\r`` and moves up with ``ESC[A``."""
    lines = [last_drawn(line).replace("\x1b[A", "") for line in output.strip().split("\n")]
    head = "fre-e2t simulate:"
    starts = [j for j, line in enumerate(lines) if head in line]
    if not starts:
        return lines
    first = lines[starts[-1]]
    return [first[first.index(head):], *lines[starts[-1] + 1 :]]


def last_drawn(line: str) -> str:
    """What a terminal would show of ``line``: its last non-empty part after a ``\r``."""
    parts = [part for part in line.split("\r") if part]
    return parts[-1] if parts else ""


def measure(driver: str, shards: Path, out: Path, epsilon: str, extra: list[str]) -> dict[str, object]:
    """One ``fre-e2t simulate`` in a fresh process: wall seconds and that process's peak RSS."""
    cmd = [
        sys.executable, "-m", "fre_protocol.cli", "simulate", "--embeddings", str(shards), *driver_flags(driver),
        "--seed", "1", "--epsilon", epsilon, "--out", str(out), *extra,
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    tree_peak = [0]
    done = threading.Event()
    sampler = threading.Thread(target=sample_tree_rss, args=(proc.pid, done, tree_peak), daemon=True)
    sampler.start()
    captured: list[bytes] = []
    relay = threading.Thread(target=pass_through, args=(proc, captured), daemon=True)
    relay.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    done.set()
    sampler.join()
    relay.join()
    output = b"".join(captured).decode(errors="replace")
    if status != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{output}")
    return {
        "driver": driver,
        "wall_s": round(wall, 1),
        "peak_rss_GiB": round(usage.ru_maxrss * 1024 / 2**30, 3),
        "peak_rss_tree_GiB": round(tree_peak[0] / 2**30, 3),
        "user_cpu_s": round(usage.ru_utime, 1),
        "summary": summary_lines(output),
    }


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from fre_protocol.cli.common import add_deprecated_alias

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-users", type=int, nargs="*", default=[10_000, 100_000],
                        help="sizes to run (none: only --merge)")
    add_deprecated_alias(parser, "--users", "--num-users")
    parser.add_argument("--driver", nargs="+", choices=DRIVERS, default=["streaming", "runner"])
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--epsilon", default="8")
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--merge", type=Path, nargs="*", default=[], metavar="BENCH_JSON",
                        help="runs of earlier reports (their bench.json) to table and fit beside this one's")
    parser.add_argument("simulate_args", nargs="*", help="passed on to fre-e2t simulate (after --)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = [{**r, "from": str(path)} for path in args.merge for r in json.loads(path.read_text())["runs"]]
    for n in args.num_users:
        shards = args.out / f"population-{n}"
        if not shards.is_dir():
            write_shards(n, args.dim, args.seed, shards)
        for driver in args.driver:
            result = measure(driver, shards, args.out / f"run-{driver}-{n}", args.epsilon, args.simulate_args)
            rows.append({"users": n, "dim": args.dim, "epsilon": args.epsilon, "simulate_args": args.simulate_args, **result})
            print(f"N = {n:>9,}  {driver:9}  {result['wall_s']:>8} s  peak RSS {result['peak_rss_GiB']} GiB", flush=True)
    rows.sort(key=lambda r: (DRIVERS.index(str(r["driver"])), int(r["users"])))  # type: ignore[call-overload]
    drivers = sorted({str(r["driver"]) for r in rows}, key=DRIVERS.index)
    fits = {d: fit(rows, d) for d in drivers if len({r["users"] for r in rows if r["driver"] == d}) >= 2}
    report = {"cores": os.cpu_count(), "runs": rows, "fits": fits}
    (args.out / "bench.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [f"Machine: {os.cpu_count()} cores.", "",
             "| N | driver | wall (s) | peak RSS (GiB) | peak RSS, process tree (GiB) | simulate options |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['users']:,} | {r['driver']} | {r['wall_s']} | {r['peak_rss_GiB']} | {r['peak_rss_tree_GiB']} | "
              f"{' '.join(r.get('simulate_args', [])) or '–'}" + (f" (from {r['from']})" if "from" in r else "") + " |"
              for r in rows]

    if fits:
        lines += [
            "", "Fits (least squares over the sizes above) and projections:", "",
            "| driver | wall = a + b·N | RSS = m0 + m1·N | " + " | ".join(f"N = {n:.0e}" for n in PROJECT_N) + " |",
            "|---|---|---|" + "---|" * len(PROJECT_N),
        ]
        for d, f in fits.items():
            memory = f["m0_GiB"] is not None
            proj = " | ".join(
                f"{f['projections'][str(n)]['wall_h']:.1f} h"
                + (f", {f['projections'][str(n)]['rss_GiB']:.2f} GiB" if memory else "") for n in PROJECT_N
            )
            rss_line = (
                f"{f['m0_GiB']:.3f} GiB + {f['m1_bytes_per_user']:.0f} B·N" if memory
                else f"n/a (two sizes ≥ {MEMORY_FIT_FROM:,} needed)"
            )
            lines.append(f"| {d} | {f['a_s']:.1f} s + {f['b_ms_per_user']:.3f} ms·N | {rss_line} | {proj} |")
        lines += ["", "On k workers (b divided by k, a serial; optimistic):", "",
                  "| driver | N | " + " | ".join(f"k = {k}" for k in PROJECT_WORKERS) + " |",
                  "|---|---|" + "---|" * len(PROJECT_WORKERS)]
        for d, f in fits.items():
            for n in PROJECT_N:
                cells = " | ".join(f"{(f['a_s'] + f['b_ms_per_user'] / 1e3 * n / k) / 3600:.1f} h" for k in PROJECT_WORKERS)
                lines.append(f"| {d} | {n:.0e} | {cells} |")
    (args.out / "bench.md").write_text("\n".join(lines) + "\n")
    return 0


def fit(rows: list[dict[str, object]], driver: str) -> dict[str, object]:
    """Least-squares lines through (N, wall) and (N, peak RSS) of one driver, and projections."""
    mine = [r for r in rows if r["driver"] == driver]
    n = np.array([float(r["users"]) for r in mine])  # type: ignore[arg-type]
    design = np.column_stack([np.ones_like(n), n])
    (a, b), *_ = np.linalg.lstsq(design, np.array([float(r["wall_s"]) for r in mine]), rcond=None)  # type: ignore[arg-type]
    # Below a few windows of users, peak memory grows as the windows fill, not per user: the
    # memory line is fitted only through sizes of at least MEMORY_FIT_FROM.
    big = [r for r in mine if int(r["users"]) >= MEMORY_FIT_FROM]  # type: ignore[call-overload]
    m0 = m1 = None
    if len({r["users"] for r in big}) >= 2:
        n_big = np.array([float(r["users"]) for r in big])  # type: ignore[arg-type]
        rss = [max(float(r["peak_rss_GiB"]), float(r["peak_rss_tree_GiB"])) for r in big]  # type: ignore[arg-type]
        (m0, m1), *_ = np.linalg.lstsq(np.column_stack([np.ones_like(n_big), n_big]), np.array(rss), rcond=None)
    return {
        "a_s": float(a), "b_ms_per_user": float(b) * 1e3,
        "m0_GiB": None if m0 is None else float(m0), "m1_bytes_per_user": None if m1 is None else float(m1) * 2**30,
        "projections": {
            str(p): {"wall_h": float(a + b * p) / 3600, "rss_GiB": None if m0 is None else float(m0 + m1 * p)}
            for p in PROJECT_N
        },
    }


if __name__ == "__main__":
    raise SystemExit(main())
