"""Negative vectors beside the RFC 9497 positive ones: each malformed message gets its typed error.

Built from the A.1 vectors (the batch-of-2 vectors of VOPRF and POPRF): a tampered proof, swapped
elements, a wrong key or info raise VerificationError; the identity, non-canonical encodings,
scalars >= L and wrong lengths raise DecodeError; inconsistent arguments raise InvalidInputError;
a POPRF tweak of zero raises InvalidInputError on both sides.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import known_answers
import pytest

from primitives.errors import (
    DecodeError,
    InvalidInputError,
    InvalidParameterError,
    UnknownComponentError,
    VerificationError,
)
from primitives.group import RISTRETTO255_ORDER
from primitives.secret import Secret
from primitives.voprf import Mode, OprfSuite, dleq, get_suite

L = RISTRETTO255_ORDER
P = (1 << 255) - 19
DATA = known_answers.load("rfc9497/ristretto255-sha512.json")
GROUPS = ["ristretto255-sodium", "ristretto255-pure"]
IDENTITY = bytes(32)
GENERATOR = bytes.fromhex("e2f2ae0a6abc4e71a884a961c500515f58e30b6aa582dd8db6a65945e08d2d76")


def _batch_case(mode: int) -> dict[str, Any]:
    """Everything finalize needs for the batch-of-2 vector of ``mode`` (1 or 2)."""
    entry = DATA["modes"][mode]
    vector = entry["vectors"][2]
    return {
        "inputs": [bytes.fromhex(x) for x in vector["input"]],
        "blinds": [bytes.fromhex(x) for x in vector["blind"]],
        "evaluated": [bytes.fromhex(x) for x in vector["evaluation_element"]],
        "blinded_elements": [bytes.fromhex(x) for x in vector["blinded_element"]],
        "pk": bytes.fromhex(entry["pkSm"]),
        "proof": bytes.fromhex(vector["proof"]),
        "info": bytes.fromhex(vector.get("info", "")),
        "sk": bytes.fromhex(entry["skSm"]),
        "outputs": [bytes.fromhex(x) for x in vector["output"]],
    }


def _flip(data: bytes, index: int, bit: int = 0) -> bytes:
    out = bytearray(data)
    out[index] ^= 1 << bit
    return bytes(out)


@pytest.fixture(
    params=[(g, m) for g in GROUPS for m in (Mode.VOPRF, Mode.POPRF)],
    ids=lambda p: f"{p[0].split('-')[1]}-{p[1].name}",
)
def case(request: pytest.FixtureRequest) -> tuple[OprfSuite, dict[str, Any]]:
    group, mode = request.param
    return get_suite(mode=mode, group=group), _batch_case(int(mode))


def test_untampered_batch_verifies(case: tuple[OprfSuite, dict[str, Any]]) -> None:
    suite, c = case
    kwargs = {k: c[k] for k in ("blinded_elements", "pk", "proof", "info")}
    assert suite.finalize(c["inputs"], c["blinds"], c["evaluated"], **kwargs) == c["outputs"]


@pytest.mark.parametrize(
    "tamper",
    [
        "proof_c_bit",
        "proof_s_bit",
        "proof_halves_swapped",
        "evaluated_swapped",
        "blinded_swapped",
        "evaluated_replaced",
        "wrong_pk",
    ],
)
def test_tampering_raises_verification_error(
    case: tuple[OprfSuite, dict[str, Any]], tamper: str
) -> None:
    suite, c = case
    c = dict(c)
    if tamper == "proof_c_bit":
        c["proof"] = _flip(c["proof"], 0)
    elif tamper == "proof_s_bit":
        c["proof"] = _flip(c["proof"], 32)
    elif tamper == "proof_halves_swapped":
        c["proof"] = c["proof"][32:] + c["proof"][:32]
    elif tamper == "evaluated_swapped":
        c["evaluated"] = c["evaluated"][::-1]
    elif tamper == "blinded_swapped":
        c["blinded_elements"] = c["blinded_elements"][::-1]
    elif tamper == "evaluated_replaced":
        c["evaluated"] = [c["evaluated"][0], GENERATOR]
    elif tamper == "wrong_pk":
        c["pk"] = GENERATOR
    kwargs = {k: c[k] for k in ("blinded_elements", "pk", "proof", "info")}
    with pytest.raises(VerificationError, match="proof must verify"):
        suite.finalize(c["inputs"], c["blinds"], c["evaluated"], **kwargs)


@pytest.mark.parametrize("group", GROUPS)
def test_other_info_fails_the_poprf_proof(group: str) -> None:
    """POPRF's proof is made under a key tweaked by info (RFC 9497 §3.3.3): other info fails it."""
    suite, c = get_suite(mode=Mode.POPRF, group=group), _batch_case(int(Mode.POPRF))
    with pytest.raises(VerificationError, match="proof must verify"):
        suite.finalize(c["inputs"], c["blinds"], c["evaluated"], blinded_elements=c["blinded_elements"],
                       pk=c["pk"], proof=c["proof"], info=b"other info")


