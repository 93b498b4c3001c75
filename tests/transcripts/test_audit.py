"""Generic audit checks (design §6.7): each passes on clean data and fails on planted violations."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from primitives.errors import InvalidParameterError
from primitives.randomness import RandomSource
from transcripts import (
    AuditFinding,
    AuditReport,
    TranscriptHeader,
    TranscriptStore,
    check_float_vectors,
    check_integrity,
    check_message_types,
    check_no_forbidden_content,
    view_summary,
)
from transcripts.audit import find_forbidden_in

DIM = 64


def _unit_vectors(n: int, dim: int, label: str) -> np.ndarray:
    x = RandomSource.seeded(11, label).normal((n, dim))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _store(tmp_path: Path, name: str = "t.sqlite") -> TranscriptStore:
    return TranscriptStore.create(
        tmp_path / name, TranscriptHeader(rng_mode="crypto", run_id="audit")
    )


def _clean(tmp_path: Path, n: int = 300) -> TranscriptStore:
    """A transcript of random (ciphertext-like) payloads of mixed sizes in three views."""
    rng = RandomSource.seeded(5, "clean")
    sizes = rng.integers_below(600, n) + 1
    store = _store(tmp_path)
    views = ["S_tag", "S_syn", "proxy"]
    store.record_many(
        (
            views[i % 3],
            "phase2",
            "proxy",
            views[i % 3],
            "share",
            rng.random_bytes(int(sizes[i])),
            "accepted",
        )
        for i in range(n)
    )
    return store


# ----------------------------------------------------------------------------- forbidden bytes


def _naive(payloads: list[bytes], forbidden: dict[str, list[bytes]]) -> list[tuple[int, str, int]]:
    out = []
    for i, p in enumerate(payloads):
        for label, needles in forbidden.items():
            for needle in set(needles):
                start = p.find(needle)
                while start != -1:
                    out.append((i, label, start))
                    start = p.find(needle, start + 1)
    return sorted(out)


@settings(max_examples=60, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=64), min_size=1, max_size=12),
    picks=st.lists(
        st.tuples(
            st.integers(0, 11), st.integers(0, 63), st.integers(4, 12), st.sampled_from("ab")
        ),
        max_size=6,
    ),
    extra=st.lists(st.binary(min_size=4, max_size=9), max_size=4),
)
def test_scanner_agrees_with_naive_search(
    payloads: list[bytes], picks: list[tuple[int, int, int, str]], extra: list[bytes]
) -> None:
    """Property: the vectorised rolling-hash scanner reports exactly the (payload, label, offset)
    triples a naive ``bytes.find`` loop reports — including needles that would only occur by
    straddling two adjacent payloads, which must NOT be reported."""
    forbidden: dict[str, list[bytes]] = {"a": [], "b": list(extra)}
    for index, start, length, label in picks:
        p = payloads[index % len(payloads)]
        needle = p[start : start + length]
        if len(needle) >= 4:
            forbidden[label].append(needle)
    if len(payloads) >= 2 and len(payloads[0]) >= 2 and len(payloads[1]) >= 2:
        forbidden["a"].append(payloads[0][-2:] + payloads[1][:2])  # straddles a boundary
    assert sorted(find_forbidden_in(payloads, forbidden)) == _naive(payloads, forbidden)


def test_forbidden_content_passes_on_clean_views(tmp_path: Path) -> None:
    store = _clean(tmp_path)
    rng = RandomSource.seeded(9, "needles")
    forbidden = {
        "bucket_index": [rng.random_bytes(160) for _ in range(50)],
        "user_id": [rng.random_bytes(8) for _ in range(2000)],
    }
    findings = check_no_forbidden_content(store, views=["S_tag", "S_syn"], forbidden=forbidden)
    assert [f.name for f in findings] == ["no_forbidden:bucket_index", "no_forbidden:user_id"]
    assert all(f.passed for f in findings), [f.detail for f in findings]
    assert findings[1].data["needles"] == 2000
    assert findings[1].data["entries_scanned"] == 200  # only the two selected views


def test_forbidden_content_fails_on_planted_bytes(tmp_path: Path) -> None:
    store = _clean(tmp_path)
    emb = _unit_vectors(3, DIM, "planted").astype(np.float32)
    user_id = b"user-000042"
    store.record(
        view="S_syn",
        phase="phase2",
        sender="proxy",
        receiver="S_syn",
        message_type="share",
        payload=b"\x00" * 13 + emb[1].tobytes() + b"\x01",
    )
    store.record(
        view="S_tag",
        phase="phase1",
        sender="proxy",
        receiver="S_tag",
        message_type="blinded",
        payload=user_id,
    )  # the whole payload
    store.record(
        view="proxy",
        phase="phase1",
        sender="user",
        receiver="S_tag",
        message_type="blinded",
        payload=user_id,
    )  # a view that is not scanned
    forbidden = {
        "raw_embedding": [e.tobytes() for e in emb],
        "user_id": [user_id],
        "other": [b"nothing here"],
    }
    findings = {
        f.name: f
        for f in check_no_forbidden_content(
            store, views=["S_tag", "S_syn"], forbidden=forbidden, chunk_bytes=4096
        )
    }
    emb_f = findings["no_forbidden:raw_embedding"]
    assert not emb_f.passed and "FOUND 1" in emb_f.detail
    assert emb_f.data["examples"] == [
        {
            "seq": 300,
            "view": "S_syn",
            "message_type": "share",
            "label": "raw_embedding",
            "offset": 13,
            "length": DIM * 4,
        }
    ]
    uid = findings["no_forbidden:user_id"]
    assert not uid.passed and uid.data["examples"][0]["seq"] == 301 and uid.data["entries_hit"] == 1
    assert findings["no_forbidden:other"].passed
    # The same needle in the proxy's view is found once the proxy is scanned.
    proxy = check_no_forbidden_content(store, views="proxy", forbidden={"user_id": [user_id]})
    assert not proxy[0].passed and proxy[0].data["examples"][0]["seq"] == 302


def test_forbidden_content_counts_size_only_entries_as_unscanned(tmp_path: Path) -> None:
    store = _clean(tmp_path, n=30)
    store.record(
        view="S_syn",
        phase="phase2",
        sender="proxy",
        receiver="S_syn",
        message_type="share",
        payload=None,
        size=4096,
    )
    forbidden = {"x": [b"\xff" * 40]}
    (strict,) = check_no_forbidden_content(store, views=["S_syn"], forbidden=forbidden)
    assert not strict.passed and "1 size-only entries were not scanned" in strict.detail
    (lenient,) = check_no_forbidden_content(
        store, views=["S_syn"], forbidden=forbidden, allow_unscanned=True
    )
    assert lenient.passed


def test_forbidden_content_rejects_bad_arguments(tmp_path: Path) -> None:
    store = _clean(tmp_path, n=3)
    with pytest.raises(InvalidParameterError, match="min_length"):
        check_no_forbidden_content(store, views=["S_syn"], forbidden={"short": [b"ab"]})
    with pytest.raises(InvalidParameterError, match="byte strings"):
        check_no_forbidden_content(store, views=["S_syn"], forbidden={"s": ["text"]})  # type: ignore[list-item]
    with pytest.raises(InvalidParameterError, match="views"):
        check_no_forbidden_content(store, views=[], forbidden={"s": [b"abcd"]})


# ----------------------------------------------------------------------------- float vectors


def test_float_vectors_pass_on_random_payloads(tmp_path: Path) -> None:
    """Random bytes: each float32 lands in [-1, 1] with probability ~1/2, so a false alarm needs
    ~64 lucky values in a row and a unit norm: probability far below 2^-60 per window."""
    store = _clean(tmp_path)
    rng = RandomSource.seeded(6, "big")
    store.record_many(
        ("S_syn", "phase2", "proxy", "S_syn", "share", rng.random_bytes(4096), "accepted")
        for _ in range(20)
    )
    (finding,) = check_float_vectors(store, views=["S_tag", "S_syn", "proxy"], dim=DIM)
    assert finding.passed, finding.detail
    assert finding.data["entries_scanned"] == 320


@pytest.mark.parametrize(
    ("dtype", "offset"),
    [("<f4", 0), ("<f4", 3), (">f4", 6), ("<f8", 5), (">f8", 8), ("<f2", 1)],
)
def test_float_vectors_find_planted_embedding(tmp_path: Path, dtype: str, offset: int) -> None:
    store = _clean(tmp_path, n=30)
    vec = _unit_vectors(1, DIM, "emb")[0].astype(dtype)
    pad = RandomSource.seeded(2, "pad").random_bytes(offset)
    store.record(
        view="S_tag",
        phase="phase2",
        sender="proxy",
        receiver="S_tag",
        message_type="share",
        payload=pad + vec.tobytes() + b"\xff" * 7,
    )
    (finding,) = check_float_vectors(store, views=["S_tag"], dim=DIM)
    assert not finding.passed
    hit = finding.data["examples"][0]
    assert (hit["seq"], hit["offset"], hit["dtype"]) == (30, offset, np.dtype(dtype).str)
    assert abs(hit["norm"] - 1.0) < 1e-2


def test_float_vectors_heuristic_boundaries(tmp_path: Path) -> None:
    store = _store(tmp_path)
    unit = _unit_vectors(2, DIM, "b").astype(np.float32)
    one_hot = np.zeros(DIM, dtype=np.float32)
    one_hot[5] = 1.0
    store.record_many(
        [
            # scaled by 3: not unit norm, and components may exceed max_abs = 1
            ("S_syn", "p", "a", "b", "t", (3 * unit[0]).tobytes(), "accepted"),
            # a one-hot vector has unit norm but is not plausible as an embedding
            ("S_syn", "p", "a", "b", "t", one_hot.tobytes(), "accepted"),
            # a vector split across two messages is not a vector in either
            ("S_syn", "p", "a", "b", "t", unit[1].tobytes()[:100], "accepted"),
            ("S_syn", "p", "a", "b", "t", unit[1].tobytes()[100:], "accepted"),
            # NaN inside the window
            (
                "S_syn",
                "p",
                "a",
                "b",
                "t",
                np.where(np.arange(DIM) == 9, np.nan, unit[0]).astype(np.float32).tobytes(),
                "accepted",
            ),
        ]
    )
    (default,) = check_float_vectors(store, views="S_syn", dim=DIM)
    assert default.passed, default.detail
    (scaled,) = check_float_vectors(
        store, views="S_syn", dim=DIM, norm_range=(2.9, 3.1), max_abs=3.0
    )
    assert not scaled.passed and scaled.data["examples"][0]["seq"] == 0
    (several,) = check_float_vectors(
        store,
        views="S_syn",
        dim=[DIM // 2, 50],
        dtypes=["<f4"],
        norm_range=(0.0, 10.0),
        max_abs=3.0,
    )
    assert not several.passed  # shorter windows inside the vectors do show up
    with pytest.raises(InvalidParameterError, match="dim"):
        check_float_vectors(store, views="S_syn", dim=1)
    with pytest.raises(InvalidParameterError, match="float dtypes"):
        check_float_vectors(store, views="S_syn", dim=DIM, dtypes=["<i4"])


def _planted_store(tmp_path: Path) -> TranscriptStore:
    """12 entries each holding one unit vector (several dtypes and offsets), one size-only entry
    and random payloads: more hit entries than ``max_examples``."""
    store = _clean(tmp_path, n=20)
    vecs = _unit_vectors(12, DIM, "kat")
    dtypes = ["<f4", ">f4", "<f8", "<f2"]
    for i in range(12):
        pad = RandomSource.seeded(i, "kat-pad").random_bytes(i % 5)
        store.record(
            view=["S_tag", "S_syn"][i % 2],
            phase="phase2",
            sender="proxy",
            receiver="S_tag",
            message_type=f"t{i % 3}",
            payload=pad + vecs[i].astype(dtypes[i % 4]).tobytes() + b"\x00" * 9,
        )
    store.record(
        view="S_syn",
        phase="phase2",
        sender="proxy",
        receiver="S_syn",
        message_type="share",
        payload=None,
        size=512,
    )
    return store


FLOAT_VECTORS_KAT = "6096e0536cb15a7081ffaa14f256b17e23a96a2bdcadc14fbfd523df6f484e12"


def test_float_vectors_known_answer(tmp_path: Path) -> None:
    """The whole finding (detail and data) on a fixed transcript, pinned by its digest."""
    store = _planted_store(tmp_path)
    out = []
    for kwargs in (
        {},
        {"max_examples": 3, "allow_unscanned": True, "chunk_bytes": 2048},
        {"dim": [DIM, DIM // 2], "dtypes": ["<f4", "<f8"], "norm_range": (0.0, 2.0)},
    ):
        args = {"views": ["S_tag", "S_syn", "proxy"], "dim": DIM, **kwargs}
        (finding,) = check_float_vectors(store, **args)  # type: ignore[arg-type]
        out.append(finding.to_dict())
    digest = hashlib.sha256(json.dumps(out, sort_keys=True).encode()).hexdigest()
    assert digest == FLOAT_VECTORS_KAT, json.dumps(out, indent=1)[:4000]


# ----------------------------------------------------------------------------- message types


def test_message_types(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.record_many(
        [
            ("S_tag", "phase1", "proxy", "S_tag", "blinded", b"x", "accepted"),
            ("S_syn", "phase1", "proxy", "S_syn", "tag", b"y", "accepted"),
            ("S_syn", "phase2", "proxy", "S_syn", "embedding", b"z", "accepted"),
            ("auditor", "phase2", "S_syn", "auditor", "leak", b"z", "accepted"),
        ]
    )
    allowed = {"S_tag": {"blinded", "share"}, "S_syn": {"tag", "share"}, "user": {"evaluated"}}
    findings = {f.name: f for f in check_message_types(store, allowed)}
    assert findings["message_types:S_tag"].passed
    assert not findings["message_types:S_syn"].passed
    assert findings["message_types:S_syn"].data["unexpected"] == ["embedding"]
    assert (
        findings["message_types:user"].passed
        and findings["message_types:user"].detail == "no entries"
    )
    assert not findings["message_types:auditor"].passed  # a view nobody expected
    ignored = {f.name for f in check_message_types(store, allowed, unlisted_views="ignore")}
    assert "message_types:auditor" not in ignored
    clean = check_message_types(
        store, {**allowed, "S_syn": {"tag", "embedding"}, "auditor": {"leak"}}
    )
    assert all(f.passed for f in clean)


# ----------------------------------------------------------------------------- integrity and report


def test_integrity_complete_open_and_aborted(tmp_path: Path) -> None:
    store = _clean(tmp_path, n=10)
    store.flush()
    with TranscriptStore.open(tmp_path / "t.sqlite") as live:
        integrity, complete = check_integrity(live)
        assert integrity.passed and integrity.data["entries"] == 10
        assert not complete.passed and complete.data["state"] == "open"
    store.close()
    with TranscriptStore.open(tmp_path / "t.sqlite") as done:
        assert all(f.passed for f in check_integrity(done))
    with (
        pytest.raises(ValueError),
        TranscriptStore.create(tmp_path / "a.sqlite", TranscriptHeader(rng_mode="crypto")),
    ):
        raise ValueError("stop")
    with TranscriptStore.open(tmp_path / "a.sqlite") as aborted:
        assert check_integrity(aborted)[1].detail == "transcript state is 'aborted:ValueError'"


def test_report_renders_and_serialises(tmp_path: Path) -> None:
    store = _clean(tmp_path, n=9)
    planted = b"forbidden-bytes!"
    store.record(
        view="S_syn",
        phase="phase2",
        sender="proxy",
        receiver="S_syn",
        message_type="share",
        payload=planted,
    )
    findings = [
        *check_no_forbidden_content(store, views=["S_syn"], forbidden={"marker": [planted]}),
        *check_message_types(store, {"S_syn": {"share"}, "S_tag": {"share"}, "proxy": {"share"}}),
        AuditFinding(name="ledger", passed=True, detail="epsilon 8", data={"epsilon": math.inf}),
    ]
    report = AuditReport(
        findings=tuple(findings), summary={"views": view_summary(store), "run": "audit"}
    )
    assert not report.passed
    assert [f.name for f in report.failures] == ["no_forbidden:marker"]
    assert report.finding("ledger").data == {"epsilon": "inf"}
    text = report.render_text()
    assert text.startswith("audit: FAIL (4/5 checks passed)")
    assert "[FAIL] no_forbidden:marker" in text and "seq 9 (S_syn/share @0)" in text
    assert "share: 4 messages" in text
    encoded = json.dumps(report.to_dict(), allow_nan=False)
    assert json.loads(encoded)["findings"][0]["passed"] is False
    assert AuditReport(findings=()).passed  # vacuous
    with pytest.raises(InvalidParameterError):
        report.finding("missing")
