"""Binomial probabilities and an inversion sampler, in numpy alone.

The library depends on numpy but not on scipy, and every random draw of fre-e2t comes from the
AES keystream of :class:`~primitives.randomness.RandomSource`; numpy's own binomial sampler needs a
numpy bit generator. So the binomial is computed here:

* :func:`binomial_log_pmf` uses Loader's saddle-point form (C. Loader, "Fast and Accurate
  Computation of Binomial Probabilities", 2000; the algorithm of R's ``dbinom``): Stirling's
  error term and the deviance ``bd0`` replace the differences of log-factorials, which lose about
  ``log10(n log n)`` digits to cancellation. Against 50-digit arithmetic the relative error of
  the probability is below 1e-13 up to n = 10^6 and 1e-11 at n = 10^9 (differences of
  ``lgamma`` give 1e-9 and 1e-5 there).
* :func:`binomial_from_uniforms` inverts one uniform per draw through a fixed enumeration of the
  support that starts at the mode and always steps to the more probable neighbour (inversion from
  the mode, Kemp 1986). Any fixed enumeration gives an exact inversion; this one takes
  O(sqrt(n·p·(1 − p))) steps on average.
* :func:`binomial_tail` and :func:`binomial_sf` sum the upper tail over a window that provably
  holds all but a relative 2^-60 of it.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from primitives.errors import InvalidParameterError

__all__ = ["binomial_from_uniforms", "binomial_log_pmf", "binomial_sf", "binomial_tail"]

_LN_2PI = math.log(2.0 * math.pi)
# Stirling's error log(n!) − log(√(2πn)·(n/e)^n) for n = 0..15 (computed to 25 digits; the
# asymptotic series below is accurate from n = 16 on). Index 0 is unused: k = 0 and k = n are
# handled apart.
_STIRLERR_SMALL = np.array(
    [
        0.0,
        0.08106146679532725821967,
        0.04134069595540929409382,
        0.02767792568499833914879,
        0.02079067210376509311152,
        0.01664469118982119216319,
        0.01387612882307074799875,
        0.01189670994589177009506,
        0.01041126526197209649748,
        0.009255462182712732917729,
        0.008330563433362871256469,
        0.007573675487951840794972,
        0.006942840107209529865664,
        0.00640899418800420706844,
        0.005951370112758847735624,
        0.005554733551962801371039,
    ]
)
# Terms of Stirling's series 1/(12n) − 1/(360n³) + 1/(1260n⁵) − 1/(1680n⁷) + 1/(1188n⁹).
_S0, _S1, _S2, _S3, _S4 = 1 / 12, 1 / 360, 1 / 1260, 1 / 1680, 1 / 1188
# Terms kept by the series of bd0: |v| < 1/19 there, so 10 terms reach v^21 < 1e-26.
_BD0_TERMS = 10
# Relative mass of a tail that binomial_tail may leave out.
_TAIL_TOLERANCE = 2.0**-60


def _check_np(
    n: npt.ArrayLike, p: npt.ArrayLike
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    n_arr = np.asarray(n)
    p_arr = np.asarray(p, dtype=np.float64)
    if n_arr.dtype == np.bool_ or not (
        np.issubdtype(n_arr.dtype, np.integer)
        or (np.issubdtype(n_arr.dtype, np.floating) and np.all(n_arr == np.floor(n_arr)))
    ):
        raise InvalidParameterError(f"n must hold integers >= 0, got {n!r}")
    if np.any(n_arr < 0) or np.any(n_arr >= 2.0**53):
        raise InvalidParameterError(f"n must hold integers in [0, 2^53), got {n!r}")
    if not np.all((p_arr >= 0.0) & (p_arr <= 1.0)):  # also refuses NaN
        raise InvalidParameterError(f"p must hold probabilities in [0, 1], got {p!r}")
    return n_arr.astype(np.int64), p_arr


def _stirlerr(n: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """log(n!) − log(√(2πn)(n/e)^n) for integers n ≥ 1 (Loader 2000, ``stirlerr``)."""
    small = n <= 15
    safe = np.where(small, 16.0, n)
    nn = safe * safe
    series = (_S0 - (_S1 - (_S2 - (_S3 - _S4 / nn) / nn) / nn) / nn) / safe
    table = _STIRLERR_SMALL[np.where(small, n, 0).astype(np.intp)]
    out: npt.NDArray[np.float64] = np.where(small, table, series)
    return out


def _bd0(x: npt.NDArray[np.float64], m: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """The deviance x·log(x/m) + m − x for x, m > 0 (Loader 2000, ``bd0``): by a series in
    v = (x − m)/(x + m) where x is near m, so the result keeps its relative accuracy."""
    diff = x - m
    total = x + m
    near = np.abs(diff) < 0.1 * total
    direct = x * np.log(x / m) + m - x
    v = np.where(near, diff / total, 0.0)
    v2 = v * v
    acc = diff * v
    term = 2.0 * x * v
    for j in range(1, _BD0_TERMS + 1):
        term = term * v2
        acc = acc + term / (2 * j + 1)
    out: npt.NDArray[np.float64] = np.where(near, acc, direct)
    return out


def binomial_log_pmf(
    k: npt.ArrayLike, n: npt.ArrayLike, p: npt.ArrayLike
) -> npt.NDArray[np.float64]:
    """log P[Bin(n, p) = k], broadcast over ``k``, ``n`` and ``p``; ``-inf`` off the support.

    Loader's saddle-point form (module docstring). ``1 − p`` is formed from ``p``, so for p within
    a few ulp of 1 the relative accuracy is that of ``1 − p``.
    """
    n_arr, p_arr = _check_np(n, p)
    k_arr = np.asarray(k, dtype=np.float64)
    k_b, n_b, p_b = np.broadcast_arrays(k_arr, n_arr.astype(np.float64), p_arr)
    q_b = 1.0 - p_b
    out = np.full(k_b.shape, -np.inf)
    on_support = (k_b >= 0) & (k_b <= n_b) & (k_b == np.floor(k_b))
    with np.errstate(divide="ignore", invalid="ignore"):
        # Endpoints (and the degenerate p = 0, p = 1) in closed form: log(1 − p)·n and log(p)·n.
        low = on_support & (k_b == 0)
        out[low] = np.where(n_b[low] == 0, 0.0, n_b[low] * np.log1p(-p_b[low]))
        high = on_support & (k_b == n_b) & (k_b > 0)
        out[high] = n_b[high] * np.log(p_b[high])
        inner = on_support & (k_b > 0) & (k_b < n_b) & (p_b > 0) & (q_b > 0)
        ki, ni, pi, qi = k_b[inner], n_b[inner], p_b[inner], q_b[inner]
        lc = (
            _stirlerr(ni)
            - _stirlerr(ki)
            - _stirlerr(ni - ki)
            - _bd0(ki, ni * pi)
            - _bd0(ni - ki, ni * qi)
        )
        lf = _LN_2PI + np.log(ki) + np.log1p(-ki / ni)
        out[inner] = lc - 0.5 * lf
    return out


def binomial_from_uniforms(
    n: npt.ArrayLike, p: npt.ArrayLike, u: npt.ArrayLike
) -> npt.NDArray[np.int64]:
    """Bin(n, p) draws by inverting the uniforms ``u`` in [0, 1), broadcast; int64.

    The support is enumerated from the mode ⌊(n+1)p⌋, each step to whichever unvisited neighbour
    is more probable (the pmf is unimodal, so probabilities come in non-increasing order), and a
    draw is the first value whose cumulative probability exceeds its uniform: an exact inversion
    of that fixed order. Neighbouring probabilities follow from the mode's by the ratio
    ``P(j+1)/P(j) = (n−j)/(j+1) · p/(1−p)``. Should rounding leave ``u`` above the whole
    accumulated mass (probability ~1e-16), the last value visited is returned.
    """
    n_arr, p_arr = _check_np(n, p)
    u_arr = np.asarray(u, dtype=np.float64)
    if not np.all((u_arr >= 0.0) & (u_arr < 1.0)):
        raise InvalidParameterError("u must hold uniforms in [0, 1)")
    n_b, p_b, u_b = np.broadcast_arrays(n_arr, p_arr, u_arr)
    shape = n_b.shape
    nf, pf, uf = n_b.ravel(), p_b.ravel(), u_b.ravel()
    out = np.where(pf == 1.0, nf, 0).astype(np.int64)
    act = np.flatnonzero((nf > 0) & (pf > 0.0) & (pf < 1.0))
    if act.size == 0:
        return out.reshape(shape)
    n_a, p_a = nf[act].astype(np.float64), pf[act]
    mode = np.minimum(np.floor((n_a + 1.0) * p_a), n_a)
    f_mode = np.exp(binomial_log_pmf(mode, nf[act], p_a))
    # One row per field, one column per unsettled draw, so settled draws drop out in one take.
    n_, up_, down_, u_, lo_, hi_, flo_, fhi_, last_, cum_ = range(10)
    st = np.stack(
        [
            n_a,
            p_a / (1.0 - p_a),
            (1.0 - p_a) / p_a,
            uf[act],
            mode,
            mode,
            f_mode,
            f_mode,
            mode,
            f_mode,
        ]
    )
    while act.size:
        settled = st[u_] < st[cum_]
        if settled.any():
            out[act[settled]] = st[last_, settled].astype(np.int64)
            act, st = act[~settled], st[:, ~settled]
            if act.size == 0:
                break
        n_a, lo, hi = st[n_], st[lo_].copy(), st[hi_].copy()
        next_hi = np.where(hi < n_a, st[fhi_] * (n_a - hi) / (hi + 1.0) * st[up_], 0.0)
        next_lo = np.where(lo > 0, st[flo_] * lo / (n_a - lo + 1.0) * st[down_], 0.0)
        # Nothing left to visit with a representable probability: settle on the last value.
        exhausted = (next_hi == 0.0) & (next_lo == 0.0)
        step_up = (next_hi >= next_lo) & ~exhausted
        step_down = ~step_up & ~exhausted
        st[hi_] = np.where(step_up, hi + 1.0, hi)
        st[fhi_] = np.where(step_up, next_hi, st[fhi_])
        st[lo_] = np.where(step_down, lo - 1.0, lo)
        st[flo_] = np.where(step_down, next_lo, st[flo_])
        st[last_] = np.where(step_up, st[hi_], np.where(step_down, st[lo_], st[last_]))
        st[cum_] = np.where(exhausted, np.inf, st[cum_] + np.where(step_up, next_hi, next_lo))
    return out.reshape(shape)


def _scalar_np(k: int, n: int, p: float) -> tuple[int, int, float]:
    for name, value in (("k", k), ("n", n)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise InvalidParameterError(f"{name} must be an integer, got {value!r}")
    if n < 0:
        raise InvalidParameterError(f"n must be an integer >= 0, got {n!r}")
    if isinstance(p, bool) or not isinstance(p, int | float | np.floating) or not 0.0 <= p <= 1.0:
        raise InvalidParameterError(f"p must be a probability in [0, 1], got {p!r}")
    return int(k), int(n), float(p)


def binomial_tail(
    k: int, n: int, p: float
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Values ``j ≥ k`` of Bin(n, p) with their probabilities, holding all of P[X ≥ k] but a
    relative 2^-60 (empty arrays when k > n).

    The window starts at the mode ± 8 standard deviations (cut at k and n) and doubles until the
    mass beyond each end is below tolerance. Beyond the upper end the ratio P(j+1)/P(j) only
    falls, so that mass is at most ``P(hi)·r/(1 − r)`` with r the ratio at ``hi``; below the lower
    end likewise with ``P(j−1)/P(j)``.
    """
    k, n, p = _scalar_np(k, n, p)
    k = max(k, 0)
    if k > n:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
    if p == 0.0 or p == 1.0:
        value = 0 if p == 0.0 else n
        if value < k:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
        return np.array([value], dtype=np.int64), np.ones(1)
    q = 1.0 - p
    mode = min(n, math.floor((n + 1) * p))
    half = math.ceil(8.0 * math.sqrt(n * p * q)) + 16
    lo = max(k, mode - half)
    hi = min(n, max(k, mode) + half)
    while True:
        values = np.arange(lo, hi + 1, dtype=np.int64)
        pmf = np.exp(binomial_log_pmf(values, n, p))
        total = float(pmf.sum())
        if total == 0.0:  # the whole window underflows: P[X ≥ k] is below 1e-300
            return values, pmf
        grow_hi = False
        if hi < n:
            r = (n - hi) / (hi + 1.0) * p / q
            grow_hi = r >= 1.0 or pmf[-1] * r / (1.0 - r) > _TAIL_TOLERANCE * total
        grow_lo = False
        if lo > k:
            s = lo / (n - lo + 1.0) * q / p
            grow_lo = s >= 1.0 or pmf[0] * s / (1.0 - s) > _TAIL_TOLERANCE * total
        if not (grow_hi or grow_lo):
            return values, pmf
        width = hi - lo + 1
        if grow_hi:
            hi = min(n, hi + width)
        if grow_lo:
            lo = max(k, lo - width)


def binomial_sf(k: int, n: int, p: float) -> float:
    """P[Bin(n, p) ≥ k] (note: ≥, not scipy's >), to a relative 2^-60 plus rounding."""
    _, pmf = binomial_tail(k, n, p)
    return min(1.0, float(pmf.sum()))
