"""The centralized Fre-E2T mechanism (design §3, paper §4.1 Algorithm 1): the reference oracle.

``run_mechanism`` is a pure function of the embeddings, the public parameters and a
:class:`~mechanism.seeds.SeedPlan`: public randomness (projection, offsets) from the public seed,
the sampling coins from ``seeds.secret(COINS_LABEL)`` and the centroid noise from
``seeds.secret(CENTROID_NOISE_LABEL)``. The distributed protocol draws its coins through
:func:`sample_coins` too, so in seeded test mode both paths see identical coins (design §6).

Cost: one pass over ``X`` for the projection (a float32 matrix product in row blocks), a sort of
the sampled rows' 64-bit bucket keys, and one gather over the contributing rows for the sums. Extra
memory is O(N·k) for the bucket indices plus a few row blocks — never a copy of ``X``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from mechanism.accounting import calibrate_noise, release_floor
from mechanism.contributions import (
    TEXT_UNIT,
    ContributionPlan,
    PrivacyUnit,
    bound_contributions,
    check_users_for,
    one_text_per_user,
    with_unit,
)
from mechanism.grid import PublicGrid, encode_bucket
from mechanism.grouping import group_buckets
from mechanism.params import FreParams
from mechanism.release import Release, ReleasedBucket
from mechanism.seeds import CENTROID_NOISE_LABEL, COINS_LABEL, SeedPlan
from primitives.errors import InvalidInputError, InvalidParameterError

# Rows gathered at once when summing a bucket: 8192 float32 rows are 24 MiB at d = 768.
SUM_CHUNK_ROWS = 8192

def sample_coins(seeds: SeedPlan, n: int, params: FreParams) -> npt.NDArray[np.bool_]:
    """User i's sampling coin is entry i (design §3 step 3): Bernoulli(p_s), all True when ε = ∞."""
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise InvalidParameterError(f"n must be an integer >= 0, got {n!r}")
    coins: npt.NDArray[np.bool_] = seeds.secret(COINS_LABEL).bernoulli(
        params.effective_p_sample, int(n)
    )
    return coins


def release_threshold(params: FreParams) -> int:
    """The smallest sampled count that is released: ``n_h ≥ τ`` with τ = p_s·t (design §3 step 3).

    Integer counts compare against the accountant's :func:`~mechanism.accounting.release_floor`
    so that rounding of ``p_s·t`` (0.7·100 = 70.00000000000001) cannot drop a bucket the ledger
    pays for. The protocol must use the same rule.
    """
    return max(1, release_floor(params.tau))


def clip_factors(rows: npt.NDArray[Any], clip: float) -> npt.NDArray[np.float64]:
    """``min(1, clip/‖row‖)`` per row, in float64: scaling a row by it projects it onto the L2
    ball of radius ``clip`` (design §4.2 cap), exactly as the protocol's DDG encoder clips.

    Projection onto a ball is 1-Lipschitz, so it never moves two rows apart, and any two projected
    rows differ by at most ``2·clip``.
    """
    norms = np.sqrt(np.einsum("ij,ij->i", rows, rows, dtype=np.float64))
    factors: npt.NDArray[np.float64] = np.minimum(1.0, clip / np.maximum(norms, 1e-300))
    return factors


def bucket_sums(
    x: npt.NDArray[Any],
    rows: npt.NDArray[np.intp],
    slot: npt.NDArray[np.intp],
    m: int,
    *,
    clip: float,
    tick: Callable[[int], None] | None = None,
    workers: int = 2,
) -> npt.NDArray[np.float64]:
    """Σ clip(x_i) (float64) over the rows of each of ``m`` slots, rows clipped to norm ``clip``.

    Rows are sorted by slot (stably, so ascending within a slot); each slot's rows are gathered in
    pieces of at most ``SUM_CHUNK_ROWS`` and summed weighted by their :func:`clip_factors` with a
    float64 accumulator, so no float64 copy of the rows is ever made and the temporary stays at
    one piece.
    """
    d = x.shape[1]
    sums = np.zeros((m, d), dtype=np.float64)
    order = np.argsort(slot, kind="stable")
    rows_sorted = rows[order]
    slot_sorted = slot[order]
    bounds = np.searchsorted(slot_sorted, np.arange(m + 1))

    def sum_slots(first: int, last: int) -> None:
        for h in range(first, last):
            for start in range(int(bounds[h]), int(bounds[h + 1]), SUM_CHUNK_ROWS):
                stop = min(int(bounds[h + 1]), start + SUM_CHUNK_ROWS)
                piece = x[rows_sorted[start:stop]]
                sums[h] += np.einsum("i,ij->j", clip_factors(piece, clip), piece, dtype=np.float64)
                if tick is not None:
                    tick(stop - start)

    if workers > 1 and m > 1:
        # Slots are disjoint and numpy releases the GIL while gathering and summing, so the
        # slots are split into ``workers`` ranges of about equal row counts, one per thread.
        targets = np.linspace(0, bounds[-1], workers + 1)[1:-1]
        cuts = [0, *np.searchsorted(bounds, targets).tolist(), m]
        with ThreadPoolExecutor(workers) as pool:
            for future in [pool.submit(sum_slots, a, b) for a, b in zip(cuts, cuts[1:], strict=False)]:
                future.result()
    else:
        sum_slots(0, m)
    return sums


