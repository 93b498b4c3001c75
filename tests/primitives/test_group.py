"""ristretto255 backends: RFC 9496 / RFC 9380 known answers, rejections, and backend agreement.

Known answers come from ``tests/vectors/rfc9496`` and ``tests/vectors/rfc9380`` (checksums
verified). Property tests (hypothesis) check that the libsodium and the pure-Python backend agree
on hash-to-group, scalar multiplication, addition and encode/decode round trips.
"""

from __future__ import annotations

import ctypes
import hashlib
from typing import Any

import known_answers
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from primitives import registry
from primitives.errors import DecodeError, InvalidInputError
from primitives.group import RISTRETTO255_ORDER, PrimeOrderGroup, get_group
from primitives.group import ristretto255_pure as pure
from primitives.group.expand import expand_message_xmd
from primitives.group.ristretto255_sodium import load_libsodium
from primitives.randomness import RandomSource

L = RISTRETTO255_ORDER
P = (1 << 255) - 19
GROUPS = ["ristretto255-sodium", "ristretto255-pure"]


RFC9496 = known_answers.load("rfc9496/ristretto255.json")
RFC9380 = known_answers.load("rfc9380/expand_message_xmd_sha512.json")

SODIUM = get_group("ristretto255-sodium")
PURE = get_group("ristretto255-pure")


@pytest.fixture(params=GROUPS)
def group(request: pytest.FixtureRequest) -> PrimeOrderGroup[Any, Any]:
    return get_group(request.param)


# -- RFC 9380 expand_message_xmd -------------------------------------------------------------
@pytest.mark.parametrize(
    "vector", RFC9380["vectors"], ids=lambda v: f"{v['msg']!r}-{v['len_in_bytes']}"
)
def test_expand_message_xmd_rfc9380_k3(vector: dict[str, Any]) -> None:
    out = expand_message_xmd(
        vector["msg"].encode(), RFC9380["dst"].encode(), vector["len_in_bytes"]
    )
    assert out.hex() == vector["uniform_bytes"]


def test_expand_message_xmd_oversize_dst_and_bounds() -> None:
    long_dst = b"x" * 300
    hashed = hashlib.sha512(b"H2C-OVERSIZE-DST-" + long_dst).digest()
    assert expand_message_xmd(b"m", long_dst, 64) == expand_message_xmd(b"m", hashed, 64)
    for bad in (0, 255 * 64 + 1, 70000):
        with pytest.raises(InvalidInputError, match="len_in_bytes"):
            expand_message_xmd(b"m", b"dst", bad)


# -- RFC 9496 Appendix A, both backends ------------------------------------------------------
def test_generator_multiples_rfc9496_a1(group: PrimeOrderGroup[Any, Any]) -> None:
    acc = group.identity()
    for i, expected in enumerate(RFC9496["generator_multiples"]):
        assert group.serialize_element(acc).hex() == expected
        assert group.serialize_element(group.scalar_mult_base(group.scalar_from_int(i))).hex() == (
            expected
        )
        if i:
            decoded = group.deserialize_element(bytes.fromhex(expected))
            assert group.equal(decoded, acc)
            assert group.serialize_element(decoded).hex() == expected
        acc = group.add(acc, group.generator())
    assert group.serialize_element(group.generator()).hex() == RFC9496["generator_multiples"][1]


@pytest.mark.parametrize("encoding", RFC9496["invalid_encodings"])
def test_invalid_encodings_rfc9496_a2_rejected(
    group: PrimeOrderGroup[Any, Any], encoding: str
) -> None:
    with pytest.raises(DecodeError):
        group.deserialize_element(bytes.fromhex(encoding))


def test_from_uniform_bytes_rfc9496_a3(group: PrimeOrderGroup[Any, Any]) -> None:
    for vector in RFC9496["from_uniform_bytes"]:
        element = group.element_from_uniform_bytes(bytes.fromhex(vector["input"]))  # type: ignore[attr-defined]
        assert group.serialize_element(element).hex() == vector["output"]


@pytest.mark.parametrize(
    "vector", RFC9496["sqrt_ratio_m1"], ids=lambda v: f"{v['u'][:2]}/{v['v'][:2]}"
)
def test_sqrt_ratio_m1_rfc9496_a4(vector: dict[str, Any]) -> None:
    u = int.from_bytes(bytes.fromhex(vector["u"]), "little")
    v = int.from_bytes(bytes.fromhex(vector["v"]), "little")
    was_square, r = pure.sqrt_ratio_m1(u, v)
    assert was_square is vector["was_square"]
    assert r.to_bytes(32, "little").hex() == vector["r"]


