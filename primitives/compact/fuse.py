"""A 3-wise binary fuse filter and its value-storing twin (a static function), with byte formats.

Both are the construction of Graf & Lemire, "Binary Fuse Filters: Fast and Smaller Than Xor
Filters" (ACM JEA 2022): an array of ``(segment_count + 2) * segment_length`` slots in which the
three slots of every key XOR to a target. In :class:`FuseFilter` the target is the key's
fingerprint (a key is reported present when its three slots XOR to its fingerprint: no false
negatives, a false positive with probability 2^-width for a key outside the set); in
:class:`FuseRetrieval` the target is a value (a count), and a key outside the set reads an
arbitrary value, so it is asked only after a filter said yes.

Keys are byte strings. Each is first reduced to a 64-bit key
``k = LE64(SHA-256("fre-e2t/compact/key/v1" || key)[:8])``; from there the hashing is the
reference C implementation's (``xor_singleheader/include/binaryfusefilter.h``):
``hash = murmur64(k + seed mod 2^64)``, ``h0 = (hash * segment_count * segment_length) >> 64``,
``h1 = (h0 + L) ^ ((hash >> 18) & (L - 1))``, ``h2 = (h0 + 2L) ^ (hash & (L - 1))`` with
``L = segment_length``, fingerprint = the low ``width`` bits of ``hash ^ (hash >> 32)``.

Byte format (all integers little-endian), 28 bytes of header then the slots:

======  ====  ==============================================================================
offset  size  field
======  ====  ==============================================================================
0       4     magic: ``FBF1`` (filter) or ``FBR1`` (retrieval)
4       1     width: bits per slot, 8, 16 or 32
5       1     arity: 3
6       2     reserved: 0
8       8     seed (u64): the ``seed`` of ``murmur64(k + seed)``
16      4     n (u32): number of keys
20      4     segment_length (u32): a power of two in [4, 2^18]; 0 when n = 0
24      4     segment_count (u32): >= 1; 0 when n = 0
28      ...   (segment_count + 2) * segment_length slots of width/8 bytes each
======  ====  ==============================================================================

A reader needs only the header: the construction's size rule and seed search are the builder's
business. The builder is deterministic: keys are sorted by their 64-bit key first, and the seeds
it tries are ``LE64(SHA-256("fre-e2t/compact/fuse-seed/v1" || public seed || LE32(attempt))[:8])``
for attempt = 0, 1, ... over a fixed ladder of sizes (:func:`build_fuse`). The same key set and
public seed give the same bytes, whatever the order the keys came in.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from primitives.compact import _fuse_core as core
from primitives.errors import DecodeError, InvalidInputError, InvalidParameterError

KEY_DOMAIN = b"fre-e2t/compact/key/v1"
SEED_DOMAIN = b"fre-e2t/compact/fuse-seed/v1"
HEADER = struct.Struct("<4sBBHQIII")
HEADER_BYTES = HEADER.size  # 28
WIDTHS = (8, 16, 32)
ARITY = 3
MAX_SEGMENT_LENGTH = 1 << 18
MAX_KEYS = (1 << 32) - 1
_DTYPES: dict[int, type[np.unsignedinteger]] = {
    8: np.uint8,
    16: np.uint16,
    32: np.uint32,
}
# Below this many keys the builder searches a ladder of tighter arrays (bytes matter: a device
# downloads them); above it the reference's size rule is used at once (build time matters).
TIGHT_BELOW = 50_000
# Array-to-keys ratios tried below TIGHT_BELOW keys: 1.15, 1.16, ..., 1.45 (a 3-wise fuse graph
# of 10^3-10^4 keys peels for some seeds from ~1.18; the reference rule asks 1.24-1.35 there).
_TIGHT_FACTORS = tuple(round(1.15 + 0.01 * i, 2) for i in range(31))
_SEEDS_PER_SIZE = 8
_REFERENCE_ATTEMPTS = 64


def key64(key: bytes) -> int:
    """The 64-bit key of a byte string: the first 8 bytes of a domain-separated SHA-256, LE."""
    return int.from_bytes(hashlib.sha256(KEY_DOMAIN + key).digest()[:8], "little")


def keys64(keys: Sequence[bytes]) -> npt.NDArray[np.uint64]:
    """:func:`key64` of every key, as a uint64 array."""
    return np.fromiter((key64(k) for k in keys), dtype=np.uint64, count=len(keys))


def attempt_seed(public_seed: bytes, attempt: int) -> int:
    """The u64 seed of the builder's ``attempt``-th try (a function of the public seed only)."""
    digest = hashlib.sha256(SEED_DOMAIN + public_seed + struct.pack("<I", attempt)).digest()
    return int.from_bytes(digest[:8], "little")


