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
  A chunk's task is :mod:`fre_protocol.drivers.chunk_tasks`; the actors and where each runs,
  :mod:`fre_protocol.drivers.dask_actors`.
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
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fre_protocol.drivers.chunk_tasks import (
    ChunkResult,
    Encoded,
    SealJob,
    UserChunk,
    forget,
    merge_meter,
    users_blind,
    users_encode,
    users_seal,
    users_submit,
)
from fre_protocol.drivers.dask_actors import (
    ACTOR_CALLS,
    ACTOR_READS,
    S_SYN_RESOURCE,
    S_TAG_RESOURCE,
    USERS_RESOURCE,
    Placement,
    ServerHost,
    ServerSpec,
)
from fre_protocol.drivers.local import ProtocolResult, phase1, phase1_submit, phase2
from fre_protocol.drivers.streaming import (
    DEFAULT_WINDOW_CHUNKS,
    WindowContext,
    execute_windows,
    plan_windows,
    play_windows,
)
from fre_protocol.inputs import EmbeddingShards, take_rows
from fre_protocol.messages import Role
from fre_protocol.roles.base import Meter, Recorder, Runtime, chunks
from fre_protocol.roles.broadcast import HeardBroadcast
from fre_protocol.roles.config import RoundSpec, RunOptions
from fre_protocol.roles.round import Parties, Phase2Plan, RunPlan, device_inputs, parties_around
from fre_protocol.roles.user import ServerKeys, UserTally
from fre_protocol.roles.windows import Message, Roster, settle_window
from mechanism.release import Release
from primitives.errors import FreError, InvalidParameterError, ProtocolStateError
from primitives.secret import Secret


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
    cluster: DaskCluster | None = None,
    users: npt.ArrayLike | None = None,
    window_chunks: int = DEFAULT_WINDOW_CHUNKS,
) -> ProtocolResult:
    """:func:`~fre_protocol.drivers.streaming.run_streaming` (same arguments, same outputs and
    files) on a Dask cluster (``cluster``; default a local one of two worker processes).
    ``spec.workers``: threads each server uses on its worker. Under a user unit a chunk's task
    gets its slots' rows and VOPRF inputs (padding included), laid out here as the other drivers
    lay them out."""
    run, window = plan_windows(x, spec, users=users, window_chunks=window_chunks)
    cluster = cluster if cluster is not None else DaskCluster()
    with _connect(cluster.client, cluster.scheduler, cluster.workers) as dask, dask.as_current():

        def play(run: RunPlan, driver: Runtime, store: Any, window: int, tmp: Path) -> tuple[Release, dict[str, Any]]:
            return _play(dask, run, driver, store, window, tmp)

        return execute_windows(run, window, play, options)


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


