"""What the roles decide when a round is played in windows (design §6).

A windowed driver (:mod:`fre_protocol.drivers.streaming`, :mod:`fre_protocol.drivers.dask`,
:mod:`fre_protocol.drivers.user_processes`) plays the reference driver's stages on a window of
users at a time. What playing in windows changes in the protocol is decided here, once for every
such driver; the drivers only move the messages and keep the devices' state between the phases:

* the proxy holds every window's tag submissions for S_syn and hands them over in one shuffle
  (:class:`HeldSubmissions`), so which window a submission came from is lost;
* S_tag's dummy user sends each dummy in a window it draws (:func:`dummy_schedule`,
  :func:`window_dummies`);
* phase 2: who sends shares and who sends cover (:class:`Roster`, from each device's phase-1
  outcome, :func:`eligible`), each chunk of participants encoded from its own stream wherever its
  users' windows fall (:func:`encode_participants`), and what a window's devices send
  (:func:`window_shares`);
* the servers keep running sums, so after each window they settle which of its contributions
  both accepted (:func:`settle_window`).

Every draw keeps its label (:mod:`fre_protocol.roles.streams`): a seeded windowed run releases
what the reference driver releases, bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fre_protocol.messages import Role
from fre_protocol.roles import streams
from fre_protocol.roles.base import Meter, chunks
from fre_protocol.roles.dummy_user import DummyUser
from fre_protocol.roles.round import Parties, Phase2Plan, RunPlan
from fre_protocol.roles.user import UserPopulation, UserTally, share_plaintexts
from mechanism.seeds import SeedPlan
from primitives.randomness import RandomSource

#: A user's message as a population hands it to the proxy: (connection, recipient, bytes).
Message = tuple[int, Role, bytes]


class HeldSubmissions:
    """S_syn's part of every window's tag submissions, held by the proxy until the last window and
    then delivered in one uniformly random order, in batches of ``batch`` (design §6).

    Delivered window by window, each with its share of the dummies, the batches told S_syn which
    tags are dummies whenever the input is grouped (by topic, by source): a real tag's users sit
    in one or two windows, a dummy's submissions in windows drawn independently. One shuffle of
    all of them, whose batch sizes depend only on their number, leaves S_syn the reference
    driver's view. Held on disk (a sealed submission is ~100 bytes, ~140 as a Python object:
    1.4 GB at 10^7, a third of a 4 GiB run), with one 8-byte end offset each in memory and one
    permutation of their indices at the end (8 bytes each; drawing it takes a few times that,
    briefly). The order comes from :data:`~fre_protocol.roles.streams.HELD_SHUFFLE`'s stream:
    uniform, as the proxy's shuffler draws it, without a list of 10^7 Python integers."""

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


def window_dummies(
    dummy_user: DummyUser | None, tau: float, seeds: SeedPlan, windows: list[range], meter: Meter
) -> list[list[Message]]:
    """S_tag's dummy submissions (none outside DP runs), each in the window its dummy user draws
    for it (:func:`dummy_schedule`): one list a window."""
    if dummy_user is None:
        return [[] for _ in windows]
    with meter.phase("phase1_submit"):
        submissions = dummy_user.submissions(tau)
    return [[submissions[j] for j in part] for part in dummy_schedule(seeds, len(submissions), windows)]


def eligible(
    tags: Sequence[bytes | None], submitted: npt.NDArray[np.bool_], released: Container[bytes]
) -> npt.NDArray[np.bool_]:
    """Which devices (their tags, None where a device has none, and whether each submitted it)
    submitted a tag that S_syn released, as each device reads the broadcast it heard (``released``:
    the :class:`~fre_protocol.roles.broadcast.HeardBroadcast`; a compact one also answers yes for
    the rare unreleased tag that hits a false positive): phase 2's participants, if they are still
    online."""
    return np.array([bool(s) and t in released for t, s in zip(tags, submitted, strict=True)], dtype=bool)