@dataclass(frozen=True, slots=True)
class FuseLayout:
    """Where a key's three slots are: everything of the header but the magic and width."""

    seed: int
    n: int
    segment_length: int
    segment_count: int

    @property
    def array_length(self) -> int:
        return 0 if self.n == 0 else (self.segment_count + 2) * self.segment_length

    def slots_of(self, k: int) -> tuple[int, int, int]:
        """The three slots of the 64-bit key ``k`` and its mixed hash's fingerprint source."""
        return core.positions_int(self.hash_of(k), self.segment_length, self.segment_count)

    def hash_of(self, k: int) -> int:
        return core.murmur64_int((k + self.seed) & core.MASK64)


def _size_ladder(n: int) -> list[tuple[int, int]]:
    """(segment_length, segment_count) pairs to try, smallest array first."""
    ref_length = core.reference_segment_length(n)
    ref_count = max(1, math.ceil(round(n * core.reference_size_factor(n)) / ref_length) - 2)
    reference = (ref_length, ref_count)
    if n >= TIGHT_BELOW:
        return [reference]
    sizes = {reference}
    for length in (ref_length, ref_length // 2, ref_length // 4):
        if length < 4:
            continue
        for factor in _TIGHT_FACTORS:
            count = max(1, math.ceil(n * factor / length) - 2)
            if (count + 2) * length < (ref_count + 2) * ref_length:
                sizes.add((length, count))
    return sorted(sizes, key=lambda s: ((s[1] + 2) * s[0], -s[0]))


@dataclass(frozen=True, slots=True)
class FuseConstruction:
    """A peeled hypergraph: the layout and what :func:`core.assign` needs to fill any array."""

    layout: FuseLayout
    hashes: npt.NDArray[np.uint64]
    slots: npt.NDArray[np.int64]
    rounds: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]]

    def fill(self, targets: npt.NDArray[np.uint64], width: int) -> npt.NDArray[np.unsignedinteger]:
        """The slot array whose three slots of key i XOR to ``targets[i]`` (low ``width`` bits)."""
        return core.assign(
            self.rounds, self.slots, targets, self.layout.array_length, _DTYPES[width]
        )

    def fingerprints(self, width: int) -> npt.NDArray[np.uint64]:
        return core.fingerprints(self.hashes, width)


def build_fuse(sorted_keys: npt.NDArray[np.uint64], public_seed: bytes) -> FuseConstruction:
    """Peel the 3-wise fuse hypergraph of ``sorted_keys`` (distinct, ascending 64-bit keys).

    Tries the sizes of the ladder in order, :data:`_SEEDS_PER_SIZE` seeds each (then the
    reference size with up to :data:`_REFERENCE_ATTEMPTS` seeds); attempt numbers count every try,
    so the result is a function of the key set and the public seed.
    """
    n = int(sorted_keys.size)
    if n > MAX_KEYS:
        raise InvalidInputError(f"keys must number at most {MAX_KEYS}, got {n}")
    if n and bool(np.any(sorted_keys[1:] <= sorted_keys[:-1])):
        raise InvalidInputError(
            "keys must have distinct 64-bit key hashes, got two that share one (choose another seed"
            " or drop the duplicate key)"
        )
    if n == 0:
        layout = FuseLayout(
            seed=attempt_seed(public_seed, 0), n=0, segment_length=0, segment_count=0
        )
        empty_slots = np.zeros((0, 3), dtype=np.int64)
        return FuseConstruction(layout, sorted_keys, empty_slots, [])
    ladder = _size_ladder(n)
    plan = [(size, _SEEDS_PER_SIZE) for size in ladder[:-1]] + [(ladder[-1], _REFERENCE_ATTEMPTS)]
    attempt = 0
    for (length, count), tries in plan:
        for _ in range(tries):
            seed = attempt_seed(public_seed, attempt)
            attempt += 1
            layout = FuseLayout(seed=seed, n=n, segment_length=length, segment_count=count)
            hashes = core.mixed(sorted_keys, seed)
            slots = core.positions(hashes, length, count)
            rounds = core.peel(slots, layout.array_length)
            if rounds is not None:
                return FuseConstruction(layout, hashes, slots, rounds)
    raise InvalidInputError(f"fuse construction for {n} keys failed after {attempt} attempts")


