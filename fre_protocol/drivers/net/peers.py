"""A service's mTLS client to its peers (each connection pinned to the role it was opened for),
typed peer errors and bounded, idempotent retries with backoff; the TLS client context users
and services share.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fre_protocol.drivers.net.round import ServiceConfig
from fre_protocol.drivers.net.wire import OCTETS, REQUEST_ID, ROUND_ID
from primitives.errors import FreError, ProtocolStateError


def tls_client_context(ca: Path, *, cert: Path | None = None, key: Path | None = None) -> Any:
    """A TLS client context that trusts only the deployment's CA and, for a service, presents
    its own certificate (mutual TLS)."""
    import ssl

    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert is not None:
        ctx.load_cert_chain(str(cert), None if key is None else str(key))
    return ctx


class PeerClient:
    """HTTPS client to the other services, with this service's certificate (mTLS).

    Each new connection is pinned to the role it was opened for: right after the handshake (which
    checked the CA and the host name), before any request goes out on it, the server's
    certificate must name that role (:func:`~fre_protocol.drivers.net.certs.expect_role`), else the
    connection is closed and VerificationError raised. A host name alone does not tell S_tag
    from S_syn when they share hosts.

    ``post`` retries connection failures and 5xx answers with exponential backoff and jitter,
    reusing the request id, so a request the peer already logged is answered from its log rather
    than processed twice. Every loop is bounded by ``deadline_s``.
    """

    def __init__(self, config: ServiceConfig, *, timeout_s: float = 600.0) -> None:
        import httpx

        self._peers = config.peers
        self._round = config.round.round_id
        self._role = config.role
        ctx = tls_client_context(config.ca, cert=config.cert, key=config.key)
        timeout = httpx.Timeout(timeout_s, connect=10.0)
        # A client (a connection pool) per peer: a connection opened, and pinned, for one role
        # never carries another's request, even were two peers given the same address.
        self._clients = {peer: httpx.Client(verify=ctx, timeout=timeout, http2=False) for peer in self._peers}
        self._pinned = {peer: {"trace": self._pin(peer)} for peer in self._peers}

    def _pin(self, peer: str) -> Callable[[str, dict[str, Any]], None]:
        """httpcore's trace hook: checks the server's role once its TLS handshake completes."""
        from fre_protocol.drivers.net.certs import expect_role

        url = self._peers[peer]

        def trace(event: str, info: dict[str, Any]) -> None:
            if event != "connection.start_tls.complete":
                return
            stream = info["return_value"]  # the TLS stream, handshake done, nothing sent yet
            ssl_object = stream.get_extra_info("ssl_object")
            try:
                expect_role(ssl_object.getpeercert() if ssl_object is not None else None, peer, who=self._role, where=url)
            except FreError:
                stream.close()  # nothing is sent on it
                raise

        return trace

    def post(self, peer: str, path: str, body: bytes, *, request_id: str, deadline_s: float = 600.0) -> bytes:
        return call_with_retries(
            lambda: self._clients[peer].post(
                self._peers[peer].rstrip("/") + path,
                content=body,
                headers={REQUEST_ID: request_id, ROUND_ID: self._round, "content-type": OCTETS},
                extensions=self._pinned[peer],
            ),
            what=f"{peer} {path}",
            deadline_s=deadline_s,
        )

    def get(self, peer: str, path: str, *, deadline_s: float = 60.0) -> bytes:
        return call_with_retries(
            lambda: self._clients[peer].get(
                self._peers[peer].rstrip("/") + path, headers={ROUND_ID: self._round}, extensions=self._pinned[peer]
            ),
            what=f"{peer} {path}",
            deadline_s=deadline_s,
        )

    def put(self, peer: str, path: str, body: bytes, *, deadline_s: float = 60.0) -> bytes:
        """An idempotent PUT (the round document), retried as :meth:`get` is."""
        return call_with_retries(
            lambda: self._clients[peer].put(
                self._peers[peer].rstrip("/") + path, content=body,
                headers={ROUND_ID: self._round, "content-type": "application/json"}, extensions=self._pinned[peer],
            ),
            what=f"{peer} {path}",
            deadline_s=deadline_s,
        )

    def close(self) -> None:
        for client in self._clients.values():
            client.close()


class PeerError(FreError):
    """A peer answered with a typed error (its type and message are kept)."""

    def __init__(self, status: int, kind: str, detail: str) -> None:
        super().__init__(f"{kind} ({status}): {detail}")
        self.status, self.kind, self.detail = status, kind, detail


def raise_for(response: Any) -> None:
    """An httpx response's 4xx/5xx as a typed :class:`PeerError`."""
    if response.status_code >= 400:
        raise peer_error(response.status_code, response.content)


def peer_error(status: int, body: bytes) -> PeerError:
    """The typed error an error answer carries (its JSON ``error``/``detail``), as a PeerError."""
    try:
        data = json.loads(body)
        kind, detail = str(data.get("error")), str(data.get("detail"))
    except (ValueError, AttributeError):
        kind, detail = "HTTPError", body[:200].decode("utf-8", "replace")
    return PeerError(status, kind, detail)


def backoff(attempt: int, *, base_s: float, cap_s: float) -> float:
    """Seconds to wait before try ``attempt + 1``: exponential, capped, with jitter in [½, 1)
    so that many clients retrying at once spread out (the OS's randomness: nothing global)."""
    return min(cap_s, base_s * 2**attempt) * (0.5 + secrets.randbelow(1 << 16) / (1 << 17))


def call_with_retries(send: Callable[[], Any], *, what: str, deadline_s: float, base_s: float = 0.05) -> bytes:
    """``send()`` until it gives a non-5xx answer or ``deadline_s`` passes (ProtocolStateError).
    4xx answers are final (a typed PeerError); 425 (not ready yet) is retried like a 5xx."""
    import httpx

    end = time.monotonic() + deadline_s
    attempt = 0
    while True:
        try:
            response = send()
            if response.status_code < 500 and response.status_code != 425:
                raise_for(response)
                return bytes(response.content)
            failure = f"HTTP {response.status_code}"
        except (httpx.TransportError, OSError) as exc:
            failure = f"{type(exc).__name__}: {exc}"
        attempt += 1
        pause = backoff(attempt, base_s=base_s, cap_s=2.0)
        if time.monotonic() + pause > end:
            raise ProtocolStateError(f"{what}: no answer within {deadline_s:.0f} s ({attempt} tries; last: {failure})")
        time.sleep(pause)


__all__ = [
    "PeerClient", "PeerError", "backoff", "call_with_retries", "peer_error", "raise_for", "tls_client_context",
]
