"""The centralized mechanism at scale (design §3): wall time and peak memory against bare ``X @ Z``.

Timing run: ``.venv/bin/pytest tests/bench/test_mechanism.py --benchmark-enable --benchmark-only``;
the paper-scale size (N = 1,000,000, d = 768, k = 20, float32: a 3 GiB input) is marked heavy:
``.venv/bin/pytest -m heavy tests/bench/test_mechanism.py -s``. A normal test run executes the
small sizes once as a smoke test.

Targets: the whole mechanism in at most 3x the time of the bare projection ``X @ Z`` measured in
the same run, and peak extra memory (tracemalloc, which sees numpy's allocations) at most 1.5x
the input array. Data: a synthetic population with 70% of the users in planted clusters of 400
(so hundreds of buckets are released and the summing pass does real work) and 30% isolated.
"""

from __future__ import annotations

import os
import resource
import sys
import time
import tracemalloc
from typing import Any

import numpy as np
import pytest

from mechanism.fre_e2t import run_mechanism
from mechanism.grid import PublicGrid
from mechanism.params import FreParams
from mechanism.population import synthetic_population
from mechanism.seeds import SeedPlan
from primitives.randomness import RandomSource

DIM = 768
CLUSTER = 400
PARAMS = FreParams.paper(8)
SEEDS = SeedPlan.from_seed(2024)
TIME_TARGET = 3.0
MEMORY_TARGET = 1.5


def _population(n: int) -> np.ndarray:
    n_clusters = int(0.7 * n) // CLUSTER
    pop = synthetic_population(
        n_clusters,
        CLUSTER,
        n - n_clusters * CLUSTER,
        DIM,
        PARAMS.radius,
        RandomSource.seeded(n, "bench-mechanism"),
        spread=0.05,
    )
    return pop.embeddings


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _measure(x: np.ndarray, *, repeats: int) -> dict[str, Any]:
    """Best-of-``repeats`` wall times of bare X @ Z and of the mechanism, then one traced run."""
    z = PublicGrid.derive(SEEDS, x.shape[1], PARAMS).projection
    projection = mechanism = float("inf")
    release = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        y = x @ z
        projection = min(projection, time.perf_counter() - t0)
        del y
        t0 = time.perf_counter()
        release = run_mechanism(x, PARAMS, SEEDS)
        mechanism = min(mechanism, time.perf_counter() - t0)
    assert release is not None
    tracemalloc.start()
    try:
        run_mechanism(x, PARAMS, SEEDS)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return {
        "n": x.shape[0],
        "d": x.shape[1],
        "k": PARAMS.k,
        "cores": _cores(),
        "load_avg_1min": os.getloadavg()[0],
        "projection_s": projection,
        "mechanism_s": mechanism,
        "time_ratio": mechanism / projection,
        "input_bytes": x.nbytes,
        "peak_extra_bytes": peak,
        "memory_ratio": peak / x.nbytes,
        "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "released": len(release),
        "contributors": release.diagnostics["n_contributors"],
        "stages_s": release.diagnostics["timings_s"],
    }


def _report(figures: dict[str, Any]) -> None:
    stages = {k: round(v, 3) for k, v in figures["stages_s"].items()}
    print(
        f"\nmechanism N={figures['n']} d={figures['d']} k={figures['k']} "
        f"({figures['cores']} cores, load {figures['load_avg_1min']:.1f}): "
        f"X@Z {figures['projection_s']:.3f} s, mechanism {figures['mechanism_s']:.3f} s "
        f"(x{figures['time_ratio']:.2f}); peak extra {figures['peak_extra_bytes'] / 2**20:.0f} MiB "
        f"= {figures['memory_ratio']:.3f} x input ({figures['input_bytes'] / 2**20:.0f} MiB); "
        f"released {figures['released']} buckets, {figures['contributors']} contributors; "
        f"stages {stages}",
        file=sys.stderr,
    )


@pytest.mark.benchmark(group="mechanism")
@pytest.mark.parametrize("n", [10_000, 50_000])
def test_mechanism(benchmark: Any, n: int) -> None:
    x = _population(n)
    release = benchmark(run_mechanism, x, PARAMS, SEEDS)
    assert len(release) > 0
    figures = _measure(x, repeats=1)
    benchmark.extra_info.update(figures)
    _report(figures)
    assert figures["memory_ratio"] <= MEMORY_TARGET


@pytest.mark.heavy
@pytest.mark.benchmark(group="mechanism")
@pytest.mark.parametrize("n", [1_000_000])
def test_mechanism_heavy(benchmark: Any, n: int) -> None:
    """N = 1,000,000 x d = 768 float32 (3 GiB), k = 20: the targets are asserted here."""
    x = _population(n)
    figures = _measure(x, repeats=2)
    benchmark.extra_info.update(figures)
    _report(figures)
    benchmark.pedantic(run_mechanism, args=(x, PARAMS, SEEDS), rounds=1, iterations=1)
    assert figures["memory_ratio"] <= MEMORY_TARGET
    assert figures["time_ratio"] <= TIME_TARGET, figures
