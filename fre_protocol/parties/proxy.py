"""The anonymizing proxy / shuffler (SPEC §6, paper §2 "anonymizing proxy"; Bittau et al. 2017).

Every user ↔ server message passes through it. On the way in it checks the envelope's framing,
strips the sender's connection (the only place a user's identity exists), groups the batch by
recipient and permutes each group with the shuffler; a server sees only a list of ciphertexts
sealed to itself. On the way back it maps each response, by its position in the batch it
forwarded, to the connection that sent the request: these per-message handles never leave the
proxy. Its own view (what it relays) is recorded with roles only, never connections.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from fre_protocol.messages import Role, SealedEnvelope, decode, message_type_name
from fre_protocol.parties.base import Meter, Recorder, Row, Shuffler, status_of
from primitives.errors import DecodeError, ProtocolStateError
from primitives.randomness import RandomSource

VIEW = Role.PROXY.label

class NetworkAdversary:
    """A network attacker at the proxy, for robustness tests; this base passes everything on.

    :meth:`on_forward` sees each incoming batch ``[(connection, sender role, envelope)]`` of a
    phase before the proxy handles it, :meth:`on_response` each batch of responses
    ``[(connection, response)]`` before users receive it; both return what is delivered instead
    (they may drop, duplicate, replay, tamper with or inject messages).
    """

    def on_forward(self, phase: str, items: list[tuple[int, Role, bytes]]) -> list[tuple[int, Role, bytes]]:
        return items

    def on_response(self, phase: str, pairs: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
        return pairs


@dataclass(frozen=True, slots=True)
class Delivery:
    """A shuffled batch for one server: ciphertexts only, and the proxy's batch handle."""

    batch_id: int
    recipient: Role
    ciphertexts: list[bytes]


class AnonymizingProxy:
    def __init__(
        self,
        *,
        shuffler: Shuffler,
        rng: RandomSource,
        recorder: Recorder,
        meter: Meter,
        adversary: NetworkAdversary | None = None,
    ) -> None:
        self._shuffler = shuffler
        self._rng = rng
        self._recorder = recorder
        self._meter = meter
        self._adversary = adversary
        self._routes: dict[int, list[int]] = {}
        self._ids = itertools.count()

    def forward(
        self, phase: str, batch: Sequence[tuple[int, Role, bytes]]
    ) -> dict[Role, Delivery]:
        """Relay a batch of ``(connection, sender role, envelope)`` to the servers, shuffled."""
        items = list(batch)
        if self._adversary is not None:
            items = self._adversary.on_forward(phase, items)
        rows: list[Row] = []
        by_recipient: dict[Role, list[tuple[int, bytes]]] = {}
        with self._meter.timed("proxy.forward", len(items)):
            for connection, sender, data in items:
                error: Exception | None = None
                try:
                    envelope = decode(data, SealedEnvelope)
                    assert isinstance(envelope, SealedEnvelope)
                    by_recipient.setdefault(envelope.recipient, []).append(
                        (connection, envelope.ciphertext)
                    )
                    receiver = envelope.recipient.label
                except DecodeError as exc:
                    error, receiver = exc, "unknown"
                rows.append(
                    (VIEW, phase, sender.label, receiver, "sealed_envelope", data, status_of(error))
                )
            out: dict[Role, Delivery] = {}
            for recipient, entries in sorted(by_recipient.items()):
                order = self._shuffler.shuffle(list(range(len(entries))), self._rng)
                batch_id = next(self._ids)
                self._routes[batch_id] = [entries[j][0] for j in order]
                out[recipient] = Delivery(batch_id, recipient, [entries[j][1] for j in order])
        self._recorder.add(rows)
        return out

    def route_back(
        self, phase: str, delivery: Delivery, responses: Sequence[bytes]
    ) -> list[tuple[int, bytes]]:
        """Responses (one per position of ``delivery``) → ``(connection, response)`` pairs."""
        routes = self._routes.pop(delivery.batch_id, None)
        if routes is None:
            raise ProtocolStateError(f"batch {delivery.batch_id} has no pending route (answered twice?)")
        if len(responses) != len(routes):
            raise ProtocolStateError(
                f"responses must answer every forwarded message ({len(routes)}), got {len(responses)}"
            )
        sender = delivery.recipient.label
        self._recorder.add(
            (VIEW, phase, sender, Role.USER.label, message_type_name(r), r, status_of(None))
            for r in responses
        )
        pairs = list(zip(routes, responses, strict=True))
        if self._adversary is not None:
            pairs = self._adversary.on_response(phase, pairs)
        return pairs

    def broadcast(self, phase: str, sender: Role, message: bytes) -> bytes:
        """A server's broadcast to every user, relayed once (recorded once)."""
        self._recorder.add(
            [(VIEW, phase, sender.label, Role.USER.label, message_type_name(message), message, "accepted")]
        )
        return message

    @property
    def pending_routes(self) -> int:
        return len(self._routes)


__all__ = ["AnonymizingProxy", "Delivery", "NetworkAdversary"]
