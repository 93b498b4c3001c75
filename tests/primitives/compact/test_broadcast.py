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
from primitives.compact.fuse import keys64
from primitives.compact.ribbon import RibbonBroadcast
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
    assert registry.names("broadcast") == ["full-list", "fuse", "ribbon", "ribbon-32", "ribbon-classes"]
    for name in registry.names("broadcast"):
        encoding = registry.create("broadcast", name)
        assert isinstance(encoding, BroadcastEncoding) and encoding.name == name
    assert registry.create("broadcast", "fuse", fingerprint_bits=32).fingerprint_bits == 32
    assert registry.create("broadcast", "ribbon", fingerprint_bits=32).fingerprint_bits == 32
    assert registry.create("broadcast", "ribbon-32").fingerprint_bits == 32


COMPACT = [FuseBroadcast, RibbonBroadcast]


@pytest.mark.parametrize("bits", [16, 32])
@pytest.mark.parametrize("cls", COMPACT, ids=lambda c: c.name)
def test_compact_answers_as_the_full_list(cls: type[FuseBroadcast], bits: int) -> None:
    """Every released tag: the same count. 200,000 unreleased tags: ``None`` from the full list;
    from the compact broadcast ``None`` except for false positives, whose number is within the
    binomial (1 - ALPHA) bound at rate 2^-bits."""
    released = _released(13_812, 3)
    seed = b"public seed"
    full = FullListBroadcast().load(FullListBroadcast().build(released, seed))
    fuse = cls(bits).load(cls(bits).build(released, seed))
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
    st.sampled_from(COMPACT),
)
def test_property_round_trip_and_order(
    released: dict[bytes, int], seed: bytes, bits: int, cls: type[FuseBroadcast]
) -> None:
    encoding = cls(bits)
    data = encoding.build(released, seed)
    assert encoding.build(list(reversed(list(released.items()))), seed) == data
    loaded = encoding.load(data)
    assert loaded.size == len(data) and len(loaded) == len(released)
    full = FullListBroadcast().load(FullListBroadcast().build(released, seed))
    for tag, count in released.items():
        assert loaded.query(tag) == full.query(tag) == count


def test_count_width_follows_the_largest_count() -> None:
    for max_count, width in [(255, 8), (256, 16), (65_535, 16), (65_536, 32), (2**32 - 1, 32)]:
        released = _released(100, 5, max_count=1)
        next_tag = next(iter(released))
        released[next_tag] = max_count
        loaded = FuseBroadcast().load(FuseBroadcast().build(released, b"s"))
        assert loaded.counts.width == width and loaded.query(next_tag) == max_count
        ribbon = RibbonBroadcast().load(RibbonBroadcast().build(released, b"s"))
        assert ribbon.count_bits == width and ribbon.query(next_tag) == max_count


@pytest.mark.parametrize(("bits", "n_probe"), [(8, 1_000_000), (16, 2_000_000)])
def test_ribbon_false_positive_rate(bits: int, n_probe: int) -> None:
    """≥ 10^6 random tags against a ribbon of 13,812: false positives within the two-sided
    binomial (1 - ALPHA) interval at rate 2^-bits."""
    released = _released(13_812, 20)
    loaded = RibbonBroadcast(bits).load(RibbonBroadcast(bits).build(released, b"seed"))
    probe = keys64(_unreleased(n_probe, 21, released))
    hits = int(loaded.contains_many(probe).sum())
    rate = 2.0**-bits
    low, high = binom.ppf(ALPHA / 2, probe.size, rate), binom.isf(ALPHA / 2, probe.size, rate)
    assert low <= hits <= high, (hits, probe.size * rate)
    sample = _unreleased(2000, 22, released)
    assert loaded.contains_many(keys64(sample)).tolist() == [
        loaded.query(t) is not None for t in sample
    ]


def test_full_list_is_todays_released_tags_body() -> None:
    released = _released(5, 6)
    data = FullListBroadcast().build(released)
    tags = sorted(released)
    assert data == struct.pack(">I", 5) + b"".join(t + struct.pack(">I", released[t]) for t in tags)
    assert len(data) == 4 + 36 * 5


@pytest.mark.parametrize(
    "encoding", [FullListBroadcast(), FuseBroadcast(), RibbonBroadcast()], ids=repr
)
def test_deterministic_in_the_set_and_seed(encoding: BroadcastEncoding) -> None:
    released = _released(1372, 7)
    data = encoding.build(released, b"seed")
    items = list(released.items())
    shuffled = [items[i] for i in np.random.default_rng(8).permutation(len(items))]
    assert encoding.build(shuffled, b"seed") == data
    assert encoding.build(dict(shuffled), b"seed") == data


