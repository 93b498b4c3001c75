"""The released-tags broadcast in two encodings behind one interface (registry family ``broadcast``).

- ``full-list`` → :class:`FullListBroadcast`: today's list, every released tag with its count.
- ``fuse`` → :class:`FuseBroadcast`: a binary fuse filter over the tags plus a fuse static
  function for their counts (:mod:`primitives.compact.fuse`), a few bytes per tag.

Both answer ``query(tag)`` with the tag's count if it was released and ``None`` otherwise; the
fuse encoding answers a count (garbage) for a fraction 2^-fingerprint_bits of unreleased tags.
Both are functions of the released tags, their counts and a public seed only.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable, Mapping
from typing import ClassVar, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from primitives.compact.fuse import (
    WIDTHS,
    FuseFilter,
    FuseRetrieval,
    build_fuse,
    key64,
    keys64,
)
from primitives.errors import DecodeError, InvalidInputError, InvalidParameterError

TAG_BYTES = 32
MAX_COUNT = (1 << 32) - 1
MAX_TAGS = (1 << 32) - 1

Released = Mapping[bytes, int] | Iterable[tuple[bytes, int]]


@runtime_checkable
class LoadedBroadcast(Protocol):
    """A broadcast as a device holds it after download."""

    @property
    def size(self) -> int:
        """Bytes downloaded."""
        ...

    @property
    def false_positive_rate(self) -> float:
        """Probability that an unreleased tag gets a count (0 for an exact encoding)."""
        ...

    def query(self, tag: bytes) -> int | None:
        """The tag's released count, or ``None`` if the tag was not released."""
        ...

    def __len__(self) -> int:
        """Number of released tags."""
        ...


@runtime_checkable
class BroadcastEncoding(Protocol):
    """Encodes the released tags and their counts for every device (registry family ``broadcast``)."""

    @property
    def name(self) -> str: ...

    def heard_counts(self, released: Released) -> dict[bytes, int]:
        """The count a device reads for each released tag: the count itself in an exact encoding,
        a public rounding of it, never above it, in a lossy one. The noise plan sizes every
        bucket's noise from these, as the devices do."""
        ...

    def build(self, released: Released, seed: bytes) -> bytes:
        """The broadcast bytes of ``released`` (tag → count); deterministic given the set and seed."""
        ...

    def load(self, data: bytes) -> LoadedBroadcast:
        """Parse broadcast bytes; malformed bytes raise :class:`~primitives.errors.DecodeError`."""
        ...


def released_pairs(released: Released) -> list[tuple[bytes, int]]:
    """``released`` as (tag, count) pairs sorted by tag, every tag 32 bytes and distinct, every
    count in [1, 2^32)."""
    items = list(released.items()) if isinstance(released, Mapping) else list(released)
    pairs: list[tuple[bytes, int]] = []
    for i, item in enumerate(items):
        if not isinstance(item, tuple) or len(item) != 2:
            raise InvalidInputError(
                f"released[{i}] must be a (tag, count) pair, got {type(item).__name__}"
            )
        tag, count = item
        if not isinstance(tag, (bytes, bytearray)) or len(tag) != TAG_BYTES:
            raise InvalidInputError(f"released[{i}] tag must be {TAG_BYTES} bytes, got {tag!r:.80}")
        if (
            isinstance(count, bool)
            or not isinstance(count, (int, np.integer))
            or not 1 <= count <= MAX_COUNT
        ):
            raise InvalidInputError(
                f"released[{i}] count must be an integer in [1, {MAX_COUNT}], got {count!r:.40}"
            )
        pairs.append((bytes(tag), int(count)))
    pairs.sort()
    for i in range(1, len(pairs)):
        if pairs[i][0] == pairs[i - 1][0]:
            raise InvalidInputError(
                f"released tags must be distinct, got {pairs[i][0].hex()} twice"
            )
    if len(pairs) > MAX_TAGS:
        raise InvalidInputError(f"released tags must number at most {MAX_TAGS}, got {len(pairs)}")
    return pairs


def exact_counts(released: Released) -> dict[bytes, int]:
    """``heard_counts`` of an encoding that stores every count exactly."""
    return dict(released_pairs(released))