def _check_width(width: int, what: str) -> None:
    if isinstance(width, bool) or width not in WIDTHS:
        raise InvalidParameterError(f"{what} must be one of {WIDTHS}, got {width!r}")


class _FuseArray:
    """The shared parsing and slot arithmetic of :class:`FuseFilter` and :class:`FuseRetrieval`."""

    MAGIC: ClassVar[bytes]
    KIND: ClassVar[str]
    __slots__ = ("layout", "width", "array")

    def __init__(
        self, layout: FuseLayout, width: int, array: npt.NDArray[np.unsignedinteger]
    ) -> None:
        _check_width(width, f"{self.KIND} width")
        if array.size != layout.array_length:
            raise InvalidInputError(
                f"{self.KIND} array must hold {layout.array_length} slots, got {array.size}"
            )
        self.layout = layout
        self.width = width
        self.array = array.astype(_DTYPES[width], copy=False)

    def _xor3(self, k: int) -> tuple[int, int]:
        """(hash, XOR of the key's three slots) for the 64-bit key ``k``."""
        hash_ = self.layout.hash_of(k)
        h0, h1, h2 = core.positions_int(
            hash_, self.layout.segment_length, self.layout.segment_count
        )
        a = self.array
        return hash_, int(a[h0]) ^ int(a[h1]) ^ int(a[h2])

    def to_bytes(self) -> bytes:
        lay = self.layout
        header = HEADER.pack(
            self.MAGIC, self.width, ARITY, 0, lay.seed, lay.n, lay.segment_length, lay.segment_count
        )
        return header + self.array.astype(self.array.dtype.newbyteorder("<"), copy=False).tobytes()

    @property
    def size(self) -> int:
        """Bytes of :meth:`to_bytes`."""
        return HEADER_BYTES + self.layout.array_length * self.width // 8

    @classmethod
    def _parse(cls, data: bytes) -> tuple[FuseLayout, int, npt.NDArray[np.unsignedinteger]]:
        what = cls.KIND
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise DecodeError(f"{what} must be bytes, got {type(data).__name__}")
        data = bytes(data)
        if len(data) < HEADER_BYTES:
            raise DecodeError(
                f"{what} must be at least {HEADER_BYTES} bytes (its header), got {len(data)}"
            )
        magic, width, arity, reserved, seed, n, length, count = HEADER.unpack_from(data)
        if magic != cls.MAGIC:
            raise DecodeError(f"{what} magic must be {cls.MAGIC!r}, got {magic!r}")
        if width not in WIDTHS:
            raise DecodeError(f"{what} width must be one of {WIDTHS}, got {width}")
        if arity != ARITY:
            raise DecodeError(f"{what} arity must be {ARITY}, got {arity}")
        if reserved != 0:
            raise DecodeError(f"{what} reserved field must be 0, got {reserved}")
        if n == 0:
            if length != 0 or count != 0:
                raise DecodeError(
                    f"{what} with 0 keys must have segment_length 0 and segment_count 0, got {length} and {count}"
                )
        else:
            if length < 4 or length > MAX_SEGMENT_LENGTH or length & (length - 1):
                raise DecodeError(
                    f"{what} segment_length must be a power of two in [4, {MAX_SEGMENT_LENGTH}], got {length}"
                )
            if count < 1:
                raise DecodeError(f"{what} segment_count must be >= 1, got {count}")
        layout = FuseLayout(seed=seed, n=n, segment_length=length, segment_count=count)
        expected = HEADER_BYTES + layout.array_length * width // 8
        if len(data) != expected:
            raise DecodeError(
                f"{what} must be {expected} bytes (header and {layout.array_length} slots of {width} bits),"
                f" got {len(data)}"
            )
        array = np.frombuffer(
            data, dtype=np.dtype(_DTYPES[width]).newbyteorder("<"), offset=HEADER_BYTES
        )
        return layout, width, array.astype(_DTYPES[width])


