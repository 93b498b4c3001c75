"""The users U_i (design §6 steps 1-3; paper Algorithm 2, lines 2-6 and 11-15).

One :class:`UserPopulation` simulates many user devices at once: user ``i``'s state is entry
``i`` of its arrays, and every user's messages are real (its own blind, VOPRF finalization with
proof verification, sealing to the servers' keys, DDG encoding with its own noise, its own
shares). Work that the maths allows is vectorized across users (DDG encoding and sharing of a
chunk of users is one array operation); per-user cryptography runs in chunks on a thread pool.

Offline and online work. What a device can do before the protocol starts, because it depends
neither on its data nor on any server message, is done in :meth:`UserPopulation.prepare` and
metered apart ("user.offline.*"): drawing the VOPRF blind r and its inverse, and the public-key
half of each sealed box it will send (:meth:`primitives.channel.SealedBoxChannel.prepare_seals`).
Everything else — hashing its bucket to the group and blinding it, verifying S_tag's proof and
unblinding, the DDG encoding (its scale depends on the broadcast), sharing, and encrypting each
payload — is online work, metered per step. The cost table reports both.

Chunks have a fixed size, and in seeded test mode each chunk draws from its own labelled child
stream, so results do not depend on the number of worker threads.

Contribution tokens (design §6.8): with its coin, a user draws a fresh 32-byte token t for its
slot, puts H(t) in its sealed tag submission and t in both of its phase-2 shares; the servers
count a share only with an unspent token of its tag's accepted submissions. Cover messages carry
a fresh random token field of the same size.

A user that receives a malformed or unverifiable evaluation (or none at all) aborts: it submits
no tag and sends no shares, and records the rejection in its own view. Nothing else is affected.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np
import numpy.typing as npt

from fre_protocol.messages import (
    TOKEN_BYTES,
    BatchEvaluation,
    BlindRequest,
    CoverShare,
    Evaluation,
    Rejection,
    Role,
    SealedEnvelope,
    ShareSubmission,
    TagSubmission,
    decode,
    message_type_name,
    tag_of,
    token_hash,
)
from fre_protocol.roles.base import (
    BROADCAST,
    PHASE1,
    Channel,
    Meter,
    Recorder,
    Row,
    Workers,
    chunks,
    status_of,
)
from fre_protocol.roles.broadcast import HeardBroadcast
from fre_protocol.roles.state import Transitions, step
from primitives.compact.broadcast import BroadcastEncoding
from primitives.errors import DecodeError, FreError, ProtocolStateError, VerificationError
from primitives.randomness import RandomSource
from primitives.voprf import Finalized, Oprf

VIEW = Role.USER.label

OK = "ok"

# A user's costs are the CPU time of the thread doing its work: each simulated device is one
# user on its own processor, so time this thread spends waiting for the GIL held by a sibling
# worker, or descheduled on a shared machine, is not that user's time (wall clocks per thread
# overstated it by up to the number of workers). This counts all of a user's work only while
# BLAS runs in the calling thread, which the in-process driver arranges (threadpoolctl) for the whole run.
_clock = time.thread_time


@dataclass(frozen=True, slots=True)
class ServerKeys:
    """What users know about the servers: S_tag's VOPRF public key and both sealing keys."""

    voprf_public_key: bytes
    tag_box_key: bytes
    syn_box_key: bytes


#: The key material a device prepares, in the order it draws it from its chunk's stream.
SEAL_KINDS = ("blind_request", "tag_submission", "share_to_tag", "share_to_syn")
PHASE1_SEALS = SEAL_KINDS[:2]
PHASE2_SEALS = SEAL_KINDS[2:]


@dataclass(frozen=True, slots=True, kw_only=True)
class UserTally:
    """Operator-private counts over a population (or several, added up)."""

    n_users: int = 0
    n_real_submissions: int = 0
    n_participants: int = 0
    n_dropped_out: int = 0
    n_cover_users: int = 0
    status: dict[str, int] = field(default_factory=dict)

    def __add__(self, other: UserTally) -> UserTally:
        status = dict(self.status)
        for k, v in other.status.items():
            status[k] = status.get(k, 0) + v
        return UserTally(
            n_users=self.n_users + other.n_users,
            n_real_submissions=self.n_real_submissions + other.n_real_submissions,
            n_participants=self.n_participants + other.n_participants,
            n_dropped_out=self.n_dropped_out + other.n_dropped_out,
            n_cover_users=self.n_cover_users + other.n_cover_users,
            status=status,
        )


