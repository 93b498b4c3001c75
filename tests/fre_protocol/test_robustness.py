"""Robustness (design §6): dropouts between the phases, and bad input on the network — malformed and
identity group elements, unopenable or misaddressed messages, wrong share lengths, out-of-range
ring elements, unknown tags, replays and duplicates, failed proofs. Each bad message is rejected
with a typed error, recorded with status ``rejected:<Type>``, and never changes other users'
results: seeded runs with noise off are compared with the honest run exactly.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fre_protocol.components import build_components
from fre_protocol.drivers.inprocess import run_protocol
from fre_protocol.drivers.local import ProtocolResult
from fre_protocol.messages import (
    TAG_BYTES,
    BatchEvaluation,
    BlindRequest,
    Evaluation,
    Role,
    SealedEnvelope,
    ShareSubmission,
    decode,
    tag_of,
)
from fre_protocol.roles.base import PHASE1, PHASE1_SUBMIT, PHASE2
from fre_protocol.roles.config import ProtocolConfig, RoundSpec, RunOptions
from fre_protocol.roles.proxy import NetworkAdversary
from fre_protocol.roles.round import box_key
from fre_protocol.roles.synthesis_server import BELOW_FLOOR
from mechanism.grid import PublicGrid
from mechanism.params import FreParams
from mechanism.population import Population, synthetic_population
from mechanism.release import Release
from mechanism.seeds import SeedPlan
from primitives.ddg import DDGConfig, DDGEncoder
from primitives.randomness import RandomSource
from transcripts import TranscriptStore

INF = FreParams.paper(math.inf)
# The plan seed is arbitrary; it is chosen so that the public grid puts each planted cluster of
# `pop` (130 users each) in a bucket of its own with no other user, and the 140-user cluster of
# `lone` in one bucket: the `honest` fixture and the dropout and top-up tests count on that (the
# floor test also needs the one member of `lone` it keeps to be sampled at ε = 8).
SEEDS = SeedPlan.from_seed(1)
# 22-bit ring: 3-byte words on the wire, so a word >= 2^22 is an out-of-range ring element.
CONFIG = ProtocolConfig(modulus_bits=22)
#: S_tag withholds a tag left short of contributors instead of topping up its noise.
WITHHOLDING = dataclasses.replace(CONFIG, dropout_policy="withhold")


@pytest.fixture(scope="module")
def pop() -> Population:
    return synthetic_population(2, 130, 40, 16, 0.5, RandomSource.seeded(23, "robust"), spread=0.005)


@pytest.fixture(scope="module")
def honest(pop: Population) -> Release:
    release = run_protocol(pop.embeddings, RoundSpec(params=INF, seeds=SEEDS, noise=False, config=CONFIG)).release
    assert len(release) == 2, "both planted clusters must be released for these tests"
    return release


def _run(pop: Population, tmp_path: Path, adversary: NetworkAdversary | None = None, **kw: Any) -> ProtocolResult:
    spec = RoundSpec(**{"params": INF, "seeds": SEEDS, "noise": False, "config": CONFIG, **kw})
    return run_protocol(pop.embeddings, spec, RunOptions(out_dir=tmp_path), adversary=adversary)


def _statuses(result: ProtocolResult, view: str) -> Counter[str]:
    with TranscriptStore.open(result.transcript_path) as store:  # type: ignore[arg-type]
        return Counter(e.status for e in store.entries(view=view))


def _same(a: Release, b: Release) -> None:
    assert a.ids == b.ids
    assert np.array_equal(a.counts, b.counts)
    assert np.array_equal(a.centroids, b.centroids)


class Keys:
    """The servers' sealing keys, recomputed from the seed plan (test mode) to forge messages."""

    def __init__(self) -> None:
        self.channel = build_components().channel
        self.tag = box_key(SEEDS, self.channel, Role.S_TAG)
        self.syn = box_key(SEEDS, self.channel, Role.S_SYN)

    def seal(self, role: Role, plain: bytes) -> bytes:
        key = self.tag[1] if role is Role.S_TAG else self.syn[1]
        return SealedEnvelope(recipient=role, ciphertext=self.channel.seal(key, plain)).encode()

    def open(self, envelope: bytes) -> tuple[Role, bytes]:
        env = decode(envelope)
        assert isinstance(env, SealedEnvelope)
        key = self.tag[0] if env.recipient is Role.S_TAG else self.syn[0]
        return env.recipient, self.channel.open(key, env.ciphertext)


