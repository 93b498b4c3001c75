"""The users' tasks: one chunk of devices a task, on a Dask worker (:mod:`fre_protocol.drivers.dask`)
or in a local worker process (:mod:`fre_protocol.drivers.user_processes`).

A task gets its chunk's rows, coins, the servers' *public* keys, the public grid and the users'
stream key (:class:`UserChunk`), builds the chunk's devices with the step layer
(:func:`fre_protocol.roles.round.devices`) and plays their part of a stage with the roles
(:mod:`fre_protocol.roles.user`, :mod:`fre_protocol.roles.windows`); it hands back the sealed
messages, the devices' phase-1 outcome, the rows they recorded and their meter
(:class:`ChunkResult`). Phase 1 is two tasks per chunk (prepare and blind; verify, finalize and
seal the tag), phase 2 one task per chunk of participants (DDG encode and share) and one per
chunk of users (seal the shares or cover). A chunk's devices between the two phase-1 tasks stay
in the worker's memory; a second task that runs elsewhere re-derives them from the chunk's
streams (the same state, so the same messages).
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from fre_protocol.components import Components, build_components
from fre_protocol.messages import TAG_BYTES, TOKEN_BYTES
from fre_protocol.roles import streams
from fre_protocol.roles.base import HeldRows, Meter, Row, Runtime, Workers
from fre_protocol.roles.broadcast import HeardBroadcast
from fre_protocol.roles.round import Phase2Plan, bucket_encodings
from fre_protocol.roles.round import devices as build_devices
from fre_protocol.roles.user import (
    PHASE1_SEALS,
    PHASE2_SEALS,
    ServerKeys,
    UserPopulation,
    UserTally,
)
from fre_protocol.roles.windows import Message, encode_participants, window_shares
from mechanism.grid import PublicGrid, single_threaded_blas
from primitives.errors import ComponentPluginError, UnknownComponentError
from primitives.randomness import RandomSource


def merge_meter(meter: Meter, part: Mapping[str, Any]) -> None:
    """Add a remote party's meter (:meth:`~fre_protocol.roles.base.Meter.to_dict`) to ``meter``."""
    for name, seconds in part["seconds"].items():
        meter.add(name, seconds, part["counts"].get(name, 0))
    for name, n in part["bytes"].items():
        meter.add_bytes(name, n)
    for name, seconds in part["wall"].items():
        meter.add_wall(name, seconds)


@dataclass(frozen=True, slots=True, kw_only=True)
class UserChunk:
    """One chunk of users as its task gets it: rows, coins, public keys and the stream key."""

    run_id: str
    index: int
    offset: int
    x: npt.NDArray[np.floating[Any]]
    coins: npt.NDArray[np.bool_]
    keys: ServerKeys
    components: dict[str, str]
    users_seed: bytes
    chunk_size: int
    cover_traffic: bool
    payloads: bool = True  # the transcript keeps messages' bytes (else their sizes only)
    # registry.register() entries among the components, for a worker that did not inherit them.
    registered: tuple[tuple[str, str, str], ...] = ()
    # Under a user unit: the slots' VOPRF inputs (padding included), laid out by the driver.
    encodings: list[bytes] | None = None

    def devices(self, encodings: Sequence[bytes]) -> Devices:
        meter, recorder, pool = Meter(), HeldRows(payloads=self.payloads), Workers(1)
        users = build_devices(
            self.x, encodings, self.coins, comps=components_for(self.components, 1, self.registered), keys=self.keys,
            rng=_users_stream(self.users_seed), runtime=Runtime(meter=meter, pool=pool, user_pool=pool, recorder=recorder),
            chunk_size=self.chunk_size, cover_traffic=self.cover_traffic, first_chunk=self.index,
        )
        return Devices(users=users, meter=meter, recorder=recorder)


@dataclass(frozen=True, slots=True, kw_only=True)
class Devices:
    """A chunk's devices in a task, with the meter and the recorder they report to."""

    users: UserPopulation
    meter: Meter
    recorder: HeldRows


@dataclass(frozen=True, slots=True, kw_only=True)
class ChunkResult:
    """What a user task hands back: its messages (connections numbered within the window), the
    devices' phase-1 outcome where it has one, the rows they recorded and their meter."""

    messages: list[Message]
    rows: list[Row]
    meter: dict[str, Any]
    tags: bytes = b""
    has_tag: npt.NDArray[np.bool_] | None = None
    submitted: npt.NDArray[np.bool_] | None = None
    tally: UserTally | None = None
    tokens: bytes = b""  # each device's contribution token (zeros where it submitted none)


#: Devices between the two phase-1 tasks, by (worker, run, chunk): several workers may share a
#: process, and a task that runs on another worker must not take what this one holds.
_HELD: dict[tuple[str, str, int], Devices] = {}
_HELD_LOCK = threading.Lock()
_COMPONENTS: dict[tuple[Any, ...], Components] = {}


def components_for(
    names: Mapping[str, str], workers: int, registered: Sequence[tuple[str, str, str]] = ()
) -> Components:
    """This process's components for these names (built once per worker process); ``registered``:
    the driver's ``registry.register()`` entries among them, added here first (plug-ins of
    installed packages are found through their entry points)."""
    key = (tuple(sorted(names.items())), workers, tuple(registered))
    with _HELD_LOCK:
        if key not in _COMPONENTS:
            try:
                _COMPONENTS[key] = build_components(names, workers=workers, registered=registered)
            except UnknownComponentError as exc:  # a plug-in the driver's process has and this worker lacks
                raise ComponentPluginError(
                    f"{exc} (in worker process {os.getpid()} on {socket.gethostname()}: a plug-in component "
                    "must be installed on every worker, e.g. `pip install` its package in each Dask worker's "
                    "environment)"
                ) from None
        return _COMPONENTS[key]