def _non_canonical(encoding: bytes) -> dict[str, bytes]:
    s = int.from_bytes(encoding, "little")
    return {
        "identity": IDENTITY,
        "high_bit": (s | 1 << 255).to_bytes(32, "little"),
        "s_plus_p": (s + P).to_bytes(32, "little"),
        "negative_s": (P - s).to_bytes(32, "little"),
        "not_on_curve": bytes.fromhex(
            "26948d35ca62e643e26a83177332e6b6afeb9d08e4268b650f1f5bbd8d81d371"
        ),  # RFC 9496 A.2, non-square x^2
        "short": encoding[:31],
        "long": encoding + b"\x00",
    }


@pytest.mark.parametrize(
    "kind", ["identity", "high_bit", "s_plus_p", "negative_s", "not_on_curve", "short", "long"]
)
@pytest.mark.parametrize("where", ["evaluated", "blinded_elements", "pk"])
def test_malformed_elements_raise_decode_error_in_finalize(
    case: tuple[OprfSuite, dict[str, Any]], kind: str, where: str
) -> None:
    suite, c = case
    c = dict(c)
    if where == "pk":
        c["pk"] = _non_canonical(c["pk"])[kind]
    else:
        c[where] = [c[where][0], _non_canonical(c[where][1])[kind]]
    kwargs = {k: c[k] for k in ("blinded_elements", "pk", "proof", "info")}
    with pytest.raises(DecodeError, match=where if where == "pk" else rf"{where}\[1\]"):
        suite.finalize(c["inputs"], c["blinds"], c["evaluated"], **kwargs)


@pytest.mark.parametrize(
    "kind", ["identity", "high_bit", "s_plus_p", "negative_s", "not_on_curve", "short", "long"]
)
def test_malformed_blinded_elements_raise_decode_error_on_server(
    case: tuple[OprfSuite, dict[str, Any]], kind: str
) -> None:
    suite, c = case
    bad = [c["blinded_elements"][0], _non_canonical(c["blinded_elements"][1])[kind]]
    with pytest.raises(DecodeError, match=r"blinded_elements\[1\]"):
        suite.blind_evaluate(c["sk"], bad, info=c["info"])


@pytest.mark.parametrize(
    ("proof", "match"),
    [
        (bytes(63), "64 bytes"),
        (bytes(65), "64 bytes"),
        (L.to_bytes(32, "little") + bytes(32), "order"),
        (bytes(32) + (L + 5).to_bytes(32, "little"), "order"),
        (b"\xff" * 64, "order"),
    ],
    ids=["len63", "len65", "c=L", "s>L", "all-ff"],
)
def test_malformed_proof_raises_decode_error(
    case: tuple[OprfSuite, dict[str, Any]], proof: bytes, match: str
) -> None:
    suite, c = case
    with pytest.raises(DecodeError, match=match):
        suite.finalize(
            c["inputs"],
            c["blinds"],
            c["evaluated"],
            blinded_elements=c["blinded_elements"],
            pk=c["pk"],
            proof=proof,
            info=c["info"],
        )


@pytest.mark.parametrize("group", GROUPS)
@pytest.mark.parametrize(
    ("scalar", "error", "match"),
    [
        (L.to_bytes(32, "little"), DecodeError, "order"),
        ((L + 1).to_bytes(32, "little"), DecodeError, "order"),
        (b"\xff" * 32, DecodeError, "order"),
        (bytes(31), DecodeError, "32 bytes"),
        (bytes(32), InvalidInputError, "non-zero"),
    ],
    ids=["L", "L+1", "all-ff", "len31", "zero"],
)
def test_bad_scalars_everywhere(
    group: str, scalar: bytes, error: type[Exception], match: str
) -> None:
    suite = get_suite(mode=Mode.VOPRF, group=group)
    c = _batch_case(1)
    with pytest.raises(error, match=match):
        suite.blind_evaluate(scalar, c["blinded_elements"])
    with pytest.raises(error, match=match):
        suite.evaluate(scalar, b"x")
    with pytest.raises(error, match=match):
        suite.blind(b"x", blind=scalar)
    with pytest.raises(error, match=match):
        suite.blind_evaluate(c["sk"], c["blinded_elements"], proof_randomness=scalar)
    with pytest.raises(error, match=match):
        suite.finalize(
            c["inputs"],
            [c["blinds"][0], scalar],
            c["evaluated"],
            blinded_elements=c["blinded_elements"],
            pk=c["pk"],
            proof=c["proof"],
        )


