"""Aug-PE's DP core: the accountant against the Gaussian-DP closed form, the vote histogram
against brute force, the noise against its σ, and rank selection."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from mechanism.augpe import (
    AUGPE_HISTOGRAMS,
    augpe_delta,
    augpe_ledger,
    augpe_mu,
    augpe_noise_multiplier,
    dp_histogram,
    nearest_neighbour_histogram,
    rank_select,
)
from mechanism.ledger import PrivacyLedger
from primitives.analytic_gaussian import agm_multiplier
from primitives.errors import InfeasibleBudgetError, InvalidInputError, InvalidParameterError
from primitives.randomness import RandomSource


def gdp_delta(epsilon: float, mu: float) -> float:
    """Dong, Roth & Su's μ-GDP curve, written out with scipy, independent of the module."""
    return float(
        stats.norm.cdf(-epsilon / mu + mu / 2) - math.exp(epsilon) * stats.norm.cdf(-epsilon / mu - mu / 2)
    )


# -- the accountant -------------------------------------------------------------------------------
@pytest.mark.parametrize("iterations", [1, 2, 5, 10, 20, 50])
@pytest.mark.parametrize(("epsilon", "delta"), [(1.0, 1e-5), (4.0, 1e-6), (16.0, 1e-6)])
def test_noise_multiplier_meets_the_gdp_curve_exactly(epsilon: float, delta: float, iterations: int) -> None:
    """σ = √T·m*(ε, δ) puts the T-fold composition on the GDP curve: δ(ε) at μ = √T/σ equals the
    target δ, and 0.1% less noise overshoots it (σ is the smallest)."""
    sigma = augpe_noise_multiplier(epsilon, delta, iterations)
    assert sigma == pytest.approx(math.sqrt(iterations) * agm_multiplier(epsilon, delta), rel=1e-15)
    mu = math.sqrt(iterations) / sigma
    assert gdp_delta(epsilon, mu) == pytest.approx(delta, rel=1e-6)
    assert gdp_delta(epsilon, math.sqrt(iterations) / (0.999 * sigma)) > delta
    assert augpe_delta(epsilon, sigma, iterations) == pytest.approx(gdp_delta(epsilon, mu), rel=1e-9)
    assert augpe_mu(sigma, iterations) == pytest.approx(mu)


def test_t_releases_equal_one_release_with_sigma_over_root_t() -> None:
    """T releases at σ cost what one release at σ/√T costs, for any ε."""
    for eps in (0.5, 2.0, 8.0):
        assert augpe_delta(eps, 6.0, 9) == pytest.approx(augpe_delta(eps, 2.0, 1), rel=1e-12)


def test_noise_multiplier_is_monotone() -> None:
    """More iterations, smaller ε or smaller δ need more noise."""
    by_t = [augpe_noise_multiplier(4.0, 1e-6, t) for t in (1, 2, 5, 10, 20)]
    assert all(a < b for a, b in zip(by_t, by_t[1:], strict=False))
    by_eps = [augpe_noise_multiplier(e, 1e-6, 20) for e in (1.0, 2.0, 4.0, 8.0, 16.0)]
    assert all(a > b for a, b in zip(by_eps, by_eps[1:], strict=False))
    by_delta = [augpe_noise_multiplier(4.0, d, 20) for d in (1e-8, 1e-6, 1e-4)]
    assert all(a > b for a, b in zip(by_delta, by_delta[1:], strict=False))


def test_infinite_epsilon_is_noise_free() -> None:
    assert augpe_noise_multiplier(math.inf, 1e-6, 20) == 0.0
    ledger = augpe_ledger(math.inf, 1e-6, 20)
    assert ledger.sigma == 0.0 and math.isinf(ledger.epsilon) and ledger.delta == 0.0
    assert augpe_delta(4.0, 0.0, 3) == 1.0


def test_ledger_names_its_source_and_round_trips() -> None:
    ledger = augpe_ledger(4.0, 1e-6, 20)
    term = ledger.term(AUGPE_HISTOGRAMS)
    assert "GDP" in term.source and "Xie" in term.source
    assert ledger.sigma == pytest.approx(augpe_noise_multiplier(4.0, 1e-6, 20))
    assert term.detail["iterations"] == 20
    assert term.detail["delta_achieved"] <= 1e-6 * (1 + 1e-9)
    assert (ledger.epsilon, ledger.delta) == (4.0, 1e-6)
    assert PrivacyLedger.from_dict(ledger.to_dict()) == ledger


