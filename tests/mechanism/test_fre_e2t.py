"""The centralized mechanism (design §3, paper Algorithm 1) against a brute-force re-implementation.

The brute force below shares no code with ``mechanism.fre_e2t``: it projects in float64, groups
with a dict keyed by ``struct``-packed indices and averages with numpy.
"""

from __future__ import annotations

import math
import struct
from collections import defaultdict

import numpy as np
import pytest
from chi_square import z_two_sided
from fingerprint import assert_matches, fingerprint
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import mechanism.grouping as grouping
from mechanism.accounting import calibrate_noise
from mechanism.contributions import PrivacyUnit
from mechanism.fre_e2t import release_threshold, run_mechanism, sample_coins
from mechanism.grouping import group_buckets
from mechanism.params import FreParams
from mechanism.population import Population, synthetic_population
from mechanism.release import Release
from mechanism.seeds import COINS_LABEL, SeedPlan
from primitives.errors import InfeasibleBudgetError, InvalidInputError
from primitives.randomness import RandomSource

T = 100  # paper threshold t
SIZES = (200, 220, 250, 300, 400, 60, 40)  # five clusters of size >= 2t, two below t


@pytest.fixture(scope="module")
def population() -> Population:
    return synthetic_population(
        len(SIZES), SIZES, 1500, 48, 0.5, RandomSource.seeded(7, "population"), spread=0.02
    )


@pytest.fixture(scope="module")
def stat_population() -> Population:
    # 16 clusters x 128 coordinates: about 2000 standardized errors for the noise test.
    return synthetic_population(
        16, 320, 500, 128, 0.5, RandomSource.seeded(8, "population"), spread=0.02
    )


def brute_force(
    x: np.ndarray, params: FreParams, seeds: SeedPlan, coins: np.ndarray
) -> dict[str, tuple[int, np.ndarray]]:
    """id -> (n_h, exact mean of the sampled rows) for every released bucket."""
    d, k = x.shape[1], params.k
    z = seeds.public("projection").normal((d, k)).astype(np.float32).astype(np.float64)
    offsets = seeds.public("offsets").uniform(k) * params.bucket_edge
    y = x.astype(np.float64) @ z / math.sqrt(k)
    cells = np.floor((y - offsets) / params.bucket_edge).astype(np.int64)
    members: dict[str, list[int]] = defaultdict(list)
    for i in np.flatnonzero(coins):
        members[struct.pack(f">{k}q", *cells[i].tolist()).hex()].append(int(i))
    floor = math.ceil(round(params.tau, 9))  # τ = p_s·t up to float rounding
    # Rows are bucketed as given but summed after projection onto the ball of radius C.
    wide = x.astype(np.float64)
    norms = np.linalg.norm(wide, axis=1)
    clipped = np.where((norms > params.clip)[:, None], wide * (params.clip / norms)[:, None], wide)
    return {
        h: (len(rows), clipped[rows].mean(axis=0))
        for h, rows in members.items()
        if len(rows) >= floor
    }


def _check_against(release, expected, *, exact: bool) -> None:  # type: ignore[no-untyped-def]
    assert release.ids == sorted(expected)
    assert release.counts.tolist() == [expected[h][0] for h in release.ids]
    if exact:
        want = np.array([expected[h][1] for h in release.ids])
        np.testing.assert_allclose(release.centroids, want, rtol=0, atol=1e-12)


# -- the reference against brute force -----------------------------------------------------------
def test_eps_inf_releases_exact_bucket_means(population: Population) -> None:
    params = FreParams.paper(math.inf, threshold=T)
    # The seed is arbitrary; it is chosen so that the grid releases at least five buckets
    # (checked below), enough for the comparison with the brute force to mean something.
    seeds = SeedPlan.from_seed(20)
    release = run_mechanism(population.embeddings, params, seeds)
    assert release.ledger.sigma == 0 and not release.params.is_dp
    coins = np.ones(population.n, dtype=bool)
    assert np.array_equal(sample_coins(seeds, population.n, params), coins)
    expected = brute_force(population.embeddings, params, seeds, coins)
    assert len(expected) >= 5
    _check_against(release, expected, exact=True)
    assert release.diagnostics["n_sampled"] == population.n
    assert release.diagnostics["n_contributors"] == sum(c for c, _ in expected.values())


