"""Randomized rounding to the integer grid, optionally conditioned on the rounded norm (KLS21 §4.1).

Randomized rounding maps ``z`` to ``⌊z⌋ + Bernoulli(z − ⌊z⌋)`` per coordinate: unbiased, and the
error of every coordinate lies in ``(−1, 1)``. For ``‖z‖₂ ≤ c`` in dimension ``d``, KLS21 (Thm. 1 /
Prop. 22) bound the rounded norm by ``c + √d`` always and, with probability at least ``1 − β``, by
``sqrt(c² + d/4 + sqrt(2 ln(1/β))·(c + √d/2))``. *Conditional* rounding re-rounds until the second
bound holds, so it holds with certainty and ``β`` costs nothing in δ; it only sets how often a
vector is re-rounded (at most a fraction ``β`` of attempts fail).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from primitives.errors import FreError, InvalidParameterError
from primitives.randomness import RandomSource


def _check_beta(beta: float) -> float:
    if isinstance(beta, bool) or not isinstance(beta, int | float) or not 0.0 <= beta < 1.0:
        raise InvalidParameterError(f"beta must be in [0, 1), got {beta!r}")
    return float(beta)


def rounded_l2_bound(norm_bound: float, dim: int, beta: float) -> float:
    """L2 bound after (conditional) randomized rounding of a vector of norm <= ``norm_bound``.

    ``min(c + √d, sqrt(c² + d/4 + sqrt(2 ln(1/β))(c + √d/2)))`` (design §4.4; KLS21 Thm. 1); for
    ``β = 0`` (unconditional rounding) only the first, deterministic term.
    """
    c = float(norm_bound)
    if not math.isfinite(c) or c < 0:
        raise InvalidParameterError(f"norm_bound must be a finite number >= 0, got {norm_bound}")
    if isinstance(dim, bool) or not isinstance(dim, int | np.integer) or dim < 1:
        raise InvalidParameterError(f"dim must be an integer >= 1, got {dim!r}")
    b = _check_beta(beta)
    root_d = math.sqrt(dim)
    first = c + root_d
    if b == 0.0:
        return first
    second = math.sqrt(c * c + dim / 4.0 + math.sqrt(2.0 * math.log(1.0 / b)) * (c + root_d / 2.0))
    return min(first, second)


def rounded_l1_bound(l2_bound: float, dim: int) -> float:
    """L1 bound of an integer vector with L2 norm <= ``l2_bound``: ``Δ₂·min(√d, Δ₂)``.

    ``‖v‖₁ ≤ √d‖v‖₂`` always, and for integer vectors ``‖v‖₁ ≤ Σ v_i² = ‖v‖₂²`` (design §4.4).
    """
    return float(l2_bound) * min(math.sqrt(dim), float(l2_bound))


def _max_attempts(beta: float) -> int:
    # Each attempt fails with probability <= β; after this many a row is stuck with probability
    # <= 1e-40, which can only mean the input broke the norm precondition.
    if beta == 0.0:
        return 1
    return max(64, math.ceil(40.0 * math.log(10.0) / -math.log(beta)))


def randomized_round(
    z: npt.NDArray[np.float64],
    rng: RandomSource,
    *,
    bound: float | None = None,
    beta: float = 0.0,
) -> npt.NDArray[np.int64]:
    """Round each row of ``z`` (shape ``(n, d)``) randomly to integers.

    With ``bound`` given, rows whose rounded L2 norm exceeds it are re-rounded with fresh coins
    until none does (conditional randomized rounding, KLS21 §4.1); ``beta`` is only used to cap
    the attempts. Coins are ``rng.uniform`` draws, one per coordinate per attempt.
    """
    if z.ndim != 2:
        raise InvalidParameterError(f"z must be 2-D (rows, dim), got shape {z.shape}")
    floor = np.floor(z)
    frac = z - floor
    base = floor.astype(np.int64)
    out = base + (rng.uniform(z.size).reshape(z.shape) < frac)
    if bound is None:
        return out
    limit = float(bound) ** 2
    bad = np.flatnonzero(np.einsum("ij,ij->i", out, out, dtype=np.float64) > limit)
    attempts = 1
    cap = _max_attempts(_check_beta(beta))
    while bad.size:
        if attempts >= cap:
            raise FreError(
                f"conditional rounding did not meet the norm bound {bound} after {attempts} "
                "attempts; the input rows violate the clip precondition"
            )
        retry = base[bad] + (rng.uniform(bad.size * z.shape[1]).reshape(bad.size, -1) < frac[bad])
        out[bad] = retry
        still = np.einsum("ij,ij->i", retry, retry, dtype=np.float64) > limit
        bad = bad[still]
        attempts += 1
    return out
