"""The anonymizing proxy / shuffler (design §6, paper §2 "anonymizing proxy"; Bittau et al. 2017).

Every user ↔ server message passes through it. On the way in it checks the envelope's framing,
strips the sender's connection (the only place a user's identity exists), groups the batch by
recipient and permutes each group with the shuffler; a server sees only a list of ciphertexts
sealed to itself. On the way back it maps each response, by its position in the batch it
forwarded, to the connection that sent the request: these per-message handles never leave the
proxy. Its own view (what it relays) is recorded with roles only, never connections.

It is also where a user's message count is bounded. A user who contributes up to ``cap`` = c
texts owns c slots and sends exactly c messages of each kind per round (padding slots included):
a blind request to S_tag, at most one tag submission to S_syn (with its coin), and one share (or
cover) to each server. The proxy knows each connection's sender — slot s belongs to user
s // c — and refuses, typed and recorded in its view, the (c+1)-th message of a kind from one
user. A kind is what the proxy sees of a sealed message: its phase and its recipient. The
in-process drivers hand the proxy each phase of a round as one batch per group of distinct
devices (all of them, or a streaming window's), so counting per batch is counting per round.
How many messages of each kind each user sent is tallied as a histogram (operator-private).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from fre_protocol.messages import Role, SealedEnvelope, decode, message_type_name
from fre_protocol.roles.base import (
    BROADCAST,
    PHASE1,
    PHASE1_SUBMIT,
    PHASE2,
    Meter,
    Recorder,
    Row,
    Shuffler,
    status_of,
)
from fre_protocol.roles.state import Transitions, step
from mechanism.contributions import check_cap
from primitives.errors import DecodeError, ProtocolStateError, RateLimitedError
from primitives.randomness import RandomSource

VIEW = Role.PROXY.label


class ProxyState(Enum):
    """Which phase the proxy relays (:data:`PROXY_TRANSITIONS`)."""

    PHASE1 = "phase1"
    PHASE2 = "phase2"


def forwarded(phase: str) -> str:
    """The proxy's name for a batch forwarded in ``phase`` (its messages are named by phase)."""
    return f"forward:{phase}"


def routed_back(phase: str) -> str:
    return f"route_back:{phase}"


def broadcast_in(phase: str) -> str:
    return f"broadcast:{phase}"


