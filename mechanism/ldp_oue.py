"""The "LDP (OUE)" baseline of paper §7.3 (Table 8): OUE frequency oracle instead of sample-and-threshold.

Fre-E2T's heavy-bucket selection (Algorithm 1, lines 7-15) is replaced by Optimised Unary
Encoding (T. Wang, J. Blocki, N. Li, S. Jha, "Locally Differentially Private Protocols for
Frequency Estimation", USENIX Security 2017, §4.4). Every user one-hot encodes its bucket over a
public domain, keeps its own bit with p = 1/2 and sets each other bit with q = 1/(e^ε₁ + 1): an
ε₁-LDP report. The aggregator estimates bucket h's count by ĉ_h = (observed_h − n·q)/(p − q),
unbiased with variance ``n·q(1−q)/(p−q)²`` for an empty bucket — Wang et al.'s
``n·4e^ε₁/(e^ε₁ − 1)²`` — and releases every bucket with ĉ_h ≥ t (Fre-E2T's t) whose observed
count also clears the false-positive control: an empty bucket passes with probability at most
``false_positives``/D over a domain of D buckets (Bonferroni; default 0.05 expected false
releases in all, :func:`oue_controlled_floor`; None restores t alone). The rest follows
Fre-E2T: a released bucket's centroid is the sum of its members' clipped embeddings plus
N(0, σ²·I_d), σ from the analytic Gaussian on the remaining budget (ε − ε₁, δ − δ_sens) with
Fre-E2T's Δ, divided by max(ĉ_h, 1). Basic composition gives (ε, δ).

Simulation. The bit vectors are never built: bucket h's observed count is exactly
Bin(c_h, p) + Bin(n − c_h, q), as its bit is an independent coin for each user.

The domain (a decision). OUE needs a finite public domain, but the grid's is Z^k. The baseline is
given the most favourable domain: the non-empty buckets plus ``empty_buckets`` empty ones (by
default as many as the non-empty). An empty bucket is released with probability
π = P[Bin(n, q) ≥ o*], o* the smallest observed count whose estimate reaches t, so the number
of such false positives is exactly Bin(E, π), and each one's observed count is Bin(n, q)
conditioned on ≥ o*. They get ids ``empty-000000``, ``empty-000001``, ... that no real bucket id
(hex) can equal, and centroids of pure noise divided by their estimate.

ε = ∞ is the non-DP reference: exact counts, no Gaussian noise, no false positives.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from mechanism.accounting import calibrate_agm, sensitivity_term
from mechanism.baseline_release import BaselineRelease
from mechanism.fre_e2t import bucket_sums, check_embeddings
from mechanism.grid import PublicGrid, encode_bucket
from mechanism.grouping import group_buckets
from mechanism.ledger import CENTROID_GAUSSIAN, SENSITIVITY_FAILURE, LedgerTerm, PrivacyLedger
from mechanism.params import FreParams
from mechanism.seeds import SeedPlan
from primitives.analytic_gaussian import agm_delta
from primitives.binomial import binomial_tail
from primitives.errors import InfeasibleBudgetError, InvalidParameterError
from primitives.randomness import RandomSource

METHOD = "ldp-oue"
OUE_LABEL = "baseline/ldp-oue"
COUNTS_LABEL = f"{OUE_LABEL}/counts"
EMPTY_LABEL = f"{OUE_LABEL}/empty-domain"
NOISE_LABEL = f"{OUE_LABEL}/centroid-noise"
OUE_HISTOGRAM = "oue_histogram"
EMPTY_ID_PREFIX = "empty-"
P_KEEP = 0.5

#: Fractions of ε given to the OUE histogram (ε₁ = fraction·ε) that an experiment sweeps; the
#: paper reports the split that maximises utility. Wide enough that the best is inside the grid.
DEFAULT_SPLITS: tuple[float, ...] = (0.1, 0.25, 0.5, 0.75, 0.9)
#: The expected number of empty buckets released (false positives) the threshold allows, over the
#: whole domain: each bucket's chance is held to this over the domain's size (Bonferroni), so the
#: chance of any false positive is at most this too. None: the threshold t alone (no control).
DEFAULT_FALSE_POSITIVES = 0.05


# -- OUE (Wang et al. 2017, §4.4) ---------------------------------------------------------------
def _check_oue_epsilon(epsilon: float) -> float:
    if (
        isinstance(epsilon, bool)
        or not isinstance(epsilon, int | float)
        or not (math.isfinite(epsilon) and epsilon > 0)
    ):
        raise InvalidParameterError(f"OUE epsilon must be a finite number > 0, got {epsilon!r}")
    return float(epsilon)


def _check_n(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise InvalidParameterError(f"n must be an integer >= 0, got {n!r}")
    return int(n)


def oue_probabilities(epsilon: float) -> tuple[float, float]:
    """(p, q) = (1/2, 1/(e^ε + 1)): P[own bit kept], P[another bit set]."""
    eps = _check_oue_epsilon(epsilon)
    return P_KEEP, 1.0 / (math.exp(eps) + 1.0)


def oue_estimate(observed: npt.ArrayLike, n: int, epsilon: float) -> npt.NDArray[np.float64]:
    """The unbiased count estimate ĉ = (observed − n·q)/(p − q) of n users' OUE reports."""
    p, q = oue_probabilities(epsilon)
    n = _check_n(n)
    out: npt.NDArray[np.float64] = (np.asarray(observed, dtype=np.float64) - n * q) / (p - q)
    return out


