"""The float fingerprint of known-answer tests: blind to last-bit differences, not to real ones."""

from __future__ import annotations

import numpy as np
import pytest
from fingerprint import assert_matches, fingerprint


def _release_like(x: np.ndarray) -> dict[str, object]:
    return {"ids": np.arange(5), "centroids": x, "ledger": {"sigma": 1.25, "epsilon": float("inf")}, "name": "r"}


def test_a_last_bit_difference_matches_and_a_real_one_does_not() -> None:
    x = np.random.default_rng(3).standard_normal((40, 16))
    expected = fingerprint(_release_like(x))
    # what another CPU's kernels do: a unit in the last place (the releases' sums moved by up to 2e-8
    # with numpy held to SSE, NPY_DISABLE_CPU_FEATURES=X86_V3, against 1e-6 allowed)
    assert_matches(fingerprint(_release_like(np.nextafter(x, np.inf))), expected)
    changed = x.copy()
    changed[7, 3] += 1e-3
    with pytest.raises(AssertionError, match="float sums differ"):
        assert_matches(fingerprint(_release_like(changed)), expected)
    with pytest.raises(AssertionError, match="float sums differ"):  # the same values in another order
        assert_matches(fingerprint(_release_like(x[::-1].copy())), expected)


def test_integers_shapes_and_non_finite_values_are_exact() -> None:
    x = np.random.default_rng(4).standard_normal((10, 4))
    expected = fingerprint(_release_like(x))
    other_ids = {**_release_like(x), "ids": np.arange(1, 6)}
    reshaped = _release_like(x.reshape(4, 10))
    finite = {**_release_like(x), "ledger": {"sigma": 1.25, "epsilon": 8.0}}
    for doc in (other_ids, reshaped, finite):
        with pytest.raises(AssertionError, match="exact content differs"):
            assert_matches(fingerprint(doc), expected)
