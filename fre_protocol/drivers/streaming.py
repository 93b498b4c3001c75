"""Play the protocol window by window, so that memory does not grow with the number of users.

:func:`run_protocol` holds every user's device and messages at once (about 10 kB a user at
d = 768). :func:`run_streaming` plays the same stages of :mod:`fre_protocol.drivers.inprocess` on windows
of users: a window's devices are built, play their part of a phase and are dropped. What lasts
across windows is the servers' state (tag counts, one running sum per released tag and the
contribution ids it covers, replay filters), the proxy's pending routes (none between windows)
and, between the two phases, each device's own outcome of phase 1 (its tag and whether it
submitted it), kept in a memory-mapped file as the devices would keep it. Embeddings are read
window by window from an array, a memory-mapped ``.npy`` or a directory of shards.

Seeded runs release exactly what :func:`run_protocol` releases, noise on or off:

* every per-chunk stream (blinds and seals ``prepare/<chunk>``, submission nonces
  ``submit/<chunk>``) is labelled with the global chunk index (windows are whole chunks), and
  phase 2's seals are re-derived from the same stream when the window plays phase 2
  (:meth:`~fre_protocol.roles.user.UserPopulation.prepare` with ``kinds``);
* phase 2's encodings, shares and contribution ids come from ``phase2/<j>``, the j-th chunk of
  participants in user order, whichever windows its users fall in: the chunk is computed when
  its first user's window plays and its later users' messages wait (at most one chunk) for
  their own window;
* coins, the dropout mask and the public grid are drawn once, as the runner draws them;
* S_tag's proof nonces are keyed by the elements they prove, so the proxy's shuffles (one per
  window instead of one per phase) change only the order in which servers receive messages.
  Modular sums do not depend on that order.

The window loop (:func:`play_windows`) is shared with :mod:`fre_protocol.drivers.dask`, which
plays the same windows with the users' chunks as Dask tasks and the servers as Dask actors, and
with :mod:`fre_protocol.drivers.user_processes`, whose players run those tasks in local worker processes
while the servers stay in this one.

Phase 1's tag submissions reach S_syn as in the runner, in one uniformly random order with all
of S_tag's dummies: the proxy takes each window's submissions (and the window's share of the
dummies, a random window each from the dummy user's own stream) as they come, holds S_syn's part
(:class:`HeldSubmissions`, spooled to disk) and, after the last window, hands it over shuffled as
a whole, in batches of one window's size. Which window a submission came from is then lost, so
rows grouped by topic in the input cannot mark a real tag (its users in one or two windows) apart
from a dummy (its submissions in windows drawn independently); see design §6.

What differs: the proxy shuffles each window's batch on its own, so the transcripts hold the
same messages in another order. With ``proof_batch_size > 1`` the batches are formed within a
window, so the proofs (not the tags) differ. The servers keep running sums, so after each window
they settle which of its contributions both hold (:func:`settle_window`: two
AcceptedContributions messages a tag, which the runner's transcripts do not have) and a share
only one of them accepted is taken out; a validator's strict subset is still refused rather than
summed, and no adversary can be placed on the network.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from fre_protocol.drivers.local import (
    ProtocolResult,
    aggregation,
    broadcast,
    execute,
    phase1,
    phase1_submit,
    phase2,
)
from fre_protocol.inputs import EmbeddingShards, release_pages, take_rows
from fre_protocol.messages import TAG_BYTES, TOKEN_BYTES, Role
from fre_protocol.roles import streams
from fre_protocol.roles.base import Runtime, chunks
from fre_protocol.roles.config import (
    RoundSpec,
    RunOptions,
)
from fre_protocol.roles.release import assemble_release, store_artifacts
from fre_protocol.roles.round import (
    Parties,
    Phase2Plan,
    RunPlan,
    make_dummy_user,
    plan_phase2,
    plan_run,
    population,
    setup,
    user_coins,
)
from fre_protocol.roles.user import (
    PHASE1_SEALS,
    PHASE2_SEALS,
    UserPopulation,
    UserTally,
    share_plaintexts,
)
from mechanism.grid import PublicGrid
from mechanism.release import Release
from mechanism.seeds import SeedPlan
from primitives.errors import InvalidParameterError
from primitives.randomness import RandomSource

#: Chunks of users per window by default (16 × 1024 users: a few tens of MB of messages).
DEFAULT_WINDOW_CHUNKS = 16

Message = tuple[int, Role, bytes]


def run_streaming(
    x: npt.ArrayLike | EmbeddingShards,
    spec: RoundSpec,
    options: RunOptions | None = None,
    *,
    users: npt.ArrayLike | None = None,
    window_chunks: int = DEFAULT_WINDOW_CHUNKS,
    players: Players | None = None,
) -> ProtocolResult:
    """:func:`~fre_protocol.drivers.inprocess.run_protocol` (same arguments, same outputs and
    files), played ``window_chunks`` chunks of ``config.chunk_size`` users at a time. Under a user
    unit the entries are slots (:mod:`fre_protocol.slots`): the layout is fixed before any window
    from one pass over every row's bucket, and each window reads its slots' rows.

    ``players``: how the users' side of the windows is played, given the windows' context (the
    default: this process's threads; :func:`fre_protocol.drivers.user_processes.in_worker_processes`:
    local worker processes). Same release either way."""
    if isinstance(window_chunks, bool) or not isinstance(window_chunks, int) or window_chunks < 1:
        raise InvalidParameterError(f"window_chunks must be an integer >= 1, got {window_chunks!r}")
    run = plan_run(x, spec, users=users)
    window = window_chunks * run.cfg.chunk_size

    def play(run: RunPlan, driver: Runtime, store: Any) -> tuple[Release, dict[str, Any]]:
        with tempfile.TemporaryDirectory(prefix="fre-devices-") as tmp:
            return _play(run, driver, store, window, Path(tmp), players or _InProcessWindows)

    return execute(run, play, options)


class DeviceStates:
    """Each device's outcome of phase 1 between the phases: its tag (memory-mapped, 32 bytes a
    user) and two flags (has a tag, submitted it)."""

    def __init__(self, n: int, directory: Path) -> None:
        self.tags = np.lib.format.open_memmap(directory / "tags.npy", mode="w+", dtype=np.uint8, shape=(n, TAG_BYTES))
        self.has_tag = np.zeros(n, dtype=bool)
        self.submitted = np.zeros(n, dtype=bool)
        # Each submitter's contribution token (design §6.8), kept on its device between phases.
        self.tokens = np.lib.format.open_memmap(directory / "tokens.npy", mode="w+", dtype=np.uint8, shape=(n, TOKEN_BYTES))

    def save(self, span: range, users: UserPopulation) -> None:
        for j, tag in enumerate(users.tags):
            if tag is not None:
                self.tags[span.start + j] = np.frombuffer(tag, dtype=np.uint8)
                self.has_tag[span.start + j] = True
        self.submitted[span.start : span.stop] = users.submitted
        self.save_tokens(span.start, users.tokens)

    def save_tokens(self, start: int, tokens: Sequence[bytes | None]) -> None:
        for j, token in enumerate(tokens):
            if token is not None:
                self.tokens[start + j] = np.frombuffer(token, dtype=np.uint8)

    def token_list(self, users: npt.NDArray[np.int64]) -> list[bytes | None]:
        """The users' contribution tokens (None for a user that submitted no tag)."""
        raw = np.ascontiguousarray(self.tokens[users]).tobytes()
        return [raw[TOKEN_BYTES * j : TOKEN_BYTES * (j + 1)] if self.submitted[i] else None for j, i in enumerate(users)]

    def tag_list(self, users: npt.NDArray[np.int64]) -> list[bytes | None]:
        raw = np.ascontiguousarray(self.tags[users]).tobytes()
        return [raw[TAG_BYTES * j : TAG_BYTES * (j + 1)] if self.has_tag[i] else None for j, i in enumerate(users)]

    def eligible(self, span: range, released: Mapping[bytes, int]) -> npt.NDArray[np.bool_]:
        """Users of ``span`` whose submitted tag was released."""
        idx = np.arange(span.start, span.stop)
        tags = self.tag_list(idx)
        return np.array(
            [bool(self.submitted[i]) and tags[j] in released for j, i in enumerate(idx)], dtype=bool
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowContext:
    """What every window shares: the run, its driver and servers, coins, grid, device states."""

    run: RunPlan
    driver: Runtime
    parties: Parties
    coins: npt.NDArray[np.bool_]
    grid: PublicGrid
    devices: DeviceStates
    windows: list[range]
    held: HeldSubmissions

    def release_pages(self) -> None:
        """After a window: the pages of the input rows it read and of the device states it
        wrote need not stay resident (both are memory-mapped files)."""
        release_pages(self.run.x)
        release_pages(self.devices.tags)


def _play(
    run: RunPlan, driver: Runtime, store: Any, window: int, tmp: Path, players: Players
) -> tuple[Release, dict[str, Any]]:
    parties = setup(run, driver, keep_contributions=False)
    ctx = WindowContext(
        run=run, driver=driver, parties=parties,
        coins=user_coins(run.seeds, run.n, run.params, run.cfg.chunk_size),
        grid=PublicGrid.derive(run.seeds, run.dim, run.params),
        devices=DeviceStates(run.n, tmp), windows=chunks(run.n, window), held=HeldSubmissions.for_run(run, tmp, window),
    )
    dummy_user = make_dummy_user(run, parties, driver)
    with driver.meter.phase("phase1_submit"):
        dummies = dummy_user.submissions(run.params.tau) if dummy_user is not None else []
    schedule = dummy_schedule(run.seeds, len(dummies), ctx.windows)
    by_window = [[dummies[j] for j in schedule[k]] for k in range(len(ctx.windows))]
    del dummies
    with players(ctx) as users:
        return play_windows(ctx, store, users, by_window, dummy_user)


class WindowPlayer(Protocol):
    """How a driver plays the users' side of one window (phase 1) and of phase 2; the servers'
    side is the runner's stages on ``ctx.parties``, wherever those servers run. A window's tag
    submissions (with that window's dummies) go through the proxy into ``ctx.held``, not to
    S_syn; a player may send them during a later window and report them there, and
    :meth:`phase1_done` sends and reports what it still holds."""

    def phase1(self, span: range, dummies: list[Message]) -> UserTally: ...

    def phase1_done(self) -> UserTally: ...

    def phase2(self, plan: Phase2Plan, released: dict[bytes, int], message: bytes) -> UserTally: ...


#: How a run plays its users' side: given the windows' context, a player to use within a block.
Players = Callable[[WindowContext], AbstractContextManager[WindowPlayer]]


def play_windows(
    ctx: WindowContext, store: Any, users: WindowPlayer, dummies: list[list[Message]], dummy_user: Any
) -> tuple[Release, dict[str, Any]]:
    """The streaming run's skeleton, for any driver: phase 1 window by window (each window's
    submissions with its share of S_tag's dummies, held by the proxy), all of them to S_syn in
    one shuffle, the broadcast, phase 2, the aggregation and the release."""
    run, driver, parties = ctx.run, ctx.driver, ctx.parties
    tally = UserTally()
    for k, span in enumerate(ctx.windows):
        tally += users.phase1(span, dummies[k])
        ctx.release_pages()
    tally += users.phase1_done()
    with driver.meter.phase("phase1_submit"):
        ctx.held.deliver(parties.s_syn.receive_submissions)
    released, message = broadcast(parties, driver)
    plan = plan_phase2(run, released)
    tally += users.phase2(plan, released, message)
    result = aggregation(run, parties, plan, driver)
    release, info = assemble_release(
        run, parties, plan, released, result, dummy_user, driver.user_pool.workers, tally
    )
    if store is not None:
        store_artifacts(store, release, plan.ddg_config, run.seeds, parties, dummy_user)
    return release, info


class _InProcessWindows:
    """Each window's devices in this process, on the driver's threads, the next window's built
    and prepared ahead (:class:`Ahead`)."""

    def __init__(self, ctx: WindowContext) -> None:
        self.ctx = ctx
        self.ahead = Ahead(ctx.windows, lambda span: _phase1_devices(ctx, span))

    def phase1(self, span: range, dummies: list[Message]) -> UserTally:
        return _phase1_window(self.ctx, self.ahead.take(span), span, dummies)

    def phase1_done(self) -> UserTally:
        return UserTally()  # every window sent its submissions in its own turn

    def phase2(self, plan: Phase2Plan, released: dict[bytes, int], message: bytes) -> UserTally:
        self.ahead.close()
        with Ahead(self.ctx.windows, lambda span: _phase2_devices(self.ctx, span, released)) as ahead:
            return _phase2(self.ctx, ahead, plan, released, message)

    def __enter__(self) -> _InProcessWindows:
        return self

    def __exit__(self, *exc: object) -> None:
        self.ahead.close()


class Ahead:
    """Devices window by window, the next window's built and given their offline work on a
    background thread while the current window plays: the window's serial steps (the proxy's
    shuffle, decoding, recording) then leave the cores the offline work of the next, instead of
    idle. Each device draws from its chunk's own streams, so what it draws does not depend on
    when the work runs. At most two windows of devices exist at once."""

    def __init__(self, windows: Sequence[range], make: Callable[[range], UserPopulation]) -> None:
        self._windows, self._make = list(windows), make
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fre-ahead")
        self._pending: dict[range, Future[UserPopulation]] = {}

    def take(self, span: range) -> UserPopulation:
        """The devices of ``span`` (one of the windows, taken in order), prepared."""
        future = self._pending.pop(span, None) or self._thread.submit(self._make, span)
        k = self._windows.index(span)
        if k + 1 < len(self._windows):
            nxt = self._windows[k + 1]
            self._pending[nxt] = self._thread.submit(self._make, nxt)
        return future.result()

    def close(self) -> None:
        """Drop what was built ahead and not taken (a run that stops early), wait for the thread."""
        for future in self._pending.values():
            future.cancel()
        self._pending.clear()
        self._thread.shutdown(wait=True)

    def __enter__(self) -> Ahead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class HeldSubmissions:
    """S_syn's part of every window's tag submissions, held by the proxy until the last window and
    then delivered in one uniformly random order, in batches of ``batch`` (design §6).

    Delivered window by window, each with its share of the dummies, the batches told S_syn which
    tags are dummies whenever the input is grouped (by topic, by source): a real tag's users sit
    in one or two windows, a dummy's submissions in windows drawn independently. One shuffle of
    all of them, whose batch sizes depend only on their number, leaves S_syn the runner's view.
    Held on disk (a sealed submission is ~100 bytes, ~140 as a Python object: 1.4 GB at 10^7, a
    third of a 4 GiB run), with one 8-byte end offset each in memory and one permutation of their
    indices at the end (8 bytes each; drawing it takes a few times that, briefly). The order comes from :data:`HELD_SHUFFLE_LABEL`'s stream: uniform, as
    the proxy's shuffler draws it, without a list of 10^7 Python integers."""

    def __init__(self, path: Path, rng: RandomSource, batch: int) -> None:
        self._path, self._rng, self._batch = path, rng, batch
        self._file = path.open("wb")
        self._ends: list[npt.NDArray[np.int64]] = []
        self._size = 0

    @classmethod
    def for_run(cls, run: RunPlan, directory: Path, batch: int) -> HeldSubmissions:
        return cls(directory / "phase1-held.bin", run.seeds.secret(streams.HELD_SHUFFLE), batch)

    def add(self, ciphertexts: Sequence[bytes]) -> None:
        """Hold one batch the proxy forwarded for S_syn."""
        if not ciphertexts:
            return
        lengths = np.fromiter((len(c) for c in ciphertexts), dtype=np.int64, count=len(ciphertexts))
        self._file.write(b"".join(ciphertexts))
        self._ends.append(self._size + np.cumsum(lengths))
        self._size += int(lengths.sum())

    def deliver(self, receive: Callable[[list[bytes]], None]) -> int:
        """Everything held, shuffled as a whole, to ``receive`` in batches; returns how many."""
        self._file.close()
        ends = np.concatenate(self._ends) if self._ends else np.zeros(0, dtype=np.int64)
        self._ends = []
        starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
        order = self._rng.permutation(len(ends))
        if len(ends):
            raw = np.memmap(self._path, dtype=np.uint8, mode="r")
            for lo in range(0, len(order), self._batch):
                picked = order[lo : lo + self._batch]
                receive([raw[s:e].tobytes() for s, e in zip(starts[picked].tolist(), ends[picked].tolist(), strict=True)])
            del raw
        self._path.unlink(missing_ok=True)
        return len(ends)


def dummy_schedule(seeds: SeedPlan, count: int, windows: list[range]) -> list[list[int]]:
    """The window each dummy submission is sent in: drawn by the dummy user, each window with
    probability proportional to its users, so no window's share of dummies stands out to the
    proxy (S_syn gets every window's at once, :class:`HeldSubmissions`)."""
    sizes = np.array([len(w) for w in windows], dtype=np.float64)
    bounds = np.cumsum(sizes) / sizes.sum()
    draws = seeds.secret(streams.DUMMY).child("schedule").uniform(count)
    where = np.minimum(np.searchsorted(bounds, draws, side="right"), len(windows) - 1)
    out: list[list[int]] = [[] for _ in windows]
    for j, k in enumerate(where.tolist()):
        out[k].append(j)
    return out


def _phase1_devices(ctx: WindowContext, span: range) -> UserPopulation:
    """A window's devices for phase 1, with their offline work done."""
    users = population(ctx.run, ctx.parties.keys, ctx.driver, span, coins=ctx.coins, grid=ctx.grid)
    with ctx.driver.meter.phase("users_offline"):
        users.prepare(PHASE1_SEALS)
    return users


def _phase1_window(ctx: WindowContext, users: UserPopulation, span: range, dummies: list[Message]) -> UserTally:
    """One window's phase 1 with its prepared devices: VOPRF, tag submissions (with its
    dummies); the devices keep their outcome and are dropped."""
    driver, parties = ctx.driver, ctx.parties
    phase1(parties, users, driver)
    with driver.meter.phase("phase1_submit"):
        phase1_submit(parties, users.tag_submissions() + dummies, driver, deliver=ctx.held.add)
    ctx.devices.save(span, users)
    return users.tally()


def _phase2(
    ctx: WindowContext, ahead: Ahead, plan: Phase2Plan, released: dict[bytes, int], message: bytes
) -> UserTally:
    """Phase 2 window by window. Participants (submitted a released tag, still online) form
    chunks in user order, as in the runner; a chunk is encoded and shared from its own stream
    when the window of its first user plays, and each user seals and sends in its own window."""
    run, driver = ctx.run, ctx.driver
    roster = Roster.of(ctx, released)
    participants, cover, part_chunks = roster.participants, roster.cover, roster.part_chunks
    pending: dict[int, tuple[bytes, bytes]] = {}
    next_chunk = 0
    share_sizes = plan.sharing.share_sizes(plan.width)
    users_rng = run.seeds.secret(streams.USERS)
    for k, span in enumerate(ctx.windows):
        users = ahead.take(span)
        if k == 0:
            users.receive_broadcast(message)  # recorded once: every device hears the same
        with driver.meter.phase("phase2_shares"):
            todo = roster.due(next_chunk, span)
            next_chunk += len(todo)

            def encode(j: int) -> list[tuple[int, tuple[bytes, bytes]]]:
                c = part_chunks[j]
                who = participants[c.start : c.stop]
                plains = share_plaintexts(
                    take_rows(run.x, run.slots.rows_of(who)), ctx.devices.tag_list(who), encoder=plan.encoder, sharing=plan.sharing,
                    noise=run.noise, rng=users_rng.child(streams.phase2(j)), meter=driver.meter,
                    tokens=ctx.devices.token_list(who),
                )
                return list(zip(who.tolist(), plains, strict=True))

            for part in driver.user_pool.map(encode, todo, desc="users: DDG encode + share"):
                pending.update(part)
            mine = within(participants, span)
            shares = users.sealed_shares([i - span.start for i in mine], [pending.pop(i) for i in mine])
            covering = within(cover, span)
            if covering:
                shares += users.cover_messages(np.asarray(covering, dtype=np.int64) - span.start, share_sizes)
            phase2(ctx.parties, plan, shares, driver, concurrent=True)
            settle_window(ctx.parties, plan)
        ctx.release_pages()
    return roster.tally()


def settle_window(parties: Parties, plan: Phase2Plan) -> None:
    """After a window's shares: S_syn names the contributions it accepted since the last window,
    S_tag keeps those it accepted too and names them back, S_syn keeps those; each takes the
    others out of its running sum. A share only one server accepted (malformed on one side) is
    then in neither sum, as the runner's servers leave it out at the aggregation; without this a
    running sum could not drop it and the aggregation would be refused."""
    named = parties.s_syn.pending_contributions()
    common = parties.s_tag.settle_contributions(named, sharing=plan.sharing, dim=plan.width)
    parties.s_syn.settle_contributions(common, sharing=plan.sharing, dim=plan.width)


@dataclass(frozen=True, slots=True, kw_only=True)
class Roster:
    """Who sends what in phase 2, from the devices' phase-1 outcomes and the broadcast:
    participants (submitted a released tag, still online) in user order and their chunks,
    cover senders, and the eligible users who dropped out."""

    participants: npt.NDArray[np.int64]
    cover: npt.NDArray[np.int64]
    part_chunks: list[range]
    n_dropped: int

    @classmethod
    def of(cls, ctx: WindowContext, released: Mapping[bytes, int]) -> Roster:
        run = ctx.run
        active = ~run.dropped_mask
        eligible = np.concatenate([ctx.devices.eligible(w, released) for w in ctx.windows])
        release_pages(ctx.devices.tags)  # read whole once, here
        participants = np.flatnonzero(eligible & active)
        cover = np.flatnonzero(~eligible & active) if run.cfg.cover_traffic else np.zeros(0, dtype=np.int64)
        return cls(
            participants=participants, cover=cover, part_chunks=chunks(len(participants), run.cfg.chunk_size),
            n_dropped=int(np.count_nonzero(eligible & ~active)),
        )

    def due(self, first: int, span: range) -> list[int]:
        """Participant chunks from ``first`` on whose first user falls before the end of ``span``:
        those the window ``span`` encodes (a chunk is encoded once, in its first user's window)."""
        out = []
        j = first
        while j < len(self.part_chunks) and self.participants[self.part_chunks[j].start] < span.stop:
            out.append(j)
            j += 1
        return out

    def tally(self) -> UserTally:
        return UserTally(
            n_participants=len(self.participants), n_dropped_out=self.n_dropped, n_cover_users=len(self.cover)
        )


def _phase2_devices(ctx: WindowContext, span: range, released: dict[bytes, int]) -> UserPopulation:
    """A window's devices for phase 2, with their offline work (phase 2's seals) done."""
    users = _phase2_population(ctx, span, released)
    with ctx.driver.meter.phase("users_offline"):
        users.prepare(PHASE2_SEALS)
    return users


def _phase2_population(ctx: WindowContext, span: range, released: dict[bytes, int]) -> UserPopulation:
    """A window's devices for phase 2, with their phase-1 outcome restored. Phase 2 does not use
    the bucket encodings (the tag stands for the bucket), so none are computed again."""
    run, driver = ctx.run, ctx.driver
    idx = np.arange(span.start, span.stop)
    users = UserPopulation(
        np.zeros((len(span), 0)), [b""] * len(span), ctx.coins[span.start : span.stop], suite=run.comps.suite,
        keys=ctx.parties.keys, channel=run.comps.channel, rng=run.seeds.secret(streams.USERS), workers=driver.user_pool,
        meter=driver.meter, recorder=driver.recorder, chunk_size=run.cfg.chunk_size,
        cover_traffic=run.cfg.cover_traffic, first_chunk=span.start // run.cfg.chunk_size,
    )
    users.restore(
        ctx.devices.tag_list(idx), ctx.devices.submitted[span.start : span.stop], released,
        tokens=ctx.devices.token_list(idx),
    )
    return users


def within(sorted_users: npt.NDArray[np.int64], span: range) -> list[int]:
    lo, hi = np.searchsorted(sorted_users, [span.start, span.stop])
    out: list[int] = sorted_users[lo:hi].tolist()
    return out


__all__ = [
    "DEFAULT_WINDOW_CHUNKS", "DeviceStates", "HeldSubmissions", "Players", "Roster", "WindowContext", "WindowPlayer", "dummy_schedule",
    "play_windows",
    "run_streaming", "settle_window", "within",
]
