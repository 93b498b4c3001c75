"""``OprfSuite.blind_evaluate_each``: one proof per element, as a server answers each user.

Entry i must be exactly ``blind_evaluate(sk, [element_i], rng=rng_i)`` (itself checked against
RFC 9497's vectors), on both group backends; each answer verifies for its user alone; bad input
is refused naming what is wrong.
"""

from __future__ import annotations

import pytest

from primitives.errors import DecodeError, InvalidInputError, InvalidParameterError
from primitives.randomness import RandomSource
from primitives.voprf import Mode, get_suite

GROUPS = ["ristretto255-sodium", "ristretto255-pure"]


@pytest.mark.parametrize("group", GROUPS)
def test_each_answer_is_blind_evaluate_of_its_element_alone(group: str) -> None:
    suite = get_suite(mode=Mode.VOPRF, group=group)
    sk, pk = suite.derive_key_pair(b"\x07" * 32)
    inputs = [f"user {i}".encode() for i in range(5)]
    blinded = [suite.blind(x, rng=RandomSource.seeded(9, f"blind/{i}"))[1] for i, x in enumerate(inputs)]
    got = suite.blind_evaluate_each(sk, blinded, [RandomSource.seeded(3, f"proof/{i}") for i in range(5)])
    for i, element in enumerate(blinded):
        (ev,), proof = suite.blind_evaluate(sk, [element], rng=RandomSource.seeded(3, f"proof/{i}"))
        assert got[i] == (ev, proof)
    assert len({proof for _, proof in got}) == 5  # each from its own nonce


def test_each_answer_verifies_for_its_user() -> None:
    suite = get_suite(mode=Mode.VOPRF)
    sk, pk = suite.derive_key_pair(b"\x01" * 32)
    blinds, blinded = zip(*(suite.blind(b"x%d" % i, rng=RandomSource.seeded(1, str(i))) for i in range(3)), strict=True)
    answers = suite.blind_evaluate_each(sk, list(blinded), [RandomSource.seeded(2, str(i)) for i in range(3)])
    g = suite.group
    for i, (ev, proof) in enumerate(answers):
        inverse = g.serialize_scalar(g.scalar_inverse(g.deserialize_scalar(blinds[i])))
        (out,) = suite.verify_and_finalize([b"x%d" % i], [inverse], [blinded[i]], [ev], proof, pk=pk)
        assert out == suite.evaluate(sk, b"x%d" % i)
    # the first user's proof does not vouch for the second user's answer
    (bad,) = suite.verify_and_finalize([b"x1"], [None], [blinded[1]], [answers[1][0]], answers[0][1], pk=pk)
    assert bad.__class__.__name__ == "VerificationError"


def test_bad_input_is_refused_by_name() -> None:
    suite = get_suite(mode=Mode.VOPRF)
    sk, _ = suite.derive_key_pair(b"\x02" * 32)
    good = suite.blind(b"a", rng=RandomSource.seeded(1))[1]
    with pytest.raises(DecodeError, match=r"blinded_elements\[1\]"):
        suite.blind_evaluate_each(sk, [good, bytes(32)], [RandomSource.seeded(1), RandomSource.seeded(2)])
    with pytest.raises(InvalidInputError, match="rngs must hold one RandomSource per element"):
        suite.blind_evaluate_each(sk, [good], [])
    with pytest.raises(InvalidParameterError, match="needs mode VOPRF"):
        get_suite(mode=Mode.OPRF).blind_evaluate_each(sk, [good], [RandomSource.seeded(1)])
