"""``OprfSuite.verify_and_finalize``: RFC 9497 VerifyProof + Finalize with prepared blind inverses.

Known answers: the A.1 VOPRF and POPRF vectors (every output, one batch proof and one proof per
element). Negative cases beside them: a tampered or swapped proof, a malformed element or proof
costs its own item (one proof each) or the whole batch (one proof), each with its typed error.
"""

from __future__ import annotations

from typing import Any

import known_answers
import pytest

from primitives.errors import (
    DecodeError,
    InvalidInputError,
    InvalidParameterError,
    VerificationError,
)
from primitives.voprf import Mode, OprfSuite, get_suite

DATA = known_answers.load("rfc9497/ristretto255-sha512.json")
GROUPS = ["ristretto255-sodium", "ristretto255-pure"]
IDENTITY = bytes(32)
GENERATOR = bytes.fromhex("e2f2ae0a6abc4e71a884a961c500515f58e30b6aa582dd8db6a65945e08d2d76")


def _inverse(suite: OprfSuite, blind: bytes) -> bytes:
    g = suite.group
    return g.serialize_scalar(g.scalar_inverse(g.deserialize_scalar(blind)))


def _h(values: list[str]) -> list[bytes]:
    return [bytes.fromhex(v) for v in values]


def _vectors(mode: Mode) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    entry = DATA["modes"][int(mode)]
    assert entry["mode"] == mode
    return entry, entry["vectors"]


@pytest.fixture(
    params=[(g, m) for g in GROUPS for m in (Mode.VOPRF, Mode.POPRF)],
    ids=lambda p: f"{p[0]}-{p[1].name}",
)
def suite(request: pytest.FixtureRequest) -> OprfSuite:
    group, mode = request.param
    return get_suite(mode=mode, group=group)


def test_each_vector_with_its_batch_proof(suite: OprfSuite) -> None:
    entry, vectors = _vectors(suite.mode)
    pk = bytes.fromhex(entry["pkSm"])
    for vector in vectors:
        inverses = [_inverse(suite, b) for b in _h(vector["blind"])]
        out = suite.verify_and_finalize(
            _h(vector["input"]),
            inverses,
            _h(vector["blinded_element"]),
            _h(vector["evaluation_element"]),
            bytes.fromhex(vector["proof"]),
            pk=pk,
            info=bytes.fromhex(vector.get("info", "")),
        )
        assert [o.hex() if isinstance(o, bytes) else o for o in out] == vector["output"], vector[
            "index"
        ]


def test_single_element_vectors_with_one_proof_each(suite: OprfSuite) -> None:
    """The batch-of-one vectors of a mode share a key and info: as a list of per-element proofs
    they finalize together to their recorded outputs; one tampered proof fails only its item."""
    entry, vectors = _vectors(suite.mode)
    singles = [v for v in vectors if v["batch_size"] == 1]
    assert len(singles) == 2
    info = {bytes.fromhex(v.get("info", "")) for v in singles}
    assert len(info) == 1
    args = (
        [bytes.fromhex(v["input"][0]) for v in singles],
        [_inverse(suite, bytes.fromhex(v["blind"][0])) for v in singles],
        [bytes.fromhex(v["blinded_element"][0]) for v in singles],
        [bytes.fromhex(v["evaluation_element"][0]) for v in singles],
    )
    proofs = [bytes.fromhex(v["proof"]) for v in singles]
    kw = {"pk": bytes.fromhex(entry["pkSm"]), "info": info.pop()}
    expected = [bytes.fromhex(v["output"][0]) for v in singles]
    assert suite.verify_and_finalize(*args, proofs, **kw) == expected
    tampered = [proofs[0][:-1] + bytes([proofs[0][-1] ^ 1]), proofs[1]]
    first, second = suite.verify_and_finalize(*args, tampered, **kw)
    assert isinstance(first, VerificationError) and second == expected[1]
    # Each proof belongs to its own element: swapped, neither verifies.
    assert all(
        isinstance(o, VerificationError)
        for o in suite.verify_and_finalize(*args, proofs[::-1], **kw)
    )


