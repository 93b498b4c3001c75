"""The synthesis server S_syn (design §6; paper §6.1-6.2, Algorithm 2 lines 7-10 and 16-19).

Phase 1: it opens the sealed tag submissions (users' and the dummy user's, indistinguishable),
counts them per tag (one count per distinct token hash), keeps the tags whose count reaches the
release floor ⌈τ⌉ and broadcasts them with their counts; S_tag alone gets each released tag's
token hashes (design §6.8). Phase 2: it keeps one share of each participating user's encoding per
released tag (only with an unspent token of that tag), tells S_tag which contributions it accepted, receives S_tag's aggregate share over the common
contributions, reconstructs the modular sum, decodes it (DDG) and divides by the number of
contributors: a DP centroid per released tag.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from fre_protocol.messages import (
    TAG_BYTES,
    TOKEN_HASH_BYTES,
    AcceptedContributions,
    AggregateShare,
    CoverShare,
    ReleasedTags,
    ReleasedTokens,
    Role,
    ShareSubmission,
    TagSubmission,
    decode_as,
    message_type_name,
)
from fre_protocol.roles.base import (
    AGGREGATION,
    DROPOUT_POLICIES,
    PHASE1_SUBMIT,
    PHASE2,
    TOPUP,
    WITHHOLD,
    Channel,
    Meter,
    Recorder,
    Row,
    Workers,
    status_of,
)
from fre_protocol.roles.broadcast import DEFAULT_BROADCAST, build_message
from fre_protocol.roles.broadcast import encoding as broadcast_encoding
from fre_protocol.roles.replay_filter import ReplayFilter
from fre_protocol.roles.server_common import (
    Opened,
    SealedInbox,
    ShareBook,
    TokenBook,
    accept_shares,
    settle_shares,
)
from fre_protocol.roles.state import Transitions, step
from primitives.compact.broadcast import BroadcastEncoding
from primitives.errors import DecodeError, InvalidParameterError, ProtocolStateError
from primitives.secret import Secret

VIEW = Role.S_SYN.label

#: Why a released tag got no centroid when its phase-2 contributors fell below the release floor
#: (the count itself stays in the operator's diagnostics).
BELOW_FLOOR = "fewer phase-2 contributors than the release floor"
#: Why a tag at or above the floor was withheld under count-sized noise (design §4.4).
BELOW_SIZED = "fewer phase-2 contributors than its noise was sized for (m_h)"
#: Why a decoded sum was withheld by the norm guard (see :meth:`SynthesisServer.reconstruct`).
NORM_GUARD = "decoded sum longer than any honest contributions and noise can make it"


class ContributionValidator(Protocol):
    """Where per-contribution validity checks plug in (Prio-style proofs that a share pair
    encodes a clipped vector). Neither server can check a norm on its own share, so such a
    check is joint: an implementation runs its verifier exchange with S_tag and returns the
    contribution ids that passed; only those are named in AcceptedContributions, so both
    servers sum exactly the validated set. None is built in (see the threat model)."""

    def valid(self, tag: bytes, contribution_ids: tuple[bytes, ...]) -> tuple[bytes, ...]: ...


@dataclass
class Reconstruction:
    """S_syn's output for the released tags: centroids of those it could release."""

    centroids: dict[bytes, npt.NDArray[np.float64]] = field(default_factory=dict)
    contributors: dict[bytes, int] = field(default_factory=dict)
    withheld: dict[bytes, str] = field(default_factory=dict)


class SynthesisState(Enum):
    """Where S_syn stands in the round (:data:`SYNTHESIS_TRANSITIONS`)."""

    COUNTING = "counting"
    RELEASED = "released"
    AGGREGATING = "aggregating"
    RECONSTRUCTED = "reconstructed"


_S = SynthesisState

