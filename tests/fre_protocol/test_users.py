"""The users' devices: offline preparation, blinding, proof verification and unblinding give every
user its PRF value; a bad proof costs only that user its tag; each member of a proof batch checks
the proof against the elements it received itself; nothing is sent unprepared or twice."""

from __future__ import annotations

import numpy as np
import pytest

from fre_protocol.components import build_components
from fre_protocol.messages import BatchEvaluation, Evaluation, Role, SealedEnvelope, decode, tag_of
from fre_protocol.roles import Meter, Recorder, ServerKeys, TaggingServer, UserPopulation, Workers
from fre_protocol.roles.state import OutOfOrderError
from primitives.errors import ProtocolStateError
from primitives.randomness import RandomSource
from primitives.secret import Secret

N = 40


@pytest.fixture(scope="module")
def comps():  # type: ignore[no-untyped-def]
    return build_components(workers=2)


def _setup(comps, coins: np.ndarray, *, batch: int = 1):  # type: ignore[no-untyped-def]
    suite, channel = comps.suite, comps.channel
    sk, pk = suite.derive_key_pair(b"k" * 32, b"test")
    tag_box = channel.generate_keypair(RandomSource.seeded(1, "tag"))
    syn_box = channel.generate_keypair(RandomSource.seeded(1, "syn"))
    meter = Meter()
    server = TaggingServer(
        suite=suite, voprf_key=(Secret(sk), pk), box_key=tag_box, channel=channel,
        rng=RandomSource.seeded(2, "S_tag"), release_floor=1, workers=Workers(2), meter=meter, recorder=Recorder(None),
        proof_batch_size=batch,
    )
    encodings = [b"bucket-%d" % (i % 7) for i in range(N)]
    users = UserPopulation(
        np.zeros((N, 4)), encodings, coins, suite=suite,
        keys=ServerKeys(voprf_public_key=pk, tag_box_key=tag_box[1], syn_box_key=syn_box[1]),
        channel=channel, rng=RandomSource.seeded(3, "users"), workers=Workers(2), meter=meter,
        recorder=Recorder(None), chunk_size=16,
    )
    return suite, sk, server, users, encodings, meter


def test_every_user_gets_its_prf_value_and_a_bad_proof_costs_only_its_user(comps) -> None:  # type: ignore[no-untyped-def]
    coins = np.arange(N) % 2 == 0
    suite, sk, server, users, encodings, meter = _setup(comps, coins)
    with pytest.raises(ProtocolStateError, match="prepare"):
        users.blind_requests()
    users.prepare()
    requests = users.blind_requests()
    assert [conn for conn, _, _ in requests] == list(range(N))
    envelopes = [decode(e, SealedEnvelope) for _, _, e in requests]
    assert all(env.recipient is Role.S_TAG for env in envelopes)
    answers = server.evaluate([env.ciphertext for env in envelopes])
    # Tamper with user 3's proof and swap the evaluations of users 5 and 6 (different buckets).
    bad = decode(answers[3])
    assert isinstance(bad, Evaluation)
    flipped = bad.proof[:-1] + bytes([bad.proof[-1] ^ 1])
    answers[3] = Evaluation(evaluated_element=bad.evaluated_element, proof=flipped).encode()
    answers[5], answers[6] = answers[6], answers[5]
    users.receive_evaluations(list(enumerate(answers)))
    for i in range(N):
        if i in (3, 5, 6):
            assert users.tags[i] is None and users.status[i].startswith("rejected:")
        else:
            assert users.tags[i] == tag_of(suite.evaluate(sk, encodings[i])), i
            assert users.status[i] == "ok"
    # Offline and online work are metered apart.
    assert meter.counts["user.offline.blind_scalar"] == N
    # the blind request, the tag submission with its coin, two phase-2 messages always (cover)
    assert meter.counts["user.offline.seal_keys"] == N + int(coins.sum()) + 2 * N
    assert meter.counts["user.finalize"] == N and meter.counts["user.blind"] == N
    # Users with a tag and a coin submit it, each with its own prepared seal, once.
    submissions = users.tag_submissions()
    assert sorted(conn for conn, _, _ in submissions) == [i for i in range(N) if coins[i] and i not in (3, 5, 6)]
    # Nothing twice: a second round of blind requests is out of order (and its seals are spent).
    with pytest.raises(OutOfOrderError, match="'submitted' cannot take 'blind_requests'"):
        users.blind_requests()
    assert all(seal is None for seal in users._seals["blind_request"])


def _keyless(answer: bytes) -> bytes:
    """The batch with this member's evaluated element replaced by its blinded one (D = C): the
    member would unblind to HashToGroup(input), a tag anyone can compute for a candidate bucket."""
    msg = decode(answer)
    assert isinstance(msg, BatchEvaluation)
    evaluated = list(msg.evaluated_elements)
    evaluated[msg.position] = msg.blinded_elements[msg.position]
    return BatchEvaluation(
        position=msg.position, blinded_elements=msg.blinded_elements,
        evaluated_elements=tuple(evaluated), proof=msg.proof,
    ).encode()


def test_each_batch_member_checks_the_proof_against_its_own_copy(comps) -> None:  # type: ignore[no-untyped-def]
    """S_tag sends two members of proof batches an evaluation outside the proof: user 0 (the
    first member delivered of its batch) and user 11 (a later member of another). Both fail
    verification; every other member of both batches still gets its PRF value."""
    suite, sk, server, users, encodings, meter = _setup(comps, np.ones(N, dtype=bool), batch=8)
    users.prepare()
    envelopes = [decode(e, SealedEnvelope) for _, _, e in users.blind_requests()]
    answers = server.evaluate([env.ciphertext for env in envelopes])
    victims = (0, 11)
    for i in victims:
        answers[i] = _keyless(answers[i])
    users.receive_evaluations(list(enumerate(answers)))
    for i in range(N):
        if i in victims:
            assert users.tags[i] is None, i
            assert users.status[i] == "rejected:VerificationError", i
        else:
            assert users.tags[i] == tag_of(suite.evaluate(sk, encodings[i])), i
            assert users.status[i] == "ok", i
    # Every member pays a verification of its batch: five batches of eight, and each victim's
    # copy differs from its batch's, so it is verified on its own.
    assert meter.counts["user.finalize"] == N
    assert meter.counts["user.finalize.batch_verifications"] == 5 + len(victims)
