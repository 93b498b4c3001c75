"""Exact discrete Gaussian sampling with rational arithmetic (Canonne, Kamath, Steinke 2020).

CKS20 Alg. 1 draws ``Bernoulli(exp(−γ))`` for rational γ from ``Bernoulli(γ/k)`` coins (von
Neumann's trick), Alg. 2 draws a discrete Laplace variable from those and uniform integers, and
Alg. 3 turns discrete Laplace proposals into exact ``N_Z(0, σ²)`` samples by rejection. No floating
point touches the output distribution: ``σ²`` is a :class:`fractions.Fraction`, every probability
is a ratio of Python integers, and every coin is an exact uniform integer built from the
RandomSource's 64-bit words by rejection (no modulo bias).

This is the sampler to use where exactness matters (audits, small batches, known answers); it runs
at tens of thousands of samples per second. :class:`primitives.noise.fast.FastDiscreteGaussian` is
the vectorized counterpart.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from primitives.errors import InvalidParameterError
from primitives.noise.base import check_sigma, check_size
from primitives.randomness import RandomSource

_WORD = 1 << 64


class ExactCoins:
    """Exact uniform integers below any bound, from a RandomSource's 64-bit words.

    Words are fetched in blocks so the Python-level loops of the exact sampler do not pay one
    AES call per coin; the stream consumed is still a deterministic function of the source.
    """

    __slots__ = ("_rng", "_block", "_words", "_next")

    def __init__(self, rng: RandomSource, block: int = 512) -> None:
        self._rng = rng
        self._block = block
        self._words: list[int] = []
        self._next = 0

    def word(self) -> int:
        """One uniform integer in ``[0, 2^64)``."""
        if self._next == len(self._words):
            self._words = [int(w) for w in self._rng.uint64(self._block)]
            self._next = 0
        w = self._words[self._next]
        self._next += 1
        return w

    def below(self, bound: int) -> int:
        """Uniform on ``{0, …, bound − 1}`` exactly: draw ``k`` words, reject the biased top."""
        if bound < 1:
            raise InvalidParameterError(f"bound must be >= 1, got {bound}")
        if bound == 1:
            return 0
        words = (bound.bit_length() + 63) // 64
        span = 1 << (64 * words)
        limit = span - span % bound  # accept draws < limit: each residue equally often
        while True:
            draw = 0
            for _ in range(words):
                draw = (draw << 64) | self.word()
            if draw < limit:
                return draw % bound

    def bernoulli(self, numerator: int, denominator: int) -> bool:
        """``Bernoulli(numerator/denominator)`` exactly (0 <= numerator <= denominator)."""
        if numerator >= denominator:
            return True
        if numerator <= 0:
            return False
        return self.below(denominator) < numerator


def _bernoulli_exp_at_most_one(coins: ExactCoins, num: int, den: int) -> bool:
    """CKS20 Alg. 1: ``Bernoulli(exp(−γ))`` for ``γ = num/den ∈ [0, 1]``.

    Count how many successive ``Bernoulli(γ/k)`` coins (k = 1, 2, …) succeed; the parity of the
    stopping index is odd with probability exactly ``Σ_j (−γ)^j / j! = exp(−γ)``.
    """
    k = 1
    while coins.bernoulli(num, den * k):
        k += 1
    return k % 2 == 1


def bernoulli_exp(coins: ExactCoins, num: int, den: int) -> bool:
    """``Bernoulli(exp(−num/den))`` for any rational ``num/den >= 0`` (CKS20 Alg. 1 and §5.1).

    For γ > 1 the event is the conjunction of ⌊γ⌋ independent ``Bernoulli(e⁻¹)`` coins and one
    ``Bernoulli(exp(−(γ − ⌊γ⌋)))`` coin; it stops at the first failure.
    """
    if num < 0 or den <= 0:
        raise InvalidParameterError(f"gamma must be a rational >= 0, got {num}/{den}")
    while num > den:
        if not _bernoulli_exp_at_most_one(coins, 1, 1):
            return False
        num -= den
    return _bernoulli_exp_at_most_one(coins, num, den)


def discrete_laplace(coins: ExactCoins, scale: int) -> int:
    """CKS20 Alg. 2 with ``s = 1``: ``P[Y = y] ∝ exp(−|y|/t)`` for the integer scale ``t``.

    ``|Y| = U + t·V`` with ``U`` uniform on ``{0..t−1}`` accepted with probability ``exp(−U/t)``
    and ``V`` geometric with parameter ``e⁻¹``; a random sign, with ``−0`` rejected so that zero is
    not counted twice.
    """
    t = scale
    while True:
        u = coins.below(t)
        if not bernoulli_exp(coins, u, t):
            continue
        v = 0
        while bernoulli_exp(coins, 1, 1):
            v += 1
        magnitude = u + t * v
        negative = coins.below(2) == 1
        if negative and magnitude == 0:
            continue
        return -magnitude if negative else magnitude


def discrete_gaussian(coins: ExactCoins, sigma_squared: Fraction) -> int:
    """CKS20 Alg. 3: one exact sample of ``N_Z(0, σ²)`` for rational ``σ² > 0``.

    Proposal: discrete Laplace with integer scale ``t = ⌊σ⌋ + 1``; accept ``Y`` with probability
    ``exp(−(|Y| − σ²/t)² / (2σ²))``. Expected proposals per sample are below 1.6 for all σ.
    """
    sn, sd = sigma_squared.numerator, sigma_squared.denominator
    t = math.isqrt(sn // sd) + 1  # ⌊√(sn/sd)⌋ = ⌊√⌊sn/sd⌋⌋: exact floor of σ, plus one
    two_variance_den = 2 * sn * sd * t * t
    while True:
        y = discrete_laplace(coins, t)
        # (|y| − σ²/t)² / (2σ²) = (|y|·sd·t − sn)² / (2·sn·sd·t²), all integers.
        num = (abs(y) * sd * t - sn) ** 2
        g = math.gcd(num, two_variance_den)
        if bernoulli_exp(coins, num // g, two_variance_den // g):
            return y


def _as_fraction(sigma: float | Fraction | int) -> Fraction:
    check_sigma(sigma)
    if isinstance(sigma, Fraction):
        return sigma
    if isinstance(sigma, int | np.integer):
        return Fraction(int(sigma))
    return Fraction(float(sigma))  # the exact binary value of the float


class ExactDiscreteGaussian:
    """``N_Z(0, σ²)`` exactly (CKS20 Alg. 3), σ given as a float (taken at its exact binary
    value), an int or a Fraction. Registry name ``"cks-exact"``."""

    name = "cks-exact"

    def sample(
        self, sigma: float | Fraction | int, size: int, rng: RandomSource
    ) -> npt.NDArray[np.int64]:
        """``size`` exact samples with scale ``sigma``; the coins come from ``rng`` only."""
        s = _as_fraction(sigma)
        n = check_size(size)
        return self.sample_variance(s * s, n, rng)

    def sample_variance(
        self, sigma_squared: Fraction, size: int, rng: RandomSource
    ) -> npt.NDArray[np.int64]:
        """Like :meth:`sample`, with the rational ``σ²`` given directly (e.g. ``Fraction(1, 3)``)."""
        if not isinstance(sigma_squared, Fraction | int) or sigma_squared < 0:
            raise InvalidParameterError(
                f"sigma_squared must be a rational >= 0, got {sigma_squared!r}"
            )
        n = check_size(size)
        out = np.zeros(n, dtype=np.int64)
        if sigma_squared == 0 or n == 0:
            return out
        coins = ExactCoins(rng)
        variance = Fraction(sigma_squared)
        for i in range(n):
            out[i] = discrete_gaussian(coins, variance)
        return out
