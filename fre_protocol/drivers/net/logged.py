"""A server whose role object is rebuilt from its request log (S_tag and S_syn).

Each accepted request is applied to the role object and logged with its response in one step,
under the service lock, before the response is sent; a request id already in the log is answered
from it. On start the role object is rebuilt by applying the log in order (with no recording), so
``kill -9`` at any point loses nothing that was acknowledged and counts nothing twice. The rows
the role object records while applying a request are logged with it and then appended to the
party's transcript store, so the end of the round only closes the store (a restarted service
starts it again from its log); then the round's keys and the users' shares are deleted from the
state and dropped from memory, and every new request is refused.

The round document is fixed once per round (``PUT /v1/round`` is write-once) and signed with the
key of the server's role certificate (:mod:`fre_protocol.drivers.net.signing`); phase traffic is taken only
once the server has checked the other server's signature on the same document.
"""

from __future__ import annotations

import json
from abc import abstractmethod
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fre_protocol.drivers.net.round import RoundContext, RoundDocument, ServiceConfig
from fre_protocol.drivers.net.service import (
    ServiceBase,
    check_round,
    octets,
    read_body,
    request_id,
    require_peer,
)
from fre_protocol.drivers.net.signing import (
    SIGNERS,
    RoleSignature,
    SignedRoundDocument,
    sign_document,
)
from fre_protocol.drivers.net.state import ServiceState
from fre_protocol.drivers.net.transcript import LiveTranscript, party_header, write_party_transcript
from fre_protocol.drivers.net.wire import MAX_BATCH_BODY, decode_batch
from fre_protocol.messages import Role
from fre_protocol.roles.base import HeldRows, Meter, Recorder, Workers
from mechanism.run_files import TRANSCRIPT_FILE
from primitives.errors import ProtocolStateError, VerificationError
from primitives.secret import Secret

STATE_FILE = "state.sqlite"
KEYS = "round_keys"
FINALIZED = "finalized"
DOCUMENT_KEY = "round_document"
#: This server's signature on the document it holds, and the document with both servers' checked signatures.
SIGNATURE_KEY, SIGNED_KEY = "round_signature", "signed_round_document"
PHASE2_KIND = "phase2"