@pytest.mark.parametrize("group", GROUPS)
def test_poprf_zero_tweak_is_rejected_on_both_sides(group: str) -> None:
    """sk = -HashToScalar("Info" || framed(info)) makes t = 0 (RFC 9497 InverseError)."""
    suite = get_suite(mode=Mode.POPRF, group=group)
    g = suite.group
    info = b"the tweak that kills"
    m = g.hash_to_scalar(
        b"Info" + len(info).to_bytes(2, "big") + info, b"HashToScalar-" + suite.context_string
    )
    sk = g.serialize_scalar(g.scalar_neg(m))
    pk = suite.public_key(sk)
    blind, blinded = suite.blind(b"input")
    with pytest.raises(InvalidInputError, match="tweak"):
        suite.blind_evaluate(sk, [blinded], info=info)
    with pytest.raises(InvalidInputError, match="tweak"):
        suite.evaluate(sk, b"input", info=info)
    # The client sees tweakedKey = m*G + pk = identity.
    with pytest.raises(InvalidInputError, match="tweaked key"):
        suite.blind(b"input", info=info, pk=pk)
    with pytest.raises(InvalidInputError, match="tweaked key"):
        suite.finalize(
            [b"input"],
            [blind],
            [blinded],
            blinded_elements=[blinded],
            pk=pk,
            proof=bytes(64),
            info=info,
        )
    # Any other info is fine with the same key.
    out, proof = suite.blind_evaluate(sk, [blinded], info=b"harmless")
    assert suite.finalize(
        [b"input"], [blind], out, blinded_elements=[blinded], pk=pk, proof=proof, info=b"harmless"
    ) == [suite.evaluate(sk, b"input", b"harmless")]


def test_argument_errors() -> None:
    suite = get_suite(mode=Mode.VOPRF)
    c = _batch_case(1)
    with pytest.raises(InvalidInputError, match="single value"):
        suite.blind_evaluate(c["sk"], c["blinded_elements"][0])  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="1 to"):
        suite.blind_evaluate(c["sk"], [])
    with pytest.raises(InvalidInputError, match="needs blinded_elements, pk and proof"):
        suite.finalize(c["inputs"], c["blinds"], c["evaluated"])
    with pytest.raises(InvalidInputError, match="blinds must be a list of 2"):
        suite.finalize(
            c["inputs"],
            c["blinds"][:1],
            c["evaluated"],
            blinded_elements=c["blinded_elements"],
            pk=c["pk"],
            proof=c["proof"],
        )
    with pytest.raises(InvalidInputError, match="blinded_elements must have 2"):
        suite.finalize(
            c["inputs"],
            c["blinds"],
            c["evaluated"],
            blinded_elements=c["blinded_elements"][:1],
            pk=c["pk"],
            proof=c["proof"],
        )
    with pytest.raises(InvalidInputError, match="at most 65535"):
        suite.blind(b"x" * 65536)
    with pytest.raises(InvalidParameterError, match="info must be empty"):
        suite.evaluate(c["sk"], b"x", info=b"only in POPRF")
    with pytest.raises(InvalidInputError, match="seed must be 32 bytes"):
        suite.derive_key_pair(bytes(31), b"")
    with pytest.raises(InvalidParameterError, match="mode must be one of"):
        get_suite(mode=3)
    with pytest.raises(InvalidParameterError, match="mode must be one of"):
        get_suite(mode=True)  # type: ignore[arg-type]
    with pytest.raises(UnknownComponentError, match="ristretto255-SHA512"):
        get_suite("P256-SHA256", 0)
    with pytest.raises(UnknownComponentError, match="ristretto255-pure"):
        get_suite(mode=0, group="ristretto255-nope")
    with pytest.raises(InvalidParameterError, match="workers"):
        get_suite(mode=0, workers=0)


def test_secret_wrapped_keys_and_blinds_are_accepted() -> None:
    suite = get_suite(mode=Mode.VOPRF)
    c = _batch_case(1)
    evaluated, proof = suite.blind_evaluate(Secret(c["sk"]), c["blinded_elements"])
    outputs = suite.finalize(
        c["inputs"],
        [Secret(b) for b in c["blinds"]],
        evaluated,
        blinded_elements=c["blinded_elements"],
        pk=c["pk"],
        proof=proof,
    )
    assert outputs == c["outputs"]
    assert "redacted" in repr(Secret(c["sk"]))


