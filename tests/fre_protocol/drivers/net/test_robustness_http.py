"""The services' HTTP surface against misbehaving clients (issue acceptance).

A running deployment (three service processes, mutual TLS between them) is sent what an attacker
or a broken client sends: bodies that are not envelopes, bodies too large, replayed and rate-limited
requests, missing or forged credentials, missing, foreign and wrong-role client certificates, a
wrong round id, a re-sent batch id, and a blinded identity element inside a proper sealed
envelope. Each gets its typed error (or the logged answer) and leaves the other users' round
untouched. A users' run against a proxy that never answers ends within its deadline.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import socket
import sqlite3
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from net_rounds import SEED, assert_same_release, needs_net, round_settings

needs_net()

import httpx  # noqa: E402 - only once the extra is known to be there
import trustme  # noqa: E402

from fre_protocol.components import build_components  # noqa: E402
from fre_protocol.drivers.net.deploy import (  # noqa: E402
    CREDENTIAL_KEY,
    Deployment,
    close_phase,
    collect,
    credentials_for,
    gather_transcripts,
    operator_client,
    start_service,
    stop_all,
    write_configs,
)
from fre_protocol.drivers.net.peers import tls_client_context  # noqa: E402
from fre_protocol.drivers.net.proxy_admission import credential_token  # noqa: E402
from fre_protocol.drivers.net.round import RoundDocument  # noqa: E402
from fre_protocol.drivers.net.transcript import audit_deployment  # noqa: E402
from fre_protocol.drivers.net.users_client import UsersOptions, UsersTarget, play_users  # noqa: E402
from fre_protocol.drivers.net.wire import (  # noqa: E402
    MAX_USER_BODY,
    REQUEST_ID,
    ROUND_ID,
    decode_batch,
    encode_batch,
)
from fre_protocol.messages import (  # noqa: E402
    BlindRequest,
    Rejection,
    Role,
    SealedEnvelope,
    decode_as,
    message_type_name,
)
from mechanism.population import Population  # noqa: E402
from mechanism.release import Release  # noqa: E402
from primitives.errors import ProtocolStateError  # noqa: E402
from primitives.randomness import RandomSource  # noqa: E402
from transcripts import TranscriptStore  # noqa: E402

IDENTITY = bytes(32)  # ristretto255's identity element, canonically encoded
#: A credential's refusals kept with their digest and size, and refused at all, in one round.
REFUSALS_KEPT, REFUSAL_BUDGET = 16, 64


@pytest.fixture(scope="module")
def dep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """One running round for the endpoint checks (none of them closes a phase)."""
    settings = round_settings("robustness")
    deployment = write_configs(tmp_path_factory.mktemp("robustness"), settings, test_seed=SEED)
    try:
        for role in ("S_tag", "S_syn", "proxy"):
            start_service(deployment, role)
        yield deployment
    finally:
        stop_all(deployment, kill=True)


def credential(dep: Deployment, user: str) -> str:
    return credential_token((dep.pki / CREDENTIAL_KEY).read_bytes(), dep.settings.round_id, user)


def user_client(dep: Deployment) -> httpx.Client:
    return httpx.Client(base_url=dep.url("proxy"), verify=tls_client_context(dep.pki / "ca.pem"), timeout=30)


def peer_client(dep: Deployment, role: str) -> httpx.Client:
    ctx = tls_client_context(dep.pki / "ca.pem", cert=dep.pki / f"{role}.pem", key=dep.pki / f"{role}.key")
    return httpx.Client(verify=ctx, timeout=30)


def document(dep: Deployment) -> RoundDocument:
    with user_client(dep) as client:
        return RoundDocument.decode(client.get("/v1/round").content)


def blind_request(dep: Deployment, blinded: bytes) -> tuple[bytes, bytes]:
    """``(envelope for the proxy, ciphertext as the proxy forwards it to S_tag)``."""
    sealed = build_components().channel.seal(document(dep).tag_box_key, BlindRequest(blinded_element=blinded).encode())
    return SealedEnvelope(recipient=Role.S_TAG, ciphertext=sealed).encode(), sealed


def genuine_blinded(label: str) -> bytes:
    _, blinded = build_components().suite.blind(label.encode(), rng=RandomSource.seeded(SEED, f"robustness/{label}"))
    return blinded


def post_user(dep: Deployment, path: str, body: bytes, token: str | None, *, authorization: str | None = None,
              **params: str) -> httpx.Response:
    headers = {"authorization": authorization or f"Bearer {token}"} if authorization or token else {}
    with user_client(dep) as client:
        return client.post(path, content=body, headers=headers, params=params)


def error_of(response: httpx.Response) -> str:
    return str(response.json()["error"])


def rejections(dep: Deployment, role: str, reason: str) -> float:
    """``fre_rejections_total{reason=...}`` from ``role``'s Prometheus metrics (0 if absent)."""
    with operator_client(dep) as client:
        text = client.get(dep.url(role) + "/metrics").text
    key = f'fre_rejections_total{{reason="{reason}"}}'
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(key)]
    return values[0] if values else 0.0


