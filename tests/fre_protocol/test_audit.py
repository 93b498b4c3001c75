"""The protocol audit passes on honest runs and fails on deliberately corrupted transcripts."""

from __future__ import annotations

import math
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from fre_protocol.audit import audit_run, bucket_needles, render
from fre_protocol.cli import main
from fre_protocol.drivers.inprocess import run_protocol
from fre_protocol.messages import TAG_BYTES
from fre_protocol.roles.config import RoundSpec, RunOptions
from mechanism.params import FreParams
from mechanism.population import Population, synthetic_population
from mechanism.run_files import TRANSCRIPT_FILE
from mechanism.seeds import SeedPlan
from primitives.randomness import RandomSource
from transcripts import TranscriptStore

INF = FreParams.paper(math.inf)


@pytest.fixture(scope="module")
def pop() -> Population:
    return synthetic_population(2, 125, 30, 32, 0.5, RandomSource.seeded(25, "audit"), spread=0.005)


@pytest.fixture(scope="module")
def run_dir(pop: Population, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("audited")
    result = run_protocol(pop.embeddings, RoundSpec(params=INF, seeds=SeedPlan.from_seed(31), noise=True), RunOptions(out_dir=out))
    assert len(result.release) >= 1
    return out


def test_honest_run_passes(pop: Population, run_dir: Path) -> None:
    report = audit_run(run_dir, embeddings=pop.embeddings, user_ids=[b"alice@example.org"])
    failed = [f"{f.name}: {f.detail}" for f in report.failures]
    assert report.passed, failed
    names = {f.name for f in report.findings}
    assert {
        "no_forbidden:raw_embedding",
        "no_forbidden:bucket_index",
        "no_forbidden:user_id",
        "no_float_vectors",
        "roles_only",
        "release:broadcast_recomputed",
        "release:compact_broadcast",
        "release:buckets_and_counts",
        "release:centroids",
        "ledger",
    } <= names
    text = render(report)
    assert "what each party saw" in text and "S_syn" in text and "centroid_ddg" in text
    views = report.summary["views"]
    assert views["S_tag"]["blind_request"]["count"] == pop.n


def test_honest_crypto_mode_run_passes(pop: Population, tmp_path: Path) -> None:
    run_protocol(pop.embeddings, RoundSpec(params=INF, seeds=SeedPlan.fresh(), noise=True), RunOptions(out_dir=tmp_path))
    report = audit_run(tmp_path / TRANSCRIPT_FILE, embeddings=pop.embeddings)
    assert report.passed, [f.detail for f in report.failures]


# -- corruptions ----------------------------------------------------------------------------------
def _copy(run_dir: Path, tmp_path: Path) -> Path:
    target = tmp_path / TRANSCRIPT_FILE
    shutil.copy(run_dir / TRANSCRIPT_FILE, target)
    return target


def _append(path: Path, **row: object) -> None:
    store = TranscriptStore.open(path, append=True)
    try:
        store.record(**row)  # type: ignore[arg-type]
    finally:
        store.close()


def _edit_artifact(path: Path, name: str, edit: Callable[[object], object]) -> None:
    store = TranscriptStore.open(path, append=True)
    try:
        store.put_artifact(name, edit(store.get_artifact(name)), replace=True)  # type: ignore[arg-type]
    finally:
        store.close()


def _sql(path: Path, statement: str, *args: object) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.execute(statement, args)
        conn.commit()
    finally:
        conn.close()


def _leak_embedding(pop: Population) -> Callable[[Path], None]:
    def corrupt(path: Path) -> None:
        raw = np.asarray(pop.embeddings[7], dtype="<f4").tobytes()
        _append(path, view="proxy", phase="phase2", sender="user", receiver="S_syn",
                message_type="sealed_envelope", payload=b"\x09\x03" + raw)
    return corrupt


def _leak_bucket(pop: Population) -> Callable[[Path], None]:
    def corrupt(path: Path) -> None:
        needle = bucket_needles(pop.embeddings[:1], INF, SeedPlan.from_seed(31).public_seed)[0]
        _append(path, view="proxy", phase="phase1", sender="user", receiver="S_tag",
                message_type="sealed_envelope", payload=b"\x09\x02" + needle)
    return corrupt


def _leak_user_id(path: Path) -> None:
    _append(path, view="S_tag", phase="phase1", sender="proxy", receiver="S_tag",
            message_type="blind_request", payload=b"\x01from alice@example.org")


def _user_in_role(path: Path) -> None:
    _append(path, view="S_tag", phase="phase1", sender="user-17", receiver="S_tag",
            message_type="blind_request", payload=b"\x01" + bytes(32))


def _bump_count(path: Path) -> None:
    def edit(release: object) -> object:
        assert isinstance(release, dict)
        release["buckets"][0]["count"] += 1
        return release
    _edit_artifact(path, "release", edit)


def _drop_submission(path: Path) -> None:
    # remove one accepted tag submission of a released tag from S_syn's view
    conn = sqlite3.connect(path)
    try:
        store_rows = conn.execute(
            "SELECT seq, payload FROM entries WHERE view = 'S_syn' AND message_type = 'tag_submission'"
        ).fetchall()
    finally:
        conn.close()
    store = TranscriptStore.open(path)
    released = {bytes.fromhex(b["id"]) for b in store.get_artifact("release")["buckets"]}
    store.close()
    seq = next(seq for seq, payload in store_rows if bytes(payload[1 : 1 + TAG_BYTES]) in released)
    _sql(path, "DELETE FROM entries WHERE seq = ?", seq)


def _tamper_compact(path: Path) -> None:
    # flip one byte of the users' compact broadcast (its last slot byte) in the users' view
    conn = sqlite3.connect(path)
    try:
        seq, payload = conn.execute(
            "SELECT seq, payload FROM entries WHERE view = 'user' AND message_type = 'compact_broadcast'"
        ).fetchone()
    finally:
        conn.close()
    tampered = bytes(payload[:-1]) + bytes([payload[-1] ^ 1])
    _sql(path, "UPDATE entries SET payload = ? WHERE seq = ?", tampered, seq)


def _shift_centroids(path: Path) -> None:
    def edit(raw: object) -> object:
        assert isinstance(raw, bytes)
        c = np.frombuffer(raw, dtype="<f8").copy()
        c[0] += 1e-3
        return c.tobytes()
    _edit_artifact(path, "centroids", edit)


def _overspend(path: Path) -> None:
    def edit(ledger: object) -> object:
        assert isinstance(ledger, dict)
        ledger["terms"] = [t for t in ledger["terms"] if t["name"] != "centroid_ddg"]
        return ledger
    _edit_artifact(path, "ledger", edit)


def _hidden_payload(path: Path) -> None:
    _append(path, view="S_syn", phase="phase1", sender="proxy", receiver="S_syn",
            message_type="tag_submission", payload=None, size=81, status="rejected:DecodeError")


def _foreign_message(path: Path) -> None:
    _append(path, view="user", phase="phase2", sender="S_syn", receiver="user",
            message_type="aggregate_share", payload=b"\x08")


@pytest.mark.parametrize(
    ("corruption", "failing"),
    [
        ("embedding", {"no_forbidden:raw_embedding", "no_float_vectors"}),
        ("bucket", {"no_forbidden:bucket_index"}),
        ("user_id", {"no_forbidden:user_id"}),
        ("role", {"roles_only"}),
        ("count", {"release:buckets_and_counts"}),
        ("submission", {"release:broadcast_recomputed", "release:buckets_and_counts"}),
        ("centroids", {"release:centroids"}),
        ("compact", {"release:compact_broadcast"}),
        ("ledger", {"ledger"}),
        ("message_type", {"message_types:user"}),
        ("size_only", {"size_only_records"}),
    ],
)
def test_corrupted_transcripts_fail(pop: Population, run_dir: Path, tmp_path: Path, corruption: str, failing: set[str]) -> None:
    corrupt = {
        "embedding": _leak_embedding(pop),
        "bucket": _leak_bucket(pop),
        "user_id": _leak_user_id,
        "role": _user_in_role,
        "count": _bump_count,
        "submission": _drop_submission,
        "centroids": _shift_centroids,
        "compact": _tamper_compact,
        "ledger": _overspend,
        "message_type": _foreign_message,
        "size_only": _hidden_payload,
    }[corruption]
    path = _copy(run_dir, tmp_path)
    corrupt(path)
    report = audit_run(path, embeddings=pop.embeddings, user_ids=[b"alice@example.org"])
    assert not report.passed
    assert {f.name for f in report.failures} == failing


def test_cli_exit_status(pop: Population, run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    x_path = tmp_path / "x.npy"
    np.save(x_path, pop.embeddings)
    assert main(["audit", str(run_dir), "--embeddings", str(x_path)]) == 0
    out = capsys.readouterr().out
    assert "checks: PASS" in out and "privacy ledger" in out
    bad = tmp_path / "bad"
    bad.mkdir()
    _bump_count(_copy(run_dir, bad))
    assert main(["audit", str(bad), "--json"]) == 1
    assert '"passed": false' in capsys.readouterr().out
    assert main(["audit", str(tmp_path / "nowhere")]) == 2