#: Single evaluations verified per job: their proofs go through the batched kernel together.
_SINGLES_PER_JOB = 256


@dataclass(frozen=True, slots=True, kw_only=True)
class _EvaluationInbox:
    """S_tag's answers as the users hold them: the first per connection, and the refused extras."""

    by_user: dict[int, bytes]
    duplicates: list[Row]


@dataclass(frozen=True, slots=True, kw_only=True)
class _ParsedEvaluations:
    """Decoded answers: evaluations with their own proof, proof batches grouped by everything
    the proof covers, and the users whose answer already failed."""

    singles: list[tuple[int, Evaluation]]
    batches: list[list[tuple[int, BatchEvaluation]]]
    errors: dict[int, Exception]


@dataclass(frozen=True, slots=True, kw_only=True)
class _FinalizeJob:
    """One unit of verification work: a chunk of single evaluations or one proof batch."""

    singles: tuple[tuple[int, Evaluation], ...] = ()
    batch: tuple[tuple[int, BatchEvaluation], ...] | None = None


class UserState(Enum):
    """Where a population of devices stands in the round (:data:`USER_TRANSITIONS`)."""

    NEW = "new"
    PREPARED = "prepared"
    BLINDED = "blinded"
    FINALIZED = "finalized"
    SUBMITTED = "submitted"
    INFORMED = "informed"
    RESTORED = "restored"
    SHARED = "shared"
    SENT = "sent"


_U = UserState

#: The user's step order, stated once: which message a population takes in which state and the
#: state it leads to. Phase 1 then phase 2 on the same devices (the in-process driver, the
#: networked users), or phase 2 only on devices restored from their phase-1 outcome
#: (:meth:`~UserPopulation.restore`: a streaming window, a Dask task), which prepare their phase-2
#: seals and may hear the broadcast (recorded once, by one population) in either order.
USER_TRANSITIONS: Transitions[UserState] = Transitions(
    role="users",
    initial=_U.NEW,
    table={
        "prepare": {_U.NEW: _U.PREPARED, _U.RESTORED: _U.RESTORED},
        "blind_requests": {_U.PREPARED: _U.BLINDED},
        "receive_evaluations": {_U.BLINDED: _U.FINALIZED},
        "tag_submissions": {_U.FINALIZED: _U.SUBMITTED},
        "receive_broadcast": {_U.SUBMITTED: _U.INFORMED, _U.RESTORED: _U.RESTORED},
        "restore": {_U.NEW: _U.RESTORED},
        "share_submissions": {_U.INFORMED: _U.SENT},
        "sealed_shares": {_U.INFORMED: _U.SHARED, _U.RESTORED: _U.SHARED},
        "cover_messages": {_U.INFORMED: _U.SENT, _U.RESTORED: _U.SENT, _U.SHARED: _U.SENT},
    },
)