def test_pure_constants_satisfy_their_definitions() -> None:
    """RFC 9496 §4.1 constants: the defining equations, and the roots' signs."""
    d = pure.D
    assert (d * 121666 + 121665) % P == 0
    assert pure.SQRT_M1 * pure.SQRT_M1 % P == P - 1
    assert pure.SQRT_AD_MINUS_ONE**2 % P == (-d - 1) % P
    assert pure.INVSQRT_A_MINUS_D**2 * (-1 - d) % P == 1
    assert pure.ONE_MINUS_D_SQ == (1 - d * d) % P
    assert pure.D_MINUS_ONE_SQ == (d - 1) ** 2 % P
    x, y, z, t = pure.GENERATOR
    assert (-x * x + y * y - z * z - d * x * x * y * y) % P == 0 and t == x * y % P


# -- rejections: identity, non-canonical, lengths, scalars -----------------------------------
def _generator_s() -> int:
    return int.from_bytes(bytes.fromhex(RFC9496["generator_multiples"][1]), "little")


@pytest.mark.parametrize(
    ("encoding", "match"),
    [
        (bytes(32), "identity"),
        ((_generator_s() | 1 << 255).to_bytes(32, "little"), "canonical"),  # high bit set
        ((_generator_s() + P).to_bytes(32, "little"), "canonical"),  # s >= p (same residue)
        (P.to_bytes(32, "little"), "canonical"),  # s = p, i.e. 0 non-canonically
        ((P - _generator_s()).to_bytes(32, "little"), "negative"),  # -s, odd
        (bytes(31), "32 bytes"),
        (bytes(33), "32 bytes"),
        (b"", "32 bytes"),
    ],
    ids=["identity", "high-bit", "s+p", "s=p", "negative-s", "len31", "len33", "empty"],
)
def test_deserialize_element_rejects(
    group: PrimeOrderGroup[Any, Any], encoding: bytes, match: str
) -> None:
    with pytest.raises(DecodeError, match=match):
        group.deserialize_element(encoding)


def test_deserialize_element_rejects_non_bytes(group: PrimeOrderGroup[Any, Any]) -> None:
    with pytest.raises(DecodeError, match="bytes"):
        group.deserialize_element("e2f2" * 16)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("encoding", "match"),
    [
        (L.to_bytes(32, "little"), "order"),
        ((L + 1).to_bytes(32, "little"), "order"),
        (((1 << 256) - 1).to_bytes(32, "little"), "order"),
        (bytes(31), "32 bytes"),
        (bytes(33), "32 bytes"),
    ],
    ids=["L", "L+1", "2^256-1", "len31", "len33"],
)
def test_deserialize_scalar_rejects(
    group: PrimeOrderGroup[Any, Any], encoding: bytes, match: str
) -> None:
    with pytest.raises(DecodeError, match=match):
        group.deserialize_scalar(encoding)


def test_deserialize_scalar_accepts_l_minus_one(group: PrimeOrderGroup[Any, Any]) -> None:
    s = group.deserialize_scalar((L - 1).to_bytes(32, "little"))
    assert group.scalar_to_int(s) == L - 1
    # (L - 1) * G = -G, whose encoding differs from G's: the scalar was not truncated.
    minus_g = group.scalar_mult_base(s)
    assert group.is_identity(group.add(minus_g, group.generator()))


def test_scalar_inverse_of_zero_is_an_error(group: PrimeOrderGroup[Any, Any]) -> None:
    with pytest.raises(InvalidInputError, match="non-zero"):
        group.scalar_inverse(group.scalar_from_int(0))


def test_libsodium_itself_accepts_what_we_reject() -> None:
    """The design §5 pitfall: the identity and scalars >= L pass libsodium; our wrapper stops them."""
    lib = load_libsodium()
    assert lib.crypto_core_ristretto255_is_valid_point(bytes(32)) == 1
    out = ctypes.create_string_buffer(32)
    assert lib.crypto_scalarmult_ristretto255_base(out, (L + 1).to_bytes(32, "little")) == 0
    assert out.raw == SODIUM.generator()  # L + 1 silently reduced to 1
    with pytest.raises(DecodeError):
        SODIUM.deserialize_element(bytes(32))
    with pytest.raises(DecodeError):
        SODIUM.deserialize_scalar((L + 1).to_bytes(32, "little"))


def test_identity_product_is_reported_as_identity(group: PrimeOrderGroup[Any, Any]) -> None:
    g = group.generator()
    assert group.is_identity(group.scalar_mult(group.scalar_from_int(0), g))
    assert group.is_identity(group.sub(g, g))
    assert group.serialize_element(group.identity()) == bytes(32)


def test_random_scalar_is_nonzero_reduced_and_seeded(group: PrimeOrderGroup[Any, Any]) -> None:
    a = [group.scalar_to_int(group.random_scalar(RandomSource.seeded(7, "s"))) for _ in range(2)]
    assert a[0] == a[1] and 0 < a[0] < L
    rng = RandomSource.seeded(8, "s")
    draws = {group.scalar_to_int(group.random_scalar(rng)) for _ in range(20)}
    assert len(draws) == 20 and all(0 < v < L for v in draws)