def oue_estimate_variance(n: int, epsilon: float, count: int = 0) -> float:
    """Var ĉ = (c·p(1−p) + (n−c)·q(1−q))/(p−q)² for a bucket with c of the n users.

    At c = 0 this is Wang et al.'s closed form ``n·4e^ε/(e^ε − 1)²`` (their Eq. (11)).
    """
    p, q = oue_probabilities(epsilon)
    n = _check_n(n)
    c = _check_n(count)
    if c > n:
        raise InvalidParameterError(f"count must be <= n = {n}, got {count!r}")
    return (c * p * (1 - p) + (n - c) * q * (1 - q)) / (p - q) ** 2


def oue_release_floor(n: int, epsilon: float, threshold: float) -> int:
    """The smallest observed count o with ``oue_estimate(o) ≥ threshold`` (same float rule)."""
    p, q = oue_probabilities(epsilon)
    n = _check_n(n)

    def released(o: int) -> bool:
        return bool(oue_estimate(o, n, epsilon) >= threshold)

    o = max(0, math.ceil(n * q + threshold * (p - q)))
    while o > 0 and released(o - 1):
        o -= 1
    while not released(o):
        o += 1
    return o


def _check_false_positives(value: float | None) -> float | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1):
        raise InvalidParameterError(f"false_positives must be None or a number in (0, 1), got {value!r}")
    return value


def oue_controlled_floor(n: int, epsilon: float, threshold: float, domain: int, false_positives: float | None) -> int:
    """The smallest observed count o whose estimate reaches ``threshold`` and, unless
    ``false_positives`` is None, at which an empty bucket is released with probability
    P[Bin(n, q) ≥ o] ≤ false_positives / domain (so at most ``false_positives`` expected false
    releases over the domain)."""
    floor = oue_release_floor(n, epsilon, threshold)
    false_positives = _check_false_positives(false_positives)
    if false_positives is None:
        return floor
    domain = _check_n(domain)
    _, q = oue_probabilities(epsilon)
    n = _check_n(n)

    def tail(o: int) -> float:
        return float(binomial_tail(o, n, q)[1].sum())

    target = false_positives / max(domain, 1)
    if tail(floor) <= target:
        return floor
    lo, hi = floor, n + 1  # tail(lo) > target >= tail(hi) (tail(n + 1) = 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if tail(mid) > target else (lo, mid)
    return hi


