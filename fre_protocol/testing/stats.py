"""A chi-square tail probability and a normal quantile without scipy, shared by the statistical
tests and the conformance suite (:mod:`fre_protocol.testing.conformance`)."""

from __future__ import annotations

import math
import statistics


def _log_gamma_prefix(a: float, x: float) -> float:
    return -x + a * math.log(x) - math.lgamma(a)


def chi2_sf(stat: float, dof: int) -> float:
    """``P[χ²_dof ≥ stat]``: the regularized upper incomplete gamma ``Q(dof/2, stat/2)``.

    Series for the lower function below ``a + 1``, Lentz's continued fraction above.
    """
    a, x = dof / 2.0, stat / 2.0
    if x <= 0.0:
        return 1.0
    if x < a + 1.0:
        term = total = 1.0 / a
        k = 0
        while term > total * 1e-17:
            k += 1
            term *= x / (a + k)
            total += term
        return max(0.0, 1.0 - total * math.exp(_log_gamma_prefix(a, x)))
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, 100_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-15:
            break
    return math.exp(_log_gamma_prefix(a, x)) * h


def z_two_sided(alpha: float) -> float:
    """The critical value of a two-sided z-test at level ``alpha``: ``P[|N(0, 1)| > z] = alpha``."""
    return statistics.NormalDist().inv_cdf(1.0 - alpha / 2.0)
