"""The network driver's small parts: batch framing, the request log, group commit, the round
document and user credentials."""

from __future__ import annotations

import asyncio
import math
import sqlite3
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("starlette")

from fre_protocol.drivers.net.listener import CoalescedWrites  # noqa: E402
from fre_protocol.drivers.net.round import RoundDocument, RoundSettings, ServiceConfig  # noqa: E402
from fre_protocol.drivers.net.state import GroupCommit, ServiceState  # noqa: E402
from fre_protocol.drivers.net.wire import decode_batch, encode_batch, http_status  # noqa: E402
from mechanism.params import FreParams  # noqa: E402
from mechanism.seeds import SeedPlan  # noqa: E402
from primitives.errors import (  # noqa: E402
    DecodeError,
    InvalidParameterError,
    ProtocolStateError,
    VerificationError,
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=20))
def test_batch_framing_round_trips(items: list[bytes]) -> None:
    assert decode_batch(encode_batch(items)) == items


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"\x00\x00", "4-byte count"),
        (b"\x00\x00\x00\x01\x00\x00\x00\x05ab", "truncated at item 0"),
        (encode_batch([b"x"]) + b"!", "trailing"),
        (b"\x00\x00\x00\x03", "truncated at item 0"),
    ],
)
def test_malformed_batches_are_decode_errors(data: bytes, why: str) -> None:
    with pytest.raises(DecodeError, match=why):
        decode_batch(data)


def test_batch_count_limit() -> None:
    with pytest.raises(DecodeError, match="at most 2"):
        decode_batch(encode_batch([b"a", b"b", b"c"]), limit=2)


def test_typed_errors_map_to_statuses() -> None:
    from fre_protocol.drivers.net.wire import (
        NotReadyError,
        RateLimitedError,
        TooLargeError,
        UnauthorizedError,
    )

    assert [http_status(e("x")) for e in (DecodeError, TooLargeError, UnauthorizedError, RateLimitedError,
                                           NotReadyError, ProtocolStateError, VerificationError)] == [
        400, 413, 403, 429, 425, 409, 403,
    ]
    assert http_status(RuntimeError("x")) == 500


def test_request_log_is_idempotent_and_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    state = ServiceState(path)
    state.append("r1", "phase1", b"body", b"answer")
    with pytest.raises(Exception, match="UNIQUE"):
        state.append("r1", "phase1", b"other", b"x")  # a request id is logged once
    state.put("k", b"v")
    state.close()
    again = ServiceState(path)
    entry = again.logged("r1")
    assert entry is not None and (entry.kind, entry.body, entry.response) == ("phase1", b"body", b"answer")
    assert again.get("k") == b"v" and again.logged("r2") is None
    again.append("r2", "phase2", b"s", None)
    assert [e.request_id for e in again.entries()] == ["r1", "r2"]
    assert again.forget(["phase2"]) == 1 and [e.request_id for e in again.entries()] == ["r1"]
    again.close()


def _insert(i: int, *, refuse_every: int):  # type: ignore[no-untyped-def]
    """A group-commit write that inserts ``i``, or refuses every ``refuse_every``-th value."""

    def fn(conn):  # type: ignore[no-untyped-def]
        if i % refuse_every == 0:
            return ProtocolStateError(f"refused {i}")  # a refusal does not abort the others
        conn.execute("INSERT INTO t (x) VALUES (?)", (i,))
        return i

    return fn


