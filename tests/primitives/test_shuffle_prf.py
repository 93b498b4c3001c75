"""The PRF-sort shuffler: registered, a pure function of its key, and conformant (the suite's
permutation and uniformity properties)."""

from __future__ import annotations

import numpy as np

from fre_protocol.testing import conformance
from primitives import registry
from primitives.randomness import RandomSource
from primitives.shuffle_prf import PrfSortShuffler, prf_permutation


def test_registered_and_conforms() -> None:
    assert isinstance(registry.create("shuffler", "prf-sort"), PrfSortShuffler)
    report = conformance.check("shuffler", "prf-sort")
    assert report.ok, "\n".join(report.lines())


def test_the_order_is_a_function_of_the_key_and_size() -> None:
    key = bytes(range(32))
    a = prf_permutation(key, 1000)
    assert np.array_equal(a, prf_permutation(key, 1000))
    assert sorted(a.tolist()) == list(range(1000))
    assert not np.array_equal(a, prf_permutation(bytes(32), 1000))
    items = list(range(50))
    assert PrfSortShuffler().shuffle(items, RandomSource.seeded(4)) == PrfSortShuffler().shuffle(items, RandomSource.seeded(4))


def test_small_batches() -> None:
    rng = RandomSource.seeded(1)
    assert PrfSortShuffler().shuffle([], rng) == []
    assert PrfSortShuffler().shuffle(["x"], rng) == ["x"]
