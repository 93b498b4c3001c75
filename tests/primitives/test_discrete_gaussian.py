"""Discrete Gaussian samplers against the exact pmf (CKS20), plus the pmf helpers themselves.

Statistical tests use fixed seeds, so the suite is deterministic. Each docstring states the test,
its sample size and its level; a fresh seed would make the whole file fail falsely with
probability below 3e-4 (Bonferroni over all checks listed in the docstrings).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pytest
from chi_square import chi2_sf, z_two_sided

from primitives import registry
from primitives.errors import InvalidParameterError
from primitives.noise import (
    DiscreteGaussianSampler,
    ExactDiscreteGaussian,
    FastDiscreteGaussian,
    discrete_gaussian_bin_probabilities,
    discrete_gaussian_normalizer,
    discrete_gaussian_pmf,
    discrete_gaussian_variance,
)
from primitives.noise.cks_exact import ExactCoins, bernoulli_exp, discrete_laplace
from primitives.noise.fast import TABLE_MAX_SIGMA
from primitives.randomness import RandomSource

ALPHA = 1e-5  # per goodness-of-fit test
Z_CRIT = 5.0  # two-sided normal tail 5.7e-7 per moment check


def test_chi2_sf_matches_textbook_quantiles() -> None:
    # Standard table values: 0.95 quantiles of chi2(1), chi2(10); 0.999 of chi2(19).
    assert chi2_sf(3.841459, 1) == pytest.approx(0.05, rel=1e-5)
    assert chi2_sf(18.307038, 10) == pytest.approx(0.05, rel=1e-5)
    assert chi2_sf(43.820196, 19) == pytest.approx(0.001, rel=1e-4)
    assert chi2_sf(2.0, 2) == pytest.approx(math.exp(-1.0), rel=1e-12)  # chi2(2) is Exp(1/2)


# -- binned goodness of fit ----------------------------------------------------------------------
def _edges(sigma: float) -> npt.NDArray[np.int64]:
    if sigma <= 128.0:  # unit bins: also sees lattice-scale defects (parity, half-integers)
        reach = math.ceil(5.0 * sigma) + 2
        return np.arange(-reach, reach + 2, dtype=np.int64)
    return np.unique(np.rint(np.linspace(-4.5 * sigma, 4.5 * sigma, 41)).astype(np.int64))


def chi_square_pvalue(
    samples: npt.NDArray[np.int64], sigma: float, *, min_expected: float = 20.0
) -> float:
    """Chi-square goodness of fit of integer samples to ``N_Z(0, σ²)`` with binned tails.

    Bins from :func:`_edges` (unit bins up to σ = 128, 40 bins over ±4.5σ above) plus two
    open tails; adjacent bins are merged from the left until each expects ``min_expected``.
    """
    edges = _edges(sigma)
    probs = discrete_gaussian_bin_probabilities(edges, sigma)
    counts = np.bincount(np.searchsorted(edges, samples, side="right"), minlength=probs.size)
    n = samples.size
    merged_p: list[float] = []
    merged_c: list[int] = []
    acc_p, acc_c = 0.0, 0
    for p, c in zip(probs, counts, strict=True):
        acc_p += float(p)
        acc_c += int(c)
        if acc_p * n >= min_expected:
            merged_p.append(acc_p)
            merged_c.append(acc_c)
            acc_p, acc_c = 0.0, 0
    merged_p[-1] += acc_p
    merged_c[-1] += acc_c
    expected = np.asarray(merged_p) * n
    observed = np.asarray(merged_c, dtype=np.float64)
    stat = float(((observed - expected) ** 2 / expected).sum())
    assert len(merged_p) >= 2, "too few bins for a test"
    return chi2_sf(stat, len(merged_p) - 1)


FAST_SIGMAS = [0.5, 1.0, 2.5, 10.0, TABLE_MAX_SIGMA, TABLE_MAX_SIGMA + 0.5, 100.0, 1e3, 1e4, 1e6]
EXACT_SIGMAS = [0.5, 1.0, 2.5, 10.0, 100.0, 1e4]
FAST_N = 200_000
EXACT_N = 6_000


@pytest.mark.parametrize("sigma", FAST_SIGMAS)
def test_fast_sampler_fits_exact_pmf(sigma: float) -> None:
    """Chi-square, 200k samples per σ (10 values of σ, both branches and their boundary), plus a
    residue-mod-7 chi-square for σ >= 100 (4 more), α = 1e-5 each: a fresh seed fails one of
    them with probability <= 1.4e-4."""
    samples = FastDiscreteGaussian().sample(sigma, FAST_N, RandomSource.seeded(11, f"fast/{sigma}"))
    assert samples.dtype == np.int64 and samples.shape == (FAST_N,)
    assert chi_square_pvalue(samples, sigma) > ALPHA
    if sigma >= 100.0:
        # Fine structure where bins are wide: for σ ≫ 7, X mod 7 is uniform up to e^{-2π²σ²/49}.
        cells = np.bincount(samples % 7, minlength=7)
        stat = float(((cells - FAST_N / 7) ** 2 / (FAST_N / 7)).sum())
        assert chi2_sf(stat, 6) > ALPHA


@pytest.mark.parametrize("sigma", EXACT_SIGMAS)
def test_exact_sampler_fits_exact_pmf(sigma: float) -> None:
    """Chi-square, 6000 samples per σ (the exact sampler is slow), 6 values of σ, α = 1e-5 each:
    false failure probability <= 6e-5 for a fresh seed."""
    samples = ExactDiscreteGaussian().sample(
        sigma, EXACT_N, RandomSource.seeded(12, f"exact/{sigma}")
    )
    assert samples.dtype == np.int64 and samples.shape == (EXACT_N,)
    assert chi_square_pvalue(samples, sigma) > ALPHA


def test_exact_sampler_with_rational_variance() -> None:
    """σ² = 1/3 is not the square of any float: the exact sampler takes it as a Fraction.
    Chi-square, 6000 samples, α = 1e-5."""
    samples = ExactDiscreteGaussian().sample_variance(
        Fraction(1, 3), EXACT_N, RandomSource.seeded(13)
    )
    assert chi_square_pvalue(samples, math.sqrt(1.0 / 3.0)) > ALPHA


def test_goodness_of_fit_detects_a_wrong_scale() -> None:
    """Power check of the test above: samples with σ = 10.5 are rejected against the σ = 10 pmf
    (non-centrality ≈ 200k·(0.05)²·2 ≈ 1000, so the p-value is astronomically small)."""
    samples = FastDiscreteGaussian().sample(10.5, FAST_N, RandomSource.seeded(14))
    assert chi_square_pvalue(samples, 10.0) < 1e-12
    shifted = FastDiscreteGaussian().sample(10.0, FAST_N, RandomSource.seeded(14)) + 1
    assert chi_square_pvalue(shifted, 10.0) < 1e-12


def _fourth_moment(sigma: float) -> float:
    if sigma > 1e4:
        return 3.0 * discrete_gaussian_variance(sigma) ** 2
    x = np.arange(-math.ceil(40 * sigma) - 1, math.ceil(40 * sigma) + 2, dtype=np.float64)
    return float((x**4 * discrete_gaussian_pmf(x, sigma)).sum())


@pytest.mark.parametrize(
    ("name", "sigma", "n"),
    [("fast-vectorized", s, FAST_N) for s in (0.5, 3.0, 100.0, 1e5)]
    + [("cks-exact", s, EXACT_N) for s in (0.5, 3.0, 100.0)],
)
def test_mean_and_variance(name: str, sigma: float, n: int) -> None:
    """z-tests at |z| <= 5 (two-sided level 5.7e-7 each, 14 checks) on the sample mean (true mean 0,
    standard error sqrt(Var/n)) and sample variance (standard error sqrt((μ4 − Var²)/n))."""
    sampler: DiscreteGaussianSampler = registry.create("discrete_gaussian", name)
    x = sampler.sample(sigma, n, RandomSource.seeded(15, f"{name}/{sigma}")).astype(np.float64)
    var = discrete_gaussian_variance(sigma)
    assert abs(x.mean()) <= Z_CRIT * math.sqrt(var / n)
    se_var = math.sqrt((_fourth_moment(sigma) - var * var) / n)
    assert abs(x.var() - var) <= Z_CRIT * se_var


def test_fixed_seed_sequences_are_pinned() -> None:
    """Regression vectors: recorded runs must replay. Changing how either sampler consumes the
    RandomSource changes these sequences (and must come with a note in the changelog)."""
    exact = ExactDiscreteGaussian().sample(3.0, 12, RandomSource.seeded(2024, "pin"))
    fast = FastDiscreteGaussian().sample(3.0, 12, RandomSource.seeded(2024, "pin"))
    big = FastDiscreteGaussian().sample(1000.0, 6, RandomSource.seeded(2024, "pin"))
    assert exact.tolist() == EXACT_PIN
    assert fast.tolist() == FAST_PIN
    assert big.tolist() == BIG_PIN


EXACT_PIN = [1, 0, -1, -3, 3, 3, -3, -5, 1, 0, 0, 1]
FAST_PIN = [-1, 2, 1, -2, 1, -4, -1, 2, -5, -1, 0, -5]
BIG_PIN = [911, -1199, -32, 617, 1207, -124]


# -- the exact sampler's building blocks ----------------------------------------------------------
def test_exact_coins_are_uniform_for_small_and_multiword_bounds() -> None:
    """Chi-square on 7 cells (30k draws of below(7)) and on the residue mod 5 of below(2^70 + 3)
    (10k draws; the residue of a uniform value there is uniform up to 2^-67), α = 1e-5 each."""
    coins = ExactCoins(RandomSource.seeded(16))
    small = np.bincount([coins.below(7) for _ in range(30_000)], minlength=7)
    stat = float(((small - 30_000 / 7) ** 2 / (30_000 / 7)).sum())
    assert chi2_sf(stat, 6) > ALPHA
    bound = (1 << 70) + 3
    draws = [coins.below(bound) for _ in range(10_000)]
    assert all(0 <= v < bound for v in draws)
    assert max(draws) > 1 << 68  # the upper words are used
    residues = np.bincount([v % 5 for v in draws], minlength=5)
    stat = float(((residues - 2_000) ** 2 / 2_000).sum())
    assert chi2_sf(stat, 4) > ALPHA


@pytest.mark.parametrize(("num", "den"), [(1, 2), (1, 1), (5, 2), (0, 1), (7, 3)])
def test_bernoulli_exp_frequency(num: int, den: int) -> None:
    """CKS20 Alg. 1: frequency of Bernoulli(exp(−num/den)) over 20k draws within 5 standard errors
    (level 5.7e-7 each)."""
    coins = ExactCoins(RandomSource.seeded(17, f"{num}/{den}"))
    n = 20_000
    hits = sum(bernoulli_exp(coins, num, den) for _ in range(n))
    p = math.exp(-num / den)
    assert abs(hits - n * p) <= Z_CRIT * math.sqrt(n * p * (1 - p)) + 1e-9


def test_discrete_laplace_fits_its_pmf() -> None:
    """CKS20 Alg. 2 with t = 3: chi-square against P[y] ∝ exp(−|y|/3) on |y| <= 15 plus two tails,
    20k draws, α = 1e-5."""
    coins = ExactCoins(RandomSource.seeded(18))
    draws = np.array([discrete_laplace(coins, 3) for _ in range(20_000)])
    r = math.exp(-1.0 / 3.0)
    support = np.arange(-15, 16)
    pmf = (1 - r) / (1 + r) * r ** np.abs(support)
    tail = (1.0 - pmf.sum()) / 2.0
    probs = np.concatenate(([tail], pmf, [tail]))
    counts = np.bincount(np.clip(draws, -16, 16) + 16, minlength=33)
    expected = probs * draws.size
    stat = float(((counts - expected) ** 2 / expected).sum())
    assert chi2_sf(stat, 32) > ALPHA


# -- pmf helpers -----------------------------------------------------------------------------------
@pytest.mark.parametrize("sigma", [0.3, 1.0, 1.7, 5.0, 40.0])
def test_pmf_helpers_match_direct_sums(sigma: float) -> None:
    reach = math.ceil(40 * sigma) + 1
    terms = [math.exp(-(x * x) / (2 * sigma * sigma)) for x in range(-reach, reach + 1)]
    z = math.fsum(terms)
    var = math.fsum(x * x * t for x, t in zip(range(-reach, reach + 1), terms, strict=True)) / z
    assert discrete_gaussian_normalizer(sigma) == pytest.approx(z, rel=1e-13)
    assert discrete_gaussian_variance(sigma) == pytest.approx(var, rel=1e-12)
    assert discrete_gaussian_pmf([0, 1, -3], sigma) == pytest.approx(
        [1 / z, terms[reach + 1] / z, terms[reach - 3] / z], rel=1e-12
    )


def test_variance_is_below_sigma_squared_and_converges() -> None:
    assert discrete_gaussian_variance(0.5) < 0.25
    assert discrete_gaussian_variance(3.0) == pytest.approx(9.0, rel=1e-15)
    assert discrete_gaussian_pmf([0, 1], 0.0).tolist() == [1.0, 0.0]


def test_bin_probabilities_are_consistent_across_branches() -> None:
    edges = np.array([-20_000, -5_000, 0, 1, 7_000], dtype=np.int64)
    direct = discrete_gaussian_bin_probabilities(edges, 16_384.0)  # direct summation branch
    midpoint = discrete_gaussian_bin_probabilities(edges, 16_384.000001)  # Φ((a − 1/2)/σ) branch
    assert direct.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.allclose(direct, midpoint, rtol=1e-8, atol=1e-12)
    assert direct[3] == pytest.approx(discrete_gaussian_pmf([0], 16_384.0)[0], rel=1e-9)


# -- interface and errors --------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["cks-exact", "fast-vectorized"])
def test_registry_and_protocol(name: str) -> None:
    sampler = registry.create("discrete_gaussian", name)
    assert isinstance(sampler, DiscreteGaussianSampler)
    assert sampler.name == name
    rng = RandomSource.seeded(19)
    assert sampler.sample(0.0, 5, rng).tolist() == [0] * 5
    assert sampler.sample(2.0, 0, rng).shape == (0,)


@pytest.mark.parametrize("name", ["cks-exact", "fast-vectorized"])
@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, "1", True, None])
def test_bad_sigma_rejected(name: str, bad: object) -> None:
    with pytest.raises(InvalidParameterError, match="sigma"):
        registry.create("discrete_gaussian", name).sample(bad, 3, RandomSource.seeded(1))


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_bad_size_rejected(bad: object) -> None:
    with pytest.raises(InvalidParameterError, match="size"):
        FastDiscreteGaussian().sample(1.0, bad, RandomSource.seeded(1))  # type: ignore[arg-type]


def test_fast_sampler_limits_and_chunking() -> None:
    """Limits, and n = 2^20 + 5 draws (crossing a chunk boundary) at σ = 2 and σ = 500 whose
    sample variance is the discrete Gaussian's: |s²/Var − 1| ≤ z·√(2/n), z the two-sided
    quantile at α = 1e-6 per σ (normal approximation of the variance's law; the discrete
    Gaussian's kurtosis is 3 within 1e-6 at σ ≥ 2). False failure below 2e-6 for a fresh seed."""
    fast = FastDiscreteGaussian()
    with pytest.raises(InvalidParameterError, match="2\\^40"):
        fast.sample(2.0**41, 1, RandomSource.seeded(1))
    assert not fast.sample(1e-3, 10_000, RandomSource.seeded(1)).any()  # P[X≠0] ≈ 2e^-500000
    n = (1 << 20) + 5  # crosses a chunk boundary in both branches
    for sigma in (2.0, 500.0):
        x = fast.sample(sigma, n, RandomSource.seeded(20))
        assert x.shape == (n,) and x.dtype == np.int64
        assert abs(x.var() / discrete_gaussian_variance(sigma) - 1) <= z_two_sided(1e-6) * math.sqrt(2 / n)
    with pytest.raises(InvalidParameterError, match="sigma_squared"):
        ExactDiscreteGaussian().sample_variance(Fraction(-1, 2), 1, RandomSource.seeded(1))