@pytest.mark.parametrize("bad_index", [3, 140])
def test_malformed_element_in_a_parallel_batch_names_its_index(bad_index: int) -> None:
    """Batches above the threading threshold run in two ranges; either range reports its error."""
    suite = get_suite(mode=Mode.VOPRF, workers=2)
    sk, pk = suite.derive_key_pair(bytes(32), b"parallel")
    blinded = [suite.blind(f"x{i}".encode())[1] for i in range(150)]
    blinded[bad_index] = IDENTITY
    with pytest.raises(DecodeError, match=rf"blinded_elements\[{bad_index}\].*identity"):
        suite.blind_evaluate(sk, blinded)
    evaluated, proof = suite.blind_evaluate(
        sk, [b if b != IDENTITY else GENERATOR for b in blinded]
    )
    evaluated[bad_index] = bytes.fromhex(
        "26948d35ca62e643e26a83177332e6b6afeb9d08e4268b650f1f5bbd8d81d371"
    )
    blinds = [bytes(31) + b"\x01"] * 150
    with pytest.raises(DecodeError, match=rf"evaluated\[{bad_index}\]"):
        suite.finalize(
            [b"x"] * 150, blinds, evaluated, blinded_elements=blinded, pk=pk, proof=proof
        )


def test_batches_past_the_composite_index_raise_typed_errors() -> None:
    """ComputeComposites writes each index with I2OSP(i, 2) (RFC 9497 §2.2.1): a proof covers at
    most 2^16 - 1 elements. A longer batch is an InvalidInputError at the suite and at the DLEQ
    layer alike (it used to escape from the DLEQ functions as OverflowError)."""
    suite = get_suite(mode=Mode.VOPRF)
    g, c = suite.group, _batch_case(1)
    dst = suite.context_string
    too_many = (1 << 16) + 1
    blinded = [c["blinded_elements"][0]] * too_many
    with pytest.raises(InvalidInputError, match="1 to 65535 elements, got 65537"):
        suite.blind_evaluate(c["sk"], blinded)
    with pytest.raises(InvalidInputError, match="1 to 65535 elements, got 65537"):
        suite.finalize(
            [b"x"] * too_many, [c["blinds"][0]] * too_many, [c["evaluated"][0]] * too_many,
            blinded_elements=blinded, pk=c["pk"], proof=c["proof"],
        )
    element, k = g.deserialize_element(GENERATOR), g.deserialize_scalar(c["sk"])
    for n in (1 << 16, too_many, 0):
        with pytest.raises(InvalidInputError, match=f"1 to 65535 elements, got {n}"):
            dleq.verify_proof(g, element, [element] * n, [element] * n, (k, k), context=dst, dst=dst)
        with pytest.raises(InvalidInputError, match=f"1 to 65535 elements, got {n}"):
            dleq.generate_proof(g, k, element, [element] * n, [element] * n, k, context=dst, dst=dst)
    with pytest.raises(InvalidInputError, match="equal lengths, got 2 and 1"):
        dleq.verify_proof(g, element, [element] * 2, [element], (k, k), context=dst, dst=dst)
    with pytest.raises(InvalidInputError, match="equal lengths, got 1 and 2"):
        dleq.generate_proof(g, k, element, [element], [element] * 2, k, context=dst, dst=dst)
    for index in (1 << 16, -1):
        with pytest.raises(InvalidInputError, match=f"index must be in \\[0, 65536\\), got {index}"):
            dleq.composite_weight(g, bytes(64), index, GENERATOR, GENERATOR, dst)



def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda args: args.__setitem__(key, value)


