"""The analytic Gaussian mechanism's exact (ε, δ) curve (Balle & Wang 2018, Theorem 8).

Adding ``N(0, σ²I)`` to a query of L2 sensitivity Δ is (ε, δ)-DP exactly when
``δ ≥ Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ)``. The centralized mechanism calibrates its noise
with it (design §4.3), and the DDG's analytic accountant (design §4.4) bounds the discrete sum by
it. Normal tail probabilities go through ``math.erfc`` (and an asymptotic series far in the tail)
rather than ``1 − Φ``, so deltas of 1e-12 and below keep full relative precision.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

from primitives.errors import InfeasibleBudgetError, InvalidParameterError

_SQRT2 = math.sqrt(2.0)
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def _check_open_unit(name: str, value: float) -> None:
    if not (isinstance(value, int | float) and not isinstance(value, bool) and 0.0 < value < 1.0):
        raise InvalidParameterError(f"{name} must be in (0, 1), got {value!r}")


def _check_positive(name: str, value: float) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
    if not ok or math.isnan(value) or math.isinf(value):
        raise InvalidParameterError(f"{name} must be a finite number > 0, got {value!r}")


def log_normal_cdf(x: float) -> float:
    """ln Φ(x), accurate in the far lower tail (erfc, then an asymptotic series below −30)."""
    if x > -30.0:
        return math.log(0.5 * math.erfc(-x / _SQRT2))
    # Mills ratio: Φ(x) = φ(x)/|x| · (1 − 1/x² + 3/x⁴ − 15/x⁶ + ...), x ≪ 0.
    x2 = x * x
    series = 1.0 - 1.0 / x2 + 3.0 / x2**2 - 15.0 / x2**3 + 105.0 / x2**4
    return -x2 / 2.0 - _LOG_SQRT_2PI - math.log(-x) + math.log(series)


def normal_cdf(x: float) -> float:
    """Φ(x) through erfc: no cancellation in the lower tail."""
    return 0.5 * math.erfc(-x / _SQRT2)


def agm_delta(sigma: float, epsilon: float, sensitivity: float) -> float:
    """Smallest δ for which N(0, σ²I) on an L2-sensitivity-Δ query is (ε, δ)-DP.

    ``Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ)``; the second term is formed as
    ``exp(ε + ln Φ(·))`` so large ε cannot overflow.
    """
    _check_positive("sigma", sigma)
    _check_positive("epsilon", epsilon)
    _check_positive("sensitivity", sensitivity)
    a = sensitivity / (2.0 * sigma)
    b = epsilon * sigma / sensitivity
    first = log_normal_cdf(a - b)
    second = epsilon + log_normal_cdf(-a - b)
    if second >= first:  # only rounding can get here; the true value is >= 0
        return 0.0
    return math.exp(first) * -math.expm1(second - first)


def _least_feasible(lo: float, hi: float, feasible: Callable[[float], bool], rel_tol: float) -> float:
    """Bisect ``[lo, hi]`` (``hi`` feasible, ``lo`` not, feasibility monotone) to ``rel_tol``;
    the upper end, hence always feasible."""
    while hi - lo > rel_tol * hi:
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            break
        if feasible(mid):
            hi = mid
        else:
            lo = mid
    return hi


# Pure functions of a few floats that accountants call many times with the same arguments (one
# call per bucket count per noise plan): each bisection is kept.
@functools.lru_cache(maxsize=4096)
def agm_multiplier(epsilon: float, delta: float, *, rel_tol: float = 1e-13) -> float:
    """Smallest m with ``agm_delta(m·Δ, ε, Δ) ≤ δ`` (independent of Δ), by bisection.

    ``agm_delta`` decreases strictly in σ, so the feasible set is an interval [m*, ∞); the value
    returned is the upper end of the final bracket, hence always feasible.
    """
    _check_positive("epsilon", epsilon)
    _check_open_unit("delta", delta)
    lo, hi = 0.0, 1.0
    while agm_delta(hi, epsilon, 1.0) > delta:
        lo, hi = hi, 2.0 * hi
        if hi > 1e12:
            raise InfeasibleBudgetError(
                f"no Gaussian noise multiplier reaches delta={delta} at epsilon={epsilon}"
            )
    return _least_feasible(lo, hi, lambda m: agm_delta(m, epsilon, 1.0) <= delta, rel_tol)


@functools.lru_cache(maxsize=4096)
def agm_epsilon(sigma: float, delta: float, sensitivity: float, *, rel_tol: float = 1e-13) -> float:
    """Smallest ε ≥ 0 with ``agm_delta(σ, ε, Δ) ≤ δ``, by bisection (``agm_delta`` decreases in ε);
    the upper end of the final bracket, hence always a valid ε. ``inf`` if no ε up to 1e6 reaches δ.
    """
    _check_positive("sigma", sigma)
    _check_open_unit("delta", delta)
    _check_positive("sensitivity", sensitivity)
    # ε → 0: δ(0) = Φ(a) − Φ(−a) = 1 − 2Φ(−a), a = Δ/(2σ).
    if 1.0 - 2.0 * normal_cdf(-sensitivity / (2.0 * sigma)) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while agm_delta(sigma, hi, sensitivity) > delta:
        lo, hi = hi, 2.0 * hi
        if hi > 1e6:
            return math.inf
    return _least_feasible(lo, hi, lambda e: agm_delta(sigma, e, sensitivity) <= delta, rel_tol)


__all__ = ["agm_delta", "agm_epsilon", "agm_multiplier", "log_normal_cdf", "normal_cdf"]