def check_embeddings(x: npt.ArrayLike) -> npt.NDArray[Any]:
    arr = np.asarray(x)
    if arr.ndim != 2:
        raise InvalidInputError(
            f"embeddings must be a 2-D array (users × dimensions), got shape {tuple(arr.shape)}"
        )
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise InvalidInputError(f"embeddings must be non-empty, got shape {tuple(arr.shape)}")
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise InvalidInputError(f"embeddings must hold real numbers, got dtype {arr.dtype}")
    return arr


@dataclass(frozen=True, slots=True, kw_only=True)
class HeavyBuckets:
    """Step 3's outcome: the sampled contributions and the buckets whose count reaches τ.

    ``ids`` and ``counts`` are in release order (by id); ``rows[j]`` contributes to the bucket in
    release slot ``slots[j]``.
    """

    plan: ContributionPlan
    sampled: npt.NDArray[np.intp]  # rows whose coin came up
    n_sampled_buckets: int
    floor: int
    ids: list[str]
    counts: npt.NDArray[np.int64]
    rows: npt.NDArray[np.intp]
    slots: npt.NDArray[np.intp]

    @property
    def m(self) -> int:
        return len(self.ids)


def select_heavy_buckets(
    buckets: npt.NDArray[np.int64],
    params: FreParams,
    seeds: SeedPlan,
    plan: ContributionPlan,
) -> HeavyBuckets:
    """Draw the coins, then keep the buckets with at least :func:`release_threshold` sampled rows.

    Coins belong to slots, so a padded protocol user draws the same ones.
    """
    coins = sample_coins(seeds, plan.n_slots, params)[plan.slots]
    sampled = plan.rows[np.flatnonzero(coins)]
    sampled_buckets = buckets[sampled]
    first, inverse, counts = group_buckets(sampled_buckets)
    floor = release_threshold(params)
    heavy = np.flatnonzero(counts >= floor)
    heavy_ids = [encode_bucket(sampled_buckets[first[g]]).hex() for g in heavy.tolist()]
    order = sorted(range(len(heavy_ids)), key=heavy_ids.__getitem__)
    heavy = heavy[np.array(order, dtype=np.intp)]
    slot_of_group = np.full(counts.shape[0], -1, dtype=np.intp)
    slot_of_group[heavy] = np.arange(heavy.shape[0], dtype=np.intp)
    slot_of_sampled = slot_of_group[inverse]
    contributing = slot_of_sampled >= 0
    return HeavyBuckets(
        plan=plan,
        sampled=sampled,
        n_sampled_buckets=int(counts.shape[0]),
        floor=floor,
        ids=[heavy_ids[i] for i in order],
        counts=counts[heavy].astype(np.int64),
        rows=sampled[contributing],
        slots=slot_of_sampled[contributing],
    )


def noisy_centroids(
    x: npt.NDArray[Any],
    heavy: HeavyBuckets,
    seeds: SeedPlan,
    *,
    clip: float,
    sigma: float,
    noise: bool,
    tick: Callable[[int], None] | None = None,
) -> npt.NDArray[np.float64]:
    """Step 4: (Σ clipped contributors + σ·N(0, I_d)) / n_h per released bucket, in release order."""
    m, d = heavy.m, x.shape[1]
    sums = bucket_sums(x, heavy.rows, heavy.slots, m, clip=clip, tick=tick)
    if noise and sigma > 0 and m > 0:
        draws = np.asarray(seeds.secret(CENTROID_NOISE_LABEL).normal((m, d)), dtype=np.float64)
        sums += sigma * draws
    centroids: npt.NDArray[np.float64] = sums / heavy.counts[:, None].astype(np.float64)
    return centroids


def _row_progress(progress: bool, n: int) -> tuple[Any, Callable[[int], None] | None]:
    """A tqdm bar over ``n`` rows and its per-row tick, or ``(None, None)``; tqdm only if asked."""
    if not progress:
        return None, None
    from tqdm import tqdm

    bar = tqdm(total=n, desc="bucketing", unit="row", leave=False)
    return bar, bar.update