def test_noise_off_gives_exact_means_of_the_sampled_contributors(population: Population) -> None:
    """Noise off: the sampled contributors' exact means. The coins are Bernoulli(p_s = 0.5):
    z-test of their mean over the population (n = 2970) at α = 1e-6 (false failure below 1e-6
    for a fresh seed; a p_s of 0.4 or 0.6 would sit 11 standard errors out)."""
    params = FreParams.paper(8, threshold=T)
    seeds = SeedPlan.from_seed(22)
    release = run_mechanism(population.embeddings, params, seeds, noise=False)
    coins = sample_coins(seeds, population.n, params)
    assert abs(coins.mean() - 0.5) <= z_two_sided(1e-6) * 0.5 / math.sqrt(coins.size)  # p_s = 0.5 is applied
    _check_against(release, brute_force(population.embeddings, params, seeds, coins), exact=True)
    assert release.noise is False and release.info["sigma_applied"] == 0.0
    assert release.ledger.sigma > 0  # the ledger still states what a DP run would add


def test_noise_on_releases_the_same_buckets_as_noise_off(population: Population) -> None:
    params = FreParams.paper(8, threshold=T)
    seeds = SeedPlan.from_seed(22)
    on = run_mechanism(population.embeddings, params, seeds)
    off = run_mechanism(population.embeddings, params, seeds, noise=False)
    assert on.ids == off.ids and on.counts.tolist() == off.counts.tolist()
    assert not np.allclose(on.centroids, off.centroids)


@pytest.mark.parametrize("epsilon", [math.inf, 8.0])
def test_planted_clusters_come_out_and_rare_points_do_not(
    population: Population, epsilon: float
) -> None:
    """Clusters of size >= 2t yield a centroid near their centre; clusters smaller than t and
    isolated rare points get no centroid within r (semantic support protection, paper §5.2)."""
    params = FreParams.paper(epsilon, threshold=T)
    release = run_mechanism(population.embeddings, params, SeedPlan.from_seed(23))
    c = release.centroids
    # Centroid noise is sigma/n_h per coordinate: its norm is below 6·sigma·sqrt(d)/tau here.
    noise_norm = 6 * release.ledger.sigma * math.sqrt(population.dim) / params.tau
    gap = np.linalg.norm(c[:, None, :] - population.centres[None, :, :], axis=2)
    for j, size in enumerate(SIZES):
        near = gap[:, j].min()
        if size >= 2 * T:
            assert near <= population.spread + noise_norm, (j, size, near)
        if size < T:
            assert near > population.radius, (j, size, near)
    rare = population.embeddings[population.rare_mask].astype(np.float64)
    nearest = np.linalg.norm(c[:, None, :] - rare[None, :, :], axis=2).min()
    assert nearest > population.radius


def test_centroid_error_matches_sigma(stat_population: Population) -> None:
    """Standardized errors e = (centroid − exact sampled mean)·n_h/σ, pooled over released buckets
    and coordinates (~2000 values), must be N(0, 1) (design §6: error distribution matches σ).

    Tests: Kolmogorov-Smirnov against N(0, 1) (asymptotic Kolmogorov law with Stephens'
    correction) at alpha = 1e-3, and the chi-square variance test (Wilson-Hilferty, two-sided) at
    alpha = 1e-3. Fixed seed, so the outcome is deterministic; for a fresh seed the false-failure
    probability is at most 2e-3. A second check shows the variance test has power: the same errors
    standardized with a σ 10% too large are rejected.
    """
    params = FreParams.paper(8, threshold=T)
    seeds = SeedPlan.from_seed(24)
    x = stat_population.embeddings
    release = run_mechanism(x, params, seeds)
    expected = brute_force(x, params, seeds, sample_coins(seeds, x.shape[0], params))
    _check_against(release, expected, exact=False)
    sigma = release.ledger.sigma
    assert sigma == pytest.approx(calibrate_noise(params).sigma)
    means = np.array([expected[h][1] for h in release.ids])
    e = ((release.centroids - means) * release.counts[:, None] / sigma).ravel()
    assert e.size >= 1500

    assert _ks_pvalue(e) > 1e-3
    assert abs(_variance_z(e)) < 3.29  # two-sided 1e-3
    assert abs(_variance_z(e / 1.1)) > 3.29  # power: a 10% error in sigma is detected


