"""N users played against a deployment, many concurrent clients in one process.

The users' cryptography is the user role's own (:class:`~fre_protocol.roles.user.UserPopulation`:
blind, verify and finalize, seal, DDG-encode, share), computed in chunks; the network part sends
each user's requests with its own credential over TLS to the proxy, at most ``concurrency`` at a
time. Every request loop is bounded: retries back off exponentially (with jitter) up to the
deadline, and a retry re-sends the *same* body, which the proxy answers idempotently — a user is
never counted twice. A user whose request fails for good aborts, as on the in-process path.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import numpy.typing as npt

from fre_protocol.drivers.net.peers import backoff, peer_error, tls_client_context
from fre_protocol.drivers.net.round import RoundContext, RoundDocument, RoundSettings
from fre_protocol.drivers.net.signing import SignedRoundDocument
from fre_protocol.drivers.net.wire import encode_batch
from fre_protocol.messages import Role
from fre_protocol.roles.base import Meter, Recorder, Runtime, Workers
from fre_protocol.roles.config import RoundSpec
from fre_protocol.roles.round import RunPlan, heard_by, plan_devices, plan_run, population
from fre_protocol.roles.user import ServerKeys
from mechanism.seeds import SeedPlan
from primitives.errors import ProtocolStateError

#: How long a user's request for its phase-1 answer waits at the proxy (seconds).
WAIT = {"wait": "10"}


@dataclass
class UsersReport:
    """What the users' side saw: per step, requests, failures and wall seconds; bytes sent and
    received over HTTP (bodies), and the users' own costs (the role's meter)."""

    n_users: int
    wall: dict[str, float] = field(default_factory=dict)
    requests: dict[str, int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    retries: dict[str, int] = field(default_factory=dict)  # "step/HTTP status" (-1: no answer) -> tries
    bytes_up: int = 0
    bytes_down: int = 0
    meter: dict[str, Any] = field(default_factory=dict)
    status: dict[str, int] = field(default_factory=dict)
    #: ``(step, start, end)`` on this process's ``time.perf_counter()``, in order: the network
    #: steps and the users' own computing between them, so a sampler of the services' CPU can
    #: tell which party each step waits on.
    spans: list[tuple[str, float, float]] = field(default_factory=list)
    #: One device only (:attr:`UsersOptions.device`): each accepted request's step and body, in
    #: order, and what the device learnt of its own bucket (for its user's eyes only).
    sent: list[tuple[str, bytes]] = field(default_factory=list)
    own: dict[str, Any] = field(default_factory=dict)

    @contextmanager
    def timed(self, step: str) -> Iterator[None]:
        """Add the block's wall seconds to ``wall[step]`` and its span to ``spans``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            t1 = time.perf_counter()
            self.wall[step] = self.wall.get(step, 0.0) + t1 - t0
            self.spans.append((step, t0, t1))


class _Http:
    """The users' HTTP side: keep-alive connections (at most ``concurrency``; :func:`_each` keeps
    that many users' requests in flight), bounded retries, byte counts. aiohttp rather than
    httpx here: its client costs about a quarter of the CPU per request, and this one process
    plays every user."""

    def __init__(self, base: str, ca: Path, *, concurrency: int, deadline_s: float, report: UsersReport,
                 device: bool = False) -> None:
        self.session = aiohttp.ClientSession(
            base.rstrip("/"), connector=aiohttp.TCPConnector(limit=concurrency, ssl=tls_client_context(ca)),
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),  # the services set none: no per-request cookie filtering
        )
        self.concurrency = concurrency
        self.until: float | None = None  # while a step of many users runs: no try starts after it
        self.longest_try = aiohttp.ClientTimeout(total=60.0, connect=10.0)  # shared: most tries get it
        self.deadline_s = deadline_s
        self.report = report
        self.device = device  # one real device: keep what it sent, and stop at its first failure

    async def call(self, step: str, method: str, path: str, *, token: str | None = None, body: bytes | None = None,
                   params: dict[str, str] | None = None) -> bytes:
        """One request with retries until a final answer (2xx, or a 4xx other than 425)."""
        return (await self.call_status(step, method, path, token=token, body=body, params=params))[1]

    async def call_status(self, step: str, method: str, path: str, *, token: str | None = None,
                          body: bytes | None = None, params: dict[str, str] | None = None) -> tuple[int, bytes]:
        """:meth:`call`, with the final HTTP status."""
        headers = {"authorization": f"Bearer {token}"} if token else {}
        end = time.monotonic() + self.deadline_s
        if self.until is not None:
            end = min(end, self.until)
        attempt = 0
        while True:
            # No single try may outlive the deadline: a peer that accepts and never answers
            # would otherwise hold the user for the client's whole read timeout.
            left = max(0.001, end - time.monotonic())
            timeout = self.longest_try if left >= 60.0 else aiohttp.ClientTimeout(total=left, connect=min(10.0, left))
            status, content = -1, b""
            try:
                async with self.session.request(method, path, data=body, headers=headers, params=params,
                                                timeout=timeout) as response:
                    status, content = response.status, await response.read()
            except (TimeoutError, aiohttp.ClientError):
                status = -1
            self.report.requests[step] = self.report.requests.get(step, 0) + 1
            self.report.bytes_up += len(body or b"")
            if status > 0:
                self.report.bytes_down += len(content)
                if status < 400:
                    if self.device and body is not None:
                        self.report.sent.append((step, body))
                    return status, content
                if status != 425 and status < 500:
                    raise peer_error(status, content)
            retry = f"{step}/{status}"
            self.report.retries[retry] = self.report.retries.get(retry, 0) + 1
            attempt += 1
            pause = backoff(attempt, base_s=0.02, cap_s=1.0)
            if time.monotonic() + pause > end:
                raise ProtocolStateError(f"{step}: no answer within {self.deadline_s:.0f} s ({attempt} tries)")
            await asyncio.sleep(pause)

    async def close(self) -> None:
        await self.session.close()