@pytest.mark.parametrize("cls", COMPACT, ids=lambda c: c.name)
def test_seed_changes_the_bytes_not_the_answers(cls: type[FuseBroadcast]) -> None:
    released = _released(500, 9)
    a, b = cls().build(released, b"one"), cls().build(released, b"two")
    assert a != b
    loaded = cls().load(b)
    assert all(loaded.query(t) == c for t, c in released.items())


@pytest.mark.parametrize(
    "encoding", [FullListBroadcast(), FuseBroadcast(), RibbonBroadcast()], ids=repr
)
def test_refuses_bad_released_sets(encoding: BroadcastEncoding) -> None:
    tag = bytes(32)
    with pytest.raises(InvalidInputError, match="tag must be 32 bytes, got"):
        encoding.build({b"short": 3}, b"s")
    with pytest.raises(
        InvalidInputError, match=r"count must be an integer in \[1, 4294967295\], got 0"
    ):
        encoding.build({tag: 0}, b"s")
    with pytest.raises(InvalidInputError, match=r"got 4294967296"):
        encoding.build({tag: 2**32}, b"s")
    with pytest.raises(InvalidInputError, match="distinct"):
        encoding.build([(tag, 1), (tag, 2)], b"s")
    with pytest.raises(InvalidInputError, match="tag must be 32 bytes"):
        encoding.load(encoding.build({tag: 1}, b"s")).query(b"\0" * 31)


@pytest.mark.parametrize("cls", COMPACT, ids=lambda c: c.name)
def test_compact_refuses_bad_parameters(cls: type[FuseBroadcast]) -> None:
    with pytest.raises(
        InvalidParameterError, match=r"fingerprint_bits must be one of \(8, 16, 32\), got 20"
    ):
        cls(20)
    with pytest.raises(InvalidParameterError, match="seed must be bytes, got str"):
        cls().build({bytes(32): 1}, "seed")  # type: ignore[arg-type]


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
        (
            lambda b: b[:4] + struct.pack("<I", 10**6) + b[8:],
            r"filter length must be at most \d+, got 1000000",
        ),
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


def _ribbon_bytes() -> bytes:
    return RibbonBroadcast().build(_released(40, 13), b"s")


def _ribbon_header(data: bytes, index: int, value: int) -> bytes:
    fields = list(struct.unpack_from("<4sBBBBQII", data))
    fields[index] = value
    return struct.pack("<4sBBBBQII", *fields) + data[24:]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b[:23], "at least 24 bytes .*got 23"),
        (lambda b: b"RCB2" + b[4:], "magic must be b'RCB1', got b'RCB2'"),
        (
            lambda b: _ribbon_header(b, 1, 12),
            r"fingerprint bits must be one of \(8, 16, 32\), got 12",
        ),
        (lambda b: _ribbon_header(b, 2, 0), r"count bits must be one of \(8, 16, 32\), got 0"),
        (lambda b: _ribbon_header(b, 3, 32), "width must be 64, got 32"),
        (lambda b: _ribbon_header(b, 4, 7), "reserved field must be 0, got 7"),
        (lambda b: _ribbon_header(b, 6, 0), "of 0 tags must have 0 slots, got"),
        (lambda b: _ribbon_header(b, 7, 63), "slots must be at least 64, got 63"),
        (lambda b: _ribbon_header(b, 7, 10**9), r"must be \d+ bytes .*got \d+"),
        (lambda b: b[:-1], r"must be \d+ bytes \(header and \d+ slots of 16 \+ 16 bits\), got \d+"),
        (lambda b: b + b"\0", r"must be \d+ bytes .*got \d+"),
    ],
)
def test_malformed_ribbon_bytes_are_refused(mutate: object, message: str) -> None:
    with pytest.raises(DecodeError, match=message):
        RibbonBroadcast().load(mutate(_ribbon_bytes()))  # type: ignore[operator]


def test_load_refuses_non_bytes() -> None:
    for encoding in (FullListBroadcast(), FuseBroadcast(), RibbonBroadcast()):
        with pytest.raises(DecodeError, match="must be bytes, got list"):
            encoding.load([1, 2])  # type: ignore[arg-type]