def _normal_cdf(v: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.vectorize(math.erf)(v / math.sqrt(2.0)))


def _ks_pvalue(sample: np.ndarray) -> float:
    s = np.sort(sample)
    n = s.size
    cdf = _normal_cdf(s)
    i = np.arange(1, n + 1)
    d = max(float((i / n - cdf).max()), float((cdf - (i - 1) / n).max()))
    lam = d * (math.sqrt(n) + 0.12 + 0.11 / math.sqrt(n))
    return min(
        1.0, 2 * sum((-1) ** (j - 1) * math.exp(-2 * j * j * lam * lam) for j in range(1, 101))
    )


def _variance_z(sample: np.ndarray) -> float:
    """Wilson-Hilferty: (χ²_n/n)^(1/3) is ≈ N(1 − 2/(9n), 2/(9n))."""
    n = sample.size
    ratio = float(np.sum(sample**2)) / n
    return (ratio ** (1 / 3) - (1 - 2 / (9 * n))) / math.sqrt(2 / (9 * n))


# -- randomness -----------------------------------------------------------------------------------
def test_coins_follow_the_seed_contract() -> None:
    params = FreParams.paper(8)
    seeds = SeedPlan.from_seed(5)
    coins = sample_coins(seeds, 1000, params)
    assert coins.dtype == np.bool_ and coins.shape == (1000,)
    np.testing.assert_array_equal(coins, seeds.secret(COINS_LABEL).bernoulli(0.5, 1000))
    np.testing.assert_array_equal(coins, sample_coins(SeedPlan.from_seed(5), 1000, params))
    assert not np.array_equal(coins, sample_coins(SeedPlan.from_seed(6), 1000, params))
    # user i's coin does not depend on how many users there are
    np.testing.assert_array_equal(sample_coins(seeds, 10, params), coins[:10])
    # crypto mode: fresh coins every time
    fresh = SeedPlan(public_seed=seeds.public_seed)
    assert not np.array_equal(sample_coins(fresh, 1000, params), sample_coins(fresh, 1000, params))
    assert sample_coins(seeds, 50, FreParams.paper(math.inf)).all()


def test_seeded_run_is_reproducible_end_to_end(population: Population) -> None:
    params = FreParams.paper(8, threshold=T)
    a = run_mechanism(population.embeddings, params, SeedPlan.from_seed(9))
    b = run_mechanism(population.embeddings, params, SeedPlan.from_seed(9))
    c = run_mechanism(population.embeddings, params, SeedPlan.from_seed(10))
    assert a.ids == b.ids and a.counts.tolist() == b.counts.tolist()
    np.testing.assert_array_equal(a.centroids, b.centroids)
    assert a.to_json() == b.to_json()  # timings live in the diagnostics, not the release
    assert set(a.diagnostics["timings_s"]) >= {"bucketing", "centroids", "total"}
    assert a.seeds == SeedPlan.from_seed(9).to_dict() and a.seeds["rng_mode"] == "seeded"
    assert c.ids != a.ids or not np.array_equal(c.centroids, a.centroids)


def test_crypto_mode_records_only_the_public_seed(population: Population) -> None:
    params = FreParams.paper(8, threshold=T)
    seeds = SeedPlan.fresh()
    a = run_mechanism(population.embeddings, params, seeds)
    b = run_mechanism(population.embeddings, params, seeds)
    assert a.seeds == {"public_seed": seeds.public_seed.hex(), "rng_mode": "crypto"}
    # same public grid, but coins and noise are fresh per run
    assert a.ids != b.ids or not np.array_equal(a.centroids, b.centroids)