# -- phase 1 --------------------------------------------------------------------------------------
class Phase1Injector(NetworkAdversary):
    def __init__(self, keys: Keys) -> None:
        self.keys = keys

    def on_forward(self, phase: str, items: list[tuple[int, Role, bytes]]) -> list[tuple[int, Role, bytes]]:
        k = self.keys
        if phase == PHASE1:
            return items + [
                (9001, Role.USER, k.seal(Role.S_TAG, BlindRequest(blinded_element=bytes(32)).encode())),  # identity
                (9002, Role.USER, k.seal(Role.S_TAG, BlindRequest(blinded_element=b"\xff" * 32).encode())),  # non-canonical
                (9003, Role.USER, SealedEnvelope(recipient=Role.S_TAG, ciphertext=b"\x00" * 80).encode()),  # unopenable
                (9004, Role.USER, b"\x09\x02"),  # truncated envelope: the proxy rejects it
                (9005, Role.USER, k.seal(Role.S_TAG, b"\x01" + bytes(31))),  # truncated BlindRequest
            ]
        if phase == PHASE1_SUBMIT:
            first = items[0][2]
            _, plain = k.open(first)
            return items + [
                (9006, Role.USER, first),  # replay of a user's envelope
                (9007, Role.USER, k.seal(Role.S_SYN, plain)),  # the same submission resealed (same token hash)
                (9008, Role.USER, k.seal(Role.S_TAG, plain)),  # a tag submission to the wrong server, wrong phase
            ]
        return items


def test_bad_phase1_messages_are_rejected_and_change_nothing(pop, honest, tmp_path) -> None:  # type: ignore[no-untyped-def]
    result = _run(pop, tmp_path, Phase1Injector(Keys()))
    _same(result.release, honest)
    tag_view = _statuses(result, "S_tag")
    assert tag_view["rejected:DecodeError"] == 4  # identity, non-canonical, unopenable, truncated
    assert tag_view["rejected:ProtocolStateError"] == 1  # a tag submission in the wrong phase
    # every genuine message still accepted: requests, broadcast, S_syn's token hashes (one message
    # per released tag), shares, accepted-contribution lists (phase 2: every user sends S_tag one
    # message, its share or cover)
    assert tag_view["accepted"] == pop.n + 1 + len(honest) + pop.n + len(honest)
    syn = _statuses(result, "S_syn")
    assert syn["rejected:ProtocolStateError"] == 2  # replay + duplicate token hash
    assert _statuses(result, "proxy")["rejected:DecodeError"] == 1
    assert result.release.diagnostics["rejections"] == {"rejected:DecodeError": 4, "rejected:ProtocolStateError": 3}
    # the injected requests got Rejection answers, routed to their connections only
    assert result.release.diagnostics["user_status"] == {"ok": pop.n}


