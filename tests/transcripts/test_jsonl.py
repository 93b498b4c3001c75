"""JSONL export/import of transcripts (design §6.7): round trips, layout, and malformed input."""

from __future__ import annotations

import gzip
import json
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from primitives.errors import DecodeError, InvalidParameterError
from transcripts import TranscriptHeader, TranscriptStore, export_jsonl, import_jsonl
from transcripts.jsonl import iter_jsonl

NAMES = st.sampled_from(["user", "S_tag", "S_syn", "proxy", "dummy_user"])
TYPES = st.sampled_from(["blinded", "evaluated", "tag", "share", "aggregate", "broadcast"])
PHASES = st.sampled_from(["phase1", "phase2", "setup"])
STATUSES = st.sampled_from(["accepted", "rejected:DecodeError", "rejected:VerificationError"])
ROWS = st.tuples(NAMES, PHASES, NAMES, NAMES, TYPES, st.binary(max_size=80), STATUSES)
JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.text(max_size=12)
    | st.floats(allow_nan=False, allow_infinity=False)
)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
ARTIFACT_NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,8}(/[a-z0-9][a-z0-9_.]{0,8})?", fullmatch=True)


def _header(rng_mode: str = "seeded") -> TranscriptHeader:
    return TranscriptHeader(
        rng_mode=rng_mode,
        run_id="jsonl-run",
        components={"oprf": "ristretto255-SHA512"},
        params={"epsilon": math.inf, "delta": 1e-6},
        extra={"seeds": {"public_seed": "00" * 32}},
    )


