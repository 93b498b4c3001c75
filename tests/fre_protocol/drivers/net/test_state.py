"""A service's durable state: the end-of-round cleanup is one transaction."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from fre_protocol.drivers.net.state import ServiceState


def _state(tmp_path: Path) -> ServiceState:
    state = ServiceState(tmp_path / "state.sqlite")
    state.append("r1", "phase1", b"request", b"answer", [("S_tag", "phase1", "proxy", "S_tag", "m", b"request", "accepted")])
    state.append("r2", "phase2", b"share", b"", [("S_tag", "phase2", "proxy", "S_tag", "m", 5, "accepted")])
    state.put("keys", b"secret")
    return state


def test_forget_drops_the_rows_and_changes_the_values_together(tmp_path: Path) -> None:
    state = _state(tmp_path)
    assert state.forget(["phase2"], delete=["keys"], put={"finalized": b"1"}) == 1
    assert [e.kind for e in state.entries()] == ["phase1"]
    assert state.get("keys") is None
    assert state.get("finalized") == b"1"
    assert len(list(state.view_rows())) == 2  # the view stays unless asked


def test_forget_can_drop_the_view_once_it_is_in_the_transcript(tmp_path: Path) -> None:
    state = _state(tmp_path)
    assert state.forget(["phase2"], put={"finalized": b"1"}, view=True) == 1
    assert list(state.view_rows()) == []
    assert [e.kind for e in state.entries()] == ["phase1"] and state.get("finalized") == b"1"


def test_a_failed_forget_leaves_rows_and_values_as_they_were(tmp_path: Path) -> None:
    """A failure after the rows are deleted (here: a NULL value) rolls everything back, as a
    crash at that point would: the shares are still in the log while the keys are."""
    state = _state(tmp_path)
    with pytest.raises(sqlite3.IntegrityError):
        state.forget(["phase2"], delete=["keys"], put={"finalized": None}, view=True)  # type: ignore[dict-item]
    assert [e.kind for e in state.entries()] == ["phase1", "phase2"]
    assert state.get("keys") == b"secret"
    assert state.get("finalized") is None
    assert len(list(state.view_rows())) == 2


def test_forgotten_shares_leave_no_bytes_in_the_files(tmp_path: Path) -> None:
    """The shares' bytes are gone from the database and its WAL after forget, even though the
    view (kept in the transcript) is deleted without overwriting; secure deletion is back on."""
    marker = b"SHARE-BYTES-" * 200
    state = ServiceState(tmp_path / "state.sqlite")
    state.append("r1", "phase2", marker, b"", [("S_syn", "phase2", "proxy", "S_syn", "m", b"view " * 300, "accepted")])
    before = state.query("PRAGMA secure_delete")
    state.forget(["phase2"], view=True)
    files = [p for p in tmp_path.iterdir() if p.name.startswith("state.sqlite")]
    assert files and all(marker[:24] not in p.read_bytes() for p in files)
    assert state.query("PRAGMA secure_delete") == before
    state.close()
