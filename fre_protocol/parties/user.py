"""The users U_i (SPEC §6 steps 1-3; paper Algorithm 2, lines 2-6 and 11-15).

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

A user that receives a malformed or unverifiable evaluation (or none at all) aborts: it submits
no tag and sends no shares, and records the rejection in its own view. Nothing else is affected.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from fre_protocol.messages import (
    BatchEvaluation,
    BlindRequest,
    CoverShare,
    Evaluation,
    Rejection,
    ReleasedTags,
    Role,
    SealedEnvelope,
    ShareSubmission,
    TagSubmission,
    decode,
    message_type_name,
    tag_of,
)
from fre_protocol.parties.base import (
    BROADCAST,
    PHASE1,
    Channel,
    Meter,
    Recorder,
    Row,
    Workers,
    chunks,
    prepare_seals,
    seal_prepared_batch,
    status_of,
)
from primitives.errors import DecodeError, FreError, ProtocolStateError, VerificationError
from primitives.randomness import RandomSource

VIEW = Role.USER.label

# Placeholder input and blind for batch positions that belong to no simulated user (e.g. an
# injected request): they only make finalize's batch verification possible; outputs are ignored.
_PLACEHOLDER_INPUT = b"fre-e2t/placeholder"
_PLACEHOLDER_BLIND = (1).to_bytes(32, "little")

OK = "ok"

# A user's costs are the CPU time of the thread doing its work: each simulated device is one
# user on its own processor, so time this thread spends waiting for the GIL held by a sibling
# worker, or descheduled on a shared machine, is not that user's time (wall clocks per thread
# overstated it by up to the number of workers). This counts all of a user's work only while
# BLAS runs in the calling thread, which the runner arranges (threadpoolctl) for the whole run.
_clock = time.thread_time


@dataclass(frozen=True, slots=True)
class ServerKeys:
    """What users know about the servers: S_tag's VOPRF public key and both sealing keys."""

    voprf_public_key: bytes
    tag_box_key: bytes
    syn_box_key: bytes