def _set_second(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda args: args[key].__setitem__(1, value)


def _shorten(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda args: args.__setitem__(key, args[key][:1])


_BAD_POINT = bytes.fromhex("26948d35ca62e643e26a83177332e6b6afeb9d08e4268b650f1f5bbd8d81d371")
#: name: (the fault, the error, its message; a message ending in ": " is a prefix before the
#: group backend's own decode text).
_FINALIZE_ERRORS: dict[str, tuple[Callable[[dict[str, Any]], None], type[Exception], str]] = {
    "evaluated_single": (
        lambda args: args.__setitem__("evaluated", args["evaluated"][0]),
        InvalidInputError,
        "evaluated must be a list of encoded elements, got a single value",
    ),
    "inputs_short": (
        _shorten("inputs"),
        InvalidInputError,
        "inputs must be a list of 2 byte strings, got list of length 1",
    ),
    "inputs_bytes": (
        _set("inputs", b"ab"),
        InvalidInputError,
        "inputs must be a list of 2 byte strings, got bytes of length 2",
    ),
    "blinds_short": (
        _shorten("blinds"),
        InvalidInputError,
        "blinds must be a list of 2 scalars, got 1 items",
    ),
    "input_too_long": (
        _set_second("inputs", b"x" * 65536),
        InvalidInputError,
        "inputs[1] must be at most 65535 bytes long, got 65536",
    ),
    "blind_zero": (
        _set_second("blinds", bytes(32)),
        InvalidInputError,
        "blinds[1] must be a non-zero scalar, got zero",
    ),
    "info_outside_poprf": (
        _set("info", b"abc"),
        InvalidParameterError,
        "info must be empty outside POPRF mode, got 3 bytes in VOPRF",
    ),
    "missing": (
        _set("pk", None),
        InvalidInputError,
        "VOPRF finalize needs blinded_elements, pk and proof, got "
        "blinded_elements=set, pk=None, proof=set",
    ),
    "blinded_short": (
        _shorten("blinded_elements"),
        InvalidInputError,
        "blinded_elements must have 2 items like evaluated, got 1",
    ),
    "proof_short": (_set("proof", bytes(63)), DecodeError, "proof must be 64 bytes long, got 63"),
    "pk_bad": (_set("pk", _BAD_POINT), DecodeError, "pk: "),
    "evaluated_bad": (_set_second("evaluated", _BAD_POINT), DecodeError, "evaluated[1]: "),
    "blinded_bad": (
        _set_second("blinded_elements", _BAD_POINT),
        DecodeError,
        "blinded_elements[1]: ",
    ),
    "proof_tampered": (
        lambda args: args.__setitem__("proof", _flip(args["proof"], 0)),
        VerificationError,
        "proof must verify for the batch of 2 elements under the given public key, "
        "got a proof that does not",
    ),
}


def _finalize_with(*faults: str) -> list[bytes]:
    """finalize of the VOPRF batch-of-2 vector with the named faults applied, last first."""
    c = _batch_case(int(Mode.VOPRF))
    args: dict[str, Any] = {
        k: list(c[k]) for k in ("inputs", "blinds", "evaluated", "blinded_elements")
    }
    args.update(pk=c["pk"], proof=c["proof"], info=b"")
    for name in reversed(faults):
        _FINALIZE_ERRORS[name][0](args)
    suite = get_suite(mode=Mode.VOPRF)
    return suite.finalize(args.pop("inputs"), args.pop("blinds"), args.pop("evaluated"), **args)


def _assert_message(raised: pytest.ExceptionInfo[Exception], message: str) -> None:
    text = str(raised.value)
    assert text.startswith(message) if message.endswith(": ") else text == message


@pytest.mark.parametrize("name", list(_FINALIZE_ERRORS))
def test_finalize_error_messages(name: str) -> None:
    """Pins each error finalize raises, by type and message."""
    _, error, message = _FINALIZE_ERRORS[name]
    with pytest.raises(error) as raised:
        _finalize_with(name)
    _assert_message(raised, message)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("evaluated_single", "inputs_short"),
        ("inputs_short", "blinds_short"),
        ("input_too_long", "blind_zero"),
        ("blind_zero", "info_outside_poprf"),
        ("info_outside_poprf", "missing"),
        ("missing", "blinded_short"),
        ("blinded_short", "proof_short"),
        ("proof_short", "pk_bad"),
        ("pk_bad", "evaluated_bad"),
        ("evaluated_bad", "blinded_bad"),
        ("blinded_bad", "proof_tampered"),
    ],
)
def test_finalize_checks_run_in_order(first: str, second: str) -> None:
    """With two faults, finalize raises the error of the check it runs first."""
    _, error, message = _FINALIZE_ERRORS[first]
    with pytest.raises(error) as raised:
        _finalize_with(first, second)
    _assert_message(raised, message)


def test_finalize_poprf_verification_message_names_info() -> None:
    c = _batch_case(int(Mode.POPRF))
    with pytest.raises(VerificationError) as raised:
        get_suite(mode=Mode.POPRF).finalize(
            c["inputs"],
            c["blinds"],
            c["evaluated"],
            blinded_elements=c["blinded_elements"],
            pk=c["pk"],
            proof=_flip(c["proof"], 0),
            info=c["info"],
        )
    assert str(raised.value) == (
        "proof must verify for the batch of 2 elements under the given public key and info, "
        "got a proof that does not"
    )
