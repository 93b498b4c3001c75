"""Play the streaming run on a Dask ``distributed`` cluster: users' chunks as tasks, each server
as an actor on the worker that plays it.

Who holds what:

* **S_tag's worker** (resource ``S_tag``; without one, the first worker): an actor that makes
  S_tag's VOPRF key and sealing key there (derived from the seed plan in test mode, generated
  there otherwise), evaluates, keeps the running sums of its shares, answers the aggregation,
  and plays S_tag's dummy user.
* **S_syn's worker** (resource ``S_syn``; without one, the last worker): an actor that makes
  S_syn's sealing key there, counts tags, thresholds, keeps its running sums and reconstructs.
* **Users' workers** (resource ``users``; without any, every worker): pure tasks over one chunk
  of users, given its embedding rows, coins, the servers' *public* keys, the public grid and the
  users' stream key. A task returns that chunk's sealed messages. No task of theirs carries a
  server's secret key, which never leaves the actor's worker (only in seeded test mode, whose
  one seed makes every secret, does the test seed travel with the users' tasks).
* **The client** (this process): the proxy (shuffles, routes answers back), the transcript
  store, the streaming window loop (:func:`fre_protocol.drivers.streaming.play_windows`) and each
  device's phase-1 outcome between the phases, as the streaming driver keeps it.

Retries: a chunk's draws come from its own labelled streams under the users' stream key (the
test seed, or 32 bytes drawn here per run), so a task recomputed after its worker died returns
the same messages; the client forwards each chunk's result once, and S_syn's replay filter would
refuse a repeated submission anyway. A server's state dies with its worker: the run stops with
:class:`~primitives.errors.ProtocolStateError`, the transcript is marked aborted and nothing is
released.

Tasks: phase 1 is two tasks per chunk (prepare and blind; verify, finalize and seal the tag),
phase 2 one task per chunk of participants (DDG encode and share) and one per chunk of users
(seal the shares or cover). A device's state between the two phase-1 tasks stays in its
worker's memory; if the second task runs elsewhere, it re-derives that state from the chunk's
streams (the same state, so the same messages).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fre_protocol.components import Components, build_components
from fre_protocol.drivers.local import ProtocolResult, execute, phase1, phase1_submit, phase2
from fre_protocol.drivers.streaming import (
    DEFAULT_WINDOW_CHUNKS,
    DeviceStates,
    HeldSubmissions,
    Message,
    Roster,
    WindowContext,
    dummy_schedule,
    play_windows,
    settle_window,
    within,
)
from fre_protocol.inputs import EmbeddingShards, take_rows
from fre_protocol.messages import TAG_BYTES, TOKEN_BYTES, Role
from fre_protocol.roles.base import Meter, Recorder, Row, Runtime, Workers, chunks, size_only
from fre_protocol.roles.config import (
    ProtocolConfig,
    RoundSpec,
    RunOptions,
)
from fre_protocol.roles.proxy import AnonymizingProxy
from fre_protocol.roles.round import (
    Parties,
    Phase2Plan,
    RunPlan,
    ServerPlan,
    box_key,
    dummy_user_for,
    plan_run,
    rows,
    synthesis_server,
    tagging_key,
    tagging_server,
    user_coins,
)
from fre_protocol.roles.user import (
    PHASE1_SEALS,
    PHASE2_SEALS,
    ServerKeys,
    UserPopulation,
    UserTally,
    share_plaintexts,
)
from mechanism.grid import PublicGrid, encode_buckets, single_threaded_blas
from mechanism.params import FreParams
from mechanism.release import Release
from mechanism.seeds import SeedPlan
from primitives.errors import FreError, InvalidParameterError, ProtocolStateError
from primitives.randomness import RandomSource

#: Worker resources that name who plays what on a real cluster (``dask worker --resources``).
S_TAG_RESOURCE = "S_tag"
S_SYN_RESOURCE = "S_syn"
USERS_RESOURCE = "users"
USERS_LABEL = "users"


@dataclass(frozen=True, slots=True, kw_only=True)
class DaskCluster:
    """Where a Dask run plays: ``client``'s cluster, the scheduler at ``scheduler``, or (neither
    given) a ``LocalCluster`` of ``workers`` single-threaded worker processes started and stopped
    by the run."""

    client: Any = None
    scheduler: str | None = None
    workers: int = 2

    def __post_init__(self) -> None:
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            raise InvalidParameterError(f"dask workers must be an integer >= 1, got {self.workers!r}")


def run_dask(
    x: npt.ArrayLike | EmbeddingShards,
    spec: RoundSpec,
    options: RunOptions | None = None,
    *,
    users: npt.ArrayLike | None = None,
    window_chunks: int = DEFAULT_WINDOW_CHUNKS,
    cluster: DaskCluster | None = None,
) -> ProtocolResult:
    """:func:`~fre_protocol.drivers.streaming.run_streaming` (same arguments, same outputs and
    files) on a Dask cluster (``cluster``; default a local one of two worker processes).
    ``spec.workers``: threads each server uses on its worker. Under a user unit a chunk's task
    gets its slots' rows and VOPRF inputs (padding included), laid out here as the other drivers
    lay them out."""
    if isinstance(window_chunks, bool) or not isinstance(window_chunks, int) or window_chunks < 1:
        raise InvalidParameterError(f"window_chunks must be an integer >= 1, got {window_chunks!r}")
    cluster = cluster if cluster is not None else DaskCluster()
    run = plan_run(x, spec, users=users)
    workers = run.workers
    window = window_chunks * run.cfg.chunk_size
    with _connect(cluster.client, cluster.scheduler, cluster.workers) as dask, dask.as_current():

        def play(run: RunPlan, driver: Runtime, store: Any) -> tuple[Release, dict[str, Any]]:
            with tempfile.TemporaryDirectory(prefix="fre-devices-") as tmp:
                return _play(dask, run, driver, store, window, Path(tmp), workers)

        return execute(run, play, options)


class _connect:
    """The client to use, and the LocalCluster it owns (closed on exit) when it started one."""

    def __init__(self, client: Any, scheduler: str | None, n_workers: int) -> None:
        self._client, self._scheduler, self._n = client, scheduler, n_workers
        self._owned: list[Any] = []

    def __enter__(self) -> Any:
        if self._client is not None:
            return self._client
        try:
            from distributed import Client, LocalCluster
        except ImportError as exc:
            raise InvalidParameterError(
                "the dask engine needs Dask distributed: pip install 'fre-e2t[dask]'"
            ) from exc

        if self._scheduler is not None:
            client = Client(self._scheduler)
        else:
            cluster = LocalCluster(
                n_workers=self._n, threads_per_worker=1, processes=True, dashboard_address=None
            )
            self._owned.append(cluster)
            client = Client(cluster)
        self._owned.insert(0, client)
        return client

    def __exit__(self, *exc: object) -> None:
        for thing in self._owned:
            thing.close()


# -- who runs where ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    """Where each role runs: a worker address per server, and the users' task restrictions."""

    s_tag: str
    s_syn: str
    users_resources: dict[str, int] | None

    @classmethod
    def of(cls, client: Any) -> Placement:
        info = client.scheduler_info(n_workers=-1)["workers"]
        if not info:
            raise ProtocolStateError("the Dask cluster must have at least one worker, got none")
        addrs = sorted(info)

        def holding(resource: str) -> list[str]:
            return [a for a in addrs if (info[a].get("resources") or {}).get(resource)]

        users = holding(USERS_RESOURCE)
        return cls(
            s_tag=(holding(S_TAG_RESOURCE) or addrs)[0],
            s_syn=(holding(S_SYN_RESOURCE) or addrs)[-1],
            users_resources={USERS_RESOURCE: 1} if users else None,
        )


