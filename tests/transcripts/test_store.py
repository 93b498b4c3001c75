"""TranscriptHeader, TranscriptEntry and the SQLite TranscriptStore (design §6.7)."""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from primitives.errors import (
    DecodeError,
    InvalidInputError,
    InvalidParameterError,
    ProtocolStateError,
)
from primitives.randomness import RandomSource
from transcripts import (
    SCHEMA_VERSION,
    TranscriptEntry,
    TranscriptHeader,
    TranscriptStore,
    rejected_status,
    view_summary,
)
from transcripts.store import APPLICATION_ID

ROOT = Path(__file__).resolve().parents[2]


def _header(rng_mode: str = "crypto", **kw: object) -> TranscriptHeader:
    return TranscriptHeader(
        rng_mode=rng_mode,
        run_id=str(kw.pop("run_id", "run-1")),
        components={"oprf": "ristretto255-SHA512", "secret_sharing": "additive-ring2k"},
        params={"epsilon": math.inf, "k": 20, "radius": 0.5},
        **kw,  # type: ignore[arg-type]
    )


def _row(i: int, view: str = "S_syn") -> tuple[str, str, str, str, str, bytes, str]:
    return (view, "phase1", "proxy", view, "tag", i.to_bytes(8, "big") * 4, "accepted")


# ----------------------------------------------------------------------------- header / entry


def test_header_round_trips_and_canonicalises_json() -> None:
    h = TranscriptHeader(
        rng_mode="seeded",
        params={
            "epsilon": math.inf,
            "delta": 1e-6,
            "t": np.int64(100),
            "pair": (1, 2),
            "offsets": np.array([0.5, np.inf]),
            "flag": np.bool_(True),
            "blob": b"\x00\xff",
        },
        extra={"nested": {"x": -math.inf}},
    )
    # inf becomes "inf" (the ledger's convention), numpy scalars become Python, tuples lists,
    # bytes hex (primitives.jsonsafe: one canonical form in every file).
    assert h.params == {
        "epsilon": "inf",
        "delta": 1e-6,
        "t": 100,
        "pair": [1, 2],
        "offsets": [0.5, "inf"],
        "flag": True,
        "blob": "00ff",
    }
    assert type(h.params["t"]) is int
    assert h.extra == {"nested": {"x": "-inf"}}
    assert h.schema_version == SCHEMA_VERSION
    assert h.created_at.endswith("Z")
    assert h.seeded
    text = json.dumps(h.to_dict(), allow_nan=False)  # strict JSON
    assert TranscriptHeader.from_dict(json.loads(text)) == h


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("rng_mode", "random", "rng_mode"),
        ("run_id", "", "run_id"),
        ("run_id", "has space", "run_id"),
        ("created_at", "2024-01-01T00:00:00+02:00", "UTC"),
        ("created_at", "yesterday", "ISO 8601"),
        ("schema_version", 0, "schema_version"),
        ("components", {"oprf": ""}, "components"),
        ("params", {1: "x"}, "keys must be str"),
        ("package_version", " ", "package_version"),
    ],
)
def test_header_rejects_bad_fields(field: str, value: object, needle: str) -> None:
    kwargs: dict[str, object] = {"rng_mode": "crypto", field: value}
    with pytest.raises(InvalidParameterError, match=needle):
        TranscriptHeader(**kwargs)  # type: ignore[arg-type]


def test_header_from_dict_rejects_unknown_and_missing_keys() -> None:
    good = _header().to_dict()
    with pytest.raises(InvalidInputError, match="unknown"):
        TranscriptHeader.from_dict({**good, "surprise": 1})
    del good["rng_mode"]
    with pytest.raises(InvalidInputError, match="missing"):
        TranscriptHeader.from_dict(good)


