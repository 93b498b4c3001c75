"""The networked driver for the protocol vectors (tests/vectors/protocol): the vector's inputs
played through :func:`fre_protocol.drivers.net.deploy.deploy_local` — S_tag, S_syn and the proxy as
HTTPS services in their own processes, the users as HTTP clients — and read back from the four
per-party transcript stores.

The proxy forwards windows of requests, each shuffled, so a view records the same entries as
the in-process runner in another order: replay with ``ordering="per_view_multiset"``.

Failing cases are delivered the only way a network attacker without the proxy's or a server's
keys can: as HTTP requests to the proxy, each with a credential of its own (a user other than
the vector's users). A ``forward`` injection of ``phase1`` or ``phase1_submit`` is one request;
``phase2`` injections are paired into requests of one envelope per server, since the proxy only
takes a phase-2 request that carries both shares. ``response`` injections replace S_tag's answer
on its way from the proxy to a user: inside the user's TLS connection, out of an HTTP client's
reach (:data:`NOT_OVER_HTTP`).
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from protocol_vectors import (
    FORWARD,
    RESPONSE,
    Injection,
    Observed,
    Operation,
    recorded_config,
    release_record,
)

from fre_protocol.drivers.net.deploy import (
    Deployment,
    DeployOptions,
    credentials_for,
    deploy_local,
    stores_of,
)
from fre_protocol.drivers.net.round import RoundSettings
from fre_protocol.drivers.net.wire import encode_batch
from fre_protocol.messages import SealedEnvelope, decode_as
from fre_protocol.roles.base import PHASE1, PHASE1_SUBMIT, PHASE2
from mechanism.params import FreParams
from mechanism.release import Release
from mechanism.seeds import SeedPlan
from transcripts import TranscriptStore

#: Why a hook cannot be exercised over HTTP, by hook.
NOT_OVER_HTTP = {
    RESPONSE: "replaces S_tag's answer between the proxy and a user, inside the user's TLS "
    "connection: only a malicious proxy could, and the proxy's code is the one under test",
}
#: The proxy's endpoint for each phase's user requests.
ENDPOINTS = {PHASE1: "/v1/phase1", PHASE1_SUBMIT: "/v1/submit", PHASE2: "/v1/phase2"}
#: When deploy_local's hook runs, which phases may still take user requests.
STEPS = {"phase1_submitted": (PHASE1, PHASE1_SUBMIT), "phase2_sent": (PHASE2,)}
#: The order the parties' stores are read in (each holds one view).
PARTIES = ("users", "proxy", "S_tag", "S_syn")


def over_http(injection: Injection) -> bool:
    return injection.hook == FORWARD and injection.phase in ENDPOINTS


def round_settings(inputs: Mapping[str, Any], *, window_count: int, window_seconds: float) -> RoundSettings:
    """A seeded round with the vector's parameters, components and configuration."""
    if int(inputs["workers"]) != 1:
        raise ValueError(f"vector inputs must be recorded on one worker, got {inputs['workers']!r}")
    return RoundSettings(
        round_id="protocol-vector",
        params=FreParams.from_dict(inputs["params"]),
        public_seed=SeedPlan.from_seed(int(inputs["seed"])).public_seed,
        rng_mode="seeded",
        dim=len(inputs["embeddings"][0]),
        noise=bool(inputs["noise"]),
        protocol=recorded_config(inputs),
        components=dict(inputs["components"]),
        window_count=window_count,
        window_seconds=window_seconds,
    )


def requests_for(injections: Sequence[Injection]) -> dict[str, list[tuple[str, bytes]]]:
    """The HTTP requests ``(endpoint, body)`` that deliver ``injections``, by phase."""
    refused = [i for i in injections if not over_http(i)]
    if refused:
        i = refused[0]
        why = NOT_OVER_HTTP.get(i.hook, f"no user endpoint takes {i.phase} messages")
        raise ValueError(f"injection ({i.hook}, {i.phase}) cannot be sent over HTTP: {why}")
    out: dict[str, list[tuple[str, bytes]]] = {}
    for phase in (PHASE1, PHASE1_SUBMIT):
        out[phase] = [(ENDPOINTS[phase], i.data) for i in injections if i.phase == phase]
    by_recipient: dict[str, list[bytes]] = {}
    for i in injections:
        if i.phase == PHASE2:
            by_recipient.setdefault(decode_as(i.data, SealedEnvelope).recipient.label, []).append(i.data)
    tag, syn = by_recipient.get("S_tag", []), by_recipient.get("S_syn", [])
    if len(tag) != len(syn):
        raise ValueError(
            f"phase-2 injections must pair one envelope for S_tag with one for S_syn (a phase-2 request "
            f"carries both), got {len(tag)} for S_tag and {len(syn)} for S_syn"
        )
    out[PHASE2] = [(ENDPOINTS[PHASE2], encode_batch([t, s])) for t, s in zip(tag, syn, strict=True)]
    return out


