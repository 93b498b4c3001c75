"""S_tag's dummy user: TSDLap padding of the sub-threshold tag histogram (design §4.5; paper §6.1,
Algorithm 5, following Nebula).

For each count level c ∈ {1, …, ⌈τ⌉−1} it draws Z_c ~ TSDLap(ε0, δ0, 1) fresh random 32-byte tags
(the size and distribution of a real VOPRF output) and submits each of them c times, sealed to
S_syn through the proxy like any user's submission. A dummy tag ends at count c < τ, so dummies
never change the released set; one user moves at most two level counts by one, so the padded
histogram S_syn sees is (2ε0, 2δ0)-DP. Each dummy submission carries a random token hash, as a
user's carries H(t) (design §6.8): the same size and format, and no token behind it.
"""

from __future__ import annotations

import time
from enum import Enum
from typing import Any

from fre_protocol.messages import TAG_BYTES, TOKEN_HASH_BYTES, Role, SealedEnvelope, TagSubmission
from fre_protocol.roles.base import Channel, Meter, Workers, chunks
from fre_protocol.roles.state import Transitions, step
from primitives.randomness import RandomSource

#: Connection ids of the dummy user's submissions at the proxy (distinct from users' 0..N-1).
DUMMY_CONNECTION = -1


class DummyState(Enum):
    """Where the dummy user stands (:data:`DUMMY_TRANSITIONS`)."""

    READY = "ready"
    SUBMITTED = "submitted"


#: The dummy user submits its padding once per round.
DUMMY_TRANSITIONS: Transitions[DummyState] = Transitions(
    role=Role.DUMMY_USER.label,
    initial=DummyState.READY,
    table={"submissions": {DummyState.READY: DummyState.SUBMITTED}},
)


class DummyUser:
    """S_tag's dummy user. States (:data:`DUMMY_TRANSITIONS`; a message in any other state is
    refused with :class:`~fre_protocol.roles.state.OutOfOrderError`, and nothing happens):

    =========  =======================================
    state      message → next state
    =========  =======================================
    ready      submissions (the padding) → submitted
    submitted  nothing
    =========  =======================================

    :meth:`summary` is read in any state.
    """

    TRANSITIONS = DUMMY_TRANSITIONS

    def __init__(
        self,
        *,
        generator: Any,
        channel: Channel,
        syn_box_key: bytes,
        rng: RandomSource,
        workers: Workers,
        meter: Meter,
    ) -> None:
        self.generator = generator
        self._channel = channel
        self._key = syn_box_key
        self._rng = rng
        self._workers = workers
        self._meter = meter
        self.plan: dict[int, int] = {}
        self._state = DUMMY_TRANSITIONS.initial

    @property
    def state(self) -> DummyState:
        return self._state

    @property
    def epsilon0(self) -> float:
        return float(self.generator.epsilon0)

    @property
    def delta0(self) -> float:
        return float(self.generator.delta0)

    @step("submissions")
    def submissions(self, tau: float) -> list[tuple[int, Role, bytes]]:
        """The sealed dummy submissions for threshold τ, grouped by tag (the proxy shuffles)."""
        from primitives.dummies.tsdlap import dummy_submissions

        self.plan = self.generator.dummy_plan(tau, self._rng.child("plan"))
        tags = dummy_submissions(self.plan, self._rng.child("tags"), tag_size=TAG_BYTES)
        # A stream of its own: the plan, tags and seals draw what they drew before.
        hashes = self._rng.child("token_hashes").random_bytes(TOKEN_HASH_BYTES * len(tags))
        width = TOKEN_HASH_BYTES
        channel, key = self._channel, self._key
        seal_rng = self._rng.child("seals")

        def work(job: tuple[int, range]) -> list[tuple[int, Role, bytes]]:
            index, span = job
            t0 = time.perf_counter()
            # Seals from the dummy user's own source, per fixed-size chunk, like the users' (a
            # seeded run then reproduces every envelope, whatever the worker count).
            seals = channel.prepare_seals(key, len(span), seal_rng.child(f"chunk/{index}"))
            plains = [
                TagSubmission(tag=tags[j], token_hash=hashes[width * j : width * (j + 1)]).encode()
                for j in span
            ]
            out = [
                (DUMMY_CONNECTION, Role.DUMMY_USER, SealedEnvelope(recipient=Role.S_SYN, ciphertext=c).encode())
                for c in (channel.seal_prepared(seal, p) for seal, p in zip(seals, plains, strict=True))
            ]
            self._meter.add("dummy.seal", time.perf_counter() - t0, len(span))
            return out

        parts = self._workers.map(work, list(enumerate(chunks(len(tags), 2048))), desc="dummy user: seal dummy tags")
        out = [item for part in parts for item in part]
        self._meter.add("dummy.messages", 0.0, len(out))
        self._meter.add_bytes("dummy.bytes", sum(len(e) for _, _, e in out))
        return out

    def summary(self) -> dict[str, Any]:
        return {
            "epsilon0": self.epsilon0,
            "delta0": self.delta0,
            "shift": int(self.generator.shift),
            "levels": len(self.plan),
            "dummy_tags": int(sum(self.plan.values())),
            "dummy_submissions": int(sum(c * z for c, z in self.plan.items())),
        }


__all__ = ["DUMMY_CONNECTION", "DUMMY_TRANSITIONS", "DummyState", "DummyUser"]
