"""The released-tags broadcast (registry family ``broadcast``): the fuse encoding answers as the
full list does on every released tag and on a large sample of unreleased ones (up to its stated
false-positive rate), round-trips through bytes, refuses malformed bytes with a typed error, and
is a function of the released set and the public seed only."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom

from primitives import registry
from primitives.compact import BroadcastEncoding, FullListBroadcast, FuseBroadcast, LoadedBroadcast
from primitives.errors import DecodeError, InvalidInputError, InvalidParameterError

ALPHA = 1e-6  # each statistical check fails a correct implementation with probability <= ALPHA


def _released(n: int, stream: int, max_count: int = 5000) -> dict[bytes, int]:
    rng = np.random.default_rng([32, 1, stream])
    raw = rng.integers(0, 256, size=(n, 32), dtype=np.uint8)
    counts = rng.integers(1, max_count, size=n, endpoint=True)
    return {bytes(t): int(c) for t, c in zip(raw, counts, strict=True)}


def _unreleased(n: int, stream: int, released: dict[bytes, int]) -> list[bytes]:
    raw = np.random.default_rng([32, 2, stream]).integers(0, 256, size=(n, 32), dtype=np.uint8)
    return [t for t in map(bytes, raw) if t not in released]


def test_registry_family() -> None:
    assert registry.names("broadcast") == ["full-list", "fuse"]
    for name in registry.names("broadcast"):
        encoding = registry.create("broadcast", name)
        assert isinstance(encoding, BroadcastEncoding) and encoding.name == name
    assert registry.create("broadcast", "fuse", fingerprint_bits=32).fingerprint_bits == 32


@pytest.mark.parametrize("bits", [16, 32])
def test_fuse_answers_as_the_full_list(bits: int) -> None:
    """Every released tag: the same count. 200,000 unreleased tags: ``None`` from the full list;
    from the fuse broadcast ``None`` except for false positives, whose number is within the
    binomial (1 - ALPHA) bound at rate 2^-bits."""
    released = _released(13_812, 3)
    seed = b"public seed"
    full = FullListBroadcast().load(FullListBroadcast().build(released, seed))
    fuse = FuseBroadcast(bits).load(FuseBroadcast(bits).build(released, seed))
    assert isinstance(fuse, LoadedBroadcast) and len(fuse) == len(full) == len(released)
    for tag, count in released.items():
        assert fuse.query(tag) == full.query(tag) == count
    others = _unreleased(200_000, 4, released)
    assert all(full.query(t) is None for t in others)
    false_positives = sum(fuse.query(t) is not None for t in others)
    assert false_positives <= binom.isf(ALPHA, len(others), fuse.false_positive_rate)


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(
        st.binary(min_size=32, max_size=32),
        st.integers(min_value=1, max_value=2**32 - 1),
        max_size=300,
    ),
    st.binary(max_size=40),
    st.sampled_from([8, 16, 32]),
)
def test_property_round_trip_and_order(released: dict[bytes, int], seed: bytes, bits: int) -> None:
    encoding = FuseBroadcast(bits)
    data = encoding.build(released, seed)
    assert encoding.build(list(reversed(list(released.items()))), seed) == data
    loaded = encoding.load(data)
    assert loaded.size == len(data) and len(loaded) == len(released)
    full = FullListBroadcast().load(FullListBroadcast().build(released, seed))
    for tag, count in released.items():
        assert loaded.query(tag) == full.query(tag) == count


def test_count_width_follows_the_largest_count() -> None:
    for max_count, width in [(255, 8), (256, 16), (65_535, 16), (65_536, 32)]:
        released = _released(100, 5, max_count=1)
        next_tag = next(iter(released))
        released[next_tag] = max_count
        loaded = FuseBroadcast().load(FuseBroadcast().build(released, b"s"))
        assert loaded.counts.width == width and loaded.query(next_tag) == max_count


def test_full_list_is_todays_released_tags_body() -> None:
    released = _released(5, 6)
    data = FullListBroadcast().build(released)
    tags = sorted(released)
    assert data == struct.pack(">I", 5) + b"".join(t + struct.pack(">I", released[t]) for t in tags)
    assert len(data) == 4 + 36 * 5


@pytest.mark.parametrize("encoding", [FullListBroadcast(), FuseBroadcast()], ids=repr)
def test_deterministic_in_the_set_and_seed(encoding: BroadcastEncoding) -> None:
    released = _released(1372, 7)
    data = encoding.build(released, b"seed")
    items = list(released.items())
    shuffled = [items[i] for i in np.random.default_rng(8).permutation(len(items))]
    assert encoding.build(shuffled, b"seed") == data
    assert encoding.build(dict(shuffled), b"seed") == data


def test_fuse_seed_changes_the_bytes_not_the_answers() -> None:
    released = _released(500, 9)
    a, b = FuseBroadcast().build(released, b"one"), FuseBroadcast().build(released, b"two")
    assert a != b
    loaded = FuseBroadcast().load(b)
    assert all(loaded.query(t) == c for t, c in released.items())


@pytest.mark.parametrize("encoding", [FullListBroadcast(), FuseBroadcast()], ids=repr)
def test_refuses_bad_released_sets(encoding: BroadcastEncoding) -> None:
    tag = bytes(32)
    with pytest.raises(InvalidInputError, match="tag must be 32 bytes, got"):
        encoding.build({b"short": 3}, b"s")
    with pytest.raises(InvalidInputError, match=r"count must be an integer in \[1, 4294967295\], got 0"):
        encoding.build({tag: 0}, b"s")
    with pytest.raises(InvalidInputError, match=r"got 4294967296"):
        encoding.build({tag: 2**32}, b"s")
    with pytest.raises(InvalidInputError, match="distinct"):
        encoding.build([(tag, 1), (tag, 2)], b"s")
    with pytest.raises(InvalidInputError, match="tag must be 32 bytes"):
        encoding.load(encoding.build({tag: 1}, b"s")).query(b"\0" * 31)


def test_fuse_refuses_bad_parameters() -> None:
    with pytest.raises(InvalidParameterError, match=r"fingerprint_bits must be one of \(8, 16, 32\), got 20"):
        FuseBroadcast(20)
    with pytest.raises(InvalidParameterError, match="seed must be bytes, got str"):
        FuseBroadcast().build({bytes(32): 1}, "seed")  # type: ignore[arg-type]


def _fuse_bytes() -> bytes:
    return FuseBroadcast().build(_released(40, 10), b"s")


def _swap_counts_layout(data: bytes) -> bytes:
    """The counts section of another set's broadcast: a layout different from the filter's."""
    other = FuseBroadcast().build(_released(40, 11), b"other")
    (flen,) = struct.unpack_from("<I", data, 4)
    (oflen,) = struct.unpack_from("<I", other, 4)
    return data[: 8 + flen] + other[8 + oflen :]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b[:7], "at least 8 bytes .*got 7"),
        (lambda b: b"FCB2" + b[4:], "magic must be b'FCB1', got b'FCB2'"),
        (lambda b: b[:4] + struct.pack("<I", 10**6) + b[8:], r"filter length must be at most \d+, got 1000000"),
        (lambda b: b[:4] + struct.pack("<I", 20) + b[8:], "fuse filter must be at least 28 bytes"),
        (lambda b: b[:-2], r"fuse retrieval must be \d+ bytes .*got \d+"),
        (lambda b: b[:8] + b"XXXX" + b[12:], "fuse filter magic must be b'FBF1', got b'XXXX'"),
        (_swap_counts_layout, "counts layout must equal the filter's"),
        (lambda b: b[:8], r"filter length must be at most 0, got \d+"),
    ],
)
def test_malformed_fuse_bytes_are_refused(mutate: object, message: str) -> None:
    with pytest.raises(DecodeError, match=message):
        FuseBroadcast().load(mutate(_fuse_bytes()))  # type: ignore[operator]


def _full_bytes() -> bytes:
    return FullListBroadcast().build(_released(3, 12))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b[:3], "at least 4 bytes .*got 3"),
        (lambda b: b[:-1], "of 3 tags must be 112 bytes, got 111"),
        (lambda b: struct.pack(">I", 4) + b[4:], "of 4 tags must be 148 bytes, got 112"),
        (lambda b: b[:4] + b[40:76] + b[4:40] + b[76:], "sorted and distinct"),
        (lambda b: b[:36] + b"\0\0\0\0" + b[40:], "count 0 must be >= 1, got 0"),
    ],
)
def test_malformed_full_list_bytes_are_refused(mutate: object, message: str) -> None:
    with pytest.raises(DecodeError, match=message):
        FullListBroadcast().load(mutate(_full_bytes()))  # type: ignore[operator]


def test_load_refuses_non_bytes() -> None:
    for encoding in (FullListBroadcast(), FuseBroadcast()):
        with pytest.raises(DecodeError, match="must be bytes, got list"):
            encoding.load([1, 2])  # type: ignore[arg-type]
