"""Utility and SSP metrics (design §8): known answers, blocked == brute force, bounded memory."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

from mechanism import metrics
from mechanism.metrics import (
    choose_radius_by_quantile,
    cluster_recovery,
    empirical_ssp,
    frequent_mask,
    nearest_distances,
    nearest_neighbours,
    neighbour_counts,
    nn_distance_quantile,
    radius_quantile,
    transfer_radius,
    utility,
)
from primitives.errors import InvalidInputError, InvalidParameterError
from primitives.randomness import RandomSource


def _points(n: int, d: int, seed: int, *, dtype: type = np.float32) -> np.ndarray:
    x = RandomSource.seeded(seed, "metrics-test").normal((n, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(dtype)


def _brute_d2(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    diff = a.astype(np.float64)[:, None, :] - b.astype(np.float64)[None, :, :]
    return np.einsum("ijk,ijk->ij", diff, diff)


def _brute_counts(x: np.ndarray, r: float) -> np.ndarray:
    d2 = _brute_d2(x, x)
    np.fill_diagonal(d2, np.inf)
    return (d2 <= r * r).sum(axis=1)


# -- neighbour counts -------------------------------------------------------------------------------


def test_neighbour_counts_on_a_line_include_the_boundary() -> None:
    x = np.array([[0.0, 0.0], [0.5, 0.0], [1.0, 0.0], [3.0, 0.0], [3.0, 0.0]])
    assert neighbour_counts(x, 0.5, block=2).tolist() == [1, 2, 1, 1, 1]
    assert neighbour_counts(x, 0.4999, block=2).tolist() == [0, 0, 0, 1, 1]  # duplicates count
    assert neighbour_counts(x, 0.0, block=3).tolist() == [0, 0, 0, 1, 1]
    assert neighbour_counts(x, 100.0).tolist() == [4] * 5
    assert frequent_mask(neighbour_counts(x, 0.5), 2).tolist() == [False, True, False, False, False]


@pytest.mark.parametrize("block", [7, 64, 1000])
def test_neighbour_counts_exact_on_lattice_boundaries(block: int) -> None:
    """Integer-lattice points (multiples of 1/4): every distance² is exact in float32 and
    float64, and the radii are attained distances, so many pairs sit exactly on the boundary."""
    raw = RandomSource.seeded(7, "lattice").integers_below(9, 300 * 6).reshape(300, 6)
    x = raw.astype(np.float64) * 0.25
    d2 = _brute_d2(x, x)
    for r in np.sqrt(np.unique(d2))[[1, 3, 10, 25, 40]]:
        assert (neighbour_counts(x, float(r), block=block) == _brute_counts(x, float(r))).all()


@pytest.mark.parametrize(
    ("seed", "n", "d", "block", "dtype"),
    [
        (1, 500, 16, 64, np.float32),
        (2, 501, 16, 500, np.float64),
        (3, 400, 64, 9, np.float32),
        (6, 40, 8, 1, np.float32),
        (4, 333, 3, 32, np.float64),
        (5, 257, 384, 128, np.float32),
    ],
)
def test_neighbour_counts_blocked_equals_brute_force(
    seed: int, n: int, d: int, block: int, dtype: type
) -> None:
    x = _points(n, d, seed, dtype=dtype)
    d2 = _brute_d2(x, x)
    np.fill_diagonal(d2, np.inf)
    # radii at several quantiles of the pair distances, including exactly attained values
    for r in np.sqrt(np.quantile(d2[np.isfinite(d2)], [0.001, 0.05, 0.5]).tolist() + [d2[0, 1]]):
        assert (neighbour_counts(x, float(r), block=block) == _brute_counts(x, float(r))).all()


def test_neighbour_counts_centres_far_from_origin() -> None:
    """Large, shared offsets (gte-like norms ~40) do not inflate the error: data are centred."""
    x = _points(300, 32, 11, dtype=np.float64) + 40.0
    r = float(np.sqrt(np.quantile(_brute_d2(x, x), 0.1)))
    assert (neighbour_counts(x, r, block=50) == _brute_counts(x, r)).all()


def test_neighbour_counts_never_allocate_n_by_n() -> None:
    """With block < N the peak traced allocation stays far below one N×N bool matrix."""
    n = 4000
    x = _points(n, 8, 21)
    tracemalloc.start()
    try:
        neighbour_counts(x, 0.5, block=256)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < n * n // 4, peak  # an N×N bool alone would be n*n bytes


def test_neighbour_counts_progress_bar_and_validation(capsys: pytest.CaptureFixture[str]) -> None:
    x = _points(50, 4, 3)
    assert (neighbour_counts(x, 0.7, block=16, progress=True) == _brute_counts(x, 0.7)).all()
    assert "neighbour counts" in capsys.readouterr().err
    with pytest.raises(InvalidParameterError, match="radius must be a finite number >= 0"):
        neighbour_counts(x, -1.0)
    with pytest.raises(InvalidParameterError, match="block must be an integer >= 1"):
        neighbour_counts(x, 1.0, block=0)
    with pytest.raises(InvalidInputError, match="2-D"):
        neighbour_counts(x[0], 1.0)
    bad = x.copy()
    bad[3, 1] = np.nan
    with pytest.raises(InvalidInputError, match="NaN"):
        neighbour_counts(bad, 1.0)
    with pytest.raises(InvalidParameterError, match="threshold"):
        frequent_mask([1, 2], -1)


# -- nearest neighbours -----------------------------------------------------------------------------


@pytest.mark.parametrize(("block", "rank"), [(3, 1), (7, 3), (64, 2), (4096, 5)])
def test_nearest_neighbours_blocked_equals_brute_force(block: int, rank: int) -> None:
    a, b = _points(120, 24, 5), _points(210, 24, 6)
    dist, idx = nearest_neighbours(a, b, rank=rank, block=block)
    brute = np.sqrt(_brute_d2(a, b))
    assert np.allclose(dist, np.sort(brute, axis=1)[:, :rank], atol=1e-9, rtol=0)
    assert np.allclose(np.take_along_axis(brute, idx, axis=1), dist, atol=1e-12, rtol=0)
    assert np.allclose(nearest_distances(a, b, block=block), brute.min(axis=1), atol=1e-9, rtol=0)


def test_nearest_neighbours_exclude_self_and_edge_cases() -> None:
    x = np.array([[0.0], [1.0], [3.0], [6.0]])
    dist, idx = nearest_neighbours(x, x, rank=2, exclude_self=True, block=3)
    assert dist.tolist() == [[1.0, 3.0], [1.0, 2.0], [2.0, 3.0], [3.0, 5.0]]
    assert idx[[0, 1, 3]].tolist() == [[1, 2], [0, 2], [2, 1]]
    assert idx[2, 0] == 1 and idx[2, 1] in (0, 3)  # 0 and 6 tie at distance 3 from 3
    # fewer candidates than the rank: inf and -1
    d2, i2 = nearest_neighbours(x[:2], x[:2], rank=2, exclude_self=True)
    assert d2[:, 1].tolist() == [math.inf, math.inf] and i2[:, 1].tolist() == [-1, -1]
    assert nearest_distances(x, np.empty((0, 1))).tolist() == [math.inf] * 4
    with pytest.raises(InvalidInputError, match="same dimension"):
        nearest_distances(x, np.zeros((2, 2)))
    with pytest.raises(InvalidInputError, match="exclude_self"):
        nearest_neighbours(x, x[:2], exclude_self=True)


# -- utility ----------------------------------------------------------------------------------------


def test_utility_hand_example() -> None:
    v = np.array([[0.0, 0.0], [10.0, 0.0], [5.2, 0.0]])
    freq = np.array([True, True, False])
    s = np.array([[0.5, 0.0], [5.0, 0.0]])
    out = utility(s, v, 1.0, frequent=freq)
    assert out["precision"] == 0.5 and out["recall"] == 0.5 and out["f1"] == 0.5
    assert out["avg_l2"] == pytest.approx(2.75) and out["avg_l2_reverse"] == pytest.approx(2.75)
    assert out["precision_all"] == 1.0 and out["recall_all"] == pytest.approx(2 / 3)
    assert out["f1_all"] == pytest.approx(0.8)
    assert out["avg_l2_all"] == pytest.approx((0.5 + 0.2) / 2)
    assert out["n_reference"] == 2 and out["n_reference_all"] == 3 and out["n_synthetic"] == 2
    # alpha widens the hit radius: 5.0 is within 1.5·4 of (10, 0)
    assert utility(s, v[:2], 4.0)["recall"] == 1.0
    # no mask: the reference is F itself, no _all keys
    assert "precision_all" not in utility(s, v[:2], 1.0)


def test_utility_empty_synthetic_and_bad_mask() -> None:
    v = np.array([[0.0, 0.0], [1.0, 0.0]])
    out = utility(np.empty((0, 2)), v, 1.0)
    assert math.isnan(out["precision"]) and out["recall"] == 0.0 and math.isnan(out["f1"])
    with pytest.raises(InvalidInputError, match="boolean mask"):
        utility(v, v, 1.0, frequent=np.array([1, 0]))
    with pytest.raises(InvalidParameterError, match="alpha"):
        utility(v, v, 1.0, alpha=0.0)


def test_utility_matches_brute_force() -> None:
    s, v = _points(80, 16, 31), _points(300, 16, 32)
    freq = np.arange(300) % 3 == 0
    r = 0.9
    out = utility(s, v, r, frequent=freq, block=37)
    d = np.sqrt(_brute_d2(s, v[freq]))
    assert out["precision"] == pytest.approx(np.mean(d.min(axis=1) <= 1.5 * r))
    assert out["recall"] == pytest.approx(np.mean(d.min(axis=0) <= 1.5 * r))
    assert out["avg_l2"] == pytest.approx(d.min(axis=1).mean(), abs=1e-9)
    assert out["avg_l2_reverse"] == pytest.approx(d.min(axis=0).mean(), abs=1e-9)


# -- cluster recovery (Table 8) ---------------------------------------------------------------------


def test_cluster_recovery_labels() -> None:
    labels = ["a"] * 5 + ["b"] * 3 + ["c"] * 5
    out = cluster_recovery(labels, ["a", "b", "z"], threshold=5)
    assert out["precision"] == pytest.approx(1 / 3) and out["recall"] == 0.5
    assert out["f1"] == pytest.approx(0.4)
    assert (out["n_heavy"], out["n_released"], out["n_true_positive"]) == (2, 3, 1)
    empty = cluster_recovery(labels, [], threshold=5)
    assert math.isnan(empty["precision"]) and empty["recall"] == 0.0
    none_heavy = cluster_recovery(labels, ["a"], threshold=6)
    assert math.isnan(none_heavy["recall"]) and none_heavy["precision"] == 0.0


def test_cluster_recovery_bucket_index_rows_use_canonical_ids() -> None:
    rows = np.array([[1, -1]] * 3 + [[0, 2]] * 1, dtype=np.int64)
    canonical = "0000000000000001" + "ffffffffffffffff"
    out = cluster_recovery(rows, [canonical], threshold=3)
    assert out["precision"] == 1.0 and out["recall"] == 1.0
    with pytest.raises(InvalidInputError, match="integers"):
        cluster_recovery(rows.astype(float), [canonical], threshold=3)
    with pytest.raises(InvalidParameterError, match="threshold"):
        cluster_recovery(rows, [], threshold=0)


# -- empirical SSP ----------------------------------------------------------------------------------


def test_empirical_ssp_hand_example() -> None:
    outputs = np.array([[0.0, 0.0]])
    rare = np.array([[0.05, 0.0], [0.0, 0.45], [2.0, 0.0]])
    got = empirical_ssp(outputs, rare, 1.0, [0.1, 0.5, 1.5, 2.5])
    assert got == [
        (0.1, pytest.approx(1 / 3)),
        (0.5, pytest.approx(2 / 3)),
        (1.5, pytest.approx(2 / 3)),
        (2.5, 1.0),
    ]
    assert empirical_ssp(np.empty((0, 2)), rare, 1.0, [1.0]) == [(1.0, 0.0)]
    assert math.isnan(empirical_ssp(outputs, np.empty((0, 2)), 1.0, [1.0])[0][1])
    default = empirical_ssp(outputs, rare, 1.0)
    assert [p for p, _ in default] == [round(0.1 * i, 1) for i in range(1, 16)]
    with pytest.raises(InvalidParameterError, match="psis"):
        empirical_ssp(outputs, rare, 1.0, [-0.1])


def test_empirical_ssp_is_monotone_in_psi_and_counts_the_covered_points() -> None:
    """Blocked over 33 rows, δ*(ψ·r) is the fraction of rare points with an output within ψ·r,
    recounted here by brute force in float64 (no pair lies within 1e-6 of a boundary); it grows
    with ψ, through several values (from none of the 400 points to over a quarter)."""
    outputs, rare = _points(20, 8, 41), _points(400, 8, 42)
    got = empirical_ssp(outputs, rare, 0.5, block=33)
    diff = rare.astype(np.float64)[:, None, :] - outputs.astype(np.float64)[None, :, :]
    dist = np.linalg.norm(diff, axis=2).min(axis=1)
    for psi, _ in got:
        assert np.abs(dist - psi * 0.5).min() > 1e-6
    assert got == [(psi, pytest.approx(np.count_nonzero(dist <= psi * 0.5) / 400, abs=1e-12)) for psi, _ in got]
    vals = [d for _, d in got]
    assert vals == sorted(vals) and vals[0] == 0.0 and vals[-1] > 0.25 and len(set(vals)) >= 5


# -- radius transfer (paper §7.3) -------------------------------------------------------------------


def test_nn_distance_quantile_hand_example() -> None:
    x = np.array([[0.0], [1.0], [3.0], [6.0]])  # NN distances 1, 1, 2, 3; 2nd NN 3, 2, 3, 5
    assert nn_distance_quantile(x, 0.5) == 1.5
    assert nn_distance_quantile(x, 1.0) == 3.0
    assert nn_distance_quantile(x, 0.5, neighbour_rank=2) == 3.0
    assert choose_radius_by_quantile(x, quantile=0.0) == 1.0
    assert radius_quantile(1.0, x) == 0.5 and radius_quantile(2.5, x) == 0.75
    with pytest.raises(InvalidParameterError, match="quantile must be in"):
        nn_distance_quantile(x, 1.5)
    with pytest.raises(InvalidInputError, match="neighbour_rank=4"):
        nn_distance_quantile(x, 0.5, neighbour_rank=4)


def test_transfer_radius_follows_scale_and_quantile() -> None:
    ref = _points(400, 16, 51, dtype=np.float64)
    target = (
        30.0 * _points(500, 16, 51, dtype=np.float64)[:, ::-1] + 7.0
    )  # rescaled, moved, permuted
    r = nn_distance_quantile(ref, 0.3)
    mapped = transfer_radius(r, ref, target, block=128)
    q = radius_quantile(r, ref)
    assert q == pytest.approx(0.3, abs=1 / 400)
    assert mapped == pytest.approx(nn_distance_quantile(target, q), rel=1e-12)
    # same texts under a scaled embedder: the radius scales with it
    assert transfer_radius(r, ref, 30.0 * ref + 7.0) == pytest.approx(
        30.0 * transfer_radius(r, ref, ref), rel=1e-9
    )


def test_radius_helpers_say_public_data_only() -> None:
    for fn in (nn_distance_quantile, choose_radius_by_quantile, transfer_radius, radius_quantile):
        assert "PUBLIC" in (fn.__doc__ or ""), fn.__name__


def test_module_documents_the_boundary_tolerance() -> None:
    assert "tol = (d + 16)" in (metrics.__doc__ or "")


# -- over users ------------------------------------------------------------------------------------
# On a line (d = 1): users a (0.0, 0.1, 0.2), b (0.15), c (5.0, 5.05), d (5.1), e (9.0).
LINE = np.array([[0.0], [0.1], [0.2], [0.15], [5.0], [5.05], [5.1], [9.0]])
OWNERS = ["a", "a", "a", "b", "c", "c", "d", "e"]


def test_user_neighbour_counts_hand_example() -> None:
    """r = 0.3: a's texts see only b (their own texts do not count); b sees a; c's texts see d;
    d sees c; e sees nobody. Text-level counts differ wherever a user has several texts."""
    got = metrics.user_neighbour_counts(LINE, OWNERS, 0.3)
    assert got.tolist() == [1, 1, 1, 1, 1, 1, 1, 0]
    assert neighbour_counts(LINE, 0.3).tolist() == [3, 3, 3, 3, 2, 2, 2, 0]


@pytest.mark.parametrize("block", [1, 3, 64])
def test_user_neighbour_counts_equal_brute_force_and_reduce_to_texts(block: int) -> None:
    x = _points(150, 6, 31)
    owners = (RandomSource.seeded(5, "owners").uniform(150) * 40).astype(int)
    d2 = _brute_d2(x, x)
    expected = [
        len({owners[j] for j in np.flatnonzero(d2[i] <= 1.0) if owners[j] != owners[i]}) for i in range(150)
    ]
    assert metrics.user_neighbour_counts(x, owners, 1.0, block=block).tolist() == expected
    assert (metrics.user_neighbour_counts(x, np.arange(150), 1.0, block=block) == neighbour_counts(x, 1.0)).all()


def test_user_utility_hand_example() -> None:
    """Frequent texts: a's three and b's one (index 0-3). One output at 0.05: within α·r = 0.12
    of a's 0.0 and 0.1 and of b's 0.15, not of a's 0.2; one at 9.0 (a miss: only e, infrequent).
    Per user: a covers 2 of 3, b 1 of 1; user recall = (2/3 + 1)/2 while text recall = 3/4.
    Precision is the outputs' own: 1/2."""
    frequent = np.array([True] * 4 + [False] * 4)
    s = np.array([[0.05], [9.0]])
    got = metrics.user_utility(s, LINE, OWNERS, 0.1, alpha=1.2, frequent=frequent)
    assert got["precision"] == 0.5
    assert got["recall"] == pytest.approx((2 / 3 + 1) / 2)
    assert got["f1"] == pytest.approx(2 * 0.5 * (5 / 6) / (0.5 + 5 / 6))
    assert (got["n_users"], got["n_frequent_users"]) == (5, 2)
    assert utility(s, LINE, 0.1, alpha=1.2, frequent=frequent)["recall"] == 0.75
    one_each = metrics.user_utility(s, LINE, np.arange(8), 0.1, alpha=1.2, frequent=frequent)
    assert one_each["recall"] == 0.75  # one text per user: the text-level recall