class FuseFilter(_FuseArray):
    """Approximate membership: no false negatives, false positives at rate 2^-width."""

    MAGIC = b"FBF1"
    KIND = "fuse filter"
    __slots__ = ()

    @classmethod
    def build(cls, keys: Sequence[bytes], seed: bytes, *, width: int = 16) -> FuseFilter:
        """The filter of the distinct byte strings ``keys`` under the public ``seed``."""
        _check_width(width, "fingerprint width")
        construction = build_fuse(_sorted_keys(keys), _check_seed(seed))
        return cls.from_construction(construction, width)

    @classmethod
    def from_construction(cls, construction: FuseConstruction, width: int) -> FuseFilter:
        array = construction.fill(construction.fingerprints(width), width)
        return cls(construction.layout, width, array)

    @classmethod
    def from_bytes(cls, data: bytes) -> FuseFilter:
        return cls(*cls._parse(data))

    @property
    def false_positive_rate(self) -> float:
        """The probability that a key outside the set is reported present: 2^-width (0 if empty)."""
        return 0.0 if self.layout.n == 0 else 2.0**-self.width

    def contains_key64(self, k: int) -> bool:
        if self.layout.n == 0:
            return False
        hash_, x = self._xor3(k)
        return x == (hash_ ^ (hash_ >> 32)) & ((1 << self.width) - 1)

    def __contains__(self, key: bytes) -> bool:
        return self.contains_key64(key64(_check_key(key)))

    def contains_many(self, keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.bool_]:
        """Membership of many 64-bit keys at once (the vectorised form of ``in``)."""
        lay = self.layout
        if lay.n == 0:
            return np.zeros(keys.size, dtype=bool)
        hashes = core.mixed(keys.astype(np.uint64), lay.seed)
        s = core.positions(hashes, lay.segment_length, lay.segment_count)
        a = self.array
        x = a[s[:, 0]] ^ a[s[:, 1]] ^ a[s[:, 2]]
        result: npt.NDArray[np.bool_] = x.astype(np.uint64) == core.fingerprints(hashes, self.width)
        return result

    def __len__(self) -> int:
        return self.layout.n

    def __repr__(self) -> str:
        return f"FuseFilter(n={self.layout.n}, width={self.width}, bytes={self.size})"


class FuseRetrieval(_FuseArray):
    """A static function: each key of the set maps to its value; other keys read garbage."""

    MAGIC = b"FBR1"
    KIND = "fuse retrieval"
    __slots__ = ()

    @classmethod
    def build(
        cls, items: Sequence[tuple[bytes, int]], seed: bytes, *, width: int = 16
    ) -> FuseRetrieval:
        """The static function of ``(key, value)`` pairs (distinct keys, values < 2^width)."""
        _check_width(width, "value width")
        pairs = sorted(((key64(_check_key(k)), _check_value(v, width)) for k, v in items))
        keys = np.array([p[0] for p in pairs], dtype=np.uint64)
        values = np.array([p[1] for p in pairs], dtype=np.uint64)
        construction = build_fuse(keys, _check_seed(seed))
        return cls(construction.layout, width, construction.fill(values, width))

    @classmethod
    def from_construction(
        cls, construction: FuseConstruction, values: npt.NDArray[np.uint64], width: int
    ) -> FuseRetrieval:
        """Values in the construction's key order (ascending 64-bit key)."""
        return cls(construction.layout, width, construction.fill(values, width))

    @classmethod
    def from_bytes(cls, data: bytes) -> FuseRetrieval:
        return cls(*cls._parse(data))

    def value_of_key64(self, k: int) -> int:
        if self.layout.n == 0:
            return 0
        return self._xor3(k)[1]

    def __getitem__(self, key: bytes) -> int:
        """The value stored for ``key`` (garbage for a key that was not stored)."""
        return self.value_of_key64(key64(_check_key(key)))

    def __len__(self) -> int:
        return self.layout.n

    def __repr__(self) -> str:
        return f"FuseRetrieval(n={self.layout.n}, width={self.width}, bytes={self.size})"


def _check_key(key: bytes) -> bytes:
    if not isinstance(key, (bytes, bytearray)):
        raise InvalidInputError(f"key must be bytes, got {type(key).__name__}")
    return bytes(key)


def _check_seed(seed: bytes) -> bytes:
    if not isinstance(seed, (bytes, bytearray)) or len(seed) > 1024:
        raise InvalidParameterError(f"seed must be at most 1024 bytes, got {seed!r:.60}")
    return bytes(seed)


def _check_value(value: int, width: int) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, np.integer))
        or not 0 <= value < 1 << width
    ):
        raise InvalidInputError(f"value must be an integer in [0, 2^{width}), got {value!r:.60}")
    return int(value)


def _sorted_keys(keys: Sequence[bytes]) -> npt.NDArray[np.uint64]:
    distinct = {_check_key(k) for k in keys}
    if len(distinct) != len(keys):
        raise InvalidInputError(f"keys must be distinct, got {len(keys) - len(distinct)} repeated")
    return np.sort(keys64(sorted(distinct)))


__all__ = [
    "FuseConstruction",
    "FuseFilter",
    "FuseLayout",
    "FuseRetrieval",
    "build_fuse",
    "key64",
    "keys64",
]
