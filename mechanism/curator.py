"""The trusted-curator baseline of paper §7.3 (Table 8's "centralized DP" row).

A curator that sees every embedding removes every distributed constraint and keeps the rest of
the pipeline: no sampling, every occupied bucket of the public grid gets its count with Gaussian
noise and its sum of clipped rows with Gaussian noise, and the buckets whose noisy count reaches
the frequency threshold t are released, each centroid being its noisy sum over its noisy count.
It upper-bounds what a distributed realisation of Fre-E2T can do; ``central-dp`` (Algorithm 1 run
centrally, :func:`mechanism.fre_e2t.run_mechanism`) is instead the protocol's exact oracle.

Accounting (basic composition, replacement neighbours):

- *counts*: one user moves between at most two buckets, so the count vector has L2 sensitivity
  √2; the analytic Gaussian at (eps_c, delta_c / 2) gives σ_c. Only occupied buckets are
  released, so a bucket that one user creates (count 1) may appear: it passes the threshold with
  probability Q((t − 1)/σ_c), at most two such buckets per neighbour pair, hence
  ``delta_c = δ_AGM + 2·Q((t − 1)/σ_c)`` (the union bound of the Gaussian sparse histogram);
- *sums*: the analytic Gaussian with Fre-E2T's sensitivity Δ = min(u·r, 2C) (design §4.2-4.3).

The count term gets exactly the (eps_fre, delta_fre) that Lemma 1 costs Fre-E2T with the same
parameters, so the sums get the same σ as Fre-E2T's: the two differ in how buckets are found
(sample-and-threshold against noisy counts) and in how many rows each sum holds (a sample, or
every user).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import numpy.typing as npt

from mechanism.accounting import calibrate_agm, calibrate_noise
from mechanism.baseline_release import BaselineRelease
from mechanism.fre_e2t import bucket_sums, check_embeddings
from mechanism.grid import PublicGrid, encode_bucket
from mechanism.grouping import group_buckets
from mechanism.ledger import CENTROID_GAUSSIAN, LedgerTerm, PrivacyLedger
from mechanism.params import FreParams
from mechanism.seeds import SeedPlan
from primitives.analytic_gaussian import agm_delta, normal_cdf
from primitives.errors import InfeasibleBudgetError, InvalidParameterError

METHOD = "trusted-curator"
CURATOR_LABEL = "baseline/trusted-curator"
COUNT_NOISE_LABEL = f"{CURATOR_LABEL}/count-noise"
SUM_NOISE_LABEL = f"{CURATOR_LABEL}/sum-noise"
GAUSSIAN_COUNTS = "gaussian_counts"
#: L2 sensitivity of the count vector: one user leaves one bucket and joins another.
COUNT_SENSITIVITY = math.sqrt(2.0)


def curator_ledger(params: FreParams) -> PrivacyLedger:
    """The baseline's guarantee (module docstring): Gaussian counts at Lemma 1's (eps_fre,
    delta_fre), Lemma 2's δ_sens and the centroid Gaussian of :func:`calibrate_noise`."""
    if not isinstance(params, FreParams):
        raise InvalidParameterError(f"params must be FreParams, got {type(params).__name__}")
    mechanism = calibrate_noise(params)
    if not params.is_dp:
        return mechanism
    heavy, sens, agg = mechanism.terms
    sigma_c, multiplier_c, _ = calibrate_agm(heavy.epsilon, heavy.delta / 2, COUNT_SENSITIVITY, rounding="exact")
    appear = 2.0 * (1.0 - normal_cdf((params.threshold - 1) / sigma_c))
    if appear > heavy.delta / 2:
        raise InfeasibleBudgetError(
            f"the counts' threshold leaks too much: 2·Q((t − 1)/σ_c) = {appear:.3g} > delta_fre/2 = "
            f"{heavy.delta / 2:.3g} at t = {params.threshold}, σ_c = {sigma_c:.4g}; raise the threshold"
        )
    counts = LedgerTerm(
        name=GAUSSIAN_COUNTS,
        epsilon=heavy.epsilon,
        delta=agm_delta(sigma_c, heavy.epsilon, COUNT_SENSITIVITY) + appear,
        source=("analytic Gaussian on every occupied bucket's count (L2 sensitivity √2) and a "
                "threshold at t: Gaussian sparse histogram, union bound on the two buckets one "
                "user can create (module mechanism.curator)"),
        detail={"sigma_counts": sigma_c, "multiplier": multiplier_c, "threshold": params.threshold,
                "delta_appear": appear, "budget": "Lemma 1's (eps_fre, delta_fre) at the same parameters"},
    )
    return PrivacyLedger(
        terms=(counts, sens, agg),
        epsilon=counts.epsilon + agg.epsilon,
        delta=counts.delta + sens.delta + agg.delta,
        sigma=mechanism.sigma,
        noise_multiplier=mechanism.noise_multiplier,
        composition=("basic composition: (eps_counts + eps_agg, delta_counts + delta_sens + delta_agg); "
                     "buckets compose in parallel"),
        params=params.to_dict(),
        aggregation=CENTROID_GAUSSIAN,
    )