def test_user_ssp_hand_example() -> None:
    """Infrequent: c's two texts, d's and e's (4-7). One output at 5.0: at ψ·r = 0.06 (ψ = 0.6,
    r = 0.1) it reaches c's 5.0 and 5.05 (0.05) but not d's 5.1: 1 of 3 users exposed (2 of 4
    texts); at ψ = 1.0 (0.1) also d: 2 of 3 users (3 of 4 texts); e never."""
    frequent = np.array([True] * 4 + [False] * 4)
    out = np.array([[5.0]])
    got = metrics.user_ssp(out, LINE, OWNERS, 0.1, (0.6, 1.0), frequent=frequent)
    assert got == [(0.6, pytest.approx(1 / 3)), (1.0, pytest.approx(2 / 3))]
    texts = empirical_ssp(out, LINE[~frequent], 0.1, (0.6, 1.0))
    assert texts == [(0.6, 0.5), (1.0, 0.75)]
    assert metrics.user_ssp(out, LINE, np.arange(8), 0.1, (0.6, 1.0), frequent=frequent) == texts
    assert metrics.user_ssp(np.zeros((0, 1)), LINE, OWNERS, 0.1, (1.0,), frequent=frequent) == [(1.0, 0.0)]
    assert math.isnan(metrics.user_ssp(out, LINE, OWNERS, 0.1, (1.0,), frequent=np.ones(8, bool))[0][1])


def test_user_metrics_check_their_inputs() -> None:
    with pytest.raises(InvalidInputError, match="frequent must be a boolean mask"):
        metrics.user_utility(LINE, LINE, OWNERS, 0.1, frequent=np.ones(3, bool))
    with pytest.raises(InvalidInputError, match="user_ids must have one entry per row"):
        metrics.user_neighbour_counts(LINE, OWNERS[:3], 0.1)
