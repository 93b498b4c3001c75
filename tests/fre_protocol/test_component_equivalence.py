"""Seeded-mode equivalence of the second implementations (issue 33): a round run with a new
component releases what the defaults release — the same tags with the same counts, and centroids
within the DDG quantization bound of the defaults' (both runs quantize; with noise off and the
same seeds they come out identical, since channels and shufflers move no coin of the encoder)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fre_protocol.drivers.inprocess import run_protocol
from fre_protocol.roles.base import TOPUP
from fre_protocol.roles.config import ProtocolConfig, RoundSpec
from mechanism.params import FreParams
from mechanism.population import synthetic_population
from mechanism.release import Release
from mechanism.seeds import SeedPlan
from primitives.ddg import DDGConfig, DDGEncoder
from primitives.randomness import RandomSource

NEW = [{"channel": "hpke"}, {"shuffler": "prf-sort"}, {"secret_sharing": "additive-prime-field"}]


def _round(x: Any, components: dict[str, str] | None, **kwargs: Any) -> Release:
    spec = RoundSpec(params=FreParams.paper(8.0), seeds=SeedPlan.from_seed(33), components=components, **{"noise": False, **kwargs})
    return run_protocol(x, spec).release


@pytest.fixture(scope="module")
def population() -> Any:
    # Three tight clusters of 240 (they clear the threshold) and scattered rare points.
    return synthetic_population(3, 240, 60, 16, 0.5, RandomSource.seeded(33, "components/population"), spread=0.02).embeddings


@pytest.fixture(scope="module")
def baseline(population: Any) -> Release:
    release = _round(population, None)
    assert len(release.ids) >= 2
    return release


@pytest.mark.parametrize("components", NEW, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_new_components_release_what_the_defaults_release(population: Any, baseline: Release, components: dict[str, str]) -> None:
    got = _round(population, components)
    header = got.info["components"]
    assert all(header[family] == name for family, name in components.items())
    assert baseline.info["components"] != header
    assert list(got.ids) == list(baseline.ids)
    assert got.counts.tolist() == baseline.counts.tolist()
    encoder = DDGEncoder(DDGConfig.from_dict(got.info["ddg"]))
    for a, b, n in zip(got.centroids, baseline.centroids, got.counts.tolist(), strict=True):
        assert float(np.linalg.norm(a - b)) <= 2 * encoder.quantization_bound(n) / n + 1e-12
    # Observed: identical, not just within the bound (no encoder coin depends on these families).
    assert np.array_equal(np.asarray(got.centroids), np.asarray(baseline.centroids))


def test_prime_field_sharing_with_noise_dropouts_and_top_up(population: Any) -> None:
    """GF(2^61 - 1) carrying the ring (design §5) end to end where the field sum is most at risk:
    DDG noise on, a fifth of the participants dropping out and S_tag topping up their noise (a
    signed addition to its aggregate share). Same seeds, so the users encode the same integers and
    S_tag draws the same top-up: the release equals the ring's exactly."""
    kwargs = {"noise": True, "dropout": 0.2, "config": ProtocolConfig(dropout_policy=TOPUP)}
    ring = _round(population, None, **kwargs)
    field = _round(population, {"secret_sharing": "additive-prime-field"}, **kwargs)
    assert field.info["components"]["secret_sharing"] == "additive-prime-field"
    assert field.info["topped_up"] and field.info["topped_up"] == ring.info["topped_up"], "the run must exercise the top-up"
    assert list(field.ids) == list(ring.ids) and field.counts.tolist() == ring.counts.tolist()
    assert np.array_equal(np.asarray(field.centroids), np.asarray(ring.centroids))


def test_a_bucket_larger_than_the_fields_capacity_is_refused_before_phase_2(
    population: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GF(p) sums of lifted ring values are the ring sum only while a bucket's contributions (and
    S_tag's one top-up summand) stay within the field's capacity (2^29 at b = 32): past it the
    servers refuse before any share is sent, naming the numbers. Stood in for by a capacity of 10."""
    from primitives.errors import InvalidParameterError
    from primitives.sharing import prime_field

    monkeypatch.setattr(prime_field, "MIN_CAPACITY", 1)  # the constructor's own floor, 2^20 by default
    monkeypatch.setattr(prime_field.AdditivePrimeField, "capacity", property(lambda self: 10))
    with pytest.raises(InvalidParameterError, match="sums at most 10 contributions per bucket, but the largest"):
        _round(population, {"secret_sharing": "additive-prime-field"})