def test_ledger_rejects_too_little_noise() -> None:
    sigma = augpe_noise_multiplier(4.0, 1e-6, 20)
    assert augpe_ledger(4.0, 1e-6, 20, 2 * sigma).term(AUGPE_HISTOGRAMS).detail["calibrated"] is False
    with pytest.raises(InfeasibleBudgetError, match="above the target delta"):
        augpe_ledger(4.0, 1e-6, 20, 0.9 * sigma)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((0.0, 1e-6, 5), "epsilon must be > 0"),
        ((-1.0, 1e-6, 5), "epsilon must be > 0"),
        ((1.0, 0.0, 5), "delta must be in"),
        ((1.0, 1.0, 5), "delta must be in"),
        ((1.0, 1e-6, 0), "iterations must be an integer >= 1"),
        ((1.0, 1e-6, 2.5), "iterations must be an integer >= 1"),
    ],
)
def test_accountant_rejects_bad_parameters(args: tuple[float, float, int], match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        augpe_noise_multiplier(*args)


# -- the vote histogram -----------------------------------------------------------------------------
def _brute_force_votes(private: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    d2 = ((private[:, None, :].astype(np.float64) - candidates[None, :, :]) ** 2).sum(axis=2)
    return np.bincount(d2.argmin(axis=1), minlength=candidates.shape[0])


@pytest.mark.parametrize("block", [5, 64, 4096])
def test_histogram_equals_brute_force(block: int) -> None:
    rng = RandomSource.seeded(1, "augpe/hist")
    private = rng.normal((300, 12)).astype(np.float32)
    candidates = rng.normal((41, 12)).astype(np.float32)
    counts = nearest_neighbour_histogram(private, candidates, block=block)
    assert counts.dtype == np.int64 and counts.shape == (41,)
    np.testing.assert_array_equal(counts, _brute_force_votes(private, candidates))
    assert counts.sum() == 300


def test_histogram_gives_a_candidate_its_own_points() -> None:
    candidates = np.eye(4, dtype=np.float32)
    private = np.repeat(candidates, [3, 0, 1, 5], axis=0) * 0.9
    np.testing.assert_array_equal(nearest_neighbour_histogram(private, candidates), [3, 0, 1, 5])


def test_histogram_rejects_bad_shapes() -> None:
    with pytest.raises(InvalidInputError, match="private"):
        nearest_neighbour_histogram(np.zeros((0, 3)), np.zeros((2, 3)))
    with pytest.raises(InvalidInputError, match="candidates"):
        nearest_neighbour_histogram(np.zeros((2, 3)), np.zeros(3))
    with pytest.raises(InvalidInputError, match="same dimension"):
        nearest_neighbour_histogram(np.zeros((2, 3)), np.zeros((2, 4)))


def test_dp_histogram_noise_has_the_accountants_sigma() -> None:
    """Noise = released − clean counts over M = 20,000 bins at the σ of (ε=4, δ=1e-6, T=20).

    Tests: the variance by the two-sided χ² test of (M−1)s²/σ² against χ²(M−1), the mean by a
    two-sided z-test, normality by Kolmogorov–Smirnov against N(0, σ²); each at α = 1e-4, so a
    fresh seed fails with probability at most 3e-4 (the seed is fixed: the test is deterministic).
    """
    sigma = augpe_noise_multiplier(4.0, 1e-6, 20)
    rng = RandomSource.seeded(2, "augpe/noise")
    candidates = rng.normal((20_000, 3)).astype(np.float32)
    private = candidates[:500] + np.float32(1e-3)
    clean = nearest_neighbour_histogram(private, candidates)
    noise = dp_histogram(private, candidates, sigma, RandomSource.seeded(3, "augpe/noise")) - clean
    m = noise.size
    alpha = 1e-4
    chi2 = (m - 1) * noise.var(ddof=1) / sigma**2
    assert stats.chi2.ppf(alpha / 2, m - 1) < chi2 < stats.chi2.ppf(1 - alpha / 2, m - 1)
    assert abs(noise.mean()) / (sigma / math.sqrt(m)) < stats.norm.ppf(1 - alpha / 2)
    assert stats.kstest(noise / sigma, "norm").pvalue > alpha


def test_dp_histogram_without_noise_is_the_count_and_is_seed_reproducible() -> None:
    rng = RandomSource.seeded(4, "augpe/repro")
    private = rng.normal((50, 5))
    candidates = rng.normal((9, 5))
    clean = nearest_neighbour_histogram(private, candidates)
    np.testing.assert_array_equal(dp_histogram(private, candidates, 0.0, rng), clean)
    a = dp_histogram(private, candidates, 2.0, RandomSource.seeded(5, "x"))
    b = dp_histogram(private, candidates, 2.0, RandomSource.seeded(5, "x"))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, clean)
    with pytest.raises(InvalidParameterError, match="sigma"):
        dp_histogram(private, candidates, -1.0, rng)


# -- rank selection ------------------------------------------------------------------------------------
def test_rank_select_keeps_the_top_counts_highest_first() -> None:
    counts = np.array([0.5, 3.0, -1.0, 2.0, 7.5, 2.5])
    np.testing.assert_array_equal(rank_select(counts, 3), [4, 1, 5])
    np.testing.assert_array_equal(rank_select(counts, 6), [4, 1, 5, 3, 0, 2])


def test_rank_select_breaks_ties_towards_the_lower_index() -> None:
    counts = np.array([1.0, 2.0, 2.0, 1.0, 2.0])
    np.testing.assert_array_equal(rank_select(counts, 2), [1, 2])
    np.testing.assert_array_equal(rank_select(counts, 4), [1, 2, 4, 0])


def test_rank_select_against_a_full_sort() -> None:
    rng = RandomSource.seeded(6, "augpe/rank")
    counts = np.round(rng.normal(1000) * 3)  # many ties
    keep = rank_select(counts, 100)
    expected = sorted(range(1000), key=lambda i: (-counts[i], i))[:100]
    np.testing.assert_array_equal(keep, expected)


@pytest.mark.parametrize("n_keep", [0, 5, 2.0, True])
def test_rank_select_rejects_bad_n_keep(n_keep: object) -> None:
    with pytest.raises(InvalidParameterError, match="n_keep"):
        rank_select(np.ones(4), n_keep)  # type: ignore[arg-type]


def test_rank_select_rejects_nan() -> None:
    with pytest.raises(InvalidInputError, match="NaN"):
        rank_select(np.array([1.0, np.nan]), 1)