async def _each(step: str, http: _Http, items: Sequence[Any], fn: Callable[[Any], Awaitable[Any]]) -> list[Any]:
    """``fn`` over every item, ``http.concurrency`` at a time (each worker takes the next item
    when its last is done: no task or semaphore wait per item), all within one deadline from
    the step's start; a failure is counted and yields None (that user aborts), the others go on."""
    report = http.report
    out: list[Any] = [None] * len(items)
    todo = iter(enumerate(items))

    async def worker() -> None:
        for k, item in todo:
            try:
                out[k] = await fn(item)
            except Exception:  # noqa: BLE001 - one user's failure is that user's
                report.failures[step] = report.failures.get(step, 0) + 1
                if getattr(http, "device", False):
                    raise  # a device alone: its failure ends its round (the caller says why)

    http.until = time.monotonic() + http.deadline_s
    try:
        with report.timed(step):
            await asyncio.gather(*(worker() for _ in range(min(http.concurrency, len(items)))))
    finally:
        http.until = None
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class UsersTarget:
    """Whom the users play against and as whom: the proxy's URL, the CA that signed the
    deployment's certificates (and the servers' signatures on the round document), the round's
    settings the users expect, one credential per user and, in test mode only, the test seed."""

    proxy_url: str
    ca: Path
    settings: RoundSettings
    credentials: Sequence[str]
    test_seed: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class UsersOptions:
    """How the client plays them, none of which changes what is released: the users' transcript
    (``transcript``), requests in flight at once, each step's deadline, the devices' threads."""

    transcript: Path | None = None
    concurrency: int = 64
    deadline_s: float = 900.0
    workers: int = 2
    #: One real device (``fre-e2t join``): its secrets come from the system's CSPRNG whatever the
    #: round's mode (a device holds no test seed), a failed request ends its round with that
    #: error, and the report keeps its requests' bodies and its own outcome.
    device: bool = False


def play_users(
    x: npt.ArrayLike,
    target: UsersTarget,
    options: UsersOptions | None = None,
    *,
    users: npt.ArrayLike | None = None,
    active: npt.ArrayLike | None = None,
    between_phases: Callable[[], None] | None = None,
) -> UsersReport:
    """Play the users of the rows of ``x`` against ``target``'s proxy; the users' report.

    One user per row, or, when the round's unit of privacy is ``user``, the users that ``users``
    (one label per row) names: each device then plays its c slots (:mod:`fre_protocol.slots`)
    with its one credential, c requests of each kind. The round document the proxy serves is
    checked against ``target.settings``, and its S_tag and S_syn signatures against the CA,
    before anything is sent (VerificationError: no user sends anything). ``between_phases`` runs
    once every user has submitted its tag (deploy-local closes phase 1 there); without it the
    users wait for the broadcast until the deadline. ``active`` marks users still online in
    phase 2 (default all): the in-process drivers' ``dropout``, given as a mask.
    """
    options = options if options is not None else UsersOptions()
    run = _plan(np.asarray(x), target, options, users=users, active=active)
    with _event_loop() as runner:
        return runner.run(_play(run, target, options, between_phases))