#: S_syn's messages by state: tag submissions in any number of batches until it releases; then
#: the token hashes for S_tag, shares in any number of batches (settled after each window under
#: running sums); then it names its accepted contributions (again, if asking S_tag failed) and
#: reconstructs from S_tag's aggregate shares once. A networked S_syn rebuilt from its log
#: replays S_tag's logged answer without naming its contributions again: reconstruct is taken
#: straight after the release too.
SYNTHESIS_TRANSITIONS: Transitions[SynthesisState] = Transitions(
    role=VIEW,
    initial=_S.COUNTING,
    table={
        "receive_submissions": {_S.COUNTING: _S.COUNTING},
        "release": {_S.COUNTING: _S.RELEASED},
        "released_tokens": {_S.RELEASED: _S.RELEASED},
        "user_broadcast": {_S.RELEASED: _S.RELEASED},
        "receive_shares": {_S.RELEASED: _S.RELEASED},
        "pending_contributions": {_S.RELEASED: _S.RELEASED},
        "settle_contributions": {_S.RELEASED: _S.RELEASED},
        "accepted_contributions": {_S.RELEASED: _S.AGGREGATING, _S.AGGREGATING: _S.AGGREGATING},
        "reconstruct": {_S.RELEASED: _S.RECONSTRUCTED, _S.AGGREGATING: _S.RECONSTRUCTED},
    },
)


@dataclass(frozen=True, slots=True)
class _Sums:
    """Reconstruction's rows: S_tag's aggregate shares converted from the wire straight into
    consecutive rows of one array (row i belongs to ``ready[i]``, so reconstruction need not
    stack them again), and S_syn's own sums row for row."""

    theirs: npt.NDArray[np.uint64]
    own: npt.NDArray[np.uint64]
    ready: list[tuple[bytes, int]] = field(default_factory=list)

    @classmethod
    def empty(cls, rows: int, width: int) -> _Sums:
        return cls(np.empty((rows, width), dtype=np.uint64), np.empty((rows, width), dtype=np.uint64))