def test_group_commit_keeps_each_callers_result(tmp_path: Path) -> None:
    state = ServiceState(tmp_path / "g.sqlite", schema="CREATE TABLE IF NOT EXISTS t (x INTEGER);")
    commits = GroupCommit(state)
    futures = []
    threads = [
        threading.Thread(target=lambda i=i: futures.append((i, commits.submit(_insert(i, refuse_every=7)))))
        for i in range(60)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, f in futures:
        if i % 7 == 0:
            with pytest.raises(ProtocolStateError):
                f.result(timeout=10)
        else:
            assert f.result(timeout=10) == i
    commits.close()
    assert sorted(r[0] for r in state.query("SELECT x FROM t")) == [i for i in range(60) if i % 7]


def test_group_commit_settles_an_event_loops_callers_each_with_its_own_outcome(tmp_path: Path) -> None:
    state = ServiceState(tmp_path / "g.sqlite", schema="CREATE TABLE IF NOT EXISTS t (x INTEGER UNIQUE);")
    commits = GroupCommit(state)

    async def callers() -> list[object]:
        return await asyncio.gather(*(commits.submit_async(_insert(i, refuse_every=5)) for i in range(40)),
                                    return_exceptions=True)

    outcomes = asyncio.run(callers())
    for i, outcome in enumerate(outcomes):
        if i % 5 == 0:
            assert isinstance(outcome, ProtocolStateError) and str(outcome) == f"refused {i}"
        else:
            assert outcome == i

    async def clash() -> list[object]:
        # The second insert breaks the UNIQUE constraint: its whole group rolls back, and every
        # caller in it (the first one too) gets SQLite's error.
        return await asyncio.gather(commits.submit_async(_insert(101, refuse_every=5)),
                                    commits.submit_async(_insert(1, refuse_every=5)), return_exceptions=True)

    both = asyncio.run(clash())
    commits.close()
    if all(isinstance(o, sqlite3.IntegrityError) for o in both):
        assert state.query("SELECT COUNT(*) FROM t WHERE x = 101") == [(0,)]
    else:  # the two landed in separate groups: only the clashing one failed
        assert both[0] == 101 and isinstance(both[1], sqlite3.IntegrityError)
    assert sorted(r[0] for r in state.query("SELECT x FROM t WHERE x < 100")) == [i for i in range(40) if i % 5]


class _RecordingTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


def test_coalesced_writes_send_one_turns_writes_as_one_and_flush_before_closing() -> None:
    async def scenario() -> tuple[list[bytes], list[bytes], list[bytes], bool, str]:
        raw = _RecordingTransport()
        transport = CoalescedWrites(raw, asyncio.get_running_loop())  # type: ignore[arg-type]
        transport.write(b"HTTP/1.1 202 Accepted\r\n\r\n")
        transport.write(b"")
        transport.writelines([b'{"ticket":', b"7}"])
        before = list(raw.writes)  # nothing leaves within the turn
        await asyncio.sleep(0)
        after_turn = list(raw.writes)
        transport.write(b"last")
        transport.close()  # what was written before close still goes out, first
        transport.write(b"too late")
        await asyncio.sleep(0)
        return before, after_turn, raw.writes, raw.closed, transport.get_extra_info("peername")

    before, after_turn, final, closed, info = asyncio.run(scenario())
    assert before == []
    assert after_turn == [b'HTTP/1.1 202 Accepted\r\n\r\n{"ticket":7}']
    assert final == [after_turn[0], b"last"] and closed
    assert info == "info:peername"  # everything else is the wrapped transport's


def _settings(**overrides: object) -> RoundSettings:
    seeds = SeedPlan.from_seed(3)
    base = dict(round_id="r-1", params=FreParams.paper(math.inf), public_seed=seeds.public_seed, rng_mode="seeded", dim=8)
    return RoundSettings(**{**base, **overrides})  # type: ignore[arg-type]


def test_round_document_round_trips_and_checks_settings() -> None:
    doc = RoundDocument(settings=_settings(), voprf_public_key=b"\x01" * 32, tag_box_key=b"\x02" * 32, syn_box_key=b"\x03" * 32)
    back = RoundDocument.decode(doc.encode())
    assert back == doc and back.digest == doc.digest
    back.check_settings(_settings())
    with pytest.raises(VerificationError, match="'dim'"):
        back.check_settings(_settings(dim=9))
    with pytest.raises(VerificationError, match="'window'"):
        back.check_settings(_settings(window_count=7))


@pytest.mark.parametrize(
    ("overrides", "match"),
    [({"round_id": "has space"}, "round_id"), ({"dim": 0}, "dim"), ({"rng_mode": "x"}, "rng_mode"),
     ({"window_seconds": 0}, "window_seconds"), ({"public_seed": b"short"}, "public_seed")],
)
def test_bad_round_settings_are_refused(overrides: dict[str, object], match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        _settings(**overrides)


def test_seeded_round_needs_the_matching_test_seed() -> None:
    with pytest.raises(InvalidParameterError, match="test_seed"):
        _settings().seeds(None)
    with pytest.raises(VerificationError, match="public seed"):
        _settings().seeds(4)
    assert _settings().seeds(3).rng_mode == "seeded"


def test_service_config_names_missing_peers(tmp_path: Path) -> None:
    with pytest.raises(InvalidParameterError, match="peers"):
        ServiceConfig(role="S_tag", host="127.0.0.1", port=1, state_dir=tmp_path, ca=tmp_path, cert=tmp_path,
                      key=tmp_path, peers={"proxy": "https://x"}, round=_settings())
    with pytest.raises(InvalidParameterError, match="credential_key"):
        ServiceConfig(role="proxy", host="127.0.0.1", port=1, state_dir=tmp_path, ca=tmp_path, cert=tmp_path,
                      key=tmp_path, peers={"S_tag": "a", "S_syn": "b"}, round=_settings())


def test_credentials_bind_user_and_round() -> None:
    from fre_protocol.drivers.net.proxy_admission import credential_token

    key = b"k" * 32
    token = credential_token(key, "r-1", "u7")
    assert token.startswith("u7.") and token == credential_token(key, "r-1", "u7")
    assert token != credential_token(key, "r-2", "u7") != credential_token(b"j" * 32, "r-1", "u7")


def _view(n: int, start: int = 0) -> list[tuple[str, str, str, str, str, bytes | int, str]]:
    return [("proxy", "phase2", "user", "S_syn", "sealed_envelope", bytes([i % 256]) * 3 if i % 2 else 40 + i, "accepted")
            for i in range(start, start + n)]


def test_a_live_transcript_holds_what_was_appended_and_is_never_reopened_once_finished(tmp_path: Path) -> None:
    from fre_protocol.drivers.net.round import RoundContext
    from fre_protocol.drivers.net.transcript import LiveTranscript, party_header
    from transcripts import TranscriptStore

    ctx = RoundContext(_settings(), test_seed=3, workers=1)
    path = tmp_path / "transcript.sqlite"
    live = LiveTranscript(lambda: path, lambda: party_header(ctx, party="proxy"))
    assert not live.is_open and not live.extend(_view(1))  # nothing to append to yet
    assert live.open() and live.extend(_view(3)) and live.extend(_view(2, start=3))
    live.finish({"note": {"k": 1}})
    assert live.finished and not live.is_open
    assert not live.open() and not live.extend(_view(1))  # a finished store is never replaced
    with TranscriptStore.open(path) as store:
        assert store.state == "complete" and store.get_artifact("note") == {"k": 1}
        entries = list(store.entries())
    assert [(e.size, e.payload if e.payload_recorded else None) for e in entries] == [
        (len(p), p) if isinstance(p, bytes) else (p, None) for *_, p, _ in _view(5)
    ]


def test_a_live_transcript_that_cannot_take_a_row_drops_its_store_and_can_start_again(tmp_path: Path) -> None:
    from fre_protocol.drivers.net.round import RoundContext
    from fre_protocol.drivers.net.transcript import LiveTranscript, party_header
    from transcripts import TranscriptStore

    ctx = RoundContext(_settings(), test_seed=3, workers=1)
    path = tmp_path / "transcript.sqlite"
    live = LiveTranscript(lambda: path, lambda: party_header(ctx, party="S_syn"))
    assert live.open() and live.extend(_view(2))
    assert not live.extend([("S_syn", "phase2", "user")])  # not a view row: refused, store dropped
    assert not live.is_open
    with TranscriptStore.open(path) as store:
        assert store.state.startswith("aborted")  # never passed off as complete
    assert live.open() and live.extend(_view(1))  # its owner starts it again from its log
    live.finish({})
    with TranscriptStore.open(path) as store:
        assert store.state == "complete" and len(list(store.entries())) == 1
    with pytest.raises(ProtocolStateError, match="not open"):
        live.finish({})
