"""Measure what the protocol costs: runs on a synthetic population, summarized by
:func:`fre_protocol.costs.summarize` (the cost table's input).
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fre_protocol.drivers.inprocess import run_protocol
from fre_protocol.roles.config import ProtocolConfig, RoundSpec, RunOptions
from fre_protocol.roles.round import MAX_BATCH_RESPONSE_BYTES, batch_response_bytes
from mechanism.params import FreParams
from mechanism.population import synthetic_population
from mechanism.seeds import SeedPlan
from primitives.errors import InvalidParameterError
from primitives.randomness import RandomSource


def measure(
    n: int = 100_000,
    dim: int = 768,
    *,
    seed: int = 0,
    epsilon: float = 8.0,
    workers: int = 2,
    out_dir: str | Path | None = None,
    progress: bool = False,
    batched_run: int = 1024,
    record: bool = True,
    user_workers: int = 1,
    no_cover_run: bool = True,
    components: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Run the protocol on a synthetic population of ``n`` users in ``dim`` dimensions (planted
    clusters of ~1% of the users plus rare points) and return the cost summary of the default run
    (per-user proofs); with ``batched_run`` = B > 1, the summary of a second run with one proof
    per B elements is under ``"batched_run"``: of the same population, or of a smaller one built
    the same way when all its batched answers would not fit in memory (its ``n_users`` says; its
    transcript is not recorded). ``user_workers`` threads play the users' devices (1: each
    device's time is measured with no other device's work beside it on the machine; the servers
    still use ``workers``). With ``no_cover_run``, a third run of the same population without
    phase-2 cover traffic is under ``"no_cover_run"``, to show what the cover costs.
    ``components`` overrides registry names for every run (:mod:`fre_protocol.components`)."""
    if isinstance(batched_run, bool) or not isinstance(batched_run, int) or batched_run < 0:
        raise InvalidParameterError(f"batched_run must be an integer >= 0, got {batched_run!r}")
    params = FreParams.paper(epsilon)

    def population(n_users: int) -> Any:
        # Planted clusters as in the mechanism's demo (spread 0.1·r): most of a cluster shares a
        # bucket, so the released set |H| is about the number of clusters.
        n_clusters = max(1, min(50, n_users // 2000))
        cluster_size = max(int(params.threshold * 4), (n_users * 8 // 10) // n_clusters)
        n_rare = max(0, n_users - n_clusters * cluster_size)
        return synthetic_population(
            n_clusters, cluster_size, n_rare, dim, params.radius,
            RandomSource.seeded(seed, "cost/population"), spread=0.1 * params.radius,
        ), n_clusters

    def one_run(pop: Any, batch: int, record_dir: str | Path | None, cover: bool = True) -> dict[str, Any]:
        result = run_protocol(pop.embeddings, RoundSpec(params=params, seeds=SeedPlan.from_seed(seed), noise=True, workers=workers, components=components, config=ProtocolConfig(proof_batch_size=batch, user_workers=user_workers, cover_traffic=cover)), RunOptions(out_dir=record_dir, progress=progress))
        costs = dict(result.costs)
        costs["epsilon"] = epsilon
        costs["released_buckets"] = len(result.release)
        costs["transcript_bytes"] = (
            result.transcript_path.stat().st_size
            if result.transcript_path and result.transcript_path.exists()
            else 0
        )
        return costs

    t0 = time.perf_counter()
    pop, n_clusters = population(n)
    population_s = time.perf_counter() - t0
    costs = one_run(pop, 1, out_dir if record else None)
    costs["population_s"] = population_s
    costs["n_clusters"] = n_clusters
    costs["machine"] = {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
    if batched_run > 1:
        # Every member of a batch receives the whole batch, and this one-process simulation holds
        # all answers at once: the batched run takes as many users as half that memory allows
        # (its per-element figures do not depend on N once there are several batches).
        n_batched = n
        while batch_response_bytes(n_batched, batched_run) > MAX_BATCH_RESPONSE_BYTES // 2:
            n_batched //= 2
        pop_batched = pop if n_batched == n else population(n_batched)[0]
        costs["batched_run"] = one_run(pop_batched, batched_run, None)
    if no_cover_run:
        costs["no_cover_run"] = one_run(pop, 1, None, cover=False)
    return costs


__all__ = ["measure"]