def _check_tag(tag: bytes) -> bytes:
    if not isinstance(tag, (bytes, bytearray)) or len(tag) != TAG_BYTES:
        raise InvalidInputError(f"tag must be {TAG_BYTES} bytes, got {tag!r:.80}")
    return bytes(tag)


def _as_bytes(data: bytes, what: str) -> bytes:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise DecodeError(f"{what} must be bytes, got {type(data).__name__}")
    return bytes(data)


# --- full list -----------------------------------------------------------------------------------

_FULL_RECORD = TAG_BYTES + 4


class FullList:
    """A loaded full-list broadcast: every released tag and its count."""

    __slots__ = ("_tags", "_counts", "_size")

    def __init__(self, tags: list[bytes], counts: list[int], size: int) -> None:
        self._tags = tags
        self._counts = counts
        self._size = size

    @property
    def size(self) -> int:
        return self._size

    @property
    def false_positive_rate(self) -> float:
        return 0.0

    def query(self, tag: bytes) -> int | None:
        tag = _check_tag(tag)
        i = bisect.bisect_left(self._tags, tag)
        if i < len(self._tags) and self._tags[i] == tag:
            return self._counts[i]
        return None

    def items(self) -> list[tuple[bytes, int]]:
        return list(zip(self._tags, self._counts, strict=True))

    def __len__(self) -> int:
        return len(self._tags)


class FullListBroadcast:
    """Today's broadcast: ``u32 n`` then n records ``tag (32 bytes) || u32 count``, sorted by tag,
    integers big-endian (the body of ``fre_protocol.messages.ReleasedTags``); 4 + 36 n bytes.
    The seed is not used."""

    __slots__ = ()
    name: ClassVar[str] = "full-list"

    def heard_counts(self, released: Released) -> dict[bytes, int]:
        return exact_counts(released)

    def build(self, released: Released, seed: bytes = b"") -> bytes:
        pairs = released_pairs(released)
        return struct.pack(">I", len(pairs)) + b"".join(t + struct.pack(">I", c) for t, c in pairs)

    def load(self, data: bytes) -> FullList:
        data = _as_bytes(data, "full-list broadcast")
        if len(data) < 4:
            raise DecodeError(
                f"full-list broadcast must be at least 4 bytes (its count), got {len(data)}"
            )
        (n,) = struct.unpack_from(">I", data)
        if len(data) != 4 + _FULL_RECORD * n:
            raise DecodeError(
                f"full-list broadcast of {n} tags must be {4 + _FULL_RECORD * n} bytes, got {len(data)}"
            )
        tags = [data[4 + _FULL_RECORD * i : 4 + _FULL_RECORD * i + TAG_BYTES] for i in range(n)]
        counts = [
            struct.unpack_from(">I", data, 4 + _FULL_RECORD * i + TAG_BYTES)[0] for i in range(n)
        ]
        for i in range(1, n):
            if tags[i] <= tags[i - 1]:
                raise DecodeError(
                    f"full-list broadcast tags must be sorted and distinct, got tag {i} <= tag {i - 1}"
                )
        for i, c in enumerate(counts):
            if c < 1:
                raise DecodeError(f"full-list broadcast count {i} must be >= 1, got {c}")
        return FullList(tags, counts, len(data))

    def __repr__(self) -> str:
        return "FullListBroadcast()"


# --- fuse ----------------------------------------------------------------------------------------

FUSE_MAGIC = b"FCB1"
_FUSE_HEADER = struct.Struct("<4sI")


class FuseReleased:
    """A loaded fuse broadcast: a membership filter and a static function on the same layout."""

    __slots__ = ("filter", "counts", "_size")

    def __init__(self, filter_: FuseFilter, counts: FuseRetrieval, size: int) -> None:
        self.filter = filter_
        self.counts = counts
        self._size = size

    @property
    def size(self) -> int:
        return self._size

    @property
    def false_positive_rate(self) -> float:
        return self.filter.false_positive_rate

    def query(self, tag: bytes) -> int | None:
        k = key64(_check_tag(tag))
        if not self.filter.contains_key64(k):
            return None
        return self.counts.value_of_key64(k)

    def __len__(self) -> int:
        return len(self.filter)