def test_entry_validation() -> None:
    base = dict(
        seq=0,
        view="S_tag",
        phase="phase1",
        sender="user",
        receiver="S_tag",
        message_type="blinded_element",
        payload=b"\x01" * 32,
        size=32,
    )
    e = TranscriptEntry(**base)  # type: ignore[arg-type]
    assert e.accepted and e.error_type is None
    r = TranscriptEntry(**{**base, "status": "rejected:DecodeError"})  # type: ignore[arg-type]
    assert r.error_type == "DecodeError"
    bad = [
        {"seq": -1},
        {"view": ""},
        {"sender": "user 7"},
        {"message_type": "1st"},
        {"phase": "p" * 129},
        {"size": 31},
        {"payload": "text"},
        {"status": "refused"},
        {"status": "rejected:"},
        {"payload_recorded": False},  # size-only with bytes present
    ]
    for change in bad:
        with pytest.raises(InvalidParameterError):
            TranscriptEntry(**{**base, **change})  # type: ignore[arg-type]
    size_only = TranscriptEntry(**{**base, "payload": b"", "payload_recorded": False})  # type: ignore[arg-type]
    assert size_only.size == 32 and size_only.payload == b""
    assert "payload_recorded=False" in repr(size_only)


def test_rejected_status_forms() -> None:
    assert rejected_status(DecodeError("x")) == "rejected:DecodeError"
    assert rejected_status(ProtocolStateError) == "rejected:ProtocolStateError"
    assert rejected_status("VerificationError") == "rejected:VerificationError"
    with pytest.raises(InvalidParameterError):
        rejected_status("not an identifier")


# ----------------------------------------------------------------------------- round trip


def test_store_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    header = _header()
    payloads = [RandomSource.seeded(7, "payloads").random_bytes(n) for n in (0, 1, 32, 4096)]
    with TranscriptStore.create(path, header) as store:
        seqs = [
            store.record(
                view="S_tag",
                phase="phase1",
                sender="proxy",
                receiver="S_tag",
                message_type="blinded",
                payload=p,
            )
            for p in payloads
        ]
        seqs.append(
            store.record(
                view="proxy",
                phase="phase2",
                sender="user",
                receiver="S_syn",
                message_type="share",
                payload=None,
                size=777,
                status="rejected:DecodeError",
            )
        )
        assert store.state == "open"
    assert seqs == [0, 1, 2, 3, 4]
    with TranscriptStore.open(path) as store:
        assert store.header == header
        assert store.state == "complete"
        assert not store.writable
        got = list(store.entries())
        assert [e.seq for e in got] == seqs
        assert [e.payload for e in got[:4]] == payloads
        assert [e.size for e in got] == [0, 1, 32, 4096, 777]
        assert got[4].payload_recorded is False and got[4].payload == b""
        assert got[4].status == "rejected:DecodeError"
        assert len(store) == 5 and store.integrity_errors() == []
    # A closed transcript is one self-contained file: no WAL side files remain.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.sqlite"]


def test_record_many_assigns_seq_in_order_across_batches(tmp_path: Path) -> None:
    store = TranscriptStore.create(tmp_path / "t.sqlite", _header(), batch_size=7)
    first = store.record_many(_row(i) for i in range(20))
    middle = store.record(
        view="S_tag",
        phase="phase1",
        sender="user",
        receiver="S_tag",
        message_type="blinded",
        payload=b"m",
    )
    last = store.record_many([_row(i) for i in range(20, 23)])
    assert first == range(0, 20) and middle == 20 and last == range(21, 24)
    # The first call filled the buffer past batch_size, so its 20 entries are committed even
    # before flush/close; the 4 entries buffered after it are not visible yet.
    reader = TranscriptStore.open(tmp_path / "t.sqlite")
    assert reader.count() == 20
    reader.close()
    store.close()
    with TranscriptStore.open(tmp_path / "t.sqlite") as store:
        got = list(store.entries())
    assert [e.seq for e in got] == list(range(24))
    expected = [_row(i)[5] for i in range(20)] + [b"m"] + [_row(i)[5] for i in range(20, 23)]
    assert [e.payload for e in got] == expected


