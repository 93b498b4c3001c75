"""A server whose role object is rebuilt from its request log (S_tag and S_syn).

Each accepted request is applied to the role object and logged with its response in one step,
under the service lock, before the response is sent; a request id already in the log is answered
from it. On start the role object is rebuilt by applying the log in order (with no recording), so
``kill -9`` at any point loses nothing that was acknowledged and counts nothing twice. At the
end of the round, the party's transcript is written by applying the log once more to a fresh role
object that records into a transcript store; then the round's keys and the users' shares are
deleted from the state.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from fre_protocol.net.round import RoundContext, ServiceConfig
from fre_protocol.net.service import (
    ServiceBase,
    check_round,
    octets,
    read_body,
    request_id,
    require_peer,
)
from fre_protocol.net.state import ServiceState
from fre_protocol.net.wire import MAX_BATCH_BODY
from fre_protocol.parties.base import Meter, Recorder, Workers
from primitives.errors import ProtocolStateError
from primitives.secret import Secret

STATE_FILE = "state.sqlite"
TRANSCRIPT_FILE = "transcript.sqlite"
KEYS = "round_keys"
FINALIZED = "finalized"


class LoggedServer(ServiceBase):
    """Base of S_tag's and S_syn's services: the log, the keys, replay and the final export."""

    def __init__(self, config: ServiceConfig, *, workers: int = 2) -> None:
        super().__init__(config)
        self.ctx = RoundContext(config.round, test_seed=config.test_seed, workers=workers)
        self.state = ServiceState(self.state_path(STATE_FILE))
        self.workers = Workers(workers)
        self.meter = Meter()
        self.keys = self._round_keys()
        self.party: Any = None
        self.rebuild()
        self.ready.set()

    def costs(self) -> dict[str, Any]:
        return self.meter.to_dict()

    # -- keys -----------------------------------------------------------------------------------
    def make_keys(self) -> dict[str, bytes]:
        raise NotImplementedError

    def _round_keys(self) -> dict[str, bytes]:
        """This round's keys: made once, persisted (owner-only state file) so a restart resumes
        the round, deleted when the round ends."""
        stored = self.state.get(KEYS)
        if stored is not None:
            return {k: bytes.fromhex(v) for k, v in json.loads(stored).items()}
        if self.state.get(FINALIZED) is not None:
            return {}
        keys = self.make_keys()
        self.state.put(KEYS, json.dumps({k: v.hex() for k, v in keys.items()}).encode())
        return keys

    def key_pair(self, name: str) -> tuple[Secret[bytes], bytes]:
        if f"{name}_sk" not in self.keys:
            raise ProtocolStateError("the round has ended: its keys were deleted")
        return Secret(self.keys[f"{name}_sk"]), self.keys[f"{name}_pk"]

    # -- the log --------------------------------------------------------------------------------
    def new_party(self, recorder: Recorder) -> Any:
        raise NotImplementedError

    def apply(self, kind: str, body: bytes, *, replay: bool) -> bytes:
        """Apply one request to ``self.party``; the response (ignored on replay)."""
        raise NotImplementedError

    def rebuild(self) -> None:
        """The role object as the log leaves it (on start, and after a failed write)."""
        for name in self.progress:
            setattr(self, name, None)
        if self.state.get(FINALIZED) is not None:
            return
        self.party = self.new_party(Recorder())
        for entry in self.state.entries():
            self.apply(entry.kind, entry.body, replay=True)

    def accept(self, rid: str, kind: str, body: bytes) -> bytes:
        with self.lock:
            entry = self.state.logged(rid)
            if entry is not None:
                if entry.kind != kind or entry.body != body:
                    raise ProtocolStateError(f"request id {rid!r} was used for another request")
                return entry.response or b""
            if self.party is None:
                raise ProtocolStateError("the round has ended")
            with self.timed(kind):
                response = self.apply(kind, body, replay=False)
            try:
                self.state.append(rid, kind, body, response)
            except BaseException:
                self.rebuild()  # the role object ran ahead of the log: bring it back
                raise
            return response

    def handler(self, kind: str, peers: tuple[str, ...]) -> Any:
        async def handle(request: Request) -> Response:
            check_round(request, self.settings.round_id)
            require_peer(request, peers)
            rid = request_id(request)
            body = await read_body(request, MAX_BATCH_BODY)
            return octets(await run_in_threadpool(self.accept, rid, kind, body))

        return self.endpoint(kind, handle)

    def logged_kinds(self) -> set[str]:
        return {e.kind for e in self.state.entries()}

    # -- the end of the round -------------------------------------------------------------------
    def finalize(self, *, artifacts: dict[str, Any], share_kinds: tuple[str, ...]) -> Path:
        """Write the party's transcript from its log, then delete the round's keys and the
        users' shares; returns the transcript's path."""
        from fre_protocol.net.transcript import write_party_transcript

        path = self.state_path(TRANSCRIPT_FILE)
        write_party_transcript(
            path, role=self.role, ctx=self.ctx, replay=self._replay_recorded, artifacts=artifacts,
        )
        # One transaction: a restart between deleting the shares and marking the round
        # finalized would replay a log without its shares and fail to rebuild.
        self.state.forget(share_kinds, delete=[KEYS], put={FINALIZED: b"1"})
        self.keys = {}
        return path

    #: Attributes that hold the role's progress through the round (reset for a replay).
    progress: tuple[str, ...] = ("party",)

    def _replay_recorded(self, recorder: Recorder) -> None:
        """Apply the whole log to a fresh role object that records, leaving the live one alone."""
        saved = {name: getattr(self, name) for name in self.progress}
        for name in self.progress:
            setattr(self, name, None)
        self.party = self.new_party(recorder)
        try:
            for entry in self.state.entries():
                self.apply(entry.kind, entry.body, replay=True)
        finally:
            for name, value in saved.items():
                setattr(self, name, value)
