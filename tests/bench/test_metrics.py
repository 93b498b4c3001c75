"""Exact neighbour counting and nearest-neighbour search at corpus scale (design §8).

Timing run: ``.venv/bin/pytest tests/bench/test_metrics.py --benchmark-enable --benchmark-only``
(add ``-m heavy`` for N = 100,000, d = 384). A normal test run executes the small sizes once as a
smoke test. Data: unit vectors in d = 384, 80% in tight clusters of 80 (every pair within r = 0.5),
20% isolated, so both the dense and the empty regime of the tiles are exercised.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
import pytest

from mechanism.metrics import nearest_distances, neighbour_counts
from primitives.randomness import RandomSource

DIM = 384
RADIUS = 0.5
CLUSTER = 80


def _corpus(n: int, seed: int = 0) -> np.ndarray:
    rng = RandomSource.seeded(seed, f"bench-metrics/{n}")
    n_clusters = max(1, int(0.8 * n) // CLUSTER)
    centres = rng.normal((n_clusters, DIM)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    x = np.empty((n, DIM), dtype=np.float32)
    for start in range(0, n, 8192):
        stop = min(n, start + 8192)
        rows = np.arange(start, stop)
        noise = rng.normal((stop - start, DIM)).astype(np.float32)
        noise /= np.linalg.norm(noise, axis=1, keepdims=True)
        clustered = rows < n_clusters * CLUSTER
        base = np.where(clustered[:, None], centres[np.minimum(rows // CLUSTER, n_clusters - 1)], 0)
        # clustered: centre + 0.15·(random unit) -> pairwise distance ~0.21; isolated: random unit
        chunk = np.where(clustered[:, None], base + 0.15 * noise, noise)
        x[start:stop] = chunk / np.linalg.norm(chunk, axis=1, keepdims=True)
    return x


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _check_counts(counts: np.ndarray, n: int) -> None:
    n_clustered = (int(0.8 * n) // CLUSTER) * CLUSTER
    # each pair is counted for both ends; cluster members see their whole cluster
    assert counts.sum() % 2 == 0
    assert (counts[:n_clustered] >= CLUSTER - 1).all()
    assert (counts[n_clustered:] <= 1).all()


@pytest.mark.benchmark(group="metrics-neighbour_counts")
@pytest.mark.parametrize("n", [2_000, 10_000])
def test_neighbour_counts(benchmark: Any, n: int) -> None:
    x = _corpus(n)
    counts = benchmark(neighbour_counts, x, RADIUS)
    benchmark.extra_info.update(n=n, d=DIM, cores=_cores())
    _check_counts(counts, n)
    if n <= 2_000:  # float64 brute force is cheap here
        d2 = np.einsum("ij,ij->i", x.astype(np.float64), x.astype(np.float64))
        gram = x.astype(np.float64) @ x.astype(np.float64).T
        dist2 = d2[:, None] + d2[None, :] - 2 * gram
        np.fill_diagonal(dist2, np.inf)
        brute = (dist2 <= RADIUS**2).sum(axis=1)
        # a pair within 1e-9 of the boundary could differ between the formulas; there are none
        assert (np.abs(dist2 - RADIUS**2) > 1e-9).all()
        assert (counts == brute).all()


@pytest.mark.heavy
@pytest.mark.benchmark(group="metrics-neighbour_counts")
@pytest.mark.parametrize("n", [100_000])
def test_neighbour_counts_heavy(benchmark: Any, n: int) -> None:
    """N = 100,000, d = 384: the paper-scale frequency labelling (target: a few minutes, 2 cores)."""
    x = _corpus(n)
    counts = benchmark.pedantic(neighbour_counts, args=(x, RADIUS), rounds=1, iterations=1)
    benchmark.extra_info.update(n=n, d=DIM, cores=_cores(), pairs=n * (n - 1) // 2)
    _check_counts(counts, n)


@pytest.mark.benchmark(group="metrics-nearest_distances")
@pytest.mark.parametrize("n", [2_000, 10_000])
def test_nearest_distances(benchmark: Any, n: int) -> None:
    x = _corpus(n)
    queries = x[: max(1, n // 10)] + np.float32(0.01)
    dist = benchmark(nearest_distances, queries, x)
    benchmark.extra_info.update(n=n, queries=queries.shape[0], d=DIM, cores=_cores())
    assert dist.shape == (queries.shape[0],)
    assert (dist <= 0.01 * math.sqrt(DIM) + 1e-6).all()
