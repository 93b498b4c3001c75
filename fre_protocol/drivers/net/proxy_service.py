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
import hmac
import json
import re
import secrets
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fre_protocol.drivers.net.round import RoundContext, RoundDocument, ServiceConfig
from fre_protocol.drivers.net.service import (
    PeerClient,
    ServiceBase,
    octets,
    read_body,
    require_peer,
)
from fre_protocol.drivers.net.state import GroupCommit, ServiceState, ViewRow
from fre_protocol.drivers.net.transcript import LiveTranscript, party_header
from fre_protocol.drivers.net.wire import (
    MAX_USER_BODY,
    NotReadyError,
    RateLimitedError,
    RefusalBudgetError,
    UnauthorizedError,
    decode_batch,
    encode_batch,
)
from fre_protocol.messages import Role, SealedEnvelope, decode_as, message_type_name
from mechanism.run_files import TRANSCRIPT_FILE
from primitives.errors import DecodeError, InvalidParameterError, ProtocolStateError

PHASE1, SUBMIT, PHASE2 = "phase1", "submit", "phase2"
#: Round phases at the proxy, in order.
OPEN1, CLOSING1, OPEN2, CLOSING2, DONE = "phase1", "closing_phase1", "phase2", "closing_phase2", "released"
PHASE_KEY, DOCUMENT_KEY, BROADCAST_KEY, RELEASE_KEY = "phase", "round_document", "broadcast", "release"
SIGNED_DOCUMENT_KEY = "signed_round_document"  # what users get: the document with both servers' signatures

# An item's envelope lives in its own table: the item rows, which batching and the end of the
# round rewrite (batch_id, credential), stay small, so those updates rewrite a few pages rather
# than every envelope's.
SCHEMA = """
CREATE TABLE IF NOT EXISTS items (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    ticket TEXT UNIQUE,
    credential TEXT,
    digest BLOB NOT NULL,
    sender TEXT NOT NULL,
    recipient TEXT NOT NULL,
    batch_id TEXT,
    response BLOB
);
CREATE TABLE IF NOT EXISTS envelopes (id INTEGER PRIMARY KEY, envelope BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS items_by_credential ON items (kind, credential);
CREATE INDEX IF NOT EXISTS items_pending ON items (kind, batch_id);
CREATE TABLE IF NOT EXISTS refused (
    id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, digest BLOB NOT NULL, size INTEGER NOT NULL,
    status TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS refusals (credential TEXT PRIMARY KEY, n INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS batches (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    batch_id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,
    recipient TEXT NOT NULL,
    item_ids TEXT NOT NULL,
    done INTEGER NOT NULL DEFAULT 0
);
"""

#: A credential's refusals kept (digest, size and status) in one round; the rest are only counted.
REFUSALS_KEPT = 16
#: A credential's refusals in one round; beyond them its requests are refused (429) unread.
REFUSAL_BUDGET = 64
#: A ticket: 16 random bytes in lowercase hex, never a row id (which would count requests).
TICKET = re.compile(r"[0-9a-f]{32}")
#: The message type of a refused request in the proxy's view: its digest and size, not its body.
REFUSED_TYPE = "refused_request"

#: The transcript's phase of each kind of relayed item.
VIEW_PHASE = {PHASE1: "phase1", SUBMIT: "phase1_submit", PHASE2: "phase2"}

#: Where each kind goes and which endpoint takes it there.
ROUTES = {
    (PHASE1, Role.S_TAG.label): "/v1/phase1",
    (SUBMIT, Role.S_SYN.label): "/v1/submissions",
    (PHASE2, Role.S_TAG.label): "/v1/phase2",
    (PHASE2, Role.S_SYN.label): "/v1/phase2",
}


def record_item(conn: Any, kind: str, credential: str | None, digest: bytes, sender: str, recipient: str,
                envelope: bytes) -> tuple[int, str | None]:
    """One relayed envelope: its item row and, in the table of its own, its bytes; the item's id
    and, for a user's, its ticket (random: the ids count every request, dummies included)."""
    ticket = secrets.token_hex(16) if credential is not None else None
    cur = conn.execute(
        "INSERT INTO items (kind, ticket, credential, digest, sender, recipient) VALUES (?, ?, ?, ?, ?, ?)",
        (kind, ticket, credential, digest, sender, recipient),
    )
    conn.execute("INSERT INTO envelopes (id, envelope) VALUES (?, ?)", (cur.lastrowid, envelope))
    return int(cur.lastrowid), ticket