def _published_info(
    params: FreParams, seeds: SeedPlan, heavy: HeavyBuckets, *, dim: int, sigma: float, noise: bool
) -> dict[str, Any]:
    """release.json's info: public parameters and functions of the DP output only."""
    info: dict[str, Any] = {
        "path": "mechanism",
        "dim": dim,
        "k": params.k,
        "n_released": heavy.m,
        "release_floor": heavy.floor,
        "sigma": sigma,
        "sigma_applied": sigma if (noise and heavy.m > 0) else 0.0,
        "rng_mode": seeds.rng_mode,
    }
    if not math.isfinite(params.epsilon):
        info["note"] = "epsilon = inf: non-DP reference (p_s = 1, tau = t, sigma = 0)"
    return info


def _private_diagnostics(
    heavy: HeavyBuckets, *, n_texts: int, timings: dict[str, float]
) -> dict[str, Any]:
    """Operator-private counts: they read the data directly (the number of distinct sampled
    buckets changes by one between neighbouring populations, and no ledger term pays for it)."""
    return {
        "n_users": heavy.plan.n_users,
        "n_texts": n_texts,
        "n_contributions": int(heavy.plan.rows.shape[0]),
        "n_sampled": int(heavy.sampled.shape[0]),
        "n_sampled_buckets": heavy.n_sampled_buckets,
        "n_contributors": int(heavy.rows.shape[0]),
        "timings_s": timings,
    }


def run_mechanism(
    x: npt.ArrayLike,
    params: FreParams,
    seeds: SeedPlan,
    *,
    noise: bool = True,
    progress: bool = False,
    users: npt.ArrayLike | None = None,
    unit: PrivacyUnit = TEXT_UNIT,
) -> Release:
    """Algorithm 1 on embeddings ``x`` (N, d): heavy buckets and their (noisy) centroids.

    design §3: bucket every row on the public grid; draw coins; release buckets whose sampled count
    reaches τ (:func:`release_threshold`); centroid = (Σ sampled clip(x_i) + σ·N(0, I_d)) / n_h,
    rows clipped to norm C = ``params.clip`` as in the protocol's DDG encoder (which is what makes
    Δ ≤ 2C hold), σ from :func:`~mechanism.accounting.calibrate_noise`. ``noise=False`` keeps the
    coins and the threshold but adds no Gaussian noise (the exact-equivalence setting of design §6).
    Noise rows are drawn from ``seeds.secret(CENTROID_NOISE_LABEL).normal((m, d))`` in release
    order (by id).

    Several texts per user (design §4.6): with ``unit=PrivacyUnit(kind="user", cap=c, ...)`` and
    ``users`` (one label per row), rows are first bounded to at most c buckets per user, one text
    per bucket (:func:`~mechanism.contributions.bound_contributions`), and the coin of a
    contribution is that of its slot; the ledger records the unit and the per-user guarantee.
    """
    if not isinstance(params, FreParams):
        raise InvalidParameterError(f"params must be FreParams, got {type(params).__name__}")
    if not isinstance(seeds, SeedPlan):
        raise InvalidParameterError(f"seeds must be a SeedPlan, got {type(seeds).__name__}")
    arr = check_embeddings(x)
    n, d = arr.shape
    check_users_for(unit, users)
    ledger = with_unit(calibrate_noise(params), unit)  # before any work: an infeasible budget fails fast
    sigma = float(ledger.sigma)
    timings: dict[str, float] = {}
    t_start = time.perf_counter()
    bar, tick = _row_progress(progress, n)
    try:
        # Steps 1-2: projection and shifted grid.
        buckets = PublicGrid.derive(seeds, d, params).bucket_indices(arr, on_rows=tick)
        timings["bucketing"] = time.perf_counter() - t_start

        t0 = time.perf_counter()
        plan = (
            bound_contributions(users, buckets, unit.cap, seeds) if users is not None else one_text_per_user(n)
        )
        heavy = select_heavy_buckets(buckets, params, seeds, plan)
        timings["sample_threshold"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        if bar is not None:
            bar.reset(total=int(heavy.rows.shape[0]))
            bar.set_description("summing")
        centroids = noisy_centroids(
            arr, heavy, seeds, clip=params.clip, sigma=sigma, noise=noise, tick=tick
        )
        timings["centroids"] = time.perf_counter() - t0
    finally:
        if bar is not None:
            bar.close()
    timings["total"] = time.perf_counter() - t_start

    return Release(
        buckets=tuple(
            ReleasedBucket(id=i, count=int(c))
            for i, c in zip(heavy.ids, heavy.counts.tolist(), strict=True)
        ),
        centroids=centroids,
        ledger=ledger,
        params=params,
        seeds=seeds.to_dict(),
        noise=bool(noise),
        info=_published_info(params, seeds, heavy, dim=d, sigma=sigma, noise=noise),
        diagnostics=_private_diagnostics(heavy, n_texts=n, timings=timings),
    )