# -- the servers, as actors ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSpec:
    """What a server's actor is built from: public choices and the seed plan, never a key."""

    params: FreParams
    seeds: SeedPlan
    cfg: ProtocolConfig
    components: dict[str, str]
    floor: int
    dummy: tuple[float, float]
    workers: int
    payloads: bool = True  # the transcript keeps messages' bytes (else their sizes only)

    def plan(self) -> ServerPlan:
        return ServerPlan(
            params=self.params, seeds=self.seeds, cfg=self.cfg, comps=_components(self.components, self.workers),
            floor=self.floor, dummy=self.dummy,
        )


class RowBuffer(Recorder):
    """A recorder that keeps a remote party's rows until its driver takes them for the store."""

    def __init__(self, payloads: bool = True) -> None:
        super().__init__(None, payloads=payloads)
        self._rows: list[Row] = []

    def add(self, rows: Any) -> None:
        # Sizes-only transcripts drop the bytes where they are recorded, not after shipping them.
        batch = list(rows) if self.payloads else [size_only(r) for r in rows]
        with self._lock:
            self._rows.extend(batch)

    def take(self) -> list[Row]:
        with self._lock:
            out, self._rows = self._rows, []
        return out


#: What the driver asks of each actor, by (role, target): the methods it calls and the attributes
#: it reads. :class:`ServerHost` refuses every other name, the servers' keys above all.
ACTOR_CALLS: dict[tuple[str, str], frozenset[str]] = {
    ("S_tag", "server"): frozenset({
        "evaluate", "receive_broadcast", "receive_tokens", "receive_shares", "settle_contributions", "aggregate",
    }),
    ("S_tag", "dummy"): frozenset({"summary"}),
    ("S_syn", "server"): frozenset({
        "receive_submissions", "release", "released_tokens", "receive_shares", "pending_contributions",
        "settle_contributions", "accepted_contributions", "reconstruct",
    }),
}
ACTOR_READS: dict[tuple[str, str], frozenset[str]] = {
    ("S_tag", "server"): frozenset({"refused", "rejections", "release_floor", "topped_up"}),
    ("S_tag", "dummy"): frozenset({"plan"}),
    ("S_syn", "server"): frozenset({"counts", "n_submissions", "rejections", "released"}),
}


