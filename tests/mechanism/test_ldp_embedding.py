"""The LDP (embedding) baseline of paper §7.3 (Table 8) against its definition.

The brute force below regroups the users' reports with a dict keyed by the bucket's canonical id
and averages with numpy; it shares with the baseline only the public grid (the definition of a
bucket) and the deterministic report generator whose noise is tested on its own.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict

import numpy as np
import numpy.typing as npt
import pytest
from chi_square import z_two_sided

from mechanism.grid import PublicGrid, encode_bucket
from mechanism.ldp_embedding import (
    LOCAL_GAUSSIAN,
    NOISE_LABEL,
    ldp_embedding_sigma,
    local_reports,
    run_ldp_embedding,
)
from mechanism.params import FreParams
from mechanism.population import synthetic_population
from mechanism.seeds import SeedPlan
from primitives.analytic_gaussian import agm_delta
from primitives.errors import InvalidInputError, InvalidParameterError
from primitives.randomness import RandomSource


def clipped(x: npt.NDArray[np.floating], clip: float) -> npt.NDArray[np.float64]:
    rows = np.asarray(x, dtype=np.float64)
    norms = np.linalg.norm(rows, axis=1)
    return rows * np.minimum(1.0, clip / norms)[:, None]


def brute_force(
    reports: npt.NDArray[np.float64], params: FreParams, seeds: SeedPlan
) -> dict[str, tuple[int, npt.NDArray[np.float64]]]:
    """{id: (count, mean report)} of the buckets holding at least t reports."""
    grid = PublicGrid.derive(seeds, reports.shape[1], params)
    members: dict[str, list[int]] = defaultdict(list)
    for i, row in enumerate(grid.bucket_indices(reports)):
        members[encode_bucket(row).hex()].append(i)
    return {
        h: (len(rows), reports[rows].mean(axis=0))
        for h, rows in members.items()
        if len(rows) >= params.threshold
    }


@pytest.mark.parametrize("epsilon", [0.5, 4.0, 8.0, 16.0])
@pytest.mark.parametrize("clip", [1.0, 0.25])
def test_sigma_meets_the_budget_and_is_minimal(epsilon: float, clip: float) -> None:
    """σ reaches (ε, δ) for sensitivity 2C by the analytic Gaussian, and 0.999σ does not."""
    params = FreParams(epsilon=epsilon, delta=1e-6, clip=clip)
    sigma = ldp_embedding_sigma(params)
    assert agm_delta(sigma, epsilon, 2 * clip) <= 1e-6
    assert agm_delta(0.999 * sigma, epsilon, 2 * clip) > 1e-6
    assert ldp_embedding_sigma(FreParams.paper(math.inf)) == 0.0


def test_reports_are_clipped_rows_plus_gaussian_noise_of_that_sigma() -> None:
    """Residuals r = report − clip(x) over N·d = 3000·64 entries: Σr²/σ² ~ χ²(192 000).

    Checks: |Σr²/(σ²Nd) − 1| ≤ z·√(2/(Nd)) and |mean r| ≤ zσ/√(Nd), z the two-sided normal
    quantile at α = 1e-6 (normal approximations of the χ² and of the mean; false failure below
    2e-6 for a fresh seed). Rows of norm up to 3 are
    clipped to C = 0.5 first; with σ = 0 the reports are exactly the clipped rows.
    """
    rng = RandomSource.seeded(1, "rows")
    x = rng.normal((3000, 64)) * (0.5 + 2.5 * rng.uniform(3000))[:, None] / 8.0
    sigma, clip = 0.7, 0.5
    key = bytes(range(32))
    starts, blocks = zip(
        *local_reports(x, clip=clip, sigma=sigma, noise_key=key, block_rows=1000), strict=True
    )
    assert starts == (0, 1000, 2000)
    residual = np.concatenate(blocks) - clipped(x, clip)
    size = residual.size
    z = z_two_sided(1e-6)
    assert abs(float((residual**2).mean()) / sigma**2 - 1.0) <= z * math.sqrt(2.0 / size)
    assert abs(float(residual.mean())) <= z * sigma / math.sqrt(size)
    # The same key gives the same reports; no noise gives the clipped rows.
    again = np.concatenate(
        [b for _, b in local_reports(x, clip=clip, sigma=sigma, noise_key=key, block_rows=1000)]
    )
    assert np.array_equal(again, np.concatenate(blocks))
    plain = np.concatenate([b for _, b in local_reports(x, clip=clip, sigma=0.0, noise_key=None)])
    assert np.allclose(plain, clipped(x, clip), rtol=1e-15, atol=1e-15)


def test_no_noise_release_equals_brute_force_bucket_counts() -> None:
    """ε = ∞: the release is every bucket with ≥ t clipped rows, its count and its mean."""
    pop = synthetic_population(
        3, (30, 12, 8), 20, 16, 0.5, RandomSource.seeded(2, "pop"), spread=0.05
    )
    x = pop.embeddings.astype(np.float64)
    x[::3] *= 1.7  # some rows outside the ball: clipping matters
    params = FreParams(epsilon=math.inf, p_sample=1.0, threshold=10, k=4, radius=1.0, clip=1.0)
    seeds = SeedPlan.from_seed(3)
    release = run_ldp_embedding(x, params, seeds)
    want = brute_force(clipped(x, params.clip), params, seeds)
    assert len(want) >= 1 and len(release) == len(want)
    assert list(release.ids) == sorted(want)
    assert release.counts.tolist() == [float(want[h][0]) for h in release.ids]
    assert np.allclose(release.centroids, np.stack([want[h][1] for h in release.ids]), atol=1e-12)
    assert release.ledger.epsilon == math.inf and release.ledger.sigma == 0.0
    assert release.info["sigma"] == 0.0


def test_noisy_release_equals_brute_force_on_its_reports() -> None:
    """Finite ε large enough to release something in d = 8: the release is the brute-force
    grouping of the reports that the run's own noise key generates (both passes agree)."""
    pop = synthetic_population(3, 150, 30, 8, 0.5, RandomSource.seeded(2, "pop"), spread=0.01)
    params = FreParams(epsilon=200.0, delta=1e-6, radius=2.0, k=2, threshold=20, p_sample=0.5)
    seeds = SeedPlan.from_seed(5)
    release = run_ldp_embedding(pop.embeddings, params, seeds)
    key = seeds.secret(NOISE_LABEL).random_bytes(32)
    sigma = ldp_embedding_sigma(params)
    reports = np.concatenate(
        [b for _, b in local_reports(pop.embeddings, clip=1.0, sigma=sigma, noise_key=key)]
    )
    want = brute_force(reports, params, seeds)
    assert len(want) >= 2
    assert list(release.ids) == sorted(want)
    assert release.counts.tolist() == [float(want[h][0]) for h in release.ids]
    assert np.allclose(release.centroids, np.stack([want[h][1] for h in release.ids]), atol=1e-12)
    assert release.info["sigma"] == sigma > 0