def test_registry_names_resolve_to_backends() -> None:
    assert registry.create("group", "ristretto255-sodium").name == "ristretto255-sodium"
    assert registry.create("group", "ristretto255-pure").name == "ristretto255-pure"
    assert SODIUM.releases_gil and not PURE.releases_gil


# -- both backends agree (hypothesis) --------------------------------------------------------
scalars = st.integers(min_value=0, max_value=L - 1)
messages = st.binary(max_size=80)
dsts = st.binary(min_size=1, max_size=40)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(msg=messages, dst=dsts)
def test_backends_agree_on_hash_to_group_and_scalar(msg: bytes, dst: bytes) -> None:
    a = SODIUM.hash_to_group(msg, dst)
    b = PURE.hash_to_group(msg, dst)
    assert SODIUM.serialize_element(a) == PURE.serialize_element(b)
    assert SODIUM.serialize_scalar(SODIUM.hash_to_scalar(msg, dst)) == PURE.serialize_scalar(
        PURE.hash_to_scalar(msg, dst)
    )


@settings(max_examples=25, deadline=None, derandomize=True)
@given(k=scalars, msg=messages)
def test_backends_agree_on_scalar_mult(k: int, msg: bytes) -> None:
    enc = SODIUM.serialize_element(SODIUM.hash_to_group(msg, b"agree"))
    sodium_out = SODIUM.scalar_mult(SODIUM.scalar_from_int(k), SODIUM.deserialize_element(enc))
    pure_out = PURE.scalar_mult(PURE.scalar_from_int(k), PURE.deserialize_element(enc))
    assert SODIUM.serialize_element(sodium_out) == PURE.serialize_element(pure_out)
    assert SODIUM.serialize_element(SODIUM.scalar_mult_base(SODIUM.scalar_from_int(k))) == (
        PURE.serialize_element(PURE.scalar_mult_base(k))
    )


@settings(max_examples=25, deadline=None, derandomize=True)
@given(a=messages, b=messages)
def test_backends_agree_on_add_sub_and_round_trip(a: bytes, b: bytes) -> None:
    pa, pb = PURE.hash_to_group(a, b"x"), PURE.hash_to_group(b, b"y")
    ea, eb = PURE.serialize_element(pa), PURE.serialize_element(pb)
    for op in ("add", "sub"):
        sodium_out = getattr(SODIUM, op)(
            SODIUM.deserialize_element(ea), SODIUM.deserialize_element(eb)
        )
        pure_out = getattr(PURE, op)(pa, pb)
        assert SODIUM.serialize_element(sodium_out) == PURE.serialize_element(pure_out)
    # decode(encode(P)) == P for both, on a point that is not in the normalised (Z = 1) form.
    assert PURE.equal(PURE.deserialize_element(ea), pa)
    assert SODIUM.serialize_element(SODIUM.deserialize_element(ea)) == ea


@settings(max_examples=40, deadline=None, derandomize=True)
@given(a=scalars, b=scalars.filter(bool))
def test_backends_agree_on_scalar_arithmetic(a: int, b: int) -> None:
    for op in ("scalar_add", "scalar_sub", "scalar_mul"):
        x = getattr(SODIUM, op)(SODIUM.scalar_from_int(a), SODIUM.scalar_from_int(b))
        y = getattr(PURE, op)(a, b)
        assert SODIUM.scalar_to_int(x) == y
    assert SODIUM.scalar_to_int(SODIUM.scalar_inverse(SODIUM.scalar_from_int(b))) == pow(b, -1, L)
    assert SODIUM.scalar_to_int(SODIUM.scalar_neg(SODIUM.scalar_from_int(a))) == (-a) % L


@settings(max_examples=15, deadline=None, derandomize=True)
@given(a=scalars, b=scalars)
def test_group_laws_pure(a: int, b: int) -> None:
    """(a + b)·G = a·G + b·G and (L - 1)·P + P = identity, in the reference backend."""
    lhs = PURE.scalar_mult_base(PURE.scalar_add(a, b))
    rhs = PURE.add(PURE.scalar_mult_base(a), PURE.scalar_mult_base(b))
    assert PURE.equal(lhs, rhs)
    point = PURE.scalar_mult_base(b or 1)
    assert PURE.is_identity(PURE.add(PURE.scalar_mult(L - 1, point), point))
    assert not PURE.is_identity(point)


# -- multi-scalar multiplication (public scalars; bucket method when numba is present) -------
def _sequential_sum(scalars: list[bytes], elements: list[bytes]) -> bytes:
    total = SODIUM.identity()
    for s, e in zip(scalars, elements, strict=True):
        total = SODIUM.add(SODIUM.scalar_mult(s, e), total)
    return total