class SynthesisServer:
    """S_syn. States (:data:`SYNTHESIS_TRANSITIONS`; a message in any other state is refused with
    :class:`~fre_protocol.roles.state.OutOfOrderError`, and nothing happens):

    =============  ==============================================================
    state          message → next state
    =============  ==============================================================
    counting       receive_submissions (any number of batches) → counting;
                   release → released
    released       released_tokens, user_broadcast, receive_shares,
                   pending_contributions, settle_contributions → released;
                   accepted_contributions → aggregating; reconstruct → reconstructed
    aggregating    accepted_contributions → aggregating; reconstruct → reconstructed
    reconstructed  nothing
    =============  ==============================================================

    :attr:`n_submissions` and the attributes are read in any state.
    """

    TRANSITIONS = SYNTHESIS_TRANSITIONS

    def __init__(
        self,
        *,
        box_key: tuple[Secret[bytes], bytes],
        channel: Channel,
        workers: Workers,
        meter: Meter,
        recorder: Recorder,
        release_floor: int,
        validator: ContributionValidator | None = None,
        keep_contributions: bool = True,
        broadcast: BroadcastEncoding | None = None,
        broadcast_seed: bytes = b"",
    ) -> None:
        if isinstance(release_floor, bool) or not isinstance(release_floor, int) or release_floor < 1:
            raise InvalidParameterError(f"release_floor must be an integer >= 1, got {release_floor!r}")
        self._box_sk, self.box_public_key = box_key
        self._meter = meter
        self._recorder = recorder
        self.release_floor = release_floor
        self._validator = validator
        # The users' broadcast: the round's encoding and public seed (fre_protocol.roles.broadcast).
        self._broadcast = broadcast if broadcast is not None else broadcast_encoding(DEFAULT_BROADCAST)
        self._broadcast_seed = bytes(broadcast_seed)
        self._inbox = SealedInbox(name="S_syn", channel=channel, private_key=self._box_sk, workers=workers, meter=meter)
        # Token hashes already counted (design §6.8): fresh per submission, so a repeated one is a
        # message delivered twice or a token submitted twice, refused either way.
        self._token_hashes = ReplayFilter(TOKEN_HASH_BYTES)
        # Counted as they arrive: memory per distinct tag, not per submission.
        self.counts: Counter[bytes] = Counter()
        # Each batch's counted tags and token hashes (32 bytes each, concatenated): grouped by
        # tag once, at the release, for the tags released.
        self._pairs: list[tuple[bytes, bytes]] = []
        self._released_hashes: dict[bytes, list[bytes]] = {}
        self._tokens = TokenBook()
        self._n_submissions = 0
        self.released: dict[bytes, int] = {}
        self._shares = ShareBook(keep_contributions=keep_contributions)
        self.rejections: dict[str, int] = {}
        self._state = SYNTHESIS_TRANSITIONS.initial

    @property
    def state(self) -> SynthesisState:
        return self._state

    # -- phase 1 ---------------------------------------------------------------------------------
    @step("receive_submissions")
    def receive_submissions(self, ciphertexts: Sequence[bytes]) -> None:
        """Open and keep tag submissions; a token hash already counted is a duplicate (rejected:
        one submission, one count, one token)."""
        opened = self._inbox.open_all(ciphertexts, TagSubmission)
        t0 = time.perf_counter()
        good = [o for o in opened if o.error is None]
        fresh = self._token_hashes.add_many([o.message.token_hash for o in good]).tolist()  # type: ignore[union-attr]
        if not all(fresh):
            for o, first in zip(good, fresh, strict=True):
                if not first:
                    o.error = ProtocolStateError("duplicate tag submission (token hash already counted)")
        kept: list[TagSubmission] = [o.message for o, first in zip(good, fresh, strict=True) if first]  # type: ignore[misc]
        tags = [m.tag for m in kept]
        self.counts.update(tags)  # one C loop, not an increment per submission
        n = len(kept)
        if n:
            self._pairs.append((b"".join(tags), b"".join(m.token_hash for m in kept)))
        self._n_submissions += n
        self._meter.add("S_syn.count", time.perf_counter() - t0, n)
        self._record(PHASE1_SUBMIT, opened)

    @step("release")
    def release(self) -> bytes:
        """Threshold the counts at the release floor and encode the full list (sorted by tag):
        what S_tag gets over the servers' channel (users get :meth:`user_broadcast`)."""
        counts = self.counts
        t1 = time.perf_counter()
        floor = self.release_floor
        released = sorted(tag for tag, c in counts.items() if c >= floor)
        self._meter.add("S_syn.threshold", time.perf_counter() - t1, len(counts))
        self.released = {tag: counts[tag] for tag in released}
        self._released_hashes = self._hashes_of(released)
        for tag in released:
            self._tokens.allow(tag, self._released_hashes[tag])
        return self.released_list()

    def released_list(self) -> bytes:
        """The full list of released tags with their counts (ReleasedTags, sorted), for S_tag;
        read in any state after the release (empty before)."""
        tags = sorted(self.released)
        return ReleasedTags(tags=tuple(tags), counts=tuple(self.released[t] for t in tags)).encode()

    @step("user_broadcast")
    def user_broadcast(self) -> bytes:
        """The users' broadcast, after the release: the released tags and counts in the round's
        broadcast encoding with its public seed (a CompactBroadcast; design §6)."""
        t0 = time.perf_counter()
        out = build_message(self.released, self._broadcast, self._broadcast_seed)
        self._meter.add("S_syn.broadcast_build", time.perf_counter() - t0, len(self.released))
        return out

    def _hashes_of(self, tags: Sequence[bytes]) -> dict[bytes, list[bytes]]:
        """Each of ``tags``' token hashes, sorted (once, at the release: a pass over the counted
        pairs)."""
        out: dict[bytes, list[bytes]] = {tag: [] for tag in tags}
        if not tags or not self._pairs:
            return out
        wanted, t, h = set(tags), TAG_BYTES, TOKEN_HASH_BYTES
        mine = [
            (raw_tags[k * t : (k + 1) * t], raw_hashes[k * h : (k + 1) * h])
            for raw_tags, raw_hashes in self._pairs
            for k in range(len(raw_tags) // t)
            if raw_tags[k * t : (k + 1) * t] in wanted
        ]
        for tag, token_hash in sorted(mine):
            out[tag].append(token_hash)
        return out

    @step("released_tokens")
    def released_tokens(self) -> list[bytes]:
        """For S_tag, over the servers' own channel: one ReleasedTokens per released tag (sorted),
        the token hashes of its counted submissions. Never published (design §6.8)."""
        return [
            ReleasedTokens(tag=tag, token_hashes=tuple(self._released_hashes[tag])).encode()
            for tag in sorted(self.released)
        ]

    @property
    def n_submissions(self) -> int:
        return self._n_submissions

    # -- phase 2 ---------------------------------------------------------------------------------
    @step("receive_shares")
    def receive_shares(self, ciphertexts: Sequence[bytes], *, sharing: Any, dim: int) -> None:
        opened = self._inbox.open_all(ciphertexts, (ShareSubmission, CoverShare))
        accept_shares(
            opened, self.released, self._shares, sharing=sharing, dim=dim, meter=self._meter, name="S_syn",
            tokens=self._tokens,
        )
        self._record(PHASE2, opened)

    @step("settle_contributions")
    def settle_contributions(self, named: Sequence[bytes], *, sharing: Any, dim: int) -> list[bytes]:
        """Running sums, after each window: keep the contributions since the last window that
        S_tag names too (AcceptedContributions per tag), take the others out of the sum, and
        name the kept ones back. Both servers then hold the same contributions, as the in-process driver's
        servers sum over the common ones at the aggregation."""
        kept, rows = settle_shares(
            self._shares, named, sharing=sharing, dim=dim, view=VIEW, sender=Role.S_TAG.label
        )
        self._recorder.add(rows)
        return kept

    @step("pending_contributions")
    def pending_contributions(self) -> list[bytes]:
        """Running sums: the contributions accepted since the last window settled, one
        AcceptedContributions per tag, for S_tag (:meth:`settle_contributions`)."""
        return [AcceptedContributions(tag=t, contribution_ids=tuple(ids)).encode() for t, ids in self._shares.unsettled().items()]

    @step("accepted_contributions")
    def accepted_contributions(self) -> list[bytes]:
        """One AcceptedContributions per released tag (sorted ids; possibly empty), restricted
        to the contributions the validator passed when there is one."""
        out = []
        for tag in sorted(self.released):
            ids = tuple(sorted(self._shares.ids(tag)))
            if self._validator is not None:
                ids = tuple(sorted(set(self._validator.valid(tag, ids)) & set(ids)))
            out.append(AcceptedContributions(tag=tag, contribution_ids=ids).encode())
        return out

    @step("reconstruct")
    def reconstruct(
        self,
        aggregates: Sequence[bytes],
        *,
        sharing: Any,
        encoder: Any,
        policy: str = WITHHOLD,
        plan: Any = None,
    ) -> Reconstruction:
        """Combine S_tag's aggregate shares with its own, decode, divide by the contributors.

        A tag with fewer contributors than its m_h is withheld (policy ``withhold``) or
        released with the noise S_tag topped up (policy ``topup``); with none it is withheld.
        ``plan`` (the round's :class:`~fre_protocol.roles.noise_plan.NoisePlan`) gives each tag's
        m_h and σ_int,h, which the norm guard uses too; without one, m_h is the release floor
        and σ_int the encoder's.
        """
        if policy not in DROPOUT_POLICIES:
            raise InvalidParameterError(f"policy must be one of {list(DROPOUT_POLICIES)}, got {policy!r}")
        out = Reconstruction()
        rows: list[Row] = []
        modulus = int(sharing.modulus)
        sums = _Sums.empty(len(aggregates), int(encoder.config.padded_dim))
        seen: set[bytes] = set()
        for data in aggregates:
            msg, error = self._read_aggregate(data, seen, sums.theirs, len(sums.ready), modulus)
            rows.append((VIEW, AGGREGATION, Role.S_TAG.label, VIEW, message_type_name(data), data, status_of(error)))
            if msg is None:
                continue
            seen.add(msg.tag)
            self._take_aggregate(msg, sums, out, sharing=sharing, policy=policy, needed=self._needed(msg.tag, plan))
        if sums.ready:
            self._release_sums(sums, out, sharing=sharing, encoder=encoder, policy=policy, plan=plan)
        for tag in self.released:
            if tag not in seen and tag not in out.withheld:
                own = self._shares.count(tag)
                out.withheld[tag] = (
                    self._short(own) if own < self._needed(tag, plan) else "no aggregate share from S_tag"
                )
        self._recorder.add(rows)
        return out

    def _read_aggregate(
        self, data: bytes, seen: set[bytes], theirs: npt.NDArray[np.uint64], row: int, modulus: int
    ) -> tuple[AggregateShare | None, Exception | None]:
        """S_tag's aggregate share for one released tag, its words written into row ``row`` of
        ``theirs``; or the error that refuses it (typed: the caller records it)."""
        width = int(theirs.shape[1])
        try:
            msg = decode_as(data, AggregateShare)
            if msg.tag not in self.released:
                raise ProtocolStateError("aggregate share for a tag that was not released")
            if msg.tag in seen:
                raise ProtocolStateError("second aggregate share for one tag")
            if not set(msg.contribution_ids) <= self._shares.ids(msg.tag):
                raise ProtocolStateError("aggregate covers contributions S_syn did not accept")
            if len(msg.values) != 8 * width:
                raise DecodeError(
                    f"aggregate share must hold {width} words of 8 bytes, got {len(msg.values)} bytes"
                )
            words = theirs[row]
            words[:] = np.frombuffer(msg.values, dtype=">u8")
            if modulus < 1 << 64 and bool(np.any(words >= np.uint64(modulus))):
                raise DecodeError("aggregate share holds words outside the ring")
        except (DecodeError, ProtocolStateError) as exc:
            return None, exc
        return msg, None

    def _needed(self, tag: bytes, plan: Any) -> int:
        """The contributions a tag's sum needs (m_h; at least the release floor)."""
        return self.release_floor if plan is None else max(self.release_floor, int(plan.needed(tag)))

    def _short(self, count: int) -> str:
        """Why a tag with ``count`` contributors, fewer than its m_h, is withheld."""
        return BELOW_FLOOR if count < self.release_floor else BELOW_SIZED

    def _take_aggregate(
        self, msg: AggregateShare, sums: _Sums, out: Reconstruction, *, sharing: Any, policy: str, needed: int
    ) -> None:
        """Keep S_tag's row for reconstruction with S_syn's own sum beside it, or withhold the
        tag when it has fewer contributors than ``needed`` (m_h) under the policy."""
        count = msg.count
        if count == 0 or (count < needed and policy == WITHHOLD):
            # S_tag should not have sent it; S_syn publishes nothing of it either way.
            out.withheld[msg.tag] = self._short(count)
            return
        t0 = time.perf_counter()
        sums.own[len(sums.ready)] = self._shares.total(msg.tag, msg.contribution_ids, sharing=sharing)
        self._meter.add("S_syn.accumulate", time.perf_counter() - t0, count)
        sums.ready.append((msg.tag, count))

    def _release_sums(
        self, sums: _Sums, out: Reconstruction, *, sharing: Any, encoder: Any, policy: str, plan: Any
    ) -> None:
        """All buckets at once: one ring addition and one batched decode (rotation of m rows);
        then each centroid, unless the norm guard withholds it."""
        n = len(sums.ready)
        t0 = time.perf_counter()
        # In place: S_tag's rows take the sums (no fresh buffer to fault in per bucket).
        totals = sharing.reconstruct(sums.theirs[:n], sums.own[:n], out=sums.theirs[:n])
        t1 = time.perf_counter()
        decoded = decode_many(encoder, totals, [r[1] for r in sums.ready])
        t2 = time.perf_counter()
        self._meter.add("S_syn.reconstruct", t1 - t0, n)
        self._meter.add("S_syn.decode", t2 - t1, n)
        guard = getattr(encoder, "sum_norm_bound", None)
        for (tag, count), row in zip(sums.ready, decoded, strict=True):
            # Norm guard: shares are uniform, so one malicious user can offset a sum at will;
            # a sum longer than honest inputs plus noise can make it (tail 1.3e-14) is
            # withheld. A decision on the DP sum alone: post-processing, free.
            noise_users = max(count, self._needed(tag, plan)) if policy == TOPUP else count
            if guard is not None and float(np.linalg.norm(row)) > _guard_bound(guard, count, noise_users, tag, plan):
                out.withheld[tag] = NORM_GUARD
                continue
            out.centroids[tag] = row / float(count)
            out.contributors[tag] = count

    # -- helpers ---------------------------------------------------------------------------------
    def _record(self, phase: str, opened: Sequence[Opened]) -> None:
        rows: list[Row] = []
        for o in opened:
            status = status_of(o.error)
            if o.error is not None:
                self.rejections[status] = self.rejections.get(status, 0) + 1
            rows.append((VIEW, phase, Role.PROXY.label, VIEW, o.type_name, o.payload, status))
        self._recorder.add(rows)


def _guard_bound(guard: Any, count: int, noise_users: int, tag: bytes, plan: Any) -> float:
    """The norm guard's bound for one tag: at its σ_int,h where there is a noise plan."""
    if plan is None:
        return float(guard(count, noise_users))
    return float(guard(count, noise_users, sigma_int=plan.sigma(tag)))


#: Coordinates per block of rows in :func:`decode_many`.
DECODE_BLOCK_COORDINATES = 1 << 13


def decode_many(encoder: Any, totals: npt.NDArray[np.uint64], counts: Sequence[int]) -> npt.NDArray[np.float64]:
    """DDG decoding of m modular sums at once: centre into [−M/2, M/2), scale by γ, undo the
    rotation for all rows together (design §4.4). Row i equals ``encoder.decode_sum(totals[i],
    counts[i])``; encoders without the row-wise pieces are decoded one sum at a time."""
    config = getattr(encoder, "config", None)
    if config is None or not hasattr(encoder, "unrotate") or totals.ndim != 2:
        return np.stack([encoder.decode_sum(t, c) for t, c in zip(totals, counts, strict=True)])
    m = int(config.modulus)
    if totals.size and int(totals.max()) >= m:
        raise ProtocolStateError("reconstructed sums must lie in the ring")
    # Blocks of rows keep every intermediate in cache; one block is 64 KiB of float64, below
    # glibc's default mmap threshold (128 KiB), so its buffers are reused heap memory rather
    # than fresh pages faulted in per block (a first call decoded 2x faster in fresh processes).
    rows = int(totals.shape[0])
    step = max(1, DECODE_BLOCK_COORDINATES // max(1, int(totals.shape[1])))
    out = np.empty((rows, int(config.dim)), dtype=np.float64)
    for i in range(0, rows, step):
        out[i : i + step] = _decode_rows(encoder, totals[i : i + step], m, float(config.gamma))
    return out


def _decode_rows(encoder: Any, totals: npt.NDArray[Any], m: int, gamma: float) -> npt.NDArray[np.float64]:
    if m & (m - 1) == 0:
        # Centre into [−M/2, M/2) by sign extension (M = 2^b): shift bit b−1 to the top and
        # shift back arithmetically. Two in-place integer passes; a masked subtraction
        # (``where=``) costs ten times as much.
        shift = 64 - (m.bit_length() - 1)
        centred = np.left_shift(totals.astype(np.uint64, copy=False), np.uint64(shift)).view(np.int64)
        centred >>= np.int64(shift)
    else:  # not a ring 2^b: compare and subtract
        centred = totals.astype(np.int64)
        centred[centred >= m // 2] -= m
    # γ is applied with the rotation's signs: one pass less over the block.
    out: npt.NDArray[np.float64] = encoder.unrotate(centred.astype(np.float64), scale=gamma)
    return out


__all__ = [
    "BELOW_FLOOR", "BELOW_SIZED", "NORM_GUARD", "SYNTHESIS_TRANSITIONS", "ContributionValidator", "Reconstruction", "SynthesisServer",
    "SynthesisState", "decode_many",
]