def simulate_oue_counts(
    true_counts: npt.ArrayLike, n: int, epsilon: float, rng: RandomSource
) -> npt.NDArray[np.int64]:
    """Observed OUE bit counts of buckets holding ``true_counts`` of ``n`` users, drawn exactly:
    Bin(c, p) + Bin(n − c, q) per bucket (own bits, then the other users' bits, from ``rng``)."""
    p, q = oue_probabilities(epsilon)
    n = _check_n(n)
    c = np.asarray(true_counts)
    if c.ndim != 1 or not np.issubdtype(c.dtype, np.integer) or np.any(c < 0) or np.any(c > n):
        raise InvalidParameterError(
            f"true_counts must be a 1-D array of integers in [0, n = {n}], got {true_counts!r}"
        )
    c = c.astype(np.int64)
    own = np.asarray(rng.binomial(c, p), dtype=np.int64)
    others = np.asarray(rng.binomial(n - c, q), dtype=np.int64)
    out: npt.NDArray[np.int64] = own + others
    return out


def simulate_empty_releases(
    empty: int, n: int, epsilon: float, threshold: float, rng: RandomSource, *, floor: int | None = None
) -> tuple[npt.NDArray[np.int64], float]:
    """(observed counts of the released empty buckets, π): the number released is Bin(E, π) with
    π = P[Bin(n, q) ≥ o*], and each count is Bin(n, q) conditioned on ≥ o* (by inversion); o* is
    ``floor`` when given (:func:`oue_controlled_floor`), else the estimate's threshold."""
    empty = _check_n(empty)
    _, q = oue_probabilities(epsilon)
    floor = oue_release_floor(n, epsilon, threshold) if floor is None else floor
    values, pmf = binomial_tail(floor, n, q)
    pi = min(1.0, float(pmf.sum()))
    n_released = int(rng.binomial(empty, pi)) if pi > 0 else 0
    if n_released == 0:
        return np.empty(0, dtype=np.int64), pi
    cdf = np.cumsum(pmf)
    picks = np.searchsorted(cdf, rng.uniform(n_released) * cdf[-1], side="right")
    observed: npt.NDArray[np.int64] = values[np.minimum(picks, values.size - 1)]
    return observed, pi


# -- accounting ----------------------------------------------------------------------------------
def _check_histogram_epsilon(params: FreParams, histogram_epsilon: float) -> float:
    value = histogram_epsilon
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or math.isnan(value)
        or value <= 0
    ):
        raise InvalidParameterError(f"histogram_epsilon must be a number > 0, got {value!r}")
    if params.is_dp and not value < params.epsilon:
        raise InvalidParameterError(
            f"histogram_epsilon must be in (0, epsilon = {params.epsilon}) so that the centroids "
            f"keep a budget, got {value!r}"
        )
    return float(value)


def _non_dp_ledger(params: FreParams) -> PrivacyLedger:
    terms = (
        LedgerTerm(
            name=OUE_HISTOGRAM,
            epsilon=math.inf,
            delta=0.0,
            source="non-DP reference (epsilon = inf): exact bucket counts",
        ),
        LedgerTerm(
            name=SENSITIVITY_FAILURE,
            epsilon=0.0,
            delta=0.0,
            source="not applicable without noise",
            detail={"sensitivity": params.sensitivity},
        ),
        LedgerTerm(
            name=CENTROID_GAUSSIAN,
            epsilon=math.inf,
            delta=0.0,
            source="non-DP reference: no centroid noise",
            detail={"sigma": 0.0, "sensitivity": params.sensitivity},
        ),
    )
    return PrivacyLedger(
        terms=terms,
        epsilon=math.inf,
        delta=0.0,
        sigma=0.0,
        noise_multiplier=0.0,
        composition="none: epsilon = inf is the non-DP reference (exact counts, sigma = 0)",
        params=params.to_dict(),
        aggregation=CENTROID_GAUSSIAN,
    )