class UserPopulation:
    """N users' devices. ``encodings[i]`` is user i's bucket index b_i, canonically encoded."""

    def __init__(
        self,
        x: npt.NDArray[np.floating[Any]],
        encodings: Sequence[bytes],
        coins: npt.NDArray[np.bool_],
        *,
        suite: Any,
        keys: ServerKeys,
        channel: Channel,
        rng: RandomSource,
        workers: Workers,
        meter: Meter,
        recorder: Recorder,
        chunk_size: int = 1024,
        cover_traffic: bool = True,
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
        self.status: list[str] = ["no_response"] * n
        self.submitted = np.zeros(n, dtype=bool)
        self.released: dict[bytes, int] = {}
        self.participants = np.zeros(0, dtype=np.int64)
        self.dropped = np.zeros(0, dtype=np.int64)

    # -- before the protocol: what needs neither the data nor a server message ------------------
    def prepare(self) -> None:
        """Offline work of every device: the blind r and r^-1, and key material for each sealed
        box it will send (its blind request to S_tag; with its coin, its tag submission to S_syn;
        its two phase-2 messages with its coin, or always under cover traffic)."""
        group, channel = self._suite.group, self._channel
        tag_key, syn_key = self._keys.tag_box_key, self._keys.syn_box_key
        kinds = ("blind_request", "tag_submission", "share_to_tag", "share_to_syn")
        self._seals = {kind: [None] * self.n for kind in kinds}

        def work(job: tuple[int, range]) -> None:
            index, users = job
            rng = self._rng.child(f"prepare/{index}")
            t0 = _clock()
            for i in users:
                r = group.random_scalar(rng)
                self.blinds[i] = group.serialize_scalar(r)
                self.blind_inverses[i] = group.serialize_scalar(group.scalar_inverse(r))
            t1 = _clock()
            idx = list(users)
            coin = [i for i in idx if self.coins[i]]
            phase2 = idx if self.cover_traffic else coin
            for kind, key, who in (
                ("blind_request", tag_key, idx),
                ("tag_submission", syn_key, coin),
                ("share_to_tag", tag_key, phase2),
                ("share_to_syn", syn_key, phase2),
            ):
                for i, seal in zip(who, prepare_seals(channel, key, len(who), rng), strict=True):
                    self._seals[kind][i] = seal
            t2 = _clock()
            self._meter.add("user.offline.blind_scalar", t1 - t0, len(idx))
            self._meter.add("user.offline.seal_keys", t2 - t1, len(idx) + len(coin) + 2 * len(phase2))

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
            sealed = seal_prepared_batch(
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
    def receive_evaluations(self, deliveries: Sequence[tuple[int, bytes]]) -> None:
        """Verify the proof and finalize each user's tag (RFC 9497 §3.3.2 Finalize)."""
        by_user: dict[int, bytes] = {}
        extra_rows: list[Row] = []
        for conn, data in deliveries:
            if not 0 <= conn < self.n:
                continue  # an answer to someone else's connection (e.g. an injected request)
            if conn not in by_user:
                by_user[conn] = data
            else:  # a second response for one request
                extra_rows.append(
                    (VIEW, PHASE1, Role.S_TAG.label, VIEW, message_type_name(data), data,
                     status_of(ProtocolStateError("unexpected response")))
                )
        self._meter.add_bytes("user.download.evaluation", sum(len(d) for d in by_user.values()))
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

        suite, pk = self._suite, self._keys.voprf_public_key

        singles_tools = single_tools(suite, pk)

        def work_singles(items: list[tuple[int, Evaluation]]) -> dict[int, Exception | None]:
            res: dict[int, Exception | None] = {}
            t0 = _clock()
            if singles_tools is not None:
                verify_many, unblind = singles_tools
                verdicts = verify_many(
                    [(self.blinded[i], msg.evaluated_element, msg.proof) for i, msg in items]  # type: ignore[misc]
                )
                for (i, msg), verdict in zip(items, verdicts, strict=True):
                    if verdict is None:
                        self.tags[i] = tag_of(unblind(self.encodings[i], self.blind_inverses[i], msg.evaluated_element))
                    res[i] = verdict
            else:  # a suite without the pieces: its own finalize, one user at a time
                for i, msg in items:
                    try:
                        (tag,) = suite.finalize(
                            [self.encodings[i]], [self.blinds[i]], [msg.evaluated_element],
                            blinded_elements=[self.blinded[i]], pk=pk, proof=msg.proof,
                        )
                        self.tags[i] = tag_of(tag)
                        res[i] = None
                    except (DecodeError, VerificationError) as exc:
                        res[i] = exc
            self._meter.add("user.finalize", _clock() - t0, len(items))
            return res

        tools = batch_tools(suite, pk)

        def work_batch(group: list[tuple[int, BatchEvaluation]]) -> dict[int, Exception | None]:
            # Every member of a group received the same batch (proof, blinded and evaluated
            # elements), so each would verify the same proof over the same elements and then
            # unblind its own element. The simulation verifies once per group and charges that
            # verification to each member, plus the member's own unblinding.
            first = group[0][1]
            res: dict[int, Exception | None] = {}
            if tools is not None:
                verify, unblind = tools
                t0 = _clock()
                try:
                    ok = verify(list(first.blinded_elements), list(first.evaluated_elements), first.proof)
                    error: Exception | None = None if ok else VerificationError("batch proof does not verify")
                except DecodeError as exc:
                    error = exc
                verify_time = _clock() - t0
                own = 0.0
                for i, msg in group:
                    if error is not None:
                        res[i] = error
                        continue
                    t1 = _clock()
                    try:
                        evaluated = msg.evaluated_elements[msg.position]
                        self.tags[i] = tag_of(unblind(self.encodings[i], self.blind_inverses[i], evaluated))
                        res[i] = None
                    except (DecodeError, VerificationError) as exc:
                        res[i] = exc
                    own += _clock() - t1
                self._meter.add("user.finalize", verify_time * len(group) + own, len(group))
                self._meter.add("user.finalize.batch_verifications", verify_time, 1)
                return res
            # A suite without the batch pieces: one finalize over the whole batch (placeholders
            # for positions no simulated user holds), charged in full to every member.
            size = len(first.blinded_elements)
            inputs = [_PLACEHOLDER_INPUT] * size
            blinds: list[bytes] = [_PLACEHOLDER_BLIND] * size
            for i, msg in group:
                inputs[msg.position] = self.encodings[i]
                blinds[msg.position] = self.blinds[i]  # type: ignore[assignment]
            t0 = _clock()
            try:
                outputs = suite.finalize(
                    inputs, blinds, list(first.evaluated_elements),
                    blinded_elements=list(first.blinded_elements), pk=pk, proof=first.proof,
                )
                for i, msg in group:
                    self.tags[i] = tag_of(outputs[msg.position])
                    res[i] = None
            except (DecodeError, VerificationError) as exc:
                res = {i: exc for i, _ in group}
            elapsed = _clock() - t0
            self._meter.add("user.finalize", elapsed * len(group), len(group))
            self._meter.add("user.finalize.batch_verifications", elapsed, 1)
            return res

        jobs: list[Any] = [("s", singles[c.start : c.stop]) for c in chunks(len(singles), 256)]
        jobs += [("b", g) for g in batches.values()]

        def run(job: Any) -> dict[int, Exception | None]:
            kind, payload = job
            return work_singles(payload) if kind == "s" else work_batch(payload)

        for result in self._workers.map(run, jobs, desc="users: verify + finalize"):
            for i, err in result.items():
                if err is not None:
                    errors[i] = err
                else:
                    self.status[i] = OK
        for i, err in errors.items():
            self.tags[i] = None
            if not self.status[i].startswith("rejected_by_server"):
                self.status[i] = status_of(err)
        rows: list[Row] = [
            (VIEW, PHASE1, Role.S_TAG.label, VIEW, message_type_name(data), data,
             status_of(errors.get(i)))
            for i, data in sorted(by_user.items())
        ]
        self._recorder.add(rows + extra_rows)

    # -- phase 1: submit ------------------------------------------------------------------------
    def tag_submissions(self) -> list[tuple[int, Role, bytes]]:
        """With its coin, each user with a tag sends it to S_syn, sealed (Algorithm 2, l. 4-6)."""
        have_tag = np.array([t is not None for t in self.tags], dtype=bool)
        senders = np.flatnonzero(self.coins & have_tag)
        channel = self._channel

        def work(job: tuple[int, range]) -> list[tuple[int, Role, bytes]]:
            index, span = job
            rng = self._rng.child(f"submit/{index}")
            users = senders[span.start : span.stop]
            nonces = rng.random_bytes(16 * len(users))
            t0 = _clock()
            plains = []
            for j, i in enumerate(users.tolist()):
                tag = self.tags[i]
                assert tag is not None
                plains.append(TagSubmission(tag=tag, nonce=nonces[16 * j : 16 * j + 16]).encode())
            sealed = seal_prepared_batch(channel, self._take_seals("tag_submission", users.tolist()), plains)
            out = [
                (i, Role.USER, SealedEnvelope(recipient=Role.S_SYN, ciphertext=c).encode())
                for i, c in zip(users.tolist(), sealed, strict=True)
            ]
            self._meter.add("user.submit", _clock() - t0, len(users))
            return out

        parts = self._workers.map(
            work, list(enumerate(chunks(len(senders), self._chunk))), desc="users: submit tags"
        )
        self.submitted[senders] = True
        out = [item for part in parts for item in part]
        self._meter.add_bytes("user.upload.tag_submission", sum(len(e) for _, _, e in out))
        return out

    # -- broadcast -------------------------------------------------------------------------------
    def receive_broadcast(self, data: bytes) -> None:
        """The released tags with their counts (Algorithm 2, l. 10). Recorded once: every user
        receives the same broadcast."""
        error: Exception | None = None
        try:
            msg = decode(data, ReleasedTags)
            assert isinstance(msg, ReleasedTags)
            self.released = msg.as_dict()
        except DecodeError as exc:
            error, self.released = exc, {}
        self._recorder.add(
            [(VIEW, BROADCAST, Role.S_SYN.label, VIEW, message_type_name(data), data, status_of(error))]
        )
        self._meter.add_bytes("user.download.broadcast", len(data))

    # -- phase 2 --------------------------------------------------------------------------------
    def share_submissions(
        self,
        *,
        encoder: Any,
        sharing: Any,
        noise: bool,
        active: npt.NDArray[np.bool_] | None = None,
    ) -> list[tuple[int, Role, bytes]]:
        """Users whose submitted tag was released: DDG-encode x_i, split it into two shares,
        seal one to S_tag and one to S_syn, both tagged with h_i (Algorithm 2, l. 11-15).

        ``active`` marks users still online (False = dropped out between the phases). Under
        cover traffic every other online user sends two cover messages of the same sizes.
        """
        released = self.released
        eligible = np.array(
            [bool(self.submitted[i]) and self.tags[i] in released for i in range(self.n)], dtype=bool
        )
        if active is None:
            active = np.ones(self.n, dtype=bool)
        self.participants = np.flatnonzero(eligible & active)
        self.dropped = np.flatnonzero(eligible & ~active)
        parts_idx = self.participants
        channel = self._channel
        dim = int(encoder.config.dim)

        def work(job: tuple[int, range]) -> list[tuple[int, Role, bytes]]:
            index, span = job
            users = parts_idx[span.start : span.stop]
            rng = self._rng.child(f"phase2/{index}")
            t0 = _clock()
            values = encoder.encode(
                np.asarray(self.x[users], dtype=np.float64).reshape(len(users), dim), rng, noise=noise
            )
            t1 = _clock()
            first, second = sharing.share(values, rng)
            cids = rng.random_bytes(16 * len(users))
            t2 = _clock()
            to_tag, to_syn = [], []
            for j, i in enumerate(users.tolist()):
                tag = self.tags[i]
                assert tag is not None
                cid = cids[16 * j : 16 * j + 16]
                to_tag.append(
                    ShareSubmission(tag=tag, contribution_id=cid, share=sharing.encode_share(first, j)).encode()
                )
                to_syn.append(
                    ShareSubmission(tag=tag, contribution_id=cid, share=sharing.encode_share(second, j)).encode()
                )
            idx = users.tolist()
            sealed_tag = seal_prepared_batch(channel, self._take_seals("share_to_tag", idx), to_tag)
            sealed_syn = seal_prepared_batch(channel, self._take_seals("share_to_syn", idx), to_syn)
            out = []
            for i, a, b in zip(users.tolist(), sealed_tag, sealed_syn, strict=True):
                out.append((i, Role.USER, SealedEnvelope(recipient=Role.S_TAG, ciphertext=a).encode()))
                out.append((i, Role.USER, SealedEnvelope(recipient=Role.S_SYN, ciphertext=b).encode()))
            t3 = _clock()
            self._meter.add("user.ddg_encode", t1 - t0, len(users))
            self._meter.add("user.share", t2 - t1, len(users))
            self._meter.add("user.seal_shares", t3 - t2, len(users))
            return out

        jobs = list(enumerate(chunks(len(parts_idx), self._chunk)))
        parts = self._workers.map(work, jobs, desc="users: DDG encode + share")
        out = [item for part in parts for item in part]
        self._meter.add_bytes("user.upload.shares", sum(len(e) for _, _, e in out))
        if self.cover_traffic:
            self.cover = np.flatnonzero(~eligible & active)
            out += self._cover_messages(self.cover, sharing.share_sizes(int(encoder.config.padded_dim)))
        return out

    def _cover_messages(self, users: npt.NDArray[np.int64], share_sizes: tuple[int, int]) -> list[tuple[int, Role, bytes]]:
        """Two sealed CoverShares per user, as long as its two shares would be (the proxy sees
        the same count and sizes from every user; the servers open and discard them)."""
        to_tag = CoverShare.matching(share_sizes[0]).encode()
        to_syn = CoverShare.matching(share_sizes[1]).encode()
        channel = self._channel

        def work(span: range) -> list[tuple[int, Role, bytes]]:
            idx = users[span.start : span.stop].tolist()
            t0 = _clock()
            sealed_tag = seal_prepared_batch(channel, self._take_seals("share_to_tag", idx), [to_tag] * len(idx))
            sealed_syn = seal_prepared_batch(channel, self._take_seals("share_to_syn", idx), [to_syn] * len(idx))
            out = []
            for i, a, b in zip(idx, sealed_tag, sealed_syn, strict=True):
                out.append((i, Role.USER, SealedEnvelope(recipient=Role.S_TAG, ciphertext=a).encode()))
                out.append((i, Role.USER, SealedEnvelope(recipient=Role.S_SYN, ciphertext=b).encode()))
            self._meter.add("user.seal_cover", _clock() - t0, len(idx))
            return out

        parts = self._workers.map(work, chunks(len(users), self._chunk), desc="users: cover traffic")
        out = [item for part in parts for item in part]
        self._meter.add_bytes("user.upload.cover", sum(len(e) for _, _, e in out))
        return out


def _rfc_voprf_parts(suite: Any) -> tuple[Any, bytes, bytes] | None:
    """``(group, context string, HashToScalar DST)`` of our RFC 9497 suite in VOPRF mode, whose
    pieces the users' verification calls directly; ``None`` for any other suite."""
    try:
        from primitives.voprf import Mode, OprfSuite
        from primitives.voprf.hashing import hash_to_scalar_dst
    except ImportError:  # pragma: no cover - another oprf backend
        return None
    if not isinstance(suite, OprfSuite) or suite.mode is not Mode.VOPRF:
        return None
    return suite.group, suite.context_string, hash_to_scalar_dst(suite.context_string)


def _split_proof(group: Any, proof: bytes) -> tuple[bytes, bytes]:
    """``(c, s)`` of an encoded DLEQ proof, each a scalar below the order; DecodeError otherwise."""
    if len(proof) != 2 * group.scalar_size:
        raise DecodeError(f"proof must be {2 * group.scalar_size} bytes, got {len(proof)}")
    return (
        group.deserialize_scalar(proof[: group.scalar_size]),
        group.deserialize_scalar(proof[group.scalar_size :]),
    )


def _unblinder(group: Any) -> Any:
    """``unblind(input, blind_inverse, evaluated) -> PRF output``: RFC 9497 Finalize with the
    inverse prepared offline, in libsodium's constant time. ``evaluated`` must already have been
    deserialized by the caller's verification (canonical, on the curve)."""
    from primitives.voprf.hashing import finalize_hash

    def unblind(input_: bytes, blind_inverse: bytes, evaluated: bytes) -> bytes:
        unblinded = group.scalar_mult(blind_inverse, evaluated)
        return finalize_hash(input_, group.serialize_element(unblinded), None)

    return unblind


def single_tools(suite: Any, pk: bytes) -> tuple[Any, Any] | None:
    """What a user runs on its own evaluation with a one-element proof, for the RFC 9497 VOPRF
    suite: ``verify_many([(blinded, evaluated, proof), ...]) -> [None | error]`` (VerifyProof,
    RFC 9497 §2.2.2, each proof on its own; variable-time arithmetic, since every input is
    public) and ``unblind(input, blind_inverse, evaluated) -> tag`` (Finalize with the inverse
    prepared offline, in libsodium's constant time). ``None`` for suites without these pieces."""
    parts = _rfc_voprf_parts(suite)
    if parts is None:
        return None
    from primitives.voprf import dleq

    group, context, dst = parts
    pk_enc = group.serialize_element(group.deserialize_element(pk))
    # The proof kernel loads (or compiles) here, once per process: not a user's metered work.
    from primitives.group import vartime_numba

    vartime_numba.warm_up()

    def verify_many(items: Sequence[tuple[bytes, bytes, bytes]]) -> list[Exception | None]:
        out: list[Exception | None] = [None] * len(items)
        todo: list[int] = []
        proofs: list[tuple[bytes, bytes]] = []
        for k, (_blinded, evaluated, proof) in enumerate(items):
            try:
                split = _split_proof(group, proof)
                group.deserialize_element(evaluated)
            except DecodeError as exc:
                out[k] = exc
                continue
            todo.append(k)
            proofs.append(split)
        if not todo:
            return out
        verdicts = dleq.verify_single_proofs(
            group, pk_enc, [items[k][0] for k in todo], [items[k][1] for k in todo], proofs,
            context=context, dst=dst,
        )
        for k, ok in zip(todo, verdicts, strict=True):
            if not ok:
                out[k] = VerificationError("proof does not verify")
        return out

    return verify_many, _unblinder(group)


def batch_tools(suite: Any, pk: bytes) -> tuple[Any, Any] | None:
    """``(verify(blinded, evaluated, proof) -> bool, unblind(input, blind_inverse, evaluated))``
    for the RFC 9497 suite: what one user runs on a batched proof (VerifyProof over the whole
    batch, RFC 9497 §2.2.2, then Finalize of its own element without re-verifying). ``None`` for
    suites that do not expose these pieces."""
    parts = _rfc_voprf_parts(suite)
    if parts is None:
        return None
    from primitives.voprf import dleq

    group, context, dst = parts
    key = group.deserialize_element(pk)
    # The batch verification's multi-scalar kernel loads here, once per process, unmetered.
    from primitives.group import msm_numba

    msm_numba.warm_up()

    def verify(blinded: list[bytes], evaluated: list[bytes], proof: bytes) -> bool:
        c, s = _split_proof(group, proof)
        cs = [group.deserialize_element(x) for x in blinded]
        ds = [group.deserialize_element(x) for x in evaluated]
        return bool(dleq.verify_proof(group, key, cs, ds, (c, s), context=context, dst=dst))

    return verify, _unblinder(group)


__all__ = ["OK", "ServerKeys", "UserPopulation", "batch_tools", "single_tools"]
