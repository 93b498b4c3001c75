"""The LDP (OUE) baseline of paper §7.3 (Table 8): the estimator, the exact count simulation
against materialised bit vectors, the empty part of the domain, the ledger and whole runs.

Statistical tests use fixed seeds; each docstring states the test, sample size and level. A fresh
seed would make this file fail falsely with probability below 2e-3 (Bonferroni over the checks).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict

import numpy as np
import numpy.typing as npt
import pytest
from chi_square import chi2_sf, z_two_sided

from mechanism.accounting import sensitivity_term
from mechanism.grid import PublicGrid, encode_bucket
from mechanism.ldp_oue import (
    COUNTS_LABEL,
    DEFAULT_SPLITS,
    EMPTY_ID_PREFIX,
    EMPTY_LABEL,
    NOISE_LABEL,
    OUE_HISTOGRAM,
    oue_estimate,
    oue_estimate_variance,
    oue_ledger,
    oue_probabilities,
    oue_release_floor,
    run_ldp_oue,
    simulate_empty_releases,
    simulate_oue_counts,
)
from mechanism.ledger import CENTROID_GAUSSIAN, SENSITIVITY_FAILURE
from mechanism.metrics import cluster_recovery
from mechanism.params import FreParams
from mechanism.population import Population, synthetic_population
from mechanism.seeds import SeedPlan
from primitives.analytic_gaussian import agm_delta
from primitives.errors import InfeasibleBudgetError, InvalidParameterError
from primitives.randomness import RandomSource

ALPHA = 1e-4  # per goodness-of-fit test


def binomial_pmf(n: int, p: float) -> npt.NDArray[np.float64]:
    return np.array([math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n + 1)])


def observed_pmf(c: int, n: int, epsilon: float) -> npt.NDArray[np.float64]:
    """Exact law of a bucket's observed bit count: Bin(c, p) * Bin(n − c, q) (convolution)."""
    p, q = 0.5, 1.0 / (math.exp(epsilon) + 1.0)
    return np.convolve(binomial_pmf(c, p), binomial_pmf(n - c, q))


