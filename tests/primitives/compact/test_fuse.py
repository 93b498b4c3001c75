"""The binary fuse filter and static function of primitives.compact.fuse: membership, values,
the false-positive rate against a binomial bound, byte round trips, refusal of malformed bytes,
determinism, and agreement with the reference C implementation where it is installed."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from scipy.stats import binom

from primitives.compact import _fuse_core as core
from primitives.compact.fuse import (
    HEADER,
    FuseFilter,
    FuseRetrieval,
    build_fuse,
    key64,
    keys64,
)
from primitives.errors import DecodeError, InvalidInputError, InvalidParameterError

# Each statistical check fails a correct implementation with probability at most ALPHA.
ALPHA = 1e-6


def _tags(n: int, stream: int) -> list[bytes]:
    raw = np.random.default_rng([32, stream]).integers(0, 256, size=(n, 32), dtype=np.uint8)
    return [bytes(row) for row in raw]


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 100, 1372])
@pytest.mark.parametrize("width", [8, 16, 32])
def test_filter_has_every_member_and_round_trips(n: int, width: int) -> None:
    tags = _tags(n, 1)
    f = FuseFilter.build(tags, b"seed", width=width)
    again = FuseFilter.from_bytes(f.to_bytes())
    assert len(again) == n and again.width == width and again.size == len(f.to_bytes())
    assert all(t in f for t in tags) and all(t in again for t in tags)
    assert again.to_bytes() == f.to_bytes()


def test_empty_filter_says_no() -> None:
    f = FuseFilter.build([], b"seed")
    assert f.false_positive_rate == 0.0
    assert not any(t in f for t in _tags(1000, 2))


@pytest.mark.parametrize("width", [8, 16, 32])
def test_retrieval_returns_every_value(width: int) -> None:
    tags = _tags(2000, 3)
    values = np.random.default_rng(4).integers(0, 1 << width, size=len(tags), dtype=np.uint64)
    items = list(zip(tags, (int(v) for v in values), strict=True))
    r = FuseRetrieval.build(items, b"seed", width=width)
    again = FuseRetrieval.from_bytes(r.to_bytes())
    assert all(again[t] == v for t, v in items)


@pytest.mark.parametrize(("width", "n_probe"), [(8, 1_000_000), (16, 4_000_000)])
def test_false_positive_rate_matches_two_to_the_minus_width(width: int, n_probe: int) -> None:
    """On ≥ 10^6 random tags outside the set, the number of false positives is
    Binomial(n_probe, 2^-width): the count must lie in the two-sided (1 - ALPHA) interval."""
    members = _tags(13_812, 5)
    f = FuseFilter.build(members, b"seed", width=width)
    probe = keys64(_tags(n_probe, 6))
    probe = probe[~np.isin(probe, keys64(members))]
    hits = int(f.contains_many(probe).sum())
    rate = 2.0**-width
    low, high = binom.ppf(ALPHA / 2, probe.size, rate), binom.isf(ALPHA / 2, probe.size, rate)
    assert low <= hits <= high, (hits, probe.size * rate, low, high)


def test_false_positive_rate_at_32_bits_is_below_the_bound() -> None:
    members = _tags(13_812, 7)
    f = FuseFilter.build(members, b"seed", width=32)
    probe = keys64(_tags(1_000_000, 8))
    hits = int(f.contains_many(probe).sum())
    assert hits <= binom.isf(ALPHA, probe.size, 2.0**-32)


def test_vectorised_and_scalar_membership_agree() -> None:
    f = FuseFilter.build(_tags(500, 9), b"seed", width=8)
    probe = keys64(_tags(20_000, 10))
    assert f.contains_many(probe).tolist() == [f.contains_key64(int(k)) for k in probe]


def test_scalar_hashing_equals_vectorised_hashing() -> None:
    keys = np.random.default_rng(11).integers(0, 2**64 - 1, 1000, dtype=np.uint64, endpoint=True)
    mixed = core.mixed(keys, 123456789)
    slots = core.positions(mixed, 256, 9)
    for k, h, s in zip(keys, mixed, slots, strict=True):
        assert core.murmur64_int((int(k) + 123456789) % 2**64) == int(h)
        assert core.positions_int(int(h), 256, 9) == tuple(int(x) for x in s)


def test_build_is_a_function_of_the_set_and_the_seed() -> None:
    tags = _tags(3000, 12)
    first = FuseFilter.build(tags, b"public seed").to_bytes()
    assert FuseFilter.build(list(reversed(tags)), b"public seed").to_bytes() == first
    shuffled = [tags[i] for i in np.random.default_rng(13).permutation(len(tags))]
    assert FuseFilter.build(shuffled, b"public seed").to_bytes() == first
    assert FuseFilter.build(tags, b"other seed").to_bytes() != first


def test_refuses_bad_inputs() -> None:
    tags = _tags(10, 14)
    with pytest.raises(InvalidInputError, match="distinct"):
        FuseFilter.build(tags + tags[:1], b"s")
    with pytest.raises(InvalidParameterError, match=r"one of \(8, 16, 32\), got 12"):
        FuseFilter.build(tags, b"s", width=12)
    with pytest.raises(InvalidInputError, match=r"\[0, 2\^8\), got 256"):
        FuseRetrieval.build([(tags[0], 256)], b"s", width=8)
    with pytest.raises(InvalidInputError, match="key must be bytes, got str"):
        FuseFilter.build(["a"], b"s")  # type: ignore[list-item]
    with pytest.raises(InvalidInputError, match="distinct 64-bit key hashes"):
        build_fuse(np.array([5, 5], dtype=np.uint64), b"s")


def _filter_bytes() -> bytes:
    return FuseFilter.build(_tags(50, 15), b"s", width=16).to_bytes()


def _with_header(data: bytes, **fields: int | bytes) -> bytes:
    names = ["magic", "width", "arity", "reserved", "seed", "n", "length", "count"]
    values = dict(zip(names, HEADER.unpack_from(data), strict=True))
    values.update(fields)
    return HEADER.pack(*(values[k] for k in names)) + data[HEADER.size :]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b[:27], "at least 28 bytes .*got 27"),
        (lambda b: b[:-1], r"must be \d+ bytes .*got \d+"),
        (lambda b: b + b"\0", r"must be \d+ bytes .*got \d+"),
        (lambda b: _with_header(b, magic=b"FBR1"), "magic must be b'FBF1', got b'FBR1'"),
        (lambda b: _with_header(b, width=24), r"width must be one of \(8, 16, 32\), got 24"),
        (lambda b: _with_header(b, arity=4), "arity must be 3, got 4"),
        (lambda b: _with_header(b, reserved=1), "reserved field must be 0, got 1"),
        (lambda b: _with_header(b, length=12), r"power of two in \[4, 262144\], got 12"),
        (lambda b: _with_header(b, length=2), r"power of two in \[4, 262144\], got 2"),
        (lambda b: _with_header(b, count=0), "segment_count must be >= 1, got 0"),
        (lambda b: _with_header(b, n=0), "0 keys must have segment_length 0"),
        (lambda b: _with_header(b, count=1_000_000), r"must be \d+ bytes .*got \d+"),
    ],
)
def test_malformed_filter_bytes_are_refused(mutate: object, message: str) -> None:
    data = mutate(_filter_bytes())  # type: ignore[operator]
    with pytest.raises(DecodeError, match=message):
        FuseFilter.from_bytes(data)


def test_retrieval_refuses_filter_bytes_and_non_bytes() -> None:
    with pytest.raises(DecodeError, match="magic must be b'FBR1', got b'FBF1'"):
        FuseRetrieval.from_bytes(_filter_bytes())
    with pytest.raises(DecodeError, match="must be bytes, got str"):
        FuseRetrieval.from_bytes("FBR1")  # type: ignore[arg-type]


def test_little_endian_header_layout() -> None:
    tags = _tags(20, 16)
    f = FuseFilter.build(tags, b"s", width=16)
    data = f.to_bytes()
    assert data[:4] == b"FBF1" and data[4] == 16 and data[5] == 3 and data[6:8] == b"\0\0"
    seed, n, length, count = struct.unpack_from("<QIII", data, 8)
    assert (seed, n, length, count) == (
        f.layout.seed,
        20,
        f.layout.segment_length,
        f.layout.segment_count,
    )
    slots = np.frombuffer(data, dtype="<u2", offset=28)
    k = key64(tags[0])
    h = core.murmur64_int((k + seed) % 2**64)
    h0, h1, h2 = core.positions_int(h, length, count)
    assert int(slots[h0]) ^ int(slots[h1]) ^ int(slots[h2]) == (h ^ (h >> 32)) & 0xFFFF


def test_agrees_with_the_reference_c_implementation() -> None:
    """Our 16-bit arrays read by xor_singleheader's ``binary_fuse16_contain`` (via pyfusefilter's
    cffi module, when installed): same answer on every member and on 50,000 other keys."""
    xf = pytest.importorskip("pyfusefilter._xorfilter")
    lib, ffi = xf.lib, xf.ffi
    keys = np.unique(np.random.default_rng(17).integers(0, 2**63, 5000, dtype=np.uint64))
    f = FuseFilter.from_construction(build_fuse(keys, b"s"), 16)
    lay = f.layout
    cf = ffi.new("binary_fuse16_t *")
    cf.Seed, cf.Size = lay.seed, lay.n
    cf.SegmentLength, cf.SegmentLengthMask = lay.segment_length, lay.segment_length - 1
    cf.SegmentCount, cf.SegmentCountLength = lay.segment_count, lay.segment_count * lay.segment_length
    cf.ArrayLength = lay.array_length
    array = ffi.new("uint16_t[]", [int(x) for x in f.array])
    cf.Fingerprints = array
    assert all(lib.binary_fuse16_contain(int(k), cf) for k in keys)
    probe = np.random.default_rng(18).integers(0, 2**63, 50_000, dtype=np.uint64)
    assert [bool(lib.binary_fuse16_contain(int(k), cf)) for k in probe] == f.contains_many(probe).tolist()
