"""``fre-e2t mechanism``: the centralized Fre-E2T mechanism (design §3) on an embeddings file.

Writes ``centroids.npy`` and ``release.json`` into ``--out``. ``--seed S`` is the explicit,
recorded test mode (public randomness, coins and noise all reproducible from S); without it the
public seed is drawn fresh and recorded, and coins and noise are cryptographic. ``--demo`` runs on
a built-in synthetic population instead of a file.

``--user-labels FILE`` says whose each row is (a .txt with one label per line, or the ``--user-field``
of a .jsonl/.csv); each user then contributes to at most ``--cap`` c buckets and the output states
the per-user guarantee. Without it every row is treated as a separate user, and the output says so.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from typing import Any

import numpy as np

from fre_protocol.cli.common import (
    add_param_flags,
    add_progress_flag,
    add_users_flags,
    load_embeddings,
    non_negative_int,
    params_from_args,
    prepare_out_dir,
    users_and_unit,
)
from mechanism.fre_e2t import run_mechanism
from mechanism.population import Population, synthetic_population
from mechanism.release import Release
from mechanism.run_files import DIAGNOSTICS_FILE
from mechanism.seeds import SeedPlan
from primitives.errors import InvalidParameterError
from primitives.randomness import RandomSource

HELP = "run the centralized Fre-E2T mechanism (the reference) on an embeddings file or the demo"

# The built-in demo population: fixed, public, and the same on every machine.
DEMO_SEED = "fre-e2t/demo-population/v1"
DEMO_CLUSTER_SIZES = (1200, 900, 700, 500, 400, 300, 250, 150, 100, 60)
DEMO_RARE = 20_000 - sum(DEMO_CLUSTER_SIZES)
DEMO_DIM = 384


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--embeddings", metavar="X.npy", help="(N, d) float array, one row per user (or --demo)"
    )
    source.add_argument(
        "--demo",
        action="store_true",
        help=f"instead of --embeddings: the built-in synthetic population ({sum(DEMO_CLUSTER_SIZES) + DEMO_RARE} points, "
        f"d = {DEMO_DIM}, {len(DEMO_CLUSTER_SIZES)} planted clusters, the rest isolated)",
    )
    add_param_flags(parser)
    parser.add_argument(
        "--seed",
        type=non_negative_int,
        default=None,
        help="seeded test mode: public randomness, coins and noise reproducible from this integer "
        "(recorded in release.json); default: fresh public seed, cryptographic coins and noise",
    )
    parser.add_argument(
        "--noise",
        choices=["on", "off"],
        default="on",
        help="'off' keeps sampling and threshold but adds no Gaussian noise (testing only: not DP)",
    )
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="output directory (centroids.npy, release.json, diagnostics.private.json)")
    add_progress_flag(parser, default=False)
    add_users_flags(parser)


def demo_population(radius: float) -> Population:
    """The demo data: planted clusters of sizes ``DEMO_CLUSTER_SIZES`` and isolated points."""
    if not 0 < radius < 1:
        raise InvalidParameterError(f"--radius must be in (0, 1) for the demo, got {radius}")
    return synthetic_population(
        len(DEMO_CLUSTER_SIZES),
        DEMO_CLUSTER_SIZES,
        DEMO_RARE,
        DEMO_DIM,
        radius,
        RandomSource.seeded(DEMO_SEED, "population"),
        spread=0.1 * radius,
    )


def _demo_report(release: Release, population: Population, threshold: int) -> dict[str, Any]:
    """Which planted clusters came out, and how close any centroid got to a rare point."""
    recovered: dict[int, int] = {}
    nearest_rare = math.inf
    if len(release):
        c = release.centroids
        centre_gap = np.linalg.norm(c[:, None, :] - population.centres[None, :, :], axis=2)
        for j in np.argmin(centre_gap, axis=1).tolist():
            recovered[j] = recovered.get(j, 0) + 1
        rare = population.embeddings[population.rare_mask].astype(np.float64)
        c_sq = np.einsum("ij,ij->i", c, c)
        for start in range(0, rare.shape[0], 8192):
            block = rare[start : start + 8192]
            sq = c_sq[:, None] - 2.0 * c @ block.T + np.einsum("ij,ij->i", block, block)[None, :]
            nearest_rare = min(nearest_rare, float(np.sqrt(max(sq.min(), 0.0))))
    return {
        "planted_clusters": len(population.cluster_sizes),
        "frequent_clusters": [
            j for j, size in enumerate(population.cluster_sizes) if size - 1 >= threshold
        ],
        "clusters_of_size_2t": [
            j for j, size in enumerate(population.cluster_sizes) if size >= 2 * threshold
        ],
        "cluster_sizes": list(population.cluster_sizes),
        "clusters_recovered": sorted(recovered),
        "centroids_per_cluster": {str(k): v for k, v in sorted(recovered.items())},
        "nearest_rare_distance": nearest_rare,
        "radius": population.radius,
    }


def run(args: argparse.Namespace) -> int:
    params = params_from_args(args)
    seeds = SeedPlan.fresh() if args.seed is None else SeedPlan.from_seed(args.seed)
    out_dir = prepare_out_dir(args.out)
    population: Population | None = None
    started = time.perf_counter()
    if args.demo:
        population = demo_population(params.radius)
        x = population.embeddings
        source = f"demo population (seed {DEMO_SEED!r})"
    else:
        x = load_embeddings(args.embeddings)
        source = str(args.embeddings)
    users, unit = users_and_unit(args, x.shape[0], seeds, log=lambda m: print(m, file=sys.stderr))
    release = run_mechanism(x, params, seeds, noise=args.noise == "on", progress=args.progress,
                            users=users, unit=unit)
    # The input's name and the demo's report read the private data: operator-private.
    diagnostics = dict(release.diagnostics)
    diagnostics["input"] = source
    if population is not None:
        diagnostics["demo"] = _demo_report(release, population, params.threshold)
    release = dataclasses.replace(release, diagnostics=diagnostics)
    info = release.info
    release.save(out_dir)
    elapsed = time.perf_counter() - started

    eps = "inf (non-DP)" if not params.is_dp else f"{release.ledger.epsilon:.4g}"
    counts = release.counts
    lines = [
        f"fre-e2t mechanism: {x.shape[0]} rows, d = {x.shape[1]}, k = {params.k}, {source}",
        f"  released buckets: {len(release)} (of {diagnostics['n_sampled_buckets']} with sampled users; "
        f"release at n_h >= {info['release_floor']})",
    ]
    if len(release):
        lines.append(
            f"  counts n_h: min {int(counts.min())}, median {int(np.median(counts))}, "
            f"max {int(counts.max())}; contributors {diagnostics['n_contributors']}"
        )
    lines.append(
        f"  epsilon {eps}, delta {release.ledger.delta:.3g}, sigma {release.ledger.sigma:.4g}"
        + ("" if release.noise else "  [noise OFF: not differentially private]")
    )
    unit_record = release.ledger.unit or {}
    if unit.kind == "user":
        lines.append(f"  per user: epsilon {unit_record['epsilon']:.4g}, delta {unit_record['delta']:.3g} "
                     f"({diagnostics['n_users']} users, c = {unit.cap}; {unit_record['rule']})")
    lines.append(f"  what one user is: {unit_record.get('statement')}")
    lines.append(f"  seeds: {seeds.rng_mode} (public seed {seeds.public_seed.hex()[:16]}…)")
    if population is not None:
        demo = diagnostics["demo"]
        lines.append(
            f"  demo: recovered {len(demo['clusters_recovered'])} of {demo['planted_clusters']} "
            f"planted clusters ({len(demo['frequent_clusters'])} frequent at t = "
            f"{params.threshold}, {len(demo['clusters_of_size_2t'])} of size >= 2t); nearest "
            f"centroid to a rare point: {demo['nearest_rare_distance']:.3f} (r = {demo['radius']})"
        )
    lines.append(
        f"  wrote {out_dir / 'centroids.npy'} and {out_dir / 'release.json'} (publishable), "
        f"{out_dir / DIAGNOSTICS_FILE} (operator-private) ({elapsed:.2f} s)"
    )
    print("\n".join(lines), file=sys.stdout)
    return 0
