"""Synthetic populations with known frequent and rare points, for tests, demos and benchmarks.

A population is a set of unit vectors made of *planted clusters* and *isolated rare points*, built
so that the neighbour count ``N_r(x)`` (other points within distance ``radius``, paper §3) of every
point is known exactly without computing any distance:

* every cluster point lies within chord distance ``spread`` of its centre, so two points of one
  cluster are at most ``2·spread`` apart; with ``spread < radius/2`` they are all neighbours;
* centres are at least ``2·spread + radius`` apart (checked), so points of different clusters are
  never neighbours;
* rare points are at least ``spread + isolation`` from every centre (checked), hence more than
  ``isolation`` (default ``2·radius``) from every cluster point and from any average of cluster
  points, and more than ``radius`` from each other (checked, or guaranteed by a union bound below
  ``1e-12`` where checking all pairs would be quadratic).

So a cluster point's ``N_r`` is its cluster size minus one and a rare point's is zero.

Speed: each cluster varies in a random ``cluster_dim``-dimensional subspace orthogonal to its
centre (embedding clusters are low-dimensional), and rare points are drawn isotropically in a
random subspace just large enough for the union bound, so a population of 10^6 points costs about
``10^6·(cluster_dim + 1)`` normal draws rather than ``10^6·d``. Distances to centres are exact by
construction, whatever the subspace.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from primitives.errors import InvalidParameterError
from primitives.randomness import RandomSource

# Relative slack on every separation, so float32 rounding of the stored points cannot turn a
# "just outside" pair into a neighbour.
_MARGIN = 1e-3
# Union bound on "some pair of rare points is within radius" below which pairs are not checked.
_PAIR_FAILURE = 1e-12
_BLOCK = 8192


@dataclass(frozen=True, slots=True, kw_only=True)
class Population:
    """Embeddings with their planted structure (the ground truth of design §8's metrics)."""

    embeddings: npt.NDArray[np.float32]  # (N, d), unit norm
    labels: npt.NDArray[np.int64]  # (N,), cluster id or -1 for a rare point
    centres: npt.NDArray[np.float64]  # (n_clusters, d), unit norm
    cluster_sizes: tuple[int, ...]
    radius: float
    spread: float
    isolation: float
    rare_check: str  # "pairwise" or "union bound <= 1e-12"

    def __post_init__(self) -> None:
        n = self.embeddings.shape[0]
        if self.labels.shape != (n,):
            raise InvalidParameterError(f"labels must have shape ({n},), got {self.labels.shape}")
        if len(self.cluster_sizes) != self.centres.shape[0]:
            raise InvalidParameterError("one cluster size per centre is required")

    @property
    def n(self) -> int:
        return int(self.embeddings.shape[0])

    @property
    def dim(self) -> int:
        return int(self.embeddings.shape[1])

    @property
    def rare_mask(self) -> npt.NDArray[np.bool_]:
        mask: npt.NDArray[np.bool_] = self.labels < 0
        return mask

    @property
    def neighbour_counts(self) -> npt.NDArray[np.int64]:
        """Exact N_r of every point: cluster size − 1 for cluster points, 0 for rare points."""
        sizes = np.append(np.asarray(self.cluster_sizes, dtype=np.int64), 1)
        counts: npt.NDArray[np.int64] = sizes[self.labels] - 1  # label -1 picks the trailing 1
        return counts

    def frequent(self, threshold: int) -> npt.NDArray[np.bool_]:
        """Points with at least ``threshold`` neighbours within ``radius`` (paper §3: frequent)."""
        mask: npt.NDArray[np.bool_] = self.neighbour_counts >= threshold
        return mask

    def cluster_members(self, cluster: int) -> npt.NDArray[np.intp]:
        return np.flatnonzero(self.labels == cluster)


def _unit_rows(v: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    out: npt.NDArray[np.float64] = v / np.linalg.norm(v, axis=1, keepdims=True)
    return out


def _orthonormal_rows(
    vectors: npt.NDArray[np.float64], against: npt.NDArray[np.float64] | None = None
) -> npt.NDArray[np.float64]:
    """Orthonormalize the rows of ``vectors`` (and make them orthogonal to the unit ``against``)
    by modified Gram-Schmidt, applied twice for accuracy; Gaussian rows are independent a.s."""
    out = np.array(vectors, dtype=np.float64, copy=True)
    for _ in range(2):
        for i in range(out.shape[0]):
            v = out[i]
            if against is not None:
                v -= (v @ against) * against
            if i:
                v -= (out[:i] @ v) @ out[:i]
            v /= np.linalg.norm(v)
    return out


def _check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise InvalidParameterError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _draw_centres(
    n_clusters: int, dim: int, separation: float, rng: RandomSource
) -> npt.NDArray[np.float64]:
    """Unit centres pairwise at least ``separation`` apart (sequential rejection)."""
    accepted = np.empty((n_clusters, dim), dtype=np.float64)
    count = 0
    attempts = 0
    while count < n_clusters:
        attempts += 1
        if attempts > 50:
            raise InvalidParameterError(
                f"cannot place {n_clusters} cluster centres {separation:.3g} apart in dimension "
                f"{dim}: lower n_clusters, spread or radius, or raise dim"
            )
        batch = _unit_rows(rng.normal((n_clusters - count, dim)))
        for v in batch:
            if count:
                gaps = np.linalg.norm(accepted[:count] - v, axis=1)
                if gaps.min() < separation:
                    continue
            accepted[count] = v
            count += 1
    return accepted


def _cap_bound(dim: int, chord: float) -> float:
    """P(‖a − b‖ ≤ chord) for independent uniform unit a, b in R^dim: ≤ exp(−dim·s²/2),
    s = 1 − chord²/2 (spherical cap bound, K. Ball, *An Elementary Introduction to Modern Convex
    Geometry*, Lemma 2.2); 1 when s ≤ 0."""
    s = 1.0 - chord * chord / 2.0
    return 1.0 if s <= 0 else math.exp(-dim * s * s / 2.0)


def _cluster_sizes(cluster_size: int | Sequence[int], n_clusters: int) -> tuple[int, ...]:
    """One size per cluster, from a single size or a sequence of them."""
    if isinstance(cluster_size, int | np.integer) and not isinstance(cluster_size, bool):
        size = int(cluster_size)
        if n_clusters:  # with no clusters the size is never used, so never checked
            _check_int("cluster_size", size, 1)
        return (size,) * n_clusters
    sizes = tuple(_check_int("cluster_size", s, 1) for s in cluster_size)  # type: ignore[union-attr]
    if len(sizes) != n_clusters:
        raise InvalidParameterError(
            f"cluster_size must give one size per cluster ({n_clusters}), got {len(sizes)}"
        )
    return sizes


def _separations(
    radius: float, spread: float | None, isolation: float | None
) -> tuple[float, float]:
    """``(spread, isolation)``, defaults filled in, checked against ``radius``."""
    if not (isinstance(radius, int | float) and math.isfinite(radius) and 0 < radius < 2):
        raise InvalidParameterError(f"radius must be in (0, 2) on the unit sphere, got {radius!r}")
    spread = 0.45 * radius if spread is None else float(spread)
    isolation = 2.0 * radius if isolation is None else float(isolation)
    if not (0 <= spread < radius / 2):
        raise InvalidParameterError(f"spread must be in [0, radius/2 = {radius / 2}), got {spread}")
    if not (radius <= isolation):
        raise InvalidParameterError(f"isolation must be >= radius = {radius}, got {isolation}")
    return spread, isolation


def _labels(
    sizes: tuple[int, ...], n_rare: int, *, shuffle: bool, rng: RandomSource
) -> npt.NDArray[np.int64]:
    """Cluster id per row (−1 for a rare point), in uniformly random order with ``shuffle``."""
    labels = np.concatenate(
        [np.full(s, j, dtype=np.int64) for j, s in enumerate(sizes)]
        + [np.full(n_rare, -1, dtype=np.int64)]
    )
    if shuffle:
        labels = labels[np.argsort(rng.uint64(labels.shape[0]), kind="stable")]
    return labels


def _place_cluster(
    out: npt.NDArray[np.float32],
    rows: npt.NDArray[np.intp],
    centre: npt.NDArray[np.float64],
    *,
    spread: float,
    q: int,
    rng: RandomSource,
) -> None:
    """Fill ``out[rows]`` with unit points within chord ``spread`` of ``centre``, varying in a
    random ``q``-dimensional subspace orthogonal to it."""
    basis_t = _orthonormal_rows(rng.normal((q, centre.shape[0])), centre).astype(np.float32)
    c32 = centre.astype(np.float32)
    for start in range(0, rows.shape[0], _BLOCK):
        r = rows[start : start + _BLOCK]
        w = _unit_rows(rng.normal((r.shape[0], q))).astype(np.float32)
        chord = spread * rng.uniform(r.shape[0])
        theta = 2.0 * np.arcsin(chord / 2.0)  # ‖cos θ·c + sin θ·u − c‖ = 2 sin(θ/2) = chord
        # Scaling w first keeps the (rows × d) work to one product and one broadcast add.
        pts = (w * np.sin(theta).astype(np.float32)[:, None]) @ basis_t
        pts += np.cos(theta).astype(np.float32)[:, None] * c32[None, :]
        out[r] = pts


def synthetic_population(
    n_clusters: int,
    cluster_size: int | Sequence[int],
    n_rare: int,
    dim: int,
    radius: float,
    rng: RandomSource,
    *,
    spread: float | None = None,
    isolation: float | None = None,
    cluster_dim: int = 16,
    shuffle: bool = True,
) -> Population:
    """Planted clusters plus isolated rare points on the unit sphere, with exact ground truth.

    ``cluster_size`` is one size for all clusters or one per cluster. ``spread`` (default
    ``0.45·radius``) bounds each point's distance to its centre; ``isolation`` (default
    ``2·radius``) bounds from below a rare point's distance to every cluster point. With
    ``shuffle`` the rows are in uniformly random order (labels say which is which).
    """
    n_clusters = _check_int("n_clusters", n_clusters, 0)
    n_rare = _check_int("n_rare", n_rare, 0)
    dim = _check_int("dim", dim, 2)
    cluster_dim = _check_int("cluster_dim", cluster_dim, 1)
    sizes = _cluster_sizes(cluster_size, n_clusters)
    spread, isolation = _separations(radius, spread, isolation)
    n = sum(sizes) + n_rare
    if n == 0:
        raise InvalidParameterError("a population needs at least one point")

    centre_sep = (2 * spread + radius) * (1 + _MARGIN)
    centres = _draw_centres(n_clusters, dim, centre_sep, rng) if n_clusters else np.empty((0, dim))
    labels = _labels(sizes, n_rare, shuffle=shuffle, rng=rng)
    # Rows grouped by label: each cluster's block is generated once and scattered into place.
    by_label = np.argsort(labels, kind="stable")
    bounds = np.searchsorted(labels[by_label], np.arange(-1, n_clusters + 1))
    out = np.empty((n, dim), dtype=np.float32)
    for j in range(n_clusters):
        rows = by_label[bounds[j + 1] : bounds[j + 2]]
        _place_cluster(out, rows, centres[j], spread=spread, q=min(cluster_dim, dim - 1), rng=rng)

    rare_check = "none (no rare points)"
    if n_rare:
        rare_rows = by_label[bounds[0] : bounds[1]]
        rare_check = _place_rare(
            out, rare_rows, centres, spread + isolation * (1 + _MARGIN), radius, rng
        )
    return Population(
        embeddings=out,
        labels=labels,
        centres=centres,
        cluster_sizes=sizes,
        radius=float(radius),
        spread=spread,
        isolation=isolation,
        rare_check=rare_check,
    )


def _place_rare(
    out: npt.NDArray[np.float32],
    rows: npt.NDArray[np.intp],
    centres: npt.NDArray[np.float64],
    centre_gap: float,
    radius: float,
    rng: RandomSource,
) -> str:
    """Fill ``out[rows]`` with unit points ``≥ centre_gap`` from every centre and ``> radius``
    from each other; returns how the pairwise condition is guaranteed."""
    n_rare, dim = rows.shape[0], out.shape[1]
    pair_chord = radius * (1 + _MARGIN)
    pairs = n_rare * (n_rare - 1) / 2.0
    # Smallest isotropic subspace in which the union bound over pairs is below _PAIR_FAILURE.
    s = 1.0 - pair_chord * pair_chord / 2.0
    if pairs == 0:
        needed = 1
    elif s <= 0:
        needed = dim
    else:
        needed = math.ceil(2 * math.log(pairs / _PAIR_FAILURE) / s**2)
    # At least 32 directions (when dim allows) so redraws near a centre have room to move.
    sub = min(dim, max(32, needed))
    basis_t = np.eye(dim) if sub == dim else _orthonormal_rows(rng.normal((sub, dim)))
    proven = pairs * _cap_bound(sub, pair_chord) <= _PAIR_FAILURE

    todo = np.arange(n_rare)
    for _ in range(200):
        if todo.size == 0:
            break
        pts = _unit_rows(rng.normal((todo.size, sub))) @ basis_t
        ok = np.ones(todo.size, dtype=bool)
        if centres.shape[0]:
            for start in range(0, todo.size, _BLOCK):
                blk = pts[start : start + _BLOCK]
                gram = blk @ centres.T
                # ‖a − c‖² = 2 − 2⟨a, c⟩ for unit vectors.
                ok[start : start + _BLOCK] = (2.0 - 2.0 * gram.max(axis=1)) >= centre_gap**2
        out[rows[todo[ok]]] = pts[ok].astype(np.float32)
        todo = todo[~ok]
        if todo.size == 0 and not proven:
            todo = _close_pairs(out, rows, pair_chord)
    if todo.size:
        raise InvalidParameterError(
            f"cannot place {n_rare} isolated rare points in dimension {dim} with "
            f"{centres.shape[0]} clusters: lower n_rare, n_clusters or radius, or raise dim"
        )
    return f"union bound <= {_PAIR_FAILURE:g}" if proven else "pairwise"


def _close_pairs(
    out: npt.NDArray[np.float32], rows: npt.NDArray[np.intp], chord: float
) -> npt.NDArray[np.intp]:
    """Positions (into ``rows``) of rare points to redraw: the later point of every close pair."""
    pts = out[rows].astype(np.float64)
    n = pts.shape[0]
    redo = np.zeros(n, dtype=bool)
    limit = 1.0 - chord * chord / 2.0  # ⟨a, b⟩ > limit ⇔ ‖a − b‖² = 2 − 2⟨a, b⟩ < chord²
    for start in range(0, n, 2048):
        gram = pts[start : start + 2048] @ pts.T
        i, j = np.nonzero(gram > limit)
        i = i + start
        later = np.maximum(i, j)[i != j]
        redo[later] = True
    return np.flatnonzero(redo)