def _batch(suite: OprfSuite) -> tuple[list[Any], dict[str, Any], list[bytes]]:
    entry, vectors = _vectors(suite.mode)
    vector = vectors[2]
    assert vector["batch_size"] == 2
    args = [
        _h(vector["input"]),
        [_inverse(suite, b) for b in _h(vector["blind"])],
        _h(vector["blinded_element"]),
        _h(vector["evaluation_element"]),
        bytes.fromhex(vector["proof"]),
    ]
    kw = {"pk": bytes.fromhex(entry["pkSm"]), "info": bytes.fromhex(vector.get("info", ""))}
    return args, kw, _h(vector["output"])


def test_a_position_without_input_is_verified_but_not_finalized(suite: OprfSuite) -> None:
    args, kw, outputs = _batch(suite)
    args[0] = [None, args[0][1]]
    args[1] = [None, args[1][1]]
    assert suite.verify_and_finalize(*args, **kw) == [None, outputs[1]]


@pytest.mark.parametrize(
    ("tamper", "error"),
    [
        ("proof_bit", VerificationError),
        ("evaluated_swapped", VerificationError),
        ("wrong_pk", VerificationError),
        ("evaluated_identity", DecodeError),
        ("blinded_short", DecodeError),
        ("proof_short", DecodeError),
        ("proof_scalar_over_order", DecodeError),
    ],
)
def test_one_batch_proof_fails_every_item(
    suite: OprfSuite, tamper: str, error: type[Exception]
) -> None:
    args, kw, _ = _batch(suite)
    if tamper == "proof_bit":
        args[4] = args[4][:-1] + bytes([args[4][-1] ^ 1])
    elif tamper == "evaluated_swapped":
        args[3] = args[3][::-1]
    elif tamper == "wrong_pk":
        kw["pk"] = GENERATOR
    elif tamper == "evaluated_identity":
        args[3] = [args[3][0], IDENTITY]
    elif tamper == "blinded_short":
        args[2] = [args[2][0][:31], args[2][1]]
    elif tamper == "proof_short":
        args[4] = args[4][:63]
    else:
        args[4] = args[4][:32] + b"\xff" * 32
    out = suite.verify_and_finalize(*args, **kw)
    assert len(out) == 2 and all(type(o) is error for o in out), out


def test_per_element_proofs_fail_on_their_own(suite: OprfSuite) -> None:
    """Item 0 has a malformed evaluated element, item 1 a proof scalar >= the order, item 2 a
    malformed blinded element; item 3 is intact and still finalizes."""
    args, kw, outputs = _batch(suite)
    proof = args[4]
    inputs, inverses, blinded, evaluated = (list(a) * 2 for a in args[:4])
    blinded[2] = blinded[2][:31]
    evaluated[0] = IDENTITY
    # The batch's proof covers both elements, not one: give the intact item a proof of its own.
    sk = bytes.fromhex(_vectors(suite.mode)[0]["skSm"])
    (own,), own_proof = suite.blind_evaluate(sk, [blinded[3]], info=kw["info"])
    evaluated[3] = own
    assert own_proof is not None
    proofs = [proof, proof[:32] + b"\xff" * 32, proof, own_proof]
    out = suite.verify_and_finalize(inputs, inverses, blinded, evaluated, proofs, **kw)
    assert [type(o) for o in out[:3]] == [DecodeError, DecodeError, DecodeError]
    assert "evaluated_elements[0]" in str(out[0]) and "blinded_elements[2]" in str(out[2])
    assert out[3] == outputs[1]


def test_arguments_are_checked() -> None:
    suite = get_suite(mode=Mode.VOPRF)
    args, kw, _ = _batch(suite)
    with pytest.raises(InvalidInputError, match="inputs must be a list of 2 items"):
        suite.verify_and_finalize(args[0][:1], *args[1:], **kw)
    with pytest.raises(
        InvalidInputError, match="proofs must be one proof or a list of one per element"
    ):
        suite.verify_and_finalize(*args[:4], [args[4]], **kw)
    with pytest.raises(InvalidParameterError, match="needs mode VOPRF or POPRF, got OPRF"):
        get_suite(mode=Mode.OPRF).verify_and_finalize(*args, **kw)