def record_refusal(conn: Any, kind: str, credential: str, body: bytes, error: Exception) -> int:
    """Count a refused user request against its credential and, for the first
    :data:`REFUSALS_KEPT`, keep its digest, size and typed status for the proxy's view (never the
    body: a credential could otherwise fill the disk with refused bodies); the credential's count."""
    from fre_protocol.roles.base import status_of

    n = int(conn.execute(
        "INSERT INTO refusals (credential, n) VALUES (?, 1) ON CONFLICT (credential) DO UPDATE SET n = n + 1 RETURNING n",
        (credential,),
    ).fetchone()[0])
    if n <= REFUSALS_KEPT:
        conn.execute(
            "INSERT INTO refused (kind, digest, size, status) VALUES (?, ?, ?, ?)",
            (kind, hashlib.sha256(body).digest(), len(body), status_of(error)),
        )
    return n


def refused_record(digest: bytes, size: int) -> bytes:
    """The payload of a refused request in the proxy's view: its SHA-256 and size (JSON)."""
    return json.dumps({"sha256": digest.hex(), "size": size}, separators=(",", ":")).encode()


def check_ticket(ticket: str) -> str:
    if not TICKET.fullmatch(ticket):
        raise InvalidParameterError(f"ticket must be 32 lowercase hexadecimal characters, got {len(ticket)} characters")
    return ticket


def wait_seconds(request: Request) -> float | None:
    """The ``?wait=`` seconds a user asks to wait for a phase-1 answer; None when not asked.
    (The query string is parsed only when there is one: most requests carry none.)"""
    if not request.scope.get("query_string"):
        return None
    value = request.query_params.get("wait")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not seconds >= 0:  # also refuses NaN
        raise InvalidParameterError(f"wait must be a number of seconds >= 0, got {value[:32]!r}")
    return seconds


def credential_token(key: bytes, round_id: str, user: str) -> str:
    """A user's credential for a round: ``user.MAC`` (HMAC-SHA-256 under the proxy's key)."""
    mac = hmac.digest(key, f"{round_id}/{user}".encode(), "sha256").hex()[:32]  # one call: checked per request
    return f"{user}.{mac}"


def read_credential_key(path: Path) -> bytes:
    data = path.read_bytes()
    if len(data) < 32:
        raise InvalidParameterError(f"credential key file must hold at least 32 bytes, got {len(data)}")
    return data