def _plan(
    x: npt.NDArray[Any], target: UsersTarget, options: UsersOptions, *, users: npt.ArrayLike | None,
    active: npt.ArrayLike | None,
) -> RunPlan:
    """The users' side of the round, planned as every driver plans it (:func:`plan_run`), before
    anything is sent: the slot layout, the coins' seed plan and who is online in phase 2."""
    settings = target.settings
    if x.ndim != 2 or x.shape[1] != settings.dim:
        raise ProtocolStateError(f"embeddings must be (N, {settings.dim}), got shape {x.shape}")
    online = None if active is None else np.asarray(active, dtype=bool)
    seeds = SeedPlan(public_seed=settings.public_seed) if options.device else settings.seeds(target.test_seed)
    spec = RoundSpec(
        params=settings.params, seeds=seeds, config=settings.protocol,
        unit=settings.unit, noise=settings.noise, components=settings.components, workers=options.workers,
        dropout=0.0 if online is None else (lambda n: ~online),
    )
    run = plan_run(x, spec, users=users)
    if len(target.credentials) != run.slots.n_users:
        raise ProtocolStateError(
            f"credentials must give one token per user ({run.slots.n_users}), got {len(target.credentials)}"
        )
    return run


def _event_loop() -> asyncio.Runner:
    """uvloop's event loop when installed (as the services use through uvicorn): this one
    process plays every user's requests, and uvloop's transports and TLS cost it less CPU per
    request than asyncio's own."""
    try:
        import uvloop
    except ImportError:
        return asyncio.Runner()
    return asyncio.Runner(loop_factory=uvloop.new_event_loop)


async def _play(
    run: RunPlan, target: UsersTarget, options: UsersOptions, between_phases: Callable[[], None] | None
) -> UsersReport:
    """The users' steps, in the in-process driver's order (:func:`fre_protocol.drivers.inprocess.play`)
    and through the same role methods; only the messages' way differs (HTTP, retries, deadlines)."""
    report = UsersReport(n_users=run.slots.n_users)
    http = _Http(target.proxy_url, target.ca, concurrency=options.concurrency, deadline_s=options.deadline_s,
                 report=report, device=options.device)
    store = None
    try:
        # Before anything is sent: the settings are the ones given, and S_tag and S_syn each
        # signed this document (keys included) with a certificate of their role from our CA.
        signed = SignedRoundDocument.decode(await http.call("round", "GET", "/v1/round"))
        signed.verify(ca=target.ca, settings=target.settings)
        store = _open_store(run, target, options)
        devices = _Devices(run, signed.document, store, target.credentials, http)
        with report.timed("offline"):
            devices.population.prepare()
        await devices.phase1()
        await devices.submit()
        if between_phases is not None:
            with report.timed("close_phase1"):
                await asyncio.to_thread(between_phases)
        await devices.phase2()
        devices.finish()
        return report
    finally:
        await http.close()
        if store is not None:
            store.close()


def _open_store(run: RunPlan, target: UsersTarget, options: UsersOptions) -> Any:
    """The users' transcript (their own view), when asked for."""
    if options.transcript is None:
        return None
    from fre_protocol.drivers.net.transcript import party_header
    from transcripts import TranscriptStore

    ctx = RoundContext(target.settings, test_seed=target.test_seed, workers=options.workers)
    header = party_header(ctx, party="users", extra={"n_users": run.slots.n_users, "n_slots": run.n})
    return TranscriptStore.create(options.transcript, header, overwrite=True)


