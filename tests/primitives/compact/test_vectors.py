"""Known answers of primitives.compact (tests/vectors/compact/broadcast.json): every case rebuilds to
the same bytes, and every query is answered the same by the package and by a reader written
from docs/compact-broadcast.md alone (what the devices' TypeScript reader will do); for
ribbon-classes, from the RCC1 format in the docstrings of primitives/compact/ribbon_classes.py
and count_classes.py."""

from __future__ import annotations

import hashlib
import struct
from typing import Any

import pytest
from known_answers import load

from primitives.compact.broadcast import FullListBroadcast, FuseBroadcast
from primitives.compact.fuse import FuseFilter, FuseRetrieval
from primitives.compact.ribbon import RibbonBroadcast
from primitives.compact.ribbon_classes import RibbonClassesBroadcast

CASES: list[dict[str, Any]] = load("compact/broadcast.json")["cases"]
M64 = 2**64 - 1


def _pairs(case: dict[str, Any]) -> list[tuple[bytes, int]]:
    return [(bytes.fromhex(t), c) for t, c in case["released"]]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_rebuilds_to_the_same_bytes(case: dict[str, Any]) -> None:
    seed, pairs = bytes.fromhex(case["seed"]), _pairs(case)
    kind = case["encoding"]
    if kind == "fuse":
        data = FuseBroadcast(case["fingerprint_bits"]).build(pairs, seed)
    elif kind == "ribbon":
        data = RibbonBroadcast(case["fingerprint_bits"]).build(pairs, seed)
    elif kind == "ribbon-classes":
        encoding = RibbonClassesBroadcast(case["fingerprint_bits"], case["class_bits"])
        data = encoding.build(pairs, seed)
        loaded = encoding.load(data)
        assert loaded.floors == case["floors"]
        assert [loaded.seed, loaded.m] == [case["layout"]["seed"], case["layout"]["slots"]]
    elif kind == "full-list":
        data = FullListBroadcast().build(pairs, seed)
    elif kind == "filter":
        data = FuseFilter.build([t for t, _ in pairs], seed, width=case["width"]).to_bytes()
    else:
        data = FuseRetrieval.build(pairs, seed, width=case["width"]).to_bytes()
    assert data.hex() == case["bytes"]
    assert hashlib.sha256(data).hexdigest() == case["sha256"]


# --- a reader from the format document alone --------------------------------------------------


def _murmur64(h: int) -> int:
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & M64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & M64
    return h ^ (h >> 33)


def _xor3(section: bytes, tag: bytes) -> tuple[int, int, int]:
    """(width, n, XOR of the tag's three slots XOR its fingerprint-or-zero source) of a section."""
    magic, width, arity, _, seed, n, length, count = struct.unpack_from("<4sBBHQIII", section)
    assert magic in (b"FBF1", b"FBR1") and arity == 3
    k = int.from_bytes(hashlib.sha256(b"fre-e2t/compact/key/v1" + tag).digest()[:8], "little")
    h = _murmur64((k + seed) & M64)
    h0 = (h * length * count) >> 64
    h1 = (h0 + length) ^ ((h >> 18) & (length - 1))
    h2 = (h0 + 2 * length) ^ (h & (length - 1))
    size = width // 8
    slot = (
        [
            int.from_bytes(section[28 + size * i : 28 + size * (i + 1)], "little")
            for i in (h0, h1, h2)
        ]
        if n
        else [0, 0, 0]
    )
    return width, h, slot[0] ^ slot[1] ^ slot[2]


def _filter_says(section: bytes, tag: bytes) -> bool:
    n = struct.unpack_from("<I", section, 16)[0]
    width, h, x = _xor3(section, tag)
    return n > 0 and x == (h ^ (h >> 32)) & ((1 << width) - 1)


