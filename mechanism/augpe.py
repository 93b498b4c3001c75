"""The DP core of Aug-PE (Xie et al. 2024, "Differentially Private Synthetic Data via Foundation
Model APIs 2: Text", ICML 2024), the baseline of the paper's §7 and App. B.1.

Aug-PE keeps a population of synthetic texts. In each of T iterations every private embedding
votes for its nearest candidate (L2), the vote histogram is released with Gaussian noise
N(0, σ²) on every bin, and the candidates with the highest noisy counts are kept ("rank"
selection). This module holds the parts that touch private data, in pure numpy: the accountant,
the nearest-neighbour vote histogram, its noisy release and the selection. The text loop around
them lives in :mod:`fre_protocol.text.augpe`.

Accounting. Under add/remove-one neighbours a private record casts exactly one vote, so one
histogram has L2 sensitivity 1 and its Gaussian release with noise σ is (1/σ)-GDP (Gaussian
differential privacy, Dong, Roth & Su 2019). T such releases compose to μ-GDP with μ = √T/σ,
which is the (ε, δ(ε)) curve δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (ibid.). That curve is
exactly the analytic Gaussian mechanism's (Balle & Wang 2018, Thm 8) with noise 1/μ = σ/√T on a
sensitivity-1 query, so the smallest σ meeting (ε, δ) is √T · :func:`~primitives.analytic_gaussian.agm_multiplier`.
The initial population comes from the language model alone and costs nothing.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from mechanism.ledger import LedgerTerm, PrivacyLedger
from mechanism.metrics import DEFAULT_BLOCK, nearest_neighbours
from primitives.analytic_gaussian import agm_delta, agm_multiplier
from primitives.errors import InfeasibleBudgetError, InvalidInputError, InvalidParameterError
from primitives.randomness import RandomSource

AUGPE_HISTOGRAMS = "augpe_histograms"
GDP_SOURCE = (
    "T Gaussian vote histograms of L2 sensitivity 1 with noise sigma compose to mu-GDP, "
    "mu = sqrt(T)/sigma (Dong, Roth & Su 2019); delta(eps) = Phi(-eps/mu + mu/2) - "
    "e^eps Phi(-eps/mu - mu/2); Aug-PE, Xie et al. 2024"
)


# -- validation ---------------------------------------------------------------------------------
def _check_iterations(iterations: int) -> int:
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise InvalidParameterError(f"iterations must be an integer >= 1, got {iterations!r}")
    return iterations


def _check_epsilon(epsilon: float) -> float:
    ok = isinstance(epsilon, int | float) and not isinstance(epsilon, bool)
    if not ok or math.isnan(epsilon) or epsilon <= 0:
        raise InvalidParameterError(f"epsilon must be > 0 (or inf), got {epsilon!r}")
    return float(epsilon)


def _check_delta(delta: float) -> float:
    ok = isinstance(delta, int | float) and not isinstance(delta, bool)
    if not ok or not 0.0 < delta < 1.0:
        raise InvalidParameterError(f"delta must be in (0, 1), got {delta!r}")
    return float(delta)


def _check_sigma(sigma: float) -> float:
    ok = isinstance(sigma, int | float | np.floating) and not isinstance(sigma, bool)
    if not ok or not math.isfinite(sigma) or sigma < 0:
        raise InvalidParameterError(f"sigma must be a finite number >= 0, got {sigma!r}")
    return float(sigma)


# -- the accountant -----------------------------------------------------------------------------
def augpe_mu(sigma: float, iterations: int) -> float:
    """μ = √T/σ of T sensitivity-1 Gaussian releases with noise σ (∞ for σ = 0)."""
    sigma = _check_sigma(sigma)
    iterations = _check_iterations(iterations)
    return math.inf if sigma == 0 else math.sqrt(iterations) / sigma


def augpe_delta(epsilon: float, sigma: float, iterations: int) -> float:
    """δ(ε) of the whole run: the μ-GDP curve at μ = √T/σ (1 when σ = 0 and ε is finite)."""
    epsilon = _check_epsilon(epsilon)
    mu = augpe_mu(sigma, iterations)
    if math.isinf(epsilon):
        return 0.0
    if math.isinf(mu):
        return 1.0
    return agm_delta(1.0 / mu, epsilon, 1.0)


def augpe_noise_multiplier(epsilon: float, delta: float, iterations: int) -> float:
    """The smallest per-iteration noise σ (sensitivity 1) for which T releases are (ε, δ)-DP.

    σ = √T · m*(ε, δ) where m* is the analytic Gaussian multiplier (module docstring); ε = ∞
    gives σ = 0 (the non-DP reference).
    """
    epsilon = _check_epsilon(epsilon)
    delta = _check_delta(delta)
    iterations = _check_iterations(iterations)
    if math.isinf(epsilon):
        return 0.0
    return math.sqrt(iterations) * agm_multiplier(epsilon, delta)


def augpe_ledger(
    epsilon: float, delta: float, iterations: int, sigma: float | None = None
) -> PrivacyLedger:
    """The ledger of an Aug-PE run: one term for its T noisy histograms.

    ``sigma=None`` calibrates it (:func:`augpe_noise_multiplier`). A given σ must meet (ε, δ):
    otherwise InfeasibleBudgetError says what δ it reaches. The term's detail records T, σ, μ
    and the δ achieved at ε.
    """
    epsilon = _check_epsilon(epsilon)
    delta = _check_delta(delta)
    iterations = _check_iterations(iterations)
    calibrated = sigma is None
    sigma = augpe_noise_multiplier(epsilon, delta, iterations) if sigma is None else _check_sigma(sigma)
    params: dict[str, Any] = {
        "mechanism": "aug-pe",
        "epsilon": epsilon,
        "delta": delta,
        "iterations": iterations,
        "sensitivity": 1.0,
    }
    if math.isinf(epsilon):
        term = LedgerTerm(
            name=AUGPE_HISTOGRAMS,
            epsilon=math.inf,
            delta=0.0,
            source="non-DP reference (epsilon = inf): the vote histograms are released without noise",
            detail={"iterations": iterations, "sigma": sigma, "sensitivity": 1.0},
        )
        composition = "none: epsilon = inf is the non-DP reference (sigma = 0)"
    else:
        achieved = augpe_delta(epsilon, sigma, iterations)
        if achieved > delta * (1.0 + 1e-9):
            raise InfeasibleBudgetError(
                f"sigma = {sigma!r} over {iterations} iterations reaches delta = {achieved:.4g} at "
                f"epsilon = {epsilon:.6g}, above the target delta = {delta:.4g}; the smallest "
                f"feasible sigma is {augpe_noise_multiplier(epsilon, delta, iterations):.6g}"
            )
        term = LedgerTerm(
            name=AUGPE_HISTOGRAMS,
            epsilon=epsilon,
            delta=delta,
            source=GDP_SOURCE,
            detail={
                "iterations": iterations,
                "sigma": sigma,
                "sensitivity": 1.0,
                "mu": augpe_mu(sigma, iterations),
                "sigma_single_release": sigma / math.sqrt(iterations),
                "calibrated": calibrated,
                "delta_achieved": achieved,
            },
        )
        composition = (
            f"Gaussian DP: {iterations} releases of mu_i = 1/sigma compose to "
            "mu = sqrt(T)/sigma, converted to (epsilon, delta) exactly"
        )
    return PrivacyLedger(
        terms=(term,),
        epsilon=term.epsilon,
        delta=term.delta,
        sigma=sigma,
        noise_multiplier=sigma,  # sensitivity 1: the multiplier is σ itself
        composition=composition,
        params=params,
        aggregation=AUGPE_HISTOGRAMS,
    )


# -- the vote histogram and its release -----------------------------------------------------------
def nearest_neighbour_histogram(
    private: npt.ArrayLike,
    candidates: npt.ArrayLike,
    *,
    block: int = DEFAULT_BLOCK,
    progress: bool = False,
) -> npt.NDArray[np.int64]:
    """Votes per candidate: every private row votes once for its nearest candidate row (L2).

    Distances come from :func:`mechanism.metrics.nearest_neighbours` (blocked float32 tiles of at
    most ``block × 1024``, the chosen neighbour confirmed in float64), so memory never holds the
    whole N × M distance matrix. Exact ties between candidates go to one of them deterministically.
    The counts sum to the number of private rows.
    """
    priv = np.asarray(private)
    cand = np.asarray(candidates)
    if priv.ndim != 2 or priv.shape[0] == 0:
        raise InvalidInputError(f"private must be a non-empty 2-D array, got shape {priv.shape}")
    if cand.ndim != 2 or cand.shape[0] == 0:
        raise InvalidInputError(f"candidates must be a non-empty 2-D array, got shape {cand.shape}")
    _, idx = nearest_neighbours(priv, cand, rank=1, block=block, progress=progress)
    return np.bincount(idx[:, 0], minlength=cand.shape[0]).astype(np.int64)


def dp_histogram(
    private: npt.ArrayLike,
    candidates: npt.ArrayLike,
    sigma: float,
    rng: RandomSource,
    *,
    block: int = DEFAULT_BLOCK,
    progress: bool = False,
) -> npt.NDArray[np.float64]:
    """The released histogram of one Aug-PE iteration: vote counts + σ·N(0, 1) on every bin.

    σ = 0 (the non-DP reference) returns the counts and draws nothing from ``rng``.
    """
    sigma = _check_sigma(sigma)
    counts = nearest_neighbour_histogram(private, candidates, block=block, progress=progress)
    noisy = counts.astype(np.float64)
    if sigma > 0:
        noisy += sigma * np.asarray(rng.normal(counts.size), dtype=np.float64)
    return noisy


def rank_select(noisy_counts: npt.ArrayLike, n_keep: int) -> npt.NDArray[np.int64]:
    """Indices of the ``n_keep`` highest noisy counts, highest first (Aug-PE's rank selection).

    Equal counts go to the lower index, so the selection is a function of the counts alone.
    """
    counts = np.asarray(noisy_counts, dtype=np.float64)
    if counts.ndim != 1 or counts.size == 0:
        raise InvalidInputError(f"noisy_counts must be a non-empty 1-D array, got shape {counts.shape}")
    if np.isnan(counts).any():
        raise InvalidInputError("noisy_counts contains NaN")
    if isinstance(n_keep, bool) or not isinstance(n_keep, int) or not 1 <= n_keep <= counts.size:
        raise InvalidParameterError(
            f"n_keep must be an integer in [1, {counts.size}] (the number of counts), got {n_keep!r}"
        )
    order = np.argsort(-counts, kind="stable")
    return order[:n_keep].astype(np.int64)