@pytest.mark.parametrize("epsilon", [4.0, 8.0, 16.0])
def test_local_noise_destroys_the_clusters(epsilon: float) -> None:
    """Paper §7.3: at every ε ≤ 16 the noise (norm ≈ σ√d ≫ the bucket edge) scatters a clustered
    population of unit vectors in d = 384 so that no bucket reaches t = 100 — while without
    noise the same population releases its clusters."""
    pop = synthetic_population(4, 300, 100, 384, 0.5, RandomSource.seeded(4, "pop"), spread=0.05)
    seeds = SeedPlan.from_seed(6)
    release = run_ldp_embedding(pop.embeddings, FreParams.paper(epsilon), seeds)
    assert len(release) == 0 and release.centroids.shape == (0, 384)
    assert release.diagnostics["largest_report_bucket"] < 5
    assert len(run_ldp_embedding(pop.embeddings, FreParams.paper(math.inf), seeds)) >= 4


def test_ledger_names_one_local_term() -> None:
    params = FreParams.paper(8.0)
    release = run_ldp_embedding(np.eye(4, 16), params, SeedPlan.from_seed(1))
    ledger = release.ledger
    assert [t.name for t in ledger.terms] == [LOCAL_GAUSSIAN]
    term = ledger.term(LOCAL_GAUSSIAN)
    assert (term.epsilon, term.delta) == (8.0, 1e-6) == (ledger.epsilon, ledger.delta)
    assert "Balle & Wang" in term.source and "LDP" in term.source
    assert term.detail["delta_achieved"] <= 1e-6
    assert ledger.flat()["sensitivity"] == 2.0 * params.clip
    assert ledger.sigma == pytest.approx(ldp_embedding_sigma(params))
    json.dumps(ledger.to_dict(), allow_nan=False)
    assert release.method == "ldp-embedding"
    assert release.info["n_released"] == 0


def test_reproducible_under_a_seed() -> None:
    """Same seed, same release (also with the progress bar on)."""
    pop = synthetic_population(3, 150, 30, 8, 0.5, RandomSource.seeded(2, "pop"), spread=0.01)
    params = FreParams(epsilon=200.0, delta=1e-6, radius=2.0, k=2, threshold=20, p_sample=0.5)
    a = run_ldp_embedding(pop.embeddings, params, SeedPlan.from_seed(8))
    b = run_ldp_embedding(pop.embeddings, params, SeedPlan.from_seed(8), progress=True)
    assert a.ids == b.ids and np.array_equal(a.centroids, b.centroids)


def test_bad_inputs_rejected() -> None:
    params, seeds = FreParams.paper(8.0), SeedPlan.from_seed(1)
    with pytest.raises(InvalidParameterError, match="params must be FreParams"):
        run_ldp_embedding(np.eye(3), {"epsilon": 8}, seeds)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="seeds must be a SeedPlan"):
        run_ldp_embedding(np.eye(3), params, 1)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="2-D"):
        run_ldp_embedding(np.ones(3), params, seeds)
    with pytest.raises(InvalidParameterError, match="sigma must"):
        next(local_reports(np.eye(3), clip=1.0, sigma=-1.0, noise_key=None))
    with pytest.raises(InvalidParameterError, match="noise_key must be 32 bytes"):
        next(local_reports(np.eye(3), clip=1.0, sigma=1.0, noise_key=b"short"))
    with pytest.raises(InvalidParameterError, match="block_rows"):
        next(local_reports(np.eye(3), clip=1.0, sigma=0.0, noise_key=None, block_rows=0))
