"""The services' HTTPS listener: uvicorn's HTTP/1.1 protocol with the TLS peer's certificate role
in every request, responses written in one send, and the connection limits that hold before any
credential is checked (head size and time, body time, users' connections); and :func:`serve`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from fre_protocol.drivers.net.wire import (
    SlowRequestError,
    TooLargeError,
    UnavailableError,
    error_body,
)
from primitives.errors import FreError, InvalidParameterError

if TYPE_CHECKING:
    from fre_protocol.drivers.net.service import ServiceBase


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


__all__ = ["CoalescedWrites", "ConnectionLimits", "FD_RESERVE", "http_protocol", "serve"]