class ServerHost:
    """One server on the worker that plays it (a Dask actor). Its keys are made here and stay
    here; callers get public keys, the server's answers and the rows it recorded.

    :meth:`call` and :meth:`get` answer only the names in :data:`ACTOR_CALLS` and
    :data:`ACTOR_READS` for this role. One Dask cluster is one trust domain: its workers share a
    scheduler and can read each other's memory, so the allow-list guards against a driver's
    mistake (a key shipped back to the client), not against a hostile worker; S_tag and S_syn
    that must not collude belong on clusters (or services, :mod:`fre_protocol.drivers.net`) of their own.
    """

    def __init__(self, role: str, spec: ServerSpec) -> None:
        plan = spec.plan()
        self._seeds = spec.seeds
        self._recorder = RowBuffer(spec.payloads)
        self._meter = Meter()
        pool = Workers(spec.workers)
        self._driver = Runtime(meter=self._meter, pool=pool, user_pool=pool, recorder=self._recorder)
        self._plan = plan
        self._role = role
        self._targets: dict[str, Any] = {}
        if role == Role.S_TAG.label:
            voprf = tagging_key(plan.seeds, plan.comps.suite)
            box = box_key(plan.seeds, plan.comps.channel, Role.S_TAG)
            self._targets["server"] = tagging_server(plan, self._driver, voprf, box, keep_contributions=False)
            self._keys = {"voprf": voprf, "box": box}
        elif role == Role.S_SYN.label:
            box = box_key(plan.seeds, plan.comps.channel, Role.S_SYN)
            self._targets["server"] = synthesis_server(plan, self._driver, box, keep_contributions=False)
            self._keys = {"box": box}
        else:
            raise InvalidParameterError(f"role must be {Role.S_TAG.label!r} or {Role.S_SYN.label!r}, got {role!r}")

    def public_keys(self) -> dict[str, bytes]:
        return {name: pair[1] for name, pair in self._keys.items()}

    def dummies(self, syn_box_key: bytes, tau: float, windows: list[range]) -> list[list[Message]]:
        """S_tag's dummy submissions, each in the window its dummy user draws for it."""
        dummy = dummy_user_for(self._plan, syn_box_key, self._driver)
        if dummy is None:
            return [[] for _ in windows]
        self._targets["dummy"] = dummy
        with self._meter.phase("phase1_submit"):
            subs = dummy.submissions(tau)
        schedule = dummy_schedule(self._seeds, len(subs), windows)
        return [[subs[j] for j in part] for part in schedule]

    def call(self, target: str, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, list[Row]]:
        self._allowed(ACTOR_CALLS, target, method)
        with single_threaded_blas():
            out = getattr(self._targets[target], method)(*args, **kwargs)
        return out, self._recorder.take()

    def get(self, target: str, name: str) -> Any:
        self._allowed(ACTOR_READS, target, name)
        return getattr(self._targets[target], name)

    def _allowed(self, table: Mapping[tuple[str, str], frozenset[str]], target: str, name: str) -> None:
        allowed = table.get((self._role, target), frozenset())
        if name not in allowed or target not in self._targets:
            kind = "calls" if table is ACTOR_CALLS else "reads"
            raise ProtocolStateError(
                f"{self._role}'s actor {kind} only {sorted(allowed)} of its {target!r}, got {name!r}"
            )

    def meter(self) -> dict[str, Any]:
        return self._meter.to_dict()

    def test_secrets(self) -> dict[str, bytes]:
        """Seeded test mode only (the transcript then records them): the secret keys."""
        if self._seeds.rng_mode != "seeded":
            raise ProtocolStateError("a server's secret keys leave its worker in seeded test mode only")
        return {name: pair[0].reveal() for name, pair in self._keys.items()}


