"""Binomial probabilities (Loader 2000) and the inversion sampler, against exact rational arithmetic.

References are computed with Python integers: for a dyadic p = a/2^b, P[Bin(n, p) = k] is the
fraction comb(n, k)·a^k·(2^b − a)^(n−k) / 2^(b·n), converted to float from its top 64 bits.
The sampler is checked deterministically: equally spaced uniforms must land on each value as
often as its probability says, to within one point.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from primitives.binomial import (
    binomial_from_uniforms,
    binomial_log_pmf,
    binomial_sf,
    binomial_tail,
)
from primitives.errors import InvalidParameterError


def dyadic_to_float(num: int, den: int) -> float:
    """num/den for den a power of two, from num's top 64 bits (relative error < 2^-63); no long
    division, which is quadratic in the size of million-bit integers."""
    assert den & (den - 1) == 0
    shift = max(0, num.bit_length() - 64)
    return math.ldexp(float(num >> shift), shift - (den.bit_length() - 1))


def exact_pmf(k: int, n: int, p: Fraction) -> float:
    """comb(n, k)·a^k·(d − a)^(n−k) / d^n for a dyadic p = a/d."""
    if not 0 <= k <= n:
        return 0.0
    a, den = p.numerator, p.denominator
    return dyadic_to_float(math.comb(n, k) * a**k * (den - a) ** (n - k), den**n)


def exact_sf(k: int, n: int, p: Fraction) -> float:
    """P[X ≥ k] as one exact integer sum over d^n, rounded once. Terms by the exact integer
    recurrence w_{j+1} = w_j·(n − j)·a / ((j + 1)·(d − a))."""
    a, den = p.numerator, p.denominator
    j = max(k, 0)
    if j > n:
        return 0.0
    w = math.comb(n, j) * a**j * (den - a) ** (n - j)
    total = 0
    while True:
        total += w
        if j == n:
            break
        w = w * (n - j) * a // ((j + 1) * (den - a))
        j += 1
    return dyadic_to_float(total, den**n)


@pytest.mark.parametrize(
    ("n", "p"),
    [
        (1, Fraction(1, 2)),
        (7, Fraction(7, 8)),
        (15, Fraction(3, 8)),
        (16, Fraction(3, 8)),
        (40, Fraction(1, 64)),
        (1000, Fraction(5, 16)),
        (63_000, Fraction(1, 8)),
        (100_000, Fraction(1, 256)),
    ],
)
def test_log_pmf_matches_exact_arithmetic(n: int, p: Fraction) -> None:
    """Relative error below 1e-12 at the ends, the mode and ±1, 3, 6 standard deviations."""
    pf = float(p)
    sd = math.sqrt(n * pf * (1 - pf))
    ks = {0, 1, n - 1, n} | {
        min(n, max(0, round(n * pf + z * sd))) for z in (-6, -3, -1, 0, 1, 3, 6)
    }
    for k in sorted(ks):
        want = exact_pmf(k, n, p)
        if want < 1e-300:  # below float range: only the sign of -inf matters
            continue
        got = math.exp(float(binomial_log_pmf(k, n, pf)))
        assert got == pytest.approx(want, rel=1e-12), (k, n, p)


def test_log_pmf_sums_to_one_and_is_minus_inf_off_support() -> None:
    for n, p in ((0, 0.3), (1, 0.3), (50, 0.3), (200, 0.01), (30, 0.0), (30, 1.0)):
        pmf = np.exp(binomial_log_pmf(np.arange(n + 1), n, p))
        assert pmf.sum() == pytest.approx(1.0, abs=1e-13)
    assert binomial_log_pmf([-1, 11, 2.5], 10, 0.4).tolist() == [-np.inf] * 3
    assert binomial_log_pmf(0, 0, 0.7) == 0.0
    assert binomial_log_pmf(3, 10, 0.0) == -np.inf
    assert binomial_log_pmf(10, 10, 1.0) == 0.0
    # Broadcasting over k, n and p.
    assert binomial_log_pmf(np.arange(3)[:, None], [4, 5], 0.5).shape == (3, 2)


@pytest.mark.parametrize(
    ("n", "p", "m"),
    [
        (1, 0.5, 200_000),
        (7, 0.9, 200_000),
        (30, 0.3, 200_000),
        (5000, 0.02, 50_000),
        (63_000, 0.119, 10_000),
        (20, 1e-9, 1000),
    ],
)
def test_inversion_gives_each_value_its_probability(n: int, p: float, m: int) -> None:
    """M equally spaced uniforms (i + 1/2)/M: inversion maps an interval of length P(k) to k, so
    k is hit P(k)·M times up to ±1 (plus the rounding of the accumulated probabilities)."""
    u = (np.arange(m) + 0.5) / m
    draws = binomial_from_uniforms(n, p, u)
    assert draws.dtype == np.int64 and draws.min() >= 0 and draws.max() <= n
    hits = np.bincount(draws, minlength=n + 1)
    expected = np.exp(binomial_log_pmf(np.arange(n + 1), n, p)) * m
    assert np.max(np.abs(hits - expected)) <= 1.0 + 1e-6 * m


def test_inversion_edges_and_broadcasting() -> None:
    assert binomial_from_uniforms(0, 0.5, 0.99) == 0
    assert binomial_from_uniforms(9, 0.0, 0.99) == 0
    assert binomial_from_uniforms(9, 1.0, 0.0) == 9
    # u just below 1 ends in the far tail, not past it.
    assert binomial_from_uniforms(10, 0.5, np.nextafter(1.0, 0.0)) <= 10
    out = binomial_from_uniforms(np.array([[5], [50]]), [0.1, 0.9], 0.5)
    assert out.shape == (2, 2)
    # u = 0 gives the mode: the enumeration starts there.
    assert binomial_from_uniforms(100, 0.3, 0.0) == 30


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n": -1, "p": 0.5, "u": 0.5}, "n must"),
        ({"n": 2.5, "p": 0.5, "u": 0.5}, "n must"),
        ({"n": True, "p": 0.5, "u": 0.5}, "n must"),
        ({"n": 3, "p": 1.5, "u": 0.5}, "p must"),
        ({"n": 3, "p": float("nan"), "u": 0.5}, "p must"),
        ({"n": 3, "p": 0.5, "u": 1.0}, "u must"),
    ],
)
def test_bad_arguments_rejected(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        binomial_from_uniforms(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("k", "n", "p"),
    [
        (0, 20, Fraction(1, 4)),
        (5, 20, Fraction(1, 4)),
        (15, 20, Fraction(1, 4)),
        (59, 200, Fraction(17, 64)),
        (1200, 10_000, Fraction(1, 8)),
        (1400, 10_000, Fraction(1, 8)),
        (900, 10_000, Fraction(1, 8)),
        (21, 20, Fraction(1, 4)),
    ],
)
def test_tail_and_sf_match_exact_arithmetic(k: int, n: int, p: Fraction) -> None:
    values, pmf = binomial_tail(k, n, float(p))
    assert values.size == pmf.size and (values >= k).all() and (values <= n).all()
    want = exact_sf(k, n, p)
    assert binomial_sf(k, n, float(p)) == pytest.approx(want, rel=1e-12, abs=1e-300)


def test_tail_degenerate_cases() -> None:
    assert binomial_sf(0, 10, 0.3) == pytest.approx(1.0, abs=1e-15)
    assert binomial_sf(-5, 10, 0.3) == pytest.approx(1.0, abs=1e-15)
    assert binomial_sf(1, 10, 0.0) == 0.0
    assert binomial_sf(10, 10, 1.0) == 1.0
    values, pmf = binomial_tail(3, 10, 1.0)
    assert values.tolist() == [10] and pmf.tolist() == [1.0]
    with pytest.raises(InvalidParameterError, match="k must"):
        binomial_sf(1.5, 10, 0.3)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="p must"):
        binomial_sf(1, 10, -0.1)