def _worker() -> str:
    """The Dask worker this task runs on; outside Dask (:mod:`fre_protocol.drivers.user_processes`), the
    process."""
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError):  # no distributed, or not in a Dask worker
        return f"process-{os.getpid()}"


def _users_stream(seed: bytes) -> RandomSource:
    """The devices' stream under the users' stream key (in test mode, every driver's)."""
    return RandomSource.seeded(seed, streams.USERS)


def _blinded(chunk: UserChunk, grid: PublicGrid) -> tuple[Devices, list[Message]]:
    with single_threaded_blas():
        encodings = chunk.encodings if chunk.encodings is not None else bucket_encodings(grid, chunk.x)
        devices = chunk.devices(encodings)
        devices.users.prepare(PHASE1_SEALS)
        return devices, devices.users.blind_requests()


def users_blind(chunk: UserChunk, grid: PublicGrid) -> ChunkResult:
    """Phase 1, first task: offline work and blinding. The devices stay in this worker's
    memory for :func:`users_submit`, which reports their costs."""
    devices, requests = _blinded(chunk, grid)
    with _HELD_LOCK:
        _HELD[(_worker(), chunk.run_id, chunk.index)] = devices
    return ChunkResult(messages=_shift(requests, chunk.offset), rows=[], meter=Meter().to_dict())


def users_submit(chunk: UserChunk, grid: PublicGrid, evaluations: list[tuple[int, bytes]]) -> ChunkResult:
    """Phase 1, second task: verify and finalize each tag, seal it to S_syn with the coin. On a
    worker that does not hold the chunk's devices (a retry elsewhere), they are re-derived, and
    the work done twice is metered twice."""
    with _HELD_LOCK:
        devices = _HELD.pop((_worker(), chunk.run_id, chunk.index), None)
    if devices is None:
        devices, _ = _blinded(chunk, grid)
    users = devices.users
    with single_threaded_blas():
        users.receive_evaluations(evaluations)
        subs = users.tag_submissions()
    tags = b"".join(t if t is not None else bytes(TAG_BYTES) for t in users.tags)
    return ChunkResult(
        messages=_shift(subs, chunk.offset), rows=devices.recorder.take(), meter=devices.meter.to_dict(),
        tags=tags, has_tag=np.array([t is not None for t in users.tags], dtype=bool),
        submitted=users.submitted.copy(), tally=users.tally(),
        tokens=b"".join(t if t is not None else bytes(TOKEN_BYTES) for t in users.tokens),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Encoded:
    """A chunk of participants' two ShareSubmissions each, by user, and what they cost (reported
    by the sealing task of the chunk of users that holds the first of them)."""

    plains: dict[int, tuple[bytes, bytes]]
    first: int
    meter: dict[str, Any]


def users_encode(
    x: npt.NDArray[np.floating[Any]], who: npt.NDArray[np.int64], tags: list[bytes | None], plan: Phase2Plan,
    noise: bool, users_seed: bytes, j: int, tokens: list[bytes | None],
) -> Encoded:
    """Phase 2: the j-th chunk of participants DDG-encodes, shares and draws contribution ids
    from its own stream ``phase2/<j>`` (as every driver does)."""
    meter = Meter()
    with single_threaded_blas():
        plains = encode_participants(
            j, who, x, tags, tokens, plan=plan, noise=noise, users_rng=_users_stream(users_seed), meter=meter
        )
    return Encoded(plains=plains, first=int(who[0]), meter=meter.to_dict())


@dataclass(frozen=True, slots=True, kw_only=True)
class SealJob:
    """A chunk's phase 2: its devices' phase-1 outcome, who in it takes part or sends cover."""

    tags: list[bytes | None]
    submitted: npt.NDArray[np.bool_]
    tokens: list[bytes | None]
    participants: list[int]
    cover: list[int]
    broadcast: bytes | None


def users_seal(
    chunk: UserChunk, job: SealJob, heard: HeardBroadcast, plan: Phase2Plan,
    encoded: list[Encoded],
) -> ChunkResult:
    """Phase 2: each participant of the chunk seals its two shares, each other online user two
    covers, with key material prepared from the chunk's stream."""
    devices = chunk.devices([b""] * len(chunk.coins))
    users = devices.users
    users.restore(job.tags, job.submitted, heard, tokens=job.tokens)
    if job.broadcast is not None:
        users.receive_broadcast(job.broadcast)  # recorded once: every device hears the same
    plains: dict[int, tuple[bytes, bytes]] = {}
    start = chunk.index * chunk.chunk_size
    for part in encoded:
        plains.update(part.plains)
        if start <= part.first < start + len(chunk.coins):
            merge_meter(devices.meter, part.meter)
    with single_threaded_blas():
        users.prepare(PHASE2_SEALS)
        out = window_shares(users, start, job.participants, [plains[i] for i in job.participants], job.cover, plan)
    return ChunkResult(messages=_shift(out, chunk.offset), rows=devices.recorder.take(), meter=devices.meter.to_dict())


def forget(run_id: str) -> int:
    """Drop a finished (or failed) run's devices still held in this worker's memory."""
    with _HELD_LOCK:
        gone = [k for k in _HELD if k[1] == run_id]
        for k in gone:
            del _HELD[k]
    return len(gone)


def _shift(messages: list[Message], offset: int) -> list[Message]:
    return [(i + offset, role, data) for i, role, data in messages] if offset else messages


__all__ = [
    "ChunkResult", "Devices", "Encoded", "SealJob", "UserChunk", "components_for", "forget", "merge_meter",
    "users_blind", "users_encode", "users_seal", "users_submit",
]
