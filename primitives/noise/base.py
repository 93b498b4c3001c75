"""The discrete Gaussian sampler interface and the target distribution ``N_Z(0, σ²)`` (CKS20
Def. 1): the pmf, normalizer, variance and bin probabilities that tests compare samplers against,
and the argument checks the samplers share."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from primitives.errors import InvalidParameterError
from primitives.randomness import RandomSource

__all__ = [
    "DiscreteGaussianSampler",
    "check_sigma",
    "check_size",
    "discrete_gaussian_bin_probabilities",
    "discrete_gaussian_normalizer",
    "discrete_gaussian_pmf",
    "discrete_gaussian_variance",
]


@runtime_checkable
class DiscreteGaussianSampler(Protocol):
    """Draws i.i.d. samples of ``N_Z(0, σ²)`` using only the given randomness source: the
    ``discrete_gaussian`` family's contract.

    Factory convention: the registry entry is called with no arguments (``factory()``) once per
    run; the users' DDG encoders and S_tag's top-up noise share the instance.
    """

    name: str

    def sample(self, sigma: float, size: int, rng: RandomSource) -> npt.NDArray[np.int64]:
        """``size`` independent samples of the discrete Gaussian with scale ``sigma`` (>= 0)."""
        ...


def check_sigma(sigma: float | Fraction | int) -> float:
    """Validate a scale parameter: a finite number >= 0 (``bool`` is not a number here)."""
    if isinstance(sigma, bool) or not isinstance(
        sigma, int | float | Fraction | np.integer | np.floating
    ):
        raise InvalidParameterError(
            f"sigma must be a finite number >= 0, got {type(sigma).__name__}"
        )
    value = float(sigma)
    if not math.isfinite(value) or value < 0:
        raise InvalidParameterError(f"sigma must be a finite number >= 0, got {sigma}")
    return value


def check_size(size: int) -> int:
    """Validate a sample count: a non-negative integer."""
    if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 0:
        raise InvalidParameterError(f"size must be an integer >= 0, got {size!r}")
    return int(size)


# Above this scale the Poisson-summation (theta function) forms converge in one or two terms and
# are exact to double precision; below it the direct sum has only a handful of terms.
_DUAL_FROM = 1.0
# exp(−x²/2σ²) underflows double precision beyond ~38.6σ; summing to 40σ loses nothing.
_DIRECT_CUT = 40.0


def _dual_terms(sigma: float) -> npt.NDArray[np.float64]:
    k = np.arange(1, 6, dtype=np.float64)
    return np.exp(-2.0 * math.pi**2 * sigma**2 * k**2)


def discrete_gaussian_normalizer(sigma: float) -> float:
    """``Z(σ) = Σ_x exp(−x²/(2σ²))`` (CKS20 §2; Poisson summation for σ ≥ 1)."""
    s = check_sigma(sigma)
    if s == 0.0:
        return 1.0
    if s >= _DUAL_FROM:
        # Σ_x ρ(x) = σ√(2π) Σ_k exp(−2π²σ²k²): the dual series, whose k ≥ 1 terms are < 3e-9.
        return s * math.sqrt(2.0 * math.pi) * (1.0 + 2.0 * float(_dual_terms(s).sum()))
    x = np.arange(1, math.ceil(_DIRECT_CUT * s) + 2, dtype=np.float64)
    return 1.0 + 2.0 * float(np.exp(-(x**2) / (2.0 * s * s)).sum())


def discrete_gaussian_pmf(x: npt.ArrayLike, sigma: float) -> npt.NDArray[np.float64]:
    """``P[X = x]`` for ``X ~ N_Z(0, σ²)``, elementwise (``x`` integers; σ = 0 is a point mass)."""
    s = check_sigma(sigma)
    xs = np.asarray(x, dtype=np.float64)
    if s == 0.0:
        point: npt.NDArray[np.float64] = (xs == 0).astype(np.float64)
        return point
    out: npt.NDArray[np.float64] = np.exp(-(xs**2) / (2.0 * s * s)) / discrete_gaussian_normalizer(
        s
    )
    return out


def discrete_gaussian_variance(sigma: float) -> float:
    """``Var[X]`` for ``X ~ N_Z(0, σ²)``; below ``σ²``, equal to it to double precision for σ ≳ 2.

    For σ ≥ 1 by Poisson summation of ``x² exp(−x²/2σ²)`` (whose Fourier transform is
    ``σ√(2π)(σ² − 4π²σ⁴ξ²) exp(−2π²σ²ξ²)``); below by the direct sum.
    """
    s = check_sigma(sigma)
    if s == 0.0:
        return 0.0
    if s >= _DUAL_FROM:
        k = np.arange(1, 6, dtype=np.float64)
        e = _dual_terms(s)
        num = 1.0 + 2.0 * float(((1.0 - 4.0 * math.pi**2 * s * s * k**2) * e).sum())
        return s * s * num / (1.0 + 2.0 * float(e.sum()))
    x = np.arange(1, math.ceil(_DIRECT_CUT * s) + 2, dtype=np.float64)
    w = np.exp(-(x**2) / (2.0 * s * s))
    return 2.0 * float((x**2 * w).sum()) / (1.0 + 2.0 * float(w.sum()))


# Direct summation of the cdf is used up to this scale (80σ+1 terms); beyond it the midpoint
# (Euler–Maclaurin) form Φ((a − 1/2)/σ) is accurate to O(1/σ²) ≤ 1e-9 relative.
_DIRECT_CDF_MAX_SIGMA = 16384.0


def _cdf_below(a: npt.NDArray[np.int64], s: float) -> npt.NDArray[np.float64]:
    """``P[X < a]`` for integer ``a``."""
    if s == 0.0:
        return (a > 0).astype(np.float64)
    if s <= _DIRECT_CDF_MAX_SIGMA:
        cut = math.ceil(_DIRECT_CUT * s) + 1
        support = np.arange(-cut, cut + 1, dtype=np.float64)
        cumulative = np.concatenate(([0.0], np.cumsum(np.exp(-(support**2) / (2.0 * s * s)))))
        cumulative /= cumulative[-1]
        index = np.clip(a + cut, 0, 2 * cut + 1)
        out: npt.NDArray[np.float64] = cumulative[index]
        return out
    z = (a.astype(np.float64) - 0.5) / (s * math.sqrt(2.0))
    return np.array([0.5 * math.erfc(-float(v)) for v in z], dtype=np.float64)


def discrete_gaussian_bin_probabilities(
    edges: npt.ArrayLike, sigma: float
) -> npt.NDArray[np.float64]:
    """Masses of the bins ``(−∞, e₀), [e₀, e₁), …, [e_{m−1}, e_m), [e_m, ∞)`` for integer edges.

    Returns ``m + 2`` probabilities summing to 1: the two open tails first and last. Used for
    chi-square goodness-of-fit tests with binned tails.
    """
    s = check_sigma(sigma)
    e = np.asarray(edges)
    if e.ndim != 1 or e.size == 0 or not np.issubdtype(e.dtype, np.integer):
        raise InvalidParameterError(f"edges must be a non-empty 1-D integer array, got {e!r}")
    if np.any(np.diff(e) <= 0):
        raise InvalidParameterError("edges must be strictly increasing")
    cdf = _cdf_below(e.astype(np.int64), s)
    return np.diff(np.concatenate(([0.0], cdf, [1.0])))
