"""What every service shares at the request level: typed error responses, the caller's role and
round checked, bounded body reading, health/readiness/metrics/costs endpoints
(:class:`ServiceBase`). The connection level is :mod:`fre_protocol.drivers.net.listener`'s; the
client to the other services is :mod:`fre_protocol.drivers.net.peers`'.

Trust boundaries: the servers accept only mutually authenticated TLS from the roles an endpoint
names (the proxy relays users' messages; S_syn asks S_tag for aggregates); the proxy accepts
users over TLS without a client certificate and authenticates them by credential instead.
"""

from __future__ import annotations

import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from fre_protocol.drivers.net.metrics import Metrics
from fre_protocol.drivers.net.round import ServiceConfig
from fre_protocol.drivers.net.wire import (
    OCTETS,
    REQUEST_ID,
    ROUND_ID,
    SlowRequestError,
    TooLargeError,
    UnauthorizedError,
    error_body,
    http_status,
)
from primitives.errors import FreError, InvalidParameterError, ProtocolStateError

Handler = Callable[[Request], Awaitable[Response]]


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


__all__ = [
    "Handler",
    "ServiceBase",
    "check_round",
    "octets",
    "peer_of",
    "read_body",
    "request_id",
    "require_peer",
]
