"""Parameters for an embedder other than the paper's, and a pre-flight check (design §7, paper §7.3).

The radius r and threshold t depend on the embedder and on the population size N: the paper's
r = 0.5, t = 100, k = 20 were tuned for ~1M gtr-t5-base embeddings and release nothing on a
63k-tweet corpus embedded with all-MiniLM-L6-v2 (no bucket of a k = 20 grid reaches 100 tweets,
even at r = 1.0). This module gives

* :func:`radius_from_public` / :func:`radius_quantile_public` / :func:`transfer_radius_public` —
  the paper's quantile rule on **public** embeddings (the public pool, or a public sample of the
  same kind of text). A parameter computed from the private corpus is itself a disclosure, so the
  product never does that silently:
* :func:`evaluate_radius_on_private_data` — the same statistics on the private corpus, returned
  under an ``"EVALUATION"`` label for reports and experiments only, never fed back into a run;
* :func:`preflight` — warnings computed from public quantities only (N, t, p_s, δ), before any
  budget is spent: e.g. a population too small for any bucket to reach τ = p_s·t, or a δ budget
  that Lemma 1 or Lemma 2 exhausts (with the smallest feasible t);
* :data:`MINILM_DEFAULTS` and :func:`minilm_params` — the documented defaults for the default
  embedder (all-MiniLM-L6-v2, 384-d, unit norm), see below.

Defaults for all-MiniLM-L6-v2 (measured on ``healthtweets``, 63,322 normalized tweets)
------------------------------------------------------------------------------------------
``k = 10, r = 0.9, u = 4, C = 1 (Δ = min(u·r, 2C) = 2), t = 100, δ = 1e-6, L = 2r/√k``;
``p_s`` and ``v`` chosen per ε by the accountant to minimise the noise of a centroid at the
release threshold, σ/τ (:func:`choose_sampling`; ``mechanism.accounting.optimise_budget_factor``
with ``objective="centroid_std"`` over p_s ∈ {0.1, …, 0.9}, v ∈ {0.5, …, 8}):
``(p_s, v) = (0.6, 1.5)`` at ε = 4 (σ = 3.54), ``(0.7, 1.5)`` at ε = 8 (σ = 1.65), ``(0.8, 2)`` at
ε = 16 (σ = 0.892); p_s = 1 and σ = 0 at ε = ∞. (Before the cap, Δ = u·r = 3.6 gave σ = 6.40,
2.99 and 1.61: the same (p_s, v), 1.8 times the noise.)

Why (all figures on healthtweets, centralized mechanism, three public grids):

* MiniLM embeddings have unit norm, so C = 1 and no two contributions differ by more than 2C = 2.
  With u·r ≥ 2C the cap binds: Δ = 2 holds with certainty and δ_sens = 0, so σ is the same for
  every u ≥ 2C/r ≈ 2.23 and every k. u = 4 keeps the cap binding for every r ≥ 0.5 (a
  ``--radius`` or ``--radius-quantile`` override), and below r = 0.5, where Δ = 4r < 2 and
  Lemma 2 is paid, it keeps δ_sens = f(2/u)^k = 8.1e-8 ≪ δ at k = 10 (u = 2.5 would leave
  6.6e-6 > δ, infeasible);
* k = 20 releases nothing (no grid cell holds 100 tweets even at r = 1.0); k = 8 has coarser
  cells whose non-DP centroids come within r of 45% of the infrequent tweets. With the cap k no
  longer changes σ, so it stays at 10 rather than being re-tuned on the private corpus;
* t = 100 (the paper's) is kept: lower thresholds are feasible with (p_s, v) re-chosen (down to
  t = 45) but declare rarer texts frequent and raise σ/τ (at ε = 8, 0.041 at t = 70 against
  0.024 at t = 100);
* r at k = 10, t = 100: r = 0.8 releases 2-16 clusters (grid-dependent), r = 0.9 releases 23-57
  (9.4% of the tweets are frequent; text-level δ*(r) ≈ 0.005), r = 1.0 releases 55-88 but makes
  a third of the corpus "frequent" and lets non-DP centroids come within r of 97% of the
  infrequent tweets (δ*(r) ≈ 0.97 at centroid level). r = 0.9 is the compromise; under the cap
  it costs no more noise than a smaller r (Δ = 2 for every r ≥ 0.5).

From public data: r = 0.9 is the 0.38-quantile of the nearest-neighbour distance in the default
public pool (news sentences and headlines + WordNet, 23,823 texts, MiniLM; the 0.39-quantile is
0.903): ``radius_from_public(pool, quantile=0.38)``; ``fre-e2t synthesize --radius-quantile Q``
applies the rule (paper §7.3), e.g. to carry a radius over to another embedder.

Measured with these defaults on the full corpus before the cap (distributed protocol, three
public seeds; the released set does not depend on σ): 23-57 released clusters at ε = 8; text
level (retrieval inversion) precision = recall = 1 at α = 1.5 and δ*(r) ≈ 0.002-0.008 at every ε.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from mechanism import metrics
from mechanism.accounting import (
    DEFAULT_V_GRID,
    calibrate_noise,
    optimise_budget_factor,
    release_floor,
    sensitivity_term,
)
from mechanism.params import FreParams
from primitives.errors import InfeasibleBudgetError, InvalidParameterError

EVALUATION_LABEL = "EVALUATION (reads the private data; never use it to set parameters of a release)"

# (p_s, v) that choose_sampling returns for the MiniLM defaults (documented; a test re-derives it).
MINILM_SETTINGS: dict[float, tuple[float, float]] = {4.0: (0.6, 1.5), 8.0: (0.7, 1.5), 16.0: (0.8, 2.0)}
MINILM_DEFAULTS: dict[str, Any] = {
    "delta": 1e-6,
    "radius": 0.9,
    "threshold": 100,
    "k": 10,
    "sensitivity_ratio": 4.0,
    "edge_multiplier": 1.0,
    "rounding": "exact",
    "clip": 1.0,
}
# Public-pool quantile of the nearest-neighbour distance that gives the default radius.
MINILM_RADIUS_QUANTILE = 0.38
MINILM_RADIUS_RANK = 1
SAMPLING_GRID: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def choose_sampling(
    params: FreParams, *, fix_p_sample: bool = False, fix_budget_factor: bool = False
) -> tuple[float, float]:
    """(p_s, v) minimising σ/τ at the target (ε, δ), other parameters fixed (public computation).

    ``fix_p_sample`` / ``fix_budget_factor`` keep that value of ``params`` and search the other.
    Raises InfeasibleBudgetError (each kind of failure once, with an example) when no setting is feasible.
    ε = ∞ gives p_s = 1 (v is then unused).
    """
    if not params.is_dp:
        return 1.0, params.budget_factor
    if fix_p_sample and fix_budget_factor:
        return params.p_sample, params.budget_factor
    choice = optimise_budget_factor(
        params,
        v_grid=[params.budget_factor] if fix_budget_factor else DEFAULT_V_GRID,
        p_grid=None if fix_p_sample else SAMPLING_GRID,
        objective="centroid_std",
    )
    return choice.p_sample, choice.budget_factor


def minilm_params(epsilon: float, **overrides: Any) -> FreParams:
    """The documented defaults for all-MiniLM-L6-v2 at ``epsilon`` (overrides win; p_s and v,
    unless given, from :func:`choose_sampling`)."""
    fields: dict[str, Any] = dict(MINILM_DEFAULTS)
    fields.update(epsilon=epsilon)
    fields.update(overrides)
    if math.isinf(epsilon):
        fields["p_sample"] = 1.0
        fields.setdefault("budget_factor", 1.0)
        return FreParams(**fields)
    base = FreParams(**{"p_sample": 0.5, "budget_factor": 1.0, **fields})
    p_s, v = choose_sampling(
        base,
        fix_p_sample="p_sample" in overrides,
        fix_budget_factor="budget_factor" in overrides,
    )
    fields.update(p_sample=p_s, budget_factor=v)
    return FreParams(**fields)


# -- radius by quantile on public data (paper §7.3) ---------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class RadiusChoice:
    radius: float
    quantile: float
    neighbour_rank: int
    n_public: int
    source: str = "public"


def radius_from_public(
    public: npt.NDArray[np.floating], *, quantile: float, neighbour_rank: int = 1
) -> RadiusChoice:
    """r = the ``quantile`` of the ``neighbour_rank``-th-nearest-neighbour distance on PUBLIC data."""
    r = metrics.choose_radius_by_quantile(public, quantile=quantile, neighbour_rank=neighbour_rank)
    return RadiusChoice(radius=r, quantile=quantile, neighbour_rank=neighbour_rank, n_public=len(public))


def radius_quantile_public(
    radius: float, public: npt.NDArray[np.floating], *, neighbour_rank: int = 1
) -> float:
    """Where ``radius`` sits in the PUBLIC nearest-neighbour distance distribution (a quantile)."""
    return metrics.radius_quantile(radius, public, neighbour_rank=neighbour_rank)


def transfer_radius_public(
    r_ref: float,
    ref_public: npt.NDArray[np.floating],
    target_public: npt.NDArray[np.floating],
    *,
    neighbour_rank: int = 1,
) -> float:
    """Map r from a reference embedder to a target one by quantile matching on PUBLIC texts."""
    return metrics.transfer_radius(r_ref, ref_public, target_public, neighbour_rank=neighbour_rank)


def evaluate_radius_on_private_data(
    x: npt.NDArray[np.floating], radii: list[float], *, threshold: int
) -> dict[str, Any]:
    """EVALUATION ONLY: for each r, the share of private texts with ≥ t neighbours within r.

    The result is a deterministic function of every private text: reporting it, or using it to
    pick r for a release, discloses the data outside the DP guarantee. It is returned under an
    explicit label so that reports show where it came from.
    """
    rows = []
    for r in radii:
        counts = metrics.neighbour_counts(x, r)
        frequent = metrics.frequent_mask(counts, threshold)
        rows.append({"radius": r, "frequent_share": float(frequent.mean()), "n_frequent": int(frequent.sum())})
    return {"label": EVALUATION_LABEL, "threshold": threshold, "n": int(len(x)), "rows": rows}


# -- pre-flight (public quantities only) ---------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class Preflight:
    """What a run can expect, from N and the public parameters only (no private data read)."""

    warnings: tuple[str, ...]
    feasible: bool
    reason: str
    max_releasable_buckets: int
    release_floor: int
    min_feasible_threshold: int | None


def smallest_threshold(feasible: Callable[[int], bool], *, start: int = 1, limit: int = 100_000) -> int | None:
    """The smallest t >= ``start`` with ``feasible(t)``, or None if none is up to ``limit``.

    ``feasible`` must be monotone in t, as a budget is (δ_fre falls as τ grows): doubling finds a
    feasible t, bisection the smallest."""
    if feasible(start):
        return start
    lo, hi = start, min(max(2 * start, 2), limit)
    while not feasible(hi):
        if hi >= limit:
            return None
        lo, hi = hi, min(2 * hi, limit)  # the limit itself is tried last, not skipped
    while hi - lo > 1:  # lo infeasible, hi feasible
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if feasible(mid) else (mid, hi)
    return hi


def min_feasible_threshold(params: FreParams, *, limit: int = 100_000) -> int | None:
    """The smallest t >= params.threshold for which the budget is feasible (other parameters
    fixed), or None."""

    def feasible(threshold: int) -> bool:
        try:
            calibrate_noise(dataclasses.replace(params, threshold=threshold))
            return True
        except InfeasibleBudgetError:
            return False

    return smallest_threshold(feasible, start=params.threshold, limit=limit)


def preflight(params: FreParams, n_users: int) -> Preflight:
    """Warnings before any budget is spent (public quantities: N and the parameters)."""
    if isinstance(n_users, bool) or not isinstance(n_users, int) or n_users < 1:
        raise InvalidParameterError(f"n_users must be an integer >= 1, got {n_users!r}")
    warnings: list[str] = []
    floor = release_floor(params.tau)
    p_s = params.effective_p_sample
    feasible, reason = True, ""
    min_t: int | None = params.threshold
    try:
        calibrate_noise(params)
    except InfeasibleBudgetError as exc:
        feasible, reason = False, str(exc)
        min_t = min_feasible_threshold(params)
        hint = (
            f" The smallest feasible threshold with the other parameters fixed is t = {min_t}"
            + (f", more than the {n_users} users: this population is too small for (p_s, δ)." if min_t and min_t > n_users else ".")
            if min_t is not None
            else " No threshold up to 100000 is feasible."
        )
        warnings.append(f"the privacy budget cannot pay for this setting: {exc}.{hint}")
    # A released bucket needs `floor` sampled members; the sampled total is about p_s·N.
    max_buckets = int((p_s * n_users) // max(floor, 1))
    if n_users < params.threshold:
        warnings.append(
            f"the population (N = {n_users}) is smaller than the threshold t = {params.threshold}: "
            "no bucket can be released; use a larger corpus or (if the budget allows) a smaller t"
        )
    elif p_s * n_users < 3 * floor:
        warnings.append(
            f"with N = {n_users} users and p_s = {p_s:g}, about {p_s * n_users:.0f} texts are "
            f"sampled, while a bucket needs {floor} sampled texts to be released: expect at most "
            f"{max_buckets} released bucket(s), and possibly none"
        )
    if params.is_dp:
        d_sens = sensitivity_term(params).delta  # 0 when the cap 2C ≤ u·r binds
        if d_sens > 0.5 * params.delta:
            warnings.append(
                f"δ_sens = f(2/u)^k = {d_sens:.3g} uses more than half of δ = {params.delta:g}; "
                f"raise k or the sensitivity ratio u (u·r ≥ 2C = {params.diameter:g} makes it 0)"
            )
    return Preflight(
        warnings=tuple(warnings),
        feasible=feasible,
        reason=reason,
        max_releasable_buckets=max_buckets,
        release_floor=floor,
        min_feasible_threshold=min_t,
    )


def explain_empty_release(params: FreParams, n_users: int) -> str:
    """Why nothing passed the threshold, in terms of public quantities only."""
    floor = release_floor(params.tau)
    return (
        f"no bucket reached the release threshold τ = p_s·t = {params.tau:g} (≥ {floor} sampled "
        f"texts in one grid cell of edge L = {params.bucket_edge:.4g} in k = {params.k} projected "
        f"dimensions) among N = {n_users} users sampled at p_s = {params.effective_p_sample:g}. "
        "Dense topics need at least t texts within about r of each other: try a larger radius, a "
        "smaller k (then a larger u to keep δ_sens small), or a larger population."
    )