class _Devices:
    """Every user's device (the role's :class:`UserPopulation`, built by :func:`population` as in
    every driver) and the HTTP moves of each step; slot i speaks with its owner's credential."""

    def __init__(self, run: RunPlan, doc: RoundDocument, store: Any, credentials: Sequence[str], http: _Http) -> None:
        self.run, self.http, self.report = run, http, http.report
        self.pool = Workers(run.workers)
        self.runtime = Runtime(meter=Meter(), pool=self.pool, user_pool=self.pool, recorder=Recorder(store))
        keys = ServerKeys(voprf_public_key=doc.voprf_public_key, tag_box_key=doc.tag_box_key, syn_box_key=doc.syn_box_key)
        self.population = population(run, keys, self.runtime, range(run.n))
        self.cap = run.slots.cap
        self.credentials = credentials

    def token(self, slot: int) -> str:
        return self.credentials[slot // self.cap]

    async def phase1(self) -> None:
        """Blind, have S_tag evaluate through the proxy, verify and finalize. Every device sends,
        then collects its answer: the proxy's windows fill by count, as they would with many
        devices online at once, rather than by time. (A long-polled request would save the second
        request, but keeping two windows of users waiting at once cost more in connections and
        wake-ups than the request saves.)"""
        http = self.http

        async def request(item: tuple[int, Role, bytes]) -> tuple[int, int]:
            i, _, envelope = item
            answer = await http.call("phase1", "POST", "/v1/phase1", token=self.token(i), body=envelope)
            return i, json.loads(answer)["ticket"]

        async def answer(item: tuple[int, int] | None) -> tuple[int, bytes] | None:
            if item is None:
                return None  # the request itself failed: this user aborts
            i, ticket = item
            return i, await http.call("phase1_answer", "GET", f"/v1/phase1/{ticket}", token=self.token(i), params=WAIT)

        with self.report.timed("blind"):
            blinded = self.population.blind_requests()
        tickets = await _each("phase1", http, blinded, request)
        answers = await _each("phase1_answer", http, tickets, answer)
        with self.report.timed("verify_finalize"):
            self.population.receive_evaluations([a for a in answers if a is not None])

    async def submit(self) -> None:
        """Each device with its coin seals its tag to S_syn, through the proxy."""

        async def submit(item: tuple[int, Role, bytes]) -> None:
            i, _, envelope = item
            await self.http.call("submit", "POST", "/v1/submit", token=self.token(i), body=envelope)

        with self.report.timed("seal_submissions"):
            submissions = self.population.tag_submissions()
        await _each("submit", self.http, submissions, submit)

    async def phase2(self) -> None:
        """Hear the broadcast; the online devices of released tags share, the others send cover."""
        run, http = self.run, self.http
        with self.report.timed("broadcast"):
            broadcast = await http.call("broadcast", "GET", "/v1/broadcast")
        with self.report.timed("encode_share_seal"):
            self.population.receive_broadcast(broadcast)
            # The devices' plan from the compact broadcast alone (each reads its own tag's count).
            plan = plan_devices(run, heard_by(run, self.population))
            shares = self.population.share_submissions(
                encoder=plan.encoder, sharing=plan.sharing, noise=run.noise, active=~run.dropped_mask,
                sigmas=plan.sigmas,
            )
        by_user: dict[int, list[bytes]] = {}
        for i, _, envelope in shares:
            by_user.setdefault(i, []).append(envelope)

        async def phase2(item: tuple[int, list[bytes]]) -> None:
            i, envelopes = item
            await http.call("phase2", "POST", "/v1/phase2", token=self.token(i), body=encode_batch(envelopes))

        await _each("phase2", http, sorted(by_user.items()), phase2)

    def finish(self) -> None:
        """The users' transcript rows out, their costs and their tally in the report."""
        self.runtime.recorder.flush()
        self.pool.close()
        self.report.meter = self.runtime.meter.to_dict()
        self.report.status.update(self.population.tally().status)
        if self.http.device:
            self.report.own = own_outcome(self.population)


def own_outcome(devices: Any) -> dict[str, Any]:
    """What a single device learnt of its own bucket: its bucket's encoding, its tag, whether it
    submitted it, the count the broadcast gives it, and whether it contributed. Its user's to
    see (``fre-e2t join --show-bucket``), nobody else's."""
    tag = devices.tags[0]
    count = devices.heard.query(tag) if devices.heard is not None else None
    return {
        "bucket": devices.encodings[0].hex(), "tag": None if tag is None else tag.hex(),
        "status": devices.status[0], "submitted": bool(devices.submitted[0]), "count": count,
        "contributed": bool(devices.participants.size), "cover": bool(devices.cover.size),
    }


async def fetch_round(proxy_url: str, ca: Path, *, deadline_s: float = 60.0) -> RoundSettings:
    """The settings of the round the proxy serves, once S_tag and S_syn have each signed its
    document with a certificate of their role from ``ca`` (VerificationError otherwise): what a
    device that was given only the proxy's address and the CA trusts."""
    report = UsersReport(n_users=1)
    http = _Http(proxy_url, ca, concurrency=1, deadline_s=deadline_s, report=report, device=True)
    try:
        signed = SignedRoundDocument.decode(await http.call("round", "GET", "/v1/round"))
    finally:
        await http.close()
    signed.verify(ca=ca)
    return signed.document.settings


__all__ = ["UsersOptions", "UsersReport", "UsersTarget", "fetch_round", "own_outcome", "play_users"]
