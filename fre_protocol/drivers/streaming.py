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
* coins, the dropout mask and the public grid are drawn once, as the in-process driver draws them;
* S_tag's proof nonces are keyed by the elements they prove, so the proxy's shuffles (one per
  window instead of one per phase) change only the order in which servers receive messages.
  Modular sums do not depend on that order.

The window loop (:func:`play_windows`) is shared with :mod:`fre_protocol.drivers.dask`, which
plays the same windows with the users' chunks as Dask tasks and the servers as Dask actors, and
with :mod:`fre_protocol.drivers.user_processes`, whose players run those tasks in local worker processes
while the servers stay in this one.

Phase 1's tag submissions reach S_syn as in the in-process driver, in one uniformly random order with all
of S_tag's dummies: the proxy takes each window's submissions (and the window's share of the
dummies, a random window each from the dummy user's own stream) as they come, holds S_syn's part
(:class:`~fre_protocol.roles.windows.HeldSubmissions`, spooled to disk) and, after the last window, hands it over shuffled as
a whole, in batches of one window's size. Which window a submission came from is then lost, so
rows grouped by topic in the input cannot mark a real tag (its users in one or two windows) apart
from a dummy (its submissions in windows drawn independently); see design §6.

What differs: the proxy shuffles each window's batch on its own, so the transcripts hold the
same messages in another order. With ``proof_batch_size > 1`` the batches are formed within a
window, so the proofs (not the tags) differ. The servers keep running sums, so after each window
they settle which of its contributions both hold
(:func:`~fre_protocol.roles.windows.settle_window`: two AcceptedContributions messages a tag,
which the in-process driver's transcripts do not have) and a share only one of them accepted is taken out;
a validator's strict subset is still refused rather than summed, and no adversary can be placed
on the network.

What the roles decide in a windowed round (the held submissions and their one shuffle, the
dummies' windows, who sends shares or cover, the settling) is :mod:`fre_protocol.roles.windows`;
this module moves the messages, keeps the devices' state between the phases
(:class:`DeviceStates`) and builds each window's devices a window ahead (:class:`Ahead`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Container, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from fre_protocol.drivers import local
from fre_protocol.inputs import EmbeddingShards, release_pages, take_rows
from fre_protocol.messages import TAG_BYTES, TOKEN_BYTES
from fre_protocol.roles import streams
from fre_protocol.roles.base import Runtime, chunks
from fre_protocol.roles.broadcast import HeardBroadcast
from fre_protocol.roles.config import RoundSpec, RunOptions
from fre_protocol.roles.round import (
    Parties,
    Phase2Plan,
    RunPlan,
    dummy_user_for,
    hear,
    plan_devices,
    plan_phase2,
    plan_run,
    population,
    setup,
    user_coins,
)
from fre_protocol.roles.user import PHASE1_SEALS, PHASE2_SEALS, UserPopulation, UserTally
from fre_protocol.roles.windows import (
    HeldSubmissions,
    Message,
    Roster,
    eligible,
    encode_participants,
    settle_window,
    window_dummies,
    window_shares,
)
from mechanism.grid import PublicGrid
from mechanism.release import Release
from primitives.errors import InvalidParameterError

#: Chunks of users per window by default (16 × 1024 users: a few tens of MB of messages).
DEFAULT_WINDOW_CHUNKS = 16

#: A windowed run's play: the run, the driver, the store, the window (users) and a directory
#: for what it keeps on disk during the run.
WindowedPlay = Callable[[RunPlan, Runtime, Any, int, Path], tuple[Release, dict[str, Any]]]


def run_streaming(
    x: npt.ArrayLike | EmbeddingShards,
    spec: RoundSpec,
    options: RunOptions | None = None,
    *,
    users: npt.ArrayLike | None = None,
    window_chunks: int = DEFAULT_WINDOW_CHUNKS,
    players: Players | None = None,
) -> local.ProtocolResult:
    """:func:`~fre_protocol.drivers.inprocess.run_protocol` (same arguments, same outputs and
    files), played ``window_chunks`` chunks of ``config.chunk_size`` users at a time. Under a user
    unit the entries are slots (:mod:`fre_protocol.slots`): the layout is fixed before any window
    from one pass over every row's bucket, and each window reads its slots' rows.

    ``players``: how the users' side of the windows is played, given the windows' context (the
    default: this process's threads; :func:`fre_protocol.drivers.user_processes.in_worker_processes`:
    local worker processes). Same release either way."""
    run, window = plan_windows(x, spec, users=users, window_chunks=window_chunks)

    def play(run: RunPlan, driver: Runtime, store: Any, window: int, tmp: Path) -> tuple[Release, dict[str, Any]]:
        return _play(run, driver, store, window, tmp, players or _InProcessWindows)

    return execute_windows(run, window, play, options)


def plan_windows(
    x: npt.ArrayLike | EmbeddingShards, spec: RoundSpec, *, users: npt.ArrayLike | None, window_chunks: int
) -> tuple[RunPlan, int]:
    """A windowed run's plan and its window (users), checked before any work."""
    if isinstance(window_chunks, bool) or not isinstance(window_chunks, int) or window_chunks < 1:
        raise InvalidParameterError(f"window_chunks must be an integer >= 1, got {window_chunks!r}")
    run = plan_run(x, spec, users=users)
    return run, window_chunks * run.cfg.chunk_size


def execute_windows(run: RunPlan, window: int, play: WindowedPlay, options: RunOptions | None) -> local.ProtocolResult:
    """:func:`~fre_protocol.drivers.local.execute` for a windowed ``play``, with a temporary
    directory for the devices' states and the held submissions."""

    def in_tmp(run: RunPlan, driver: Runtime, store: Any) -> tuple[Release, dict[str, Any]]:
        with tempfile.TemporaryDirectory(prefix="fre-devices-") as tmp:
            return play(run, driver, store, window, Path(tmp))

    return local.execute(run, in_tmp, options)


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

    def save_packed(
        self, span: range, tags: bytes, has_tag: npt.NDArray[np.bool_], submitted: npt.NDArray[np.bool_], tokens: bytes
    ) -> None:
        """The outcome of devices ``span`` as a task hands it back: tags and tokens packed (zeros
        where a device has none) and the two flags."""
        lo, hi = span.start, span.stop
        self.tags[lo:hi] = np.frombuffer(tags, dtype=np.uint8).reshape(hi - lo, TAG_BYTES)
        self.has_tag[lo:hi] = has_tag
        self.submitted[lo:hi] = submitted
        self.tokens[lo:hi] = np.frombuffer(tokens, dtype=np.uint8).reshape(hi - lo, TOKEN_BYTES)

    def token_list(self, users: npt.NDArray[np.int64]) -> list[bytes | None]:
        """The users' contribution tokens (None for a user that submitted no tag)."""
        raw = np.ascontiguousarray(self.tokens[users]).tobytes()
        return [raw[TOKEN_BYTES * j : TOKEN_BYTES * (j + 1)] if self.submitted[i] else None for j, i in enumerate(users)]

    def tag_list(self, users: npt.NDArray[np.int64]) -> list[bytes | None]:
        raw = np.ascontiguousarray(self.tags[users]).tobytes()
        return [raw[TAG_BYTES * j : TAG_BYTES * (j + 1)] if self.has_tag[i] else None for j, i in enumerate(users)]

    def eligible(self, span: range, released: Container[bytes]) -> npt.NDArray[np.bool_]:
        """Users of ``span`` whose submitted tag was released (as the broadcast they heard says)."""
        return eligible(self.tag_list(np.arange(span.start, span.stop)), self.submitted[span.start : span.stop], released)


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

    @classmethod
    def open(cls, run: RunPlan, driver: Runtime, parties: Parties, window: int, tmp: Path) -> WindowContext:
        """The windows of ``window`` users of a run, its coins and public grid drawn once, the
        devices' states and the held submissions in ``tmp``."""
        return cls(
            run=run, driver=driver, parties=parties,
            coins=user_coins(run.seeds, run.n, run.params, run.cfg.chunk_size),
            grid=PublicGrid.derive(run.seeds, run.dim, run.params),
            devices=DeviceStates(run.n, tmp), windows=chunks(run.n, window),
            held=HeldSubmissions.for_run(run, tmp, window),
        )

    def roster(self, released: Container[bytes]) -> Roster:
        """Phase 2's roster, from every device's outcome of phase 1 (read whole once, here) and
        the broadcast as the devices heard it (each asks it about its own tag)."""
        eligible = np.concatenate([self.devices.eligible(w, released) for w in self.windows])
        release_pages(self.devices.tags)
        return Roster.of(self.run, eligible)

    def release_pages(self) -> None:
        """After a window: the pages of the input rows it read and of the device states it
        wrote need not stay resident (both are memory-mapped files)."""
        release_pages(self.run.x)
        release_pages(self.devices.tags)


def _play(
    run: RunPlan, driver: Runtime, store: Any, window: int, tmp: Path, players: Players
) -> tuple[Release, dict[str, Any]]:
    parties = setup(run, driver, keep_contributions=False)
    ctx = WindowContext.open(run, driver, parties, window, tmp)
    dummy_user = dummy_user_for(run, parties.keys.syn_box_key, driver)
    dummies = window_dummies(dummy_user, run.params.tau, run.seeds, ctx.windows, driver.meter)
    with players(ctx) as users:
        return play_windows(ctx, store, users, dummies, dummy_user)


class WindowPlayer(Protocol):
    """How a driver plays the users' side of one window (phase 1) and of phase 2; the servers'
    side is the in-process driver's stages on ``ctx.parties``, wherever those servers run. A window's tag
    submissions (with that window's dummies) go through the proxy into ``ctx.held``, not to
    S_syn; a player may send them during a later window and report them there, and
    :meth:`phase1_done` sends and reports what it still holds."""

    def phase1(self, span: range, dummies: list[Message]) -> UserTally: ...

    def phase1_done(self) -> UserTally: ...

    def phase2(self, plan: Phase2Plan, heard: HeardBroadcast, message: bytes) -> UserTally: ...


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
    released, message = local.broadcast(parties, driver)
    plan = plan_phase2(run, released)
    # The devices hear the compact broadcast: who takes part and each one's noise come from it.
    heard = hear(run, message)
    tally += users.phase2(plan_devices(run, heard, like=plan), heard, message)
    heard.meter(driver.meter)
    return local.finish(run, parties, plan, released, driver, dummy_user, tally, store)


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

    def phase2(self, plan: Phase2Plan, heard: HeardBroadcast, message: bytes) -> UserTally:
        self.ahead.close()
        with Ahead(self.ctx.windows, lambda span: _phase2_devices(self.ctx, span, heard)) as ahead:
            return _phase2(self.ctx, ahead, plan, message, self.ctx.roster(heard))

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
    local.phase1(parties, users, driver)
    with driver.meter.phase("phase1_submit"):
        local.phase1_submit(parties, users.tag_submissions() + dummies, driver, deliver=ctx.held.add)
    ctx.devices.save(span, users)
    return users.tally()


def _phase2(ctx: WindowContext, ahead: Ahead, plan: Phase2Plan, message: bytes, roster: Roster) -> UserTally:
    """Phase 2 window by window. Participants (submitted a released tag, still online) form
    chunks in user order, as in the in-process driver; a chunk is encoded and shared from its own stream
    when the window of its first user plays, and each user seals and sends in its own window."""
    run, driver = ctx.run, ctx.driver
    pending: dict[int, tuple[bytes, bytes]] = {}
    next_chunk = 0
    users_rng = run.seeds.secret(streams.USERS)

    def encode(j: int) -> dict[int, tuple[bytes, bytes]]:
        who = roster.members(j)
        return encode_participants(
            j, who, take_rows(run.x, run.slots.rows_of(who)), ctx.devices.tag_list(who), ctx.devices.token_list(who),
            plan=plan, noise=run.noise, users_rng=users_rng, meter=driver.meter,
        )

    for k, span in enumerate(ctx.windows):
        users = ahead.take(span)
        if k == 0:
            users.receive_broadcast(message)  # recorded once: every device hears the same
        with driver.meter.phase("phase2_shares"):
            todo = roster.due(next_chunk, span)
            next_chunk += len(todo)
            for part in driver.user_pool.map(encode, todo, desc="users: DDG encode + share"):
                pending.update(part)
            mine, covering = roster.senders(span)
            shares = window_shares(users, span.start, mine, [pending.pop(i) for i in mine], covering, plan)
            local.phase2(ctx.parties, plan, shares, driver, concurrent=True)
            settle_window(ctx.parties, plan)
        ctx.release_pages()
    return roster.tally()


def _phase2_devices(ctx: WindowContext, span: range, heard: HeardBroadcast) -> UserPopulation:
    """A window's devices for phase 2, with their phase-1 outcome restored and their offline
    work (phase 2's seals) done."""
    users = population(ctx.run, ctx.parties.keys, ctx.driver, span, coins=ctx.coins, inputs=False)
    idx = np.arange(span.start, span.stop)
    users.restore(
        ctx.devices.tag_list(idx), ctx.devices.submitted[span.start : span.stop], heard,
        tokens=ctx.devices.token_list(idx),
    )
    with ctx.driver.meter.phase("users_offline"):
        users.prepare(PHASE2_SEALS)
    return users


__all__ = [
    "DEFAULT_WINDOW_CHUNKS", "Ahead", "DeviceStates", "Players", "WindowContext", "WindowPlayer", "WindowedPlay",
    "execute_windows", "play_windows", "plan_windows", "run_streaming",
]
