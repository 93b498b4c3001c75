"""Core of the 3-wise binary fuse construction (Graf & Lemire 2022), vectorised with numpy.

Hashing follows the reference C implementation (``xor_singleheader/binaryfusefilter.h``):
``hash = murmur64(key + seed)``; ``h0 = mulhi(hash, segment_count * L)``, ``h1 = (h0 + L) ^
((hash >> 18) & (L - 1))``, ``h2 = (h0 + 2L) ^ (hash & (L - 1))``; a fingerprint is the low
``width`` bits of ``hash ^ (hash >> 32)``. The three positions lie in three consecutive segments,
so they are always distinct.

Peeling is done in rounds: every slot that one remaining key alone touches is peeled at once.
Two keys peeled in the same round never touch each other's peeled slot (a slot touched by two
remaining keys is not a single), so the values of one round can be assigned together, rounds in
reverse order.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

U64 = npt.NDArray[np.uint64]
MASK32 = (1 << 32) - 1
MASK64 = (1 << 64) - 1
_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)


def murmur64(h: U64) -> U64:
    """The murmur3 64-bit finaliser, element-wise (wrapping uint64 arithmetic)."""
    h = h ^ (h >> np.uint64(33))
    h = h * _M1
    h = h ^ (h >> np.uint64(33))
    h = h * _M2
    return h ^ (h >> np.uint64(33))


def murmur64_int(h: int) -> int:
    """:func:`murmur64` on one Python int (what a device computes for its one query)."""
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & MASK64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & MASK64
    return h ^ (h >> 33)


def mixed(keys: U64, seed: int) -> U64:
    """``murmur64(key + seed)`` for every key (the reference ``binary_fuse_mix_split``)."""
    return murmur64(keys + np.uint64(seed))


def mulhi(hashes: U64, factor: int) -> U64:
    """``(hash * factor) >> 64`` for a factor below 2^32 (so the result is below 2^32)."""
    f = np.uint64(factor)
    hi = hashes >> np.uint64(32)
    lo = hashes & np.uint64(MASK32)
    return (hi * f + ((lo * f) >> np.uint64(32))) >> np.uint64(32)


def positions(hashes: U64, segment_length: int, segment_count: int) -> npt.NDArray[np.int64]:
    """The three slots of every hash, shape ``(n, 3)``."""
    h0 = mulhi(hashes, segment_length * segment_count)
    mask = np.uint64(segment_length - 1)
    length = np.uint64(segment_length)
    h1 = (h0 + length) ^ ((hashes >> np.uint64(18)) & mask)
    h2 = (h0 + np.uint64(2) * length) ^ (hashes & mask)
    return np.stack([h0, h1, h2], axis=1).astype(np.int64)


def positions_int(hash_: int, segment_length: int, segment_count: int) -> tuple[int, int, int]:
    """:func:`positions` of one hash, with Python ints."""
    h0 = (hash_ * segment_length * segment_count) >> 64
    mask = segment_length - 1
    h1 = (h0 + segment_length) ^ ((hash_ >> 18) & mask)
    h2 = (h0 + 2 * segment_length) ^ (hash_ & mask)
    return h0, h1, h2


def fingerprints(hashes: U64, width: int) -> U64:
    """The low ``width`` bits of ``hash ^ (hash >> 32)``."""
    return (hashes ^ (hashes >> np.uint64(32))) & np.uint64((1 << width) - 1)


def peel(
    slots: npt.NDArray[np.int64], array_length: int
) -> list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]] | None:
    """Peel the 3-hypergraph whose edges are the rows of ``slots``.

    Returns the rounds, each ``(keys, their peeled slot)``, or ``None`` when a 2-core remains
    (the caller then tries another seed or a larger array).
    """
    n = slots.shape[0]
    if n == 0:
        return []
    flat = slots.ravel()
    owner = np.repeat(np.arange(n, dtype=np.int64), 3)
    count = np.bincount(flat, minlength=array_length)
    xor_keys = np.zeros(array_length, dtype=np.int64)
    np.bitwise_xor.at(xor_keys, flat, owner)
    rounds: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]] = []
    peeled = 0
    # Only slots touched by the previous round's keys can become singles next round.
    candidates = np.flatnonzero(count == 1)
    while candidates.size:
        singles = candidates[count[candidates] == 1]
        if singles.size == 0:
            break
        keys = xor_keys[singles]
        # One peeled slot per key: the lowest of its single slots (canonical, order-free).
        keys, first = np.unique(keys, return_index=True)
        chosen = singles[first]
        rounds.append((keys, chosen))
        peeled += keys.size
        touched = slots[keys].ravel()
        count -= np.bincount(touched, minlength=array_length)
        np.bitwise_xor.at(xor_keys, touched, np.repeat(keys, 3))
        candidates = np.unique(touched)
    if peeled != n:
        return None
    return rounds


def assign(
    rounds: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]],
    slots: npt.NDArray[np.int64],
    targets: U64,
    array_length: int,
    dtype: type[np.unsignedinteger],
) -> npt.NDArray[np.unsignedinteger]:
    """The slot array whose three slots of key ``k`` XOR to ``targets[k]``."""
    array = np.zeros(array_length, dtype=dtype)
    typed = targets.astype(dtype)
    for keys, chosen in reversed(rounds):
        s = slots[keys]
        array[chosen] = typed[keys] ^ array[s[:, 0]] ^ array[s[:, 1]] ^ array[s[:, 2]]
    return array


def reference_segment_length(n: int) -> int:
    """The reference's segment length for ``n`` keys and arity 3 (``1 << floor(ln n / ln 3.33 +
    2.25)``, at most 2^18), at least 4."""
    import math

    if n <= 1:
        return 4
    return max(4, min(1 << 18, 1 << int(math.floor(math.log(n) / math.log(3.33) + 2.25))))


def reference_size_factor(n: int) -> float:
    """The reference's array-to-keys ratio for arity 3: ``max(1.125, 0.875 + 0.25 ln(10^6)/ln n)``."""
    import math

    if n <= 1:
        return 1.125
    return max(1.125, 0.875 + 0.25 * math.log(1_000_000) / math.log(n))