class RemoteParty:
    """A server actor seen as the in-process party the runner's stages call: each method call
    waits for the actor's answer, and the rows the server recorded go to the driver's store."""

    def __init__(self, actor: Any, role: str, recorder: Recorder, target: str = "server") -> None:
        self._actor, self._role, self._recorder, self._target = actor, role, recorder, target

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in ACTOR_CALLS.get((self._role, self._target), frozenset()):
            def method(*args: Any, **kwargs: Any) -> Any:
                out, rows = wait_for(self._role, lambda: self._actor.call(self._target, name, args, kwargs))
                self._recorder.add(rows)
                return out
            return method
        return wait_for(self._role, lambda: self._actor.get(self._target, name))


def wait_for(role: str, ask: Callable[[], Any]) -> Any:
    """An actor's answer to ``ask()``; its worker's loss becomes a ProtocolStateError (its state
    is gone with it)."""
    try:
        future = ask()
        return future.result() if hasattr(future, "result") else future
    except FreError:
        raise
    except Exception as exc:
        raise ProtocolStateError(
            f"{role} failed on its Dask worker or was lost with it ({type(exc).__name__}: {exc}); "
            "its state cannot be rebuilt, so the run stops and releases nothing"
        ) from exc


# -- the users' tasks ----------------------------------------------------------------------------
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
    # Under a user unit: the slots' VOPRF inputs (padding included), laid out by the driver.
    encodings: list[bytes] | None = None

    def devices(self, encodings: Sequence[bytes]) -> Devices:
        comps = _components(self.components, 1)
        meter, recorder = Meter(), RowBuffer(self.payloads)
        users = UserPopulation(
            self.x, encodings, self.coins, suite=comps.suite, keys=self.keys, channel=comps.channel,
            rng=_users_stream(self.users_seed), workers=Workers(1), meter=meter, recorder=recorder,
            chunk_size=self.chunk_size, cover_traffic=self.cover_traffic, first_chunk=self.index,
        )
        return Devices(users=users, meter=meter, recorder=recorder)


@dataclass(frozen=True, slots=True, kw_only=True)
class Devices:
    """A chunk's devices in a task, with the meter and the recorder they report to."""

    users: UserPopulation
    meter: Meter
    recorder: RowBuffer


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
_COMPONENTS: dict[tuple[tuple[tuple[str, str], ...], int], Components] = {}


def _components(names: Mapping[str, str], workers: int) -> Components:
    """This process's components for these names (built once per worker process)."""
    key = (tuple(sorted(names.items())), workers)
    with _HELD_LOCK:
        if key not in _COMPONENTS:
            _COMPONENTS[key] = build_components(names, workers=workers)
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
    return RandomSource.seeded(seed, USERS_LABEL)


