"""Batched discrete-log-equality proofs (RFC 9497 §2.2), generic over a :class:`PrimeOrderGroup`.

A proof shows ``k*A == B`` and ``k*C[i] == D[i]`` for every ``i`` with one pair of scalars, however
long the lists: both sides fold the lists into composites ``M = Σ d_i·C[i]`` and ``Z = Σ d_i·D[i]``
with public weights ``d_i`` hashed from the whole batch (§2.2.1 ComputeComposites). The server,
knowing ``k``, computes ``Z = k*M`` instead (§2.2.1 ComputeCompositesFast).

The weighted sums are exposed per index range (:func:`weighted_sum`) so the suite can split a
large batch over threads and add the partial sums; the proof stays one per batch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from primitives.group import PrimeOrderGroup
from primitives.voprf.hashing import framed

Group = PrimeOrderGroup[Any, Any]

#: ``I2OSP(i, 2)`` bounds the batch: at most 2^16 elements share a proof.
MAX_BATCH = 1 << 16


def composite_seed(b_enc: bytes, context: bytes) -> bytes:
    """``seed = Hash(framed(Bm) || framed("Seed-" || contextString))`` (§2.2.1)."""
    return hashlib.sha512(framed(b_enc) + framed(b"Seed-" + context)).digest()


def composite_weight(
    group: Group, seed: bytes, index: int, c_enc: bytes, d_enc: bytes, dst: bytes
) -> Any:
    """``d_i = HashToScalar(framed(seed) || I2OSP(i, 2) || framed(Ci) || framed(Di) || "Composite")``."""
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
    group: Group, k: Any, b_enc: bytes, m: Any, r: Any, dst: bytes
) -> tuple[Any, Any]:
    """The rest of GenerateProof once M is known, with A the generator: returns ``(c, s)``."""
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
    b_enc = group.serialize_element(b)
    seed = composite_seed(b_enc, context)
    c_enc = [group.serialize_element(x) for x in c_elements]
    d_enc = [group.serialize_element(x) for x in d_elements]
    m, z = weighted_sum(group, seed, dst, 0, c_elements, c_enc, d_enc, d_elements)
    return verify_composites(group, b, b_enc, m, z, proof[0], proof[1], dst)
