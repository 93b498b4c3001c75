"""Issue 28's findings H1, M5 and L13, played against services on loopback.

* **H1** — the round document is bound to S_tag and S_syn: each signs its digest with the key of
  its CA-issued role certificate. A proxy that holds the genuine proxy certificate but serves a
  document with keys of its own servers is refused by every user before anything is sent,
  whatever it puts in the signatures; ``PUT /v1/round`` is write-once; a server takes no phase
  traffic before it has checked the other server's signature.
* **M5** — once a server has finalized, its round keys are gone from memory too: a phase-1
  request is refused and no evaluation comes back.
* **L13** — a peer client pins the role of the server it meant to reach.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from net_rounds import SEED, needs_net, round_settings

needs_net()

import httpx  # noqa: E402 - only once the extra is known to be there
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402

from fre_protocol.components import build_components  # noqa: E402
from fre_protocol.drivers.net.certs import make_test_pki, server_ssl_context  # noqa: E402
from fre_protocol.drivers.net.deploy import (  # noqa: E402
    Deployment,
    close_phase,
    credentials_for,
    operator_client,
    start_service,
    stop_all,
    write_configs,
)
from fre_protocol.drivers.net.peers import PeerClient, tls_client_context  # noqa: E402
from fre_protocol.drivers.net.round import canonical_json  # noqa: E402
from fre_protocol.drivers.net.users_client import UsersOptions, UsersTarget, play_users  # noqa: E402
from fre_protocol.drivers.net.wire import REQUEST_ID, ROUND_ID, decode_batch, encode_batch  # noqa: E402
from fre_protocol.messages import BlindRequest, Role, message_type_name  # noqa: E402
from fre_protocol.roles.round import box_key, tagging_key  # noqa: E402
from mechanism.population import Population  # noqa: E402
from mechanism.seeds import SeedPlan  # noqa: E402
from primitives.errors import VerificationError  # noqa: E402
from primitives.randomness import RandomSource  # noqa: E402

# The statement each server signs (fre_protocol.drivers.net.signing): a context string, the signer's role
# and the SHA-256 of the document's canonical JSON (the signatures themselves excluded).
CONTEXT = b"fre-e2t round document v1\x00"


@pytest.fixture(scope="module")
def dep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    deployment = write_configs(tmp_path_factory.mktemp("binding"), round_settings("binding"), test_seed=SEED)
    try:
        for role in ("S_tag", "S_syn", "proxy"):
            start_service(deployment, role)
        yield deployment
    finally:
        stop_all(deployment, kill=True)


def genuine_document(dep: Deployment) -> dict[str, Any]:
    with httpx.Client(base_url=dep.url("proxy"), verify=tls_client_context(dep.pki / "ca.pem"), timeout=30) as client:
        return dict(client.get("/v1/round").json())


def peer_client(dep: Deployment, role: str) -> httpx.Client:
    ctx = tls_client_context(dep.pki / "ca.pem", cert=dep.pki / f"{role}.pem", key=dep.pki / f"{role}.key")
    return httpx.Client(verify=ctx, timeout=30)


def attackers_keys() -> dict[str, str]:
    """Public keys of servers the attacker runs (their secret keys are the attacker's)."""
    seeds, comps = SeedPlan.from_seed(666), build_components()
    return {
        "voprf": tagging_key(seeds, comps.suite)[1].hex(),
        "S_tag_box": box_key(seeds, comps.channel, Role.S_TAG)[1].hex(),
        "S_syn_box": box_key(seeds, comps.channel, Role.S_SYN)[1].hex(),
    }


def unsigned(document: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in document.items() if k != "signatures"}


def sign(document: dict[str, Any], role: str, key: Path, cert: Path) -> dict[str, str]:
    digest = hashlib.sha256(canonical_json(unsigned(document))).digest()
    private = serialization.load_pem_private_key(key.read_bytes(), password=None)
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    signature = private.sign(CONTEXT + role.encode() + b"\x00" + digest, ec.ECDSA(hashes.SHA256()))
    return {"certificate": cert.read_text(), "signature": signature.hex()}


def forged(dep: Deployment, variant: str, tmp_path: Path) -> dict[str, Any]:
    """The genuine document with the attacker's keys, and ``variant``'s signatures."""
    genuine = genuine_document(dep)
    doc = {**unsigned(genuine), "public_keys": attackers_keys()}
    if variant == "unsigned":
        return doc
    if variant == "genuine_signatures_copied":
        return {**doc, "signatures": genuine.get("signatures", {})}
    if variant == "signed_with_the_proxy_certificate":  # the key the attacker really holds
        key, cert = dep.pki / "proxy.key", dep.pki / "proxy.pem"
        return {**doc, "signatures": {r: sign(doc, r, key, cert) for r in ("S_tag", "S_syn")}}
    assert variant == "role_certificates_of_another_ca"
    evil = make_test_pki(tmp_path / "evil")
    return {**doc, "signatures": {r: sign(doc, r, *reversed(evil.for_role(r))) for r in ("S_tag", "S_syn")}}


@contextmanager
def fake_proxy(dep: Deployment, document: bytes) -> Iterator[tuple[str, list[tuple[str, str]]]]:
    """A proxy with the genuine proxy certificate that serves ``document`` at ``GET /v1/round``
    and records every request it gets: ``(url, [(method, path), ...])``."""
    seen: list[tuple[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            seen.append((self.command, self.path))
            length = int(self.headers.get("content-length") or 0)
            if length:
                self.rfile.read(length)
            if self.command == "GET" and self.path == "/v1/round":
                status, body = 200, document
            else:  # a fake answer for the rest: a user that got here has already sent
                status, body = 404, b'{"error": "FreError", "detail": "fake proxy"}'
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, *args: Any) -> None:
            return None

    paths = make_paths(dep)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = server_ssl_context(paths, "proxy", require_client_cert=False).wrap_socket(
        server.socket, server_side=True
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://localhost:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def make_paths(dep: Deployment) -> Any:
    from fre_protocol.drivers.net.certs import CertPaths

    roles = ("S_tag", "S_syn", "proxy", "operator")
    return CertPaths(ca=dep.pki / "ca.pem", cert={r: dep.pki / f"{r}.pem" for r in roles},
                     key={r: dep.pki / f"{r}.key" for r in roles})


# -- H1: users ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("variant", "says"),
    [
        ("unsigned", "S_tag's signature.*missing"),
        ("genuine_signatures_copied", "S_tag's signature.*does not verify"),
        ("signed_with_the_proxy_certificate", "S_tag's certificate names role 'proxy'"),
        ("role_certificates_of_another_ca", "S_tag's certificate.*not issued by the deployment's CA"),
    ],
)
def test_users_refuse_a_forged_round_document_and_send_nothing(
    dep: Deployment, small_population: Population, tmp_path: Path, variant: str, says: str
) -> None:
    """The attack of H1: a proxy with the genuine proxy certificate serves the round's genuine
    settings with its own servers' keys. Every user refuses before sending anything."""
    document = canonical_json(forged(dep, variant, tmp_path))
    x = small_population.embeddings[:6]
    with fake_proxy(dep, document) as (url, seen):
        with pytest.raises(VerificationError, match=says):
            target = UsersTarget(
                proxy_url=url, ca=dep.pki / "ca.pem", settings=dep.settings, credentials=credentials_for(dep, len(x)),
                test_seed=SEED,
            )
            play_users(x, target, UsersOptions(deadline_s=5))
    assert seen == [("GET", "/v1/round")]


def test_the_genuine_document_carries_both_servers_signatures(dep: Deployment) -> None:
    from fre_protocol.drivers.net.signing import SignedRoundDocument

    data = canonical_json(genuine_document(dep))
    signed = SignedRoundDocument.decode(data)
    signed.verify(ca=dep.pki / "ca.pem", settings=dep.settings)  # what each user runs
    assert sorted(signed.signatures) == ["S_syn", "S_tag"]


# -- H1: the servers ---------------------------------------------------------------------------------
def put_round(dep: Deployment, role: str, document: dict[str, Any]) -> httpx.Response:
    with peer_client(dep, "proxy") as client:
        return client.put(dep.url(role) + "/v1/round", content=canonical_json(document),
                          headers={ROUND_ID: dep.settings.round_id})


def test_put_round_is_write_once(dep: Deployment) -> None:
    genuine = genuine_document(dep)
    for role, swapped in (("S_tag", "S_syn_box"), ("S_syn", "S_tag_box")):
        other = {**unsigned(genuine), "public_keys": {**genuine["public_keys"], swapped: attackers_keys()[swapped]}}
        refused = put_round(dep, role, other)
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"] == "ProtocolStateError"
        assert "already" in refused.json()["detail"]
        again = put_round(dep, role, unsigned(genuine))  # the same document: answered idempotently
        assert again.status_code == 200, again.text
        assert again.json()["digest"] == hashlib.sha256(canonical_json(unsigned(genuine))).hexdigest()
        with peer_client(dep, "proxy") as client:
            kept = client.get(dep.url(role) + "/v1/round", headers={ROUND_ID: dep.settings.round_id})
        assert unsigned(kept.json()) == unsigned(genuine)


def test_servers_take_no_phase_traffic_before_checking_the_other_servers_signature(
    tmp_path: Path, deployments: list[Deployment]
) -> None:
    """S_tag and S_syn without a proxy; the test plays the proxy (with its certificate)."""
    dep = write_configs(tmp_path / "servers", round_settings("servers-only"), test_seed=SEED)
    deployments.append(dep)
    for role in ("S_tag", "S_syn"):
        start_service(dep, role)
    headers = {ROUND_ID: dep.settings.round_id}
    with peer_client(dep, "proxy") as client:
        tag = client.get(dep.url("S_tag") + "/v1/keys").json()
        syn = client.get(dep.url("S_syn") + "/v1/keys").json()
        doc = {**dep.settings.to_dict(), "public_keys": {**tag, **syn}}
        answers = {r: put_round(dep, r, doc) for r in ("S_tag", "S_syn")}
        assert all(a.status_code == 200 for a in answers.values()), [a.text for a in answers.values()]

        sealed = build_components().channel.seal(
            bytes.fromhex(tag["S_tag_box"]), BlindRequest(blinded_element=blinded("early")).encode()
        )
        phase1 = {**headers, REQUEST_ID: "early-phase1"}
        early = client.post(dep.url("S_tag") + "/v1/phase1", content=encode_batch([sealed]), headers=phase1)
        assert early.status_code == 409 and "S_syn's signature" in early.json()["detail"], early.text

        # S_syn's signature made with the proxy's key: S_tag refuses the document.
        bad = {**doc, "signatures": {
            "S_tag": {k: answers["S_tag"].json()[k] for k in ("certificate", "signature")},
            "S_syn": sign(doc, "S_syn", dep.pki / "proxy.key", dep.pki / "proxy.pem"),
        }}
        refused = put_round(dep, "S_tag", bad)
        assert refused.status_code == 403 and refused.json()["error"] == "VerificationError", refused.text
        assert "S_syn's certificate names role 'proxy'" in refused.json()["detail"]

        good = {**doc, "signatures": {r: {k: answers[r].json()[k] for k in ("certificate", "signature")}
                                      for r in ("S_tag", "S_syn")}}
        for role in ("S_tag", "S_syn"):
            assert put_round(dep, role, good).status_code == 200
        later = client.post(dep.url("S_tag") + "/v1/phase1", content=encode_batch([sealed]), headers=phase1)
        assert later.status_code == 200, later.text


def blinded(label: str) -> bytes:
    return build_components().suite.blind(label.encode(), rng=RandomSource.seeded(SEED, f"binding/{label}"))[1]


# -- M5 ----------------------------------------------------------------------------------------------
def test_after_finalize_s_tag_evaluates_nothing(tmp_path: Path, deployments: list[Deployment]) -> None:
    dep = write_configs(tmp_path / "finalized", round_settings("finalized"), test_seed=SEED)
    deployments.append(dep)
    for role in ("S_tag", "S_syn", "proxy"):
        start_service(dep, role)
    tag_box = bytes.fromhex(genuine_document(dep)["public_keys"]["S_tag_box"])
    channel = build_components().channel
    url, headers = dep.url("S_tag") + "/v1/phase1", {ROUND_ID: dep.settings.round_id}

    def phase1(label: str) -> httpx.Response:
        sealed = channel.seal(tag_box, BlindRequest(blinded_element=blinded(label)).encode())
        with peer_client(dep, "proxy") as client:
            return client.post(url, content=encode_batch([sealed]), headers={**headers, REQUEST_ID: label})

    before = phase1("before-finalize")  # the control: the round's key evaluates while it is open
    assert before.status_code == 200, before.text
    assert [message_type_name(m) for m in decode_batch(before.content)] == ["evaluation"]
    close_phase(dep, 1)
    close_phase(dep, 2)  # S_syn aggregates with S_tag: both finalize
    after = phase1("after-finalize")
    assert after.status_code == 409, after.text
    assert after.json()["error"] == "ProtocolStateError"
    assert "ended" in after.json()["detail"]
    with operator_client(dep) as client:
        counts = client.get(dep.url("S_tag") + "/v1/costs").json()["counts"]
    assert counts.get("S_tag.voprf_eval") == 1
    # S_syn likewise takes nothing new once it has published.
    with peer_client(dep, "proxy") as client:
        late = client.post(dep.url("S_syn") + "/v1/phase2", content=encode_batch([]),
                           headers={**headers, REQUEST_ID: "late-phase2"})
    assert late.status_code == 409 and "ended" in late.json()["detail"], late.text


# -- L13 ---------------------------------------------------------------------------------------------
def test_a_peer_client_refuses_a_server_of_another_role(dep: Deployment) -> None:
    """The proxy's client means S_syn but is answered by a server with S_tag's certificate."""
    config = dep.config("proxy")
    misrouted = dataclasses.replace(config, peers={**config.peers, "S_syn": dep.url("S_tag")})
    client = PeerClient(misrouted)
    try:
        with pytest.raises(VerificationError, match="meant to reach S_syn.*certificate names 'S_tag'"):
            client.get("S_syn", "/v1/keys", deadline_s=5)
        assert json.loads(client.get("S_tag", "/v1/keys"))["voprf"]  # the right peer still answers
    finally:
        client.close()


def test_role_certificates_carry_only_their_roles_usages(dep: Deployment) -> None:
    """The operator's certificate (a client only) may not serve TLS. (Every server role also
    calls a peer: S_tag fetches the released tags' token hashes from S_syn.)"""
    pki = make_paths(dep)
    with pytest.raises(ssl.SSLError):
        handshake(server_ssl_context(pki, "operator", require_client_cert=False), tls_client_context(pki.ca))


def handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> None:
    import socket

    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def serve() -> None:
            conn, _ = listener.accept()
            try:
                with server.wrap_socket(conn, server_side=True):
                    pass
            except (ssl.SSLError, OSError):
                pass

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
                with client.wrap_socket(raw, server_hostname="localhost"):
                    pass
        finally:
            thread.join(5)

