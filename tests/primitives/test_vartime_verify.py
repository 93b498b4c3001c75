"""The variable-time single-proof kernel and ``dleq.verify_single_proofs`` against libsodium.

The kernel (``primitives.group._vartime_kernel``) computes M = d0·C, Z = d0·D, t2 = s·G + c·pk and
t3 = s·M + c·Z with its own point formulas, scalar arithmetic and encoder, so every output is
compared with the libsodium backend (and a few with the pure-Python reference), on random inputs,
edge scalars and points, RFC 9497 vectors, tampered proofs and invalid encodings.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import known_answers
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from primitives import registry
from primitives.errors import DecodeError, InvalidInputError, InvalidParameterError
from primitives.group import RISTRETTO255_ORDER, get_group, vartime_numba
from primitives.group import ristretto255_pure as pure
from primitives.group.jit_switch import numba_available
from primitives.randomness import RandomSource
from primitives.voprf import Mode, dleq, get_suite
from primitives.voprf.hashing import context_string, hash_to_scalar_dst

pytestmark = pytest.mark.skipif(not numba_available(), reason="needs numba")

L = RISTRETTO255_ORDER
P = (1 << 255) - 19
SODIUM = get_group("ristretto255-sodium")
PURE = get_group("ristretto255-pure")
IDENTITY = bytes(32)
EDGE_SCALARS = [0, 1, 2, L - 1, L - 2, (L + 1) // 2, (1 << 252) - 1, 1 << 128, (1 << 128) - 1]


RFC9496 = known_answers.load("rfc9496/ristretto255.json")
RFC9497 = known_answers.load("rfc9497/ristretto255-sha512.json")


def _scalar(value: int) -> bytes:
    return value.to_bytes(32, "little")


def _expected(pk: bytes, c: bytes, d: bytes, d0: bytes, ch: bytes, s: bytes) -> list[bytes]:
    """M, Z, t2, t3 exactly as verify_proof computes them with libsodium for m = 1."""
    m = SODIUM.scalar_mult(d0, c)
    z = SODIUM.scalar_mult(d0, d)
    t2 = SODIUM.add(SODIUM.scalar_mult_base(s), SODIUM.scalar_mult(ch, pk))
    t3 = SODIUM.add(SODIUM.scalar_mult(s, m), SODIUM.scalar_mult(ch, z))
    return [m, z, t2, t3]


def _call(columns: Sequence[Any], n: int) -> Any:
    """single_proof_points on six concatenated columns (pk, C, D, d0, c, s)."""
    pk, c, d, d0, ch, s = columns
    return vartime_numba.single_proof_points(pk, c, d, d0, ch, s, n)


def _points(rows: list[tuple[bytes, ...]]) -> tuple[np.ndarray, list[list[bytes]]]:
    status, *points = _call([b"".join(row[k] for row in rows) for k in range(6)], len(rows))
    return status, [list(p) for p in zip(*points, strict=True)]


def _random_rows(n: int, seed: int) -> list[tuple[bytes, ...]]:
    rng = RandomSource.seeded(seed, "vartime")
    rows = []
    for _ in range(n):
        pk = SODIUM.scalar_mult_base(SODIUM.random_scalar(rng))
        c = SODIUM.hash_to_group(rng.random_bytes(16), b"vartime-C")
        d = SODIUM.hash_to_group(rng.random_bytes(16), b"vartime-D")
        rows.append((pk, c, d, *(SODIUM.random_scalar(rng) for _ in range(3))))
    return rows


# -- (1) the four points against libsodium ---------------------------------------------------
def test_kernel_points_match_libsodium_on_random_and_edge_inputs() -> None:
    rows = _random_rows(240, 1)
    generator = SODIUM.generator()
    minus_g = SODIUM.scalar_mult_base(_scalar(L - 1))
    edge_points = [generator, minus_g, IDENTITY]
    # Every edge scalar in every scalar slot, with edge points in every element slot.
    for i, value in enumerate(EDGE_SCALARS):
        for slot in (3, 4, 5):
            pk, c, d, *scalars = rows[len(rows) % 7 + 3 * i + slot - 3]
            scalars[slot - 3] = _scalar(value)
            point = edge_points[(i + slot) % 3]
            rows.append((point if slot == 3 else pk, point if slot == 4 else c, d, *scalars))
    rows.append((generator, generator, generator, _scalar(1), _scalar(1), _scalar(1)))
    rows.append((minus_g, generator, minus_g, _scalar(L - 1), _scalar(0), _scalar(L - 1)))
    rows.append((IDENTITY, IDENTITY, IDENTITY, _scalar(5), _scalar(7), _scalar(0)))
    assert len(rows) >= 256
    status, points = _points(rows)
    assert not status.any()
    for i, row in enumerate(rows):
        assert points[i] == _expected(*row), f"proof {i}"


def test_kernel_points_match_the_pure_reference() -> None:
    rows = _random_rows(6, 2) + [
        (SODIUM.generator(), SODIUM.generator(), SODIUM.generator(), *map(_scalar, (1, L - 1, 2)))
    ]
    _, points = _points(rows)
    for row, got in zip(rows, points, strict=True):
        pk, c, d = (PURE.deserialize_element(x) for x in row[:3])
        d0, ch, s = (int.from_bytes(x, "little") for x in row[3:])
        m, z = PURE.scalar_mult(d0, c), PURE.scalar_mult(d0, d)
        t2 = PURE.add(PURE.scalar_mult_base(s), PURE.scalar_mult(ch, pk))
        t3 = PURE.add(PURE.scalar_mult(s, m), PURE.scalar_mult(ch, z))
        assert got == [PURE.serialize_element(x) for x in (m, z, t2, t3)]


_scalars = st.one_of(st.sampled_from(EDGE_SCALARS), st.integers(min_value=0, max_value=L - 1))
_points_st = st.one_of(
    st.sampled_from([1, 2, L - 1]), st.integers(min_value=1, max_value=L - 1)
).map(lambda k: SODIUM.scalar_mult_base(_scalar(k)))


@settings(max_examples=150, deadline=None)
@given(pk=_points_st, c=_points_st, d=_points_st, d0=_scalars, ch=_scalars, s=_scalars)
def test_kernel_points_property(pk: bytes, c: bytes, d: bytes, d0: int, ch: int, s: int) -> None:
    row = (pk, c, d, _scalar(d0), _scalar(ch), _scalar(s))
    status, points = _points([row])
    assert status.tolist() == [0]
    assert points[0] == _expected(*row)


def test_kernel_scalar_helpers_match_python_integers() -> None:
    """Montgomery multiplication mod L and the split width-w NAF used for the chains."""
    from primitives.group import _vartime_kernel as kernel

    assert (kernel.BAD_PK, kernel.BAD_C, kernel.BAD_D) == (
        vartime_numba.BAD_PK,
        vartime_numba.BAD_C,
        vartime_numba.BAD_D,
    )
    rng = RandomSource.seeded(3, "vartime-scalars")
    values = EDGE_SCALARS + [int.from_bytes(rng.random_bytes(32), "little") % L for _ in range(50)]
    r_inv = pow(1 << 256, -1, L)
    t = np.empty(10, dtype=np.uint64)
    out = np.empty(8, dtype=np.uint64)
    digits = np.zeros(kernel.NAF_LEN, dtype=np.int64)

    def limbs32(v: int) -> np.ndarray:
        return np.array([(v >> (32 * i)) & 0xFFFFFFFF for i in range(8)], dtype=np.uint64)

    for a, b in zip(values, values[::-1], strict=True):
        kernel.montmul(limbs32(a), limbs32(b), out, t)
        assert sum(int(x) << (32 * i) for i, x in enumerate(out)) == a * b * r_inv % L
        for start, nbits, w in ((0, 128, 5), (128, 128, 5), (0, 253, 5), (0, 253, 8)):
            top = kernel.naf(limbs32(a), start, nbits, w, digits)
            part = (a >> start) & ((1 << nbits) - 1)
            assert sum(int(x) << i for i, x in enumerate(digits)) == part
            nonzero = np.flatnonzero(digits)
            assert top == (int(nonzero[-1]) if nonzero.size else -1)
            assert all(int(digits[i]) % 2 == 1 and abs(int(digits[i])) < 1 << (w - 1)
                       for i in nonzero)  # fmt: skip
            assert (np.diff(nonzero) >= w).all()


# -- (2) verify_single_proofs against verify_proof -------------------------------------------
def _suite_proofs(mode: Mode, n: int, seed: int) -> dict[str, Any]:
    """n single-element proofs by one server: B, C_i, D_i, proof_i as verify_single_proofs takes."""
    suite = get_suite(mode=mode)
    rng = RandomSource.seeded(seed, "vartime-suite")
    _, pk = suite.generate_key_pair(rng)
    sk, pk = suite.derive_key_pair(rng.random_bytes(32), b"vartime")
    info = b"tweak" if mode is Mode.POPRF else b""
    blinded, evaluated, proofs = [], [], []
    for i in range(n):
        _, element = suite.blind(f"input {i}".encode(), rng=rng)
        ev, proof = suite.blind_evaluate(sk, [element], info=info, rng=rng)
        assert proof is not None
        blinded.append(element)
        evaluated.append(ev[0])
        proofs.append((proof[:32], proof[32:]))
    if mode is Mode.VOPRF:  # C = blinded, D = evaluated, B = pk
        b, c, d = pk, blinded, evaluated
    else:  # C = evaluated, D = blinded, B = the tweaked key
        b, c, d = suite.tweaked_key(pk, info), evaluated, blinded
    context = suite.context_string
    return {
        "b": b,
        "c": c,
        "d": d,
        "proofs": proofs,
        "context": context,
        "dst": hash_to_scalar_dst(context),
        "other_key": suite.derive_key_pair(rng.random_bytes(32), b"other")[1],
    }


def _both(case: dict[str, Any], **changes: Any) -> tuple[list[bool], list[bool]]:
    """verify_single_proofs and the per-proof verify_proof loop on the same (changed) case."""
    c = {**case, **changes}
    fast = dleq.verify_single_proofs(
        SODIUM, c["b"], c["c"], c["d"], c["proofs"], context=c["context"], dst=c["dst"]
    )
    slow = [
        dleq.verify_proof(SODIUM, c["b"], [ci], [di], proof, context=c["context"], dst=c["dst"])
        for ci, di, proof in zip(c["c"], c["d"], c["proofs"], strict=True)
    ]
    return fast, slow


@pytest.fixture(scope="module", params=[Mode.VOPRF, Mode.POPRF], ids=["VOPRF", "POPRF"])
def case(request: pytest.FixtureRequest) -> dict[str, Any]:
    return _suite_proofs(request.param, 24, int(request.param))


def test_valid_proofs_verify(case: dict[str, Any]) -> None:
    fast, slow = _both(case)
    assert fast == slow == [True] * len(case["proofs"])


def test_tampered_proofs_fail_exactly_where_tampered(case: dict[str, Any]) -> None:
    proofs = list(case["proofs"])
    one = _scalar(1)
    proofs[1] = (SODIUM.scalar_add(proofs[1][0], one), proofs[1][1])  # c changed
    proofs[4] = (proofs[4][0], SODIUM.scalar_add(proofs[4][1], one))  # s changed
    proofs[6] = (proofs[6][1], proofs[6][0])  # c and s swapped
    proofs[9] = proofs[10]  # another user's proof
    d = list(case["d"])
    d[12], d[13] = d[13], d[12]  # D swapped between two users
    c = list(case["c"])
    c[20] = case["c"][21]  # C of another user
    fast, slow = _both(case, proofs=proofs, d=d, c=c)
    bad = {1, 4, 6, 9, 12, 13, 20}
    assert fast == slow == [i not in bad for i in range(len(proofs))]
    fast, slow = _both(case, b=case["other_key"])
    assert fast == slow == [False] * len(proofs)


def test_rfc9497_vectors_with_batch_size_one_verify() -> None:
    """Every batch-size-1 proof of RFC 9497 A.1 (VOPRF and POPRF), one call per mode."""
    for mode in RFC9497["modes"]:
        if mode["mode"] == Mode.OPRF:
            continue
        suite = get_suite(mode=mode["mode"])
        pk = bytes.fromhex(mode["pkSm"])
        singles = [v for v in mode["vectors"] if v["batch_size"] == 1]
        assert len(singles) == 2
        for vector in singles:
            blinded = bytes.fromhex(vector["blinded_element"][0])
            evaluated = bytes.fromhex(vector["evaluation_element"][0])
            proof = bytes.fromhex(vector["proof"])
            if mode["mode"] == Mode.VOPRF:
                b, c, d = pk, blinded, evaluated
            else:
                b = suite.tweaked_key(pk, bytes.fromhex(vector["info"]))
                c, d = evaluated, blinded
            context = context_string(mode["mode"])
            kwargs: dict[str, Any] = {"context": context, "dst": hash_to_scalar_dst(context)}
            args = ([c], [d], [(proof[:32], proof[32:])])
            assert dleq.verify_single_proofs(SODIUM, b, *args, **kwargs) == [True]
            assert dleq.verify_single_proofs(PURE, b, *args, **kwargs) == [True]
            flipped = [(proof[:32], SODIUM.scalar_add(proof[32:], _scalar(1)))]
            assert dleq.verify_single_proofs(SODIUM, b, [c], [d], flipped, **kwargs) == [False]


# -- (4) the fallback paths give the same answers --------------------------------------------
def test_fallback_paths_agree(case: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    proofs = list(case["proofs"])
    proofs[2] = proofs[3]
    args = (case["c"], case["d"], proofs)
    kwargs = {"context": case["context"], "dst": case["dst"]}
    expected = [i != 2 for i in range(len(proofs))]
    assert dleq.verify_single_proofs(SODIUM, case["b"], *args, **kwargs) == expected
    unaccelerated = registry.create("group", "ristretto255-sodium", accelerate=False)
    assert dleq.verify_single_proofs(unaccelerated, case["b"], *args, **kwargs) == expected
    head = (case["c"][:4], case["d"][:4], proofs[:4])  # the pure backend is slow
    assert dleq.verify_single_proofs(PURE, case["b"], *head, **kwargs) == expected[:4]
    monkeypatch.setattr(vartime_numba.SWITCH, "failures", ["switched off by the test"])
    assert not vartime_numba.SWITCH.usable()
    assert dleq.verify_single_proofs(SODIUM, case["b"], *args, **kwargs) == expected


def test_jit_failure_falls_back_with_a_warning(
    case: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_: object) -> None:
        raise RuntimeError("no LLVM today")

    monkeypatch.setattr(vartime_numba, "single_proof_points", broken)
    monkeypatch.setattr(vartime_numba.SWITCH, "failures", [])
    kwargs = {"context": case["context"], "dst": case["dst"]}
    args = (case["b"], case["c"][:3], case["d"][:3], case["proofs"][:3])
    with pytest.warns(RuntimeWarning, match="falling back to libsodium"):
        assert dleq.verify_single_proofs(SODIUM, *args, **kwargs) == [True] * 3
    assert not vartime_numba.SWITCH.usable()
    assert dleq.verify_single_proofs(SODIUM, *args, **kwargs) == [True] * 3


# -- (5) invalid encodings: the status array names the proof ---------------------------------
def _invalid_encodings() -> list[bytes]:
    g = int.from_bytes(SODIUM.generator(), "little")
    return [bytes.fromhex(h) for h in RFC9496["invalid_encodings"]] + [
        (g | 1 << 255).to_bytes(32, "little"),  # high bit set
        (g + P).to_bytes(32, "little"),  # s + p, non-canonical
        (P - g).to_bytes(32, "little"),  # negative s
    ]


@pytest.mark.parametrize("slot", [0, 1, 2], ids=["pk", "C", "D"])
def test_invalid_encodings_flag_exactly_their_proof(slot: int) -> None:
    flag = (vartime_numba.BAD_PK, vartime_numba.BAD_C, vartime_numba.BAD_D)[slot]
    base = _random_rows(5, 4)
    expected = [_expected(*row) for row in base]
    for k, bad in enumerate(_invalid_encodings()):
        rows = [tuple(row) for row in base]
        index = k % len(rows)
        row = list(rows[index])
        row[slot] = bad
        rows[index] = tuple(row)
        status, points = _points(rows)
        assert status.tolist() == [flag if i == index else 0 for i in range(len(rows))], bad.hex()
        for i in range(len(rows)):
            if i != index:
                assert points[i] == expected[i]
    # Two bad elements of one proof set both bits.
    rows = [tuple(row) for row in base]
    rows[2] = (rows[2][0], _invalid_encodings()[0], _invalid_encodings()[1], *rows[2][3:])
    status, _ = _points(rows)
    assert status.tolist() == [0, 0, vartime_numba.BAD_C | vartime_numba.BAD_D, 0, 0]


@pytest.mark.parametrize("accelerate", [True, False], ids=["kernel", "fallback"])
def test_broken_preconditions_raise_decode_error_naming_the_input(accelerate: bool) -> None:
    group = registry.create("group", "ristretto255-sodium", accelerate=accelerate)
    case = _suite_proofs(Mode.VOPRF, 4, 9)
    kwargs = {"context": case["context"], "dst": case["dst"]}
    not_on_curve = bytes.fromhex(RFC9496["invalid_encodings"][12])

    def run(**changes: Any) -> list[bool]:
        c = {**case, **changes}
        return dleq.verify_single_proofs(group, c["b"], c["c"], c["d"], c["proofs"], **kwargs)

    def replaced(items: list[Any], index: int, value: Any) -> list[Any]:
        return [value if i == index else item for i, item in enumerate(items)]

    with pytest.raises(DecodeError, match=r"c_encodings\[2\]"):
        run(c=replaced(case["c"], 2, not_on_curve))
    with pytest.raises(DecodeError, match=r"d_encodings\[1\].*identity"):
        run(d=replaced(case["d"], 1, IDENTITY))
    with pytest.raises(DecodeError, match=r"d_encodings\[3\]"):
        run(d=replaced(case["d"], 3, case["d"][3][:31]))
    with pytest.raises(DecodeError, match=r"b_enc"):
        run(b=not_on_curve)
    big = _scalar(L)
    with pytest.raises(DecodeError, match=r"proofs\[3\].*order"):
        run(proofs=replaced(case["proofs"], 3, (case["proofs"][3][0], big)))
    with pytest.raises(InvalidInputError, match="equal lengths"):
        run(d=case["d"][:3])
    assert run(c=[], d=[], proofs=[]) == []


def test_single_proof_points_argument_errors() -> None:
    row = _random_rows(1, 5)[0]
    with pytest.raises(InvalidParameterError, match="n must be"):
        _call(row, 0)
    with pytest.raises(InvalidInputError, match=r"d must be 2 concatenated 32-byte strings"):
        _call([x * (1 if k == 2 else 2) for k, x in enumerate(row)], 2)
    with pytest.raises(DecodeError, match=r"s\[1\] must be a scalar below the group order"):
        _call([x * 2 for x in row[:5]] + [row[5] + _scalar(L)], 2)
    with pytest.raises(InvalidInputError, match="ch must be bytes, got str"):
        _call([*row[:4], "x", row[5]], 1)


def test_pure_reference_encoder_agrees_on_kernel_identity_outputs() -> None:
    """Identity products come back as the all-zero encoding, as RFC 9496 encodes the identity."""
    row = (SODIUM.generator(), SODIUM.generator(), SODIUM.generator(), *map(_scalar, (0, 0, 0)))
    _, points = _points([row])
    assert points[0] == [pure.encode(pure.IDENTITY)] * 4 == [IDENTITY] * 4


def test_kernels_warm_up_once_per_process() -> None:
    """warm_up loads both JIT kernels (so no timed call pays for it) and is then a no-op."""
    from primitives.group import msm_numba

    assert vartime_numba.warm_up() is True and msm_numba.warm_up() is True
    hits = vartime_numba.warm_up.cache_info().hits
    assert vartime_numba.warm_up() is True
    assert vartime_numba.warm_up.cache_info().hits == hits + 1  # answered without running again


# -- (6) the prover's composites: M = d0·C, Z = d0·D -----------------------------------------
def _composites(rows: list[tuple[bytes, bytes, bytes]]) -> tuple[np.ndarray, list[bytes], list[bytes]]:
    columns = [b"".join(row[k] for row in rows) for k in range(3)]
    status, ms, zs = vartime_numba.composite_points(*columns, len(rows))
    return status, ms, zs


def test_composite_points_match_libsodium_on_random_and_edge_inputs() -> None:
    rows = [(c, d, d0) for _, c, d, d0, _, _ in _random_rows(60, 5)]
    generator, minus_g = SODIUM.generator(), SODIUM.scalar_mult_base(_scalar(L - 1))
    for i, value in enumerate(EDGE_SCALARS):
        point = (generator, minus_g, IDENTITY)[i % 3]
        rows.append((point, rows[i][1], _scalar(value)))
        rows.append((rows[i][0], point, _scalar(value)))
    status, ms, zs = _composites(rows)
    assert not status.any()
    for i, (c, d, d0) in enumerate(rows):
        assert (ms[i], zs[i]) == (SODIUM.scalar_mult(d0, c), SODIUM.scalar_mult(d0, d)), f"row {i}"


@pytest.mark.parametrize("slot", [0, 1], ids=["C", "D"])
def test_composite_points_flag_exactly_the_bad_encoding(slot: int) -> None:
    flag = (vartime_numba.BAD_C, vartime_numba.BAD_D)[slot]
    base = [(c, d, d0) for _, c, d, d0, _, _ in _random_rows(4, 6)]
    for k, bad in enumerate(_invalid_encodings()):
        rows = list(base)
        row = list(rows[k % 4])
        row[slot] = bad
        rows[k % 4] = (row[0], row[1], row[2])
        status, ms, _ = _composites(rows)
        assert status.tolist() == [flag if i == k % 4 else 0 for i in range(4)], bad.hex()
        assert ms[k % 4] == IDENTITY and all(ms[i] == SODIUM.scalar_mult(base[i][2], base[i][0]) for i in range(4) if i != k % 4)
    with pytest.raises(DecodeError, match=r"d0\[1\] must be a scalar below the group order"):
        vartime_numba.composite_points(base[0][0] * 2, base[0][1] * 2, base[0][2] + _scalar(L), 2)


def _answers(group: Any, n: int = 6) -> list[tuple[bytes, bytes]]:
    suite = get_suite(mode=Mode.VOPRF, group="ristretto255-sodium")
    sk, _ = suite.derive_key_pair(b"\x05" * 32)
    blinded = [suite.blind(b"in %d" % i, rng=RandomSource.seeded(4, f"b/{i}"))[1] for i in range(n)]
    mine = type(suite)(Mode.VOPRF, group)
    return mine.blind_evaluate_each(sk, blinded, [RandomSource.seeded(8, f"p/{i}") for i in range(n)])


def test_evaluate_each_is_the_same_with_and_without_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = _answers(registry.create("group", "ristretto255-sodium", accelerate=False))
    assert _answers(SODIUM) == expected
    calls: list[int] = []
    real = vartime_numba.composite_points
    monkeypatch.setattr(vartime_numba, "composite_points", lambda *a: calls.append(a[-1]) or real(*a))
    assert _answers(SODIUM) == expected and calls == [6]  # the kernel did the work

    def broken(*_: object) -> None:
        raise RuntimeError("no LLVM today")

    monkeypatch.setattr(vartime_numba, "composite_points", broken)
    monkeypatch.setattr(vartime_numba.SWITCH, "failures", [])
    with pytest.warns(RuntimeWarning, match="falling back to libsodium"):
        assert _answers(SODIUM) == expected
    assert not vartime_numba.SWITCH.usable()


def test_a_kernel_that_refuses_good_encodings_is_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = _answers(registry.create("group", "ristretto255-sodium", accelerate=False))
    real = vartime_numba.composite_points

    def refusing(*args: Any) -> Any:
        status, ms, zs = real(*args)
        status[0] = vartime_numba.BAD_D
        return status, ms, zs

    monkeypatch.setattr(vartime_numba, "composite_points", refusing)
    monkeypatch.setattr(vartime_numba.SWITCH, "failures", [])
    with pytest.warns(RuntimeWarning, match="composite kernel refused canonical encodings"):
        assert _answers(SODIUM) == expected
