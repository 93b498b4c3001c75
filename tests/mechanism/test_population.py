"""Synthetic populations: the planted ground truth must equal brute-force neighbour counts."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

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


# -- known answers: seeded populations pinned bit for bit -----------------------------------------
POPULATION_KAT: dict[str, tuple[tuple[object, ...], dict[str, object], str, str]] = {
    # name: ((n_clusters, cluster_size, n_rare, dim, radius, seed), options, rare_check, sha256)
    "mixed": (
        (5, 120, 400, 64, 0.5, 1),
        {},
        "pairwise",
        "26d830393032c5d0ae973b429f5ce3245ff54412a6f10817d3f7c10d6f84846a",
    ),
    "sizes_union": (
        (4, (30, 60, 90, 150), 2500, 384, 0.5, 2),
        {},
        "union bound <= 1e-12",
        "d7e841407ca27a61c93a95e8e2c1ca9f462f8f965f1bfc07d38a13e2d94483a7",
    ),
    "ordered_lowdim": (
        (3, (10, 20, 30), 40, 6, 0.5, 3),
        {"shuffle": False, "spread": 0.1, "isolation": 1.2, "cluster_dim": 3},
        "pairwise",
        "74bd44417956052feb9417eff9cd55787c0872506679636e62e5b05de8b35754",
    ),
    "big_cluster": (  # more rows than one generation block
        (1, 9000, 10, 8, 0.3, 4),
        {"cluster_dim": 4},
        "pairwise",
        "fbfa2d3a4f76c744dd59c226e82be5eccdd0b1d1473ac6be17b2562f0adbb197",
    ),
    "rare_only": (
        (0, 1, 50, 16, 0.5, 6),
        {},
        "pairwise",
        "e741b3fa94d5f60cadbb3d37349ab5b0e34a7905cd9aadf0a02e040ffa627206",
    ),
    "no_clusters_size_unused": (  # with no clusters the size is never checked
        (0, 0, 5, 8, 0.5, 7),
        {},
        "pairwise",
        "7b1937989024e2beec07991cd44e899c52a9886a7e3a69af8c5541b0adb673ab",
    ),
}


@pytest.mark.parametrize("name", sorted(POPULATION_KAT))
def test_population_known_answers(name: str) -> None:
    """Recorded digests of seeded populations: a change to any draw or its order shows here."""
    (*args, seed), options, check, expected = POPULATION_KAT[name]
    pop = synthetic_population(*args, RandomSource.seeded(seed, "kat"), **options)  # type: ignore[arg-type, call-arg]
    h = hashlib.sha256()
    for array in (pop.embeddings, pop.labels, pop.centres):
        h.update(np.ascontiguousarray(array).tobytes())
    fields = (pop.cluster_sizes, pop.radius, pop.spread, pop.isolation, pop.rare_check)
    h.update(repr(fields).encode())
    assert pop.rare_check == check and h.hexdigest() == expected


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
