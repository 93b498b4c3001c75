"""The proxy's own view (its transcript): every relayed envelope batch by batch, with the answer it
routed back, then every request it refused (digest and size only) and the broadcast it relayed;
credentials never enter it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fre_protocol.drivers.net.proxy_log import BROADCAST_KEY, PHASE1, PHASE2, SUBMIT
from fre_protocol.drivers.net.state import ViewRow
from fre_protocol.messages import Role, message_type_name
from mechanism.run_files import TRANSCRIPT_FILE
from primitives.errors import ProtocolStateError

#: The message type of a refused request in the proxy's view: its digest and size, not its body.
REFUSED_TYPE = "refused_request"

#: The transcript's phase of each kind of relayed item.
VIEW_PHASE = {PHASE1: "phase1", SUBMIT: "phase1_submit", PHASE2: "phase2"}


def refused_record(digest: bytes, size: int) -> bytes:
    """The payload of a refused request in the proxy's view: its SHA-256 and size (JSON)."""
    return json.dumps({"sha256": digest.hex(), "size": size}, separators=(",", ":")).encode()


class ProxyView:
    """The transcript half of :class:`~fre_protocol.drivers.net.proxy_service.ProxyService`: it
    reads the service's ``role``, ``state``, ``live`` (its :class:`LiveTranscript`),
    ``_transcribed`` (the last batch in it) and ``timed``."""

    role: str
    state: Any
    live: Any
    _transcribed: int
    timed: Any
    state_path: Any

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
            rows.append((view, "broadcast", Role.S_SYN.label, Role.USER.label, message_type_name(broadcast), broadcast, "accepted"))
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


__all__ = ["REFUSED_TYPE", "ProxyView", "refused_record"]