# -- phase 2 --------------------------------------------------------------------------------------
class Phase2Tamperer(NetworkAdversary):
    """Tampers with the S_syn shares of three users and injects shares with unknown tags.

    The first victim's share is cut short, the second gets an out-of-range ring word, and the
    third is duplicated: ``duplicate="both"`` delivers its genuine share and a forged all-zero
    share with the same contribution id; ``"genuine"`` or ``"forged"`` delivers only that one
    copy (the runs a duplicated delivery is compared with)."""

    def __init__(self, keys: Keys, duplicate: str = "both") -> None:
        assert duplicate in ("both", "genuine", "forged")
        self.keys = keys
        self.duplicate = duplicate
        self.victims: dict[int, str] = {}
        self.copies: dict[str, ShareSubmission] = {}  # the duplicate victim's "genuine" and "forged"

    def on_forward(self, phase: str, items: list[tuple[int, Role, bytes]]) -> list[tuple[int, Role, bytes]]:
        if phase != PHASE2:
            return items
        k = self.keys
        out, extra = [], []
        kinds = iter(["short", "range", "duplicate"])
        for conn, role, env in items:
            recipient, plain = k.open(env)
            msg = decode(plain)
            if not isinstance(msg, ShareSubmission):  # a non-participant's cover message
                out.append((conn, role, env))
                continue
            if recipient is Role.S_SYN and conn not in self.victims and len(self.victims) < 3:
                kind = next(kinds)
                self.victims[conn] = kind
                if kind == "short":
                    bad = ShareSubmission(tag=msg.tag, contribution_id=msg.contribution_id, token=msg.token, share=msg.share[:-3])
                    out.append((conn, role, k.seal(recipient, bad.encode())))
                    continue
                if kind == "range":
                    word = b"\xff\xff\xff"  # 2^24 - 1 >= 2^22
                    bad = ShareSubmission(tag=msg.tag, contribution_id=msg.contribution_id, token=msg.token, share=word + msg.share[3:])
                    out.append((conn, role, k.seal(recipient, bad.encode())))
                    continue
                forged = ShareSubmission(tag=msg.tag, contribution_id=msg.contribution_id, token=msg.token, share=bytes(len(msg.share)))
                self.copies = {"genuine": msg, "forged": forged}
                if self.duplicate == "forged":
                    out.append((conn, role, k.seal(recipient, forged.encode())))
                    continue
                if self.duplicate == "both":
                    # on a connection of its own: the proxy refuses a second share to S_syn on
                    # the victim's (its cap), and this case is about what S_syn does with it
                    extra.append((9102, role, k.seal(recipient, forged.encode())))
            out.append((conn, role, env))
        unknown = ShareSubmission(tag=b"\x42" * TAG_BYTES, contribution_id=b"\x01" * 16, token=b"\x02" * 32, share=bytes(48))
        extra.append((9100, Role.USER, k.seal(Role.S_SYN, unknown.encode())))
        extra.append((9101, Role.USER, k.seal(Role.S_TAG, unknown.encode())))
        return out + extra  # the proxy shuffles after this: the two copies arrive in either order

    def arrivals(self, result: ProtocolResult) -> list[tuple[str, str]]:
        """``(copy, status)`` of the duplicate victim's S_syn shares, in the order S_syn got them."""
        genuine = self.copies["genuine"]
        out = []
        with TranscriptStore.open(result.transcript_path) as store:  # type: ignore[arg-type]
            for e in store.entries(view="S_syn", phase=PHASE2, message_type="share_submission"):
                msg = decode(e.payload)
                assert isinstance(msg, ShareSubmission)
                if (msg.tag, msg.contribution_id) == (genuine.tag, genuine.contribution_id):
                    out.append(("genuine" if msg == genuine else "forged", e.status))
        return out


