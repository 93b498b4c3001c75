"""The proxy against clients that hold connections rather than send requests (issue 28, M3).

A running deployment whose proxy takes at most 8 connections without a client certificate, 3
seconds for a request's head and 3 more for a user's body is sent: half-open heads trickled a
line at a time (closed with 408 within the head timeout), a body trickled a byte at a time (408
within the body timeout), a head over the size limit (431, the proxy's memory barely moves),
and more anonymous connections than the cap (the extra ones get 503 and are closed, while the
operator's ``/healthz`` and ``/metrics`` still answer). Every test takes seconds.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from net_rounds import SEED, needs_net, round_settings

needs_net()

from fre_protocol.drivers.net.deploy import (  # noqa: E402
    Deployment,
    operator_client,
    start_service,
    stop_all,
    write_configs,
)
from fre_protocol.drivers.net.listener import ConnectionLimits  # noqa: E402
from fre_protocol.drivers.net.peers import tls_client_context  # noqa: E402

HEAD_TIMEOUT_S = 3.0
BODY_TIMEOUT_S = 3.0
USER_CAP = 8
#: How much the proxy's resident memory may grow while it refuses one oversized head.
MEMORY_BOUND = 8 << 20


@pytest.fixture(scope="module")
def dep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    deployment = write_configs(tmp_path_factory.mktemp("limits"), round_settings("limits"), test_seed=SEED)
    try:
        start_service(deployment, "S_tag")
        start_service(deployment, "S_syn")
        start_service(deployment, "proxy", args=["--head-timeout", str(HEAD_TIMEOUT_S),
                                                 "--body-timeout", str(BODY_TIMEOUT_S),
                                                 "--max-user-connections", str(USER_CAP)])
        yield deployment
    finally:
        stop_all(deployment, kill=True)


def user_socket(dep: Deployment) -> ssl.SSLSocket:
    """A user's TLS connection to the proxy (no client certificate), handshake done."""
    ctx = tls_client_context(dep.pki / "ca.pem")
    raw = socket.create_connection(("127.0.0.1", dep.ports["proxy"]), timeout=10)
    return ctx.wrap_socket(raw, server_hostname="localhost")


def answer_of(conn: ssl.SSLSocket, *, timeout_s: float = 5.0) -> bytes:
    """Everything the proxy sends until it closes the connection (or ``timeout_s`` passes)."""
    conn.settimeout(timeout_s)
    parts = []
    try:
        while chunk := conn.recv(65536):
            parts.append(chunk)
    except (TimeoutError, OSError):
        pass
    return b"".join(parts)


def proxy_rss(dep: Deployment) -> int:
    for line in Path(f"/proc/{dep.processes['proxy'].pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS line")


def healthz_as_operator(dep: Deployment) -> int:
    with operator_client(dep) as client:
        return int(client.get(dep.url("proxy") + "/healthz", timeout=5).status_code)


def rejections(dep: Deployment, reason: str) -> float:
    with operator_client(dep) as client:
        text = client.get(dep.url("proxy") + "/metrics").text
    key = f'fre_rejections_total{{reason="{reason}"}}'
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(key))


def test_the_limits_are_checked() -> None:
    assert ConnectionLimits().max_head_bytes == 16 << 10
    for bad in ({"max_head_bytes": 10}, {"head_timeout_s": 0}, {"body_timeout_s": -1.0}, {"max_user_connections": 0},
                {"head_timeout_s": True}):
        with pytest.raises(Exception, match=next(iter(bad))):
            ConnectionLimits(**bad)  # type: ignore[arg-type]