@pytest.mark.parametrize("n", [1, 2, 31, 32, 33, 257])
def test_multi_scalar_mult_matches_sequential_sum(n: int) -> None:
    rng = RandomSource.seeded(n, "msm")
    elements = [SODIUM.hash_to_group(rng.random_bytes(16), b"msm") for _ in range(n)]
    scalars = [SODIUM.random_scalar(rng) for _ in range(n)]
    # Edge scalars and elements: 0, 1, L - 1, a top-window-heavy value, the identity, -G.
    edge = [0, 1, L - 1, (1 << 252) + (1 << 251), 2**64 - 1]
    for i, value in enumerate(edge[: max(0, n - 1)]):
        scalars[i] = SODIUM.scalar_from_int(value)
    if n >= 3:
        elements[1] = SODIUM.identity()
        elements[2] = SODIUM.scalar_mult_base(SODIUM.scalar_from_int(L - 1))
    expected = _sequential_sum(scalars, elements)
    assert SODIUM.multi_scalar_mult(scalars, elements) == expected
    unaccelerated = registry.create("group", "ristretto255-sodium", accelerate=False)
    assert unaccelerated.multi_scalar_mult(scalars, elements) == expected
    if n <= 33:
        points = [
            PURE.deserialize_element(e) if e != bytes(32) else PURE.identity() for e in elements
        ]
        pure_sum = PURE.multi_scalar_mult([SODIUM.scalar_to_int(s) for s in scalars], points)
        assert PURE.serialize_element(pure_sum) == expected


def test_multi_scalar_mult_rejects_points_off_the_curve_by_index() -> None:
    rng = RandomSource.seeded(1, "msm-bad")
    elements = [SODIUM.hash_to_group(rng.random_bytes(16), b"msm") for _ in range(40)]
    elements[17] = bytes.fromhex(RFC9496["invalid_encodings"][12])  # non-square x^2, canonical s
    scalars = [SODIUM.random_scalar(rng) for _ in range(40)]
    with pytest.raises(DecodeError, match=r"\[17\]"):
        SODIUM.multi_scalar_mult(scalars, elements)
    with pytest.raises(InvalidInputError, match="equal lengths"):
        SODIUM.multi_scalar_mult(scalars[:3], elements[:4])


def test_multi_scalar_mult_falls_back_when_the_kernel_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A JIT failure switches the process to libsodium with a warning instead of failing."""
    from primitives.group import msm_numba

    rng = RandomSource.seeded(5, "msm-fallback")
    elements = [SODIUM.hash_to_group(rng.random_bytes(16), b"msm") for _ in range(40)]
    scalars = [SODIUM.random_scalar(rng) for _ in range(40)]
    expected = _sequential_sum(scalars, elements)

    def broken(*_: object) -> bytes:
        raise RuntimeError("no LLVM today")

    monkeypatch.setattr(msm_numba, "multi_scalar_mult", broken)
    monkeypatch.setattr(msm_numba.SWITCH, "failures", [])
    with pytest.warns(RuntimeWarning, match="falling back to libsodium"):
        assert SODIUM.multi_scalar_mult(scalars, elements) == expected
    assert not msm_numba.SWITCH.usable()
    assert SODIUM.multi_scalar_mult(scalars, elements) == expected  # no second warning needed


# -- shortcuts of the libsodium backend --------------------------------------------------------
@settings(max_examples=20, deadline=None, derandomize=True)
@given(a=scalars.filter(bool))
def test_sodium_identity_operands_agree_with_pure(a: int) -> None:
    """add/sub answer an identity operand without libsodium; the results equal the reference."""
    point = SODIUM.scalar_mult_base(SODIUM.scalar_from_int(a))
    identity = SODIUM.identity()
    ref = PURE.scalar_mult_base(a)
    for got, want in (
        (SODIUM.add(point, identity), ref),
        (SODIUM.add(identity, point), ref),
        (SODIUM.sub(point, identity), ref),
        (SODIUM.sub(identity, point), PURE.sub(PURE.identity(), ref)),
        (SODIUM.sub(point, point), PURE.identity()),
    ):
        assert got == PURE.serialize_element(want)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(a=scalars.filter(bool))
def test_sodium_masked_inverse_is_exact_and_deterministic(a: int) -> None:
    """The masked inversion returns a^-1 mod L whatever the random mask: two calls agree, and
    a · a^-1 = 1."""
    s = SODIUM.scalar_from_int(a)
    first, second = SODIUM.scalar_inverse(s), SODIUM.scalar_inverse(s)
    assert first == second
    assert SODIUM.scalar_to_int(SODIUM.scalar_mul(s, first)) == 1
