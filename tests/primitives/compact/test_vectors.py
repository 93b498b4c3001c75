"""Known answers of primitives.compact (tests/vectors/compact/broadcast.json): every case rebuilds to
the same bytes, and every query is answered the same by the package and by a reader written
from docs/compact-broadcast.md alone (what the devices' TypeScript reader will do)."""

from __future__ import annotations

import hashlib
import struct
from typing import Any

import pytest
from known_answers import load

from primitives.compact.broadcast import FullListBroadcast, FuseBroadcast
from primitives.compact.fuse import FuseFilter, FuseRetrieval
from primitives.compact.ribbon import RibbonBroadcast

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


def _independent_answer(case: dict[str, Any], tag: bytes) -> Any:
    data = bytes.fromhex(case["bytes"])
    kind = case["encoding"]
    if kind == "ribbon":
        return _ribbon_answer(data, tag)
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
    for query in case["queries"]:
        tag = bytes.fromhex(query["tag"])
        assert _independent_answer(case, tag) == query["answer"], query
        if kind == "fuse":
            assert FuseBroadcast(case["fingerprint_bits"]).load(data).query(tag) == query["answer"]
        elif kind == "ribbon":
            assert (
                RibbonBroadcast(case["fingerprint_bits"]).load(data).query(tag) == query["answer"]
            )
        elif kind == "full-list":
            assert FullListBroadcast().load(data).query(tag) == query["answer"]
        elif kind == "filter":
            assert (tag in FuseFilter.from_bytes(data)) == query["answer"]
        else:
            assert FuseRetrieval.from_bytes(data)[tag] == query["answer"]
        if tag in released and kind in ("fuse", "ribbon", "full-list", "retrieval"):
            assert query["answer"] == released[tag]
