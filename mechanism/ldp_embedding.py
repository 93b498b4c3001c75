"""The "LDP (embedding)" baseline of paper §7.3 (Table 8): every user perturbs its own embedding.

Each user clips its embedding to the ball of radius C = ``params.clip`` and reports it plus
N(0, σ²·I_d), σ from the analytic Gaussian mechanism (Balle & Wang 2018, Theorem 8) at
(ε, δ) = (``params.epsilon``, ``params.delta``) with L2 sensitivity 2C: any two inputs of a user
lie in that ball, so they differ by at most its diameter. Each report is thus (ε, δ)-LDP, and
everything after it is post-processing (Dwork & Roth 2014, Prop. 2.1): the noisy reports are
bucketed on the same public grid as Fre-E2T (:class:`mechanism.grid.PublicGrid`), every bucket
holding at least t = ``params.threshold`` reports is released (no sampling), and its centroid is
the mean of its reports. ε = ∞ is the non-DP reference: σ = 0, the reports are the clipped rows.

The paper's finding (§7.3): the noise has norm about σ·√d, on the scale of the whole space's
diameter, so no two reports share a bucket and nothing is released at any ε ≤ 16.

Memory: the reports are never all held. They are made in blocks of :data:`REPORT_BLOCK_ROWS`
rows, each from its own stream keyed by 32 secret bytes drawn once per run, so a second pass
makes the same reports again to sum the released buckets. Extra memory is the (N, k) bucket
indices plus one block.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from mechanism.accounting import calibrate_agm
from mechanism.baseline_release import BaselineRelease
from mechanism.fre_e2t import check_embeddings, clip_factors
from mechanism.grid import PublicGrid, encode_bucket
from mechanism.grouping import group_buckets
from mechanism.ledger import LedgerTerm, PrivacyLedger
from mechanism.params import FreParams
from mechanism.seeds import SeedPlan
from primitives.analytic_gaussian import agm_delta
from primitives.errors import InvalidParameterError
from primitives.randomness import RandomSource

METHOD = "ldp-embedding"
NOISE_LABEL = "baseline/ldp-embedding"
LOCAL_GAUSSIAN = "local_gaussian"
# 8192 float64 rows are 24 MiB at d = 384.
REPORT_BLOCK_ROWS = 8192


def ldp_embedding_sigma(params: FreParams) -> float:
    """σ of each user's Gaussian: ``calibrate_agm(ε, δ, 2C)`` (``params.rounding`` applies); 0 at ε = ∞."""
    if not params.is_dp:
        return 0.0
    sigma, _, _ = calibrate_agm(
        params.epsilon, params.delta, params.diameter, rounding=params.rounding
    )
    return sigma


def local_reports(
    x: npt.NDArray[Any],
    *,
    clip: float,
    sigma: float,
    noise_key: bytes | None,
    block_rows: int = REPORT_BLOCK_ROWS,
) -> Iterator[tuple[int, npt.NDArray[np.float64]]]:
    """The users' reports ``clip_C(x_i) + σ·z_i``, as (first row, float64 block) pairs in row order.

    Deterministic core: block b's noise is ``RandomSource.seeded(noise_key, NOISE_LABEL)
    .child(str(b)).normal((rows, d))``, so the same key gives the same reports whatever is done
    between two passes. ``noise_key`` is unused (and may be None) when σ = 0.
    """
    if not (math.isfinite(sigma) and sigma >= 0):
        raise InvalidParameterError(f"sigma must be a finite number >= 0, got {sigma!r}")
    if sigma > 0 and (not isinstance(noise_key, bytes) or len(noise_key) != 32):
        raise InvalidParameterError("noise_key must be 32 bytes when sigma > 0")
    if isinstance(block_rows, bool) or not isinstance(block_rows, int) or block_rows < 1:
        raise InvalidParameterError(f"block_rows must be an integer >= 1, got {block_rows!r}")
    n, d = x.shape
    root = RandomSource.seeded(noise_key, NOISE_LABEL) if sigma > 0 and noise_key else None
    for b, start in enumerate(range(0, n, block_rows)):
        rows = np.asarray(x[start : start + block_rows], dtype=np.float64)
        block = rows * clip_factors(rows, clip)[:, None]
        if root is not None:
            block += sigma * np.asarray(root.child(str(b)).normal(block.shape), dtype=np.float64)
        yield start, block


