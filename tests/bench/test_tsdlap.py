"""Benchmarks: TSDLap shift, sampling and the per-level dummy plan (design §4.5).

Timing run: ``pytest tests/bench/test_tsdlap.py --benchmark-enable --benchmark-only``.
"""

from __future__ import annotations

from typing import Any

import pytest

from primitives.dummies.tsdlap import TSDLapDummyGenerator, dummy_submissions, tsdlap_shift
from primitives.randomness import RandomSource


@pytest.mark.benchmark(group="tsdlap")
@pytest.mark.parametrize("size", [1_000, 100_000])
def test_sample(benchmark: Any, size: int) -> None:
    gen = TSDLapDummyGenerator(1.0, 1e-6)
    rng = RandomSource.seeded(1, "bench/tsdlap")
    benchmark.extra_info.update(size=size)
    draws = benchmark(gen.sample, size, rng)
    assert draws.shape == (size,)


@pytest.mark.benchmark(group="tsdlap")
@pytest.mark.parametrize(
    ("epsilon0", "delta0", "sensitivity"), [(1.0, 1e-6, 1), (1.0, 1e-8, 1000), (0.01, 1e-10, 1)]
)
def test_shift(benchmark: Any, epsilon0: float, delta0: float, sensitivity: int) -> None:
    shift = benchmark(tsdlap_shift, epsilon0, delta0, sensitivity)
    assert shift >= sensitivity


@pytest.mark.benchmark(group="tsdlap")
@pytest.mark.parametrize("tau", [10, 100])
def test_dummy_plan_and_submissions(benchmark: Any, tau: int) -> None:
    """S_tag's dummy user: draw the plan and materialize its 32-byte dummy tags."""
    gen = TSDLapDummyGenerator(1.0, 1e-6)
    rng = RandomSource.seeded(2, "bench/plan")

    def run() -> list[bytes]:
        return dummy_submissions(gen.dummy_plan(tau, rng), rng)

    subs = benchmark(run)
    benchmark.extra_info.update(submissions=len(subs), bytes=32 * len(subs))
    assert max(map(subs.count, subs[:1]), default=0) < tau