def test_bad_shares_are_rejected_and_only_their_users_drop_out(pop, honest, tmp_path) -> None:  # type: ignore[no-untyped-def]
    adversary = Phase2Tamperer(Keys())
    result = _run(pop, tmp_path, adversary)
    release = result.release
    syn = _statuses(result, "S_syn")
    assert syn["rejected:DecodeError"] == 2  # short share, out-of-range word
    assert syn["rejected:ProtocolStateError"] == 2  # duplicate contribution id, unknown tag
    assert _statuses(result, "S_tag")["rejected:ProtocolStateError"] == 1  # unknown tag
    # The duplicated contribution id: the proxy's shuffle decides which copy S_syn gets first. The
    # first copy is kept whichever it is, the second is rejected, and the release is exactly that
    # of a run in which only the first copy was sent: the second changed nothing.
    (first, status1), (second, status2) = adversary.arrivals(result)
    assert {first, second} == {"genuine", "forged"}
    assert (status1, status2) == ("accepted", "rejected:ProtocolStateError")
    alone = _run(pop, tmp_path / "first-copy-only", Phase2Tamperer(Keys(), duplicate=first))
    _same(release, alone.release)
    assert release.diagnostics["contributors"] == alone.release.diagnostics["contributors"]
    # The same buckets and phase-1 counts; the two users with rejected shares are left out of
    # their bucket's sum at BOTH servers, the duplicated user is not.
    assert release.ids == honest.ids and np.array_equal(release.counts, honest.counts)
    contributors = release.diagnostics["contributors"]
    assert sum(contributors.values()) == sum(honest.diagnostics["contributors"].values()) - 2
    # Every bucket's centroid is the honest one, or the mean of the users left in it, except the
    # duplicated user's bucket when the forged copy came first: S_syn holds the forged all-zero
    # share for that user (checked above against the run with the forged copy alone).
    encoder = DDGEncoder(DDGConfig.from_dict(release.info["ddg"]))
    grid = PublicGrid.derive(SEEDS, pop.dim, INF)
    idx = [tuple(r) for r in grid.bucket_indices(pop.embeddings)]
    tags = {u: _tag_of(pop, u) for u in adversary.victims}
    dropped = [u for u, kind in adversary.victims.items() if kind in ("short", "range")]
    (duplicated,) = (u for u, kind in adversary.victims.items() if kind == "duplicate")
    forged_tag = tags[duplicated] if first == "forged" else None
    dropped_from = Counter(tags[u] for u in dropped)
    for row, (tag, n_contrib) in enumerate(contributors.items()):
        honest_row = honest.ids.index(tag)
        assert n_contrib == honest.diagnostics["contributors"][tag] - dropped_from[tag]
        if tag == forged_tag:
            continue
        if tag not in dropped_from:
            assert np.array_equal(release.centroids[row], honest.centroids[honest_row])
            continue
        # this bucket lost its dropped users: its centroid is the mean of the others
        (bucket,) = {idx[u] for u in dropped if tags[u] == tag}
        kept = [u for u in range(pop.n) if idx[u] == bucket and u not in dropped]
        assert len(kept) == n_contrib
        mean = pop.embeddings[kept].astype(np.float64).mean(axis=0)
        assert np.linalg.norm(release.centroids[row] - mean) <= encoder.quantization_bound(n_contrib) / n_contrib + 1e-9