class ProxyService(ServiceBase):
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

    # -- admission --------------------------------------------------------------------------------
    def credential(self, request: Request) -> str:
        auth = request.headers.get("authorization", "")
        token = auth[7:] if auth.lower().startswith("bearer ") else ""
        user, _, _ = token.partition(".")
        expected = credential_token(self._credential_key, self.settings.round_id, user) if user else ""
        if not user or not hmac.compare_digest(token.encode(), expected.encode()):
            raise UnauthorizedError("a valid user credential (Authorization: Bearer) is required")
        return user

    def within_budget(self, user: str) -> None:
        """RefusalBudgetError (429) once ``user`` was refused :data:`REFUSAL_BUDGET` times this
        round: checked before its body is read, so such a request costs no work and no write."""
        if self._refusals.get(user, 0) >= REFUSAL_BUDGET:
            raise RefusalBudgetError(
                f"this credential was refused {REFUSAL_BUDGET} times in this round (the most a round allows); "
                "its requests are no longer read"
            )

    def admit(self, kind: str, user: str, body: bytes) -> list[tuple[int, str]]:
        """Log a user's request (its envelopes as items) in the next group commit; the items'
        ids and tickets. The same body again is idempotent (same items); a body of the same kind
        beyond the round's cap c is refused."""
        return self.commits.submit(self.admission(kind, user, body)).result(timeout=120)  # type: ignore[no-any-return]

    def admission(self, kind: str, user: str, body: bytes) -> Callable[[Any], Any]:
        """:meth:`admit`'s checks, run now; its write, returned for the next group commit
        (which the event loop awaits without a thread of its own)."""
        if kind == PHASE2:
            try:
                envelopes = decode_batch(body, limit=2)
            except DecodeError as exc:
                self._refuse(kind, user, body, exc)
                raise
            want = [Role.S_TAG, Role.S_SYN]
        else:
            envelopes, want = [body], [Role.S_TAG if kind == PHASE1 else Role.S_SYN]
        opened = []
        try:
            for data in envelopes:
                opened.append(decode_as(data, SealedEnvelope))
            if sorted(e.recipient for e in opened) != sorted(want):
                raise DecodeError(
                    f"{kind} must carry envelopes for {[r.label for r in want]}, got {[e.recipient.label for e in opened]}"
                )
        except DecodeError as exc:
            self._refuse(kind, user, body, exc)
            raise
        digest = hashlib.sha256(body).digest()
        open_phase = OPEN2 if kind == PHASE2 else OPEN1
        # A user holds c slots (design §4.6): c requests of each kind, padded to exactly c by the client.
        cap = self.settings.unit.cap

        def refused(conn: Any, error: Exception) -> Exception:
            self._refusals[user] = record_refusal(conn, kind, user, body, error)
            return error

        def write(conn: Any) -> Any:
            if self._phase != open_phase:  # read under the state's lock, as _set_phase writes it
                return refused(conn, ProtocolStateError(
                    f"{kind} requests are taken in {open_phase}, the round is in {self._phase}"
                ))
            rows = conn.execute(
                "SELECT id, ticket, digest FROM items WHERE kind = ? AND credential = ? ORDER BY id", (kind, user)
            ).fetchall()
            same = [(int(r[0]), str(r[1])) for r in rows if bytes(r[2]) == digest]
            if same:
                return same
            if len({bytes(r[2]) for r in rows}) >= cap:
                return refused(conn, RateLimitedError(
                    f"this credential already sent its {cap} {kind} request{'s' if cap > 1 else ''} in this round "
                    f"(the round's cap c = {cap})"
                ))
            return [
                record_item(conn, kind, user, digest, Role.USER.label, env.recipient.label, data)
                for data, env in zip(envelopes, opened, strict=True)
            ]

        return write

    def _refuse(self, kind: str, user: str, body: bytes, error: Exception) -> None:
        with self.state.transaction() as conn:
            self._refusals[user] = record_refusal(conn, kind, user, body, error)

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
                broadcast = self.state.get(BROADCAST_KEY) or b""
                self.peers.post(Role.S_TAG.label, "/v1/broadcast", broadcast, request_id=f"{rid}/broadcast")
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

    def _timed_transcript(self) -> Path:
        with self.timed("transcript"):
            return self.write_transcript()

    def write_transcript(self) -> Path:
        """Finish the proxy's view: the batches not yet in it, then every request it refused
        and the broadcast it relayed (roles only; credentials never enter it)."""
        self._transcribe()
        if not self.live.is_open:
            raise ProtocolStateError("the proxy's transcript could not be written (see its store)")
        view = self.role
        # Items no batch holds: none in a finished round (each phase's close forwards all of them).
        rows = self._item_rows("i.batch_id IS NULL")
        for kind, digest, size, status in self.state.query("SELECT kind, digest, size, status FROM refused ORDER BY id"):
            record = refused_record(bytes(digest), int(size))  # type: ignore[arg-type, call-overload]
            # Received by the proxy and taken no further (its recipient, if any, is unknowable).
            rows.append((view, VIEW_PHASE[str(kind)], Role.USER.label, self.role, REFUSED_TYPE, record, str(status)))
        broadcast = self.state.get(BROADCAST_KEY)
        if broadcast is not None:
            rows.append((view, "broadcast", Role.S_SYN.label, Role.USER.label, "released_tags", broadcast, "accepted"))
        if not self.live.extend(rows):
            raise ProtocolStateError("the proxy's transcript could not be written (see its store)")
        self.live.finish({})
        return self.state_path(TRANSCRIPT_FILE)

    def _transcribe(self) -> None:
        """Append every batch acknowledged since the last call to the proxy's view, in batch
        order (each batch's items by id, a phase-1 item followed by the answer routed back). The
        store is started again from the first batch when it is not open (a restart, a failed
        write)."""
        if self.live.finished:
            return
        if not self.live.is_open:
            if not self.live.open():
                return
            self._transcribed = 0
        for seq, batch_id, kind, done in self.state.query(
            "SELECT seq, batch_id, kind, done FROM batches WHERE seq > ? ORDER BY seq", (self._transcribed,)
        ):
            if not done:
                return  # batches are acknowledged in order: the rest wait for the next call
            rows = self._item_rows("i.kind = ? AND i.batch_id = ?", (kind, batch_id))
            if not self.live.extend(rows):
                return
            self._transcribed = int(seq)  # type: ignore[call-overload]

    def _item_rows(self, where: str, args: tuple[object, ...] = ()) -> list[ViewRow]:
        """The proxy's view rows of the relayed items ``where`` selects, by id: each envelope,
        then the answer it routed back."""
        view, rows = self.role, []
        for kind, sender, recipient, envelope, response in self.state.query(
            "SELECT i.kind, i.sender, i.recipient, e.envelope, i.response FROM items i JOIN envelopes e ON e.id = i.id "
            f"WHERE {where} ORDER BY i.id", args,  # noqa: S608 - ``where`` is one of this class's literals
        ):
            phase = VIEW_PHASE[str(kind)]
            rows.append((view, phase, str(sender), str(recipient), "sealed_envelope", bytes(envelope), "accepted"))  # type: ignore[arg-type]
            if response is not None:
                rows.append((view, phase, str(recipient), Role.USER.label, message_type_name(bytes(response)), bytes(response), "accepted"))  # type: ignore[arg-type]
        return rows

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
        def admitting(kind: str) -> Any:
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

        async def answer(request: Request) -> Response:
            user = self.credential(request)
            ticket = check_ticket(request.path_params["ticket"])
            data = await self.wait_answer(ticket, user, wait_seconds(request) or 0.0)
            if data is None:
                raise NotReadyError("S_tag has not answered this request yet")
            return octets(data)

        async def document(request: Request) -> Response:
            data = self.state.get(SIGNED_DOCUMENT_KEY)
            if data is None:
                raise NotReadyError("the round document is not assembled yet")
            return Response(data, media_type="application/json")

        async def broadcast(request: Request) -> Response:
            data = self.state.get(BROADCAST_KEY)
            if data is None or self.phase in (OPEN1, CLOSING1):
                raise NotReadyError("phase 1 has not closed yet")
            return octets(data)

        async def release(request: Request) -> Response:
            data = self.state.get(RELEASE_KEY)
            if data is None:
                raise NotReadyError("the round has not been released yet")
            return Response(data, media_type="application/json")

        async def close(request: Request) -> Response:
            require_peer(request, ("operator",))
            phase = request.query_params.get("phase")
            if phase not in ("1", "2"):
                raise InvalidParameterError(f"phase must be 1 or 2, got {phase!r}")
            if phase == "1":
                await run_in_threadpool(self.close_phase1)
                return JSONResponse({"phase": self.phase})
            data = await run_in_threadpool(self.close_phase2)
            return Response(data, media_type="application/json")

        async def status(request: Request) -> Response:
            require_peer(request, ("operator",))
            counts = dict(self.state.query("SELECT kind, COUNT(*) FROM items GROUP BY kind"))
            refused = dict(self.state.query("SELECT status, COUNT(*) FROM refused GROUP BY status"))
            # Refusals past a credential's first REFUSALS_KEPT are counted, not kept.
            total = int(self.state.query("SELECT COALESCE(SUM(n), 0) FROM refusals")[0][0])  # type: ignore[call-overload]
            return JSONResponse({"phase": self.phase, "items": counts, "refused": refused, "refusals": total})

        # Users' requests first, in the order of how many come: a request is matched route by route.
        return [
            Route("/v1/phase2", admitting(PHASE2), methods=["POST"]),
            Route("/v1/submit", admitting(SUBMIT), methods=["POST"]),
            Route("/v1/phase1", admitting(PHASE1), methods=["POST"]),
            Route("/v1/phase1/{ticket}", self.endpoint("phase1_answer", answer), methods=["GET"]),
            Route("/v1/round", self.endpoint("round", document), methods=["GET"]),
            Route("/v1/broadcast", self.endpoint("broadcast", broadcast), methods=["GET"]),
            Route("/v1/release", self.endpoint("release", release), methods=["GET"]),
            Route("/v1/admin/close", self.endpoint("close", close), methods=["POST"]),
            Route("/v1/admin/status", self.endpoint("status", status), methods=["GET"]),
        ]


__all__ = ["ProxyService", "credential_token"]