def test_release_is_sorted_and_counts_reach_the_threshold(population: Population) -> None:
    params = FreParams.paper(4, threshold=T)
    release = run_mechanism(population.embeddings, params, SeedPlan.from_seed(12))
    assert release.ids == sorted(release.ids) and len(release) > 0
    assert (release.counts >= params.tau).all()
    assert release.info["path"] == "mechanism" and release.info["n_released"] == len(release)
    assert release.centroids.shape == (len(release), population.dim)


def test_release_threshold_absorbs_rounding_of_tau() -> None:
    # 0.07 * 100 = 7.000000000000001 in binary floating point: a count of 7 is released
    params = FreParams(epsilon=8, p_sample=0.07, threshold=100)
    assert params.tau > 7 and release_threshold(params) == 7
    below = FreParams(epsilon=8, p_sample=0.57, threshold=100)  # 56.99999999999999
    assert below.tau < 57 and release_threshold(below) == 57
    assert release_threshold(FreParams.paper(8)) == 50
    assert release_threshold(FreParams(epsilon=8, p_sample=0.5, threshold=3)) == 2


def test_nothing_released_gives_an_empty_release() -> None:
    x = RandomSource.seeded(1, "x").normal((300, 16)).astype(np.float32)
    release = run_mechanism(x, FreParams.paper(8), SeedPlan.from_seed(1))
    assert len(release) == 0 and release.centroids.shape == (0, 16)


@pytest.mark.parametrize("clip", [1.0, 0.5])
def test_rows_are_clipped_to_c_before_summing(clip: float) -> None:
    """A row of norm 5 in a bucket of unit rows contributes at most C: the bucket sum's
    sensitivity really is at most 2C, as the accountant's cap assumes (design §4.2)."""
    d = 8
    x = np.zeros((100, d), dtype=np.float32)
    x[:, 0] = 1.0
    x[-1, 0] = 5.0
    # One huge cell (L = 2r/√k ≈ 1414): every row lands in it.
    params = FreParams(epsilon=math.inf, p_sample=1.0, threshold=50, k=2, radius=1e3, clip=clip)
    release = run_mechanism(x, params, SeedPlan.from_seed(5))
    assert release.counts.tolist() == [100]
    want = np.zeros(d)
    want[0] = clip  # the long row is scaled down to norm C, and so are unit rows above C
    np.testing.assert_allclose(release.centroids[0], want, rtol=0, atol=1e-12)
    assert np.linalg.norm(release.centroids[0]) <= clip * (1 + 1e-12)


# -- grouping ---------------------------------------------------------------------------------------
@given(
    hnp.arrays(
        np.int64, st.tuples(st.integers(0, 60), st.integers(1, 4)), elements=st.integers(-2, 2)
    )
)
def test_grouping_matches_a_dict(rows: np.ndarray) -> None:
    first, inverse, counts = group_buckets(rows)
    assert counts.sum() == rows.shape[0] and len(first) == len(set(map(tuple, rows.tolist())))
    for i, g in enumerate(inverse.tolist()):
        assert rows[first[g]].tolist() == rows[i].tolist()
        assert first[g] <= i  # the first occurrence represents the group
    assert np.bincount(inverse, minlength=len(counts)).tolist() == counts.tolist()