class HttpAttacker:
    """Sends the injected requests at deploy_local's hooks, each with a fresh credential; keeps
    each request's final HTTP status (a 5xx or a transport failure is an error of the driver)."""

    def __init__(self, n_users: int, injections: Sequence[Injection]) -> None:
        self._requests = requests_for(injections)
        self._n_users = n_users
        self._used = 0
        self.statuses: dict[str, list[int]] = {phase: [] for phase in self._requests}

    def __call__(self, dep: Deployment, step: str) -> None:
        import httpx

        from fre_protocol.drivers.net.peers import tls_client_context

        pending = [(phase, r) for phase in STEPS.get(step, ()) for r in self._requests.get(phase, [])]
        if not pending:
            return
        total = self._n_users + sum(len(v) for v in self._requests.values())
        tokens = credentials_for(dep, total)[self._n_users :]
        with httpx.Client(verify=tls_client_context(dep.pki / "ca.pem"), timeout=60) as client:
            for phase, (endpoint, body) in pending:
                token = tokens[self._used]
                self._used += 1
                response = client.post(dep.url("proxy") + endpoint, content=body, headers={"authorization": f"Bearer {token}"})
                if response.status_code >= 500:
                    raise AssertionError(f"the proxy answered an injected {phase} request with HTTP {response.status_code}")
                self.statuses[phase].append(response.status_code)


def networked_case(case: Mapping[str, Any]) -> dict[str, Any]:
    """A failing case as the networked proxy records it: a request it refuses is kept in its view
    by SHA-256 and size only, received by the proxy itself (issue 28, M4: refused bodies could
    fill its disk), where the in-process proxy keeps the body with receiver "unknown"."""
    from fre_protocol.drivers.net.proxy_view import REFUSED_TYPE, refused_record

    recorded = case["recorded"]
    if recorded["view"] != "proxy" or recorded["status"] == "accepted":
        return dict(case)
    body = bytes.fromhex(recorded["payload"])
    payload = refused_record(hashlib.sha256(body).digest(), len(body)).hex()
    return {**case, "recorded": {**recorded, "receiver": "proxy", "type": REFUSED_TYPE, "payload": payload}}


def read_operations(run: Path) -> list[Operation]:
    """Every entry of the deployment's per-party stores, party by party, each in its order."""
    stores = stores_of(run)
    missing = [p for p in PARTIES if p not in stores]
    if missing:
        raise AssertionError(f"the deployment wrote no transcript store for {missing}")
    operations: list[Operation] = []
    for party in PARTIES:
        with TranscriptStore.open(stores[party]) as store:
            operations += [
                Operation(
                    view=e.view, phase=e.phase, sender=e.sender, receiver=e.receiver,
                    message_type=e.message_type, payload=e.payload.hex() if e.payload_recorded else None,
                    size=e.size, status=e.status,
                )
                for e in store.entries()
            ]
    return operations


def run_network(
    inputs: Mapping[str, Any],
    injections: Sequence[Injection] = (),
    *,
    window_count: int = 16,
    window_seconds: float = 0.05,
    attacker: HttpAttacker | None = None,
) -> Observed:
    """Play the vector's inputs through a local deployment (seeded; small windows, so phase 1
    and phase 2 each reach the servers in several batches) and read its stores back.
    ``attacker``, given instead of ``injections``, delivers its own and keeps the injected
    requests' HTTP statuses for the caller."""
    x = np.asarray(inputs["embeddings"], dtype=np.float64)
    settings = round_settings(inputs, window_count=window_count, window_seconds=window_seconds)
    if attacker is not None and injections:
        raise ValueError("give injections or an attacker built from them, not both")
    if injections:
        attacker = HttpAttacker(x.shape[0], injections)
    with tempfile.TemporaryDirectory(prefix="fre-protocol-vector-net-") as tmp:
        out = Path(tmp) / "run"
        deploy_local(
            x, settings, out, DeployOptions(test_seed=int(inputs["seed"]), deadline_s=120.0), on_phase=attacker
        )
        return Observed(operations=read_operations(out), release=release_record(Release.load(out)))


__all__ = ["NOT_OVER_HTTP", "HttpAttacker", "networked_case", "over_http", "read_operations", "requests_for", "round_settings", "run_network"]