def oue_ledger(params: FreParams, histogram_epsilon: float) -> PrivacyLedger:
    """The baseline's guarantee: OUE (ε₁, 0), δ_sens and the centroid Gaussian (ε − ε₁, δ − δ_sens)
    by basic composition. Raises InfeasibleBudgetError when δ_sens leaves no δ for the Gaussian."""
    eps1 = _check_histogram_epsilon(params, histogram_epsilon)
    if not params.is_dp:
        return _non_dp_ledger(params)
    p, q = oue_probabilities(eps1)
    sens = sensitivity_term(params)
    eps_agg = params.epsilon - eps1
    delta_agg = params.delta - sens.delta
    if delta_agg <= 0:
        raise InfeasibleBudgetError(
            f"delta budget exhausted: delta = {params.delta:.4g} but delta_sens = {sens.delta:.4g} "
            f"(Lemma 2) leaves nothing for the centroids; raise k or sensitivity_ratio"
        )
    sigma, multiplier, exact = calibrate_agm(
        eps_agg, delta_agg, params.sensitivity, rounding=params.rounding
    )
    histogram = LedgerTerm(
        name=OUE_HISTOGRAM,
        epsilon=eps1,
        delta=0.0,
        source=(
            "Optimised Unary Encoding (Wang et al. 2017, USENIX Security, §4.4): every report is "
            "pure eps1-LDP; estimates and the release decision are post-processing"
        ),
        detail={"p": p, "q": q, "threshold": params.threshold, "split": eps1 / params.epsilon},
    )
    aggregation = LedgerTerm(
        name=CENTROID_GAUSSIAN,
        epsilon=eps_agg,
        delta=delta_agg,
        source=(
            "analytic Gaussian (Balle & Wang 2018, Thm 8) on the released buckets' sums with "
            "Fre-E2T's sensitivity (design §4.3); buckets compose in parallel"
        ),
        detail={
            "sensitivity": params.sensitivity,
            "sigma": sigma,
            "multiplier": multiplier,
            "multiplier_exact": exact,
            "rounding": params.rounding,
            "delta_achieved": agm_delta(sigma, eps_agg, params.sensitivity),
        },
    )
    return PrivacyLedger(
        terms=(histogram, sens, aggregation),
        epsilon=histogram.epsilon + aggregation.epsilon,
        delta=sens.delta + aggregation.delta,
        sigma=sigma,
        noise_multiplier=multiplier,
        composition=(
            "basic composition: (eps1 + eps_agg, delta_sens + delta_agg); the OUE reports are "
            "eps1-LDP, hence eps1-DP for the aggregate; buckets compose in parallel"
        ),
        params=params.to_dict(),
        aggregation=CENTROID_GAUSSIAN,
    )


# -- the baseline --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class _Buckets:
    """The data's non-empty buckets in id order, and which of them each row falls in."""

    ids: list[str]
    counts: npt.NDArray[np.int64]
    position_of_row: npt.NDArray[np.intp]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Selection:
    """Which real buckets OUE releases, their estimates, and the empty domain's false positives."""

    kept: npt.NDArray[np.intp]
    estimates: npt.NDArray[np.float64]
    empty_estimates: npt.NDArray[np.float64]
    p_empty_released: float
    floor: int | None = None  # the observed count a bucket needs (DP runs only)


def _check_empty(empty_buckets: int | None) -> None:
    if empty_buckets is None:
        return
    if isinstance(empty_buckets, bool) or not isinstance(empty_buckets, int) or empty_buckets < 0:
        raise InvalidParameterError(
            f"empty_buckets must be None or an integer >= 0, got {empty_buckets!r}"
        )


def _count_buckets(
    x: npt.NDArray[Any], grid: PublicGrid, tick: Callable[[int], None] | None
) -> _Buckets:
    rows = grid.bucket_indices(x, on_rows=tick)
    first, inverse, counts = group_buckets(rows)
    group_ids = [encode_bucket(rows[i]).hex() for i in first.tolist()]
    by_id = np.array(sorted(range(len(group_ids)), key=group_ids.__getitem__), dtype=np.intp)
    position_of_group = np.empty(by_id.shape[0], dtype=np.intp)
    position_of_group[by_id] = np.arange(by_id.shape[0], dtype=np.intp)
    return _Buckets(
        ids=[group_ids[g] for g in by_id.tolist()],
        counts=counts[by_id].astype(np.int64),
        position_of_row=position_of_group[inverse],
    )


