"""``ribbon-classes``: count classes (public floors, each count rounded down to one) and the ribbon
of packed (fingerprint, class) slots. A device reads the floor of its count's class on every
released tag, never above the count; unreleased tags pass at the stated rate; bytes round-trip
and malformed ones are refused with a typed error."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom

from primitives import registry
from primitives.compact.count_classes import (
    _geometric_point,
    class_floors,
    class_of,
    decode_floors,
    encode_floors,
    rounded_counts,
)
from primitives.compact.ribbon_classes import RibbonClassesBroadcast, pack_slots, unpack_slots
from primitives.errors import DecodeError, InvalidInputError, InvalidParameterError

ALPHA = 1e-6  # the statistical check fails a correct implementation with probability <= ALPHA


def _released(n: int, stream: int) -> dict[bytes, int]:
    """Heavy-tailed counts from 70 up, as released counts are."""
    rng = np.random.default_rng([33, 1, stream])
    raw = rng.integers(0, 256, size=(n, 32), dtype=np.uint8)
    counts = np.minimum(70 * (1 + rng.pareto(1.1, size=n)), 50_000).astype(int)
    return {bytes(t): int(c) for t, c in zip(raw, counts, strict=True)}


def test_registered_and_default_slot_bits() -> None:
    enc = registry.create("broadcast", "ribbon-classes")
    assert isinstance(enc, RibbonClassesBroadcast)
    assert (enc.fingerprint_bits, enc.class_bits) == (27, 8)


def test_floors_are_the_counts_when_few_distinct() -> None:
    counts = [70, 70, 71, 90, 4000]
    assert class_floors(counts, 2) == [70, 71, 90, 4000]
    assert rounded_counts(counts, 2) == counts


def test_floors_known_answer() -> None:
    """Geometric points between 10 and 1000 at 2 class bits: 10, 10·100^(1/3) = 46.4…,
    10·100^(2/3) = 215.4…, 1000; each snapped down to the largest count at or below it."""
    counts = list(range(10, 1001, 3))  # 10, 13, …, 1000
    assert class_floors(counts, 2) == [10, 46, 214, 1000]
    assert class_of(45, [10, 46, 214, 1000]) == 0 and class_of(46, [10, 46, 214, 1000]) == 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 1 << 20), min_size=1, max_size=400), st.integers(1, 6))
def test_property_floors_round_down_within_a_class(counts: list[int], bits: int) -> None:
    """Floors: increasing, at most 2^bits of them, every one a count, the smallest and largest
    counts among them; each count rounds down to a floor, never up, and to no lower floor than
    the largest count at or below the last geometric point at or below it (so a count is at
    most one geometric step, ``(max/min)^(1/(2^bits − 1))``, above a point its floor reaches)."""
    floors = class_floors(counts, bits)
    assert floors == sorted(set(floors)) and len(floors) <= 1 << bits
    assert set(floors) <= set(counts) and floors[0] == min(counts) and floors[-1] == max(counts)
    values, last = sorted(set(counts)), (1 << bits) - 1
    points = [_geometric_point(values[0], values[-1], k, last) for k in range(last + 1)]
    step = (values[-1] / values[0]) ** (1 / last) if last else 1.0
    assert all(b <= (a + 1) * step * (1 + 1e-12) for a, b in itertools.pairwise(points))
    for c, r in zip(counts, rounded_counts(counts, bits), strict=True):
        assert r in floors and r <= c
        if len(values) > 1 << bits:
            below = max(p for p in points if p <= c)
            assert r >= max(v for v in values if v <= below)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, (1 << 32) - 1), min_size=0, max_size=50, unique=True))
def test_property_floors_table_round_trips(values: list[int]) -> None:
    floors = sorted(values)
    data = b"xx" + encode_floors(floors) + b"tail"
    assert decode_floors(data, 2, 1 << 16) == (floors, len(data) - 4)


@pytest.mark.parametrize("bits", [1, 7, 35, 64])
def test_packed_slots_round_trip(bits: int) -> None:
    rng = np.random.default_rng(bits)
    values = rng.integers(0, np.iinfo(np.uint64).max, size=101, dtype=np.uint64, endpoint=True)
    values &= np.uint64((1 << bits) - 1) if bits < 64 else np.uint64(np.iinfo(np.uint64).max)
    data = pack_slots(values, bits)
    assert len(data) == math.ceil(101 * bits / 8)
    assert np.array_equal(unpack_slots(data, 101, bits), values)


@pytest.mark.parametrize("n", [1, 12, 1_372, 13_812])
def test_answers_are_the_class_floors(n: int) -> None:
    """Every released tag answers its count's floor (what ``heard_counts`` says, at most the
    count); 100,000 unreleased tags answer None except false positives, within the binomial
    (1 − ALPHA) bound at 2^-27."""
    released = _released(n, n)
    enc = RibbonClassesBroadcast()
    loaded = enc.load(enc.build(released, b"public seed"))
    heard = enc.heard_counts(released)
    assert len(loaded) == n and loaded.false_positive_rate == 2.0**-27
    assert all(loaded.query(t) == heard[t] <= c for t, c in released.items())
    raw = np.random.default_rng([33, 2, n]).integers(0, 256, size=(100_000, 32), dtype=np.uint8)
    hits = sum(loaded.query(bytes(t)) is not None for t in raw if bytes(t) not in released)
    assert hits <= binom.ppf(1 - ALPHA, 100_000, 2.0**-27)


def test_sizes_meet_the_targets() -> None:
    """1,372 tags (10^6 users) ≤ 8,000 B and 13,812 (10^7) ≤ 64,000 B, with room for the
    message's own framing (under 100 B)."""
    enc = RibbonClassesBroadcast()
    assert len(enc.build(_released(1_372, 0), b"s")) <= 8_000 - 100
    assert len(enc.build(_released(13_812, 0), b"s")) <= 64_000 - 100