class RemoteParty:
    """A server actor seen as the in-process party the moving stages call: each method call
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


# -- the driver ----------------------------------------------------------------------------------
def _play(client: Any, run: RunPlan, driver: Runtime, store: Any, window: int, tmp: Path) -> tuple[Release, dict[str, Any]]:
    place = Placement.of(client)
    spec = ServerSpec(
        params=run.params, seeds=run.seeds, cfg=run.cfg, components=run.comps.header(), floor=run.floor,
        registered=run.comps.registered, dummy=run.dummy, workers=run.workers, payloads=driver.recorder.payloads,
    )
    with driver.meter.phase("setup"):
        tag = wait_for("S_tag", lambda: client.submit(ServerHost, Role.S_TAG.label, spec, actor=True, workers=[place.s_tag]))
        syn = wait_for("S_syn", lambda: client.submit(ServerHost, Role.S_SYN.label, spec, actor=True, workers=[place.s_syn]))
        parties = _parties(run, driver, tag, syn)
    ctx = WindowContext.open(run, driver, parties, window, tmp)
    dummies = wait_for("S_tag", lambda: tag.dummies(parties.keys.syn_box_key, run.params.tau, ctx.windows))
    dummy_user = RemoteParty(tag, "S_tag", driver.recorder, target="dummy") if run.params.is_dp else None
    users = DaskWindows(client, ctx, place, parties.keys)
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
        merge_meter(driver.meter, wait_for(role, lambda h=host: h.meter()))
    return release, info


def _parties(run: RunPlan, driver: Runtime, tag: Any, syn: Any) -> Parties:
    """The step layer's parties (:func:`~fre_protocol.roles.round.parties_around`) around the
    servers on their workers, with their public keys. Their secret keys come here in seeded test
    mode only, for the transcript's secrets (their test seed is here anyway)."""
    tag_keys = wait_for("S_tag", lambda: tag.public_keys())
    syn_keys = wait_for("S_syn", lambda: syn.public_keys())
    keys = ServerKeys(voprf_public_key=tag_keys["voprf"], tag_box_key=tag_keys["box"], syn_box_key=syn_keys["box"])
    pairs = None
    if run.seeds.rng_mode == "seeded":
        tag_sk = wait_for("S_tag", lambda: tag.test_secrets())
        syn_sk = wait_for("S_syn", lambda: syn.test_secrets())
        pairs = (
            (Secret(tag_sk["voprf"]), keys.voprf_public_key),
            (Secret(tag_sk["box"]), keys.tag_box_key),
            (Secret(syn_sk["box"]), keys.syn_box_key),
        )
    s_tag, s_syn = RemoteParty(tag, "S_tag", driver.recorder), RemoteParty(syn, "S_syn", driver.recorder)
    return parties_around(run, driver, keys, s_tag, s_syn, key_pairs=pairs)  # type: ignore[arg-type]


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
        x, encodings = device_inputs(run, span, self.ctx.grid) if with_rows else (np.zeros((len(span), 0)), None)
        return UserChunk(
            run_id=self.run_id, index=c, offset=span.start - window.start, x=np.asarray(x), encodings=encodings,
            coins=self.ctx.coins[span.start : span.stop], keys=self.keys, components=run.comps.header(),
            registered=run.comps.registered, users_seed=self.users_seed, chunk_size=run.cfg.chunk_size, cover_traffic=run.cfg.cover_traffic,
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
            merge_meter(self.ctx.driver.meter, r.meter)
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

    def phase2(self, plan: Phase2Plan, heard: HeardBroadcast, message: bytes) -> UserTally:
        """Window by window, the users' workers encode and seal the next window's messages while
        the servers take this one's (the tasks of window k + 1 are submitted before window k is
        delivered)."""
        ctx = self.ctx
        roster = ctx.roster(heard)
        encoded: dict[int, Any] = {}
        next_chunk = 0  # the first participant chunk not yet encoded

        def submit(span: range) -> list[Any]:
            nonlocal next_chunk
            futures, next_chunk = self._phase2_tasks(span, roster, encoded, next_chunk, plan, heard, message)
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
        heard: HeardBroadcast, message: bytes,
    ) -> tuple[list[Any], int]:
        """Window ``span``'s phase-2 tasks and the next participant chunk to encode: the chunks
        from ``first`` that this window is the first to reach are encoded (into ``encoded``),
        and each chunk of its users seals its shares or cover."""
        ctx, run = self.ctx, self.ctx.run
        size = run.cfg.chunk_size
        todo = roster.due(first, span)
        for j in todo:
            who = roster.members(j)
            encoded[j] = self._submit(
                users_encode, take_rows(run.x, run.slots.rows_of(who)), who, ctx.devices.tag_list(who), plan, run.noise,
                self.users_seed, j, ctx.devices.token_list(who), key=f"fre-encode-{j}",
            )
        futures = []
        for cspan in chunks(span.stop - span.start, size):
            c = (span.start + cspan.start) // size
            lo, hi = span.start + cspan.start, span.start + cspan.stop
            mine, cover = roster.senders(range(lo, hi))
            where = np.searchsorted(roster.participants, mine) // size
            idx = np.arange(lo, hi)
            job = SealJob(
                tags=ctx.devices.tag_list(idx), submitted=ctx.devices.submitted[lo:hi].copy(),
                tokens=ctx.devices.token_list(idx),
                participants=mine, cover=cover,
                broadcast=message if c == 0 else None,
            )
            needed = [encoded[j] for j in sorted(set(where.tolist()))]
            futures.append(self._submit(
                users_seal, self._chunk(c, span, with_rows=False), job, heard, plan, needed, key=f"fre-seal-{c}",
            ))
        return futures, first + len(todo)


class _Phase1Window:
    """One window's devices as the in-process driver's phase-1 stage sees a population: blind requests
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
            assert r.has_tag is not None and r.submitted is not None and r.tally is not None
            devices.save_packed(range(lo, lo + len(ch.coins)), r.tags, r.has_tag, r.submitted, r.tokens)
            self.tally += r.tally
            out.extend(r.messages)
        self.blinded = self.submitted = []
        return out


__all__ = [
    "ACTOR_CALLS", "ACTOR_READS", "S_SYN_RESOURCE", "S_TAG_RESOURCE", "TASK_KINDS", "USERS_RESOURCE", "ChunkResult",
    "DaskCluster", "DaskWindows", "Encoded", "Placement", "RemoteParty", "SealJob", "ServerHost", "ServerSpec",
    "UserChunk", "forget", "meter_tasks", "run_dask", "users_blind", "users_encode", "users_seal", "users_submit",
    "wait_for",
]