def test_record_many_is_all_or_nothing(tmp_path: Path) -> None:
    with TranscriptStore.create(tmp_path / "t.sqlite", _header()) as store:
        store.record_many([_row(0)])
        bad_rows = [
            [_row(1), ("S_syn", "phase1", "proxy", "S_syn", "tag", b"x")],  # 6-tuple
            [_row(1), ("S_syn", "phase1", "proxy", "S_syn", "bad type", b"x", "accepted")],
            [_row(1), ("S_syn", "phase1", "proxy", "S_syn", "tag", "str", "accepted")],
            [_row(1), ("S_syn", "phase1", "proxy", "S_syn", "tag", b"x", "dropped")],
        ]
        for rows in bad_rows:
            with pytest.raises(InvalidParameterError):
                store.record_many(rows)
        assert store.next_seq == 1 and store.count() == 1
        # bytearray / memoryview payloads are accepted and stored as bytes.
        store.record_many(
            [
                ("S_syn", "p", "a", "b", "t", bytearray(b"ab"), "accepted"),
                ("S_syn", "p", "a", "b", "t", memoryview(b"cd"), "accepted"),
            ]
        )
        assert [e.payload for e in store.entries()][1:] == [b"ab", b"cd"]


def test_filters_counts_and_summary(tmp_path: Path) -> None:
    with TranscriptStore.create(tmp_path / "t.sqlite", _header()) as store:
        store.record_many(
            [
                ("S_tag", "phase1", "proxy", "S_tag", "blinded", b"a" * 32, "accepted"),
                ("proxy", "phase1", "user", "S_tag", "blinded", b"a" * 32, "accepted"),
                ("S_tag", "phase1", "proxy", "S_tag", "blinded", b"b" * 31, "rejected:DecodeError"),
                ("S_syn", "phase1", "proxy", "S_syn", "tag", b"c" * 64, "accepted"),
                (
                    "S_syn",
                    "phase2",
                    "proxy",
                    "S_syn",
                    "share",
                    b"d" * 100,
                    "rejected:ProtocolStateError",
                ),
                ("S_syn", "phase2", "proxy", "S_syn", "share", b"e" * 100, "accepted"),
            ]
        )
        assert [e.seq for e in store.entries(view="S_tag")] == [0, 2]
        assert [e.seq for e in store.entries(view=["S_tag", "proxy"])] == [0, 1, 2]
        assert [e.seq for e in store.entries(phase="phase2")] == [4, 5]
        assert [e.seq for e in store.entries(message_type="share", status="accepted")] == [5]
        assert [e.seq for e in store.entries(status="rejected")] == [2, 4]
        assert [e.seq for e in store.entries(status=["rejected:DecodeError"])] == [2]
        assert [e.seq for e in store.entries(sender="user")] == [1]
        assert list(store.entries(view=[])) == []
        assert [e.seq for e in store.entries(page=2)] == list(range(6))  # paging
        assert store.count(view="S_syn") == 3
        assert store.count(status="rejected") == 2
        assert store.total_bytes(view="S_syn") == 264
        assert store.total_bytes(view="nobody") == 0
        assert store.views() == ["S_syn", "S_tag", "proxy"]
        assert view_summary(store) == {
            "S_syn": {"share": {"count": 2, "bytes": 200}, "tag": {"count": 1, "bytes": 64}},
            "S_tag": {"blinded": {"count": 2, "bytes": 63}},
            "proxy": {"blinded": {"count": 1, "bytes": 32}},
        }
        by_status = store.summary(by=("view", "status"))
        assert by_status["S_syn"]["rejected:ProtocolStateError"] == {"count": 1, "bytes": 100}
        with pytest.raises(InvalidParameterError):
            store.summary(by=("payload",))


# ----------------------------------------------------------------------------- artifacts


