"""Grouping rows of bucket indices: which rows share a bucket (one sort of a 64-bit key).

Shared by the mechanism (sampled rows by bucket) and contribution bounding (rows by user and
bucket), which is why it is a module of its own rather than part of either.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

# Odd multipliers of the 64-bit bucket key (a fixed, public choice: grouping must not depend on any
# seed). Collisions are detected and resolved exactly, so these only affect speed.
_KEY_MULTIPLIERS_SEED = 0x9E3779B97F4A7C15


def _key_multipliers(k: int) -> npt.NDArray[np.uint64]:
    state = _KEY_MULTIPLIERS_SEED
    out = []
    for _ in range(k):
        # splitmix64 steps: well-spread odd constants without drawing on any randomness source.
        state = (state + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        out.append((z ^ (z >> 31)) | 1)
    return np.array(out, dtype=np.uint64)


def _group_exact(
    rows: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """(first row of each group, group of each row, group sizes) by lexicographic sort."""
    n = rows.shape[0]
    order = np.lexsort(rows.T[::-1])
    ordered = rows[order]
    new_group = np.ones(n, dtype=bool)
    new_group[1:] = np.any(ordered[1:] != ordered[:-1], axis=1)
    group_of_sorted = np.cumsum(new_group) - 1
    inverse = np.empty(n, dtype=np.intp)
    inverse[order] = group_of_sorted
    starts = np.flatnonzero(new_group)
    counts = np.diff(np.append(starts, n))
    # First occurrence in input order: lexsort is stable, so the first of each run is it.
    first = order[starts]
    return first.astype(np.intp), inverse, counts.astype(np.intp)


def group_buckets(
    rows: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Group identical rows of an (n, k) int64 array: (first row per group, inverse, counts).

    Rows are hashed to one 64-bit key and grouped with a single sort; the grouping is then checked
    row by row against each group's first row, and on any key collision recomputed exactly by a
    lexicographic sort. Group numbering follows the sorted keys (callers order by bucket id).
    """
    n, k = rows.shape
    if n == 0:
        empty = np.empty(0, dtype=np.intp)
        return empty, empty, empty
    mult = _key_multipliers(k)
    keys = np.zeros(n, dtype=np.uint64)
    for j in range(k):  # column at a time: no (n, k) uint64 temporary
        keys += rows[:, j].astype(np.uint64) * mult[j]
    _, first, inverse, counts = np.unique(
        keys, return_index=True, return_inverse=True, return_counts=True
    )
    inverse = inverse.reshape(-1)
    consistent = True
    for start in range(0, n, 1 << 16):
        stop = min(n, start + (1 << 16))
        if not np.array_equal(rows[start:stop], rows[first[inverse[start:stop]]]):
            consistent = False
            break
    if not consistent:
        return _group_exact(rows)
    return first.astype(np.intp), inverse.astype(np.intp), counts.astype(np.intp)


__all__ = ["group_buckets"]