def check_fingerprint_bits(fingerprint_bits: int) -> int:
    """A compact broadcast's fingerprint width: one of :data:`WIDTHS`."""
    if isinstance(fingerprint_bits, bool) or fingerprint_bits not in WIDTHS:
        raise InvalidParameterError(f"fingerprint_bits must be one of {WIDTHS}, got {fingerprint_bits!r}")
    return int(fingerprint_bits)


def builder_inputs(
    released: Released, seed: bytes
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64], int, bytes]:
    """The released set as a compact builder takes it: the tags' 64-bit keys in increasing order,
    their counts in the same order, the fewest of 8, 16 or 32 bits that hold the largest count,
    and the public seed as bytes."""
    pairs = released_pairs(released)
    if not isinstance(seed, (bytes, bytearray)):
        raise InvalidParameterError(f"seed must be bytes, got {type(seed).__name__}")
    keys = keys64([t for t, _ in pairs])
    order = np.argsort(keys, kind="stable")
    counts = np.array([c for _, c in pairs], dtype=np.uint64)[order]
    return keys[order], counts, _count_width(max((c for _, c in pairs), default=0)), bytes(seed)


def _count_width(max_count: int) -> int:
    for width in WIDTHS:
        if max_count < 1 << width:
            return width
    raise InvalidInputError(f"counts must be below 2^32, got {max_count}")  # pragma: no cover


class FuseBroadcast:
    """The compact broadcast: ``FCB1 || u32 LE filter length || filter || counts``.

    ``filter`` is a :class:`~primitives.compact.fuse.FuseFilter` (``FBF1``) over the tags with
    ``fingerprint_bits``-bit fingerprints (false-positive rate 2^-fingerprint_bits); ``counts`` a
    :class:`~primitives.compact.fuse.FuseRetrieval` (``FBR1``) holding each tag's count in the
    fewest of 8, 16 or 32 bits that hold the largest count. Both sections share one layout (seed,
    segment length and count): the builder peels one hypergraph and fills two arrays, and
    :meth:`load` refuses sections whose layouts differ.
    """

    __slots__ = ("fingerprint_bits",)
    name: ClassVar[str] = "fuse"

    def __init__(self, fingerprint_bits: int = 16) -> None:
        self.fingerprint_bits = check_fingerprint_bits(fingerprint_bits)

    def heard_counts(self, released: Released) -> dict[bytes, int]:
        return exact_counts(released)

    def build(self, released: Released, seed: bytes) -> bytes:
        keys, counts, width, public_seed = builder_inputs(released, seed)
        construction = build_fuse(keys, public_seed)
        filter_ = FuseFilter.from_construction(construction, self.fingerprint_bits)
        retrieval = FuseRetrieval.from_construction(construction, counts, width)
        filter_bytes = filter_.to_bytes()
        return (
            _FUSE_HEADER.pack(FUSE_MAGIC, len(filter_bytes)) + filter_bytes + retrieval.to_bytes()
        )

    def load(self, data: bytes) -> FuseReleased:
        data = _as_bytes(data, "fuse broadcast")
        if len(data) < _FUSE_HEADER.size:
            raise DecodeError(
                f"fuse broadcast must be at least {_FUSE_HEADER.size} bytes (its header), got {len(data)}"
            )
        magic, filter_length = _FUSE_HEADER.unpack_from(data)
        if magic != FUSE_MAGIC:
            raise DecodeError(f"fuse broadcast magic must be {FUSE_MAGIC!r}, got {magic!r}")
        if filter_length > len(data) - _FUSE_HEADER.size:
            raise DecodeError(
                f"fuse broadcast filter length must be at most {len(data) - _FUSE_HEADER.size}, got {filter_length}"
            )
        start = _FUSE_HEADER.size
        filter_ = FuseFilter.from_bytes(data[start : start + filter_length])
        counts = FuseRetrieval.from_bytes(data[start + filter_length :])
        if counts.layout != filter_.layout:
            raise DecodeError(
                f"fuse broadcast counts layout must equal the filter's {filter_.layout}, got {counts.layout}"
            )
        return FuseReleased(filter_, counts, len(data))

    def __repr__(self) -> str:
        return f"FuseBroadcast(fingerprint_bits={self.fingerprint_bits})"


__all__ = [
    "BroadcastEncoding",
    "FullList",
    "FullListBroadcast",
    "FuseBroadcast",
    "FuseReleased",
    "LoadedBroadcast",
    "exact_counts",
    "released_pairs",
]
