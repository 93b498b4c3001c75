"""Helpers of the networked-deployment tests (fixtures live in tests/fre_protocol/drivers/net/conftest.py).

Sizes are chosen for speed: 130 users in 8 dimensions, three tight clusters of 40 and 10 rare
points, released at threshold 20 with ε = ∞ (no sampling, no dummies): three buckets of 32, 40
and 40 users; rare points never clear the threshold.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from mechanism.params import FreParams
from mechanism.population import Population, synthetic_population
from mechanism.seeds import SeedPlan
from primitives.randomness import RandomSource

if TYPE_CHECKING:
    from fre_protocol.drivers.net.round import RoundSettings
    from mechanism.release import Release

SEED = 2024
PARAMS = FreParams.paper(math.inf, threshold=20)
DIM = 8


def needs_net() -> None:
    """Skip the calling module unless the networked deployment's extra is installed."""
    for module in ("starlette", "uvicorn", "httpx"):
        pytest.importorskip(module, reason=f"the networked deployment needs {module} (the 'net' extra)")


def population(clusters: int = 3, size: int = 40, rare: int = 10) -> Population:
    # Spread 0.02 ≪ the bucket edge (≈ 0.22 at r = 0.5, k = 20): a cluster mostly shares a bucket.
    rng = RandomSource.seeded(11, "net/population")
    return synthetic_population(clusters, size, rare, DIM, 0.5, rng, spread=0.02)


def round_settings(round_id: str, *, params: FreParams = PARAMS, noise: bool = False,
                   rng_mode: str = "seeded", **overrides: Any) -> RoundSettings:
    """A round with small windows, so a run of ~100 users forms several batches."""
    from fre_protocol.drivers.net.round import RoundSettings

    overrides.setdefault("window_count", 64)
    overrides.setdefault("window_seconds", 0.1)
    return RoundSettings(
        round_id=round_id, params=params, public_seed=SeedPlan.from_seed(SEED).public_seed,
        rng_mode=rng_mode, dim=DIM, noise=noise, **overrides,
    )


def assert_same_release(got: Release, want: Release) -> None:
    """Same bucket ids, counts and centroids (bit for bit: both paths run the same arithmetic)."""
    assert got.ids == want.ids
    assert got.counts.tolist() == want.counts.tolist()
    np.testing.assert_array_equal(got.centroids, want.centroids)