#: The proxy's messages by phase: blind requests (and S_tag's answers routed back) and tag
#: submissions, interleaved window by window, until it relays the broadcast; then shares.
PROXY_TRANSITIONS: Transitions[ProxyState] = Transitions(
    role=VIEW,
    initial=ProxyState.PHASE1,
    table={
        forwarded(PHASE1): {ProxyState.PHASE1: ProxyState.PHASE1},
        routed_back(PHASE1): {ProxyState.PHASE1: ProxyState.PHASE1},
        forwarded(PHASE1_SUBMIT): {ProxyState.PHASE1: ProxyState.PHASE1},
        broadcast_in(BROADCAST): {ProxyState.PHASE1: ProxyState.PHASE2},
        forwarded(PHASE2): {ProxyState.PHASE2: ProxyState.PHASE2},
    },
)


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
    """The in-process proxy. States (:data:`PROXY_TRANSITIONS`; its messages are named by method
    and phase, and one that does not fit the state is refused with
    :class:`~fre_protocol.roles.state.OutOfOrderError`, and nothing happens):

    ======  ===============================================================================
    state   message → next state
    ======  ===============================================================================
    phase1  forward:phase1, route_back:phase1, forward:phase1_submit → phase1;
            broadcast:broadcast → phase2
    phase2  forward:phase2 → phase2
    ======  ===============================================================================

    :meth:`traffic` and :attr:`pending_routes` are read in any state.
    """

    TRANSITIONS = PROXY_TRANSITIONS

    def __init__(
        self,
        *,
        shuffler: Shuffler,
        rng: RandomSource,
        recorder: Recorder,
        meter: Meter,
        adversary: NetworkAdversary | None = None,
        cap: int = 1,
    ) -> None:
        self._shuffler = shuffler
        self.cap = check_cap(cap)
        # (phase, recipient) -> {messages forwarded for one user: how many users}
        self._traffic: dict[tuple[str, str], Counter[int]] = {}
        self._rng = rng
        self._recorder = recorder
        self._meter = meter
        self._adversary = adversary
        self._routes: dict[int, list[int]] = {}
        self._ids = itertools.count()
        self._state = PROXY_TRANSITIONS.initial

    @property
    def state(self) -> ProxyState:
        return self._state

    @step(lambda phase, *_, **__: forwarded(phase))
    def forward(
        self, phase: str, batch: Sequence[tuple[int, Role, bytes]]
    ) -> dict[Role, Delivery]:
        """Relay a batch of ``(connection, sender role, envelope)`` to the servers, shuffled."""
        items = list(batch)
        if self._adversary is not None:
            items = self._adversary.on_forward(phase, items)
        rows: list[Row] = []
        by_recipient: dict[Role, list[tuple[int, bytes]]] = {}
        sent: Counter[tuple[Role, int]] = Counter()
        with self._meter.timed("proxy.forward", len(items)):
            for connection, sender, data in items:
                error: Exception | None = None
                try:
                    envelope = decode(data, SealedEnvelope)
                    assert isinstance(envelope, SealedEnvelope)
                    receiver = envelope.recipient.label
                    if sender is Role.USER:
                        self._count(sent, phase, envelope.recipient, connection)
                    by_recipient.setdefault(envelope.recipient, []).append(
                        (connection, envelope.ciphertext)
                    )
                except DecodeError as exc:
                    error, receiver = exc, "unknown"
                except RateLimitedError as exc:
                    error = exc
                rows.append(
                    (VIEW, phase, sender.label, receiver, "sealed_envelope", data, status_of(error))
                )
            out: dict[Role, Delivery] = {}
            for recipient, entries in sorted(by_recipient.items()):
                order = self._shuffler.shuffle(list(range(len(entries))), self._rng)
                batch_id = next(self._ids)
                if phase == PHASE1:  # only S_tag's evaluations come back: no other batch keeps a route
                    self._routes[batch_id] = [entries[j][0] for j in order]
                out[recipient] = Delivery(batch_id, recipient, [entries[j][1] for j in order])
        for (recipient, _), n in sent.items():
            self._traffic.setdefault((phase, recipient.label), Counter())[min(n, self.cap)] += 1
        self._recorder.add(rows)
        return out

    def _count(self, sent: Counter[tuple[Role, int]], phase: str, recipient: Role, connection: int) -> None:
        """One more message of this kind from the connection's user, or RateLimitedError past the cap."""
        key = (recipient, connection // self.cap)
        sent[key] += 1
        if sent[key] > self.cap:
            raise RateLimitedError(
                f"a user may send at most cap = {self.cap} messages to {recipient.label} in {phase}, "
                f"got message {sent[key]}"
            )

    def traffic(self) -> dict[str, dict[str, int]]:
        """For each kind ``"<phase>:<recipient>"``, how many users had "1", "2", … messages of
        that kind forwarded (operator-private: the proxy's own knowledge of its connections)."""
        return {
            f"{phase}:{recipient}": {str(k): v for k, v in sorted(counts.items())}
            for (phase, recipient), counts in sorted(self._traffic.items())
        }

    @step(lambda phase, *_, **__: routed_back(phase))
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

    @step(lambda phase, *_, **__: broadcast_in(phase))
    def broadcast(self, phase: str, sender: Role, message: bytes) -> bytes:
        """A server's broadcast to every user, relayed once (recorded once)."""
        self._recorder.add(
            [(VIEW, phase, sender.label, Role.USER.label, message_type_name(message), message, "accepted")]
        )
        return message

    @property
    def pending_routes(self) -> int:
        return len(self._routes)


__all__ = [
    "PROXY_TRANSITIONS", "AnonymizingProxy", "Delivery", "NetworkAdversary", "ProxyState", "broadcast_in", "forwarded",
    "routed_back",
]