def _blinded(chunk: UserChunk, grid: PublicGrid) -> tuple[Devices, list[Message]]:
    with single_threaded_blas():
        encodings = chunk.encodings if chunk.encodings is not None else encode_buckets(grid.bucket_indices(chunk.x))
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
        plains = share_plaintexts(
            x, tags, encoder=plan.encoder, sharing=plan.sharing, noise=noise,
            rng=_users_stream(users_seed).child(f"phase2/{j}"), meter=meter, tokens=tokens,
        )
    return Encoded(plains=dict(zip(who.tolist(), plains, strict=True)), first=int(who[0]), meter=meter.to_dict())


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
    chunk: UserChunk, job: SealJob, released: dict[bytes, int], plan: Phase2Plan,
    encoded: list[Encoded],
) -> ChunkResult:
    """Phase 2: each participant of the chunk seals its two shares, each other online user two
    covers, with key material prepared from the chunk's stream."""
    devices = chunk.devices([b""] * len(chunk.coins))
    users = devices.users
    users.restore(job.tags, job.submitted, released, tokens=job.tokens)
    if job.broadcast is not None:
        users.receive_broadcast(job.broadcast)  # recorded once: every device hears the same
    plains: dict[int, tuple[bytes, bytes]] = {}
    start = chunk.index * chunk.chunk_size
    for part in encoded:
        plains.update(part.plains)
        if start <= part.first < start + len(chunk.coins):
            _merge(devices.meter, part.meter)
    with single_threaded_blas():
        users.prepare(PHASE2_SEALS)
        out = users.sealed_shares([i - start for i in job.participants], [plains[i] for i in job.participants])
        if job.cover:
            sizes = plan.sharing.share_sizes(plan.width)
            out += users.cover_messages(np.asarray(job.cover, dtype=np.int64) - start, sizes)
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


# -- the driver ----------------------------------------------------------------------------------
def _play(
    client: Any, run: RunPlan, driver: Runtime, store: Any, window: int, tmp: Path, workers: int
) -> tuple[Release, dict[str, Any]]:
    place = Placement.of(client)
    spec = ServerSpec(
        params=run.params, seeds=run.seeds, cfg=run.cfg, components=run.comps.header(), floor=run.floor,
        dummy=run.dummy, workers=workers, payloads=driver.recorder.payloads,
    )
    with driver.meter.phase("setup"):
        tag = wait_for("S_tag", lambda: client.submit(ServerHost, Role.S_TAG.label, spec, actor=True, workers=[place.s_tag]))
        syn = wait_for("S_syn", lambda: client.submit(ServerHost, Role.S_SYN.label, spec, actor=True, workers=[place.s_syn]))
        tag_keys = wait_for("S_tag", lambda: tag.public_keys())
        syn_keys = wait_for("S_syn", lambda: syn.public_keys())
    keys = ServerKeys(voprf_public_key=tag_keys["voprf"], tag_box_key=tag_keys["box"], syn_box_key=syn_keys["box"])
    parties = _parties(run, driver, tag, syn, keys)
    ctx = WindowContext(
        run=run, driver=driver, parties=parties,
        coins=user_coins(run.seeds, run.n, run.params, run.cfg.chunk_size),
        grid=PublicGrid.derive(run.seeds, run.dim, run.params),
        devices=DeviceStates(run.n, tmp), windows=chunks(run.n, window), held=HeldSubmissions.for_run(run, tmp, window),
    )
    dummies = wait_for("S_tag", lambda: tag.dummies(keys.syn_box_key, run.params.tau, ctx.windows))
    dummy_user = RemoteParty(tag, "S_tag", driver.recorder, target="dummy") if run.params.is_dp else None
    users = DaskWindows(client, ctx, place, keys)
    from distributed import get_task_stream

    try:
        with get_task_stream(client=client) as stream:
            release, info = play_windows(ctx, store, users, dummies, dummy_user)
        meter_tasks(driver.meter, stream.data)
    finally:
        # Cleanup only: a cluster that lost workers must not hide the run's own outcome.
        with contextlib.suppress(Exception):
            client.run(forget, users.run_id)
    for host, role in ((tag, "S_tag"), (syn, "S_syn")):
        _merge(driver.meter, wait_for(role, lambda h=host: h.meter()))
    return release, info


#: The users' tasks, by the prefix of their keys.
TASK_KINDS = ("blind", "submit", "encode", "seal")


