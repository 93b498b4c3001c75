"""What every service shares: its HTTPS listener (with the peer's certificate role in each
request), typed error responses, bounded body reading, health/readiness/metrics endpoints, and an
mTLS client to its peers with bounded, idempotent retries.

Trust boundaries: the servers accept only mutually authenticated TLS from the roles an endpoint
names (the proxy relays users' messages; S_syn asks S_tag for aggregates); the proxy accepts
users over TLS without a client certificate and authenticates them by credential instead.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from uvicorn.protocols.http.h11_impl import H11Protocol

from fre_protocol.drivers.net.metrics import Metrics
from fre_protocol.drivers.net.round import ServiceConfig
from fre_protocol.drivers.net.wire import (
    OCTETS,
    REQUEST_ID,
    ROUND_ID,
    SlowRequestError,
    TooLargeError,
    UnauthorizedError,
    UnavailableError,
    error_body,
    http_status,
)
from primitives.errors import FreError, InvalidParameterError, ProtocolStateError

Handler = Callable[[Request], Awaitable[Response]]


class CoalescedWrites:
    """A transport whose writes in one turn of the event loop leave as one write.

    uvicorn writes a response's status line and headers, then its body, as two writes; over TLS
    each is a record of its own and a send of its own, and on loopback a send also runs the
    receiver's TCP stack. Joined, a small response costs one of each (sampled: those writes were
    a sixth of the proxy's CPU, and joining them saved about a quarter of that). Everything else
    is the wrapped transport's."""

    __slots__ = ("_loop", "_pending", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(bytes(data))

    def writelines(self, chunks: Sequence[bytes]) -> None:
        for chunk in chunks:
            self.write(chunk)

    def flush(self) -> None:
        pending, self._pending = self._pending, []
        if pending and not self._transport.is_closing():
            self._transport.write(b"".join(pending))

    def close(self) -> None:
        self.flush()  # what was written before close still goes out
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """What one client may hold at the HTTP layer before any credential is checked: the bytes
    and seconds of a request's head (request line and headers), and how many connections
    without a client certificate (users) may be open at once. Connections with a certificate of
    the deployment's CA (the servers, the operator) are never counted against the cap, so a flood
    of anonymous connections leaves the operator's ``/healthz`` and ``/metrics`` answering."""

    #: Request line plus headers; a user's request needs a few hundred bytes (a 16 KiB head is
    #: what common front ends allow).
    max_head_bytes: int = 16 << 10
    #: From a connection's start (after TLS), or from the first byte of a request on a kept-alive
    #: connection, until its head is complete (idle kept-alive connections have uvicorn's own timeout).
    head_timeout_s: float = 10.0
    #: From the end of a user's request head until its body is complete (a user's body is at
    #: most 64 KiB). Certified peers are not timed: a batch between servers may be large.
    body_timeout_s: float = 30.0
    #: Open connections without a client certificate; further ones get 503 and are closed at once.
    max_user_connections: int = 1024

    def __post_init__(self) -> None:
        for name, low in (("max_head_bytes", 1024), ("max_user_connections", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InvalidParameterError(f"{name} must be an integer >= {low}, got {value!r}")
        for name in ("head_timeout_s", "body_timeout_s"):
            t = getattr(self, name)
            if isinstance(t, bool) or not isinstance(t, int | float) or not 0 < t <= 3600:
                raise InvalidParameterError(f"{name} must be a number of seconds in (0, 3600], got {t!r}")

    def user_connection_cap(self) -> int:
        """:attr:`max_user_connections`, lowered to fit the process's file-descriptor limit (less
        :data:`FD_RESERVE` for the state, the transcript, peers and the operator)."""
        try:
            import resource

            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        except (ImportError, OSError, ValueError):
            return self.max_user_connections
        if soft == resource.RLIM_INFINITY:
            return self.max_user_connections
        return max(1, min(self.max_user_connections, int(soft) - FD_RESERVE))


#: File descriptors kept out of the users' connection cap.
FD_RESERVE = 64
#: Seconds a refused connection is kept for its answer to leave before it is dropped.
REFUSAL_LINGER_S = 0.5
REASONS = {408: "Request Timeout", 431: "Request Header Fields Too Large", 503: "Service Unavailable"}


def refusal_bytes(status: int, error: FreError) -> bytes:
    """A whole HTTP/1.1 answer that closes the connection, with the typed JSON error body."""
    body = json.dumps(error_body(error)).encode()
    return (
        f"HTTP/1.1 {status} {REASONS[status]}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode() + body


class _PeerRoleLimits:
    """What :func:`_with_peer_role` adds to one of uvicorn's HTTP/1.1 protocols: the TLS peer's
    certificate role in every request's state, responses through :class:`CoalescedWrites`, and
    the listener's :class:`ConnectionLimits` (each refusal counted by ``on_refused(reason)``)."""

    # Set per listener by _with_peer_role (one class each, see http_protocol).
    limits: ConnectionLimits
    cap: int
    h11_protocol: bool
    users: set[Any]  # the listener's connections without a client certificate
    on_refused: Callable[[str], None] | None

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)
        from fre_protocol.drivers.net.certs import peer_role

        ssl_object = transport.get_extra_info("ssl_object")
        peer = ssl_object.getpeercert() if ssl_object is not None else None
        role = peer_role(peer)
        self.app_state = {**self.app_state, "peer_role": role}
        # Requests' cycles take the protocol's transport: flow control keeps the raw one.
        self.transport = CoalescedWrites(transport, self.loop)
        self.awaiting_head, self.head_bytes, self.head_timer, self.body_timer = True, 0, None, None
        if role is None:
            if len(type(self).users) >= self.cap:
                self.refuse(503, UnavailableError(
                    f"this service holds its cap of {self.cap} connections without a client certificate; retry later"
                ), "user_connection_cap")
                return
            type(self).users.add(self)
        self.arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        type(self).users.discard(self)
        self.disarm_head_timer()
        self.disarm_body_timer()
        super().connection_lost(exc)

    # -- the head of each request: bounded in bytes and seconds -------------------------------
    def head_pending(self) -> bool:
        if self.h11_protocol:
            import h11

            return self.conn.their_state is h11.IDLE  # type: ignore[no-any-return]
        return bool(self.awaiting_head)

    def arm_head_timer(self) -> None:
        if self.head_timer is None:
            self.head_timer = self.loop.call_later(self.limits.head_timeout_s, self.head_timed_out)

    def disarm_head_timer(self) -> None:
        timer, self.head_timer = getattr(self, "head_timer", None), None
        if timer is not None:
            timer.cancel()

    def head_timed_out(self) -> None:
        self.head_timer = None
        if self.head_pending() and not self.transport.is_closing():
            self.refuse(408, SlowRequestError(
                f"a request's line and headers must arrive within {self.limits.head_timeout_s:g} s, they did not"
            ), "head_timeout")

    def data_received(self, data: bytes) -> None:
        was_pending = self.head_pending()
        if was_pending:
            self.arm_head_timer()
            self.head_bytes += len(data)
        super().data_received(data)
        # Checked after parsing: the parser holds at most one read beyond the limit.
        if self.head_pending() and self.head_bytes > self.limits.max_head_bytes and not self.transport.is_closing():
            self.refuse(431, head_too_large(self.limits), "head_too_large")
        elif not self.head_pending():
            self.disarm_head_timer()
            # h11 takes a whole head that came in one read whatever its size: measured here.
            if self.h11_protocol and was_pending and head_size(self.scope) > self.limits.max_head_bytes:
                self.refuse(431, head_too_large(self.limits), "head_too_large")

    def on_headers_complete(self) -> None:  # httptools only
        self.awaiting_head = False
        self.disarm_head_timer()
        if len(self.url) + head_size({"headers": self.headers}) > self.limits.max_head_bytes:
            self.refuse(431, head_too_large(self.limits), "head_too_large")
            # Stops the parser (uvicorn's answer to a parser error finds the connection closed).
            raise TooLargeError("request head over the limit")
        super().on_headers_complete()
        if self.app_state.get("peer_role") is None:  # a user's body is timed as well
            self.body_timer = self.loop.call_later(self.limits.body_timeout_s, self.body_timed_out)

    def on_message_complete(self) -> None:  # httptools only
        super().on_message_complete()
        self.disarm_body_timer()
        self.awaiting_head, self.head_bytes = True, 0

    def disarm_body_timer(self) -> None:
        timer, self.body_timer = getattr(self, "body_timer", None), None
        if timer is not None:
            timer.cancel()

    def body_timed_out(self) -> None:
        self.body_timer = None
        if self.transport.is_closing():
            return
        cycle = getattr(self, "cycle", None)
        if cycle is not None and cycle.response_started:  # answered without its body: just close
            self.transport.close()
            return
        self.refuse(408, SlowRequestError(
            f"a request's body must arrive within {self.limits.body_timeout_s:g} s of its headers, it did not"
        ), "body_timeout")

    def refuse(self, status: int, error: FreError, reason: str) -> None:
        self.disarm_head_timer()
        if self.on_refused is not None:
            self.on_refused(reason)
        raw = self.transport._transport if isinstance(self.transport, CoalescedWrites) else self.transport
        self.transport.write(refusal_bytes(status, error))
        self.transport.close()
        # A TLS close waits for the client's close_notify, reading (and dropping) whatever it
        # still sends: the socket is let go once the answer has had time to leave.
        self.loop.call_later(REFUSAL_LINGER_S, raw.abort)


def _with_peer_role(
    base: type, limits: ConnectionLimits, on_refused: Callable[[str], None] | None = None
) -> type:
    """uvicorn's HTTP/1.1 protocol ``base``, with the TLS peer's certificate role (subject CN,
    checked against our CA at the handshake) in every request's ``scope["state"]["peer_role"]``,
    its responses written through :class:`CoalescedWrites`, and ``limits`` enforced (a refusal
    is counted by ``on_refused(reason)``)."""
    settings = {
        "limits": limits, "cap": limits.user_connection_cap(), "h11_protocol": issubclass(base, H11Protocol),
        "users": set(), "on_refused": staticmethod(on_refused) if on_refused is not None else None,
    }
    return type(f"PeerRole{base.__name__}", (_PeerRoleLimits, base), settings)


def head_size(scope: Any) -> int:
    """Bytes of a request's target and headers as parsed (name, value, ": " and CRLF each)."""
    target = len(scope.get("raw_path", b"")) + len(scope.get("query_string", b""))
    return target + sum(len(n) + len(v) + 4 for n, v in scope.get("headers", ()))


def head_too_large(limits: ConnectionLimits) -> TooLargeError:
    return TooLargeError(f"a request's line and headers must be at most {limits.max_head_bytes} bytes, got more")


def http_protocol(
    limits: ConnectionLimits | None = None, on_refused: Callable[[str], None] | None = None
) -> type:
    """httptools' parser (C) when installed, else h11 (pure Python, several times slower),
    with the peer's role and ``limits`` (defaults: :class:`ConnectionLimits`)."""
    limits = limits or ConnectionLimits()
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:
        return _with_peer_role(H11Protocol, limits, on_refused)
    return _with_peer_role(HttpToolsProtocol, limits, on_refused)


def peer_of(request: Request) -> str | None:
    return request.scope.get("state", {}).get("peer_role")


def require_peer(request: Request, roles: Sequence[str]) -> str:
    """The caller's certificate role, which must be one of ``roles`` (UnauthorizedError: 403)."""
    peer = peer_of(request)
    if peer not in roles:
        raise UnauthorizedError(f"this endpoint takes requests from {list(roles)}, got client certificate {peer!r}")
    return str(peer)


def check_round(request: Request, round_id: str) -> None:
    got = request.headers.get(ROUND_ID)
    if got != round_id:
        raise ProtocolStateError(f"request is for round {got!r}, this service runs round {round_id!r}")


def request_id(request: Request) -> str:
    rid = request.headers.get(REQUEST_ID, "")
    if not 1 <= len(rid) <= 128 or not rid.isprintable():
        raise InvalidParameterError(f"header {REQUEST_ID} must be 1-128 printable characters, got {rid[:32]!r}")
    return rid


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused as soon as it exceeds ``limit`` bytes (TooLargeError: 413); a
    connection closed before the body is whole (a user's body timeout) is SlowRequestError."""
    from starlette.requests import ClientDisconnect

    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise TooLargeError(f"body must be at most {limit} bytes, got content-length {declared}")
    parts, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise TooLargeError(f"body must be at most {limit} bytes, got more")
            parts.append(chunk)
    except ClientDisconnect:
        raise SlowRequestError(f"the connection closed after {size} bytes of the body, before its end") from None
    return b"".join(parts)


def octets(data: bytes, status: int = 200) -> Response:
    return Response(content=data, status_code=status, media_type=OCTETS)


class ServiceBase(ABC):
    """The parts of a service that do not depend on its role."""

    role: str

    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        self.settings = config.round
        self.metrics = Metrics()
        self.requests = self.metrics.counter(
            "fre_requests_total", "requests answered, by endpoint and HTTP status", labels=("endpoint", "status")
        )
        self.rejections = self.metrics.counter(
            "fre_rejections_total", "requests or messages refused, by reason", labels=("reason",)
        )
        self.phase_seconds = self.metrics.counter(
            "fre_phase_seconds_total", "seconds spent in each protocol step", labels=("step",)
        )
        self.ready = threading.Event()
        # Every change to the role's state happens under this lock, in log order.
        self.lock = threading.Lock()

    def state_path(self, name: str) -> Path:
        """A file in the state directory, created owner-only (keys and shares live there)."""
        d = self.config.state_dir / self.settings.round_id
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = d / name
        if not path.exists():
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        return path

    # -- endpoints --------------------------------------------------------------------------------
    @abstractmethod
    def routes(self) -> list[Route]:
        """The role's own endpoints (health, readiness, metrics and costs are added to them)."""

    def endpoint(self, name: str, fn: Handler) -> Handler:
        """Wrap a handler: typed errors → JSON with their status; every answer counted."""

        async def wrapped(request: Request) -> Response:
            try:
                response = await fn(request)
            except FreError as exc:
                status = http_status(exc)
                self.rejections.inc(reason=type(exc).__name__)
                response = JSONResponse(error_body(exc), status_code=status)
            self.requests.inc(endpoint=name, status=str(response.status_code))
            return response

        return wrapped

    def app(self) -> Starlette:
        async def healthz(request: Request) -> Response:
            return PlainTextResponse("ok")

        async def readyz(request: Request) -> Response:
            if not self.ready.is_set():
                return PlainTextResponse("starting", status_code=503)
            return PlainTextResponse("ready")

        async def metrics(request: Request) -> Response:
            # Operator-private: the counts tell how many users took part and how many requests
            # each phase had (the proxy's), which the DP release does not cover.
            require_peer(request, ("operator",))
            self.update_gauges()
            return PlainTextResponse(self.metrics.render(), media_type="text/plain; version=0.0.4")

        async def costs(request: Request) -> Response:
            require_peer(request, ("operator",))
            return JSONResponse(self.costs())

        base = [
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/metrics", self.endpoint("metrics", metrics)),
            Route("/v1/costs", self.endpoint("costs", costs), methods=["GET"]),
        ]
        # The role's routes first: they take nearly every request (matched in order).
        return Starlette(routes=self.routes() + base)

    def costs(self) -> dict[str, Any]:
        """The role's metered CPU seconds and counts per operation (operator only)."""
        return {}

    def update_gauges(self) -> None:
        """Refresh gauges (queue depths) before the metrics are rendered; none by default."""
        return None

    def timed(self, step: str) -> Any:
        return _StepTimer(self.phase_seconds, step)


class _StepTimer:
    def __init__(self, counter: Any, step: str) -> None:
        self.counter, self.step = counter, step

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.counter.inc(time.perf_counter() - self.t0, step=self.step)


def tls_client_context(ca: Path, *, cert: Path | None = None, key: Path | None = None) -> Any:
    """A TLS client context that trusts only the deployment's CA and, for a service, presents
    its own certificate (mutual TLS)."""
    import ssl

    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert is not None:
        ctx.load_cert_chain(str(cert), None if key is None else str(key))
    return ctx


def serve(service: ServiceBase, *, require_client_cert: bool, limits: ConnectionLimits | None = None) -> None:
    """Run the service on its configured address until SIGINT/SIGTERM (uvicorn), with the
    connection ``limits`` (defaults: :class:`ConnectionLimits`)."""
    import ssl

    import uvicorn

    cfg = service.config
    limits = limits or ConnectionLimits()
    config = uvicorn.Config(
        service.app(),
        host=cfg.host,
        port=cfg.port,
        ssl_keyfile=str(cfg.key),
        ssl_certfile=str(cfg.cert),
        ssl_ca_certs=str(cfg.ca),
        ssl_cert_reqs=ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL,
        http=http_protocol(limits, lambda reason: service.rejections.inc(reason=reason)),
        h11_max_incomplete_event_size=limits.max_head_bytes,  # the h11 fallback's own head bound
        loop="auto",  # uvloop when installed
        proxy_headers=False,  # no reverse proxy in front: forwarded-for headers mean nothing here
        server_header=False,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_keep_alive=30,
        timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)
    server.run()


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
    "ConnectionLimits",
    "PeerClient",
    "backoff",
    "PeerError",
    "http_protocol",
    "ServiceBase",
    "call_with_retries",
    "check_round",
    "octets",
    "peer_of",
    "peer_error",
    "raise_for",
    "read_body",
    "request_id",
    "require_peer",
    "serve",
    "tls_client_context",
]
