"""The proxy as an HTTPS service: an Oblivious-HTTP-style relay that also batches and shuffles.

Users talk to it over TLS (no client certificate) and authenticate with a credential, which
never leaves the proxy; it talks to the servers over mutual TLS. What it does:

* **admits** each user request (credential checked, at most one request of each kind per
  credential per round — the rate limit that stops anyone using S_tag as a tagging oracle —,
  envelope framing and recipient checked) and logs it durably before answering 202 with a ticket
  (16 random bytes in hex: row ids would count the requests, dummies included); a refused request
  is kept as its digest and size, and a credential refused :data:`REFUSAL_BUDGET` times is
  answered 429 without its body being read;
* **forwards** windows (``window_count`` requests or ``window_seconds``, whichever first) of
  phase-1 requests and phase-2 shares, each window shuffled, as one batch per server; the batch is
  logged before it is sent and re-sent with the same id until the server acknowledges it, so a
  crash on either side neither loses nor duplicates a message;
* **holds** the tag submissions until phase 1 closes, then shuffles them together with S_tag's
  dummy submissions (so S_syn cannot separate the dummies by arrival), forwards them, has S_syn
  release the tags and relays the broadcast;
* **closes** phase 2: forwards what is left and has S_syn aggregate and publish.

Phases close at the round's deadlines or when the operator asks (``POST /v1/admin/close``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fre_protocol.drivers.net.peers import PeerClient
from fre_protocol.drivers.net.proxy_admission import (
    Admission,
    check_ticket,
    read_credential_key,
    wait_seconds,
)
from fre_protocol.drivers.net.proxy_log import (
    BROADCAST_KEY,
    CLOSING1,
    CLOSING2,
    DOCUMENT_KEY,
    DONE,
    OPEN1,
    OPEN2,
    PHASE1,
    PHASE2,
    PHASE_KEY,
    RELEASE_KEY,
    ROUTES,
    SCHEMA,
    SIGNED_DOCUMENT_KEY,
    SUBMIT,
    record_item,
)
from fre_protocol.drivers.net.proxy_view import ProxyView
from fre_protocol.drivers.net.round import RoundContext, RoundDocument, ServiceConfig
from fre_protocol.drivers.net.service import (
    Handler,
    ServiceBase,
    octets,
    read_body,
    require_peer,
)
from fre_protocol.drivers.net.state import GroupCommit, ServiceState
from fre_protocol.drivers.net.transcript import LiveTranscript, party_header
from fre_protocol.drivers.net.web_static import web_routes
from fre_protocol.drivers.net.wire import (
    MAX_USER_BODY,
    NotReadyError,
    UnauthorizedError,
    decode_batch,
    encode_batch,
)
from fre_protocol.messages import Role, SealedEnvelope, decode_as
from mechanism.run_files import TRANSCRIPT_FILE
from primitives.errors import InvalidParameterError, ProtocolStateError


class ProxyService(Admission, ProxyView, ServiceBase):
    role = Role.PROXY.label

    def __init__(self, config: ServiceConfig, *, workers: int = 2) -> None:
        super().__init__(config)
        self.ctx = RoundContext(config.round, test_seed=config.test_seed, workers=workers)
        assert config.credential_key is not None
        self._credential_key = read_credential_key(config.credential_key)
        self.state = ServiceState(self.state_path("state.sqlite"), schema=SCHEMA)
        self.commits = GroupCommit(self.state)
        self.peers = PeerClient(config)
        self._rng = self.ctx.seeds.secret("proxy/shuffle")
        self._batches = int(self.state.query("SELECT COUNT(*) FROM batches")[0][0])  # type: ignore[arg-type]
        logged_phase = self.state.get(PHASE_KEY)
        # The round's phase, read by every admission: kept here as well as in the state, and
        # only ever moved forward inside the transaction that logs it (see _set_phase).
        self._phase = OPEN1 if logged_phase is None else logged_phase.decode()
        self._step = threading.Lock()  # one forwarding step at a time
        self._stop = threading.Event()
        self.queue_depth = self.metrics.gauge("fre_queue_depth", "admitted messages not yet forwarded", labels=("kind",))
        self._pump: threading.Thread | None = None
        # The proxy's view, appended batch by batch as batches are acknowledged (see _transcribe).
        self.live = LiveTranscript(lambda: self.state_path(TRANSCRIPT_FILE), lambda: party_header(self.ctx, party=self.role))
        self._transcribed = 0  # the last batch (seq) in it
        self._windows: dict[str, float] = {}  # when each kind's current window opened
        # Users waiting on a phase-1 answer, by item: each batch of answers, once logged, is
        # handed to them (from the pump thread, through the event loop) in one call.
        self._waiters: dict[int, list[asyncio.Future[bytes]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        # Refusals per credential this round (the state's count, read before any other work).
        self._refusals = {str(c): int(n) for c, n in self.state.query("SELECT credential, n FROM refusals")}  # type: ignore[call-overload]
        if self._phase == DONE:
            self.state.compact()  # a restart after the round: the cleared credentials' pages go
        # The join page's files (checked now: a proxy told to serve an unbuilt page does not start).
        self._web: list[Route] = [] if config.web_root is None else web_routes(config.web_root)

    # -- start-up: the round document --------------------------------------------------------------
    def start(self) -> None:
        """Assemble the round document from the servers' keys, have S_tag and S_syn sign it,
        resume any unfinished step, and start forwarding."""
        if self.state.get(DOCUMENT_KEY) is None:
            tag = json.loads(self.peers.get(Role.S_TAG.label, "/v1/keys"))
            syn = json.loads(self.peers.get(Role.S_SYN.label, "/v1/keys"))
            doc = RoundDocument(
                settings=self.settings, voprf_public_key=bytes.fromhex(tag["voprf"]),
                tag_box_key=bytes.fromhex(tag["S_tag_box"]), syn_box_key=bytes.fromhex(syn["S_syn_box"]),
            )
            self.state.put(DOCUMENT_KEY, doc.encode())
        document = self.state.get(DOCUMENT_KEY)
        assert document is not None
        self.state.put(SIGNED_DOCUMENT_KEY, self._bind_document(RoundDocument.decode(document)))
        if self.state.get(PHASE_KEY) is None:
            self._set_phase(OPEN1)
        self.ready.set()
        self._pump = threading.Thread(target=self._pump_loop, name="proxy-pump", daemon=True)
        self._pump.start()

    def _bind_document(self, document: RoundDocument) -> bytes:
        """The round document signed by S_tag and S_syn, as users get it: each server fixes and
        signs it (after checking it carries its keys), then gets it back with both signatures,
        which it checks before it takes phase traffic. Every step is idempotent (a restart
        repeats it); the proxy checks the signatures too, so it never serves a bad document."""
        from fre_protocol.drivers.net.signing import SIGNERS, RoleSignature, SignedRoundDocument

        body = document.encode()
        signatures = {
            server: RoleSignature.from_dict(server, json.loads(self.peers.put(server, "/v1/round", body)))
            for server in SIGNERS
        }
        signed = SignedRoundDocument(document=document, signatures=signatures)
        signed.verify(ca=self.config.ca, settings=self.settings)
        for server in SIGNERS:
            self.peers.put(server, "/v1/round", signed.encode())
        return signed.encode()

    def stop(self) -> None:
        self._stop.set()
        if self._pump is not None:
            self._pump.join(timeout=30)
        self.commits.close()

    @property
    def phase(self) -> str:
        return self._phase

    def _set_phase(self, phase: str, conn: Any = None) -> None:
        """Log the round's new phase (in ``conn``'s transaction when given). The copy in memory
        moves before the commit: an admission racing the change is refused, never let in late."""
        if conn is None:
            with self.state.transaction() as own:
                self._set_phase(phase, own)
            return
        conn.execute("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", (PHASE_KEY, phase.encode()))
        self._phase = phase

    # -- forwarding -------------------------------------------------------------------------------
    def _pump_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception as exc:  # noqa: BLE001 - logged, retried on the next tick
                self.rejections.inc(reason=f"forward:{type(exc).__name__}")
            self._stop.wait(min(0.05, self.settings.window_seconds / 4))

    def step(self, *, flush: bool = False) -> None:
        """One forwarding step: re-send unacknowledged batches, form and send due windows, and
        close a phase whose deadline has passed."""
        with self._step:
            self._resend()
            phase = self.phase
            if phase == OPEN1:
                self._form(PHASE1, flush=flush)
            elif phase == OPEN2:
                self._form(PHASE2, flush=flush)
            self._resend()
            if phase in (OPEN1, CLOSING1, OPEN2):
                self._transcribe()
        now = time.time()
        if phase == OPEN1 and self.settings.phase1_deadline is not None and now >= self.settings.phase1_deadline:
            self.close_phase1()
        elif phase == OPEN2 and self.settings.phase2_deadline is not None and now >= self.settings.phase2_deadline:
            self.close_phase2()
        elif phase in (CLOSING1, CLOSING2):
            (self.close_phase1 if phase == CLOSING1 else self.close_phase2)()

    def _pending(self, kind: str) -> list[tuple[int, str]]:
        rows = self.state.query("SELECT id, recipient FROM items WHERE kind = ? AND batch_id IS NULL ORDER BY id", (kind,))
        return [(int(r[0]), str(r[1])) for r in rows]  # type: ignore[call-overload]

    def _waiting(self, kind: str) -> int:
        """How many admitted items of ``kind`` no batch holds yet."""
        rows = self.state.query("SELECT COUNT(*) FROM items WHERE kind = ? AND batch_id IS NULL", (kind,))
        return int(rows[0][0])  # type: ignore[call-overload]

    def _form(self, kind: str, *, flush: bool) -> None:
        """Cut the pending items of ``kind`` into shuffled batches per recipient when a window
        is full, when its oldest item has waited ``window_seconds``, or on ``flush``."""
        # Counted first (an index lookup): the items themselves are read once the window is due.
        waiting = self._waiting(kind)
        if not waiting:
            return
        due = flush or waiting >= self.settings.window_count
        if not due:
            started = self._windows.setdefault(kind, time.monotonic())
            due = time.monotonic() - started >= self.settings.window_seconds
        if not due:
            return
        self._windows.pop(kind, None)
        pending = self._pending(kind)
        by_recipient: dict[str, list[int]] = {}
        for item, recipient in pending:
            by_recipient.setdefault(recipient, []).append(item)
        for recipient, items in sorted(by_recipient.items()):
            for lo in range(0, len(items), self.settings.window_count):
                self._new_batch(kind, recipient, items[lo : lo + self.settings.window_count])

    def _new_batch(self, kind: str, recipient: str, items: list[int]) -> None:
        """Shuffle ``items`` and log them as one batch (sent by :meth:`_resend`)."""
        order = self.ctx.comps.shuffler.shuffle(items, self._rng.child(f"batch/{self._batches}"))
        self._batches += 1
        self._log_batch(kind, recipient, order)

    def _log_batch(self, kind: str, recipient: str, *orders: list[int]) -> None:
        """Log batches (each an ordered list of items) in one transaction: a crash leaves all of
        them to send or none, so what one shuffle mixed is never split."""
        with self.state.transaction() as conn:
            for order in orders:
                batch_id = f"{self.settings.round_id}/{kind}/{uuid.uuid4().hex}"
                conn.execute(
                    "INSERT INTO batches (batch_id, kind, recipient, item_ids) VALUES (?, ?, ?, ?)",
                    (batch_id, kind, recipient, json.dumps(order)),
                )
                conn.executemany("UPDATE items SET batch_id = ? WHERE id = ?", [(batch_id, i) for i in order])

    def _resend(self) -> None:
        for batch_id, kind, recipient, item_ids in self.state.query(
            "SELECT batch_id, kind, recipient, item_ids FROM batches WHERE done = 0 ORDER BY seq"
        ):
            self._send(str(batch_id), str(kind), str(recipient), json.loads(str(item_ids)))

    def _send(self, batch_id: str, kind: str, recipient: str, order: list[int]) -> None:
        marks = ",".join("?" * len(order))
        rows = dict(self.state.query(f"SELECT id, envelope FROM envelopes WHERE id IN ({marks})", order))  # noqa: S608
        # The servers take the ciphertexts: the envelope's recipient was checked at admission.
        body = encode_batch([SealedEnvelope.ciphertext_of(bytes(rows[i])) for i in order])  # type: ignore[arg-type]
        answer = self.peers.post(recipient, ROUTES[(kind, recipient)], body, request_id=batch_id)
        answered: list[tuple[bytes, int]] = []
        with self.state.transaction() as conn:
            if kind == PHASE1:
                responses = decode_batch(answer)
                if len(responses) != len(order):
                    raise ProtocolStateError(f"S_tag answered {len(responses)} of {len(order)} requests in batch {batch_id}")
                answered = list(zip(responses, order, strict=True))
                conn.executemany("UPDATE items SET response = ? WHERE id = ?", answered)
            conn.execute("UPDATE batches SET done = 1 WHERE batch_id = ?", (batch_id,))
        # Read after the commit: a waiter sets the loop before it reads the state, so one that
        # missed these answers there is registered by the time the hand-over runs.
        loop = self._loop
        if answered and loop is not None:
            loop.call_soon_threadsafe(self._hand_over, answered)

    def _hand_over(self, answered: list[tuple[bytes, int]]) -> None:
        """Give each waiting user its answer (on the event loop)."""
        for response, item in answered:
            for waiter in self._waiters.pop(item, ()):
                if not waiter.done():
                    waiter.set_result(response)

    # -- closing the phases -----------------------------------------------------------------------
    def close_phase1(self) -> None:
        """Forward what is left, mix in the dummies, have S_syn release, relay the broadcast.
        Every step is idempotent (fixed request ids, logged state), so a restart resumes here."""
        rid = self.settings.round_id
        with self._step:
            if self.phase not in (OPEN1, CLOSING1):
                return
            self._set_phase(CLOSING1)
            self._form(PHASE1, flush=True)
            self._resend()
            with self.timed("dummies"):
                if self.state.get("dummies_in") is None:
                    dummies = decode_batch(self.peers.post(Role.S_TAG.label, "/v1/dummies", b"", request_id=f"{rid}/dummies"))
                    with self.state.transaction() as conn:
                        for data in dummies:
                            record_item(conn, SUBMIT, None, hashlib.sha256(data).digest(), Role.DUMMY_USER.label,
                                        decode_as(data, SealedEnvelope).recipient.label, data)
                        conn.execute("INSERT INTO kv (key, value) VALUES ('dummies_in', x'01')")
            with self.timed("submissions"):
                # All submissions at once, one shuffle: users' and dummies' arrive mixed.
                pending = [i for i, _ in self._pending(SUBMIT)]
                if pending:
                    order = self.ctx.comps.shuffler.shuffle(pending, self._rng.child("submissions"))
                    size = self.settings.window_count
                    self._log_batch(SUBMIT, Role.S_SYN.label, *(order[lo : lo + size] for lo in range(0, len(order), size)))
                self._resend()
            with self.timed("release"):
                if self.state.get(BROADCAST_KEY) is None:
                    broadcast = self.peers.post(Role.S_SYN.label, "/v1/release", b"", request_id=f"{rid}/release")
                    self.state.put(BROADCAST_KEY, broadcast)
                # S_tag hears that the tags are released and fetches the full list from S_syn
                # (servers' channel); the proxy relays the compact broadcast to the users only.
                self.peers.post(Role.S_TAG.label, "/v1/broadcast", b"", request_id=f"{rid}/broadcast")
            self._set_phase(OPEN2)

    def close_phase2(self) -> bytes:
        """Forward the last shares and have S_syn aggregate and publish; the release document."""
        with self._step:
            if self.phase == DONE:
                return self.state.get(RELEASE_KEY) or b""
            if self.phase not in (OPEN2, CLOSING2):
                raise ProtocolStateError(f"phase 2 cannot close in {self.phase}")
            self._set_phase(CLOSING2)
            self._form(PHASE2, flush=True)
            self._resend()
            # Everything the proxy saw is in by now: its transcript is written while S_syn
            # aggregates (a restart before DONE writes it again).
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="proxy-transcript") as pool:
                transcript = pool.submit(self._timed_transcript)
                with self.timed("aggregate"):
                    release = self.peers.post(
                        Role.S_SYN.label, "/v1/aggregate", b"", request_id=f"{self.settings.round_id}/aggregate"
                    )
                transcript.result()
            self.state.put(RELEASE_KEY, release)
            with self.timed("forget"):
                with self.state.transaction() as conn:
                    # Who took part is the proxy's to forget once the round is out.
                    conn.execute("UPDATE items SET credential = NULL")
                    conn.execute("DELETE FROM refusals")
                    self._set_phase(DONE, conn)
                self._refusals.clear()
                self.state.compact()  # and so are the pages (and WAL frames) that still held it
            return release

    async def wait_answer(self, ticket: str, user: str, wait_s: float) -> bytes | None:
        """S_tag's answer to ``user``'s phase-1 request under ``ticket``, waiting up to ``wait_s``
        seconds (≤ 30) for the batch that carries it; None if it has not come by then."""
        self._loop = asyncio.get_running_loop()  # before the read: see _send
        rows = self.state.query("SELECT id, credential, response FROM items WHERE ticket = ? AND kind = ?", (ticket, PHASE1))
        if not rows or rows[0][1] != user:
            raise UnauthorizedError("no phase-1 request of this credential under that ticket")
        if rows[0][2] is not None:
            return bytes(rows[0][2])  # type: ignore[arg-type]
        item = int(rows[0][0])  # type: ignore[call-overload]
        wait_s = min(30.0, max(0.0, wait_s))
        if wait_s == 0:
            return None
        waiter: asyncio.Future[bytes] = self._loop.create_future()
        self._waiters.setdefault(item, []).append(waiter)
        try:
            return await asyncio.wait_for(waiter, wait_s)
        except TimeoutError:
            return None
        finally:
            waiting = self._waiters.get(item)
            if waiting is not None and waiter in waiting:
                waiting.remove(waiter)
                if not waiting:
                    del self._waiters[item]

    # -- endpoints --------------------------------------------------------------------------------
    def update_gauges(self) -> None:
        for kind in (PHASE1, SUBMIT, PHASE2):
            self.queue_depth.set(self._waiting(kind), kind=kind)

    def routes(self) -> list[Route]:
        async def broadcast(request: Request) -> Response:
            data = self.state.get(BROADCAST_KEY)
            if data is None or self.phase in (OPEN1, CLOSING1):
                raise NotReadyError("phase 1 has not closed yet")
            return octets(data)

        document = self._stored(SIGNED_DOCUMENT_KEY, "the round document is not assembled yet")
        release = self._stored(RELEASE_KEY, "the round has not been released yet")
        # Users' requests first, in the order of how many come: a request is matched route by route.
        return [
            Route("/v1/phase2", self._admitting(PHASE2), methods=["POST"]),
            Route("/v1/submit", self._admitting(SUBMIT), methods=["POST"]),
            Route("/v1/phase1", self._admitting(PHASE1), methods=["POST"]),
            Route("/v1/phase1/{ticket}", self.endpoint("phase1_answer", self._answer), methods=["GET"]),
            Route("/v1/round", self.endpoint("round", document), methods=["GET"]),
            Route("/v1/broadcast", self.endpoint("broadcast", broadcast), methods=["GET"]),
            Route("/v1/release", self.endpoint("release", release), methods=["GET"]),
            Route("/v1/admin/close", self.endpoint("close", self._close), methods=["POST"]),
            Route("/v1/admin/status", self.endpoint("status", self._status), methods=["GET"]),
            *self._web,  # last: the page's files never stand before a user's request
        ]

    def _admitting(self, kind: str) -> Handler:
        """The endpoint of a user's request of ``kind``: admitted and logged, answered 202 with a
        ticket (a phase-1 request with ``?wait=``: with S_tag's answer when it comes in time)."""

        async def handle(request: Request) -> Response:
            user = self.credential(request)
            self.within_budget(user)
            wait = wait_seconds(request) if kind == PHASE1 else None  # a bad one is refused before admission
            body = await read_body(request, MAX_USER_BODY)
            items = await self.commits.submit_async(self.admission(kind, user, body))
            ticket = items[0][1]
            if wait is not None:
                # Long poll: the answer comes with the request's window, saving the user a request.
                data = await self.wait_answer(ticket, user, wait)
                if data is not None:
                    return octets(data)
            return Response(b'{"ticket":"%s"}' % ticket.encode(), status_code=202, media_type="application/json")

        return self.endpoint(kind, handle)

    def _stored(self, key: str, missing: str) -> Handler:
        """An endpoint serving the JSON document logged under ``key`` (NotReadyError until then)."""

        async def handle(request: Request) -> Response:
            data = self.state.get(key)
            if data is None:
                raise NotReadyError(missing)
            return Response(data, media_type="application/json")

        return handle

    async def _answer(self, request: Request) -> Response:
        user = self.credential(request)
        ticket = check_ticket(request.path_params["ticket"])
        data = await self.wait_answer(ticket, user, wait_seconds(request) or 0.0)
        if data is None:
            raise NotReadyError("S_tag has not answered this request yet")
        return octets(data)

    async def _close(self, request: Request) -> Response:
        require_peer(request, ("operator",))
        phase = request.query_params.get("phase")
        if phase not in ("1", "2"):
            raise InvalidParameterError(f"phase must be 1 or 2, got {phase!r}")
        if phase == "1":
            await run_in_threadpool(self.close_phase1)
            return JSONResponse({"phase": self.phase})
        data = await run_in_threadpool(self.close_phase2)
        return Response(data, media_type="application/json")

    async def _status(self, request: Request) -> Response:
        require_peer(request, ("operator",))
        counts = dict(self.state.query("SELECT kind, COUNT(*) FROM items GROUP BY kind"))
        refused = dict(self.state.query("SELECT status, COUNT(*) FROM refused GROUP BY status"))
        # Refusals past a credential's first REFUSALS_KEPT are counted, not kept.
        total = int(self.state.query("SELECT COALESCE(SUM(n), 0) FROM refusals")[0][0])  # type: ignore[call-overload]
        return JSONResponse({"phase": self.phase, "items": counts, "refused": refused, "refusals": total})


__all__ = ["ProxyService"]
