"""A standard ribbon (Dillinger & Walzer, "Ribbon filter: practically smaller than Bloom and
Xor", 2021) holding each released tag's fingerprint and count: the broadcast that meets the
issue's 64 kB target at 13,812 tags, where the 3-wise fuse of :mod:`primitives.compact.fuse`
needs about 1.19 slots per tag and the ribbon about 1.06.

Each key gets a start ``s`` in ``[0, m - 64]`` and a 64-bit coefficient row ``c`` (bit 0 set);
the builder solves, over GF(2), ``XOR_{j : bit j of c} Z[s + j] = target(key)`` for all keys at
once by on-the-fly Gaussian elimination on the banded matrix, then back-substitutes. A query
XORs the up to 64 slots its row selects. Two slot arrays share the matrix: fingerprints (the
filter: a key outside the set matches with probability 2^-fingerprint_bits) and counts.

Hashing, from the 64-bit key ``k`` of :func:`primitives.compact.fuse.key64`::

    hash  = murmur64((k + seed) mod 2^64)
    start = (hash * (m - 63)) >> 64
    coeff = murmur64((hash + 0x9E3779B97F4A7C15) mod 2^64) | 1
    fingerprint = (hash ^ (hash >> 32)) mod 2^fingerprint_bits

Byte format ``RCB1`` (integers little-endian):

======  ====  =========================================================================
offset  size  field
======  ====  =========================================================================
0       4     magic ``RCB1``
4       1     fingerprint bits: 8, 16 or 32
5       1     count bits: 8, 16 or 32
6       1     ribbon width: 64
7       1     reserved: 0
8       8     seed (u64)
16      4     n (u32): number of tags
20      4     m (u32): slots, >= 64 (0 when n = 0)
24      ...   m fingerprint slots, then m count slots
======  ====  =========================================================================
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import ClassVar

import numpy as np
import numpy.typing as npt
from numba import njit

from primitives.compact import _fuse_core as core
from primitives.compact.broadcast import (
    Released,
    _as_bytes,
    _check_tag,
    builder_inputs,
    check_fingerprint_bits,
    exact_counts,
)
from primitives.compact.fuse import _DTYPES, WIDTHS, attempt_seed, key64
from primitives.errors import DecodeError, InvalidInputError

MAGIC = b"RCB1"
RIBBON_WIDTH = 64
HEADER = struct.Struct("<4sBBBBQII")
HEADER_BYTES = HEADER.size  # 24
GOLDEN = 0x9E3779B97F4A7C15
# Slots per key tried in order, 8 seeds each; then 1.5 with up to 64 seeds.
_OVERHEADS = tuple(round(1.03 + 0.01 * i, 2) for i in range(13))
_SEEDS_PER_SIZE = 8
_LAST_ATTEMPTS = 64

_ZERO = np.uint64(0)
_ONE = np.uint64(1)


@njit(cache=True, nogil=True)
def _band(
    starts: npt.NDArray[np.int64],
    coeffs: npt.NDArray[np.uint64],
    targets: npt.NDArray[np.uint64],
    m: int,
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64], bool]:  # pragma: no cover - compiled
    rows = np.zeros(m, dtype=np.uint64)
    rhs = np.zeros(m, dtype=np.uint64)
    for i in range(starts.size):
        s = starts[i]
        c = coeffs[i]
        r = targets[i]
        while True:
            if rows[s] == _ZERO:
                rows[s] = c
                rhs[s] = r
                break
            c ^= rows[s]
            r ^= rhs[s]
            if c == _ZERO:
                return rows, rhs, False
            while (c & _ONE) == _ZERO:
                c >>= _ONE
                s += 1
    return rows, rhs, True


@njit(cache=True, nogil=True)
def _solve(
    rows: npt.NDArray[np.uint64], rhs: npt.NDArray[np.uint64]
) -> npt.NDArray[np.uint64]:  # pragma: no cover
    m = rows.size
    z = np.zeros(m, dtype=np.uint64)
    for i in range(m - 1, -1, -1):
        c = rows[i]
        if c == _ZERO:
            continue
        acc = rhs[i]
        c >>= _ONE
        j = i + 1
        while c != _ZERO:
            if (c & _ONE) != _ZERO:
                acc ^= z[j]
            c >>= _ONE
            j += 1
        z[i] = acc
    return z


def _hashes(
    keys: npt.NDArray[np.uint64], seed: int, m: int
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64], npt.NDArray[np.uint64]]:
    hashes = core.mixed(keys, seed)
    starts = core.mulhi(hashes, m - RIBBON_WIDTH + 1).astype(np.int64)
    coeffs = core.murmur64(hashes + np.uint64(GOLDEN)) | _ONE
    return hashes, starts, coeffs


def construct(
    keys: npt.NDArray[np.uint64],
    public_seed: bytes,
    targets_for: Callable[[npt.NDArray[np.uint64]], npt.NDArray[np.uint64]],
) -> tuple[int, int, npt.NDArray[np.uint64]]:
    """(u64 seed, slots m, solution) of a ribbon whose row for each of the distinct ``keys``
    XORs to ``targets_for(hashes)`` (up to 64 bits per key). Sizes tried from 1.03 slots per key
    up, a few seeds each (every seed a function of the public seed)."""
    if bool(np.any(keys[1:] == keys[:-1])):
        raise InvalidInputError("tags must have distinct 64-bit key hashes, got two that share one")
    n = int(keys.size)
    plan = [(o, _SEEDS_PER_SIZE) for o in _OVERHEADS] + [(1.5, _LAST_ATTEMPTS)]
    attempt = 0
    for overhead, tries in plan:
        m = max(RIBBON_WIDTH, math.ceil(n * overhead) + RIBBON_WIDTH // 2)
        for _ in range(tries):
            u64_seed = attempt_seed(public_seed, attempt)
            attempt += 1
            hashes, starts, coeffs = _hashes(keys, u64_seed, m)
            rows, rhs, ok = _band(starts, coeffs, targets_for(hashes), m)
            if ok:
                return u64_seed, m, _solve(rows, rhs)
    raise InvalidInputError(f"ribbon construction for {n} tags failed after {attempt} attempts")


def selected_slots(tag: bytes, seed: int, m: int) -> tuple[int, list[int]]:
    """(the key's 64-bit hash, the slots its row selects) for ``tag`` in a ribbon of ``m`` slots."""
    hash_ = core.murmur64_int((key64(_check_tag(tag)) + seed) & core.MASK64)
    start = (hash_ * (m - RIBBON_WIDTH + 1)) >> 64
    coeff = core.murmur64_int((hash_ + GOLDEN) & core.MASK64) | 1
    return hash_, [start + j for j in range(RIBBON_WIDTH) if coeff >> j & 1]


def xor_of(slots: npt.NDArray[np.unsignedinteger], selected: list[int]) -> int:
    """The XOR of the ``selected`` slots: what a key's row stores."""
    value = 0
    for slot in slots[selected].tolist():
        value ^= slot
    return value


def fingerprint_of(hash_: int, bits: int) -> int:
    """A key's ``bits``-bit fingerprint: the low bits of ``hash ^ (hash >> 32)``."""
    return (hash_ ^ (hash_ >> 32)) & ((1 << bits) - 1)


class LoadedRibbon:
    """What both loaded ribbons share: the layout, the size and false-positive rate a device
    reports, and the row a tag selects (None in an empty broadcast, which releases nothing)."""

    __slots__ = ("seed", "n", "m", "fingerprint_bits", "_size")

    def __init__(self, *, seed: int, n: int, m: int, fingerprint_bits: int, size: int) -> None:
        self.seed, self.n, self.m, self.fingerprint_bits, self._size = seed, n, m, fingerprint_bits, size

    @property
    def size(self) -> int:
        return self._size

    @property
    def false_positive_rate(self) -> float:
        return 0.0 if self.n == 0 else 2.0**-self.fingerprint_bits

    def row(self, tag: bytes) -> tuple[int, list[int]] | None:
        """(the key's hash, the slots its row selects), or None when no tag was released."""
        if self.n == 0:
            _check_tag(tag)
            return None
        return selected_slots(tag, self.seed, self.m)

    def __len__(self) -> int:
        return self.n


class RibbonReleased(LoadedRibbon):
    """A loaded ribbon broadcast."""

    __slots__ = ("count_bits", "fingerprints", "counts")

    def __init__(
        self,
        *,
        seed: int,
        n: int,
        m: int,
        fingerprint_bits: int,
        count_bits: int,
        fingerprints: npt.NDArray[np.unsignedinteger],
        counts: npt.NDArray[np.unsignedinteger],
        size: int,
    ) -> None:
        super().__init__(seed=seed, n=n, m=m, fingerprint_bits=fingerprint_bits, size=size)
        self.count_bits, self.fingerprints, self.counts = count_bits, fingerprints, counts

    def query(self, tag: bytes) -> int | None:
        row = self.row(tag)
        if row is None:
            return None
        hash_, selected = row
        if xor_of(self.fingerprints, selected) != fingerprint_of(hash_, self.fingerprint_bits):
            return None
        return xor_of(self.counts, selected)

    def contains_many(self, keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.bool_]:
        """Filter answers for many 64-bit keys at once (for measuring the false-positive rate)."""
        if self.n == 0:
            return np.zeros(keys.size, dtype=bool)
        hashes, starts, coeffs = _hashes(keys.astype(np.uint64), self.seed, self.m)
        acc = np.zeros(keys.size, dtype=np.uint64)
        table = self.fingerprints.astype(np.uint64)
        for j in range(RIBBON_WIDTH):
            bit = ((coeffs >> np.uint64(j)) & _ONE).astype(bool)
            acc[bit] ^= table[starts[bit] + j]
        result: npt.NDArray[np.bool_] = acc == core.fingerprints(hashes, self.fingerprint_bits)
        return result



class RibbonBroadcast:
    """The released tags as one standard ribbon with two slot arrays (fingerprints, counts)."""

    __slots__ = ("fingerprint_bits",)
    name: ClassVar[str] = "ribbon"

    def __init__(self, fingerprint_bits: int = 16) -> None:
        self.fingerprint_bits = check_fingerprint_bits(fingerprint_bits)

    def heard_counts(self, released: Released) -> dict[bytes, int]:
        return exact_counts(released)

    def build(self, released: Released, seed: bytes) -> bytes:
        keys, counts, count_bits, public_seed = builder_inputs(released, seed)
        f = self.fingerprint_bits
        if keys.size == 0:
            return self._pack(attempt_seed(public_seed, 0), 0, 0, count_bits, np.zeros(0, np.uint64))
        # One elimination for both arrays: fingerprint in the low 32 bits, count above.
        seed_, m, z = construct(
            keys, public_seed, lambda hashes: core.fingerprints(hashes, f) | (counts << np.uint64(32))
        )
        return self._pack(seed_, int(keys.size), m, count_bits, z)

    def _pack(self, seed: int, n: int, m: int, count_bits: int, z: npt.NDArray[np.uint64]) -> bytes:
        f = self.fingerprint_bits
        header = HEADER.pack(MAGIC, f, count_bits, RIBBON_WIDTH, 0, seed, n, m)
        fps = (z & np.uint64((1 << f) - 1)).astype(np.dtype(_DTYPES[f]).newbyteorder("<"))
        cnt = (z >> np.uint64(32)).astype(np.dtype(_DTYPES[count_bits]).newbyteorder("<"))
        return header + fps.tobytes() + cnt.tobytes()

    def load(self, data: bytes) -> RibbonReleased:
        data = _as_bytes(data, "ribbon broadcast")
        if len(data) < HEADER_BYTES:
            raise DecodeError(
                f"ribbon broadcast must be at least {HEADER_BYTES} bytes (its header), got {len(data)}"
            )
        magic, f, v, width, reserved, seed, n, m = HEADER.unpack_from(data)
        if magic != MAGIC:
            raise DecodeError(f"ribbon broadcast magic must be {MAGIC!r}, got {magic!r}")
        for what, bits in (("fingerprint bits", f), ("count bits", v)):
            if bits not in WIDTHS:
                raise DecodeError(f"ribbon broadcast {what} must be one of {WIDTHS}, got {bits}")
        if width != RIBBON_WIDTH:
            raise DecodeError(f"ribbon broadcast width must be {RIBBON_WIDTH}, got {width}")
        if reserved != 0:
            raise DecodeError(f"ribbon broadcast reserved field must be 0, got {reserved}")
        if n == 0 and m != 0:
            raise DecodeError(f"ribbon broadcast of 0 tags must have 0 slots, got {m}")
        if n > 0 and m < RIBBON_WIDTH:
            raise DecodeError(f"ribbon broadcast slots must be at least {RIBBON_WIDTH}, got {m}")
        expected = HEADER_BYTES + m * (f + v) // 8
        if len(data) != expected:
            raise DecodeError(
                f"ribbon broadcast must be {expected} bytes (header and {m} slots of {f} + {v} bits), got {len(data)}"
            )
        fps = np.frombuffer(
            data, dtype=np.dtype(_DTYPES[f]).newbyteorder("<"), count=m, offset=HEADER_BYTES
        )
        cnt = np.frombuffer(
            data,
            dtype=np.dtype(_DTYPES[v]).newbyteorder("<"),
            count=m,
            offset=HEADER_BYTES + m * f // 8,
        )
        return RibbonReleased(
            seed=seed,
            n=n,
            m=m,
            fingerprint_bits=f,
            count_bits=v,
            fingerprints=fps.astype(_DTYPES[f]),
            counts=cnt.astype(_DTYPES[v]),
            size=len(data),
        )

    def __repr__(self) -> str:
        return f"RibbonBroadcast(fingerprint_bits={self.fingerprint_bits})"


class Ribbon32Broadcast(RibbonBroadcast):
    """``ribbon`` with 32-bit fingerprints (false-positive rate 2^-32, about 1.5 times the
    bytes: 8,700 B at 1,372 tags), under a registry name of its own so a round can choose it."""

    __slots__ = ()
    name: ClassVar[str] = "ribbon-32"

    def __init__(self, fingerprint_bits: int = 32) -> None:
        super().__init__(fingerprint_bits)

    def __repr__(self) -> str:
        return f"Ribbon32Broadcast(fingerprint_bits={self.fingerprint_bits})"


__all__ = ["Ribbon32Broadcast", "RibbonBroadcast", "RibbonReleased"]