def within(sorted_users: npt.NDArray[np.int64], span: range) -> list[int]:
    """The users of ``sorted_users`` (ascending) that fall in ``span``."""
    lo, hi = np.searchsorted(sorted_users, [span.start, span.stop])
    out: list[int] = sorted_users[lo:hi].tolist()
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Roster:
    """Who sends what in phase 2, from the devices' phase-1 outcomes and the broadcast:
    participants (submitted a released tag, still online) in user order and their chunks,
    cover senders (every other online user, with cover traffic on), and the eligible users who
    dropped out."""

    participants: npt.NDArray[np.int64]
    cover: npt.NDArray[np.int64]
    part_chunks: list[range]
    n_dropped: int

    @classmethod
    def of(cls, run: RunPlan, eligible: npt.NDArray[np.bool_]) -> Roster:
        """The roster of a run whose users ``eligible`` (every user's, :func:`eligible`) submitted a
        released tag."""
        active = ~run.dropped_mask
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

    def members(self, j: int) -> npt.NDArray[np.int64]:
        """The users of participant chunk ``j``."""
        part = self.part_chunks[j]
        return self.participants[part.start : part.stop]

    def senders(self, span: range) -> tuple[list[int], list[int]]:
        """The users of ``span`` that send their shares, and those that send cover."""
        return within(self.participants, span), within(self.cover, span)

    def tally(self) -> UserTally:
        return UserTally(
            n_participants=len(self.participants), n_dropped_out=self.n_dropped, n_cover_users=len(self.cover)
        )


def encode_participants(
    j: int, who: npt.NDArray[np.int64], x: npt.NDArray[np.floating[Any]], tags: list[bytes | None],
    tokens: list[bytes | None], *, plan: Phase2Plan, noise: bool, users_rng: RandomSource, meter: Meter,
) -> dict[int, tuple[bytes, bytes]]:
    """The j-th chunk of phase-2 participants (users ``who``, their rows ``x``, tags and tokens):
    each DDG-encodes, adds its noise, shares and draws its contribution id from the chunk's own
    stream ``phase2/<j>`` under the devices' stream ``users_rng``, whichever window, process or
    machine does it. The two ShareSubmissions of each user, by user."""
    plains = share_plaintexts(
        x, tags, encoder=plan.encoder, sharing=plan.sharing, noise=noise, rng=users_rng.child(streams.phase2(j)),
        meter=meter, tokens=tokens, sigmas=plan.sigmas,
    )
    return dict(zip(who.tolist(), plains, strict=True))


def window_shares(
    users: UserPopulation, start: int, participants: Sequence[int], plains: Sequence[tuple[bytes, bytes]],
    cover: Sequence[int], plan: Phase2Plan,
) -> list[Message]:
    """What the devices ``users`` (users ``start`` on) send in phase 2: each of ``participants``
    seals its two shares (``plains``), each of ``cover`` two covers of the shares' sizes."""
    out = users.sealed_shares([i - start for i in participants], list(plains))
    if len(cover):
        out += users.cover_messages(np.asarray(cover, dtype=np.int64) - start, plan.sharing.share_sizes(plan.width))
    return out


def settle_window(parties: Parties, plan: Phase2Plan) -> None:
    """After a window's shares: S_syn names the contributions it accepted since the last window,
    S_tag keeps those it accepted too and names them back, S_syn keeps those; each takes the
    others out of its running sum. A share only one server accepted (malformed on one side) is
    then in neither sum, as the reference driver's servers leave it out at the aggregation;
    without this a running sum could not drop it and the aggregation would be refused."""
    named = parties.s_syn.pending_contributions()
    common = parties.s_tag.settle_contributions(named, sharing=plan.sharing, dim=plan.width)
    parties.s_syn.settle_contributions(common, sharing=plan.sharing, dim=plan.width)


__all__ = [
    "HeldSubmissions", "Message", "Roster", "dummy_schedule", "eligible", "encode_participants", "settle_window",
    "window_dummies", "window_shares", "within",
]