def meter_tasks(meter: Meter, stream: Sequence[Mapping[str, Any]]) -> None:
    """Each users' task's compute time, by kind (``dask.task.blind``, ``.submit``, ``.encode``,
    ``.seal``), from the scheduler's task stream: how long a task is against the scheduler's
    few milliseconds of overhead per task (a chunk of 1,024 users keeps each well above 100 ms)."""
    for task in stream:
        kind = str(task.get("key", "")).removeprefix("fre-").split("-")[0]
        seconds = sum(s["stop"] - s["start"] for s in task.get("startstops", ()) if s.get("action") == "compute")
        if kind in TASK_KINDS and seconds > 0:
            meter.add(f"dask.task.{kind}", seconds, 1)



def _parties(run: RunPlan, driver: Runtime, tag: Any, syn: Any, keys: ServerKeys) -> Parties:

    """The runner's parties with the servers on their workers. Their secret keys come here in
    seeded test mode only, for the transcript's secrets (their test seed is here anyway)."""
    proxy = AnonymizingProxy(
        shuffler=run.comps.shuffler, rng=run.seeds.secret("proxy/shuffle"), recorder=driver.recorder,
        meter=driver.meter, cap=run.slots.cap,
    )
    pairs: dict[str, Any] = {"voprf_key": None, "tag_box": None, "syn_box": None}
    if run.seeds.rng_mode == "seeded":
        from primitives.secret import Secret

        tag_sk = wait_for("S_tag", lambda: tag.test_secrets())
        syn_sk = wait_for("S_syn", lambda: syn.test_secrets())
        pairs = {
            "voprf_key": (Secret(tag_sk["voprf"]), keys.voprf_public_key),
            "tag_box": (Secret(tag_sk["box"]), keys.tag_box_key),
            "syn_box": (Secret(syn_sk["box"]), keys.syn_box_key),
        }
    return Parties(
        keys=keys, proxy=proxy, s_tag=RemoteParty(tag, "S_tag", driver.recorder),  # type: ignore[arg-type]
        s_syn=RemoteParty(syn, "S_syn", driver.recorder), **pairs,  # type: ignore[arg-type]
    )


def _merge(meter: Meter, part: Mapping[str, Any]) -> None:
    for name, seconds in part["seconds"].items():
        meter.add(name, seconds, part["counts"].get(name, 0))
    for name, n in part["bytes"].items():
        meter.add_bytes(name, n)
    for name, seconds in part["wall"].items():
        meter.add_wall(name, seconds)