class UserPopulation:
    """N users' devices. ``encodings[i]`` is user i's bucket index b_i, canonically encoded.

    States (:data:`USER_TRANSITIONS`; a message in any other state is refused with
    :class:`~fre_protocol.roles.state.OutOfOrderError`, and nothing happens):

    =========  ==================================================================================
    state      message → next state
    =========  ==================================================================================
    new        prepare → prepared; restore (phase 1's outcome and the broadcast) → restored
    prepared   blind_requests → blinded
    blinded    receive_evaluations (verify, finalize) → finalized
    finalized  tag_submissions → submitted
    submitted  receive_broadcast → informed
    informed   share_submissions → sent; sealed_shares → shared; cover_messages → sent
    restored   prepare, receive_broadcast → restored; sealed_shares → shared; cover_messages → sent
    shared     cover_messages (the other online users' cover) → sent
    sent       nothing
    =========  ==================================================================================

    :meth:`tally` and the attributes are read in any state.
    """

    TRANSITIONS = USER_TRANSITIONS

    def __init__(
        self,
        x: npt.NDArray[np.floating[Any]],
        encodings: Sequence[bytes],
        coins: npt.NDArray[np.bool_],
        *,
        suite: Oprf,
        keys: ServerKeys,
        channel: Channel,
        rng: RandomSource,
        workers: Workers,
        meter: Meter,
        recorder: Recorder,
        chunk_size: int = 1024,
        cover_traffic: bool = True,
        first_chunk: int = 0,
        broadcast: BroadcastEncoding | str | None = None,
    ) -> None:
        n = int(x.shape[0])
        if len(encodings) != n or coins.shape != (n,):
            raise FreError(
                f"encodings and coins must have one entry per user ({n}), got "
                f"{len(encodings)} and {coins.shape}"
            )
        self.n = n
        self.x = x
        self.encodings = list(encodings)
        self.coins = np.asarray(coins, dtype=bool)
        self._suite = suite
        self._keys = keys
        self._channel = channel
        self._rng = rng
        self._workers = workers
        self._meter = meter
        self._recorder = recorder
        self._chunk = chunk_size
        # Users 0.. of this population are the global chunks first_chunk.. of a larger one (a
        # streaming driver's window): per-chunk streams are labelled globally, so a window
        # draws exactly what the whole population would.
        self._first_chunk = first_chunk
        # Every user online in phase 2 sends two messages of the same sizes, a contribution or
        # cover, so the proxy cannot tell who sits in a released bucket.
        self.cover_traffic = cover_traffic
        self.cover = np.zeros(0, dtype=np.int64)
        self.blinds: list[bytes | None] = [None] * n
        self.blind_inverses: list[bytes | None] = [None] * n
        # Prepared seals, one list per message kind, entry i for user i (None: not needed).
        self._seals: dict[str, list[Any]] = {}
        self.blinded: list[bytes | None] = [None] * n
        self.tags: list[bytes | None] = [None] * n
        # Each submitting user's contribution token t (design §6.8): only H(t) leaves in phase 1.
        self.tokens: list[bytes | None] = [None] * n
        self.status: list[str] = ["no_response"] * n
        self.submitted = np.zeros(n, dtype=bool)
        # The round's broadcast encoding (a broadcast in another is refused) and, once heard, the
        # compact broadcast each device queries for its own tag (fre_protocol.roles.broadcast).
        self._broadcast = broadcast
        self.heard: HeardBroadcast | None = None
        self.participants = np.zeros(0, dtype=np.int64)
        self.dropped = np.zeros(0, dtype=np.int64)
        self._state = USER_TRANSITIONS.initial

    @property
    def state(self) -> UserState:
        return self._state

    # -- before the protocol: what needs neither the data nor a server message ------------------
    @step("prepare")
    def prepare(self, kinds: Sequence[str] = SEAL_KINDS) -> None:
        """Offline work of every device: the blind r and r^-1, and key material for each sealed
        box it will send (its blind request to S_tag; with its coin, its tag submission to S_syn;
        its two phase-2 messages with its coin, or always under cover traffic).

        ``kinds`` limits the key material to some messages (a streaming driver prepares phase 2's
        only when it plays phase 2); what comes earlier in a chunk's stream is drawn and
        discarded, so every seal is the one the whole preparation would make. The blind is
        kept only with the blind request."""
        unknown = set(kinds) - set(SEAL_KINDS)
        if unknown:
            raise ProtocolStateError(f"kinds must be among {list(SEAL_KINDS)}, got {sorted(unknown)}")
        group, channel = self._suite.group, self._channel
        tag_key, syn_key = self._keys.tag_box_key, self._keys.syn_box_key
        wanted = [kind in kinds for kind in SEAL_KINDS]
        last = max((j for j, w in enumerate(wanted) if w), default=-1)
        self._seals = {kind: [None] * self.n for kind in SEAL_KINDS}

        def work(job: tuple[int, range]) -> None:
            index, users = job
            rng = self._rng.child(f"prepare/{self._first_chunk + index}")
            t0 = _clock()
            for i in users:
                r = group.random_scalar(rng)
                if wanted[0]:
                    self.blinds[i] = group.serialize_scalar(r)
                    self.blind_inverses[i] = group.serialize_scalar(group.scalar_inverse(r))
            t1 = _clock()
            idx = list(users)
            coin = [i for i in idx if self.coins[i]]
            phase2 = idx if self.cover_traffic else coin
            prepared = 0
            for j, (kind, key, who) in enumerate((
                ("blind_request", tag_key, idx),
                ("tag_submission", syn_key, coin),
                ("share_to_tag", tag_key, phase2),
                ("share_to_syn", syn_key, phase2),
            )):
                if wanted[j]:
                    for i, seal in zip(who, channel.prepare_seals(key, len(who), rng), strict=True):
                        self._seals[kind][i] = seal
                    prepared += len(who)
                elif j < last:
                    channel.skip_seals(len(who), rng)
            t2 = _clock()
            if wanted[0]:
                self._meter.add("user.offline.blind_scalar", t1 - t0, len(idx))
            self._meter.add("user.offline.seal_keys", t2 - t1, prepared)

        self._workers.map(work, list(enumerate(chunks(self.n, self._chunk))), desc="users: prepare")

    def _take_seals(self, kind: str, users: Sequence[int]) -> list[Any]:
        if not self._seals:
            raise ProtocolStateError("users must prepare() before they send anything")
        seals = self._seals[kind]
        out = []
        for i in users:
            seal = seals[i]
            if seal is None:
                raise ProtocolStateError(f"user {i} has no prepared seal for its {kind}")
            seals[i] = None
            out.append(seal)
        return out

    # -- phase 1: blind -------------------------------------------------------------------------
    @step("blind_requests")
    def blind_requests(self) -> list[tuple[int, Role, bytes]]:
        """Every user's sealed BlindRequest for S_tag (RFC 9497 §3.3.2 Blind, with its prepared r)."""
        suite, channel = self._suite, self._channel

        def work(job: tuple[int, range]) -> list[tuple[int, Role, bytes]]:
            _, users = job
            t0 = _clock()
            blinded_all = []
            for i in users:
                _, blinded = suite.blind(self.encodings[i], blind=self.blinds[i])
                self.blinded[i] = blinded
                blinded_all.append(blinded)
            t1 = _clock()
            sealed = _seal_prepared(
                channel, self._take_seals("blind_request", users),
                [BlindRequest(blinded_element=b).encode() for b in blinded_all],
            )
            out = [
                (i, Role.USER, SealedEnvelope(recipient=Role.S_TAG, ciphertext=c).encode())
                for i, c in zip(users, sealed, strict=True)
            ]
            t2 = _clock()
            self._meter.add("user.blind", t1 - t0, len(users))
            self._meter.add("user.seal", t2 - t1, len(users))
            return out

        parts = self._workers.map(work, list(enumerate(chunks(self.n, self._chunk))), desc="users: blind")
        out = [item for part in parts for item in part]
        self._meter.add_bytes("user.upload.blind_request", sum(len(e) for _, _, e in out))
        return out

    # -- phase 1: finalize ----------------------------------------------------------------------
    @step("receive_evaluations")
    def receive_evaluations(self, deliveries: Sequence[tuple[int, bytes]]) -> None:
        """Verify the proof and finalize each user's tag (RFC 9497 §2.2.2 VerifyProof, §3.3.2
        Finalize with the blind inverse prepared offline)."""
        # The verification kernels load here, once per process: not a user's metered work.
        self._suite.warm_up()
        inbox = self._sort_evaluations(deliveries)
        self._meter.add_bytes("user.download.evaluation", sum(len(d) for d in inbox.by_user.values()))
        parsed = self._parse_evaluations(inbox.by_user)
        jobs: list[_FinalizeJob] = [
            _FinalizeJob(singles=tuple(parsed.singles[c.start : c.stop]))
            for c in chunks(len(parsed.singles), _SINGLES_PER_JOB)
        ]
        jobs += [_FinalizeJob(batch=tuple(group)) for group in parsed.batches]
        errors = dict(parsed.errors)
        for result in self._workers.map(self._finalize, jobs, desc="users: verify + finalize"):
            for i, outcome in result.items():
                if isinstance(outcome, bytes):
                    self.tags[i] = tag_of(outcome)
                    self.status[i] = OK
                else:
                    errors[i] = outcome if outcome is not None else ProtocolStateError("no output for this user")
        self._settle_evaluations(inbox, errors)

    def _sort_evaluations(self, deliveries: Sequence[tuple[int, bytes]]) -> _EvaluationInbox:
        """The first answer on each user's connection; a second one is refused and recorded."""
        by_user: dict[int, bytes] = {}
        duplicates: list[Row] = []
        for conn, data in deliveries:
            if not 0 <= conn < self.n:
                continue  # an answer to someone else's connection (e.g. an injected request)
            if conn not in by_user:
                by_user[conn] = data
            else:
                duplicates.append(
                    (VIEW, PHASE1, Role.S_TAG.label, VIEW, message_type_name(data), data,
                     status_of(ProtocolStateError("unexpected response")))
                )
        return _EvaluationInbox(by_user=by_user, duplicates=duplicates)

    def _parse_evaluations(self, by_user: dict[int, bytes]) -> _ParsedEvaluations:
        """Decode each answer: a single evaluation, a member of a proof batch, or a rejection."""
        singles: list[tuple[int, Evaluation]] = []
        batches: dict[bytes, list[tuple[int, BatchEvaluation]]] = {}
        errors: dict[int, Exception] = {}
        for i, data in by_user.items():
            try:
                msg = decode(data, (Evaluation, BatchEvaluation, Rejection))
            except DecodeError as exc:
                errors[i] = exc
                continue
            if isinstance(msg, Rejection):
                errors[i] = ProtocolStateError(f"S_tag rejected the request ({msg.reason})")
                self.status[i] = f"rejected_by_server:{msg.reason}"
            elif isinstance(msg, Evaluation):
                singles.append((i, msg))
            else:
                assert isinstance(msg, BatchEvaluation)
                if msg.blinded_elements[msg.position] != self.blinded[i]:
                    errors[i] = VerificationError("batch does not hold this user's blinded element")
                    continue
                # Keyed by everything the proof covers: a member whose copy differs in any
                # element (e.g. an evaluation under another key) is verified on its own.
                key = msg.proof + b"".join(msg.blinded_elements) + b"".join(msg.evaluated_elements)
                batches.setdefault(key, []).append((i, msg))
        return _ParsedEvaluations(singles=singles, batches=list(batches.values()), errors=errors)

    def _finalize(self, job: _FinalizeJob) -> dict[int, Finalized]:
        return self._finalize_singles(job.singles) if job.batch is None else self._finalize_batch(job.batch)

    def _finalize_singles(self, items: Sequence[tuple[int, Evaluation]]) -> dict[int, Finalized]:
        """Users whose evaluation carries its own proof: each verifies and finalizes its own."""
        t0 = _clock()
        outputs = self._suite.verify_and_finalize(
            [self.encodings[i] for i, _ in items],
            [self.blind_inverses[i] for i, _ in items],
            [self.blinded[i] for i, _ in items],  # type: ignore[misc]
            [msg.evaluated_element for _, msg in items],
            [msg.proof for _, msg in items],
            pk=self._keys.voprf_public_key,
        )
        self._meter.add("user.finalize", _clock() - t0, len(items))
        return {i: out for (i, _), out in zip(items, outputs, strict=True)}

    def _finalize_batch(self, group: Sequence[tuple[int, BatchEvaluation]]) -> dict[int, Finalized]:
        """Members of one proof batch, who all received the same batch: each verifies the whole
        proof and finalizes its own element. The first member runs on its own, so its time is
        what one device pays, charged to every member; the others then finalize in one call."""
        t0 = _clock()
        out = self._finalize_members(group[:1])
        one_device = _clock() - t0
        if len(group) > 1:
            out.update(self._finalize_members(group[1:]))
        self._meter.add("user.finalize", one_device * len(group), len(group))
        self._meter.add("user.finalize.batch_verifications", one_device, 1)
        return out

    def _finalize_members(self, members: Sequence[tuple[int, BatchEvaluation]]) -> dict[int, Finalized]:
        batch = members[0][1]
        size = len(batch.blinded_elements)
        inputs: list[bytes | None] = [None] * size
        inverses: list[bytes | None] = [None] * size
        for i, msg in members:
            inputs[msg.position] = self.encodings[i]
            inverses[msg.position] = self.blind_inverses[i]
        outputs = self._suite.verify_and_finalize(
            inputs, inverses, list(batch.blinded_elements), list(batch.evaluated_elements), batch.proof,
            pk=self._keys.voprf_public_key,
        )
        return {i: outputs[msg.position] for i, msg in members}

    def _settle_evaluations(self, inbox: _EvaluationInbox, errors: dict[int, Exception]) -> None:
        """A user whose answer failed keeps no tag and records why; every answer is recorded."""
        for i, err in errors.items():
            self.tags[i] = None
            if not self.status[i].startswith("rejected_by_server"):
                self.status[i] = status_of(err)
        rows: list[Row] = [
            (VIEW, PHASE1, Role.S_TAG.label, VIEW, message_type_name(data), data, status_of(errors.get(i)))
            for i, data in sorted(inbox.by_user.items())
        ]
        self._recorder.add(rows + inbox.duplicates)

    # -- phase 1: submit ------------------------------------------------------------------------
    @step("tag_submissions")
    def tag_submissions(self) -> list[tuple[int, Role, bytes]]:
        """With its coin, each user with a tag sends it to S_syn, sealed (Algorithm 2, l. 4-6)."""
        have_tag = np.array([t is not None for t in self.tags], dtype=bool)
        sender_mask = self.coins & have_tag
        senders, is_sender = np.flatnonzero(sender_mask), sender_mask.tolist()
        channel = self._channel

        def work(job: tuple[int, range]) -> list[tuple[int, Role, bytes]]:
            index, span = job
            users = [i for i in span if is_sender[i]]
            t0 = _clock()
            # Tokens are drawn for every user of the chunk, from a stream of their own, and taken
            # by user index, so a user's token is its own draw: it does not shift when another
            # user fails phase 1. A cryptographic source outside seeded test mode.
            tokens = self._rng.child(f"token/{self._first_chunk + index}").random_bytes(TOKEN_BYTES * len(span))
            plains = []
            for i in users:
                tag = self.tags[i]
                assert tag is not None
                token = tokens[TOKEN_BYTES * (i - span.start) : TOKEN_BYTES * (i - span.start + 1)]
                self.tokens[i] = token
                plains.append(TagSubmission(tag=tag, token_hash=token_hash(token)).encode())
            sealed = _seal_prepared(channel, self._take_seals("tag_submission", users), plains)
            out = [
                (i, Role.USER, SealedEnvelope(recipient=Role.S_SYN, ciphertext=c).encode())
                for i, c in zip(users, sealed, strict=True)
            ]
            self._meter.add("user.submit", _clock() - t0, len(users))
            return out

        parts = self._workers.map(
            work, list(enumerate(chunks(self.n, self._chunk))), desc="users: submit tags"
        )
        self.submitted[senders] = True
        out = [item for part in parts for item in part]
        self._meter.add_bytes("user.upload.tag_submission", sum(len(e) for _, _, e in out))
        return out

    # -- broadcast -------------------------------------------------------------------------------
    @step("receive_broadcast")
    def receive_broadcast(self, data: bytes) -> None:
        """The compact broadcast of the released tags with their counts (Algorithm 2, l. 10;
        design §6): each device loads it and asks it, locally, whether its own tag was released
        and with which count. Recorded once: every user receives the same broadcast. A malformed
        one (or one in another encoding than the round's) releases nothing for these devices."""
        error: Exception | None = None
        try:
            self.heard = HeardBroadcast(data, self._broadcast)
        except (DecodeError, FreError) as exc:
            error, self.heard = exc, None
        self._recorder.add(
            [(VIEW, BROADCAST, Role.S_SYN.label, VIEW, message_type_name(data), data, status_of(error))]
        )
        self._meter.add_bytes("user.download.broadcast", len(data))

    @property
    def released(self) -> HeardBroadcast | Mapping[bytes, int]:
        """What these devices know of the release: the heard broadcast (``tag in released`` asks
        it), or nothing before it is heard."""
        return self.heard if self.heard is not None else {}

    # -- phase 2 --------------------------------------------------------------------------------
    @step("share_submissions")
    def share_submissions(
        self,
        *,
        encoder: Any,
        sharing: Any,
        noise: bool,
        active: npt.NDArray[np.bool_] | None = None,
        sigmas: Mapping[bytes, float] | None = None,
    ) -> list[tuple[int, Role, bytes]]:
        """Users whose submitted tag was released: DDG-encode x_i, split it into two shares,
        seal one to S_tag and one to S_syn, both tagged with h_i (Algorithm 2, l. 11-15).

        ``active`` marks users still online (False = dropped out between the phases). Under
        cover traffic every other online user sends two cover messages of the same sizes.
        ``sigmas``: each released tag's σ_int (the noise plan's, design §4.4), as a device reads
        it for its own tag (:class:`~fre_protocol.roles.broadcast.DeviceSigmas`); None: the
        encoder's for every tag.
        """
        released = self.released
        eligible = np.array(
            [bool(self.submitted[i]) and self.tags[i] in released for i in range(self.n)], dtype=bool
        )
        if self.heard is not None:
            self.heard.meter(self._meter)
        if active is None:
            active = np.ones(self.n, dtype=bool)
        self.participants = np.flatnonzero(eligible & active)
        self.dropped = np.flatnonzero(eligible & ~active)
        parts_idx = self.participants

        def work(job: tuple[int, range]) -> list[tuple[int, Role, bytes]]:
            index, span = job
            users = parts_idx[span.start : span.stop].tolist()
            plains = share_plaintexts(
                self.x[users], [self.tags[i] for i in users], encoder=encoder, sharing=sharing, noise=noise,
                rng=self._rng.child(f"phase2/{index}"), meter=self._meter, tokens=[self.tokens[i] for i in users],
                sigmas=sigmas,
            )
            return self._sealed_shares(users, plains)

        jobs = list(enumerate(chunks(len(parts_idx), self._chunk)))
        parts = self._workers.map(work, jobs, desc="users: DDG encode + share")
        out = [item for part in parts for item in part]
        if self.cover_traffic:
            self.cover = np.flatnonzero(~eligible & active)
            out += self._cover_messages(self.cover, sharing.share_sizes(int(encoder.config.padded_dim)))
        return out

    @step("sealed_shares")
    def sealed_shares(
        self, users: Sequence[int], plains: Sequence[tuple[bytes, bytes]]
    ) -> list[tuple[int, Role, bytes]]:
        """Each user seals its two ShareSubmissions, one to each server, with its prepared seals
        (chunks of users on the workers, as their devices would in parallel)."""
        return self._sealed_shares(users, plains)

    def _sealed_shares(
        self, users: Sequence[int], plains: Sequence[tuple[bytes, bytes]]
    ) -> list[tuple[int, Role, bytes]]:
        if len(plains) != len(users):
            raise ProtocolStateError(f"sealed_shares needs one pair of shares per user ({len(users)}), got {len(plains)}")
        return self._seal_pairs(list(users), lambda span: plains[span.start : span.stop], "shares")


    @step("restore")
    def restore(
        self,
        tags: Sequence[bytes | None],
        submitted: npt.NDArray[np.bool_],
        heard: HeardBroadcast | None,
        *,
        tokens: Sequence[bytes | None],
    ) -> None:
        """Phase 1's outcome on each device (its tag, whether it submitted it, its contribution
        token) and the broadcast as the devices heard it, for a population that plays phase 2
        only (a streaming driver's window)."""
        if len(tags) != self.n or submitted.shape != (self.n,) or len(tokens) != self.n:
            raise ProtocolStateError(f"restore needs one tag, one flag and one token per user ({self.n})")
        self.tags = list(tags)
        self.tokens = list(tokens)
        self.submitted = np.asarray(submitted, dtype=bool)
        self.heard = heard

    def tally(self) -> UserTally:
        status: dict[str, int] = {}
        for st in self.status:
            status[st] = status.get(st, 0) + 1
        return UserTally(
            n_users=self.n, n_real_submissions=int(self.submitted.sum()), n_participants=int(self.participants.size),
            n_dropped_out=int(self.dropped.size), n_cover_users=int(self.cover.size), status=status,
        )

    @step("cover_messages")
    def cover_messages(self, users: npt.NDArray[np.int64], share_sizes: tuple[int, int]) -> list[tuple[int, Role, bytes]]:
        """Two sealed CoverShares per user, as long as its two shares would be (the proxy sees
        the same count and sizes from every user; the servers open and discard them). Each
        carries a fresh random token field, drawn per chunk of users from its own stream."""
        return self._cover_messages(users, share_sizes)

    def _cover_messages(self, users: npt.NDArray[np.int64], share_sizes: tuple[int, int]) -> list[tuple[int, Role, bytes]]:
        idx = users.tolist()
        draws: dict[int, bytes] = {}
        for i in idx:
            c = i // self._chunk
            if c not in draws:
                draws[c] = self._rng.child(f"cover_token/{self._first_chunk + c}").random_bytes(2 * TOKEN_BYTES * self._chunk)
        pairs = []
        for i in idx:
            raw, at = draws[i // self._chunk], 2 * TOKEN_BYTES * (i % self._chunk)
            pairs.append((
                CoverShare.matching(share_sizes[0], token=raw[at : at + TOKEN_BYTES]).encode(),
                CoverShare.matching(share_sizes[1], token=raw[at + TOKEN_BYTES : at + 2 * TOKEN_BYTES]).encode(),
            ))
        return self._seal_pairs(idx, lambda span: pairs[span.start : span.stop], "cover")

    def _seal_pairs(
        self, users: list[int], pairs: Callable[[range], Sequence[tuple[bytes, bytes]]], what: str
    ) -> list[tuple[int, Role, bytes]]:
        """Each of ``users`` seals its pair of phase-2 messages (to S_tag, to S_syn; ``pairs`` of a
        span of positions in ``users``) with its prepared seals, chunk by chunk on the workers;
        metered as ``user.seal_<what>`` and ``user.upload.<what>``."""
        channel = self._channel

        def work(span: range) -> list[tuple[int, Role, bytes]]:
            idx, mine = users[span.start : span.stop], pairs(span)
            t0 = _clock()
            sealed_tag = _seal_prepared(channel, self._take_seals("share_to_tag", idx), [p[0] for p in mine])
            sealed_syn = _seal_prepared(channel, self._take_seals("share_to_syn", idx), [p[1] for p in mine])
            out = []
            for i, a, b in zip(idx, sealed_tag, sealed_syn, strict=True):
                out.append((i, Role.USER, SealedEnvelope(recipient=Role.S_TAG, ciphertext=a).encode()))
                out.append((i, Role.USER, SealedEnvelope(recipient=Role.S_SYN, ciphertext=b).encode()))
            self._meter.add(f"user.seal_{what}", _clock() - t0, len(idx))
            return out

        parts = self._workers.map(work, chunks(len(users), self._chunk), desc=f"users: seal {what}")
        out = [item for part in parts for item in part]
        self._meter.add_bytes(f"user.upload.{what}", sum(len(e) for _, _, e in out))
        return out


def share_plaintexts(
    x: npt.NDArray[np.floating[Any]],
    tags: Sequence[bytes | None],
    *,
    encoder: Any,
    sharing: Any,
    noise: bool,
    rng: RandomSource,
    meter: Meter,
    tokens: Sequence[bytes | None],
    sigmas: Mapping[bytes, float] | None = None,
) -> list[tuple[bytes, bytes]]:
    """One chunk of participants' two ShareSubmissions (to S_tag, to S_syn): DDG-encode each row
    of ``x``, split it into two shares, draw a contribution id (Algorithm 2, l. 11-15); both
    carry the participant's contribution token from phase 1 (``tokens``, design §6.8). All of it
    from the chunk's own stream ``rng``, in this order, so any driver that forms the same chunk
    draws the same encodings, shares and ids. Each participant's noise is its tag's σ_int in
    ``sigmas`` (the noise plan's, design §4.4), the encoder's where None: every driver encodes
    here, so every driver sizes the noise alike."""
    if len(tokens) != len(tags):
        raise ProtocolStateError(f"share_plaintexts needs one token per participant ({len(tags)}), got {len(tokens)}")
    n, dim = len(tags), int(encoder.config.dim)
    t0 = _clock()
    rows = np.asarray(x, dtype=np.float64).reshape(n, dim)
    if sigmas is None:
        values = encoder.encode(rows, rng, noise=noise)
    else:
        default = float(encoder.config.sigma_int)
        per_row = [float(sigmas.get(tag, default)) if tag is not None else default for tag in tags]
        values = encoder.encode(rows, rng, noise=noise, sigma_int=per_row)
    t1 = _clock()
    first, second = sharing.share(values, rng)
    cids = rng.random_bytes(16 * n)
    t2 = _clock()
    out = []
    for j, (tag, token) in enumerate(zip(tags, tokens, strict=True)):
        assert tag is not None
        if token is None:
            raise ProtocolStateError("a participant must hold the contribution token of its phase-1 submission")
        cid = cids[16 * j : 16 * j + 16]
        out.append((
            ShareSubmission(tag=tag, contribution_id=cid, token=token, share=sharing.encode_share(first, j)).encode(),
            ShareSubmission(tag=tag, contribution_id=cid, token=token, share=sharing.encode_share(second, j)).encode(),
        ))
    meter.add("user.ddg_encode", t1 - t0, n)
    meter.add("user.share", t2 - t1, n)
    # Building the messages belongs to sealing them (counted there, per user).
    meter.add("user.seal_shares", _clock() - t2, 0)
    return out


def _seal_prepared(channel: Channel, prepared: Sequence[Any], plaintexts: Sequence[bytes]) -> list[bytes]:
    """Seal each plaintext with its own prepared seal."""
    return [channel.seal_prepared(seal, p) for seal, p in zip(prepared, plaintexts, strict=True)]


__all__ = [
    "OK", "PHASE1_SEALS", "PHASE2_SEALS", "SEAL_KINDS", "USER_TRANSITIONS", "ServerKeys", "UserPopulation", "UserState",
    "UserTally", "share_plaintexts",
]
