"""The parties one at a time: proxy, S_tag (evaluation, dummy user), S_syn (counting, threshold)."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from fre_protocol.components import build_components
from fre_protocol.messages import (
    TAG_BYTES,
    BatchEvaluation,
    BlindRequest,
    Evaluation,
    Rejection,
    ReleasedTags,
    Role,
    SealedEnvelope,
    TagSubmission,
    decode,
)
from fre_protocol.roles import (
    AnonymizingProxy,
    DummyUser,
    Meter,
    Recorder,
    SynthesisServer,
    TaggingServer,
    Workers,
)
from fre_protocol.roles.config import ProtocolConfig
from fre_protocol.roles.dummy_user import DUMMY_CONNECTION
from primitives.errors import InvalidParameterError, ProtocolStateError
from primitives.randomness import RandomSource
from primitives.secret import Secret
from transcripts import TranscriptHeader, TranscriptStore


@pytest.fixture(scope="module")
def comps():  # type: ignore[no-untyped-def]
    return build_components(workers=2)


@pytest.fixture
def store(tmp_path: Path):  # type: ignore[no-untyped-def]
    s = TranscriptStore.create(tmp_path / "t.sqlite", TranscriptHeader(rng_mode="seeded"))
    yield s
    s.close()


def _keys(comps, label: str):  # type: ignore[no-untyped-def]
    return comps.channel.generate_keypair(rng=RandomSource.seeded(1, label))


# -- proxy -----------------------------------------------------------------------------------------
def test_proxy_strips_connections_shuffles_and_routes_back(comps, store) -> None:  # type: ignore[no-untyped-def]
    proxy = AnonymizingProxy(
        shuffler=comps.shuffler, rng=RandomSource.seeded(3, "proxy"), recorder=Recorder(store, flush_every=1), meter=Meter()
    )
    n = 200
    items = [
        (1000 + i, Role.USER, SealedEnvelope(recipient=Role.S_TAG, ciphertext=b"c%05d" % i).encode())
        for i in range(n)
    ]
    items.append((7, Role.USER, b"\x09garbage"))  # malformed envelope: dropped, recorded
    deliveries = proxy.forward("phase1", items)
    assert set(deliveries) == {Role.S_TAG}
    got = deliveries[Role.S_TAG].ciphertexts
    assert sorted(got) == [b"c%05d" % i for i in range(n)]  # the same ciphertexts, nothing else
    assert got != sorted(got)  # permuted (a fixed identity order has probability 1/200!)
    # a server answers by position; the proxy alone maps positions back to connections
    answers = [b"r" + c for c in got]
    routed = proxy.route_back("phase1", deliveries[Role.S_TAG], answers)
    assert sorted(routed) == sorted((1000 + i, b"rc%05d" % i) for i in range(n))
    with pytest.raises(ProtocolStateError, match="no pending route"):
        proxy.route_back("phase1", deliveries[Role.S_TAG], answers)
    store.flush()
    statuses = Counter(e.status for e in store.entries(view="proxy", message_type="sealed_envelope"))
    assert statuses == {"accepted": n, "rejected:DecodeError": 1}
    # no connection id ever reaches the transcript: senders/receivers are roles
    assert {e.sender for e in store.entries(view="proxy")} <= {"user", "S_tag"}


def test_proxy_requires_one_response_per_message(comps) -> None:  # type: ignore[no-untyped-def]
    proxy = AnonymizingProxy(shuffler=comps.shuffler, rng=RandomSource.seeded(1), recorder=Recorder(), meter=Meter())
    items = [(i, Role.USER, SealedEnvelope(recipient=Role.S_SYN, ciphertext=b"x%d" % i).encode()) for i in range(3)]
    delivery = proxy.forward("phase1", items)[Role.S_SYN]
    with pytest.raises(ProtocolStateError, match="answer every forwarded message"):
        proxy.route_back("phase1", delivery, [b"a"])


# -- S_tag -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("batch", [1, 3])
def test_tagging_server_evaluates_valid_and_rejects_bad_elements(comps, store, batch: int) -> None:  # type: ignore[no-untyped-def]
    suite, channel = comps.suite, comps.channel
    sk, pk = suite.derive_key_pair(b"k" * 32, b"test")
    box = _keys(comps, "tag")
    server = TaggingServer(
        suite=suite, voprf_key=(Secret(sk), pk), box_key=box, channel=channel,
        rng=RandomSource.seeded(2, "S_tag"), release_floor=1, workers=Workers(2), meter=Meter(), recorder=Recorder(store, flush_every=1),
        proof_batch_size=batch,
    )
    rng = RandomSource.seeded(5, "users")
    inputs = [b"bucket-%d" % i for i in range(7)]
    blinds = [suite.blind(x, rng=rng) for x in inputs]
    plain = [BlindRequest(blinded_element=b).encode() for _, b in blinds]
    bad = [
        BlindRequest(blinded_element=bytes(32)).encode(),  # the identity
        BlindRequest(blinded_element=b"\xff" * 32).encode(),  # not a canonical encoding
        TagSubmission(tag=b"t" * TAG_BYTES, token_hash=b"h" * 32).encode(),  # wrong message type
    ]
    ciphertexts = [channel.seal(box[1], p) for p in plain + bad] + [b"not sealed to S_tag" * 4]
    ciphertexts.append(ciphertexts[0])  # a replay of the first request
    responses = server.evaluate(ciphertexts)
    assert len(responses) == len(ciphertexts)
    for i, (x, (blind, blinded)) in enumerate(zip(inputs, blinds, strict=True)):
        msg = decode(responses[i])
        if batch == 1:
            assert isinstance(msg, Evaluation)
            evaluated, proof, blinded_all = [msg.evaluated_element], msg.proof, [blinded]
            (tag,) = suite.finalize([x], [blind], evaluated, blinded_elements=blinded_all, pk=pk, proof=proof)
        else:
            assert isinstance(msg, BatchEvaluation)
            assert msg.blinded_elements[msg.position] == blinded
            assert len(msg.blinded_elements) <= batch
            others = [b"placeholder"] * len(msg.blinded_elements)
            others[msg.position] = x
            keys = [(1).to_bytes(32, "little")] * len(others)
            keys[msg.position] = blind
            tag = suite.finalize(
                others, keys, list(msg.evaluated_elements), blinded_elements=list(msg.blinded_elements),
                pk=pk, proof=msg.proof,
            )[msg.position]
        assert tag == suite.evaluate(sk, x)
    reasons = [decode(r).reason for r in responses[len(inputs) :]]  # type: ignore[attr-defined]
    assert reasons == ["DecodeError", "DecodeError", "DecodeError", "DecodeError", "ProtocolStateError"]
    store.flush()
    statuses = Counter(e.status for e in store.entries(view="S_tag"))
    assert statuses == {"accepted": 7, "rejected:DecodeError": 4, "rejected:ProtocolStateError": 1}


def test_tagging_server_proofs_are_keyed_by_content_not_by_batching(comps) -> None:  # type: ignore[no-untyped-def]
    """Seeded: the same requests answered in one batch or in several (as a proxy's windows
    deliver them) get byte-identical proofs. Cryptographic: a proof of the same element is
    fresh every time."""
    suite, channel = comps.suite, comps.channel
    sk, pk = suite.derive_key_pair(b"k" * 32, b"test")
    box = _keys(comps, "tag")

    def server(rng: RandomSource) -> TaggingServer:
        return TaggingServer(
            suite=suite, voprf_key=(Secret(sk), pk), box_key=box, channel=channel, rng=rng, release_floor=1,
            workers=Workers(1), meter=Meter(), recorder=Recorder(None),
        )

    rng = RandomSource.seeded(5, "users")
    requests = [BlindRequest(blinded_element=suite.blind(b"bucket-%d" % i, rng=rng)[1]).encode() for i in range(5)]
    sealed = [channel.seal(box[1], r) for r in requests]
    whole = server(RandomSource.seeded(2, "S_tag")).evaluate(sealed)
    windowed = server(RandomSource.seeded(2, "S_tag"))
    split = windowed.evaluate(sealed[3:]) + windowed.evaluate(sealed[:3])
    assert split == whole[3:] + whole[:3]
    assert len({decode(r).proof for r in whole}) == len(whole)  # type: ignore[attr-defined]
    fresh = [server(RandomSource.cryptographic("S_tag")).evaluate(sealed[:1])[0] for _ in range(2)]
    assert decode(fresh[0]).proof != decode(fresh[1]).proof  # type: ignore[attr-defined]


def test_tagging_server_refuses_batches_one_proof_cannot_cover(comps) -> None:  # type: ignore[no-untyped-def]
    suite = comps.suite
    sk, pk = suite.derive_key_pair(b"k" * 32, b"test")
    for size in (0, 65536):
        with pytest.raises(InvalidParameterError, match=rf"proof_batch_size must be an integer in \[1, 65535\], got {size}"):
            TaggingServer(
                suite=suite, voprf_key=(Secret(sk), pk), box_key=_keys(comps, "tag"), channel=comps.channel,
                rng=RandomSource.seeded(2, "S_tag"), release_floor=1, workers=Workers(1), meter=Meter(), recorder=Recorder(None),
                proof_batch_size=size,
            )


# -- S_syn and the dummy user --------------------------------------------------------------------
def test_synthesis_server_counts_thresholds_and_drops_duplicates(comps, store) -> None:  # type: ignore[no-untyped-def]
    channel = comps.channel
    box = _keys(comps, "syn")
    server = SynthesisServer(box_key=box, channel=channel, workers=Workers(2), meter=Meter(), recorder=Recorder(store, flush_every=1), release_floor=3)
    tags = {b"a" * TAG_BYTES: 5, b"b" * TAG_BYTES: 3, b"c" * TAG_BYTES: 2, b"d" * TAG_BYTES: 1}
    rng = RandomSource.seeded(9)
    plains = [TagSubmission(tag=t, token_hash=rng.random_bytes(32)).encode() for t, c in tags.items() for _ in range(c)]
    sealed = channel.seal_many(box[1], plains)
    # a replayed ciphertext, and the same submission resealed (same token hash): both rejected
    sealed += [sealed[0], channel.seal(box[1], plains[-1])]
    server.receive_submissions(sealed)
    released = decode(server.release())
    assert isinstance(released, ReleasedTags)
    assert released.tags == (b"a" * TAG_BYTES, b"b" * TAG_BYTES) and released.counts == (5, 3)
    assert server.rejections == {"rejected:ProtocolStateError": 2}
    with pytest.raises(InvalidParameterError):
        SynthesisServer(box_key=box, channel=channel, workers=Workers(1), meter=Meter(), recorder=Recorder(), release_floor=0)


def test_dummy_user_pads_every_level_below_the_floor(comps) -> None:  # type: ignore[no-untyped-def]
    """Dummies: Σ_c c·Z_c submissions, each dummy tag exactly c < τ times, sealed like users'."""
    box = _keys(comps, "syn")
    gen = comps.make_dummy_generator(1.0, 1e-6)
    dummy = DummyUser(generator=gen, channel=comps.channel, syn_box_key=box[1], rng=RandomSource.seeded(4, "dummy"), workers=Workers(2), meter=Meter())
    tau = 12.5
    subs = dummy.submissions(tau)
    plan = dummy.plan
    assert sorted(plan) == list(range(1, math.ceil(tau)))
    assert len(subs) == sum(c * z for c, z in plan.items())
    assert {conn for conn, _, _ in subs} == {DUMMY_CONNECTION} and {r for _, r, _ in subs} == {Role.DUMMY_USER}
    tags = Counter()
    for _, _, env in subs:
        envelope = decode(env)
        assert isinstance(envelope, SealedEnvelope) and envelope.recipient is Role.S_SYN
        msg = decode(comps.channel.open(box[0], envelope.ciphertext))
        assert isinstance(msg, TagSubmission)
        tags[msg.tag] += 1
    assert max(tags.values()) < tau
    by_level = Counter(tags.values())
    assert {c: by_level.get(c, 0) for c in plan} == plan
    # same envelope size as a real user's tag submission: indistinguishable by length
    real = SealedEnvelope(
        recipient=Role.S_SYN,
        ciphertext=comps.channel.seal(box[1], TagSubmission(tag=b"x" * TAG_BYTES, token_hash=b"h" * 32).encode()),
    ).encode()
    assert {len(env) for _, _, env in subs} == {len(real)}
    assert dummy.summary()["dummy_submissions"] == len(subs)


