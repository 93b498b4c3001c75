"""Synthetic populations: the planted ground truth must equal brute-force neighbour counts."""

from __future__ import annotations

import numpy as np
import pytest
from fingerprint import assert_matches, fingerprint

from mechanism.population import Population, synthetic_population
from primitives.errors import InvalidParameterError
from primitives.randomness import RandomSource


def _distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    sq = (a * a).sum(1)[:, None] - 2 * a @ b.T.copy() + (b * b).sum(1)[None, :]
    return np.sqrt(np.maximum(sq, 0.0))


def _brute_neighbour_counts(x: np.ndarray, radius: float) -> np.ndarray:
    out = np.empty(x.shape[0], dtype=np.int64)
    for start in range(0, x.shape[0], 1024):
        out[start : start + 1024] = (_distances(x[start : start + 1024], x) <= radius).sum(1) - 1
    return out


@pytest.mark.parametrize(
    ("n_clusters", "sizes", "n_rare", "dim", "expect_check"),
    [
        (5, 120, 400, 64, "pairwise"),  # 400 rare points in d = 64: pairs are checked
        (4, (30, 60, 90, 150), 2500, 384, "union bound"),  # union bound suffices in d = 384
        (3, (10, 20, 30), 40, 6, "pairwise"),  # low dimension: rejection does the work
    ],
)
def test_ground_truth_equals_brute_force(
    n_clusters: int, sizes: int | tuple[int, ...], n_rare: int, dim: int, expect_check: str
) -> None:
    pop = synthetic_population(n_clusters, sizes, n_rare, dim, 0.5, RandomSource.seeded(1, "p"))
    assert pop.rare_check.startswith(expect_check)
    assert pop.embeddings.dtype == np.float32 and pop.embeddings.shape == (pop.n, dim)
    np.testing.assert_allclose(np.linalg.norm(pop.embeddings, axis=1), 1.0, atol=1e-6)
    counts = _brute_neighbour_counts(pop.embeddings, pop.radius)
    np.testing.assert_array_equal(counts, pop.neighbour_counts)
    for threshold in (0, 29, 30, 100):
        np.testing.assert_array_equal(pop.frequent(threshold), counts >= threshold)


def test_geometry_of_clusters_and_rare_points() -> None:
    pop = synthetic_population(6, 50, 300, 32, 0.4, RandomSource.seeded(2, "p"), spread=0.1)
    x = pop.embeddings
    for j in range(6):
        members = pop.cluster_members(j)
        assert members.size == 50
        gap = np.linalg.norm(x[members].astype(np.float64) - pop.centres[j], axis=1)
        assert gap.max() <= 0.1 + 1e-6
    rare = x[pop.rare_mask]
    clustered = x[~pop.rare_mask]
    assert _distances(rare, clustered).min() >= pop.isolation
    assert _distances(rare, pop.centres).min() >= pop.isolation + pop.spread
    assert pop.rare_mask.sum() == 300 and (pop.neighbour_counts[pop.rare_mask] == 0).all()


def test_labels_and_shuffling() -> None:
    sizes = (7, 3, 5)
    shuffled = synthetic_population(3, sizes, 20, 16, 0.5, RandomSource.seeded(3, "p"))
    plain = synthetic_population(3, sizes, 20, 16, 0.5, RandomSource.seeded(3, "p"), shuffle=False)
    for pop in (shuffled, plain):
        assert np.bincount(pop.labels + 1).tolist() == [20, 7, 3, 5]
        assert pop.cluster_sizes == sizes
    assert plain.labels.tolist() == sorted(plain.labels.tolist(), key=lambda v: (v < 0, v))
    assert shuffled.labels.tolist() != plain.labels.tolist()


def test_deterministic_for_a_seed() -> None:
    def make(seed: int) -> Population:
        return synthetic_population(3, 20, 30, 24, 0.5, RandomSource.seeded(seed, "p"))

    a, b, c = make(4), make(4), make(5)
    np.testing.assert_array_equal(a.embeddings, b.embeddings)
    np.testing.assert_array_equal(a.labels, b.labels)
    assert not np.array_equal(a.embeddings, c.embeddings)