def proxy_status(dep: Deployment) -> dict[str, Any]:
    with operator_client(dep) as client:
        return dict(client.get(dep.url("proxy") + "/v1/admin/status").json())


# -- the proxy: users' requests --------------------------------------------------------------------
def test_a_body_that_is_not_an_envelope_is_refused_and_recorded(dep: Deployment) -> None:
    before = proxy_status(dep)["refused"].get("rejected:DecodeError", 0)
    response = post_user(dep, "/v1/phase1", b"\x09\x02 not an envelope", credential(dep, "malformed"))
    assert response.status_code == 400
    assert error_of(response) == "DecodeError"
    assert proxy_status(dep)["refused"]["rejected:DecodeError"] == before + 1
    # Refused, so not rate-limited: the same credential may still send a proper request.
    envelope, _ = blind_request(dep, genuine_blinded("malformed"))
    assert post_user(dep, "/v1/phase1", envelope, credential(dep, "malformed")).status_code == 202


def test_an_oversized_body_is_refused_with_413(dep: Deployment) -> None:
    response = post_user(dep, "/v1/phase1", b"\x00" * (MAX_USER_BODY + 1), credential(dep, "big"))
    assert response.status_code == 413
    assert error_of(response) == "TooLargeError"


def test_a_replayed_request_is_idempotent_and_another_body_is_rate_limited(dep: Deployment) -> None:
    token = credential(dep, "replayer")
    first, _ = blind_request(dep, genuine_blinded("replay-1"))
    other, _ = blind_request(dep, genuine_blinded("replay-2"))
    limited = rejections(dep, "proxy", "RateLimitedError")
    answers = [post_user(dep, "/v1/phase1", first, token) for _ in range(2)]
    assert [a.status_code for a in answers] == [202, 202]
    assert answers[0].json()["ticket"] == answers[1].json()["ticket"]
    response = post_user(dep, "/v1/phase1", other, token)
    assert response.status_code == 429
    assert error_of(response) == "RateLimitedError"
    assert rejections(dep, "proxy", "RateLimitedError") == limited + 1
    assert proxy_status(dep)["items"]["phase1"] >= 1


@pytest.mark.parametrize("wait", ["soon", "-1", "nan"])
def test_a_wait_that_is_not_seconds_is_refused_with_400_before_anything_is_admitted(dep: Deployment, wait: str) -> None:
    token = credential(dep, f"impatient-{wait}")
    envelope, _ = blind_request(dep, genuine_blinded(f"wait-{wait}"))
    response = post_user(dep, "/v1/phase1", envelope, token, wait=wait)
    assert response.status_code == 400
    assert error_of(response) == "InvalidParameterError" and "wait must be" in response.json()["detail"]
    # Nothing was admitted: the same credential's request goes in afterwards and gets a ticket.
    admitted = post_user(dep, "/v1/phase1", envelope, token)
    assert admitted.status_code == 202
    with user_client(dep) as client:
        asked = client.get(f"/v1/phase1/{admitted.json()['ticket']}", params={"wait": wait},
                           headers={"authorization": f"Bearer {token}"})
    assert asked.status_code == 400 and error_of(asked) == "InvalidParameterError"


