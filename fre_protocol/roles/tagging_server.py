"""The tagging server S_tag (design §6; paper §6.1-6.2, Algorithm 2 and Algorithm 4).

S_tag holds the VOPRF key. Phase 1: it evaluates the users' blinded elements obliviously with a
DLEQ proof (RFC 9497 VOPRF), ``proof_batch_size`` elements per proof; it runs the dummy user
(:mod:`fre_protocol.roles.dummy_user`). Phase 2: it receives one share of every participating
user's encoding, tagged, sums its shares per released tag over the contributions S_syn also
accepted, and sends S_syn the per-tag aggregate share with the contribution ids it covers.

S_tag, not S_syn, decides whether an aggregate may leave: S_syn holds the other share of every
contribution, so any aggregate S_tag sends can be reconstructed by S_syn, whatever S_syn later
publishes. S_tag therefore answers at most one aggregation request per released tag, and only
over at least the release floor ⌈τ⌉ contributions — the worst case the DDG term of the ledger is
calibrated for — unless the ``topup`` dropout policy is on, in which case it adds the missing
users' discrete Gaussian noise itself before sending.

It never sees a tag submission (sealed to S_syn) and so learns only released tags, which are
public anyway, and, from S_syn, each released tag's set of token hashes (design §6.8): it keeps a
share only when the share's token hashes into its tag's set and was not used before.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from enum import Enum
from typing import Any

import numpy as np

from fre_protocol.messages import (
    MAX_PROOF_BATCH,
    AcceptedContributions,
    AggregateShare,
    BatchEvaluation,
    BlindRequest,
    CoverShare,
    Evaluation,
    Rejection,
    ReleasedTags,
    ReleasedTokens,
    Role,
    ShareSubmission,
    decode_as,
    message_type_name,
)
from fre_protocol.roles.base import (
    AGGREGATION,
    BROADCAST,
    PHASE1,
    PHASE2,
    TOPUP,
    WITHHOLD,
    Channel,
    Meter,
    Recorder,
    Row,
    Workers,
    check_dropout_policy,
    chunks,
    status_of,
)
from fre_protocol.roles.server_common import (
    Opened,
    SealedInbox,
    ShareBook,
    TokenBook,
    accept_shares,
    settle_shares,
)
from fre_protocol.roles.state import Transitions, step
from primitives.errors import DecodeError, InvalidParameterError, ProtocolStateError
from primitives.randomness import RandomSource
from primitives.secret import Secret
from primitives.voprf import Mode, Oprf

VIEW = Role.S_TAG.label


class TaggingState(Enum):
    """Where S_tag stands in the round (:data:`TAGGING_TRANSITIONS`)."""

    EVALUATING = "evaluating"
    INFORMED = "informed"
    COLLECTING = "collecting"
    AGGREGATED = "aggregated"


_T = TaggingState

#: S_tag's messages by state: blind requests in any number of batches until the broadcast, then
#: S_syn's token hashes (once), then shares in any number of batches (settled after each window
#: under running sums), then the one aggregation request.
TAGGING_TRANSITIONS: Transitions[TaggingState] = Transitions(
    role=VIEW,
    initial=_T.EVALUATING,
    table={
        "evaluate": {_T.EVALUATING: _T.EVALUATING},
        "receive_broadcast": {_T.EVALUATING: _T.INFORMED},
        "receive_tokens": {_T.INFORMED: _T.COLLECTING},
        "receive_shares": {_T.COLLECTING: _T.COLLECTING},
        "settle_contributions": {_T.COLLECTING: _T.COLLECTING},
        "aggregate": {_T.COLLECTING: _T.AGGREGATED},
    },
)


class TaggingServer:
    """S_tag. States (:data:`TAGGING_TRANSITIONS`; a message in any other state is refused with
    :class:`~fre_protocol.roles.state.OutOfOrderError`, and nothing happens):

    ==========  ===========================================================
    state       message → next state
    ==========  ===========================================================
    evaluating  evaluate (any number of batches) → evaluating;
                receive_broadcast → informed
    informed    receive_tokens (S_syn's token hashes) → collecting
    collecting  receive_shares, settle_contributions → collecting;
                aggregate (S_syn's one request) → aggregated
    aggregated  nothing
    ==========  ===========================================================
    """

    TRANSITIONS = TAGGING_TRANSITIONS

    def __init__(
        self,
        *,
        suite: Oprf,
        voprf_key: tuple[Secret[bytes], bytes],
        box_key: tuple[Secret[bytes], bytes],
        channel: Channel,
        rng: RandomSource,
        workers: Workers,
        meter: Meter,
        recorder: Recorder,
        release_floor: int,
        dropout_policy: str = WITHHOLD,
        proof_batch_size: int = 1,
        record_shares: bool = True,
        keep_contributions: bool = True,
    ) -> None:
        _check_settings(suite, release_floor, dropout_policy, proof_batch_size)
        self.release_floor = release_floor
        self.dropout_policy = dropout_policy
        self._suite = suite
        self._sk, self.voprf_public_key = voprf_key
        self._box_sk, self.box_public_key = box_key
        self._rng = rng
        self._workers = workers
        self._meter = meter
        self._recorder = recorder
        self.proof_batch_size = proof_batch_size
        if proof_batch_size > 1:
            # A batched proof's composite uses the JIT-compiled multi-scalar multiplication: load
            # (or compile) it now, once per process, rather than inside the first timed batch.
            from primitives.group import msm_numba

            msm_numba.warm_up()
        # S_syn's view already holds the other share of every contribution: recording S_tag's
        # shares too would let the transcript file unmask each user's encoding. Outside seeded
        # test mode they are recorded size-only (design §6.7: no unmasked shares).
        self.record_shares = record_shares
        self._inbox = SealedInbox(name="S_tag", channel=channel, private_key=self._box_sk, workers=workers, meter=meter)
        self.released: dict[bytes, int] = {}
        self._shares = ShareBook(keep_contributions=keep_contributions)
        self._tokens = TokenBook()
        self.rejections: dict[str, int] = {}
        # Tags whose one aggregation request has been answered (or refused): never a second.
        self._requested: set[bytes] = set()
        self.refused: dict[bytes, str] = {}
        self.topped_up: dict[bytes, int] = {}
        self._state = TAGGING_TRANSITIONS.initial

    @property
    def state(self) -> TaggingState:
        return self._state

    # -- phase 1 ---------------------------------------------------------------------------------
    @step("evaluate")
    def evaluate(self, ciphertexts: Sequence[bytes]) -> list[bytes]:
        """Answer each blinded element, by position: Evaluation / BatchEvaluation / Rejection.

        Malformed, non-canonical or identity elements and replays are rejected one by one
        (typed error, recorded); the valid ones are evaluated in proof batches.
        """
        opened = self._inbox.open_all(ciphertexts, BlindRequest)
        group = self._suite.group
        valid: list[int] = []
        t0 = time.perf_counter()
        for j, o in enumerate(opened):
            if o.error is None:
                assert isinstance(o.message, BlindRequest)
                try:
                    group.deserialize_element(o.message.blinded_element)
                    valid.append(j)
                except DecodeError as exc:  # non-canonical encoding or the identity
                    o.error = exc
        self._meter.add("S_tag.validate", time.perf_counter() - t0, len(opened))
        responses: list[bytes] = [b""] * len(opened)
        for j, o in enumerate(opened):
            if o.error is not None:
                responses[j] = Rejection(reason=type(o.error).__name__).encode()
        elements = [opened[j].message.blinded_element for j in valid]  # type: ignore[union-attr]
        answers = self._evaluate_each(elements) if self.proof_batch_size == 1 else self._evaluate_batches(elements)
        for j, answer in zip(valid, answers, strict=True):
            responses[j] = answer
        self._record(PHASE1, opened)
        return responses

    def _evaluate_each(self, elements: Sequence[bytes]) -> list[bytes]:
        """One proof per element (``proof_batch_size`` 1), chunks of elements on the workers."""
        sk, suite = self._sk.reveal(), self._suite

        def work_single(span: range) -> list[bytes]:
            t = time.perf_counter()
            mine = elements[span.start : span.stop]
            answers = suite.blind_evaluate_each(sk, mine, [self._proof_rng([e]) for e in mine])
            out = [Evaluation(evaluated_element=ev, proof=proof).encode() for ev, proof in answers]
            self._meter.add("S_tag.voprf_eval", time.perf_counter() - t, len(span))
            return out

        eval_start = time.perf_counter()
        parts = self._workers.map(work_single, chunks(len(elements), 512), desc="S_tag: VOPRF evaluate")
        self._meter.add_wall("S_tag.voprf_eval", time.perf_counter() - eval_start)
        return [a for part in parts for a in part]

    def _evaluate_batches(self, elements: Sequence[bytes]) -> list[bytes]:
        """One proof per ``proof_batch_size`` elements; each member's answer is the whole batch."""
        sk, suite = self._sk.reveal(), self._suite
        answers: list[bytes] = []
        for span in chunks(len(elements), self.proof_batch_size):
            batch = list(elements[span.start : span.stop])
            t = time.perf_counter()
            # The suite splits a large batch over its own threads.
            evaluated, proof = suite.blind_evaluate(sk, batch, rng=self._proof_rng(batch))
            assert proof is not None
            t1 = time.perf_counter()
            self._meter.add("S_tag.voprf_eval", t1 - t, len(batch))
            self._meter.add_wall("S_tag.voprf_eval", t1 - t)
            # Each member gets the whole batch (to verify the one proof) and its position:
            # message building, not evaluation, so metered apart.
            blinded_t, evaluated_t = tuple(batch), tuple(evaluated)
            answers.extend(
                BatchEvaluation(
                    position=p, blinded_elements=blinded_t, evaluated_elements=evaluated_t, proof=proof
                ).encode()
                for p in range(len(batch))
            )
            self._meter.add_wall("S_tag.encode_batch_responses", time.perf_counter() - t1)
        return answers

    def _proof_rng(self, elements: Sequence[bytes]) -> RandomSource:
        """The randomness of the one proof over ``elements``, keyed by what it proves, so a seeded
        run draws the same proof however a driver batches the requests (the in-process driver
        hands S_tag one batch, the networked proxy a window at a time). A cryptographic source's
        children are fresh OS randomness, so only seeded runs change. The same elements get the
        same nonce only for the same statement (the evaluations follow from the key), which
        reveals nothing, as with RFC 6979's deterministic nonces. Elements are fixed-size
        encodings, so their concatenation is unambiguous."""
        return self._rng.child("evaluate/" + hashlib.sha256(b"".join(elements)).hexdigest())

    # -- broadcast -------------------------------------------------------------------------------
    @step("receive_broadcast")
    def receive_broadcast(self, data: bytes) -> None:
        """The full list of released tags with their counts (ReleasedTags), from S_syn over the
        servers' channel: S_tag needs every released tag (the users get the compact broadcast)."""
        error: Exception | None = None
        try:
            self.released = decode_as(data, ReleasedTags).as_dict()
        except DecodeError as exc:
            error = exc
        self._recorder.add(
            [(VIEW, BROADCAST, Role.S_SYN.label, VIEW, message_type_name(data), data, status_of(error))]
        )

    @step("receive_tokens")
    def receive_tokens(self, messages: Sequence[bytes]) -> None:
        """S_syn's ReleasedTokens, one per released tag, after the broadcast (design §6.8).
        Refused (typed, recorded in S_tag's view): one for a tag that was not released, a second
        one for a tag, and one whose count of token hashes differs from the tag's broadcast
        count (S_syn counts one submission per token hash)."""
        rows: list[Row] = []
        for data in messages:
            error: Exception | None = None
            try:
                msg = decode_as(data, ReleasedTokens)
                if msg.tag not in self.released:
                    raise ProtocolStateError("token hashes for a tag that was not released")
                if len(msg.token_hashes) != self.released[msg.tag]:
                    raise ProtocolStateError(
                        f"token hashes must number the tag's released count {self.released[msg.tag]}, "
                        f"got {len(msg.token_hashes)}"
                    )
                self._tokens.allow(msg.tag, msg.token_hashes)
            except (DecodeError, ProtocolStateError) as exc:
                error = exc
                self.rejections[status_of(exc)] = self.rejections.get(status_of(exc), 0) + 1
            rows.append((VIEW, BROADCAST, Role.S_SYN.label, VIEW, message_type_name(data), data, status_of(error)))
        self._recorder.add(rows)

    # -- phase 2 ---------------------------------------------------------------------------------
    @step("receive_shares")
    def receive_shares(self, ciphertexts: Sequence[bytes], *, sharing: Any, dim: int) -> None:
        """Validate and keep each share: released tag, unspent token of one of the tag's
        accepted submissions (as S_syn listed them), fresh contribution id, well-formed share."""
        opened = self._inbox.open_all(ciphertexts, (ShareSubmission, CoverShare))
        accept_shares(
            opened, self.released, self._shares, sharing=sharing, dim=dim, meter=self._meter, name="S_tag",
            tokens=self._tokens,
        )
        self._record(PHASE2, opened)

    @step("settle_contributions")
    def settle_contributions(self, named: Sequence[bytes], *, sharing: Any, dim: int) -> list[bytes]:
        """Running sums, after each window: keep the contributions since the last window that
        S_syn names too (AcceptedContributions per tag), take the others out of the sum, and
        name the kept ones back. Both servers then hold the same contributions, as the in-process driver's
        servers sum over the common ones at the aggregation."""
        kept, rows = settle_shares(
            self._shares, named, sharing=sharing, dim=dim, view=VIEW, sender=Role.S_SYN.label
        )
        self._recorder.add(rows)
        return kept

    @step("aggregate")
    def aggregate(
        self,
        accepted: Sequence[bytes],
        *,
        sharing: Any,
        noise: tuple[Any, float] | None = None,
        plan: Any = None,
    ) -> list[bytes]:
        """For each AcceptedContributions from S_syn, the AggregateShare over the common ids.

        Refused (ProtocolStateError, recorded in S_tag's view, listed in :attr:`refused`): a
        request for a tag that was not released, a second request for a tag (whatever subset it
        names), and one whose common contributions number fewer than the tag's m_h — unless
        the dropout policy is ``topup``: then S_tag adds ``m_h − count`` users' worth of
        discrete Gaussian noise (``noise = (sampler, sigma_int)``, the users' own DDG noise) to
        its aggregate share, so the sum carries the noise the ledger assumed. An aggregate of no
        contribution at all is always refused. ``plan`` (the round's
        :class:`~fre_protocol.roles.noise_plan.NoisePlan`, which S_tag's own broadcast counts
        determine) gives each tag's m_h and σ_int,h; without one, m_h is the release floor and
        σ_int the one of ``noise``. m_h is never below the release floor.
        """
        rows: list[Row] = []
        out: list[bytes] = []
        rng = self._rng.child("topup")
        for data in accepted:
            error: Exception | None = None
            ids: tuple[bytes, ...] = ()
            try:
                msg = decode_as(data, AcceptedContributions)
                ids = self._check_request(msg, noise, self._needed(msg.tag, plan))
            except (DecodeError, ProtocolStateError) as exc:
                error = exc
            rows.append((VIEW, AGGREGATION, Role.S_SYN.label, VIEW, message_type_name(data), data, status_of(error)))
            if error is not None:
                if isinstance(error, ProtocolStateError):
                    self.refused[msg.tag] = str(error)
                continue
            out.append(self._aggregate_tag(msg.tag, ids, sharing=sharing, noise=_noise_for(msg.tag, noise, plan), rng=rng,
                                           needed=self._needed(msg.tag, plan)))
        self._recorder.add(rows)
        return out

    def _needed(self, tag: bytes, plan: Any) -> int:
        """The contributions a tag's aggregate needs (m_h; at least the release floor)."""
        return self.release_floor if plan is None else max(self.release_floor, int(plan.needed(tag)))

    def _check_request(
        self, msg: AcceptedContributions, noise: tuple[Any, float] | None, needed: int
    ) -> tuple[bytes, ...]:
        """The contribution ids S_tag will sum for this request, or ProtocolStateError."""
        if msg.tag not in self.released:
            raise ProtocolStateError("aggregation requested for a tag that was not released")
        if msg.tag in self._requested:
            raise ProtocolStateError("second aggregation request for one tag (S_tag answers once per tag)")
        self._requested.add(msg.tag)
        ids = tuple(sorted(set(msg.contribution_ids) & self._shares.ids(msg.tag)))
        if not ids:
            raise ProtocolStateError("no contribution to aggregate for this tag")
        if len(ids) < needed and not (self.dropout_policy == TOPUP and noise is not None):
            what = f"the release floor {self.release_floor}" if len(ids) < self.release_floor else f"m_h = {needed}"
            raise ProtocolStateError(
                f"{len(ids)} contributions are fewer than {what}: S_tag sends no aggregate of so few users"
            )
        return ids

    def _aggregate_tag(
        self,
        tag: bytes,
        ids: tuple[bytes, ...],
        *,
        sharing: Any,
        noise: tuple[Any, float] | None,
        rng: RandomSource,
        needed: int,
    ) -> bytes:
        t0 = time.perf_counter()
        total = self._shares.total(tag, ids, sharing=sharing)
        self._meter.add("S_tag.accumulate", time.perf_counter() - t0, len(ids))
        missing = missing_users(len(ids), needed)
        if missing and noise is not None:
            sampler, sigma = noise
            if sigma > 0:
                draws = sampler.sample(sigma, missing * total.shape[0], rng.child(tag.hex())).reshape(missing, -1)
                added = np.sum(draws, axis=0, dtype=np.int64)
                total = sharing.add_integers(total, added)
            self.topped_up[tag] = missing
        values = total.astype(">u8").tobytes()
        return AggregateShare(tag=tag, contribution_ids=ids, values=values).encode()

    # -- helpers ---------------------------------------------------------------------------------
    def _record(self, phase: str, opened: Sequence[Opened]) -> None:
        rows: list[Row] = []
        size_only = phase == PHASE2 and not self.record_shares
        for o in opened:
            status = status_of(o.error)
            if o.error is not None:
                self.rejections[status] = self.rejections.get(status, 0) + 1
            # A cover message carries nothing secret: recorded whole.
            payload: bytes | int = len(o.payload) if size_only and not o.is_cover else o.payload
            rows.append((VIEW, phase, Role.PROXY.label, VIEW, o.type_name, payload, status))
        self._recorder.add(rows)


def _check_settings(suite: Oprf, release_floor: int, dropout_policy: str, proof_batch_size: int) -> None:
    """S_tag's settings, or InvalidParameterError naming the first one out of its domain."""
    if (
        isinstance(proof_batch_size, bool)
        or not isinstance(proof_batch_size, int)
        or not 1 <= proof_batch_size <= MAX_PROOF_BATCH
    ):
        raise InvalidParameterError(
            f"proof_batch_size must be an integer in [1, {MAX_PROOF_BATCH}], got {proof_batch_size!r}"
        )
    if suite.mode is not Mode.VOPRF:
        raise InvalidParameterError(f"suite must be in mode VOPRF (users verify proofs), got {suite.mode.name}")
    if isinstance(release_floor, bool) or not isinstance(release_floor, int) or release_floor < 1:
        raise InvalidParameterError(f"release_floor must be an integer >= 1, got {release_floor!r}")
    check_dropout_policy(dropout_policy)


def missing_users(count: int, floor: int) -> int:
    """How many contributors short of ``floor`` (the release floor, or a tag's m_h) an aggregate
    is (for the dropout policy)."""
    return max(0, floor - count)


def _noise_for(tag: bytes, noise: tuple[Any, float] | None, plan: Any) -> tuple[Any, float] | None:
    """The top-up noise of one tag: the users' sampler at the tag's σ_int,h of the noise plan."""
    if noise is None or plan is None:
        return noise
    return (noise[0], float(plan.sigma(tag)))


__all__ = ["TAGGING_TRANSITIONS", "TaggingServer", "TaggingState", "missing_users"]