def _select(
    buckets: _Buckets, n: int, params: FreParams, eps1: float, empty: int, seeds: SeedPlan,
    false_positives: float | None,
) -> _Selection:
    """OUE's release decision: an observed count at the :func:`oue_controlled_floor` over the
    domain (non-empty and empty buckets); ε = ∞: the exact counts against t, no false positives."""
    t = params.threshold
    if not params.is_dp:
        estimates = buckets.counts.astype(np.float64)
        return _Selection(
            kept=np.flatnonzero(estimates >= t),
            estimates=estimates,
            empty_estimates=np.empty(0, dtype=np.float64),
            p_empty_released=0.0,
        )
    floor = oue_controlled_floor(n, eps1, t, len(buckets.ids) + empty, false_positives)
    observed = simulate_oue_counts(buckets.counts, n, eps1, seeds.secret(COUNTS_LABEL))
    estimates = oue_estimate(observed, n, eps1)
    empty_observed, pi = simulate_empty_releases(empty, n, eps1, t, seeds.secret(EMPTY_LABEL), floor=floor)
    return _Selection(
        kept=np.flatnonzero(observed >= floor),
        estimates=estimates,
        empty_estimates=oue_estimate(empty_observed, n, eps1),
        p_empty_released=pi,
        floor=floor,
    )


def _noisy_centroids(
    x: npt.NDArray[Any],
    buckets: _Buckets,
    selection: _Selection,
    *,
    clip: float,
    sigma: float,
    seeds: SeedPlan,
    tick: Callable[[int], None] | None,
) -> npt.NDArray[np.float64]:
    """(Σ clip(x_i) over every member + σ·z) / max(ĉ, 1) per released bucket, real ones first;
    a false positive has no member, so its centroid is pure noise over its estimate."""
    m_real = int(selection.kept.shape[0])
    m = m_real + int(selection.empty_estimates.shape[0])
    slot_of_position = np.full(buckets.counts.shape[0], -1, dtype=np.intp)
    slot_of_position[selection.kept] = np.arange(m_real, dtype=np.intp)
    slot_of_row = slot_of_position[buckets.position_of_row]
    rows = np.flatnonzero(slot_of_row >= 0).astype(np.intp)
    sums = np.zeros((m, x.shape[1]), dtype=np.float64)
    sums[:m_real] = bucket_sums(x, rows, slot_of_row[rows], m_real, clip=clip, tick=tick)
    if sigma > 0 and m > 0:
        sums += sigma * np.asarray(seeds.secret(NOISE_LABEL).normal(sums.shape), dtype=np.float64)
    released = np.concatenate([selection.estimates[selection.kept], selection.empty_estimates])
    out: npt.NDArray[np.float64] = sums / np.maximum(released, 1.0)[:, None]
    return out


def _bucket_select_and_sum(
    arr: npt.NDArray[np.float64], params: FreParams, seeds: SeedPlan, eps1: float, sigma: float,
    empty_buckets: int | None, false_positives: float | None, progress: bool,
) -> tuple[_Buckets, _Selection, npt.NDArray[np.float64]]:
    """Bucket the rows, decide the release, and sum the released buckets with their noise, under
    one progress bar (bucketing, then summing) when ``progress``."""
    n, d = arr.shape
    bar: Any = None
    tick: Callable[[int], None] | None = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=n, desc="bucketing", unit="row", leave=False)
        tick = bar.update
    try:
        buckets = _count_buckets(arr, PublicGrid.derive(seeds, d, params), tick)
        empty = len(buckets.ids) if empty_buckets is None else empty_buckets
        selection = _select(buckets, n, params, eps1, empty, seeds, false_positives)
        if bar is not None:
            bar.reset(total=int(buckets.counts[selection.kept].sum()))
            bar.set_description("summing")
        centroids = _noisy_centroids(arr, buckets, selection, clip=params.clip, sigma=sigma, seeds=seeds, tick=tick)
    finally:
        if bar is not None:
            bar.close()
    return buckets, selection, centroids