def test_dummy_user_seals_from_its_own_seeded_source(comps) -> None:  # type: ignore[no-untyped-def]
    """The dummy user's envelopes are a function of its source: reproducible when seeded, fresh
    under another seed (the seals' ephemeral keys come from it, not from libsodium)."""
    box = _keys(comps, "syn")

    def envelopes(seed: int) -> list[bytes]:
        dummy = DummyUser(
            generator=comps.make_dummy_generator(1.0, 1e-6), channel=comps.channel, syn_box_key=box[1],
            rng=RandomSource.seeded(seed, "dummy"), workers=Workers(1), meter=Meter(),
        )
        return [env for _, _, env in dummy.submissions(6.5)]

    first = envelopes(4)
    assert envelopes(4) == first and len(set(first)) == len(first)
    assert not set(envelopes(5)) & set(first)


def test_rejection_reason_and_config_validation() -> None:
    assert decode(Rejection(reason="DecodeError").encode()) == Rejection(reason="DecodeError")
    for bad in (
        {"proof_batch_size": 0},
        {"proof_batch_size": 65536},
        {"dummy_epsilon0": -1.0},
        {"dummy_delta0": 0.7},
        {"clip": math.inf},
        {"modulus_bits": 70},
        {"dropout_policy": "ignore"},
        {"chunk_size": 0},
    ):
        with pytest.raises(InvalidParameterError):
            ProtocolConfig(**bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match=r"proof_batch_size must be an integer in \[1, 65535\], got 65536"):
        ProtocolConfig(proof_batch_size=65536)
    assert ProtocolConfig(proof_batch_size=65535).proof_batch_size == 65535