class LoggedServer(ServiceBase):
    """Base of S_tag's and S_syn's services: the log, the keys, replay and the final export."""

    def __init__(self, config: ServiceConfig, *, workers: int = 2) -> None:
        super().__init__(config)
        self.ctx = RoundContext(config.round, test_seed=config.test_seed, workers=workers)
        self.state = ServiceState(self.state_path(STATE_FILE))
        self.workers = Workers(workers)
        self.meter = Meter()
        self.keys = self._round_keys()
        self.bound = self.state.get(SIGNED_KEY) is not None  # both signatures checked: phase traffic may come
        self.collector = HeldRows()
        self.live = LiveTranscript(lambda: self.state_path(TRANSCRIPT_FILE), lambda: party_header(self.ctx, party=self.role))
        self.party: Any = None
        self.rebuild()
        self.ready.set()

    def costs(self) -> dict[str, Any]:
        return self.meter.to_dict()

    # -- keys -----------------------------------------------------------------------------------
    @abstractmethod
    def make_keys(self) -> dict[str, bytes]:
        """This round's key pairs, by name (``<name>_sk``, ``<name>_pk``)."""

    def _round_keys(self) -> dict[str, bytearray]:
        """This round's keys: made once, persisted (owner-only state file) so a restart resumes
        the round, deleted when the round ends. Held as bytearrays so :meth:`forget_keys` can
        overwrite them."""
        stored = self.state.get(KEYS)
        if stored is not None:
            return {k: bytearray.fromhex(v) for k, v in json.loads(stored).items()}
        if self.state.get(FINALIZED) is not None:
            return {}
        keys = self.make_keys()
        self.state.put(KEYS, json.dumps({k: v.hex() for k, v in keys.items()}).encode())
        return {k: bytearray(v) for k, v in keys.items()}

    def key_pair(self, name: str) -> tuple[Secret[bytes], bytes]:
        if f"{name}_sk" not in self.keys:
            raise ProtocolStateError(f"{self.role}'s round has ended: its keys were deleted")
        return Secret(bytes(self.keys[f"{name}_sk"])), bytes(self.keys[f"{name}_pk"])

    def forget_keys(self) -> None:
        """Drop the round's secrets from memory once they are deleted from the state: the role
        object (which holds the keys and the users' shares) and the progress attributes go, and
        the key buffers this service owns are overwritten with zeros.

        What Python cannot promise: the role object and its sealing/VOPRF helpers got immutable
        ``bytes`` copies of the keys (and the shares live in numpy arrays and ``bytes`` inside
        it); dropping the last reference frees that memory without overwriting it, and copies
        made along the way (JSON and hex strings when the keys were stored or loaded, SQLite's
        page cache, the allocator's free lists) stay until reused. What this does guarantee is
        that nothing in the service can use the keys any more: no request reaches a role object.
        """
        for name in self.progress:
            setattr(self, name, None)
        for buffer in self.keys.values():
            buffer[:] = bytes(len(buffer))
        self.keys = {}

    # -- the round document -----------------------------------------------------------------------
    @abstractmethod
    def own_keys(self, doc: RoundDocument) -> bool:
        """Whether ``doc`` carries this server's public keys for the round."""

    def round_document(self) -> RoundDocument:
        data = self.state.get(DOCUMENT_KEY)
        if data is None:
            raise ProtocolStateError(f"{self.role} has not received the round document")
        return RoundDocument.decode(data)

    def accept_document(self, signed: SignedRoundDocument) -> dict[str, str]:
        """Fix the round document (the first one that carries this round's settings and this
        server's keys; another one later is refused, the same one answered again) and sign it;
        when it comes with both servers' signatures, check them, after which phase traffic is
        taken. The answer: the digest and this server's certificate and signature."""
        doc = signed.document
        with self.lock:
            stored = self.state.get(DOCUMENT_KEY)
            if stored is not None:
                held = RoundDocument.decode(stored)
                if held.digest != doc.digest:
                    raise ProtocolStateError(
                        f"{self.role} already holds this round's document (digest {held.digest}); "
                        f"another one (digest {doc.digest}) is refused: the document is fixed once per round"
                    )
            else:
                doc.check_settings(self.settings)
                if not self.keys or not self.own_keys(doc):
                    raise VerificationError(f"the round document does not carry {self.role}'s keys for this round")
                self.state.put(DOCUMENT_KEY, doc.encode())
            own = self.state.get(SIGNATURE_KEY)
            if own is None:
                mine = sign_document(doc, role=self.role, key=self.config.key, cert=self.config.cert)
                self.state.put(SIGNATURE_KEY, json.dumps(mine.to_dict()).encode())
            else:
                mine = RoleSignature.from_dict(self.role, json.loads(own))
            if signed.signatures:
                # Both, this server's own included: what is stored is what users will check.
                signed.verify(ca=self.config.ca, roles=SIGNERS)
                self.state.put(SIGNED_KEY, signed.encode())
                self.bound = True
            return {"digest": doc.digest, "role": self.role, **mine.to_dict()}

    def require_bound(self, kind: str) -> None:
        """ProtocolStateError until the other server's signature on the round document is checked."""
        if not self.bound:
            others = [r for r in SIGNERS if r != self.role]
            raise ProtocolStateError(
                f"{self.role} takes no {kind} request before it has checked {' and '.join(others)}'s signature "
                "on the round document (the proxy PUTs the signed document to /v1/round)"
            )

    def document_routes(self) -> list[Route]:
        """``PUT /v1/round`` (proxy): the public round document, which must carry this round's
        settings and this server's keys, with or without both servers' signatures (see
        :meth:`accept_document`); ``GET /v1/round``: the document this server holds, signed when
        it has checked the signatures."""

        async def put(request: Request) -> Response:
            check_round(request, self.settings.round_id)
            require_peer(request, (Role.PROXY.label,))
            body = await read_body(request, 1 << 20)
            signed = SignedRoundDocument.decode(body)
            return JSONResponse(await run_in_threadpool(self.accept_document, signed))

        async def get(request: Request) -> Response:
            signed = self.state.get(SIGNED_KEY)
            if signed is not None:
                return Response(signed, media_type="application/json")
            return Response(self.round_document().encode(), media_type="application/json")

        return [
            Route("/v1/round", self.endpoint("round", put), methods=["PUT"]),
            Route("/v1/round", self.endpoint("round", get), methods=["GET"]),
        ]

    # -- the log --------------------------------------------------------------------------------
    @abstractmethod
    def new_party(self, recorder: Recorder, meter: Meter) -> Any:
        """A fresh role object recording into ``recorder`` and metering into ``meter``."""

    @abstractmethod
    def apply(self, kind: str, body: bytes, *, replay: bool) -> bytes:
        """Apply one request to ``self.party``; the response (ignored on replay)."""

    def receive_shares(self, body: bytes, *, before: str) -> bytes:
        """A batch of sealed shares (or cover) for the role, once phase 2's plan is fixed."""
        plan = self.phase2_plan(PHASE2_KIND, before=before)
        self.party.receive_shares(decode_batch(body), sharing=plan.sharing, dim=plan.width)
        return b""

    def phase2_plan(self, kind: str, *, before: str) -> Any:
        """Phase 2's plan; ProtocolStateError when ``kind`` comes ``before`` the tags are fixed."""
        plan = self.phase2
        if plan is None:
            raise ProtocolStateError(f"{kind} before {before}")
        return plan

    #: Phase 2's plan, fixed once the role has seen the released tags (None before).
    phase2: Any = None

    #: Attributes that hold the role's progress through the round (reset when it is rebuilt).
    progress: tuple[str, ...] = ("party",)

    def rebuild(self) -> None:
        """The role object as the log leaves it (on start, and after a failed write)."""
        for name in self.progress:
            setattr(self, name, None)
        if self.state.get(FINALIZED) is not None:
            return
        self.party = self.new_party(self.collector, self.meter)
        for entry in self.state.entries():
            self.apply(entry.kind, entry.body, replay=True)
            self.collector.take()  # already in the view, as recorded when it was accepted

    def accept(self, rid: str, kind: str, body: bytes) -> bytes:
        with self.lock:
            entry = self.state.logged(rid)
            if entry is not None:
                if entry.kind != kind or entry.body != body:
                    raise ProtocolStateError(f"request id {rid!r} was used for another request")
                return entry.response or b""
            if self.party is None:
                raise ProtocolStateError(
                    f"{self.role}'s round {self.settings.round_id!r} has ended: its keys were deleted, "
                    f"no new {kind} request is taken"
                )
            self.collector.take()
            with self.timed(kind):
                response = self.apply(kind, body, replay=False)
            try:
                self.log(rid, kind, body, response, self.collector.take())
            except BaseException:
                self.rebuild()  # the role object ran ahead of the log: bring it back
                raise
            return response

    def log(self, rid: str, kind: str, body: bytes, response: bytes | None, rows: list[Any]) -> None:
        """Log one accepted request with the view rows it recorded, then append those rows to
        the live transcript (from the start of the view when the store is not open yet)."""
        self.state.append(rid, kind, body, response, rows)
        if not self.live.is_open:
            if not self.live.open():
                return  # written from the log at the end of the round
            rows = list(self.state.view_rows())  # every row so far, these included
        self.live.extend(rows)

    def handler(self, kind: str, peers: tuple[str, ...]) -> Any:
        async def handle(request: Request) -> Response:
            check_round(request, self.settings.round_id)
            require_peer(request, peers)
            self.require_bound(kind)
            rid = request_id(request)
            body = await read_body(request, MAX_BATCH_BODY)
            return octets(await run_in_threadpool(self.accept, rid, kind, body))

        return self.endpoint(kind, handle)

    def logged_kinds(self) -> set[str]:
        return {str(row[0]) for row in self.state.query("SELECT DISTINCT kind FROM log")}

    # -- the end of the round -------------------------------------------------------------------
    def finalize(self, *, artifacts: dict[str, Any], share_kinds: tuple[str, ...]) -> Path:
        """Close the party's transcript (written from its log if it was not kept live), then
        delete the round's keys and the users' shares; returns the transcript's path."""
        path = self.state_path(TRANSCRIPT_FILE)
        with self.timed("transcript"):
            if self.live.is_open:
                self.live.finish(artifacts)
            else:
                write_party_transcript(path, role=self.role, ctx=self.ctx, rows=self.state.view_rows(), artifacts=artifacts)
                self.live.finished = True
        # One transaction: a restart between deleting the shares and marking the round
        # finalized would replay a log without its shares and fail to rebuild. The view is in
        # the transcript now; a restart before this point writes the transcript again.
        with self.timed("forget"):
            self.state.forget(share_kinds, delete=[KEYS], put={FINALIZED: b"1"}, view=True)
        self.forget_keys()
        return path


__all__ = ["FINALIZED", "KEYS", "LoggedServer", "STATE_FILE", "TRANSCRIPT_FILE"]