def test_a_user_unit_round_admits_c_requests_per_credential_and_refuses_the_next(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Under a user unit with cap c = 2 a credential plays two slots: two distinct requests of a
    kind are admitted (each idempotent), the third is refused (429, typed, counted)."""
    from mechanism.contributions import PrivacyUnit

    settings = round_settings("user-cap", unit=PrivacyUnit(kind="user", cap=2, user_field="author"))
    deployment = write_configs(tmp_path_factory.mktemp("user-cap"), settings, test_seed=SEED)
    try:
        for role in ("S_tag", "S_syn", "proxy"):
            start_service(deployment, role)
        token = credential(deployment, "two-slots")
        bodies = [blind_request(deployment, genuine_blinded(f"slot-{i}"))[0] for i in range(3)]
        tickets = [post_user(deployment, "/v1/phase1", b, token) for b in bodies[:2]]
        assert [t.status_code for t in tickets] == [202, 202]
        again = post_user(deployment, "/v1/phase1", bodies[1], token)
        assert again.status_code == 202 and again.json()["ticket"] == tickets[1].json()["ticket"]
        third = post_user(deployment, "/v1/phase1", bodies[2], token)
        assert third.status_code == 429 and error_of(third) == "RateLimitedError"
        assert "cap c = 2" in third.json()["detail"]
        assert rejections(deployment, "proxy", "RateLimitedError") == 1
        assert post_user(deployment, "/v1/phase1", bodies[2], credential(deployment, "other")).status_code == 202
    finally:
        stop_all(deployment, kill=True)


@pytest.mark.parametrize(
    "authorization", [None, "Bearer u0", "Bearer u0.00000000000000000000000000000000", "Bearer .", "Basic dTA6eA=="]
)
def test_no_or_a_forged_credential_is_refused_with_403(dep: Deployment, authorization: str | None) -> None:
    envelope, _ = blind_request(dep, genuine_blinded("forged"))
    response = post_user(dep, "/v1/phase1", envelope, None, authorization=authorization)
    assert response.status_code == 403
    assert error_of(response) == "UnauthorizedError"


def test_a_credential_for_another_round_is_refused_with_403(dep: Deployment) -> None:
    envelope, _ = blind_request(dep, genuine_blinded("elsewhere"))
    elsewhere = credential_token((dep.pki / CREDENTIAL_KEY).read_bytes(), "another-round", "u0")
    assert post_user(dep, "/v1/phase1", envelope, elsewhere).status_code == 403
    assert post_user(dep, "/v1/phase1", envelope, credential(dep, "u0")).status_code == 202  # the control


# -- the proxy: operator endpoints, tickets, refusals (issue 28: M2, L9, M4) -------------------------
@pytest.mark.parametrize("role", ["proxy", "S_tag", "S_syn"])
def test_metrics_answer_the_operator_certificate_only(dep: Deployment, role: str) -> None:
    url = dep.url(role) + "/metrics"
    with operator_client(dep) as client:
        assert client.get(url).status_code == 200
    with peer_client(dep, "proxy" if role == "S_syn" else "S_syn") as client:  # a certificate of another role
        response = client.get(url)
    assert response.status_code == 403 and error_of(response) == "UnauthorizedError"
    if role == "proxy":  # a user: TLS without a certificate
        with user_client(dep) as client:
            response = client.get("/metrics")
        assert response.status_code == 403 and error_of(response) == "UnauthorizedError"
        assert "fre_" not in response.text


def test_tickets_are_opaque_random_ids_that_answer_their_own_credential_only(dep: Deployment) -> None:
    """Tickets are 16 random bytes in hex, not row ids: two in a row say nothing of how many
    requests (or dummies) came between them."""
    tickets = []
    for i in range(3):
        envelope, _ = blind_request(dep, genuine_blinded(f"ticket-{i}"))
        response = post_user(dep, "/v1/phase1", envelope, credential(dep, f"ticket-{i}"))
        assert response.status_code == 202
        tickets.append(response.json()["ticket"])
    assert all(isinstance(t, str) and re.fullmatch("[0-9a-f]{32}", t) for t in tickets), tickets
    assert len(set(tickets)) == 3
    with user_client(dep) as client:
        own = client.get(f"/v1/phase1/{tickets[0]}", params={"wait": "20"},
                         headers={"authorization": f"Bearer {credential(dep, 'ticket-0')}"})
        other = client.get(f"/v1/phase1/{tickets[0]}", headers={"authorization": f"Bearer {credential(dep, 'ticket-1')}"})
    assert own.status_code == 200 and message_type_name(own.content) == "evaluation"
    assert other.status_code == 403 and error_of(other) == "UnauthorizedError"


@pytest.mark.parametrize("ticket", ["9" * 40, "-1", "0", "%00", "g" * 32, "a" * 31, "A" * 32, "a" * 33])
def test_a_malformed_ticket_is_a_400_never_a_500(dep: Deployment, ticket: str) -> None:
    with user_client(dep) as client:
        response = client.get(f"/v1/phase1/{ticket}", headers={"authorization": f"Bearer {credential(dep, 'asker')}"})
    assert response.status_code == 400, response.text
    assert error_of(response) == "InvalidParameterError" and "ticket must be" in response.json()["detail"]


def test_an_unknown_ticket_is_refused_with_403(dep: Deployment) -> None:
    with user_client(dep) as client:
        response = client.get(f"/v1/phase1/{secrets.token_hex(16)}",
                              headers={"authorization": f"Bearer {credential(dep, 'asker')}"})
    assert response.status_code == 403 and error_of(response) == "UnauthorizedError"


def test_refusals_keep_a_digest_at_most_16_per_credential_then_429_without_work(dep: Deployment) -> None:
    """64 refused 60 KiB bodies of one credential leave 16 rows of digest and size (no body
    byte in the state files); the 65th request, even a proper one, is 429 before any work;
    another credential is not affected."""
    from fre_protocol.drivers.net import proxy_log

    token = credential(dep, "refuser")
    marker = b"REFUSED-BODY-MARKER-"
    body = marker * ((60 << 10) // len(marker))
    state = dep.out / "state" / "proxy" / dep.settings.round_id / "state.sqlite"
    statuses = [post_user(dep, "/v1/phase1", body, token).status_code for _ in range(REFUSAL_BUDGET)]
    assert statuses == [400] * REFUSAL_BUDGET
    with sqlite3.connect(f"file:{state}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT size, status FROM refused WHERE digest = ?", (hashlib.sha256(body).digest(),)).fetchall()
    assert rows == [(len(body), "rejected:DecodeError")] * REFUSALS_KEPT
    files = [p for p in state.parent.iterdir() if p.name.startswith("state.sqlite")]
    assert files and all(marker not in p.read_bytes() for p in files)
    budget = rejections(dep, "proxy", "RefusalBudgetError")
    envelope, _ = blind_request(dep, genuine_blinded("refuser"))
    response = post_user(dep, "/v1/phase1", envelope, token)
    assert response.status_code == 429 and error_of(response) == "RefusalBudgetError"
    assert rejections(dep, "proxy", "RefusalBudgetError") == budget + 1
    assert post_user(dep, "/v1/phase1", envelope, credential(dep, "not-the-refuser")).status_code == 202
    assert (proxy_log.REFUSALS_KEPT, proxy_log.REFUSAL_BUDGET) == (REFUSALS_KEPT, REFUSAL_BUDGET)


# -- S_tag: mutual TLS and the peers' requests ------------------------------------------------------
def test_s_tag_refuses_the_handshake_without_a_client_certificate_or_with_a_foreign_one(
    dep: Deployment, tmp_path: Path
) -> None:
    url = dep.url("S_tag") + "/healthz"
    with peer_client(dep, "proxy") as client:  # the control: the deployment's own certificate
        assert client.get(url).status_code == 200
    with httpx.Client(verify=tls_client_context(dep.pki / "ca.pem"), timeout=10) as client:
        with pytest.raises(httpx.TransportError):
            client.get(url)
    foreign = trustme.CA().issue_cert("localhost", common_name="proxy")
    ctx = tls_client_context(dep.pki / "ca.pem")
    foreign.configure_cert(ctx)
    with httpx.Client(verify=ctx, timeout=10) as client:
        with pytest.raises(httpx.TransportError):
            client.get(url)


def test_s_tag_refuses_a_certificate_of_the_wrong_role_with_403(dep: Deployment) -> None:
    _, sealed = blind_request(dep, genuine_blinded("wrong-role"))
    headers = {ROUND_ID: dep.settings.round_id, REQUEST_ID: "wrong-role"}
    with peer_client(dep, "operator") as client:
        response = client.post(dep.url("S_tag") + "/v1/phase1", content=encode_batch([sealed]), headers=headers)
    assert response.status_code == 403
    assert error_of(response) == "UnauthorizedError"


def test_a_wrong_round_id_is_refused_with_409(dep: Deployment) -> None:
    _, sealed = blind_request(dep, genuine_blinded("wrong-round"))
    for role, url in (("proxy", dep.url("S_tag") + "/v1/phase1"), ("proxy", dep.url("S_syn") + "/v1/submissions")):
        with peer_client(dep, role) as client:
            response = client.post(
                url, content=encode_batch([sealed]), headers={ROUND_ID: "another-round", REQUEST_ID: "wrong-round"}
            )
        assert response.status_code == 409
        assert error_of(response) == "ProtocolStateError"


def test_a_re_sent_batch_gets_the_logged_answer_without_a_second_evaluation(dep: Deployment) -> None:
    _, sealed = blind_request(dep, genuine_blinded("re-sent"))
    _, other = blind_request(dep, genuine_blinded("re-sent-other"))
    url = dep.url("S_tag") + "/v1/phase1"
    headers = {ROUND_ID: dep.settings.round_id, REQUEST_ID: "robustness/re-sent-batch"}

    def evaluations() -> int:
        with operator_client(dep) as client:
            return int(client.get(dep.url("S_tag") + "/v1/costs").json()["counts"].get("S_tag.voprf_eval", 0))

    # Earlier tests' phase-1 requests may still sit in the proxy's window: let it forward them
    # first, so that only this test's batches move S_tag's count.
    with operator_client(dep) as client:
        for _ in range(200):
            if 'fre_queue_depth{kind="phase1"} 0.0\n' in client.get(dep.url("proxy") + "/metrics").text:
                break
            time.sleep(0.05)
    time.sleep(0.2)
    before = evaluations()
    with peer_client(dep, "proxy") as client:
        first = client.post(url, content=encode_batch([sealed]), headers=headers)
        assert first.status_code == 200
        assert evaluations() == before + 1
        again = client.post(url, content=encode_batch([sealed]), headers=headers)
        assert again.status_code == 200
        assert again.content == first.content  # the logged answer (a fresh proof would differ)
        assert evaluations() == before + 1
        reused = client.post(url, content=encode_batch([other]), headers=headers)
    assert reused.status_code == 409  # one id, one request
    assert error_of(reused) == "ProtocolStateError"
    assert evaluations() == before + 1
    assert [message_type_name(m) for m in decode_batch(first.content)] == ["evaluation"]


# -- a whole round with bad requests mixed in -------------------------------------------------------
def test_bad_requests_leave_the_other_users_round_untouched(
    live_deployment: Callable[..., Deployment], small_population: Population, reference_release: Release
) -> None:
    """A body that is not an envelope is refused at the proxy (and recorded in its view by its
    digest and size); a proper sealed envelope around the identity element reaches S_tag, whose
    view records it rejected and whose answer to that user is a Rejection; the 130 users publish
    the undisturbed release. Once it is out, the credentials are gone from the proxy's state
    file and its WAL."""
    dep = live_deployment(round_settings("rejections"))
    malformed = b"\x09\x02 not an envelope"
    markers = ["malformed-credential-marker", "identity-credential-marker"]
    assert post_user(dep, "/v1/phase1", malformed, credential(dep, markers[0])).status_code == 400
    envelope, _ = blind_request(dep, IDENTITY)
    answer = post_user(dep, "/v1/phase1", envelope, credential(dep, markers[1]), wait="20")
    assert answer.status_code == 200, answer.text
    assert decode_as(answer.content, Rejection).reason == "DecodeError"

    x = small_population.embeddings
    target = UsersTarget(
        proxy_url=dep.url("proxy"), ca=dep.pki / "ca.pem", settings=dep.settings,
        credentials=credentials_for(dep, len(x)), test_seed=SEED,
    )
    options = UsersOptions(concurrency=32, deadline_s=300, transcript=dep.out / "transcripts" / "users.sqlite")
    report = play_users(x, target, options, between_phases=lambda: close_phase(dep, 1))
    assert report.failures == {}
    assert report.status == {"ok": len(x)}
    close_phase(dep, 2)
    release = collect(dep)
    assert_same_release(release, reference_release)
    assert release.diagnostics["n_submissions"] == len(x)
    stop_all(dep)
    gather_transcripts(dep)
    audit = audit_deployment(dep.out, embeddings=x)  # the refusal's record passes the audit
    assert audit.passed, [(f.name, f.detail) for f in audit.findings if not f.passed]

    state = dep.out / "state"
    with TranscriptStore.open(state / "proxy" / dep.settings.round_id / "transcript.sqlite") as store:
        refused = list(store.entries(status="rejected"))
    record = {"sha256": hashlib.sha256(malformed).hexdigest(), "size": len(malformed)}
    assert [(e.phase, e.sender, e.message_type, json.loads(e.payload), e.status) for e in refused] == [
        ("phase1", "user", "refused_request", record, "rejected:DecodeError")
    ]
    with TranscriptStore.open(state / "S_tag" / dep.settings.round_id / "transcript.sqlite") as store:
        statuses = [e.status for e in store.entries(phase="phase1")]
    assert statuses.count("rejected:DecodeError") == 1
    assert statuses.count("accepted") == len(x)
    files = [p for p in (state / "proxy" / dep.settings.round_id).iterdir() if p.name.startswith("state.sqlite")]
    assert files and not [(p.name, m) for p in files for m in markers if m.encode() in p.read_bytes()]


# -- bounded loops -----------------------------------------------------------------------------------
@pytest.fixture
def silent_proxy(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A TLS server that accepts connections and never answers a request: ``(url, CA file)``."""
    ca = trustme.CA()
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(ctx)
    ca_file = tmp_path / "silent-ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            try:
                conn.settimeout(5)
                held.append(ctx.wrap_socket(conn, server_side=True))  # handshake, then silence
            except (OSError, ssl.SSLError):
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"https://localhost:{server.getsockname()[1]}", ca_file
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()
        server.close()


def test_users_against_a_proxy_that_never_answers_give_up_within_their_deadline(
    silent_proxy: tuple[str, Path], small_population: Population
) -> None:
    url, ca = silent_proxy
    x = small_population.embeddings[:4]
    deadline = 2.0
    t0 = time.monotonic()
    with pytest.raises(ProtocolStateError, match="no answer within"):
        target = UsersTarget(
            proxy_url=url, ca=ca, settings=round_settings("silent"), credentials=["u.x"] * len(x), test_seed=SEED
        )
        play_users(x, target, UsersOptions(deadline_s=deadline))
    # A deadline behaviour, not a speed: an uncapped try would wait the client's 60 s read
    # timeout, so a bound of deadline + 30 s tells the two apart on any machine load.
    assert time.monotonic() - t0 < deadline + 30.0
