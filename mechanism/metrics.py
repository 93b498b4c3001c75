"""Utility and semantic-support-protection (SSP) metrics of a release (design §8, paper §7, App. A.4).

Everything that compares all pairs is blocked: distances come from float32 matrix products on
``block × block`` tiles, so memory is O(block² + N·d) and never O(N²).

Exactness at the boundary. A tile computes ``‖a‖² + ‖b‖² − 2⟨a, b⟩`` in float32 after centring the
data (distances are translation-invariant; centring shrinks the norms and with them the error).
The error of that formula is at most ``tol = (d + 16)·2⁻²⁴·(max‖a‖² + max‖b‖²)``: the worst-case
float32 dot-product error for length d (any summation order), plus the rounding of the input
to float32, of the norms, of the three tile updates and of the threshold. :func:`neighbour_counts` re-decides every pair whose float32 value lies within ``tol`` of
``r²`` with the float64 sum of squared coordinate differences of the original rows, so its counts
equal the float64 brute force ``Σ_j 1[Σ_c (x_ic − x_jc)² ≤ r·r]`` exactly. The nearest-neighbour
functions pick candidates in float32 and report the float64 distance of the chosen neighbour; that
distance exceeds the true minimum by at most ``sqrt(d_min² + 2·tol) − d_min``.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from tqdm import tqdm

from primitives.errors import InvalidInputError, InvalidParameterError

FloatArray = npt.NDArray[np.floating[Any]]
DEFAULT_BLOCK = 4096
DEFAULT_ALPHA = 1.5  # design §8: a synthetic point "hits" F within α·r
DEFAULT_PSIS: tuple[float, ...] = tuple(round(0.1 * i, 1) for i in range(1, 16))  # ψ ∈ [0.1, 1.5]

_F32_UNIT = 2.0**-24


# -- validation -----------------------------------------------------------------------------------
def _matrix(name: str, x: Any, *, allow_empty: bool = False) -> npt.NDArray[Any]:
    arr = np.asarray(x)
    if arr.ndim != 2:
        raise InvalidInputError(
            f"{name} must be a 2-D array (points × dimensions), got shape {arr.shape}"
        )
    if arr.shape[1] == 0 or (arr.shape[0] == 0 and not allow_empty):
        raise InvalidInputError(f"{name} must be non-empty, got shape {arr.shape}")
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise InvalidInputError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    for start in range(0, arr.shape[0], 65536):
        if not np.isfinite(arr[start : start + 65536]).all():
            raise InvalidInputError(f"{name} contains NaN or infinite values (rows from {start})")
    return arr


def _same_dim(a: npt.NDArray[Any], b: npt.NDArray[Any], names: str) -> None:
    if a.shape[1] != b.shape[1]:
        raise InvalidInputError(
            f"{names} must have the same dimension, got {a.shape[1]} and {b.shape[1]}"
        )


def _check_radius(radius: float, name: str = "radius") -> float:
    if isinstance(radius, bool) or not isinstance(radius, int | float | np.floating):
        raise InvalidParameterError(f"{name} must be a finite number >= 0, got {radius!r}")
    r = float(radius)
    if not (math.isfinite(r) and r >= 0):
        raise InvalidParameterError(f"{name} must be a finite number >= 0, got {radius!r}")
    return r


def _check_block(block: int) -> int:
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise InvalidParameterError(f"block must be an integer >= 1, got {block!r}")
    return block


# -- float32 working copies ---------------------------------------------------------------------------
def _centred32(
    parts: Sequence[npt.NDArray[Any]], centre: npt.NDArray[np.float64]
) -> list[tuple[npt.NDArray[np.float32], npt.NDArray[np.float32], float]]:
    """Per input: (centred float32 rows, their squared norms, max squared norm in float64)."""
    out = []
    for x in parts:
        x32 = np.empty(x.shape, dtype=np.float32)
        sq = np.empty(x.shape[0], dtype=np.float32)
        top = 0.0
        for start in range(0, x.shape[0], 65536):
            chunk = np.asarray(x[start : start + 65536], dtype=np.float64) - centre
            x32[start : start + 65536] = chunk
            norms = np.einsum("ij,ij->i", chunk, chunk)
            sq[start : start + 65536] = norms
            top = max(top, float(norms.max(initial=0.0)))
        out.append((x32, sq, top))
    return out


def _mean(x: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
    total = np.zeros(x.shape[1], dtype=np.float64)
    for start in range(0, x.shape[0], 65536):
        total += np.asarray(x[start : start + 65536], dtype=np.float64).sum(axis=0)
    total /= max(1, x.shape[0])
    return total


def _tolerance(dim: int, max_sq_a: float, max_sq_b: float) -> float:
    return (dim + 16) * _F32_UNIT * (max_sq_a + max_sq_b) + 1e-30


def _tile_d2(
    a32: npt.NDArray[np.float32],
    sqa: npt.NDArray[np.float32],
    b32: npt.NDArray[np.float32],
    sqb: npt.NDArray[np.float32],
) -> npt.NDArray[np.float32]:
    g = a32 @ b32.T  # one sgemm; the rest in place to keep a single tile-sized temporary
    g *= np.float32(-2.0)
    g += sqa[:, None]
    g += sqb[None, :]
    return g


def _exact_d2(
    a: npt.NDArray[Any],
    rows: npt.NDArray[np.int64],
    b: npt.NDArray[Any],
    cols: npt.NDArray[np.int64],
) -> npt.NDArray[np.float64]:
    """float64 Σ_c (a_rc − b_cc)² for the given index pairs, in chunks."""
    out = np.empty(rows.size, dtype=np.float64)
    step = max(1, 2_000_000 // max(1, a.shape[1]))
    for s in range(0, rows.size, step):
        diff = np.asarray(a[rows[s : s + step]], dtype=np.float64) - np.asarray(
            b[cols[s : s + step]], dtype=np.float64
        )
        out[s : s + step] = np.einsum("ij,ij->i", diff, diff)
    return out


# -- neighbour counts and the frequent set ----------------------------------------------------------------
TileHits = tuple[int, int, int, int, npt.NDArray[np.bool_] | None, npt.NDArray[np.int64], npt.NDArray[np.int64]]


def _within_radius_tiles(
    x: npt.NDArray[Any], r: float, block: int, *, progress: bool, desc: str
) -> Iterator[TileHits]:
    """The pairs i < j with ``‖x_i − x_j‖ ≤ r``, tile by tile over the upper triangle, each pair
    once: ``(i0, i1, j0, j1, sure, ii, jj)`` where ``sure`` (tile-local, or None) marks pairs the
    float32 value settles and ``(ii, jj)`` (absolute) are the band pairs re-decided in float64."""
    n, dim = x.shape
    ((x32, sq, top),) = _centred32([x], _mean(x))
    r2 = r * r
    tol = _tolerance(dim, top, top)
    lo_thr = np.float32(r2 - tol) if r2 > tol else None
    hi_thr = np.float32(r2 + tol)
    starts = list(range(0, n, block))
    total = len(starts) * (len(starts) + 1) // 2
    bar = tqdm(total=total, desc=desc, unit="tile", disable=not progress)
    try:
        for i0 in starts:
            i1 = min(n, i0 + block)
            for j0 in starts:
                if j0 < i0:
                    continue
                j1 = min(n, j0 + block)
                d2 = _tile_d2(x32[i0:i1], sq[i0:i1], x32[j0:j1], sq[j0:j1])
                if i0 == j0:  # keep the strict upper triangle: each pair once, no self pair
                    d2[np.tri(i1 - i0, j1 - j0, 0, dtype=bool)] = np.inf
                sure = d2 <= lo_thr if lo_thr is not None else None
                band = (d2 <= hi_thr) ^ sure if sure is not None else d2 <= hi_thr
                ii, jj = np.nonzero(band)
                ii = ii.astype(np.int64) + i0
                jj = jj.astype(np.int64) + j0
                if ii.size:
                    hit = _exact_d2(x, ii, x, jj) <= r2
                    ii, jj = ii[hit], jj[hit]
                yield i0, i1, j0, j1, sure, ii, jj
                bar.update(1)
    finally:
        bar.close()


def neighbour_counts(
    x: FloatArray, radius: float, *, block: int = DEFAULT_BLOCK, progress: bool = False
) -> npt.NDArray[np.int64]:
    """``N_r(v) = #{v' ≠ v : ‖v − v'‖₂ ≤ r}`` for every row (design §8), self excluded.

    Exact: equals the float64 brute force (see the module docstring for how the float32 tiles
    are made exact at the boundary). Duplicated rows count as neighbours of each other. Only the
    upper triangle of tiles is computed (each pair once); memory O(block² + N·d).
    """
    x = _matrix("x", x)
    r = _check_radius(radius)
    block = _check_block(block)
    n = x.shape[0]
    counts = np.zeros(n, dtype=np.int64)
    for i0, i1, j0, j1, sure, ii, jj in _within_radius_tiles(x, r, block, progress=progress, desc="neighbour counts"):
        if sure is not None:
            counts[i0:i1] += np.count_nonzero(sure, axis=1)
            counts[j0:j1] += np.count_nonzero(sure, axis=0)
        counts += np.bincount(ii, minlength=n)
        counts += np.bincount(jj, minlength=n)
    return counts


def user_neighbour_counts(
    x: FloatArray,
    users: npt.ArrayLike,
    radius: float,
    *,
    block: int = DEFAULT_BLOCK,
    progress: bool = False,
) -> npt.NDArray[np.int64]:
    """``N^user_r(v)``: how many users *other than v's own* hold a text within r of v.

    The frequent set at user level is ``N^user_r(v) ≥ t`` (:func:`frequent_mask`): a region
    filled by one prolific author is not frequent, because a release that bounds each user to
    one text per bucket cannot (and must not) find it. With one text per user this equals
    :func:`neighbour_counts`. Exact like it; memory O(block² + N·d) plus the distinct
    (text, neighbouring user) pairs.
    """
    from mechanism.contributions import dense_users

    x = _matrix("x", x)
    r = _check_radius(radius)
    block = _check_block(block)
    n = x.shape[0]
    owners, n_users = dense_users(users, n)
    seen = np.zeros(0, dtype=np.int64)
    pending: list[npt.NDArray[np.int64]] = []
    pending_size = 0  # kept as it grows: summing the list per tile made many small tiles quadratic
    for i0, _, j0, _, sure, ii, jj in _within_radius_tiles(x, r, block, progress=progress, desc="user neighbours"):
        if sure is not None:
            si, sj = np.nonzero(sure)
            ii = np.concatenate([ii, si.astype(np.int64) + i0])
            jj = np.concatenate([jj, sj.astype(np.int64) + j0])
        other = owners[ii] != owners[jj]
        ii, jj = ii[other], jj[other]
        # (text, user) codes, both directions; deduplicated as they come so memory follows the answer.
        pending.append(np.unique(np.concatenate([ii * n_users + owners[jj], jj * n_users + owners[ii]])))
        pending_size += pending[-1].size
        if pending_size > 4 * max(seen.size, 1 << 20):
            seen = np.unique(np.concatenate([seen, *pending]))
            pending, pending_size = [], 0
    seen = np.unique(np.concatenate([seen, *pending]))
    return np.bincount(seen // max(n_users, 1), minlength=n).astype(np.int64)


def frequent_mask(counts: npt.ArrayLike, threshold: int) -> npt.NDArray[np.bool_]:
    """``N_r(v) ≥ t`` (design §8 [decision]: ≥, self excluded)."""
    if isinstance(threshold, bool) or not isinstance(threshold, int | np.integer) or threshold < 0:
        raise InvalidParameterError(f"threshold must be an integer >= 0, got {threshold!r}")
    c = np.asarray(counts)
    if c.ndim != 1:
        raise InvalidInputError(f"counts must be 1-D, got shape {c.shape}")
    return c >= threshold


# -- nearest neighbours ---------------------------------------------------------------------------------
def nearest_neighbours(
    a: FloatArray,
    b: FloatArray,
    *,
    rank: int = 1,
    exclude_self: bool = False,
    block: int = DEFAULT_BLOCK,
    progress: bool = False,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """For each row of ``a``: the distances to and indices of its ``rank`` nearest rows of ``b``.

    Returns ``(dist, idx)`` of shape (len(a), rank), ascending; distances are float64 recomputed
    from the original rows (module docstring: within ``tol`` of the exact order statistic).
    ``exclude_self=True`` (a and b the same array) skips the pair (i, i). Rows with fewer than
    ``rank`` candidates get ``inf`` and index −1.
    """
    a = _matrix("a", a, allow_empty=True)
    b = _matrix("b", b, allow_empty=True)
    _same_dim(a, b, "a and b")
    block = _check_block(block)
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise InvalidParameterError(f"rank must be an integer >= 1, got {rank!r}")
    if exclude_self and a.shape[0] != b.shape[0]:
        raise InvalidInputError(
            f"exclude_self needs a and b to be the same points, got {a.shape[0]} and {b.shape[0]} rows"
        )
    na, nb = a.shape[0], b.shape[0]
    best_d = np.full((na, rank), np.inf, dtype=np.float64)
    best_i = np.full((na, rank), -1, dtype=np.int64)
    if na == 0 or nb == 0:
        return best_d, best_i
    centre = _mean(b)
    (a32, sqa, _), (b32, sqb, _) = _centred32([a, b], centre)
    # Keep a few spare float32 candidates so near-ties at the cut are settled in float64.
    keep = min(nb, rank + 4)
    # Narrower column tiles: the partial sort below needs an int64 index array per tile.
    col_block = min(block, 1024)
    a_starts = range(0, na, block)
    bar = tqdm(total=len(a_starts), desc="nearest neighbours", unit="block", disable=not progress)
    try:
        for i0 in a_starts:
            i1 = min(na, i0 + block)
            cand_d = np.full((i1 - i0, 0), np.inf, dtype=np.float32)
            cand_i = np.zeros((i1 - i0, 0), dtype=np.int64)
            for j0 in range(0, nb, col_block):
                j1 = min(nb, j0 + col_block)
                d2 = _tile_d2(a32[i0:i1], sqa[i0:i1], b32[j0:j1], sqb[j0:j1])
                if exclude_self and j0 < i1 and i0 < j1:
                    rows = np.arange(max(i0, j0), min(i1, j1))
                    d2[rows - i0, rows - j0] = np.inf
                idx = np.broadcast_to(np.arange(j0, j1, dtype=np.int64), d2.shape)
                both_d = np.concatenate([cand_d, d2], axis=1)
                both_i = np.concatenate([cand_i, idx], axis=1)
                if both_d.shape[1] > keep:
                    part = np.argpartition(both_d, keep - 1, axis=1)[:, :keep]
                    both_d = np.take_along_axis(both_d, part, axis=1)
                    both_i = np.take_along_axis(both_i, part, axis=1)
                cand_d, cand_i = both_d, both_i
            rows = np.repeat(np.arange(i0, i1, dtype=np.int64), cand_i.shape[1])
            exact = _exact_d2(a, rows, b, cand_i.ravel()).reshape(cand_i.shape)
            exact[~np.isfinite(cand_d)] = np.inf  # excluded self pairs / padding
            order = np.argsort(exact, axis=1, kind="stable")[:, :rank]
            take = min(rank, order.shape[1])
            best_d[i0:i1, :take] = np.sqrt(np.take_along_axis(exact, order, axis=1))
            chosen = np.take_along_axis(cand_i, order, axis=1)
            chosen[~np.isfinite(best_d[i0:i1, :take])] = -1
            best_i[i0:i1, :take] = chosen
            bar.update(1)
    finally:
        bar.close()
    return best_d, best_i


def nearest_distances(
    a: FloatArray, b: FloatArray, *, block: int = DEFAULT_BLOCK, progress: bool = False
) -> npt.NDArray[np.float64]:
    """``min_{y ∈ b} ‖x − y‖₂`` for every row x of ``a`` (blocked; ``inf`` if ``b`` is empty)."""
    return nearest_neighbours(a, b, block=block, progress=progress)[0][:, 0]


# -- utility (design §8) -----------------------------------------------------------------------------------
def precision_recall_f1(
    s_to_f: npt.NDArray[np.float64], f_to_s: npt.NDArray[np.float64], hit: float
) -> dict[str, float]:
    """Precision, recall, F1 and mean distances from each output's distance to its nearest
    frequent point (``s_to_f``) and each frequent point's to its nearest output (``f_to_s``):
    a hit is a distance ≤ ``hit``. Callers that score several α reuse one pair of distance passes."""
    precision = float(np.mean(s_to_f <= hit)) if s_to_f.size else math.nan
    recall = float(np.mean(f_to_s <= hit)) if f_to_s.size else math.nan
    if math.isnan(precision) or math.isnan(recall):
        f1 = math.nan
    elif precision + recall == 0:
        f1 = 0.0
    else:
        f1 = 2 * precision * recall / (precision + recall)
    finite_s = s_to_f[np.isfinite(s_to_f)]
    finite_f = f_to_s[np.isfinite(f_to_s)]
    return {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "avg_l2": float(finite_s.mean()) if finite_s.size else math.nan,
        "avg_l2_reverse": float(finite_f.mean()) if finite_f.size else math.nan,
    }


def _utility_inputs(
    synthetic: npt.ArrayLike, reference: npt.ArrayLike, radius: float, alpha: float
) -> tuple[npt.NDArray[Any], npt.NDArray[Any], float]:
    """The checked (S, V, r) of a utility computation, or a typed error naming the argument."""
    s = _matrix("synthetic", synthetic, allow_empty=True)
    v = _matrix("reference", reference)
    _same_dim(s, v, "synthetic and reference")
    r = _check_radius(radius)
    if not (isinstance(alpha, int | float) and math.isfinite(alpha) and alpha > 0):
        raise InvalidParameterError(f"alpha must be a finite number > 0, got {alpha!r}")
    return s, v, r


def utility(
    synthetic: FloatArray,
    reference: FloatArray,
    radius: float,
    alpha: float = DEFAULT_ALPHA,
    *,
    frequent: npt.ArrayLike | None = None,
    block: int = DEFAULT_BLOCK,
    progress: bool = False,
) -> dict[str, float]:
    """Precision, recall, F1 and average L2 of synthetic points against the frequent set F.

    F is ``reference[frequent]`` when a boolean mask is given (e.g. from :func:`frequent_mask`),
    otherwise all of ``reference``. A synthetic point is a hit if some v ∈ F lies within α·r;
    recall counts the v ∈ F with a synthetic point within α·r (design §8). ``avg_l2`` is
    S → F, ``avg_l2_reverse`` F → S. With a mask, the same four metrics against all of V
    (App. A.4) are added with the suffix ``_all``. Undefined values (empty S or F) are NaN.
    """
    s, v, r = _utility_inputs(synthetic, reference, radius, alpha)
    hit = alpha * r
    groups: list[tuple[str, npt.NDArray[Any]]] = []
    if frequent is None:
        groups.append(("", v))
    else:
        mask = np.asarray(frequent)
        if mask.dtype != np.bool_ or mask.shape != (v.shape[0],):
            raise InvalidInputError(
                f"frequent must be a boolean mask of shape ({v.shape[0]},), got {mask.dtype} {mask.shape}"
            )
        groups += [("", v[mask]), ("_all", v)]
    out: dict[str, float] = {"n_synthetic": float(s.shape[0]), "radius": r, "alpha": float(alpha)}
    for suffix, f in groups:
        s_to_f = nearest_distances(s, f, block=block, progress=progress)
        f_to_s = nearest_distances(f, s, block=block, progress=progress)
        out[f"n_reference{suffix}"] = float(f.shape[0])
        for key, value in precision_recall_f1(s_to_f, f_to_s, hit).items():
            out[f"{key}{suffix}"] = value
    return out


def _canonical_bucket_ids(labels: Any) -> list[Hashable]:
    arr = labels if isinstance(labels, np.ndarray) else None
    if arr is not None and arr.ndim == 2:
        if not np.issubdtype(arr.dtype, np.integer):
            raise InvalidInputError(f"bucket index rows must be integers, got dtype {arr.dtype}")
        # Same canonical form as the mechanism's bucket ids: k signed 64-bit big-endian ints, hex.
        raw = np.ascontiguousarray(arr, dtype=">i8")
        width = raw.shape[1] * 8
        flat = raw.tobytes()
        return [flat[i * width : (i + 1) * width].hex() for i in range(raw.shape[0])]
    if arr is not None and arr.ndim != 1:
        raise InvalidInputError(
            f"bucket labels must be 1-D labels or 2-D index rows, got {arr.shape}"
        )
    return [x.item() if isinstance(x, np.generic) else x for x in labels]


def cluster_recovery(
    reference_buckets: Sequence[Hashable] | npt.NDArray[Any],
    released: Iterable[Hashable],
    *,
    threshold: int,
) -> dict[str, float]:
    """Cluster-level precision and recall of the released heavy buckets (paper Table 8).

    ``reference_buckets`` labels every reference point with its bucket (or cluster): either a
    1-D sequence of hashable labels, or the (n, k) integer bucket-index rows of the public grid,
    which are converted to the mechanism's canonical ids (hex of k big-endian int64s, as
    ``ReleasedBucket.id`` in the centralized path). The heavy buckets are those holding at least
    ``threshold`` reference points. Precision = |released ∩ heavy| / |released|, recall =
    |released ∩ heavy| / |heavy|; NaN where the denominator is 0. (The protocol's ids are VOPRF
    tags: map them to labels first.)
    """
    if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1:
        raise InvalidParameterError(f"threshold must be an integer >= 1, got {threshold!r}")
    labels = _canonical_bucket_ids(reference_buckets)
    sizes: dict[Hashable, int] = {}
    for label in labels:
        sizes[label] = sizes.get(label, 0) + 1
    heavy = {label for label, size in sizes.items() if size >= threshold}
    out_set = set(
        _canonical_bucket_ids(np.asarray(released))
        if isinstance(released, np.ndarray)
        else released
    )
    tp = len(out_set & heavy)
    precision = tp / len(out_set) if out_set else math.nan
    recall = tp / len(heavy) if heavy else math.nan
    if math.isnan(precision) or math.isnan(recall) or precision + recall == 0:
        f1 = math.nan if (math.isnan(precision) or math.isnan(recall)) else 0.0
    else:
        f1 = 2 * precision * recall / (precision + recall)
    return {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "n_heavy": float(len(heavy)),
        "n_released": float(len(out_set)),
        "n_true_positive": float(tp),
    }


# -- semantic support protection (design §8) ------------------------------------------------------------
def empirical_ssp(
    outputs: FloatArray,
    infrequent: FloatArray,
    radius: float,
    psis: Sequence[float] = DEFAULT_PSIS,
    *,
    block: int = DEFAULT_BLOCK,
    progress: bool = False,
) -> list[tuple[float, float]]:
    """Empirical SSP: ``δ*(ψ·r)`` = fraction of infrequent points with some output within ψ·r.

    ``outputs`` are the released centroids (centroid level) or the embeddings of the synthetic
    texts (text level). Returns ``[(ψ, δ*), ...]`` in the order of ``psis``; δ* is 0 when there
    are no outputs and NaN when there are no infrequent points.
    """
    out = _matrix("outputs", outputs, allow_empty=True)
    rare = _matrix("infrequent", infrequent, allow_empty=True)
    _same_dim(out, rare, "outputs and infrequent")
    r = _check_radius(radius)
    checked = []
    for psi in psis:
        if (
            isinstance(psi, bool)
            or not isinstance(psi, int | float)
            or not (math.isfinite(psi) and psi >= 0)
        ):
            raise InvalidParameterError(f"psis must be finite numbers >= 0, got {psi!r}")
        checked.append(float(psi))
    if rare.shape[0] == 0:
        return [(psi, math.nan) for psi in checked]
    dist = nearest_distances(rare, out, block=block, progress=progress)
    return [(psi, float(np.mean(dist <= psi * r))) for psi in checked]


# -- the same over users (design §4.6) -----------------------------------------------------------------
def _owners(users: npt.ArrayLike, n: int) -> tuple[npt.NDArray[np.int64], int]:
    from mechanism.contributions import dense_users

    return dense_users(users, n)


def _user_share(owners: npt.NDArray[np.int64], n_users: int, hit: npt.NDArray[np.bool_],
                among: npt.NDArray[np.bool_]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """Per user: the share of their texts in ``among`` that ``hit``, and which users have any."""
    total = np.bincount(owners[among], minlength=n_users)
    hits = np.bincount(owners[among & hit], minlength=n_users)
    has = total > 0
    share = np.zeros(n_users, dtype=np.float64)
    share[has] = hits[has] / total[has]
    return share, has


def user_utility(
    synthetic: FloatArray,
    reference: FloatArray,
    users: npt.ArrayLike,
    radius: float,
    alpha: float = DEFAULT_ALPHA,
    *,
    frequent: npt.ArrayLike,
    block: int = DEFAULT_BLOCK,
    progress: bool = False,
) -> dict[str, float]:
    """Precision, recall and F1 over users: what :func:`utility` measures over texts, with every
    person weighed once however many texts they wrote.

    ``frequent`` is the user-level frequent set (:func:`user_neighbour_counts` ≥ t). Precision
    is a property of the outputs: the share of synthetic points with a frequent text within α·r,
    as in :func:`utility`. Recall is the mean, over users holding a frequent text, of the share
    of *their* frequent texts with a synthetic point within α·r: a user who wrote 100 texts of a
    cluster counts once, not 100 times, and with one text per user it is the text-level recall.
    (Any-of-their-texts would call a user recalled when one of many was; all-of would fail them
    for one miss; the mean is the expected recall of a text drawn from a random user.)
    """
    s, v, r = _utility_inputs(synthetic, reference, radius, alpha)
    mask = np.asarray(frequent)
    if mask.dtype != np.bool_ or mask.shape != (v.shape[0],):
        raise InvalidInputError(
            f"frequent must be a boolean mask of shape ({v.shape[0]},), got {mask.dtype} {mask.shape}"
        )
    owners, n_users = _owners(users, v.shape[0])
    hit = alpha * r
    s_to_f = nearest_distances(s, v[mask], block=block, progress=progress)
    covered = np.zeros(v.shape[0], dtype=bool)
    covered[mask] = nearest_distances(v[mask], s, block=block, progress=progress) <= hit
    share, has = _user_share(owners, n_users, covered, mask)
    precision = float(np.mean(s_to_f <= hit)) if s_to_f.size else math.nan
    recall = float(share[has].mean()) if has.any() else math.nan
    if math.isnan(precision) or math.isnan(recall):
        f1 = math.nan
    else:
        f1 = 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)
    return {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "n_users": float(n_users),
        "n_frequent_users": float(has.sum()),
        "radius": r,
        "alpha": float(alpha),
    }


def user_ssp(
    outputs: FloatArray,
    reference: FloatArray,
    users: npt.ArrayLike,
    radius: float,
    psis: Sequence[float] = DEFAULT_PSIS,
    *,
    frequent: npt.ArrayLike,
    block: int = DEFAULT_BLOCK,
    progress: bool = False,
) -> list[tuple[float, float]]:
    """Empirical SSP over users: ``δ*_user(ψ·r)`` = the share of users holding an infrequent text
    who have *some* infrequent text with an output within ψ·r.

    A user is exposed as soon as one of their rare texts is (what SSP protects is a person's rare
    content, and one leaked text is a leak); the share is over users, so a prolific author counts
    once. With one text per user it is :func:`empirical_ssp`'s δ*. Returns ``[(ψ, δ*), ...]``;
    0 without outputs, NaN when no user holds an infrequent text.
    """
    out = _matrix("outputs", outputs, allow_empty=True)
    v = _matrix("reference", reference)
    _same_dim(out, v, "outputs and reference")
    mask = np.asarray(frequent)
    if mask.dtype != np.bool_ or mask.shape != (v.shape[0],):
        raise InvalidInputError(
            f"frequent must be a boolean mask of shape ({v.shape[0]},), got {mask.dtype} {mask.shape}"
        )
    owners, n_users = _owners(users, v.shape[0])
    rare = ~mask
    curve = empirical_ssp(out, v[rare], radius, psis, block=block, progress=progress)  # validates r, ψ
    if not rare.any():
        return curve
    dist = np.full(v.shape[0], np.inf)
    dist[rare] = nearest_distances(v[rare], out, block=block, progress=progress)
    result = []
    for psi, _ in curve:
        share, has = _user_share(owners, n_users, dist <= psi * float(radius), rare)
        result.append((psi, float(np.mean(share[has] > 0))))
    return result


# -- radius transfer between embedders (paper §7.3) ------------------------------------------------------
def _check_quantile(q: float) -> float:
    if isinstance(q, bool) or not isinstance(q, int | float) or not (0.0 <= q <= 1.0):
        raise InvalidParameterError(f"quantile must be in [0, 1], got {q!r}")
    return float(q)


def _nn_distances(public: FloatArray, neighbour_rank: int, block: int) -> npt.NDArray[np.float64]:
    x = _matrix("public", public)
    if (
        isinstance(neighbour_rank, bool)
        or not isinstance(neighbour_rank, int)
        or neighbour_rank < 1
    ):
        raise InvalidParameterError(
            f"neighbour_rank must be an integer >= 1, got {neighbour_rank!r}"
        )
    if x.shape[0] <= neighbour_rank:
        raise InvalidInputError(
            f"public data needs more than neighbour_rank={neighbour_rank} points, got {x.shape[0]}"
        )
    dist, _ = nearest_neighbours(x, x, rank=neighbour_rank, exclude_self=True, block=block)
    return dist[:, neighbour_rank - 1]


def nn_distance_quantile(
    public: FloatArray, q: float, *, neighbour_rank: int = 1, block: int = DEFAULT_BLOCK
) -> float:
    """The q-quantile of each point's distance to its ``neighbour_rank``-th nearest other point.

    Meant for PUBLIC data only: the value is a deterministic function of every row, so computing
    it on private embeddings and using it as a parameter would leak them.
    """
    q = _check_quantile(q)
    return float(np.quantile(_nn_distances(public, neighbour_rank, block), q))


def choose_radius_by_quantile(
    public: FloatArray, *, quantile: float, neighbour_rank: int = 1, block: int = DEFAULT_BLOCK
) -> float:
    """Radius at a quantile of the nearest-neighbour distance distribution (paper §7.3).

    Meant for PUBLIC data only (see :func:`nn_distance_quantile`).
    """
    return nn_distance_quantile(public, quantile, neighbour_rank=neighbour_rank, block=block)


def radius_quantile(
    radius: float, public: FloatArray, *, neighbour_rank: int = 1, block: int = DEFAULT_BLOCK
) -> float:
    """Fraction of PUBLIC points whose ``neighbour_rank``-th nearest neighbour is within ``radius``."""
    r = _check_radius(radius)
    return float(np.mean(_nn_distances(public, neighbour_rank, block) <= r))


def transfer_radius(
    r_ref: float,
    ref_public: FloatArray,
    target_public: FloatArray,
    *,
    neighbour_rank: int = 1,
    block: int = DEFAULT_BLOCK,
) -> float:
    """Map a radius measured under one embedder to another by quantile matching (paper §7.3).

    ``ref_public`` and ``target_public`` are PUBLIC texts embedded by the reference and the
    target embedder (ideally the same texts; the rows need not correspond). The quantile q of
    ``r_ref`` in the reference nearest-neighbour distance distribution is found, and the target
    distribution's q-quantile is returned: the paper maps r = 0.5 under gtr to r' ≈ 15 under gte.
    Never pass private embeddings: the result is a function of every row.
    """
    q = radius_quantile(r_ref, ref_public, neighbour_rank=neighbour_rank, block=block)
    return nn_distance_quantile(target_public, q, neighbour_rank=neighbour_rank, block=block)