class DaskWindows:
    """The users' side of each window as tasks on the users' workers (a
    :class:`~fre_protocol.drivers.streaming.WindowPlayer`)."""

    def __init__(self, client: Any, ctx: WindowContext, place: Placement, keys: ServerKeys) -> None:
        run = ctx.run
        self.client, self.ctx, self.place, self.keys = client, ctx, place, keys
        self.run_id = uuid.uuid4().hex
        # Test mode: the users' stream of every driver. Otherwise a per-run key drawn here, so a
        # recomputed chunk draws what it drew the first time.
        self.users_seed = run.seeds.test_seed if run.seeds.test_seed is not None else os.urandom(32)
        self._blind_ahead: dict[range, tuple[list[UserChunk], list[Any]]] = {}
        self._unsent: tuple[_Phase1Window, list[Message]] | None = None

    def _chunk(self, c: int, window: range, *, with_rows: bool = True) -> UserChunk:
        run = self.ctx.run
        span = range(c * run.cfg.chunk_size, min(run.n, (c + 1) * run.cfg.chunk_size))
        encodings = None
        if not with_rows:
            x = np.zeros((len(span), 0))
        elif run.slots.slot_rows is None:
            x = np.asarray(rows(run.x, span.start, span.stop))
        else:
            x, encodings = run.slots.inputs(run.x, span, self.ctx.grid, run.seeds.secret("users"), run.cfg.chunk_size)
        return UserChunk(
            run_id=self.run_id, index=c, offset=span.start - window.start, x=x, encodings=encodings,
            coins=self.ctx.coins[span.start : span.stop], keys=self.keys, components=run.comps.header(),
            users_seed=self.users_seed, chunk_size=run.cfg.chunk_size, cover_traffic=run.cfg.cover_traffic,
            payloads=self.ctx.driver.recorder.payloads,
        )

    def _submit(self, fn: Any, *args: Any, key: str, near: Any = None) -> Any:
        return self.client.submit(
            fn, *args, key=f"{key}-{self.run_id}", resources=self.place.users_resources,
            workers=near, allow_other_workers=near is not None, retries=2,
        )

    def _gather(self, futures: list[Any]) -> list[ChunkResult]:
        results: list[ChunkResult] = self.client.gather(futures)
        for r in results:
            self.ctx.driver.recorder.add(r.rows)
            _merge(self.ctx.driver.meter, r.meter)
        return results

    def blind_tasks(self, span: range) -> tuple[list[UserChunk], list[Any]]:
        """The chunks of window ``span`` and their blind tasks: submitted ahead when the window
        before gathered its own (:meth:`_Phase1Window.blind_requests`), so the users' workers
        blind the next window while S_tag evaluates this one, instead of waiting for it."""
        ahead = self._blind_ahead.pop(span, None)
        if ahead is not None:
            return ahead
        size = self.ctx.run.cfg.chunk_size
        chunks_ = [self._chunk(c, span) for c in range(span.start // size, -(-span.stop // size))]
        return chunks_, [self._submit(users_blind, ch, self.ctx.grid, key=f"fre-blind-{ch.index}") for ch in chunks_]

    def blind_ahead(self, span: range) -> None:
        """Submit the blind tasks of the window after ``span``, if there is one."""
        k = self.ctx.windows.index(span)
        if k + 1 < len(self.ctx.windows):
            nxt = self.ctx.windows[k + 1]
            self._blind_ahead[nxt] = self.blind_tasks(nxt)

    def phase1(self, span: range, dummies: list[Message]) -> UserTally:
        """S_tag evaluates this window while the users' workers still finalize the one before;
        that one's tag submissions go to the proxy only then (a window's dummies with its own
        submissions), which holds S_syn's part until the last window. S_tag's view keeps its
        order; only the proxy's view interleaves the windows differently, and the release is
        the same."""
        ctx = self.ctx
        window = _Phase1Window(self, span)
        phase1(ctx.parties, window, ctx.driver)  # type: ignore[arg-type]
        tally = self.phase1_done()
        self._unsent = (window, dummies)
        return tally

    def phase1_done(self) -> UserTally:
        """Send the last window's tag submissions, if one still waits, and report its users."""
        if self._unsent is None:
            return UserTally()
        (window, dummies), self._unsent = self._unsent, None
        subs = window.tag_submissions()
        with self.ctx.driver.meter.phase("phase1_submit"):
            phase1_submit(self.ctx.parties, subs + dummies, self.ctx.driver, deliver=self.ctx.held.add)
        return window.tally

    def phase2(self, plan: Phase2Plan, released: dict[bytes, int], message: bytes) -> UserTally:
        """Window by window, the users' workers encode and seal the next window's messages while
        the servers take this one's (the tasks of window k + 1 are submitted before window k is
        delivered)."""
        ctx = self.ctx
        roster = Roster.of(ctx, released)
        encoded: dict[int, Any] = {}
        next_chunk = 0  # the first participant chunk not yet encoded

        def submit(span: range) -> list[Any]:
            nonlocal next_chunk
            futures, next_chunk = self._phase2_tasks(span, roster, encoded, next_chunk, plan, released, message)
            return futures

        pending = submit(ctx.windows[0])
        for k, span in enumerate(ctx.windows):
            with ctx.driver.meter.phase("phase2_shares"):
                ahead = submit(ctx.windows[k + 1]) if k + 1 < len(ctx.windows) else []
                shares = [m for r in self._gather(pending) for m in r.messages]
                for j in [j for j in encoded if roster.participants[roster.part_chunks[j].stop - 1] < span.stop]:
                    del encoded[j]
                phase2(ctx.parties, plan, shares, ctx.driver, concurrent=True)
                settle_window(ctx.parties, plan)
            pending = ahead
            ctx.release_pages()
        return roster.tally()

    def _phase2_tasks(
        self, span: range, roster: Roster, encoded: dict[int, Any], first: int, plan: Phase2Plan,
        released: dict[bytes, int], message: bytes,
    ) -> tuple[list[Any], int]:
        """Window ``span``'s phase-2 tasks and the next participant chunk to encode: the chunks
        from ``first`` that this window is the first to reach are encoded (into ``encoded``),
        and each chunk of its users seals its shares or cover."""
        ctx, run = self.ctx, self.ctx.run
        size = run.cfg.chunk_size
        todo = roster.due(first, span)
        for j in todo:
            part = roster.part_chunks[j]
            who = roster.participants[part.start : part.stop]
            encoded[j] = self._submit(
                users_encode, take_rows(run.x, run.slots.rows_of(who)), who, ctx.devices.tag_list(who), plan, run.noise,
                self.users_seed, j, ctx.devices.token_list(who), key=f"fre-encode-{j}",
            )
        futures = []
        for cspan in chunks(span.stop - span.start, size):
            c = (span.start + cspan.start) // size
            lo, hi = span.start + cspan.start, span.start + cspan.stop
            mine = within(roster.participants, range(lo, hi))
            where = np.searchsorted(roster.participants, mine) // size
            idx = np.arange(lo, hi)
            job = SealJob(
                tags=ctx.devices.tag_list(idx), submitted=ctx.devices.submitted[lo:hi].copy(),
                tokens=ctx.devices.token_list(idx),
                participants=mine, cover=within(roster.cover, range(lo, hi)),
                broadcast=message if c == 0 else None,
            )
            needed = [encoded[j] for j in sorted(set(where.tolist()))]
            futures.append(self._submit(
                users_seal, self._chunk(c, span, with_rows=False), job, released, plan, needed, key=f"fre-seal-{c}",
            ))
        return futures, first + len(todo)


class _Phase1Window:
    """One window's devices as the runner's phase-1 stage sees a population: blind requests
    out, S_tag's answers in (each chunk's to its own task), tag submissions out."""

    def __init__(self, owner: DaskWindows, span: range) -> None:
        self.owner, self.span = owner, span
        self.chunks, self.blinded = owner.blind_tasks(span)
        self.grid = owner.ctx.grid
        self.submitted: list[Any] = []
        self.tally = UserTally()

    def blind_requests(self) -> list[Message]:
        o = self.owner
        messages = [m for r in o._gather(self.blinded) for m in r.messages]
        o.blind_ahead(self.span)
        return messages


    def receive_evaluations(self, answered: Sequence[tuple[int, bytes]]) -> None:
        o = self.owner
        size = o.ctx.run.cfg.chunk_size
        inbox: list[list[tuple[int, bytes]]] = [[] for _ in self.chunks]
        for conn, data in answered:
            k = conn // size
            if 0 <= k < len(inbox):
                inbox[k].append((conn - k * size, data))
        where = o.client.who_has(self.blinded)
        self.submitted = [
            o._submit(users_submit, ch, self.grid, inbox[k], key=f"fre-submit-{ch.index}",
                      near=list(where.get(fut.key, ())) or None)
            for k, (ch, fut) in enumerate(zip(self.chunks, self.blinded, strict=True))
        ]

    def tag_submissions(self) -> list[Message]:
        o = self.owner
        out: list[Message] = []
        devices = o.ctx.devices
        for ch, r in zip(self.chunks, o._gather(self.submitted), strict=True):
            lo = self.span.start + ch.offset
            hi = lo + len(ch.coins)
            assert r.has_tag is not None and r.submitted is not None and r.tally is not None
            devices.tags[lo:hi] = np.frombuffer(r.tags, dtype=np.uint8).reshape(hi - lo, TAG_BYTES)
            devices.has_tag[lo:hi] = r.has_tag
            devices.submitted[lo:hi] = r.submitted
            devices.tokens[lo:hi] = np.frombuffer(r.tokens, dtype=np.uint8).reshape(hi - lo, TOKEN_BYTES)
            self.tally += r.tally
            out.extend(r.messages)
        self.blinded = self.submitted = []
        return out


__all__ = [
    "S_SYN_RESOURCE",
    "S_TAG_RESOURCE",
    "USERS_RESOURCE",
    "ACTOR_CALLS",
    "ACTOR_READS",
    "DaskWindows",
    "TASK_KINDS",
    "Encoded",
    "Placement",
    "RemoteParty",
    "ServerHost",
    "ServerSpec",
    "UserChunk",
    "run_dask",
    "users_blind",
    "users_encode",
    "users_seal",
    "users_submit",
]
