"""The servers' compact replay memory: exact membership across merges, 16 bytes an entry."""

from __future__ import annotations

import hashlib

import pytest

from fre_protocol.roles.replay_filter import ReplayFilter
from primitives.errors import InvalidParameterError


def _digest(i: int) -> bytes:
    return hashlib.blake2b(i.to_bytes(8, "big"), digest_size=16).digest()


def test_membership_is_exact_across_merges() -> None:
    seen = ReplayFilter(16)
    entries = [_digest(i) for i in range(1000)]
    # Entries ending in (or made of) zero bytes: "S" arrays drop trailing zeros when read back.
    entries += [bytes(16), b"\x01" + bytes(15), bytes(15) + b"\x01"]
    assert all(seen.add(e) for e in entries[:10])
    for start in range(10, len(entries), 97):  # batches of several sizes: runs of several sizes merge
        assert seen.add_many(entries[start : start + 97]).all()
    assert len(seen) == len(entries) and seen.nbytes == 16 * len(entries)
    assert not any(seen.add(e) for e in entries), "every second copy is a replay"
    assert all(e in seen for e in entries)
    assert not any(_digest(i) in seen for i in range(1000, 3000))
    assert b"\x02" + bytes(15) not in seen


def test_the_first_copy_in_a_batch_wins() -> None:
    seen = ReplayFilter(4)
    seen.add(b"aaaa")
    assert seen.add_many([b"bbbb", b"aaaa", b"bbbb", b"cccc", b"cccc"]).tolist() == [True, False, False, True, False]
    assert seen.add_many([]).tolist() == []


def test_it_refuses_entries_of_another_width() -> None:
    seen = ReplayFilter(16)
    with pytest.raises(InvalidParameterError, match="16-byte"):
        seen.add_many([bytes(16), b"short"])
    with pytest.raises(InvalidParameterError, match="width"):
        ReplayFilter(0)