def pooled_cells(
    counts: npt.NDArray[np.float64], expected: npt.NDArray[np.float64], min_expected: float = 5.0
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Adjacent values merged left to right until each cell expects ≥ min_expected; the last
    cell absorbs the remainder."""
    obs_cells: list[float] = []
    exp_cells: list[float] = []
    o_acc = e_acc = 0.0
    for o, e in zip(counts.tolist(), expected.tolist(), strict=True):
        o_acc += o
        e_acc += e
        if e_acc >= min_expected:
            obs_cells.append(o_acc)
            exp_cells.append(e_acc)
            o_acc = e_acc = 0.0
    obs_cells[-1] += o_acc
    exp_cells[-1] += e_acc
    return np.array(obs_cells), np.array(exp_cells)


def gof_pvalue(samples: npt.NDArray[np.int64], pmf: npt.NDArray[np.float64]) -> float:
    counts = np.bincount(samples, minlength=pmf.size).astype(float)
    obs, exp = pooled_cells(counts, pmf * samples.size)
    return chi2_sf(float(((obs - exp) ** 2 / exp).sum()), obs.size - 1)


def homogeneity_pvalue(
    a: npt.NDArray[np.int64], b: npt.NDArray[np.int64], pmf: npt.NDArray[np.float64]
) -> float:
    """Two-sample chi-square test that a and b come from one law; cells pooled by ``pmf``."""
    size = pmf.size
    ca = np.bincount(a, minlength=size).astype(float)
    cb = np.bincount(b, minlength=size).astype(float)
    # Cells from the pooled sample's expected counts, so both rows share them.
    expected = pmf * (a.size + b.size)
    edges, acc = [0], 0.0
    for j, e in enumerate(expected.tolist()):
        acc += e
        if acc >= 10.0:
            edges.append(j + 1)
            acc = 0.0
    edges[-1] = size
    ra = np.add.reduceat(ca, edges[:-1])
    rb = np.add.reduceat(cb, edges[:-1])
    table = np.stack([ra, rb])
    row = table.sum(axis=1, keepdims=True)
    col = table.sum(axis=0, keepdims=True)
    exp = row * col / table.sum()
    keep = col[0] > 0
    stat = float(((table[:, keep] - exp[:, keep]) ** 2 / exp[:, keep]).sum())
    return chi2_sf(stat, int(keep.sum()) - 1)


# -- the estimator -------------------------------------------------------------------------------
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0, 4.0, 8.0])
def test_variance_is_wang_et_al_closed_form(epsilon: float) -> None:
    n = 63_000
    wang = n * 4 * math.exp(epsilon) / (math.exp(epsilon) - 1) ** 2
    assert oue_estimate_variance(n, epsilon) == pytest.approx(wang, rel=1e-12)
    p, q = oue_probabilities(epsilon)
    assert (p, q) == (0.5, pytest.approx(1 / (math.exp(epsilon) + 1), rel=1e-15))


@pytest.mark.parametrize(
    ("n", "c", "epsilon"), [(10, 0, 1.0), (10, 10, 1.0), (500, 123, 2.5), (63_000, 7, 4.0)]
)
def test_estimator_is_unbiased_in_closed_form(n: int, c: int, epsilon: float) -> None:
    """E[observed] = c·p + (n − c)·q and the estimator is affine, so E[ĉ] = ĉ(E[observed]) = c."""
    p, q = oue_probabilities(epsilon)
    assert float(oue_estimate(c * p + (n - c) * q, n, epsilon)) == pytest.approx(c, abs=1e-9 * n)


@pytest.mark.parametrize(("n", "c", "epsilon"), [(12, 5, 1.0), (40, 0, 2.0), (60, 60, 0.5)])
def test_mean_and_variance_exact_from_the_pmf(n: int, c: int, epsilon: float) -> None:
    """Σ pmf·ĉ = c and Σ pmf·(ĉ − c)² = oue_estimate_variance(n, ε, c) over the exact law."""
    pmf = observed_pmf(c, n, epsilon)
    est = oue_estimate(np.arange(n + 1), n, epsilon)
    assert float(pmf @ est) == pytest.approx(c, abs=1e-9)
    assert float(pmf @ (est - c) ** 2) == pytest.approx(
        oue_estimate_variance(n, epsilon, c), rel=1e-9
    )


def test_monte_carlo_mean_and_variance() -> None:
    """20 000 simulated estimates for a bucket of c = 300 among n = 2000 at ε₁ = 2.

    Mean: |mean − c| ≤ z·sd/√R. Variance: |s²/Var − 1| ≤ z·√(2/(R − 1)) (ĉ is a sum of
    thousands of coins, so its kurtosis is 3 up to 1e-3); z the two-sided normal quantile at
    α = 1e-6. False failure below 2e-6 for a fresh seed.
    """
    n, c, epsilon, reps = 2000, 300, 2.0, 20_000
    observed = simulate_oue_counts(np.full(reps, c), n, epsilon, RandomSource.seeded(1, "oue"))
    est = oue_estimate(observed, n, epsilon)
    var = oue_estimate_variance(n, epsilon, c)
    z = z_two_sided(1e-6)
    assert abs(est.mean() - c) <= z * math.sqrt(var / reps)
    assert abs(est.var(ddof=1) / var - 1) <= z * math.sqrt(2 / (reps - 1))


def test_exact_simulation_agrees_with_materialised_bit_vectors() -> None:
    """n = 40 users over a domain of 4 buckets (20, 12, 8 and 0 users), ε₁ = 1, 5000 runs.

    Brute force: every user draws its 4 bits (own bit with p, others with q) and the bits are
    summed. Per bucket: a two-sample chi-square test of the brute-force counts against the exact
    simulation's, and a goodness-of-fit test of the simulation against the exact convolution
    law; 8 tests at alpha = 1e-4.
    """
    n, epsilon, reps = 40, 1.0, 5000
    sizes = np.array([20, 12, 8, 0])
    p, q = oue_probabilities(epsilon)
    bucket_of_user = np.repeat(np.arange(4), sizes)
    own = np.zeros((n, 4), dtype=bool)
    own[np.arange(n), bucket_of_user] = True
    u = RandomSource.seeded(2, "bits").uniform(reps * n * 4).reshape(reps, n, 4)
    brute = (u < np.where(own, p, q)[None]).sum(axis=1)  # (reps, 4)
    exact = simulate_oue_counts(
        np.tile(sizes, reps), n, epsilon, RandomSource.seeded(3, "oue")
    ).reshape(reps, 4)
    for h, c in enumerate(sizes.tolist()):
        pmf = observed_pmf(c, n, epsilon)
        assert homogeneity_pvalue(brute[:, h], exact[:, h], pmf) > ALPHA, h
        assert gof_pvalue(exact[:, h], pmf) > ALPHA, h


# -- the empty part of the domain ---------------------------------------------------------------
def test_release_floor_is_the_smallest_released_count() -> None:
    for n, epsilon, t in ((200, 1.0, 20), (63_000, 4.0, 100), (10, 3.0, 1), (1000, 0.1, 5)):
        floor = oue_release_floor(n, epsilon, t)
        assert oue_estimate(floor, n, epsilon) >= t
        assert floor == 0 or oue_estimate(floor - 1, n, epsilon) < t


def test_empty_false_positives_match_their_binomial() -> None:
    """E = 50 empty buckets, n = 200 users, ε₁ = 1, t = 20, 400 runs.

    π must equal P[Bin(n, q) ≥ o*] summed from math.comb (rel 1e-10). Then: the number released
    per run against Bin(E, π) (chi-square, alpha 1e-4); the pooled observed counts of released
    empty buckets against Bin(n, q) conditioned on ≥ o* (chi-square, alpha 1e-4); and
    materialised bits: over 400 runs of 200 users × 50 empty bits, the number of empty buckets
    reaching o* lies within 5 sd of 400·E·π (false failure 6e-7).
    """
    n, epsilon, t, empty, reps = 200, 1.0, 20, 50, 400
    _, q = oue_probabilities(epsilon)
    floor = oue_release_floor(n, epsilon, t)
    law = binomial_pmf(n, q)
    pi = float(law[floor:].sum())
    assert 0.05 < pi < 0.5  # the test is informative
    rng = RandomSource.seeded(4, "empty")
    runs = [simulate_empty_releases(empty, n, epsilon, t, rng) for _ in range(reps)]
    assert runs[0][1] == pytest.approx(pi, rel=1e-10)
    numbers = np.array([obs.size for obs, _ in runs])
    assert gof_pvalue(numbers, binomial_pmf(empty, pi)) > ALPHA
    pooled = np.concatenate([obs for obs, _ in runs])
    assert pooled.min() >= floor
    conditional = np.where(np.arange(n + 1) >= floor, law, 0.0) / pi
    assert gof_pvalue(pooled, conditional) > ALPHA
    bits = (
        RandomSource.seeded(5, "empty-bits").uniform(reps * n * empty).reshape(reps, n, empty) < q
    )
    hits = int((bits.sum(axis=1) >= floor).sum())
    mean = reps * empty * pi
    assert abs(hits - mean) <= z_two_sided(1e-6) * math.sqrt(mean * (1 - pi))  # binomial z-test, α = 1e-6


def test_no_empty_buckets_no_false_positives() -> None:
    observed, pi = simulate_empty_releases(0, 200, 1.0, 20, RandomSource.seeded(6))
    assert observed.size == 0 and pi > 0
    # A floor above n: nothing can be released.
    observed, pi = simulate_empty_releases(100, 10, 0.5, 1000, RandomSource.seeded(6))
    assert observed.size == 0 and pi == 0.0


# -- whole runs ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def population() -> Population:
    return synthetic_population(3, 150, 50, 16, 0.5, RandomSource.seeded(2, "pop"), spread=0.05)


PARAMS = FreParams(epsilon=8.0, delta=1e-6, threshold=20, k=4, radius=1.0, p_sample=0.5)


def bucket_members(
    x: npt.NDArray[np.floating], params: FreParams, seeds: SeedPlan
) -> dict[str, list[int]]:
    members: dict[str, list[int]] = defaultdict(list)
    grid = PublicGrid.derive(seeds, x.shape[1], params)
    for i, row in enumerate(grid.bucket_indices(x)):
        members[encode_bucket(row).hex()].append(i)
    return members


def clipped_sum(
    x: npt.NDArray[np.floating], rows: list[int], clip: float
) -> npt.NDArray[np.float64]:
    r = np.asarray(x[rows], dtype=np.float64)
    return (r * np.minimum(1.0, clip / np.linalg.norm(r, axis=1))[:, None]).sum(axis=0)


def test_run_is_the_composition_of_its_stages(population: Population) -> None:
    """A seeded run equals its stages replayed by hand: true counts per bucket (dict), observed
    counts from COUNTS_LABEL, false positives from EMPTY_LABEL, centroid noise from NOISE_LABEL."""
    x, seeds, eps1 = population.embeddings, SeedPlan.from_seed(3), 4.0
    release = run_ldp_oue(x, PARAMS, seeds, histogram_epsilon=eps1, empty_buckets=5000, false_positives=None)
    members = bucket_members(x, PARAMS, seeds)
    ids = sorted(members)
    n = x.shape[0]
    true_counts = np.array([len(members[h]) for h in ids])
    est = oue_estimate(
        simulate_oue_counts(true_counts, n, eps1, seeds.secret(COUNTS_LABEL)), n, eps1
    )
    kept = [h for h, e in zip(ids, est.tolist(), strict=True) if e >= PARAMS.threshold]
    empty_obs, pi = simulate_empty_releases(
        5000, n, eps1, PARAMS.threshold, seeds.secret(EMPTY_LABEL)
    )
    assert len(kept) >= 1 and empty_obs.size >= 1  # both kinds are exercised
    empty_ids = [f"{EMPTY_ID_PREFIX}{j:06d}" for j in range(empty_obs.size)]
    assert list(release.ids) == kept + empty_ids
    estimates = np.concatenate(
        [est[[ids.index(h) for h in kept]], oue_estimate(empty_obs, n, eps1)]
    )
    assert np.array_equal(release.counts, estimates)
    sums = np.stack(
        [clipped_sum(x, members[h], PARAMS.clip) for h in kept] + [np.zeros(16)] * empty_obs.size
    )
    noise = seeds.secret(NOISE_LABEL).normal((len(release), 16))
    want = (sums + release.ledger.sigma * noise) / estimates[:, None]
    assert np.allclose(release.centroids, want, rtol=1e-10, atol=1e-12)
    assert release.diagnostics["p_empty_released"] == pi
    assert (
        release.diagnostics["true_counts"] == [len(members[h]) for h in kept] + [0] * empty_obs.size
    )
    json.dumps(release.info, allow_nan=False)


def test_reproducible_under_a_seed(population: Population) -> None:
    """Same seed, same release (also with the progress bar on)."""
    a = run_ldp_oue(population.embeddings, PARAMS, SeedPlan.from_seed(4), histogram_epsilon=2.0)
    b = run_ldp_oue(
        population.embeddings, PARAMS, SeedPlan.from_seed(4), histogram_epsilon=2.0, progress=True
    )
    assert a.ids == b.ids and np.array_equal(a.centroids, b.centroids)
    assert np.array_equal(a.counts, b.counts)


def test_false_positive_ids_never_match_a_real_bucket(population: Population) -> None:
    """Empty-domain ids are not hex, so cluster recovery counts them as false positives."""
    seeds = SeedPlan.from_seed(3)
    release = run_ldp_oue(
        population.embeddings, PARAMS, seeds, histogram_epsilon=4.0, empty_buckets=5000, false_positives=None
    )
    fake = [i for i in release.ids if i.startswith(EMPTY_ID_PREFIX)]
    assert fake and all(not all(ch in "0123456789abcdef" for ch in i) for i in fake)
    labels = PublicGrid.derive(seeds, 16, PARAMS).bucket_indices(population.embeddings)
    scores = cluster_recovery(labels, release.ids, threshold=PARAMS.threshold)
    assert scores["n_released"] == len(release)
    assert scores["n_true_positive"] <= len(release) - len(fake)


def test_infinite_epsilon_releases_exactly_the_buckets_with_t_members(
    population: Population,
) -> None:
    x = population.embeddings.astype(np.float64)
    x[::4] *= 1.5  # rows outside the ball: the centroids are means of clipped rows
    params = FreParams(epsilon=math.inf, p_sample=1.0, threshold=20, k=4, radius=1.0)
    seeds = SeedPlan.from_seed(9)
    release = run_ldp_oue(x, params, seeds, histogram_epsilon=math.inf)
    members = bucket_members(x, params, seeds)
    heavy = sorted(h for h, rows in members.items() if len(rows) >= params.threshold)
    assert heavy and list(release.ids) == heavy
    assert release.counts.tolist() == [float(len(members[h])) for h in heavy]
    means = np.stack([clipped_sum(x, members[h], 1.0) / len(members[h]) for h in heavy])
    assert np.allclose(release.centroids, means, atol=1e-12)
    assert release.ledger.epsilon == math.inf and release.ledger.sigma == 0.0
    assert release.diagnostics["n_empty_released"] == 0


def test_ledger_composes_oue_sensitivity_and_gaussian() -> None:
    params = FreParams.paper(8.0)
    for fraction in DEFAULT_SPLITS:
        eps1 = fraction * params.epsilon
        ledger = oue_ledger(params, eps1)
        assert [t.name for t in ledger.terms] == [
            OUE_HISTOGRAM,
            SENSITIVITY_FAILURE,
            CENTROID_GAUSSIAN,
        ]
        oue, sens, agg = ledger.terms
        assert (oue.epsilon, oue.delta) == (eps1, 0.0)
        assert sens == sensitivity_term(params)
        assert agg.epsilon == pytest.approx(params.epsilon - eps1)
        assert agg.delta == pytest.approx(params.delta - sens.delta)
        assert ledger.epsilon == pytest.approx(params.epsilon)
        assert ledger.delta == pytest.approx(params.delta)
        assert agm_delta(ledger.sigma, agg.epsilon, params.sensitivity) <= agg.delta
        assert "Wang et al. 2017" in oue.source and "Balle & Wang" in agg.source
        json.dumps(ledger.to_dict(), allow_nan=False)
    assert all(0 < f < 1 for f in DEFAULT_SPLITS)


@pytest.mark.parametrize(
    ("histogram_epsilon", "match"),
    [
        (8.0, "histogram_epsilon must be in \\(0, epsilon"),
        (9.0, "histogram_epsilon must be in \\(0, epsilon"),
        (math.inf, "histogram_epsilon must be in \\(0, epsilon"),
        (0.0, "histogram_epsilon must be a number > 0"),
        (-1.0, "histogram_epsilon must be a number > 0"),
        (math.nan, "histogram_epsilon must be a number > 0"),
        (True, "histogram_epsilon must be a number > 0"),
        ("4", "histogram_epsilon must be a number > 0"),
    ],
)
def test_bad_histogram_epsilon_rejected(histogram_epsilon: object, match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        run_ldp_oue(
            np.eye(4),
            FreParams.paper(8.0),
            SeedPlan.from_seed(1),
            histogram_epsilon=histogram_epsilon,
        )  # type: ignore[arg-type]


def test_other_bad_parameters_rejected() -> None:
    seeds = SeedPlan.from_seed(1)
    for bad in (-1, True, 2.5):
        with pytest.raises(InvalidParameterError, match="empty_buckets must be None or an integer"):
            run_ldp_oue(
                np.eye(4), FreParams.paper(8.0), seeds, histogram_epsilon=4.0, empty_buckets=bad
            )  # type: ignore[arg-type]
    # Lemma 2's failure probability above delta leaves nothing for the centroids.
    loose = FreParams(epsilon=8.0, delta=1e-6, k=2, sensitivity_ratio=0.5)
    with pytest.raises(InfeasibleBudgetError, match="delta_sens"):
        run_ldp_oue(np.eye(4), loose, seeds, histogram_epsilon=4.0)
    for eps in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(InvalidParameterError, match="OUE epsilon must be a finite number > 0"):
            oue_probabilities(eps)
    with pytest.raises(InvalidParameterError, match="count must be <= n"):
        oue_estimate_variance(10, 1.0, 11)
    with pytest.raises(InvalidParameterError, match="true_counts must"):
        simulate_oue_counts(np.array([3, 11]), 10, 1.0, RandomSource.seeded(1))


@pytest.mark.parametrize(("n", "epsilon", "domain"), [(2000, 4.0, 10_000), (63_322, 2.0, 200_000), (500, 0.5, 50)])
def test_the_controlled_floor_is_the_least_that_holds_false_positives(n: int, epsilon: float, domain: int) -> None:
    """At or above the estimate's floor for t; an empty bucket passes it with probability at most
    0.05/D, and one count lower it would pass with more (the floor is the least such count)."""
    from mechanism.ldp_oue import DEFAULT_FALSE_POSITIVES, oue_controlled_floor
    from primitives.binomial import binomial_tail

    t = PARAMS.threshold
    floor = oue_controlled_floor(n, epsilon, t, domain, DEFAULT_FALSE_POSITIVES)
    _, q = oue_probabilities(epsilon)
    tail = lambda o: float(binomial_tail(o, n, q)[1].sum())  # noqa: E731
    base = oue_release_floor(n, epsilon, t)
    assert floor >= base and tail(floor) <= DEFAULT_FALSE_POSITIVES / domain
    assert floor == base or tail(floor - 1) > DEFAULT_FALSE_POSITIVES / domain
    assert oue_controlled_floor(n, epsilon, t, domain, None) == base


def test_with_the_control_empty_buckets_are_rarely_released(population: Population) -> None:
    """20 seeded runs against 5,000 empty buckets at ε₁ = 4: without the control each releases
    false positives; with it the expected total is at most 20·0.05 = 1, and more than 8 has
    probability below 1e-6 (Poisson tail), the test's false-failure probability."""
    total = 0
    for seed in range(20):
        release = run_ldp_oue(population.embeddings, PARAMS, SeedPlan.from_seed(100 + seed),
                              histogram_epsilon=4.0, empty_buckets=5000)
        total += sum(i.startswith(EMPTY_ID_PREFIX) for i in release.ids)
    assert total <= 8
    loose = run_ldp_oue(population.embeddings, PARAMS, SeedPlan.from_seed(100), histogram_epsilon=4.0,
                        empty_buckets=5000, false_positives=None)
    assert sum(i.startswith(EMPTY_ID_PREFIX) for i in loose.ids) > 8