def _ribbon_answer(data: bytes, tag: bytes) -> int | None:
    magic, f, v, width, _, seed, n, m = struct.unpack_from("<4sBBBBQII", data)
    assert magic == b"RCB1" and width == 64
    if n == 0:
        return None
    k = int.from_bytes(hashlib.sha256(b"fre-e2t/compact/key/v1" + tag).digest()[:8], "little")
    h = _murmur64((k + seed) & M64)
    start = (h * (m - 63)) >> 64
    coeff = _murmur64((h + 0x9E3779B97F4A7C15) & M64) | 1

    def xor(offset: int, bits: int) -> int:
        out = 0
        for j in range(64):
            if coeff >> j & 1:
                i = offset + (start + j) * bits // 8
                out ^= int.from_bytes(data[i : i + bits // 8], "little")
        return out

    if xor(24, f) != (h ^ (h >> 32)) & ((1 << f) - 1):
        return None
    return xor(24 + m * f // 8, v)


def _ribbon_classes_answer(data: bytes, tag: bytes) -> tuple[int | None, list[int]]:
    """(the answer, the floors table) of an RCC1 broadcast, read bit by bit from its bytes."""
    magic, f, c, width, reserved, seed, n, m = struct.unpack_from("<4sBBBBQII", data)
    assert magic == b"RCC1" and width == 64 and reserved == 0
    (k,) = struct.unpack_from("<H", data, 24)
    floors: list[int] = []
    pos = 26
    for _ in range(k):  # LEB128: first floor, then positive differences
        value, shift = 0, 0
        while True:
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        floors.append(value + (floors[-1] if floors else 0))
    r = f + c
    assert len(data) == pos + (m * r + 7) // 8
    if n == 0:
        return None, floors

    def slot(i: int) -> int:
        return sum(((data[pos + (i * r + b) // 8] >> ((i * r + b) % 8)) & 1) << b for b in range(r))

    k64 = int.from_bytes(hashlib.sha256(b"fre-e2t/compact/key/v1" + tag).digest()[:8], "little")
    h = _murmur64((k64 + seed) & M64)
    start = (h * (m - 63)) >> 64
    coeff = _murmur64((h + 0x9E3779B97F4A7C15) & M64) | 1
    value = 0
    for j in range(64):
        if coeff >> j & 1:
            value ^= slot(start + j)
    if value & ((1 << f) - 1) != (h ^ (h >> 32)) & ((1 << f) - 1):
        return None, floors
    index = value >> f
    return (floors[index] if index < len(floors) else None), floors


def _independent_answer(case: dict[str, Any], tag: bytes) -> Any:
    data = bytes.fromhex(case["bytes"])
    kind = case["encoding"]
    if kind == "ribbon":
        return _ribbon_answer(data, tag)
    if kind == "ribbon-classes":
        answer, floors = _ribbon_classes_answer(data, tag)
        assert floors == case["floors"]
        return answer
    if kind == "filter":
        return _filter_says(data, tag)
    if kind == "retrieval":
        return _xor3(data, tag)[2]
    if kind == "full-list":
        (n,) = struct.unpack_from(">I", data)
        records = {
            data[4 + 36 * i : 36 + 36 * i]: struct.unpack_from(">I", data, 36 + 36 * i)[0]
            for i in range(n)
        }
        return records.get(tag)
    magic, filter_length = struct.unpack_from("<4sI", data)
    assert magic == b"FCB1"
    filter_, counts = data[8 : 8 + filter_length], data[8 + filter_length :]
    return _xor3(counts, tag)[2] if _filter_says(filter_, tag) else None


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_queries(case: dict[str, Any]) -> None:
    data = bytes.fromhex(case["bytes"])
    kind = case["encoding"]
    released = dict(_pairs(case))
    heard = (
        RibbonClassesBroadcast(case["fingerprint_bits"], case["class_bits"]).heard_counts(
            _pairs(case)
        )
        if kind == "ribbon-classes"
        else {}
    )
    for query in case["queries"]:
        tag = bytes.fromhex(query["tag"])
        assert _independent_answer(case, tag) == query["answer"], query
        if kind == "fuse":
            assert FuseBroadcast(case["fingerprint_bits"]).load(data).query(tag) == query["answer"]
        elif kind == "ribbon":
            assert (
                RibbonBroadcast(case["fingerprint_bits"]).load(data).query(tag) == query["answer"]
            )
        elif kind == "ribbon-classes":
            encoding = RibbonClassesBroadcast(case["fingerprint_bits"], case["class_bits"])
            assert encoding.load(data).query(tag) == query["answer"]
        elif kind == "full-list":
            assert FullListBroadcast().load(data).query(tag) == query["answer"]
        elif kind == "filter":
            assert (tag in FuseFilter.from_bytes(data)) == query["answer"]
        else:
            assert FuseRetrieval.from_bytes(data)[tag] == query["answer"]
        if tag in released and kind in ("fuse", "ribbon", "full-list", "retrieval"):
            assert query["answer"] == released[tag]
        if tag in released and kind == "ribbon-classes":
            # the largest floor at or below the tag's count: what a device reads, never above it
            assert query["answer"] == max(x for x in case["floors"] if x <= released[tag])
            assert query["answer"] == heard[tag]


def test_the_rounded_ribbon_classes_cases_show_what_they_are_for() -> None:
    """The 300-tag case rounds some queried members down; the 3-bit case answers some
    non-members with a floor (a fingerprint false positive)."""
    by_name = {c["name"]: c for c in CASES}
    rounded = by_name["ribbon-classes broadcast, 300 tags, 27-bit fingerprints, 4-bit classes"]
    counts = dict(rounded["released"])
    assert len(rounded["floors"]) < len(set(counts.values()))
    assert any(
        q["answer"] is not None and q["answer"] < counts[q["tag"]] for q in rounded["queries"]
    )
    small = by_name["ribbon-classes broadcast, 12 tags, 3-bit fingerprints, 4-bit classes"]
    members = dict(small["released"])
    assert any(q["answer"] is not None for q in small["queries"] if q["tag"] not in members)
