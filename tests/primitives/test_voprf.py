"""RFC 9497 Appendix A.1 known answers for ristretto255-SHA512, every intermediate value, both backends.

The vectors live in ``fre_protocol/testing/vectors/rfc9497/ristretto255-sha512.json`` (provenance and checksum in
the README beside it); the checksum is verified before any vector is used.
"""

from __future__ import annotations

from typing import Any

import known_answers
import pytest

from primitives import registry
from primitives.voprf import Mode, OprfSuite, get_suite
from primitives.voprf.hashing import context_string

GROUPS = ["ristretto255-sodium", "ristretto255-pure"]
DATA = known_answers.load("rfc9497/ristretto255-sha512.json")
CASES = [
    pytest.param(mode, vector, id=f"{mode['name']}-{vector['index']}")
    for mode in DATA["modes"]
    for vector in mode["vectors"]
]


def _h(values: list[str]) -> list[bytes]:
    return [bytes.fromhex(v) for v in values]


def test_vector_file_covers_all_eight_ristretto_vectors() -> None:
    assert DATA["suite"] == "ristretto255-SHA512"
    assert [(m["mode"], len(m["vectors"])) for m in DATA["modes"]] == [(0, 2), (1, 3), (2, 3)]
    batches = [v["batch_size"] for m in DATA["modes"] for v in m["vectors"]]
    assert batches == [1, 1, 1, 1, 2, 1, 1, 2]


def test_context_string_uses_raw_mode_byte() -> None:
    assert context_string(0) == b"OPRFV1-\x00-ristretto255-SHA512"
    assert context_string(2) == b"OPRFV1-\x02-ristretto255-SHA512"
    # HashToGroup DST of the OPRF mode, as printed by several independent implementations.
    assert (b"HashToGroup-" + context_string(0)).hex() == (
        "48617368546f47726f75702d4f50524656312d002d72697374726574746f3235352d534841353132"
    )


@pytest.mark.parametrize("group", GROUPS)
@pytest.mark.parametrize(("mode", "vector"), CASES)
def test_rfc9497_known_answers(group: str, mode: dict[str, Any], vector: dict[str, Any]) -> None:
    suite = get_suite("ristretto255-SHA512", mode["mode"], group=group)
    assert isinstance(suite, OprfSuite) and suite.mode == Mode(mode["mode"])
    # DeriveKeyPair: skSm (and pkSm in the verifiable modes).
    sk, pk = suite.derive_key_pair(bytes.fromhex(mode["seed"]), bytes.fromhex(mode["key_info"]))
    assert sk.hex() == mode["skSm"]
    if "pkSm" in mode:
        assert pk.hex() == mode["pkSm"]
    assert suite.public_key(sk) == pk

    inputs = _h(vector["input"])
    blinds = _h(vector["blind"])
    info = bytes.fromhex(vector.get("info", ""))
    # Blind: BlindedElement for the recorded blind.
    blinded = []
    for x, r in zip(inputs, blinds, strict=True):
        blind, element = suite.blind(x, blind=r, info=info or None, pk=pk if info else None)
        assert blind == r
        blinded.append(element)
    assert [b.hex() for b in blinded] == vector["blinded_element"]

    # BlindEvaluate: EvaluationElement and, in VOPRF/POPRF, ONE proof for the whole batch.
    r_proof = bytes.fromhex(vector["proof_random_scalar"]) if "proof" in vector else None
    evaluated, proof = suite.blind_evaluate(sk, blinded, info=info, proof_randomness=r_proof)
    assert [e.hex() for e in evaluated] == vector["evaluation_element"]
    if mode["mode"] == Mode.OPRF:
        assert proof is None
    else:
        assert proof is not None and proof.hex() == vector["proof"]

    # Finalize (verifying the proof) and Evaluate: Output.
    outputs = suite.finalize(
        inputs, blinds, evaluated, blinded_elements=blinded, pk=pk, proof=proof, info=info
    )
    assert [o.hex() for o in outputs] == vector["output"]
    assert [suite.evaluate(sk, x, info=info).hex() for x in inputs] == vector["output"]


@pytest.mark.parametrize("mode", [Mode.VOPRF, Mode.POPRF])
def test_parallel_batch_matches_sequential_and_has_one_proof(mode: Mode) -> None:
    """A batch split over two threads gives the same elements and the same single proof."""
    inputs = [f"input {i}".encode() for i in range(150)]
    one = get_suite(mode=mode, workers=1)
    two = get_suite(mode=mode, workers=2)
    sk, pk = one.derive_key_pair(bytes(range(32)), b"parallel")
    blinds, blinded = zip(
        *(
            one.blind(x, blind=one.group.serialize_scalar(one.group.scalar_from_int(i + 2)))
            for i, x in enumerate(inputs)
        ),
        strict=True,
    )
    r = bytes.fromhex(DATA["modes"][1]["vectors"][0]["proof_random_scalar"])
    info = b"tweak" if mode is Mode.POPRF else b""
    ev1, proof1 = one.blind_evaluate(sk, list(blinded), info=info, proof_randomness=r)
    ev2, proof2 = two.blind_evaluate(sk, list(blinded), info=info, proof_randomness=r)
    assert ev1 == ev2 and proof1 == proof2 and proof1 is not None and len(proof1) == 64
    out = two.finalize(
        inputs, list(blinds), ev2, blinded_elements=list(blinded), pk=pk, proof=proof2, info=info
    )
    assert out == [one.evaluate(sk, x, info=info) for x in inputs]


def test_registry_resolves_suite() -> None:
    suite = registry.create("oprf", "ristretto255-SHA512", mode=1)
    assert isinstance(suite, OprfSuite) and suite.mode is Mode.VOPRF
    assert suite.group.name == "ristretto255-sodium"
