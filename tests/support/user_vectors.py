"""One user's device as known-answer vectors (tests/vectors/user): the randomness it draws,
as a tape, and :func:`play_device`, which plays one device through the user role
(:class:`~fre_protocol.roles.user.UserPopulation`, a population of one) in the order every
driver plays it, with the servers' answers (S_tag's evaluation, the compact broadcast) given.

Every draw of the user role goes through :meth:`primitives.randomness.RandomSource.random_bytes`
of a labelled child stream (``prepare/0``, ``token/0``, ``phase2/0``, ``cover_token/0``).
:class:`RecordingSource` records, per stream, the bytes drawn; :class:`TapeSource` gives them
back, so a replay draws exactly the recorded randomness (and a draw past the tape fails). A
``child`` restarts at the stream's first byte, as a real stream's child does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fre_protocol.drivers.net.round import RoundDocument
from fre_protocol.roles.base import Meter, Recorder, Runtime, Workers
from fre_protocol.roles.config import RoundSpec
from fre_protocol.roles.round import bucket_encodings, devices, heard_by, plan_devices, plan_run
from fre_protocol.roles.user import ServerKeys, UserPopulation
from mechanism.grid import PublicGrid
from mechanism.seeds import SeedPlan
from primitives.errors import ProtocolStateError
from primitives.randomness import RandomSource

VECTOR_DIR = Path(__file__).resolve().parents[1] / "vectors" / "user"
#: Bumped when the layout of the vector file changes.
FORMAT = 1


class RecordingSource(RandomSource):
    """A real stream whose draws are recorded per label path (``"prepare/0"``) in ``log``."""

    __slots__ = ("_inner", "_log", "_name", "_drawn")

    def __init__(self, inner: RandomSource, log: dict[str, bytes], name: str = "") -> None:  # noqa: D107
        self._inner, self._log, self._name, self._drawn = inner, log, name, b""
        self.mode = inner.mode

    def child(self, label: str) -> RandomSource:
        name = f"{self._name}/{label}" if self._name else label
        return RecordingSource(self._inner.child(label), self._log, name)

    def random_bytes(self, n: int) -> bytes:
        data = self._inner.random_bytes(n)
        self._drawn += data
        known = self._log.get(self._name, b"")
        if not (known.startswith(self._drawn) or self._drawn.startswith(known)):
            raise AssertionError(f"stream {self._name!r} drew differently twice")
        if len(self._drawn) > len(known):
            self._log[self._name] = self._drawn
        return data


class TapeSource(RandomSource):
    """Recorded streams given back: ``streams[label path]`` is that stream's bytes, in order."""

    __slots__ = ("_streams", "_name", "_at")

    def __init__(self, streams: Mapping[str, bytes], name: str = "") -> None:  # noqa: D107
        self._streams, self._name, self._at = streams, name, 0
        self.mode = "seeded"

    def child(self, label: str) -> RandomSource:
        return TapeSource(self._streams, f"{self._name}/{label}" if self._name else label)

    def random_bytes(self, n: int) -> bytes:
        tape = self._streams.get(self._name, b"")
        if self._at + n > len(tape):
            raise ProtocolStateError(
                f"stream {self._name!r}: a draw of {n} bytes at byte {self._at} runs past the tape ({len(tape)} bytes)"
            )
        data = tape[self._at : self._at + n]
        self._at += n
        return data


@dataclass
class Played:
    """What one device sent (each message's step and bytes, in order) and learnt."""

    sent: list[tuple[str, bytes]] = field(default_factory=list)
    users: UserPopulation | None = None
    plan: Any = None
    encoding: bytes = b""


def play_device(
    document: Mapping[str, Any], embedding: Any, coin: bool, rng: RandomSource, *, evaluation: Any, broadcast: bytes
) -> Played:
    """One device, from the round document (settings and the servers' keys), its embedding,
    its sampling coin and its stream ``rng``; ``evaluation(blind_request_envelope) -> bytes``
    is S_tag's answer, ``broadcast`` the compact broadcast. The steps and their order are the
    users' client's (:func:`fre_protocol.drivers.net.users_client._play`)."""
    doc = RoundDocument.from_dict(dict(document))
    settings = doc.settings
    x = np.asarray(embedding, dtype=np.float64).reshape(1, -1)
    spec = RoundSpec(
        params=settings.params, seeds=SeedPlan(public_seed=settings.public_seed), config=settings.protocol,
        unit=settings.unit, noise=settings.noise, components=settings.components, workers=1,
    )
    run = plan_run(x, spec)
    pool = Workers(1)
    runtime = Runtime(meter=Meter(), pool=pool, user_pool=pool, recorder=Recorder())
    keys = ServerKeys(voprf_public_key=doc.voprf_public_key, tag_box_key=doc.tag_box_key, syn_box_key=doc.syn_box_key)
    encodings = bucket_encodings(PublicGrid.derive(run.seeds, run.dim, run.params), x)
    users = devices(
        x, encodings, np.array([coin]), comps=run.comps, keys=keys, rng=rng, runtime=runtime,
        chunk_size=run.cfg.chunk_size, cover_traffic=run.cfg.cover_traffic, first_chunk=0,
    )
    out = Played(users=users, encoding=encodings[0])
    try:
        users.prepare()
        ((_, _, request),) = users.blind_requests()
        out.sent.append(("blind_request", request))
        users.receive_evaluations([(0, evaluation(request))])
        out.sent += [("tag_submission", env) for _, _, env in users.tag_submissions()]
        users.receive_broadcast(broadcast)
        plan = plan_devices(run, heard_by(run, users))
        out.plan = plan
        shares = users.share_submissions(
            encoder=plan.encoder, sharing=plan.sharing, noise=run.noise, active=~run.dropped_mask, sigmas=plan.sigmas
        )
        out.sent += [("phase2", env) for _, _, env in shares]
    finally:
        pool.close()
    return out


__all__ = ["FORMAT", "VECTOR_DIR", "Played", "RecordingSource", "TapeSource", "play_device"]