def test_deterministic_and_empty() -> None:
    enc = RibbonClassesBroadcast()
    released = _released(50, 5)
    assert enc.build(released, b"a") == enc.build(dict(reversed(list(released.items()))), b"a")
    empty = enc.load(enc.build({}, b"a"))
    assert len(empty) == 0 and empty.query(bytes(32)) is None and empty.false_positive_rate == 0.0


def test_bad_parameters_and_inputs() -> None:
    with pytest.raises(InvalidParameterError, match="fingerprint_bits must be an integer in \\[1, 32\\], got 40"):
        RibbonClassesBroadcast(fingerprint_bits=40)
    with pytest.raises(InvalidParameterError, match="class_bits must be an integer in \\[1, 16\\], got 0"):
        RibbonClassesBroadcast(class_bits=0)
    with pytest.raises(InvalidInputError, match="tag must be 32 bytes"):
        RibbonClassesBroadcast().build({b"short": 3}, b"s")


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b[:10], "at least 24 bytes"),
        (lambda b: b"XXXX" + b[4:], "magic"),
        (lambda b: b[:4] + bytes([40]) + b[5:], "fingerprint_bits"),
        (lambda b: b[:6] + bytes([32]) + b[7:], "width"),
        (lambda b: b + b"\0", "must be"),
        (lambda b: b[:-1], "must be"),
        (lambda b: b[:24] + b"\xff\xff" + b[26:], "at most 256 floors"),
        (lambda b: b[:-1] + bytes([b[-1] | 0x80]), "padding bits"),
    ],
)
def test_malformed_bytes_are_refused(mutate: object, message: str) -> None:
    data = RibbonClassesBroadcast().build(_released(40, 1), b"s")  # 74 slots of 35 bits: 6 bits pad
    with pytest.raises(DecodeError, match=message):
        RibbonClassesBroadcast().load(mutate(data))  # type: ignore[operator]


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (b"\x01\x00\x81\x00", "not in its shortest encoding"),  # 1 as two bytes
        (b"\x01\x00\x80\x80\x80\x80\x80\x01", "longer than 5 bytes"),
        (b"\x01\x00\x80", "truncated"),
        (b"\x02\x00\x05\x00", "must increase"),
        (b"\x01\x00\x00", "must increase from 1"),
    ],
)
def test_a_floors_table_has_one_encoding(table: bytes, message: str) -> None:
    with pytest.raises(DecodeError, match=message):
        decode_floors(table, 0, 256)