def run_trusted_curator(x: npt.ArrayLike, params: FreParams, seeds: SeedPlan) -> BaselineRelease:
    """The baseline on embeddings ``x`` (N, d): released bucket ids (sorted canonical hex), noisy
    counts and centroids. Noise: count draws from ``seeds.secret(COUNT_NOISE_LABEL)`` (occupied
    buckets in id order), sum draws from ``SUM_NOISE_LABEL`` (released buckets in id order)."""
    if not isinstance(seeds, SeedPlan):
        raise InvalidParameterError(f"seeds must be a SeedPlan, got {type(seeds).__name__}")
    ledger = curator_ledger(params)  # an infeasible budget fails before any work
    arr = check_embeddings(x)
    n, d = arr.shape
    start = time.perf_counter()
    buckets = PublicGrid.derive(seeds, d, params).bucket_indices(arr)
    first, inverse, counts = group_buckets(buckets)
    ids = [encode_bucket(buckets[i]).hex() for i in first.tolist()]
    order = np.array(sorted(range(len(ids)), key=ids.__getitem__), dtype=np.intp)
    noisy = counts[order].astype(np.float64)
    sigma_c = float(ledger.terms[0].detail.get("sigma_counts", 0.0)) if params.is_dp else 0.0
    if sigma_c > 0:
        noisy += sigma_c * np.asarray(seeds.secret(COUNT_NOISE_LABEL).normal((len(order),)), dtype=np.float64)
    kept = order[noisy >= params.threshold]
    released_counts = noisy[noisy >= params.threshold]
    slot_of_group = np.full(len(ids), -1, dtype=np.intp)
    slot_of_group[kept] = np.arange(kept.shape[0], dtype=np.intp)
    slots = slot_of_group[inverse]
    rows = np.flatnonzero(slots >= 0)
    sums = bucket_sums(arr, rows, slots[rows], int(kept.shape[0]), clip=params.clip)
    if ledger.sigma > 0 and kept.shape[0] > 0:
        sums += ledger.sigma * np.asarray(seeds.secret(SUM_NOISE_LABEL).normal((kept.shape[0], d)), dtype=np.float64)
    centroids = sums / np.maximum(released_counts, 1.0)[:, None]
    info: dict[str, Any] = {"method": METHOD, "dim": d, "k": params.k, "threshold": params.threshold,
                            "sigma": ledger.sigma, "sigma_counts": sigma_c, "n_released": int(kept.shape[0])}
    diagnostics = {"n_users": n, "n_occupied_buckets": len(ids), "seconds": time.perf_counter() - start}
    return BaselineRelease(method=METHOD, ids=tuple(ids[i] for i in kept.tolist()), counts=released_counts,
                           centroids=centroids, ledger=ledger, info=info, diagnostics=diagnostics)