def test_the_user_connection_cap_fits_the_descriptor_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a lowered descriptor limit the cap leaves FD_RESERVE descriptors to the state, the
    transcript, the peers and the operator, instead of letting users' connections take them all."""
    import resource

    from fre_protocol.drivers.net.listener import FD_RESERVE

    limits = ConnectionLimits(max_user_connections=1024)
    monkeypatch.setattr(resource, "getrlimit", lambda _: (FD_RESERVE + 40, resource.RLIM_INFINITY))
    assert limits.user_connection_cap() == 40
    monkeypatch.setattr(resource, "getrlimit", lambda _: (FD_RESERVE // 2, resource.RLIM_INFINITY))
    assert limits.user_connection_cap() == 1
    monkeypatch.setattr(resource, "getrlimit", lambda _: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert limits.user_connection_cap() == 1024


def test_connections_beyond_the_cap_get_503_while_the_operator_is_still_answered(dep: Deployment) -> None:
    before = rejections(dep, "user_connection_cap")
    held = [user_socket(dep) for _ in range(USER_CAP)]
    try:
        time.sleep(0.2)  # the proxy has taken all of them
        extra = user_socket(dep)
        refused = answer_of(extra)
        extra.close()
        assert refused.startswith(b"HTTP/1.1 503"), refused[:80]
        assert b'"UnavailableError"' in refused
        assert healthz_as_operator(dep) == 200  # the operator's certificate is not counted
        assert rejections(dep, "user_connection_cap") == before + 1
    finally:
        for conn in held:
            conn.close()
    time.sleep(0.2)
    with user_socket(dep) as conn:  # freed: a user's connection is served again
        conn.sendall(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
        assert answer_of(conn).startswith(b"HTTP/1.1 200")


def test_half_open_heads_are_closed_with_408_within_the_head_timeout(dep: Deployment) -> None:
    """Five slowloris connections each send a header line every 0.3 s and never end the head:
    each is answered 408 and closed within the head timeout (3 s) plus a second."""
    conns = [user_socket(dep) for _ in range(5)]
    t0 = time.monotonic()
    closed: dict[int, float] = {}
    answers: dict[int, bytes] = {}
    for conn in conns:
        conn.sendall(b"POST /v1/phase1 HTTP/1.1\r\nhost: localhost\r\n")
    while len(closed) < len(conns) and time.monotonic() - t0 < HEAD_TIMEOUT_S + 6:
        for k, conn in enumerate(conns):
            if k in closed:
                continue
            try:
                conn.sendall(b"x-slow: 1\r\n")
                conn.settimeout(0.02)
                data = conn.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                data = b""
            closed[k], answers[k] = time.monotonic() - t0, data + answer_of(conn, timeout_s=0.5)
        time.sleep(0.3)
    for conn in conns:
        conn.close()
    assert sorted(closed) == list(range(len(conns))), f"still open after {HEAD_TIMEOUT_S + 6} s: {len(conns) - len(closed)}"
    assert max(closed.values()) <= HEAD_TIMEOUT_S + 1.0, closed
    assert all(a.startswith(b"HTTP/1.1 408") or a == b"" for a in answers.values()), answers
    assert any(a.startswith(b"HTTP/1.1 408") for a in answers.values())
    assert healthz_as_operator(dep) == 200


def test_a_trickled_body_is_closed_with_408_within_the_body_timeout(dep: Deployment) -> None:
    """A user's request (valid credential) that declares 1000 bytes of body and sends one every
    0.3 s is answered 408 and closed within the body timeout (3 s) plus a second."""
    from fre_protocol.drivers.net.deploy import credentials_for

    head = (f"POST /v1/phase1 HTTP/1.1\r\nhost: localhost\r\ncontent-length: 1000\r\n"
            f"authorization: Bearer {credentials_for(dep, 1)[0]}\r\n\r\n").encode()
    with user_socket(dep) as conn:
        conn.sendall(head)
        t0, answer, closed = time.monotonic(), b"", None
        while closed is None and time.monotonic() - t0 < BODY_TIMEOUT_S + 6:
            try:
                conn.sendall(b"a")
                conn.settimeout(0.3)
                answer = conn.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                answer = b""
            closed = time.monotonic() - t0
            answer += answer_of(conn, timeout_s=0.5)
    assert closed is not None, f"still open after {BODY_TIMEOUT_S + 6} s"
    assert closed <= BODY_TIMEOUT_S + 1.0, closed
    assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
    assert b'"SlowRequestError"' in answer
    assert healthz_as_operator(dep) == 200


def test_a_complete_head_over_the_limit_is_refused_with_431(dep: Deployment) -> None:
    with user_socket(dep) as conn:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nx-big: " + b"a" * (20 << 10) + b"\r\n\r\n")
        answer = answer_of(conn)
    assert answer.startswith(b"HTTP/1.1 431"), answer[:80]
    assert b'"TooLargeError"' in answer


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads the proxy's memory from /proc")
def test_an_endless_header_value_is_cut_off_without_the_proxy_growing(dep: Deployment) -> None:
    """A header value streamed 64 KiB at a time for up to 5 s is cut off after at most a read
    beyond the 16 KiB limit: the connection breaks within 2 s, the proxy's resident memory grows
    by less than 8 MiB, and /healthz answers at once."""
    rss0 = proxy_rss(dep)
    chunk, sent, broken = b"a" * (64 << 10), 0, None
    with user_socket(dep) as conn:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nx-big: ")
        conn.settimeout(5)
        t0 = time.monotonic()
        try:
            while time.monotonic() - t0 < 5.0:
                conn.sendall(chunk)
                sent += len(chunk)
        except OSError:  # the proxy dropped the connection (reset, broken pipe, TLS EOF)
            broken = time.monotonic() - t0
        answer = answer_of(conn, timeout_s=1.0)
    assert broken is not None, f"the proxy took {sent >> 20} MiB of one header in 5 s"
    assert broken < 2.0, broken
    assert answer == b"" or answer.startswith(b"HTTP/1.1 431"), answer[:80]
    assert proxy_rss(dep) - rss0 < MEMORY_BOUND, (rss0, proxy_rss(dep))
    t0 = time.monotonic()
    assert healthz_as_operator(dep) == 200
    assert time.monotonic() - t0 < 2.0


def test_the_h11_fallback_bounds_the_head_as_well() -> None:
    """Without httptools, uvicorn parses with h11: the same protocol class there answers a head
    that never ends 408 within the head timeout and a whole head over the limit 431 (h11 alone
    takes any head that arrives in one read), and serves an ordinary request (plain HTTP, in
    process)."""
    import threading

    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from uvicorn.protocols.http.h11_impl import H11Protocol

    from fre_protocol.drivers.net.listener import _with_peer_role

    async def hello(request: object) -> PlainTextResponse:
        return PlainTextResponse("ok")

    limits = ConnectionLimits(head_timeout_s=1.0)
    refused: list[str] = []
    listener = socket.create_server(("127.0.0.1", 0))
    config = uvicorn.Config(
        Starlette(routes=[Route("/", hello)]), http=_with_peer_role(H11Protocol, limits, refused.append),
        log_level="critical", lifespan="off", h11_max_incomplete_event_size=limits.max_head_bytes,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: server.run(sockets=[listener]), daemon=True)
    thread.start()

    def ask(data: bytes) -> bytes:
        with socket.create_connection(listener.getsockname(), timeout=5) as conn:
            conn.sendall(data)
            conn.settimeout(5)
            answer = conn.recv(65536)
        return answer

    try:
        for _ in range(100):
            if server.started:
                break
            time.sleep(0.05)
        assert ask(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").startswith(b"HTTP/1.1 200")
        t0 = time.monotonic()
        assert ask(b"GET / HTTP/1.1\r\nhost: x\r\n").startswith(b"HTTP/1.1 408")
        assert time.monotonic() - t0 < limits.head_timeout_s + 1.0
        big = b"GET / HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * (limits.max_head_bytes * 2) + b"\r\n\r\n"
        assert ask(big).startswith(b"HTTP/1.1 431")
        assert refused == ["head_timeout", "head_too_large"]
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        listener.close()
