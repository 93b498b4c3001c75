"""Messages: validation, the one canonical encoding, and decode's rejection of anything else."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fre_protocol.messages import (
    CONTRIBUTION_ID_BYTES,
    ELEMENT_BYTES,
    MAX_PROOF_BATCH,
    MESSAGE_CLASSES,
    PROOF_BYTES,
    TAG_BYTES,
    AcceptedContributions,
    AggregateShare,
    BatchEvaluation,
    BlindRequest,
    CompactBroadcast,
    CoverShare,
    Evaluation,
    Message,
    MessageType,
    Rejection,
    ReleasedTags,
    ReleasedTokens,
    Role,
    SealedEnvelope,
    ShareSubmission,
    TagSubmission,
    decode,
    message_type_name,
    token_hash,
)
from primitives.errors import DecodeError, InvalidInputError


def fixed(n: int) -> st.SearchStrategy[bytes]:
    return st.binary(min_size=n, max_size=n)


def sorted_unique(n: int, max_size: int = 6) -> st.SearchStrategy[tuple[bytes, ...]]:
    return st.sets(fixed(n), max_size=max_size).map(lambda s: tuple(sorted(s)))


@st.composite
def batch_evaluations(draw: st.DrawFn) -> BatchEvaluation:
    n = draw(st.integers(1, 5))
    return BatchEvaluation(
        position=draw(st.integers(0, n - 1)),
        blinded_elements=tuple(draw(fixed(ELEMENT_BYTES)) for _ in range(n)),
        evaluated_elements=tuple(draw(fixed(ELEMENT_BYTES)) for _ in range(n)),
        proof=draw(fixed(PROOF_BYTES)),
    )


@st.composite
def released(draw: st.DrawFn) -> ReleasedTags:
    tags = draw(sorted_unique(TAG_BYTES))
    counts = tuple(draw(st.integers(1, 2**32 - 1)) for _ in tags)
    return ReleasedTags(tags=tags, counts=counts)


BY_CLASS: dict[type[Message], st.SearchStrategy[Message]] = {
    BlindRequest: st.builds(BlindRequest, blinded_element=fixed(ELEMENT_BYTES)),
    Evaluation: st.builds(Evaluation, evaluated_element=fixed(ELEMENT_BYTES), proof=fixed(PROOF_BYTES)),
    BatchEvaluation: batch_evaluations(),
    TagSubmission: st.builds(TagSubmission, tag=fixed(TAG_BYTES), token_hash=fixed(32)),
    ReleasedTags: released(),
    ShareSubmission: st.builds(
        ShareSubmission,
        tag=fixed(TAG_BYTES),
        contribution_id=fixed(CONTRIBUTION_ID_BYTES),
        token=fixed(32),
        share=st.binary(min_size=1, max_size=300),
    ),
    AcceptedContributions: st.builds(
        AcceptedContributions, tag=fixed(TAG_BYTES), contribution_ids=sorted_unique(16)
    ),
    AggregateShare: st.builds(
        AggregateShare,
        tag=fixed(TAG_BYTES),
        contribution_ids=sorted_unique(16),
        values=st.integers(1, 20).flatmap(lambda n: fixed(8 * n)),
    ),
    SealedEnvelope: st.builds(
        SealedEnvelope,
        recipient=st.sampled_from([Role.S_TAG, Role.S_SYN]),
        ciphertext=st.binary(min_size=1, max_size=200),
    ),
    Rejection: st.builds(Rejection, reason=st.sampled_from(["DecodeError", "VerificationError", "X1"])),
    CoverShare: st.builds(lambda n, t: CoverShare.matching(n, token=t), st.integers(1, 300), fixed(32)),
    ReleasedTokens: st.builds(ReleasedTokens, tag=fixed(TAG_BYTES), token_hashes=sorted_unique(32)),
    CompactBroadcast: st.builds(
        CompactBroadcast,
        encoding=st.sampled_from(["ribbon", "fuse", "full-list", "x" * 64]),
        max_count=st.integers(0, 2**32 - 1),
        body=st.binary(max_size=300),
    ),
}
MESSAGES: st.SearchStrategy[Message] = st.one_of(*BY_CLASS.values())


@given(MESSAGES)
def test_round_trip(message: Message) -> None:
    data = message.encode()
    assert data[0] == message.TYPE
    assert decode(data) == message
    assert decode(data, type(message)) == message
    assert message.size == len(data)
    assert message_type_name(data) == message.TYPE.name.lower()


@given(MESSAGES, st.data())
def test_truncation_and_trailing_bytes_rejected(message: Message, data: st.DataObject) -> None:
    encoded = message.encode()
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(DecodeError):
        decode(encoded[:cut])
    with pytest.raises(DecodeError):
        decode(encoded + data.draw(st.binary(min_size=1, max_size=4)))


@given(MESSAGES, st.data())
def test_decoding_is_injective(message: Message, data: st.DataObject) -> None:
    """Two different byte strings never decode to the same message (one encoding per message):
    every string that decodes re-encodes to itself. The strings are the message's encoding with
    one byte changed, so most of them decode (random bytes almost never did)."""
    encoded = bytearray(message.encode())
    at = data.draw(st.integers(1, len(encoded) - 1)) if len(encoded) > 1 else 0
    encoded[at] = data.draw(st.integers(0, 255).filter(lambda b: b != encoded[at]))
    other = bytes(encoded)
    try:
        decoded = decode(other)
    except DecodeError:
        return
    assert decoded.encode() == other
    assert decoded != message


def test_one_byte_changes_mostly_decode() -> None:
    """The injectivity test above reaches its assertions: of every one-byte change of a message,
    most decode (to another message)."""
    enc = Rejection(reason="VerificationError").encode()
    tries = decoded = 0
    for at in range(1, len(enc)):
        for value in range(256):
            if value == enc[at]:
                continue
            tries += 1
            try:
                decode(enc[:at] + bytes([value]) + enc[at + 1:])
                decoded += 1
            except DecodeError:
                pass
    assert decoded >= tries // 10


def test_unknown_type_and_expected_type() -> None:
    with pytest.raises(DecodeError, match="unknown message type"):
        decode(b"\x7f" + b"\x00" * 10)
    with pytest.raises(DecodeError, match="empty"):
        decode(b"")
    tag = TagSubmission(tag=b"t" * TAG_BYTES, token_hash=b"h" * 32).encode()
    with pytest.raises(DecodeError, match="must be ShareSubmission"):
        decode(tag, ShareSubmission)
    assert set(MESSAGE_CLASSES) == set(MessageType)
    assert message_type_name(b"\x7f") == "unknown"


def test_non_canonical_orderings_rejected() -> None:
    """Lists that a receiver treats as sets must come sorted and without repeats."""
    a, b = b"a" * TAG_BYTES, b"b" * TAG_BYTES
    good = ReleasedTags(tags=(a, b), counts=(5, 6)).encode()
    swapped = good[:5] + good[5 + 68 : 5 + 136] + good[5 : 5 + 68]
    with pytest.raises(DecodeError, match="strictly increasing"):
        decode(swapped)
    with pytest.raises(InvalidInputError, match="strictly increasing"):
        AcceptedContributions(tag=a, contribution_ids=(b"x" * 16, b"x" * 16))
    zero_count = ReleasedTags(tags=(a,), counts=(1,)).encode()[:-4] + b"\x00" * 4
    with pytest.raises(DecodeError, match="counts\\[0\\] must be >= 1"):
        decode(zero_count)


@pytest.mark.parametrize(
    ("factory", "match"),
    [
        (lambda: BlindRequest(blinded_element=b"x" * 31), "32 bytes"),
        (lambda: Evaluation(evaluated_element=b"x" * 32, proof=b"p" * 63), "proof must be 64"),
        (lambda: TagSubmission(tag=b"t" * 63, token_hash=b"h" * 32), "tag must be 32 bytes, got 63"),
        (lambda: TagSubmission(tag="t" * TAG_BYTES, token_hash=b"h" * 32), "must be bytes"),
        (
            lambda: TagSubmission(tag=b"t" * TAG_BYTES, token_hash=b"h" * 31),
            "token_hash must be 32 bytes, got 31",
        ),
        (
            lambda: ShareSubmission(tag=b"t" * TAG_BYTES, contribution_id=b"c" * 16, token=b"k" * 32, share=b""),
            "non-empty",
        ),
        (
            lambda: ShareSubmission(tag=b"t" * TAG_BYTES, contribution_id=b"c" * 16, token=b"k" * 16, share=b"s"),
            "token must be 32 bytes, got 16",
        ),
        (
            lambda: ReleasedTokens(tag=b"t" * TAG_BYTES, token_hashes=(b"b" * 32, b"a" * 32)),
            "strictly increasing",
        ),
        (
            lambda: AggregateShare(tag=b"t" * TAG_BYTES, contribution_ids=(), values=b"v" * 7),
            "multiple of 8",
        ),
        (lambda: SealedEnvelope(recipient=Role.PROXY, ciphertext=b"c"), "S_tag or S_syn"),
        (lambda: Rejection(reason="no spaces"), "error type name"),
        (
            lambda: BatchEvaluation(
                position=2, blinded_elements=(b"a" * 32,) * 2, evaluated_elements=(b"b" * 32,) * 2, proof=b"p" * 64
            ),
            "position must be < batch size 2",
        ),
        (
            lambda: BatchEvaluation(
                position=0, blinded_elements=(b"a" * 32,) * 2, evaluated_elements=(b"b" * 32,), proof=b"p" * 64
            ),
            "match blinded_elements",
        ),
        (lambda: ReleasedTags(tags=(b"a" * TAG_BYTES,), counts=(1, 2)), "one count per tag"),
        (lambda: CompactBroadcast(encoding="", max_count=0, body=b""), "encoding must be 1 to 64"),
        (lambda: CompactBroadcast(encoding="ribbon", max_count=2**32, body=b""), "max_count"),
    ],
)
def test_validation_names_the_field(factory, match) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidInputError, match=match):
        factory()


def test_known_answer_encodings() -> None:
    """Byte layouts fixed by the spec of this module (type byte, raw fixed fields, u32 BE)."""
    assert BlindRequest(blinded_element=bytes(range(32))).encode() == b"\x01" + bytes(range(32))
    sub = TagSubmission(tag=b"\xaa" * 32, token_hash=b"\x02" * 32).encode()
    assert sub == b"\x04" + b"\xaa" * 32 + b"\x02" * 32 and len(sub) == 65
    share = ShareSubmission(tag=b"\xaa" * 32, contribution_id=b"\x01" * 16, token=b"\x03" * 32, share=b"xy").encode()
    assert share == b"\x06" + b"\xaa" * 32 + b"\x01" * 16 + b"\x03" * 32 + b"\x00\x00\x00\x02xy"
    tokens = ReleasedTokens(tag=b"\xaa" * 32, token_hashes=(b"\x04" * 32,)).encode()
    assert tokens == b"\x0c" + b"\xaa" * 32 + b"\x00\x00\x00\x01" + b"\x04" * 32
    assert token_hash(b"\x00" * 32) == hashlib.sha256(b"fre-e2t/contribution-token/v1\x00" + b"\x00" * 32).digest()
    env = SealedEnvelope(recipient=Role.S_SYN, ciphertext=b"abc").encode()
    assert env == b"\x09\x03\x00\x00\x00\x03abc"
    rel = ReleasedTags(tags=(b"\x00" * 32,), counts=(258,)).encode()
    assert rel == b"\x05\x00\x00\x00\x01" + b"\x00" * 32 + b"\x00\x00\x01\x02"
    assert Rejection(reason="DecodeError").encode() == b"\x0a\x0bDecodeError"
    compact = CompactBroadcast(encoding="ribbon", max_count=258, body=b"RCB1").encode()
    assert compact == b"\x0d\x06ribbon\x00\x00\x01\x02\x00\x00\x00\x04RCB1"


@given(BY_CLASS[SealedEnvelope])
def test_an_envelopes_ciphertext_read_from_its_framing_is_the_decoded_ones(envelope: SealedEnvelope) -> None:
    assert SealedEnvelope.ciphertext_of(envelope.encode()) == envelope.ciphertext


@pytest.mark.parametrize(
    "data",
    [b"", b"\x09\x03\x00\x00", b"\x01" + bytes(32), b"\x09\x03\x00\x00\x00\x04abc", b"\x09\x03\x00\x00\x00\x02abc"],
)
def test_a_ciphertext_is_not_read_from_what_is_not_one_whole_envelope(data: bytes) -> None:
    with pytest.raises(DecodeError):
        SealedEnvelope.ciphertext_of(data)


def test_envelope_with_unknown_role_rejected() -> None:
    with pytest.raises(DecodeError, match="role code"):
        decode(b"\x09\x63\x00\x00\x00\x01x")
    with pytest.raises(DecodeError, match="S_tag or S_syn"):
        decode(b"\x09\x01\x00\x00\x00\x01x")
    assert Role.from_label("S_syn") is Role.S_SYN
    with pytest.raises(InvalidInputError):
        Role.from_label("eve")


def test_batch_evaluation_holds_at_most_65535_elements() -> None:
    """One DLEQ proof covers at most 2^16 - 1 elements (RFC 9497 indexes them with I2OSP(i, 2)):
    a longer BatchEvaluation is refused when built and when decoded, before any verification."""
    element, proof = b"e" * ELEMENT_BYTES, b"p" * PROOF_BYTES
    full = BatchEvaluation(
        position=65534, blinded_elements=(element,) * 65535, evaluated_elements=(element,) * 65535, proof=proof
    )
    assert decode(full.encode()) == full
    with pytest.raises(InvalidInputError, match="blinded_elements must be a tuple of 1..65535 elements, got 65536"):
        BatchEvaluation(
            position=0, blinded_elements=(element,) * 65536, evaluated_elements=(element,) * 65536, proof=proof
        )
    for n in (65536, 65537):
        over = b"\x03" + (0).to_bytes(4, "big") + n.to_bytes(4, "big") + element * (2 * n) + proof
        with pytest.raises(DecodeError, match=f"batch count must be at most 65535, got {n}"):
            decode(over)


# -- fuzzing: decode's contract on any bytes -------------------------------------------------------
# Whatever arrives, decode returns a message whose one encoding is exactly those bytes, or raises
# DecodeError: never another exception, which would abort a whole run instead of one message.

#: Length and count fields set to the values at and around the bounds the decoders enforce.
EDGE_U32 = st.sampled_from(
    [0, 1, MAX_PROOF_BATCH, MAX_PROOF_BATCH + 1, 1 << 16, 1 << 20, (1 << 20) + 1, 1 << 30, 2**32 - 1]
)


@st.composite
def mutated(draw: st.DrawFn, strategy: st.SearchStrategy[Message]) -> bytes:
    """A valid encoding with a few bytes flipped, set, inserted or deleted, a u32 field set to an
    edge value, or the end truncated or extended."""
    data = bytearray(draw(strategy).encode())
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["flip", "set", "u32", "insert", "delete", "truncate", "extend"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and data:
            data[at] = draw(st.integers(0, 255))
        elif op == "u32" and len(data) >= 5:
            at = min(max(at, 1), len(data) - 4)
            data[at : at + 4] = draw(EDGE_U32).to_bytes(4, "big")
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 8))]
        elif op == "truncate":
            del data[at:]
        elif op == "extend":
            data += draw(st.binary(min_size=1, max_size=40))
    return bytes(data)


def _decode_contract(data: bytes) -> None:
    for wire in (data, bytearray(data), memoryview(data)):
        for expected in (None, *MESSAGE_CLASSES.values()):
            try:
                message = decode(wire, expected)
            except DecodeError:
                continue
            assert message.encode() == data
            assert expected is None or type(message) is expected
    assert message_type_name(data) in {t.name.lower() for t in MessageType} | {"unknown"}


TYPE_THEN_BYTES = st.tuples(st.sampled_from(list(MessageType)), st.binary(max_size=200)).map(
    lambda t: bytes((t[0],)) + t[1]
)


@settings(max_examples=400)
@given(st.one_of(st.binary(max_size=200), TYPE_THEN_BYTES))
def test_fuzz_random_bytes_decode_or_raise_decode_error(data: bytes) -> None:
    _decode_contract(data)


@pytest.mark.parametrize("cls", list(BY_CLASS), ids=lambda c: c.__name__)
@settings(max_examples=60)
@given(data=st.data())
def test_fuzz_mutated_encodings_decode_or_raise_decode_error(cls: type[Message], data: st.DataObject) -> None:
    _decode_contract(data.draw(mutated(BY_CLASS[cls])))


def test_every_message_type_is_fuzzed() -> None:
    assert set(BY_CLASS) == set(MESSAGE_CLASSES.values())


@given(
    share=st.binary(min_size=1, max_size=300), tag=fixed(TAG_BYTES), cid=fixed(CONTRIBUTION_ID_BYTES),
    token=fixed(32), cover_token=fixed(32),
)
def test_cover_share_is_exactly_as_long_as_a_share_submission(
    share: bytes, tag: bytes, cid: bytes, token: bytes, cover_token: bytes
) -> None:
    real = ShareSubmission(tag=tag, contribution_id=cid, token=token, share=share).encode()
    cover = CoverShare.matching(len(share), token=cover_token)
    assert len(cover.encode()) == len(real) and decode(cover.encode()) == cover
    with pytest.raises(InvalidInputError, match="padding"):
        CoverShare(token=cover_token, padding=bytes(TAG_BYTES + CONTRIBUTION_ID_BYTES))
    with pytest.raises(InvalidInputError, match="token must be 32 bytes"):
        CoverShare(token=b"", padding=bytes(TAG_BYTES + CONTRIBUTION_ID_BYTES + 1))
