"""Batched discrete-log-equality proofs (RFC 9497 §2.2), generic over a :class:`PrimeOrderGroup`.

A proof shows ``k*A == B`` and ``k*C[i] == D[i]`` for every ``i`` with one pair of scalars, however
long the lists: both sides fold the lists into composites ``M = Σ d_i·C[i]`` and ``Z = Σ d_i·D[i]``
with public weights ``d_i`` hashed from the whole batch (§2.2.1 ComputeComposites). The server,
knowing ``k``, computes ``Z = k*M`` instead (§2.2.1 ComputeCompositesFast).

The weighted sums are exposed per index range (:func:`weighted_sum`) so the suite can split a
large batch over threads and add the partial sums; the proof stays one per batch.

:func:`verify_single_proofs` verifies many independent proofs over one element each (m = 1), with
the JIT-compiled variable-time kernel of :mod:`primitives.group.vartime_numba` when the group is
the libsodium backend.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from primitives.errors import DecodeError, InvalidInputError
from primitives.group import PrimeOrderGroup
from primitives.voprf.hashing import framed

Group = PrimeOrderGroup[Any, Any]

#: ComputeComposites writes each index with ``I2OSP(i, 2)``, so indices stay below 2^16; a batch
#: holds at most 2^16 - 1 elements (the bound every layer above checks as well).
MAX_BATCH = (1 << 16) - 1


def check_batch(name: str, size: int) -> None:
    """InvalidInputError unless ``size`` elements fit one proof (1 to :data:`MAX_BATCH`)."""
    if not 1 <= size <= MAX_BATCH:
        raise InvalidInputError(f"{name} must hold 1 to {MAX_BATCH} elements, got {size}")


def _check_pair(c_elements: Sequence[Any], d_elements: Sequence[Any]) -> None:
    if len(c_elements) != len(d_elements):
        raise InvalidInputError(
            f"c_elements and d_elements must have equal lengths, got "
            f"{len(c_elements)} and {len(d_elements)}"
        )
    check_batch("c_elements", len(c_elements))


def composite_seed(b_enc: bytes, context: bytes) -> bytes:
    """``seed = Hash(framed(Bm) || framed("Seed-" || contextString))`` (§2.2.1)."""
    return hashlib.sha512(framed(b_enc) + framed(b"Seed-" + context)).digest()


def composite_weight(
    group: Group, seed: bytes, index: int, c_enc: bytes, d_enc: bytes, dst: bytes
) -> Any:
    """``d_i = HashToScalar(framed(seed) || I2OSP(i, 2) || framed(Ci) || framed(Di) || "Composite")``."""
    if not 0 <= index < 1 << 16:
        raise InvalidInputError(f"index must be in [0, {1 << 16}), got {index}")
    transcript = framed(seed) + index.to_bytes(2, "big") + framed(c_enc) + framed(d_enc)
    return group.hash_to_scalar(transcript + b"Composite", dst)


def weighted_sum(
    group: Group,
    seed: bytes,
    dst: bytes,
    start: int,
    c_elements: Sequence[Any],
    c_encodings: Sequence[bytes],
    d_encodings: Sequence[bytes],
    d_elements: Sequence[Any] | None = None,
) -> tuple[Any, Any | None]:
    """Partial composites over indices ``start .. start+len-1``: ``(Σ d_i·C[i], Σ d_i·D[i] | None)``.

    ``d_elements`` is given on the verifying side only; the prover derives Z from M.
    """
    weights = [
        composite_weight(group, seed, start + j, c_enc, d_enc, dst)
        for j, (c_enc, d_enc) in enumerate(zip(c_encodings, d_encodings, strict=True))
    ]
    # The weights are public, so a variable-time multi-scalar multiplication is allowed here.
    m = group.multi_scalar_mult(weights, c_elements)
    z = group.multi_scalar_mult(weights, d_elements) if d_elements is not None else None
    return m, z


def sum_elements(group: Group, parts: Sequence[Any]) -> Any:
    total = group.identity()
    for part in parts:
        total = group.add(total, part)
    return total


def challenge(group: Group, b_enc: bytes, m: Any, z: Any, t2: Any, t3: Any, dst: bytes) -> Any:
    """``c = HashToScalar(framed(Bm) || framed(M) || framed(Z) || framed(t2) || framed(t3) || "Challenge")``."""
    transcript = b"".join(
        framed(x)
        for x in (
            b_enc,
            group.serialize_element(m),
            group.serialize_element(z),
            group.serialize_element(t2),
            group.serialize_element(t3),
        )
    )
    return group.hash_to_scalar(transcript + b"Challenge", dst)


def prove_composites(
    group: Group, k: Any, b_enc: bytes, m: Any, r: Any, dst: bytes, z: Any = None
) -> tuple[Any, Any]:
    """The rest of GenerateProof once M is known, with A the generator: returns ``(c, s)``.
    ``z``: Z = k·M when the caller has it already (computed without k, e.g. as d·D)."""
    if z is None:
        z = group.scalar_mult(k, m)
    t2 = group.scalar_mult_base(r)
    t3 = group.scalar_mult(r, m)
    c = challenge(group, b_enc, m, z, t2, t3, dst)
    s = group.scalar_sub(r, group.scalar_mul(c, k))
    return c, s


def verify_composites(
    group: Group, b: Any, b_enc: bytes, m: Any, z: Any, c: Any, s: Any, dst: bytes
) -> bool:
    """The rest of VerifyProof once M and Z are known, with A the generator."""
    t2 = group.add(group.scalar_mult_base(s), group.scalar_mult(c, b))
    t3 = group.add(group.scalar_mult(s, m), group.scalar_mult(c, z))
    expected = challenge(group, b_enc, m, z, t2, t3, dst)
    return group.serialize_scalar(expected) == group.serialize_scalar(c)


def generate_proof(
    group: Group,
    k: Any,
    b: Any,
    c_elements: Sequence[Any],
    d_elements: Sequence[Any],
    r: Any,
    *,
    context: bytes,
    dst: bytes,
) -> tuple[Any, Any]:
    """GenerateProof(k, G, B, C, D) of §2.2.1 with explicit randomness ``r``, in one thread."""
    _check_pair(c_elements, d_elements)
    b_enc = group.serialize_element(b)
    seed = composite_seed(b_enc, context)
    c_enc = [group.serialize_element(x) for x in c_elements]
    d_enc = [group.serialize_element(x) for x in d_elements]
    m, _ = weighted_sum(group, seed, dst, 0, c_elements, c_enc, d_enc)
    return prove_composites(group, k, b_enc, m, r, dst)


def verify_proof(
    group: Group,
    b: Any,
    c_elements: Sequence[Any],
    d_elements: Sequence[Any],
    proof: tuple[Any, Any],
    *,
    context: bytes,
    dst: bytes,
) -> bool:
    """VerifyProof(G, B, C, D, proof) of §2.2.2, in one thread."""
    _check_pair(c_elements, d_elements)
    b_enc = group.serialize_element(b)
    seed = composite_seed(b_enc, context)
    c_enc = [group.serialize_element(x) for x in c_elements]
    d_enc = [group.serialize_element(x) for x in d_elements]
    m, z = weighted_sum(group, seed, dst, 0, c_elements, c_enc, d_enc, d_elements)
    return verify_composites(group, b, b_enc, m, z, proof[0], proof[1], dst)


def kernel_applies(group: Group) -> bool:
    """The libsodium backend with acceleration on, and a usable numba kernel."""
    from primitives.group import vartime_numba
    from primitives.group.ristretto255_sodium import SodiumRistretto255

    # ``accelerate=False`` asks the backend for libsodium only; honour it here as well.
    return (
        isinstance(group, SodiumRistretto255)
        and group.accelerate
        and vartime_numba.SWITCH.usable()
    )


def _kernel_points(
    group: Group,
    b_enc: bytes,
    c_encodings: Sequence[bytes],
    d_encodings: Sequence[bytes],
    proofs: Sequence[tuple[bytes, bytes]],
    weights: Sequence[bytes],
) -> tuple[list[bytes], list[bytes], list[bytes], list[bytes]] | None:
    """M, Z, t2, t3 of every proof from the kernel; None when the kernel fails to build or run."""
    from primitives.group import vartime_numba

    n = len(proofs)
    try:
        status, ms, zs, t2s, t3s = vartime_numba.single_proof_points(
            b_enc * n,
            b"".join(c_encodings),
            b"".join(d_encodings),
            b"".join(weights),
            b"".join(proof[0] for proof in proofs),
            b"".join(proof[1] for proof in proofs),
            n,
        )
    except InvalidInputError:  # DecodeError included: a precondition the caller broke
        raise
    except Exception as exc:  # a JIT that fails to build must not take verification down
        vartime_numba.SWITCH.disable(exc)
        return None
    if status.any():
        i = int(status.nonzero()[0][0])
        bits = int(status[i])
        name = (
            "b_enc"
            if bits & vartime_numba.BAD_PK
            else f"c_encodings[{i}]"
            if bits & vartime_numba.BAD_C
            else f"d_encodings[{i}]"
        )
        raise DecodeError(f"{name}: element encoding must be canonical and decode to a point")
    return ms, zs, t2s, t3s


def verify_single_proofs(
    group: Group,
    b_enc: bytes,
    c_encodings: Sequence[bytes],
    d_encodings: Sequence[bytes],
    proofs: Sequence[tuple[bytes, bytes]],
    *,
    context: bytes,
    dst: bytes,
) -> list[bool]:
    """VerifyProof (§2.2.2) with m = 1 for each ``(C_i, D_i, proofs[i])`` under one key B.

    Entry i is exactly ``verify_proof(group, B, [C_i], [D_i], proofs[i], ...)``. Inputs are
    encodings: ``b_enc`` and the ``C_i, D_i`` canonical non-identity elements, each proof a pair
    ``(c, s)`` of 32-byte scalars below the group order, as the caller's deserialization left them.
    A broken precondition raises DecodeError naming the argument and index (it does not count as a
    failed proof). With the libsodium backend the points come from the variable-time kernel of
    :mod:`primitives.group.vartime_numba` (all inputs are public); otherwise, without numba or
    after a JIT failure, each proof goes through :func:`verify_proof`.
    """
    n = len(proofs)
    if len(c_encodings) != n or len(d_encodings) != n:
        raise InvalidInputError(
            f"c_encodings, d_encodings and proofs must have equal lengths, got "
            f"{len(c_encodings)}, {len(d_encodings)} and {n}"
        )
    if n == 0:
        return []
    if kernel_applies(group):
        _check_encoded_inputs(group, b_enc, c_encodings, d_encodings, proofs)
        seed = composite_seed(b_enc, context)
        weights = [
            group.serialize_scalar(composite_weight(group, seed, 0, c_enc, d_enc, dst))
            for c_enc, d_enc in zip(c_encodings, d_encodings, strict=True)
        ]
        points = _kernel_points(group, b_enc, c_encodings, d_encodings, proofs, weights)
        if points is not None:
            # Elements of the libsodium backend are their encodings: challenge() takes the bytes.
            return [
                group.serialize_scalar(challenge(group, b_enc, m, z, t2, t3, dst)) == proof[0]
                for m, z, t2, t3, proof in zip(*points, proofs, strict=True)
            ]
    b = _deserialize_element(group, b_enc, "b_enc")
    results = []
    for i, (c_enc, d_enc, proof) in enumerate(zip(c_encodings, d_encodings, proofs, strict=True)):
        c_elem = _deserialize_element(group, c_enc, f"c_encodings[{i}]")
        d_elem = _deserialize_element(group, d_enc, f"d_encodings[{i}]")
        try:
            scalars = (group.deserialize_scalar(proof[0]), group.deserialize_scalar(proof[1]))
        except DecodeError as exc:
            raise DecodeError(f"proofs[{i}]: {exc}") from None
        results.append(
            verify_proof(group, b, [c_elem], [d_elem], scalars, context=context, dst=dst)
        )
    return results


def _check_encoded_inputs(
    group: Group,
    b_enc: bytes,
    c_encodings: Sequence[bytes],
    d_encodings: Sequence[bytes],
    proofs: Sequence[tuple[bytes, bytes]],
) -> None:
    """The cheap part of deserialization before the kernel (which checks the curve itself).

    Lengths and the identity for elements, the full scalar check for proofs: the same errors as
    the backend's ``deserialize_*`` raise on the fallback path, named by argument and index.
    """
    identity = group.serialize_element(group.identity())
    size = group.element_size
    named = [("b_enc", [b_enc]), ("c_encodings", c_encodings), ("d_encodings", d_encodings)]
    for name, encodings in named:
        for i, enc in enumerate(encodings):
            if isinstance(enc, bytes) and len(enc) == size and enc != identity:
                continue
            where = name if name == "b_enc" else f"{name}[{i}]"
            if enc == identity:
                raise DecodeError(f"{where}: element must not be the identity")
            got = len(enc) if isinstance(enc, bytes) else type(enc).__name__
            raise DecodeError(f"{where}: element must be {size} bytes, got {got}")
    for i, proof in enumerate(proofs):
        try:
            group.deserialize_scalar(proof[0])
            group.deserialize_scalar(proof[1])
        except DecodeError as exc:
            raise DecodeError(f"proofs[{i}]: {exc}") from None


def _deserialize_element(group: Group, data: bytes, name: str) -> Any:
    try:
        return group.deserialize_element(data)
    except DecodeError as exc:
        raise DecodeError(f"{name}: {exc}") from None