def _ledger(params: FreParams, sigma: float) -> PrivacyLedger:
    detail: dict[str, Any] = {
        "sensitivity": params.diameter,
        "clip": params.clip,
        "sigma": sigma,
        "multiplier": sigma / params.diameter,
        "rounding": params.rounding,
    }
    if params.is_dp:
        detail["delta_achieved"] = agm_delta(sigma, params.epsilon, params.diameter)
        term = LedgerTerm(
            name=LOCAL_GAUSSIAN,
            epsilon=params.epsilon,
            delta=params.delta,
            source=(
                "analytic Gaussian mechanism (Balle & Wang 2018, Thm 8) on each user's embedding "
                "clipped to norm C, L2 sensitivity 2C: every report is (eps, delta)-LDP; bucketing, "
                "thresholding and averaging are post-processing (paper §7.3)"
            ),
            detail=detail,
        )
        composition = "one local randomiser per user; the release is post-processing of its reports"
    else:
        term = LedgerTerm(
            name=LOCAL_GAUSSIAN,
            epsilon=math.inf,
            delta=0.0,
            source="non-DP reference (epsilon = inf): reports are the clipped embeddings, no noise",
            detail=detail,
        )
        composition = "none: epsilon = inf is the non-DP reference (sigma = 0)"
    return PrivacyLedger(
        terms=(term,),
        epsilon=term.epsilon,
        delta=term.delta,
        sigma=sigma,
        noise_multiplier=sigma / params.diameter,
        composition=composition,
        params=params.to_dict(),
        aggregation=LOCAL_GAUSSIAN,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _Heavy:
    """The buckets holding ≥ t reports (id order), their counts, and each row's slot (−1: none)."""

    ids: tuple[str, ...]
    counts: npt.NDArray[np.int64]
    slot_of_row: npt.NDArray[np.intp]
    n_buckets: int
    largest: int


Reports = Callable[[], Iterator[tuple[int, npt.NDArray[np.float64]]]]


def _heavy_buckets(
    reports: Reports, grid: PublicGrid, n: int, threshold: int, tick: Callable[[int], None] | None
) -> _Heavy:
    """Pass 1: bucket every report, keeping only the (n, k) indices."""
    rows = np.empty((n, grid.k), dtype=np.int64)
    for start, block in reports():
        rows[start : start + block.shape[0]] = grid.bucket_indices(block, workers=1)
        if tick is not None:
            tick(block.shape[0])
    first, inverse, counts = group_buckets(rows)
    heavy = np.flatnonzero(counts >= threshold)
    heavy_ids = [encode_bucket(rows[first[g]]).hex() for g in heavy.tolist()]
    order = sorted(range(len(heavy_ids)), key=heavy_ids.__getitem__)
    heavy = heavy[np.array(order, dtype=np.intp)]
    slot_of_group = np.full(counts.shape[0], -1, dtype=np.intp)
    slot_of_group[heavy] = np.arange(heavy.shape[0], dtype=np.intp)
    return _Heavy(
        ids=tuple(heavy_ids[i] for i in order),
        counts=counts[heavy].astype(np.int64),
        slot_of_row=slot_of_group[inverse],
        n_buckets=int(counts.shape[0]),
        largest=int(counts.max()),
    )


def _report_sums(
    reports: Reports, heavy: _Heavy, dim: int, tick: Callable[[int], None] | None
) -> npt.NDArray[np.float64]:
    """Pass 2: the same reports again, summed per released bucket."""
    sums = np.zeros((len(heavy.ids), dim), dtype=np.float64)
    for start, block in reports():
        slots = heavy.slot_of_row[start : start + block.shape[0]]
        inside = slots >= 0
        np.add.at(sums, slots[inside], block[inside])
        if tick is not None:
            tick(block.shape[0])
    return sums


def run_ldp_embedding(
    x: npt.ArrayLike, params: FreParams, seeds: SeedPlan, *, progress: bool = False
) -> BaselineRelease:
    """The LDP (embedding) baseline on embeddings ``x`` (N, d) (module docstring).

    Released: ids (canonical hex, sorted) of the buckets holding ≥ ``params.threshold`` reports,
    their report counts, and centroids = mean of their reports. The noise key is drawn from
    ``seeds.secret(NOISE_LABEL)``.
    """
    if not isinstance(params, FreParams):
        raise InvalidParameterError(f"params must be FreParams, got {type(params).__name__}")
    if not isinstance(seeds, SeedPlan):
        raise InvalidParameterError(f"seeds must be a SeedPlan, got {type(seeds).__name__}")
    arr = check_embeddings(x)
    n, d = arr.shape
    sigma = ldp_embedding_sigma(params)
    ledger = _ledger(params, sigma)
    noise_key = seeds.secret(NOISE_LABEL).random_bytes(32) if sigma > 0 else None
    grid = PublicGrid.derive(seeds, d, params)
    t_start = time.perf_counter()

    def reports() -> Iterator[tuple[int, npt.NDArray[np.float64]]]:
        return local_reports(arr, clip=params.clip, sigma=sigma, noise_key=noise_key)

    bar: Any = None
    tick: Callable[[int], None] | None = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=n, desc="local reports", unit="row", leave=False)
        tick = bar.update
    try:
        heavy = _heavy_buckets(reports, grid, n, params.threshold, tick)
        sums = np.zeros((0, d), dtype=np.float64)
        if heavy.ids:  # at ε ≤ 16 nothing is: the second pass is skipped
            if bar is not None:
                bar.reset(total=n)
                bar.set_description("summing")
            sums = _report_sums(reports, heavy, d, tick)
    finally:
        if bar is not None:
            bar.close()
    released_counts = heavy.counts.astype(np.float64)
    centroids = sums / np.maximum(released_counts, 1.0)[:, None]

    info: dict[str, Any] = {
        "method": METHOD,
        "dim": d,
        "k": params.k,
        "threshold": params.threshold,
        "sigma": sigma,
        "n_released": len(heavy.ids),
        "rng_mode": seeds.rng_mode,
    }
    if not params.is_dp:
        info["note"] = "epsilon = inf: non-DP reference (sigma = 0)"
    # Operator-private: these read the data directly.
    diagnostics: dict[str, Any] = {
        "n_users": n,
        "n_report_buckets": heavy.n_buckets,
        "largest_report_bucket": heavy.largest,
        "timings_s": {"total": time.perf_counter() - t_start},
    }
    return BaselineRelease(
        method=METHOD,
        ids=heavy.ids,
        counts=released_counts,
        centroids=centroids,
        ledger=ledger,
        info=info,
        diagnostics=diagnostics,
    )