def test_grouping_survives_key_collisions(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = RandomSource.seeded(2, "rows").integers_below(5, 600).astype(np.int64).reshape(200, 3)
    honest = group_buckets(rows)
    # Every key equal: the hash groups everything together, the check must catch it.
    monkeypatch.setattr(grouping, "_key_multipliers", lambda k: np.zeros(k, dtype=np.uint64))
    first, inverse, counts = group_buckets(rows)
    assert sorted(counts.tolist()) == sorted(honest[2].tolist())
    for i, g in enumerate(inverse.tolist()):
        assert rows[first[g]].tolist() == rows[i].tolist()


# -- errors -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("x", "message"),
    [
        (np.zeros(5, dtype=np.float32), "2-D"),
        (np.zeros((0, 4), dtype=np.float32), "non-empty"),
        (np.array([["a", "b"]]), "real numbers"),
        (np.array([[0.1, np.nan]], dtype=np.float32), "NaN"),
    ],
)
def test_bad_embeddings_are_rejected(x: np.ndarray, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        run_mechanism(x, FreParams.paper(8), SeedPlan.from_seed(1))


def test_infeasible_budget_fails_before_any_work() -> None:
    params = FreParams(epsilon=8, p_sample=0.5, threshold=20)  # delta_fre alone exceeds delta
    with pytest.raises(InfeasibleBudgetError):
        run_mechanism(np.zeros((3, 4), dtype=np.float32), params, SeedPlan.from_seed(1))


# -- known answers: seeded releases pinned exactly, floats to 1e-9 (their last bits vary by CPU) --------
def _release_fingerprint(release: Release) -> tuple[str, tuple[float, ...]]:
    """The published document, the centroids and the diagnostics' counts (tests/support/fingerprint.py:
    exact but for the floats' last bits, which differ between CPUs' SIMD kernels)."""
    counts = {k: v for k, v in release.diagnostics.items() if k != "timings_s"}
    return fingerprint(release.to_json(), release.centroids, counts)


#: Recorded with the code at 6b85cb4 on an AVX2 CPU (the SHA-256s of raw float bytes before it were
#: known answers for AVX-512 machines only).
RELEASE_KAT: dict[str, tuple[str, tuple[float, ...]]] = {
    "eps8": ("be4b3f28a0d8f65a08dbdc1889c9543ae472ee5af9de7dc0717d96c50223df0f",
        (-65.78014531289213, 145.80290676668994, 104.20713313285133, 242.3202599381787)),
    "eps8_noise_off": ("d8c8f966cd59e04fc4b8ce4cadd44cd6f3d79da9abb4f798138ae77707435c63",
        (-72.40943377969327, 152.4948112638402, 102.88875297721597, 239.56128803710234)),
    "eps_inf": ("92ad03d2e0f936171a4c9bc658bdfd3aed7058cc3f1f3c41a283df07fd83bf8f",
        (1047.7988181669239, -451.6819003858794, -255.37586768380584, -164.33110243374142)),
    "none_released": ("a0507c058950797776a4c685fea100b396b57f11b6049f06206a05adf611e327",
        (-65.35784802776963, -329.2498135048237, 193.29734610793682, 249.13655667831082)),
    "users_cap2": ("735b6d446e94f087eabfd0d7bd997a5300a4af7dbe9b26cf794ad228e9c8131a",
        (-17.88106169449909, 198.73939170276643, 191.7289546017344, 14.310008105334072)),
}


def _kat_release(name: str, x: np.ndarray, *, progress: bool = False) -> Release:
    eps8 = FreParams.paper(8, threshold=T)
    if name == "eps8":
        return run_mechanism(x, eps8, SeedPlan.from_seed(9), progress=progress)
    if name == "eps8_noise_off":
        return run_mechanism(x, eps8, SeedPlan.from_seed(9), noise=False, progress=progress)
    if name == "eps_inf":
        inf = FreParams.paper(math.inf, threshold=T)
        return run_mechanism(x, inf, SeedPlan.from_seed(20), progress=progress)
    if name == "users_cap2":
        unit = PrivacyUnit(kind="user", cap=2, user_field="author")
        users = np.arange(x.shape[0]) // 3
        params = FreParams.paper(8, threshold=50)
        return run_mechanism(
            x, params, SeedPlan.from_seed(11), users=users, unit=unit, progress=progress
        )
    return run_mechanism(x[:30], eps8, SeedPlan.from_seed(3), progress=progress)


@pytest.mark.parametrize("name", sorted(RELEASE_KAT))
def test_seeded_release_known_answers(population: Population, name: str) -> None:
    """Recorded digests of seeded releases: a change to any stage or random stream shows here."""
    release = _kat_release(name, population.embeddings)
    assert_matches(_release_fingerprint(release), RELEASE_KAT[name])
    assert list(release.diagnostics["timings_s"]) == [
        "bucketing",
        "sample_threshold",
        "centroids",
        "total",
    ]


def test_progress_bar_does_not_change_the_release(population: Population) -> None:
    pytest.importorskip("tqdm")
    release = _kat_release("users_cap2", population.embeddings, progress=True)
    assert_matches(_release_fingerprint(release), RELEASE_KAT["users_cap2"])