def test_workers_map_keeps_order_and_validates() -> None:
    pool = Workers(2)
    try:
        assert pool.map(lambda v: v * v, list(range(50))) == [v * v for v in range(50)]
    finally:
        pool.close()
    with pytest.raises(InvalidParameterError):
        Workers(0)
    assert np.array_equal(Workers(1).map(lambda v: v + 1, [1, 2]), [2, 3])


@pytest.mark.parametrize("dim", [20, 64, 768])
def test_batched_decoding_equals_decode_sum(comps, dim: int) -> None:  # type: ignore[no-untyped-def]
    """S_syn decodes all buckets in one call; each row is the encoder's decode_sum (up to the
    float rounding of a batched versus a single-row rotation)."""
    from fre_protocol.roles.synthesis_server import decode_many
    from primitives.ddg import DDGConfig, padded_dimension

    config = DDGConfig(dim=dim, padded_dim=padded_dimension(dim), gamma=1e-3, sigma_int=3.0, modulus_bits=20, clip=1.0)
    encoder = comps.make_encoder(config)
    # At d' = 1024, 40 rows span three row blocks of decode_many.
    rows = 40 if dim == 768 else 5
    totals = RandomSource.seeded(3, "totals").integers_below(1 << 20, rows * config.padded_dim).reshape(rows, -1)
    counts = [3, 1, 7, 2, 9] * (rows // 5)
    many = decode_many(encoder, totals, counts)
    one = np.stack([encoder.decode_sum(t, c) for t, c in zip(totals, counts, strict=True)])
    np.testing.assert_allclose(many, one, rtol=1e-12, atol=1e-9)
