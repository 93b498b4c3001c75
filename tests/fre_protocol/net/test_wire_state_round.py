"""The network driver's small parts: batch framing, the request log, group commit, the round
document and user credentials."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("starlette")

from fre_protocol.net.round import RoundDocument, RoundSettings, ServiceConfig  # noqa: E402
from fre_protocol.net.state import GroupCommit, ServiceState  # noqa: E402
from fre_protocol.net.wire import decode_batch, encode_batch, http_status  # noqa: E402
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
    from fre_protocol.net.wire import (
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


def test_group_commit_keeps_each_callers_result(tmp_path: Path) -> None:
    state = ServiceState(tmp_path / "g.sqlite", schema="CREATE TABLE IF NOT EXISTS t (x INTEGER);")
    commits = GroupCommit(state)

    def insert(i: int):  # type: ignore[no-untyped-def]
        def fn(conn):  # type: ignore[no-untyped-def]
            if i % 7 == 0:
                return ProtocolStateError(f"refused {i}")  # a refusal does not abort the others
            conn.execute("INSERT INTO t (x) VALUES (?)", (i,))
            return i

        return fn

    futures = []
    threads = [threading.Thread(target=lambda i=i: futures.append((i, commits.submit(insert(i))))) for i in range(60)]
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
    from fre_protocol.net.proxy_service import credential_token

    key = b"k" * 32
    token = credential_token(key, "r-1", "u7")
    assert token.startswith("u7.") and token == credential_token(key, "r-1", "u7")
    assert token != credential_token(key, "r-2", "u7") != credential_token(b"j" * 32, "r-1", "u7")