def _snapshot(store: TranscriptStore) -> tuple[Any, ...]:
    artifacts = [(a.name, a.kind, a.secret, store.get_artifact(a.name)) for a in store.artifacts()]
    return store.header, store.state, list(store.entries()), artifacts


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(ROWS, max_size=25),
    size_only=st.lists(st.integers(0, 10_000), max_size=3),
    artifacts=st.dictionaries(
        ARTIFACT_NAMES,
        st.tuples(
            st.binary(max_size=40)
            | st.dictionaries(st.text(max_size=6), JSON_VALUES, max_size=4)
            | st.lists(JSON_VALUES, max_size=4),
            st.booleans(),
        ),
        max_size=4,
    ),
    gz=st.booleans(),
    aborted=st.booleans(),
)
def test_jsonl_round_trip(
    rows: list[tuple[str, str, str, str, str, bytes, str]],
    size_only: list[int],
    artifacts: dict[str, tuple[Any, bool]],
    gz: bool,
    aborted: bool,
) -> None:
    """export → import gives back the same header, state, entries (seq, payloads, size-only
    records) and artifacts (bytes, JSON, secret flags)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src.sqlite"
        store = TranscriptStore.create(src, _header("seeded"), batch_size=8)
        store.record_many(rows)
        for size in size_only:
            store.record(
                view="proxy",
                phase="phase2",
                sender="user",
                receiver="S_syn",
                message_type="share",
                payload=None,
                size=size,
            )
        for name, (data, secret) in artifacts.items():
            if name.split("/")[0] in ("secret", "secrets"):
                secret = True
            store.put_artifact(name, data, secret=secret)
        store._finish("aborted:RuntimeError" if aborted else "complete")
        out = Path(tmp) / ("t.jsonl.gz" if gz else "t.jsonl")
        with TranscriptStore.open(src) as original:
            original.export_jsonl(out)
            expected = _snapshot(original)
        with import_jsonl(out, Path(tmp) / "copy.sqlite") as copy:
            assert _snapshot(copy) == expected
        # Exporting the copy again gives the identical file: the encoding is canonical.
        with TranscriptStore.open(Path(tmp) / "copy.sqlite") as copy:
            again = Path(tmp) / ("u.jsonl.gz" if gz else "u.jsonl")
            copy.export_jsonl(again)
        opener = gzip.open if gz else open
        with opener(out, "rb") as a, opener(again, "rb") as b:
            assert a.read() == b.read()


def _small_store(tmp_path: Path, rng_mode: str = "seeded") -> TranscriptStore:
    store = TranscriptStore.create(tmp_path / "src.sqlite", _header(rng_mode))
    store.record_many(
        [
            ("S_tag", "phase1", "proxy", "S_tag", "blinded", b"\x00\xff" * 16, "accepted"),
            ("S_syn", "phase1", "proxy", "S_syn", "tag", b"\x01" * 64, "rejected:DecodeError"),
        ]
    )
    store.record(
        view="proxy",
        phase="phase2",
        sender="user",
        receiver="S_syn",
        message_type="share",
        payload=None,
        size=4096,
    )
    store.put_artifact("release", {"buckets": [{"id": "ab", "count": 101}], "eps": math.inf})
    if rng_mode == "seeded":
        store.put_artifact("secret/key", b"\x07" * 32, secret=True)
    store.close()
    return TranscriptStore.open(tmp_path / "src.sqlite")


def test_jsonl_layout(tmp_path: Path) -> None:
    store = _small_store(tmp_path)
    out = tmp_path / "t.jsonl"
    export_jsonl(store, out)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["kind"] for line in lines] == [
        "header",
        "entry",
        "entry",
        "entry",
        "artifact",
        "artifact",
        "end",
    ]
    head = lines[0]
    assert head["format"] == "fre-e2t-transcript" and head["state"] == "complete"
    assert head["header"]["params"]["epsilon"] == "inf"
    assert lines[1] == {
        "kind": "entry",
        "seq": 0,
        "view": "S_tag",
        "phase": "phase1",
        "sender": "proxy",
        "receiver": "S_tag",
        "message_type": "blinded",
        "status": "accepted",
        "size": 32,
        "payload": "00ff" * 16,
    }
    assert lines[3]["payload"] is None and lines[3]["size"] == 4096
    assert lines[4] == {
        "kind": "artifact",
        "name": "release",
        "secret": False,
        "encoding": "json",
        "data": {"buckets": [{"count": 101, "id": "ab"}], "eps": "inf"},
    }
    assert lines[5]["encoding"] == "hex" and lines[5]["secret"] is True
    assert lines[6] == {"kind": "end", "entries": 3, "artifacts": 2}
    # Without secrets the secret artifact is left out and the end line says so.
    export_jsonl(store, out, include_secrets=False)
    kinds = [json.loads(line) for line in out.read_text().splitlines()]
    assert [k["name"] for k in kinds if k["kind"] == "artifact"] == ["release"]
    assert kinds[-1] == {"kind": "end", "entries": 3, "artifacts": 1}
    # No temporary files are left beside the export.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.sqlite", "t.jsonl"]


def _lines(tmp_path: Path) -> list[str]:
    store = _small_store(tmp_path)
    out = tmp_path / "t.jsonl"
    store.export_jsonl(out)
    return out.read_text().splitlines(keepends=True)


def _write(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(lines))
    return path


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda ls: ls[:-1], "truncated"),
        (lambda ls: ls[:3], "truncated"),
        (lambda ls: ls[1:], "header line first"),
        (lambda ls: [ls[0], "{not json\n", *ls[1:]], "line 2: not JSON"),
        (lambda ls: [ls[0], ls[2], ls[1], *ls[3:]], "does not increase"),
        (lambda ls: [ls[0], ls[4], ls[1], *ls[2:4], *ls[5:]], "unexpected 'entry'"),
        (
            lambda ls: [*ls[:-1], '{"kind": "end", "entries": 9, "artifacts": 2}\n'],
            "does not match",
        ),
        (lambda ls: [*ls, ls[-1]], "unexpected 'end'"),
        (
            lambda ls: [ls[0], ls[1].replace('"payload":"00ff', '"payload":"zzff'), *ls[2:]],
            "not valid hex",
        ),
        (lambda ls: [ls[0], ls[1].replace('"size":32', '"size":31'), *ls[2:]], "size must equal"),
        (lambda ls: [ls[0], ls[1].replace('"view":"S_tag"', '"view":"S tag"'), *ls[2:]], "view"),
        (
            lambda ls: [ls[0].replace('"schema_version":1', '"schema_version":99'), *ls[1:]],
            "schema_version 99",
        ),
        (lambda ls: [ls[0], "\n", *ls[1:]], "empty line"),
    ],
)
def test_import_rejects_malformed_jsonl(tmp_path: Path, mutate: Any, message: str) -> None:
    bad = _write(tmp_path, mutate(_lines(tmp_path)))
    dest = tmp_path / "dest.sqlite"
    with pytest.raises(DecodeError, match=message):
        import_jsonl(bad, dest)
    assert not dest.exists()
    assert not any(p.name.endswith(".partial") for p in tmp_path.iterdir())


def test_import_refuses_secret_under_crypto_header(tmp_path: Path) -> None:
    lines = _lines(tmp_path)
    lines[0] = lines[0].replace('"rng_mode":"seeded"', '"rng_mode":"crypto"')
    bad = _write(tmp_path, lines)
    with pytest.raises(DecodeError, match="seeded"):
        import_jsonl(bad, tmp_path / "dest.sqlite")
    assert not (tmp_path / "dest.sqlite").exists()


def test_import_refuses_existing_destination(tmp_path: Path) -> None:
    store = _small_store(tmp_path, rng_mode="crypto")
    out = tmp_path / "t.jsonl"
    store.export_jsonl(out)
    with pytest.raises(InvalidParameterError, match="already exists"):
        import_jsonl(out, tmp_path / "src.sqlite")
    copy = import_jsonl(out, tmp_path / "src.sqlite", overwrite=True)
    assert copy.count() == 3 and copy.get_artifact("release")["eps"] == "inf"
    copy.close()


def test_iter_jsonl_streams_records(tmp_path: Path) -> None:
    store = _small_store(tmp_path)
    out = tmp_path / "t.jsonl"
    store.export_jsonl(out)
    records = list(iter_jsonl(out))
    assert type(records[0]).__name__ == "JsonlHead"
    assert records[1:4] == list(store.entries())
    assert [r.name for r in records[4:]] == ["release", "secret/key"]  # type: ignore[union-attr]
    with pytest.raises(DecodeError, match="does not exist"):
        list(iter_jsonl(tmp_path / "none.jsonl"))


# -- known answers: iter_jsonl's errors, word for word ----------------------------------------------
ITER_JSONL_ERRORS: list[tuple[str, Any]] = [
    ("no_header", lambda ls: ls[1:]),
    ("not_object", lambda ls: [ls[0], "[1, 2]\n", *ls[1:]]),
    ("bad_json", lambda ls: [ls[0], "{not json\n", *ls[1:]]),
    ("empty", lambda ls: [ls[0], "  \n", *ls[1:]]),
    ("state", lambda ls: [ls[0].replace('"state":"complete"', '"state":3'), *ls[1:]]),
    ("schema", lambda ls: [ls[0].replace('"schema_version":1', '"schema_version":0'), *ls[1:]]),
    ("header", lambda ls: [ls[0].replace('"rng_mode":"seeded"', '"rng_mode":"x"'), *ls[1:]]),
    ("second_header", lambda ls: [ls[0], ls[0], *ls[1:]]),
    ("entry_keys", lambda ls: [ls[0], ls[1].replace('"size":32,', ""), *ls[2:]]),
    (
        "payload_int",
        lambda ls: [
            ls[0],
            ls[1].replace('"payload":"' + "00ff" * 16 + '"', '"payload":7'),
            *ls[2:],
        ],
    ),
    ("entry_view", lambda ls: [ls[0], ls[1].replace('"view":"S_tag"', '"view":"S tag"'), *ls[2:]]),
    ("seq", lambda ls: [ls[0], ls[2], ls[1], *ls[3:]]),
    ("entry_after_artifact", lambda ls: [ls[0], ls[4], ls[1], *ls[2:4], *ls[5:]]),
    ("artifact_keys", lambda ls: [*ls[:4], ls[4].replace(',"secret":false', ""), *ls[5:]]),
    (
        "artifact_secret",
        lambda ls: [*ls[:4], ls[4].replace('"secret":false', '"secret":0'), *ls[5:]],
    ),
    (
        "artifact_encoding",
        lambda ls: [*ls[:4], ls[4].replace('"encoding":"json"', '"encoding":"b64"'), *ls[5:]],
    ),
    (
        "artifact_scalar",
        lambda ls: [
            *ls[:4],
            '{"data":5,"encoding":"json","kind":"artifact","name":"n","secret":false}\n',
            *ls[5:],
        ],
    ),
    ("artifact_hex", lambda ls: [*ls[:5], ls[5].replace('"data":"07', '"data":"q7'), *ls[6:]]),
    ("end_count", lambda ls: [*ls[:-1], '{"kind": "end", "entries": 3, "artifacts": 1}\n']),
    ("after_end", lambda ls: [*ls, ls[1]]),
    ("end_first", lambda ls: [ls[0], ls[-1]]),
    ("truncated", lambda ls: ls[:5]),
    ("header_only", lambda ls: ls[:1]),
    ("empty_file", lambda ls: []),
    ("unknown_kind", lambda ls: [ls[0], '{"kind":"note"}\n', *ls[1:]]),
]

# name -> (records yielded before the error, the message with the path as {path})
ITER_JSONL_KAT: dict[str, tuple[int, str]] = {
    "no_header": (0, "{path} line 1: expected the 'fre-e2t-transcript' header line first"),
    "not_object": (1, "{path} line 2: expected a JSON object with a string 'kind'"),
    "bad_json": (
        1,
        "{path} line 2: not JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))",
    ),
    "empty": (1, "{path} line 2: empty line"),
    "state": (0, "{path} line 1: state must be a string"),
    "schema": (0, "{path} line 1: schema_version 0 is not one this fre-e2t reads (1..1)"),
    "header": (
        0,
        "{path} line 1: invalid transcript header: rng_mode must be one of ['crypto', 'seeded'], got 'x'",
    ),
    "second_header": (1, "{path} line 2: unexpected 'header' line (reading entries)"),
    "entry_keys": (
        1,
        "{path} line 2: entry keys must be ['kind', 'message_type', 'payload', 'phase', 'receiver', 'sender', 'seq', 'size', 'status', 'view']",
    ),
    "payload_int": (1, "{path} line 2: payload must be a hex string, got int"),
    "entry_view": (
        1,
        "{path} line 2: view must be an identifier (a letter, then up to 127 letters, digits or '_.:-'), got 'S tag'",
    ),
    "seq": (2, "{path} line 3: seq 0 does not increase (after 1)"),
    "entry_after_artifact": (2, "{path} line 3: unexpected 'entry' line (reading artifacts)"),
    "artifact_keys": (
        4,
        "{path} line 5: artifact keys must be ['data', 'encoding', 'kind', 'name', 'secret']",
    ),
    "artifact_secret": (4, "{path} line 5: artifact name must be a string and secret a bool"),
    "artifact_encoding": (
        4,
        "{path} line 5: artifact encoding must be 'hex' or 'json' (dict/list)",
    ),
    "artifact_scalar": (4, "{path} line 5: artifact encoding must be 'hex' or 'json' (dict/list)"),
    "artifact_hex": (5, "{path} line 6: data is not valid hex"),
    "end_count": (
        6,
        "{path} line 7: end line {'kind': 'end', 'entries': 3, 'artifacts': 1} does not match the 3 entries and 2 artifacts read",
    ),
    "after_end": (6, "{path} line 8: unexpected 'entry' line (reading end)"),
    "end_first": (
        1,
        "{path} line 2: end line {'artifacts': 2, 'entries': 3, 'kind': 'end'} does not match the 0 entries and 0 artifacts read",
    ),
    "truncated": (5, "{path} is truncated: no end line after line 5"),
    "header_only": (1, "{path} is truncated: no end line after line 1"),
    "empty_file": (0, "{path} is truncated: no end line after line 0"),
    "unknown_kind": (1, "{path} line 2: unexpected 'note' line (reading entries)"),
}


@pytest.mark.parametrize(
    ("name", "mutate"), ITER_JSONL_ERRORS, ids=[n for n, _ in ITER_JSONL_ERRORS]
)
def test_iter_jsonl_errors_known_answers(tmp_path: Path, name: str, mutate: Any) -> None:
    """Each malformed file fails on the recorded line with the recorded message, after yielding
    the recorded number of records (the reader streams)."""
    bad = _write(tmp_path, mutate(_lines(tmp_path)))
    records: list[object] = []
    with pytest.raises(DecodeError) as caught:
        for record in iter_jsonl(bad):
            records.append(record)
    assert (len(records), str(caught.value).replace(repr(str(bad)), "{path}")) == ITER_JSONL_KAT[
        name
    ]


def test_iter_jsonl_unreadable_bytes_name_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\xff\xfe\n")
    with pytest.raises(DecodeError) as caught:
        list(iter_jsonl(bad))
    assert str(caught.value) == (
        f"{str(bad)!r} line 1: unreadable ('utf-8' codec can't decode byte 0xff in position 0: "
        "invalid start byte)"
    )
    gz = tmp_path / "bad.jsonl.gz"
    gz.write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(DecodeError) as caught:
        list(iter_jsonl(gz))
    assert str(caught.value) == (
        f"{str(gz)!r} line 1: unreadable (Compressed file ended before the end-of-stream marker "
        "was reached)"
    )