def _published_info(
    params: FreParams, eps1: float, false_positives: float | None, d: int, sigma: float, n_released: int,
    rng_mode: str,
) -> dict[str, Any]:
    """The release's public info: parameters, the budget split, σ and the number released."""
    info: dict[str, Any] = {
        "method": METHOD,
        "dim": d,
        "k": params.k,
        "threshold": params.threshold,
        "histogram_epsilon": eps1,
        "false_positives": false_positives,
        "centroid_epsilon": params.epsilon - eps1 if params.is_dp else math.inf,
        "sigma": sigma,
        "n_released": n_released,
        "rng_mode": rng_mode,
    }
    if params.is_dp:
        p, q = oue_probabilities(eps1)
        info.update(p=p, q=q)
    else:
        info["note"] = "epsilon = inf: non-DP reference (exact counts, sigma = 0)"
    return info


def run_ldp_oue(
    x: npt.ArrayLike,
    params: FreParams,
    seeds: SeedPlan,
    *,
    histogram_epsilon: float,
    empty_buckets: int | None = None,
    false_positives: float | None = DEFAULT_FALSE_POSITIVES,
    progress: bool = False,
) -> BaselineRelease:
    """The LDP (OUE) baseline on embeddings ``x`` (N, d) with ε₁ = ``histogram_epsilon`` (module
    docstring). Released: real buckets (canonical hex ids, sorted) then false positives of the
    empty domain (``empty-…``), their estimates ĉ and centroids.

    Randomness: observed counts from ``seeds.secret(COUNTS_LABEL)`` (buckets in id order), the
    empty domain's from ``EMPTY_LABEL``, centroid noise rows (release order) from ``NOISE_LABEL``.
    """
    if not isinstance(params, FreParams):
        raise InvalidParameterError(f"params must be FreParams, got {type(params).__name__}")
    if not isinstance(seeds, SeedPlan):
        raise InvalidParameterError(f"seeds must be a SeedPlan, got {type(seeds).__name__}")
    _check_empty(empty_buckets)
    _check_false_positives(false_positives)
    arr = check_embeddings(x)
    n, d = arr.shape
    ledger = oue_ledger(params, histogram_epsilon)  # validates ε₁; an infeasible δ fails fast
    eps1 = float(histogram_epsilon) if params.is_dp else math.inf
    t_start = time.perf_counter()
    buckets, selection, centroids = _bucket_select_and_sum(arr, params, seeds, eps1, ledger.sigma, empty_buckets,
                                                           false_positives, progress)
    m_empty = int(selection.empty_estimates.shape[0])
    ids = tuple(buckets.ids[i] for i in selection.kept.tolist()) + tuple(
        f"{EMPTY_ID_PREFIX}{j:06d}" for j in range(m_empty)
    )
    info = _published_info(params, eps1, false_positives, d, ledger.sigma, len(ids), seeds.rng_mode)
    # Operator-private: these read the data (true counts, which releases are false positives).
    diagnostics: dict[str, Any] = {
        "n_users": n,
        "n_nonempty_buckets": len(buckets.ids),
        "n_empty_buckets": len(buckets.ids) if empty_buckets is None else empty_buckets,
        "p_empty_released": selection.p_empty_released,
        "n_empty_released": m_empty,
        "true_counts": buckets.counts[selection.kept].tolist() + [0] * m_empty,
        "timings_s": {"total": time.perf_counter() - t_start},
    }
    if params.is_dp:
        diagnostics["release_floor_observed"] = selection.floor
    return BaselineRelease(
        method=METHOD,
        ids=ids,
        counts=np.concatenate([selection.estimates[selection.kept], selection.empty_estimates]),
        centroids=centroids,
        ledger=ledger,
        info=info,
        diagnostics=diagnostics,
    )
