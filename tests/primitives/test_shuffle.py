"""The shuffler: a permutation of its input, uniform over positions, senders stripped (design §5)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from primitives import registry
from primitives.errors import InvalidInputError
from primitives.randomness import RandomSource
from primitives.shuffle import Shuffler, UniformShuffler


@given(st.lists(st.binary(max_size=8), max_size=60), st.integers(0, 2**32))
def test_shuffle_is_a_permutation(items: list[bytes], seed: int) -> None:
    original = list(items)
    out = UniformShuffler().shuffle(items, RandomSource.seeded(seed, "shuffle"))
    assert sorted(out) == sorted(original)
    assert items == original  # the input is left alone
    assert out is not items


@given(st.lists(st.tuples(st.integers(), st.binary(max_size=4)), max_size=40), st.integers(0, 99))
def test_strip_and_shuffle_returns_exactly_the_payloads(
    envelopes: list[tuple[int, bytes]], seed: int
) -> None:
    out = UniformShuffler().strip_and_shuffle(envelopes, RandomSource.seeded(seed))
    assert sorted(out) == sorted(payload for _, payload in envelopes)


def test_strip_and_shuffle_drops_sender_objects() -> None:
    senders = [object() for _ in range(5)]
    out = UniformShuffler().strip_and_shuffle(
        [(s, f"payload-{k}".encode()) for k, s in enumerate(senders)], RandomSource.seeded(1)
    )
    assert all(isinstance(p, bytes) for p in out)
    assert not any(p is s for p in out for s in senders)


def test_strip_and_shuffle_rejects_non_envelopes() -> None:
    with pytest.raises(InvalidInputError, match=r"envelope 1 must be a \(sender, payload\) pair"):
        envelopes: list[object] = [("a", b"x"), b"bare"]
        UniformShuffler().strip_and_shuffle(envelopes, RandomSource.seeded(1))  # type: ignore[arg-type]


def test_shuffle_is_reproducible_when_seeded_and_varies_between_draws() -> None:
    items = list(range(20))
    a = UniformShuffler().shuffle(items, RandomSource.seeded(7))
    assert a == UniformShuffler().shuffle(items, RandomSource.seeded(7))
    rng = RandomSource.seeded(8)
    draws = {tuple(UniformShuffler().shuffle(items, rng)) for _ in range(5)}
    assert len(draws) == 5


def test_positions_are_uniform() -> None:
    """40 000 shuffles of 16 items, two chi-square goodness-of-fit tests against uniform:

    * where item 0 lands: 16 cells, statistic < 44.263, the 0.9999 quantile of chi2(15);
    * where items 0 and 1 land jointly: 16 x 15 = 240 cells (≈ 167 expected each), statistic
      < 328.98, the 0.9999 quantile of chi2(239) — this catches shuffles with a uniform
      marginal but a rigid structure, such as a random rotation.

    Quantiles from scipy.stats.chi2.ppf, computed offline. alpha = 1e-4 per check, 2 checks: a
    fresh seed fails with probability about 2e-4.
    """
    shuffler = UniformShuffler()
    rng = RandomSource.seeded(2024, "shuffle/positions")
    size, trials = 16, 40_000
    first = np.empty(trials, dtype=np.int64)
    second = np.empty(trials, dtype=np.int64)
    items = list(range(size))
    for t in range(trials):
        out = shuffler.shuffle(items, rng)
        first[t], second[t] = out.index(0), out.index(1)
    counts = np.bincount(first, minlength=size)
    expected = trials / size
    assert float(((counts - expected) ** 2 / expected).sum()) < 44.263
    assert not np.any(first == second)
    # Joint cell of (p0, p1) with p1 != p0, indexed 0..239.
    cells = first * (size - 1) + np.where(second > first, second - 1, second)
    joint = np.bincount(cells, minlength=size * (size - 1))
    expected = trials / (size * (size - 1))
    assert float(((joint - expected) ** 2 / expected).sum()) < 328.98


def test_registry_and_protocol_conformance() -> None:
    shuffler = registry.create("shuffler", "uniform")
    assert isinstance(shuffler, UniformShuffler) and isinstance(shuffler, Shuffler)
    assert shuffler.name == "uniform"
    assert shuffler.shuffle([], RandomSource.seeded(0)) == []