# -- failed proofs ----------------------------------------------------------------------------------
class ProofBreaker(NetworkAdversary):
    def __init__(self, victims: int = 1) -> None:
        self.victims = victims
        self.hit: list[int] = []
        self.bad_proof: bytes | None = None

    def on_response(self, phase: str, pairs: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
        out = []
        for conn, data in pairs:
            msg = decode(data)
            if isinstance(msg, Evaluation) and len(self.hit) < self.victims:
                self.hit.append(conn)
                proof = bytes([msg.proof[0] ^ 1]) + msg.proof[1:]
                data = Evaluation(evaluated_element=msg.evaluated_element, proof=proof).encode()
            elif isinstance(msg, BatchEvaluation):
                if self.bad_proof is None:
                    self.bad_proof = msg.proof
                if msg.proof == self.bad_proof:
                    self.hit.append(conn)
                    proof = bytes([msg.proof[0] ^ 1]) + msg.proof[1:]
                    data = BatchEvaluation(
                        position=msg.position, blinded_elements=msg.blinded_elements,
                        evaluated_elements=msg.evaluated_elements, proof=proof,
                    ).encode()
            out.append((conn, data))
        return out


def test_a_failed_proof_aborts_only_its_user(pop, honest, tmp_path) -> None:  # type: ignore[no-untyped-def]
    adversary = ProofBreaker(victims=3)
    result = _run(pop, tmp_path, adversary)
    status = result.release.diagnostics["user_status"]
    assert status == {"ok": pop.n - 3, "rejected:VerificationError": 3}
    assert _statuses(result, "user")["rejected:VerificationError"] == 3
    # the three users submitted nothing: each released count drops by its victims, nothing else
    assert result.release.diagnostics["n_real_submissions"] == pop.n - 3
    assert result.release.ids == honest.ids
    lost = Counter(_tag_of(pop, u) for u in adversary.hit)
    for tag, count, before in zip(result.release.ids, result.release.counts, honest.counts, strict=True):
        assert count == before - lost.get(tag, 0)


def test_a_failed_batch_proof_aborts_only_its_batch(pop, honest, tmp_path) -> None:  # type: ignore[no-untyped-def]
    adversary = ProofBreaker()
    result = _run(pop, tmp_path, adversary, config=ProtocolConfig(modulus_bits=22, proof_batch_size=64))
    status = result.release.diagnostics["user_status"]
    assert status["rejected:VerificationError"] == len(adversary.hit) == 64
    assert status["ok"] == pop.n - 64


class OneBatchMemberTamperer(NetworkAdversary):
    """Rewrites the phase-1 answer of one batch member (the first that :meth:`tamper` takes)."""

    def __init__(self) -> None:
        self.victim: int | None = None

    def tamper(self, msg: BatchEvaluation) -> bytes | None:
        """The bytes that replace this member's answer, or None to leave it."""
        raise NotImplementedError

    def on_response(self, phase: str, pairs: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
        out = []
        for conn, data in pairs:
            msg = decode(data)
            if isinstance(msg, BatchEvaluation) and self.victim is None:
                forged = self.tamper(msg)
                if forged is not None:
                    self.victim, data = conn, forged
            out.append((conn, data))
        return out


class KeylessEvaluation(OneBatchMemberTamperer):
    """Gives one member of a proof batch (not the first delivered) its own blinded element as its
    evaluation (D = C), leaving the proof and the other members' copies as they were. Unblinded,
    that would be a tag without S_tag's key, which anyone can compute for a candidate bucket."""

    def __init__(self) -> None:
        super().__init__()
        self.proof: bytes | None = None

    def tamper(self, msg: BatchEvaluation) -> bytes | None:
        if self.proof is None:
            self.proof = msg.proof
            return None
        if msg.proof != self.proof:
            return None
        evaluated = list(msg.evaluated_elements)
        evaluated[msg.position] = msg.blinded_elements[msg.position]
        return BatchEvaluation(
            position=msg.position, blinded_elements=msg.blinded_elements,
            evaluated_elements=tuple(evaluated), proof=msg.proof,
        ).encode()


def _one_batch_member_rejected(
    pop: Population, tmp_path: Path, adversary: OneBatchMemberTamperer, error: str
) -> ProtocolResult:
    """A run with one proof per 64 elements in which ``adversary`` attacks one user's answer:
    that user alone is rejected with ``error`` and submits no tag; everyone else is fine."""
    result = _run(pop, tmp_path, adversary, config=ProtocolConfig(modulus_bits=22, proof_batch_size=64))
    assert adversary.victim is not None
    assert result.release.diagnostics["user_status"] == {"ok": pop.n - 1, f"rejected:{error}": 1}
    assert _statuses(result, "user")[f"rejected:{error}"] == 1
    assert result.release.diagnostics["n_real_submissions"] == pop.n - 1
    return result


def test_an_evaluation_outside_the_batch_proof_aborts_only_its_user(pop, honest, tmp_path) -> None:  # type: ignore[no-untyped-def]
    adversary = KeylessEvaluation()
    result = _one_batch_member_rejected(pop, tmp_path, adversary, "VerificationError")
    # the rest of its batch kept their tags: each released count loses the victim only
    assert result.release.ids == honest.ids
    lost = _tag_of(pop, adversary.victim)
    for tag, count, before in zip(result.release.ids, result.release.counts, honest.counts, strict=True):
        assert count == before - (tag == lost)


class OversizeBatch(OneBatchMemberTamperer):
    """Answers one user with a batch of 2^16 + 1 elements around its own blinded element: more
    than one proof can cover (RFC 9497 indexes composites with I2OSP(i, 2))."""

    def tamper(self, msg: BatchEvaluation) -> bytes | None:
        n = (1 << 16) + 1
        mine, theirs = msg.blinded_elements[msg.position], msg.evaluated_elements[msg.position]
        return (  # built by hand: the message class refuses such a batch
            bytes((msg.TYPE,)) + (0).to_bytes(4, "big") + n.to_bytes(4, "big")
            + mine * n + theirs * n + msg.proof
        )


def test_an_oversize_batch_is_a_decode_error_for_its_user_only(pop, honest, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _one_batch_member_rejected(pop, tmp_path, OversizeBatch(), "DecodeError")


def _tag_of(pop: Population, user: int) -> str:
    """A user's tag, recomputed from its bucket with S_tag's seeded key."""
    from fre_protocol.roles.round import tagging_key
    from mechanism.grid import encode_bucket

    suite = build_components().suite
    sk, _ = tagging_key(SEEDS, suite)
    index = PublicGrid.derive(SEEDS, pop.dim, INF).bucket_indices(pop.embeddings[user : user + 1])[0]
    return tag_of(suite.evaluate(sk, encode_bucket(index))).hex()


# -- dropouts -------------------------------------------------------------------------------------
def _bucket_members(pop: Population) -> list[list[int]]:
    grid = PublicGrid.derive(SEEDS, pop.dim, INF)
    groups: dict[tuple[int, ...], list[int]] = {}
    for u, row in enumerate(grid.bucket_indices(pop.embeddings).tolist()):
        groups.setdefault(tuple(row), []).append(u)
    return sorted(groups.values(), key=len, reverse=True)


def test_dropouts_below_the_floor_withhold_the_centroid(pop, honest, tmp_path) -> None:  # type: ignore[no-untyped-def]
    big, second = _bucket_members(pop)[:2]
    gone = set(big[:40]) | set(second[:5])  # bucket 1 falls below ⌈τ⌉ = 100, bucket 2 does not

    def dropout(n: int) -> np.ndarray:
        return np.isin(np.arange(n), sorted(gone))

    result = _run(pop, tmp_path, dropout=dropout, config=WITHHOLDING)
    release = result.release
    info, diag = release.info, release.diagnostics
    assert diag["n_dropped_out"] == 45
    assert len(info["withheld"]) == 1 and len(release) == 1
    (withheld_tag, why), = info["withheld"].items()
    assert why == BELOW_FLOOR
    term = release.ledger.term("dropouts")
    assert term.detail == {
        "policy": "withhold",
        "tags": {withheld_tag: {"outcome": "withheld", "why": why, "epsilon": 0.0, "delta": 0.0}},
    }
    assert release.ledger.epsilon == honest.ledger.epsilon  # zero-cost record, totals unchanged
    assert withheld_tag in diag["refused_by_S_tag"]
    # the other bucket: phase-1 count kept, divided by its remaining contributors
    (tag,) = release.ids
    assert release.counts[0] == honest.counts[honest.ids.index(tag)]
    assert diag["contributors"][tag] == len(second) - 5
    kept = [u for u in second if u not in gone]
    mean = pop.embeddings[kept].astype(np.float64).mean(axis=0)
    encoder = DDGEncoder(DDGConfig.from_dict(info["ddg"]))
    assert np.linalg.norm(release.centroids[0] - mean) <= encoder.quantization_bound(len(kept)) / len(kept) + 1e-9


@pytest.fixture(scope="module")
def lone() -> Population:
    """One bucket of 140 users: at ε = 8 (τ = 50) it is released with about 70 sampled users."""
    return synthetic_population(1, 140, 20, 16, 0.5, RandomSource.seeded(5, "topup"), spread=0.01)


def _all_but_one(pop: Population, keep: int = 1) -> Any:
    (members,) = _bucket_members(pop)[:1]

    def dropout(n: int) -> np.ndarray:
        return np.isin(np.arange(n), members[keep:])

    return dropout


def _aggregate_entries(result: ProtocolResult) -> tuple[Counter[str], Counter[str]]:
    with TranscriptStore.open(result.transcript_path) as store:  # type: ignore[arg-type]
        syn = Counter(e.status for e in store.entries(view="S_syn", message_type="aggregate_share"))
        tag = Counter(e.status for e in store.entries(view="S_tag", message_type="accepted_contributions"))
    return syn, tag


def test_s_tag_sends_no_aggregate_of_fewer_users_than_the_floor(lone: Population, tmp_path: Path) -> None:
    """Regression (privacy review): ε = 8, all but one member of the released bucket drop out
    between the phases. S_tag, which holds the other share of that one user, must not send its
    aggregate: S_syn would reconstruct a one-user sum protected by one user's noise while the
    ledger charges the DDG at ⌈τ⌉ users. The refusal is typed and recorded in S_tag's view."""
    result = _run(lone, tmp_path, params=FreParams.paper(8.0), noise=True, dropout=_all_but_one(lone), config=WITHHOLDING)
    release = result.release
    assert len(release) == 0 and len(release.info["withheld"]) == 1
    (tag,) = release.info["withheld"]
    syn_view, tag_view = _aggregate_entries(result)
    assert syn_view == {}  # nothing of the lone user's sum reached S_syn
    assert tag_view == {"rejected:ProtocolStateError": 1}
    assert "fewer than the release floor" in release.diagnostics["refused_by_S_tag"][tag]
    assert release.ledger.term("dropouts").detail["tags"][tag]["outcome"] == "withheld"


def test_s_tag_answers_one_aggregation_request_per_tag(pop, honest, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A curious S_syn asks twice for one tag, the second time for all but one contribution (a
    differencing attack on one user). S_tag answers the first request only; the second is refused
    (typed, recorded) and the release equals the honest one."""
    from fre_protocol.messages import AcceptedContributions
    from fre_protocol.roles.synthesis_server import SynthesisServer

    original = SynthesisServer.accepted_contributions

    def twice(self):  # type: ignore[no-untyped-def]
        out = original(self)
        first = decode(out[0])
        assert isinstance(first, AcceptedContributions)
        return out + [AcceptedContributions(tag=first.tag, contribution_ids=first.contribution_ids[1:]).encode()]

    monkeypatch.setattr(SynthesisServer, "accepted_contributions", twice)
    result = _run(pop, tmp_path)
    _same(result.release, honest)
    syn_view, tag_view = _aggregate_entries(result)
    assert syn_view == {"accepted": len(honest)}
    assert tag_view == {"accepted": len(honest), "rejected:ProtocolStateError": 1}
    (why,) = result.release.diagnostics["refused_by_S_tag"].values()
    assert "second aggregation request" in why


@pytest.mark.parametrize("calibration", ["floor", "count"])
def test_dropouts_with_topup_keep_the_ddg_guarantee(lone: Population, tmp_path: Path, calibration: str) -> None:
    """ε = 4 with noise: a tag left with fewer than ⌈τ⌉ = 30 contributors is released because
    S_tag adds the missing users' noise (up to ⌈τ⌉, or to the tag's m_h under count-sized noise);
    the ledger and info say so."""
    params = FreParams.paper(4.0)
    config = ProtocolConfig(dropout_policy="topup", noise_calibration=calibration)
    result = _run(lone, tmp_path, params=params, noise=True, dropout=_all_but_one(lone, keep=40), config=config)
    info, diag = result.release.info, result.release.diagnostics
    assert len(result.release) == 1 and info["withheld"] == {}
    (tag,) = result.release.ids
    assert diag["contributors"][tag] < 30
    assert info["topped_up"] == [tag]
    assert diag["below_floor_contributors"] == {tag: diag["contributors"][tag]}
    topped = {"outcome": "topped_up", "epsilon": 0.0, "delta": 0.0, "why": "covered by the DDG term at the release floor"}
    if calibration == "count":
        m = max(30, int(result.release.counts[0]))  # f = 0: sized for every released submitter
        topped.update(why=f"covered by the DDG term at m_h = {m} (the tag's count-sized noise)", m=m)
    assert result.release.ledger.term("dropouts").detail == {"policy": "topup", "tags": {tag: topped}}
    assert np.all(np.isfinite(result.release.centroids))
    # With the topup policy but no noise to top up (noise off), S_tag refuses instead.
    quiet = _run(lone, tmp_path / "quiet", params=params, noise=False, dropout=_all_but_one(lone, keep=40),
                 config=ProtocolConfig(dropout_policy="topup"))
    assert len(quiet.release) == 0 and list(quiet.release.info["withheld"].values()) == [BELOW_FLOOR]


def test_random_dropout_fraction(pop, tmp_path) -> None:  # type: ignore[no-untyped-def]
    result = _run(pop, tmp_path, dropout=0.3)
    info, diag = result.release.info, result.release.diagnostics
    assert 0 < diag["n_dropped_out"] < 260
    assert diag["n_participants"] + diag["n_dropped_out"] == 260  # the two released buckets' users
    for tag in diag["contributors"]:
        assert diag["contributors"][tag] >= 100
    for why in info["withheld"].values():
        assert why == BELOW_FLOOR
    assert len(diag["contributors"]) + len(info["withheld"]) == 2
    with pytest.raises(ValueError, match="dropout"):
        _run(pop, tmp_path / "x", dropout=1.5)


def test_out_of_range_aggregate_share_is_rejected(pop, honest, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """S_tag → S_syn: an aggregate share with a word outside Z_{2^b} is rejected (DecodeError);
    that tag gets no centroid, the other tag's centroid is untouched."""
    from fre_protocol.messages import AggregateShare
    from fre_protocol.roles.tagging_server import TaggingServer

    original = TaggingServer.aggregate

    def tampered(self, accepted, **kw):  # type: ignore[no-untyped-def]
        out = original(self, accepted, **kw)
        msg = decode(out[0])
        assert isinstance(msg, AggregateShare)
        values = (1 << 40).to_bytes(8, "big") + msg.values[8:]
        out[0] = AggregateShare(tag=msg.tag, contribution_ids=msg.contribution_ids, values=values).encode()
        return out

    monkeypatch.setattr(TaggingServer, "aggregate", tampered)
    result = _run(pop, tmp_path)
    release = result.release
    assert len(release) == len(honest) - 1
    (why,) = release.info["withheld"].values()
    assert why == "no aggregate share from S_tag"
    (tag,) = release.ids
    # the same sum, decoded in a batch of one row instead of two (float rounding only)
    np.testing.assert_allclose(release.centroids[0], honest.centroids[honest.ids.index(tag)], rtol=1e-12, atol=1e-12)
    with TranscriptStore.open(result.transcript_path) as store:  # type: ignore[arg-type]
        statuses = Counter(e.status for e in store.entries(view="S_syn", message_type="aggregate_share"))
    assert statuses == {"accepted": 1, "rejected:DecodeError": 1}