def test_only_rare_or_only_clusters() -> None:
    rare_only = synthetic_population(0, 1, 50, 16, 0.5, RandomSource.seeded(6, "p"))
    assert rare_only.rare_mask.all() and rare_only.centres.shape == (0, 16)
    clusters_only = synthetic_population(2, 10, 0, 16, 0.5, RandomSource.seeded(6, "p"))
    assert not clusters_only.rare_mask.any()
    assert clusters_only.rare_check.startswith("none")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_clusters": -1}, "n_clusters must be"),
        ({"cluster_size": (1, 2)}, "one size per cluster"),
        ({"cluster_size": 0}, "cluster_size must be"),
        ({"dim": 1}, "dim must be"),
        ({"radius": 2.5}, "radius must be in"),
        ({"spread": 0.3}, "spread must be in"),
        ({"isolation": 0.1}, "isolation must be"),
        ({"n_clusters": 0, "n_rare": 0}, "at least one point"),
    ],
)
def test_bad_parameters_are_named(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {
        "n_clusters": 3, "cluster_size": 10, "n_rare": 5, "dim": 8, "radius": 0.5,
        "rng": RandomSource.seeded(1, "p"),
    }  # fmt: skip
    args.update(kwargs)
    with pytest.raises(InvalidParameterError, match=message):
        synthetic_population(**args)  # type: ignore[arg-type]


def test_impossible_placement_is_reported() -> None:
    with pytest.raises(InvalidParameterError, match="cannot place"):
        synthetic_population(0, 1, 300, 3, 0.6, RandomSource.seeded(1, "p"))
    with pytest.raises(InvalidParameterError, match="cluster centres"):
        synthetic_population(40, 2, 0, 2, 0.5, RandomSource.seeded(1, "p"))


# -- known answers: seeded populations pinned exactly, floats to 1e-9 (their last bits vary by CPU) ---
#: Recorded with the code at 6b85cb4 on an AVX2 CPU (tests/support/fingerprint.py).
POPULATION_KAT: dict[str, tuple[tuple[object, ...], dict[str, object], str, tuple[str, tuple[float, ...]]]] = {
    # name: ((n_clusters, cluster_size, n_rare, dim, radius, seed), options, rare_check, fingerprint)
    "mixed": (
        (5, 120, 400, 64, 0.5, 1),
        {},
        "pairwise",
        (
            "b9022038296d6abaaf634544eb93bd587283d9a22fd212438cdb314bc038323f",
            (44.955383190490515, 158.36839527166475, 118.65445191720639, 71.22412353667822),
        ),
    ),
    "sizes_union": (
        (4, (30, 60, 90, 150), 2500, 384, 0.5, 2),
        {},
        "union bound <= 1e-12",
        (
            "c5f232af9654fff1d94c56ae64047d975306c48997203295f1fcf5e3a931a321",
            (97.5598924390448, 311.23466530139336, -101.81456898077448, 282.92171669381054),
        ),
    ),
    "ordered_lowdim": (
        (3, (10, 20, 30), 40, 6, 0.5, 3),
        {"shuffle": False, "spread": 0.1, "isolation": 1.2, "cluster_dim": 3},
        "pairwise",
        (
            "a90c47df1306c3eef6405b0f137a1b991bb66b7c51a58f2b4b382f18a868d162",
            (-128.99511288525906, -58.85603558849543, -14.217026732438239, 27.99031584583976),
        ),
    ),
    "big_cluster": (  # more rows than one generation block
        (1, 9000, 10, 8, 0.3, 4),
        {"cluster_dim": 4},
        "pairwise",
        (
            "95070ba6e1606d96c770b3f3e467166b58be9d0f610a1ad8a6adfc0d504b8737",
            (516.169063354556, -592.1388977163662, -62.4569032209328, 943.4864819030431),
        ),
    ),
    "rare_only": (
        (0, 1, 50, 16, 0.5, 6),
        {},
        "pairwise",
        (
            "8f8e668c41bde2b29e9c8ad6453a2eb1e02e5b1f69689f80f75b579dee2efa8b",
            (23.440927936474328, 24.24945217750501, -41.68490558509948, 40.65680958008161),
        ),
    ),
    "no_clusters_size_unused": (  # with no clusters the size is never checked
        (0, 0, 5, 8, 0.5, 7),
        {},
        "pairwise",
        (
            "fdcd801bd36d221d1aba29b86068f683f9feee4f2f71e13821cc92cbcec54f03",
            (-7.741126830130815, -8.171501410752535, 3.0207742590457203, -14.222916365414857),
        ),
    ),
}


@pytest.mark.parametrize("name", sorted(POPULATION_KAT))
def test_population_known_answers(name: str) -> None:
    """Recorded digests of seeded populations: a change to any draw or its order shows here."""
    (*args, seed), options, check, expected = POPULATION_KAT[name]
    pop = synthetic_population(*args, RandomSource.seeded(seed, "kat"), **options)  # type: ignore[arg-type, call-arg]
    fields = [list(pop.cluster_sizes), pop.radius, pop.spread, pop.isolation, pop.rare_check]
    assert pop.rare_check == check
    assert_matches(fingerprint(pop.embeddings, pop.labels, pop.centres, fields), expected)


@pytest.mark.parametrize(
    ("cluster_size", "message"),
    [
        (np.int64(-1), "cluster_size must be an integer >= 1, got -1"),
        ([np.int64(3), 0, 2], "cluster_size must be an integer >= 1, got 0"),
        ([2, True, 2], "cluster_size must be an integer >= 1, got True"),
    ],
)
def test_cluster_size_errors_known_answers(cluster_size: object, message: str) -> None:
    with pytest.raises(InvalidParameterError) as caught:
        synthetic_population(3, cluster_size, 5, 8, 0.5, RandomSource.seeded(1, "p"))  # type: ignore[arg-type]
    assert str(caught.value) == message