def test_artifacts_bytes_json_and_replace(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    with TranscriptStore.create(path, _header()) as store:
        store.put_artifact("release/centroids", b"\x00\x01\x02")
        store.put_artifact("ledger", {"epsilon": math.inf, "terms": [{"name": "x", "delta": 1e-7}]})
        store.put_artifact("release/buckets", [{"id": "ab", "count": 120}])
        with pytest.raises(ProtocolStateError, match="already recorded"):
            store.put_artifact("ledger", {})
        store.put_artifact("ledger", {"epsilon": 8.0}, replace=True)
        with pytest.raises(InvalidParameterError, match="JSON-safe"):
            store.put_artifact("bad", {"x": object()})  # type: ignore[dict-item]
        with pytest.raises(InvalidParameterError, match="artifact name"):
            store.put_artifact("../escape", b"")
    with TranscriptStore.open(path) as store:
        assert store.get_artifact("release/centroids") == b"\x00\x01\x02"
        assert store.get_artifact("ledger") == {"epsilon": 8.0}
        assert store.get_artifact("release/buckets") == [{"id": "ab", "count": 120}]
        assert [a.name for a in store.artifacts()] == [
            "ledger",
            "release/buckets",
            "release/centroids",
        ]
        assert store.has_artifact("ledger") and not store.has_artifact("nope")
        with pytest.raises(InvalidParameterError, match="not in this transcript"):
            store.get_artifact("nope")
        with pytest.raises(ProtocolStateError, match="read-only"):
            store.put_artifact("late", b"")


def test_secret_artifacts_only_in_seeded_mode(tmp_path: Path) -> None:
    with TranscriptStore.create(tmp_path / "crypto.sqlite", _header("crypto")) as store:
        with pytest.raises(ProtocolStateError, match="seeded"):
            store.put_artifact("keys/s_tag", b"k" * 32, secret=True)
        # A secret-looking name must be declared secret, so it cannot slip in unmarked.
        with pytest.raises(InvalidParameterError, match="secret=True"):
            store.put_artifact("secret/blinds", b"b" * 32)
        assert store.artifacts() == []
    with TranscriptStore.create(tmp_path / "seeded.sqlite", _header("seeded")) as store:
        store.put_artifact("secret/blinds", b"b" * 32, secret=True)
        (info,) = store.artifacts()
        assert info.secret and info.kind == "bytes" and info.size == 32
        assert store.get_artifact("secret/blinds") == b"b" * 32


# ----------------------------------------------------------------------------- lifecycle


def test_create_refuses_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    TranscriptStore.create(path, _header(run_id="first")).close()
    with pytest.raises(InvalidParameterError, match="already exists"):
        TranscriptStore.create(path, _header(run_id="second"))
    assert TranscriptStore.open(path).header.run_id == "first"
    TranscriptStore.create(path, _header(run_id="second"), overwrite=True).close()
    assert TranscriptStore.open(path).header.run_id == "second"
    with pytest.raises(InvalidParameterError, match="batch_size"):
        TranscriptStore.create(tmp_path / "u.sqlite", _header(), batch_size=0)
    with pytest.raises(InvalidParameterError, match="synchronous"):
        TranscriptStore.create(tmp_path / "u.sqlite", _header(), synchronous="OFF")


def test_read_only_append_and_closed(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    with TranscriptStore.create(path, _header()) as store:
        store.record_many(_row(i) for i in range(3))
    reader = TranscriptStore.open(path)
    with pytest.raises(ProtocolStateError, match="read-only"):
        reader.record_many([_row(9)])
    reader.close()
    reader.close()  # idempotent
    with pytest.raises(ProtocolStateError, match="closed"):
        reader.count()
    with TranscriptStore.open(path, append=True) as store:
        assert store.state == "open"
        assert store.record_many([_row(3)]) == range(3, 4)
    with TranscriptStore.open(path) as store:
        assert [e.seq for e in store] == [0, 1, 2, 3]
        assert store.state == "complete"


def test_close_while_a_reader_is_open(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    writer = TranscriptStore.create(path, _header())
    writer.record_many(_row(i) for i in range(4))
    writer.flush()
    with TranscriptStore.open(path) as reader:
        assert reader.count() == 4
        writer.close()  # cannot leave WAL mode while the reader holds the file: still fine
        assert reader.state == "complete" and reader.count() == 4
    with TranscriptStore.open(path) as again:
        assert [e.seq for e in again] == [0, 1, 2, 3] and again.integrity_errors() == []


def test_exception_in_with_block_keeps_entries_and_marks_aborted(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    with pytest.raises(RuntimeError), TranscriptStore.create(path, _header()) as store:
        store.record_many(_row(i) for i in range(5))
        raise RuntimeError("boom")
    with TranscriptStore.open(path) as store:
        assert store.count() == 5
        assert store.state == "aborted:RuntimeError"


def test_record_from_several_threads(tmp_path: Path) -> None:
    import threading

    store = TranscriptStore.create(tmp_path / "t.sqlite", _header(), batch_size=50)

    def work(k: int) -> None:
        for i in range(200):
            store.record_many([_row(1000 * k + i)])

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store.close()
    with TranscriptStore.open(tmp_path / "t.sqlite") as reader:
        got = list(reader)
    assert [e.seq for e in got] == list(range(800))
    assert sorted(int.from_bytes(e.payload[:8], "big") for e in got) == sorted(
        1000 * k + i for k in range(4) for i in range(200)
    )


# ----------------------------------------------------------------------------- foreign files


def test_open_rejects_foreign_and_corrupt_files(tmp_path: Path) -> None:
    missing = tmp_path / "missing.sqlite"
    with pytest.raises(InvalidInputError, match="does not exist"):
        TranscriptStore.open(missing)

    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    text = tmp_path / "notes.sqlite"
    text.write_text("just some text\n" * 20)
    for path in (empty, text):
        with pytest.raises(DecodeError, match="not an SQLite database"):
            TranscriptStore.open(path)

    other = tmp_path / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    with pytest.raises(DecodeError, match="application_id"):
        TranscriptStore.open(other)

    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"SQLite format 3\x00" + RandomSource.seeded(3, "g").random_bytes(8192))
    with pytest.raises(DecodeError):
        TranscriptStore.open(garbage)


def test_open_rejects_newer_schema_and_bad_header(tmp_path: Path) -> None:
    newer = tmp_path / "newer.sqlite"
    TranscriptStore.create(newer, _header()).close()
    conn = sqlite3.connect(newer)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(DecodeError, match=f"schema {SCHEMA_VERSION + 1}.*upgrade"):
        TranscriptStore.open(newer)

    bad = tmp_path / "bad_header.sqlite"
    TranscriptStore.create(bad, _header()).close()
    conn = sqlite3.connect(bad)
    conn.execute("UPDATE meta SET value = '{\"run_id\": 1}' WHERE key = 'header'")
    conn.commit()
    conn.close()
    with pytest.raises(DecodeError, match="bad header"):
        TranscriptStore.open(bad)

    assert APPLICATION_ID == int.from_bytes(b"FRE2", "big")


# ----------------------------------------------------------------------------- crash safety

_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from transcripts import TranscriptHeader, TranscriptStore

    path, batch, kill_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    store = TranscriptStore.create(path, TranscriptHeader(rng_mode="crypto", run_id="crash"),
                                   batch_size=10**9)

    def die_inside_transaction():
        if store._conn.in_transaction:
            os.kill(os.getpid(), signal.SIGKILL)
        return 0

    for b in range(10**6):
        rows = [("S_syn", "phase2", "proxy", "S_syn", "share",
                 (b * batch + i).to_bytes(8, "big") * 12, "accepted") for i in range(batch)]
        store.record_many(rows)
        if b == kill_at:
            # SQLite calls this every 100 VM steps: the kill lands mid-INSERT, before COMMIT.
            store._conn.set_progress_handler(die_inside_transaction, 100)
        store.flush()
        print(b, flush=True)
    """
)


def _child(path: Path, batch: int, kill_at: int) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(path), str(batch), str(kill_at)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )


def _check_prefix(path: Path, batch: int) -> int:
    with TranscriptStore.open(path) as store:
        assert store.integrity_errors() == []
        assert store.state == "open"  # the writer never closed it
        seqs = [e.seq for e in store]
        n = len(seqs)
        assert n % batch == 0, f"{n} entries is not a whole number of {batch}-entry batches"
        assert seqs == list(range(n))
        for e in store.entries():
            assert e.payload == e.seq.to_bytes(8, "big") * 12
    return n


def test_sigkill_inside_a_transaction_leaves_exactly_the_committed_batches(tmp_path: Path) -> None:
    path = tmp_path / "crash.sqlite"
    proc = _child(path, batch=500, kill_at=3)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL, err
    assert out.split() == ["0", "1", "2"]  # batches 0..2 committed, batch 3 died mid-INSERT
    assert _check_prefix(path, 500) == 1500


def test_sigkill_at_an_arbitrary_moment_leaves_a_prefix_of_batches(tmp_path: Path) -> None:
    path = tmp_path / "crash.sqlite"
    proc = _child(path, batch=300, kill_at=-1)  # never self-kills
    assert proc.stdout is not None
    for _ in range(5):  # let a few batches commit, then kill from outside at once
        assert proc.stdout.readline().strip()
    time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert _check_prefix(path, 300) >= 5 * 300


# ----------------------------------------------------------------------------- per-party copies


def test_extract_views_copies_one_party_and_no_secrets(tmp_path: Path) -> None:
    from transcripts.redaction import extract_views

    src = TranscriptStore.create(tmp_path / "full.sqlite", _header("seeded"), batch_size=3)
    src.record_many(_row(i, view=("S_tag", "S_syn", "proxy")[i % 3]) for i in range(12))
    src.put_artifact("release", {"buckets": []})
    src.put_artifact("secret/keys", b"k", secret=True)
    src.close()
    with TranscriptStore.open(tmp_path / "full.sqlite") as full:
        with extract_views(
            full, tmp_path / "syn.sqlite", views="S_syn", artifacts=["release"]
        ) as syn:
            assert [e.seq for e in syn] == [1, 4, 7, 10]  # seq kept for cross-reference
            assert list(syn.entries()) == list(full.entries(view="S_syn"))
            assert [a.name for a in syn.artifacts()] == ["release"]
            assert syn.header.extra["extracted_from"] == full.header.run_id
        with extract_views(
            full, tmp_path / "vol.sqlite", views=["S_tag", "proxy"], size_only=True
        ) as vol:
            got = list(vol)
            assert [e.seq for e in got] == [0, 2, 3, 5, 6, 8, 9, 11]
            assert all(not e.payload_recorded and e.size == 32 for e in got)
            assert view_summary(vol) == {
                "S_tag": {"tag": {"count": 4, "bytes": 128}},
                "proxy": {"tag": {"count": 4, "bytes": 128}},
            }
        with pytest.raises(InvalidParameterError, match="never copied"):
            extract_views(full, tmp_path / "x.sqlite", views="S_syn", artifacts=["secret/keys"])
        with pytest.raises(InvalidParameterError, match="not in the source"):
            extract_views(full, tmp_path / "y.sqlite", views="S_syn", artifacts=["nope"])


def test_unclosed_store_with_buffered_entries_warns(tmp_path: Path) -> None:
    import gc

    store = TranscriptStore.create(tmp_path / "t.sqlite", _header())
    store.record_many([_row(0)])
    with pytest.warns(ResourceWarning, match="1 buffered entries were not committed"):
        del store
        gc.collect()
