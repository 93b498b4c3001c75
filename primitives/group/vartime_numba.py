"""Variable-time M, Z, t2, t3 of single-element DLEQ proofs (RFC 9497 §2.2.2, m = 1), JIT-compiled:
all four for a verifier (:func:`single_proof_points`), M and Z for a prover (:func:`composite_points`).

Why it exists: verifying a proof over one element costs six libsodium scalar multiplications and
two additions, each decoding, multiplying in constant time and re-encoding. Everything a verifier
handles is public, so :mod:`primitives.group._vartime_kernel` computes the four points in
variable time on decoded points (shared doublings, precomputed tables, one inversion for the four
encodings) for many independent proofs in one call. Nothing is shared between proofs except the
fixed table of the generator; secret-key operations stay in libsodium.

Preconditions (the kernel does not re-derive them): scalars are canonical, i.e. below the group
order L (checked here, DecodeError otherwise); element encodings should come from
``deserialize_element`` or a group operation. The kernel still checks that each encoding is
canonical and non-negative and decodes, and reports failures per proof in the status array
instead of raising, so one bad proof does not hide the results of the others.

numba is imported lazily and only through the kernel module; :data:`SWITCH` says whether the
kernel can be used in this process.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from primitives.errors import DecodeError, InvalidInputError, InvalidParameterError
from primitives.group import ELEMENT_SIZE, GENERATOR_ENCODING, RISTRETTO255_ORDER, SCALAR_SIZE
from primitives.group.jit_switch import JitSwitch

#: Status bits: the public key, C or D of that proof is not a canonical, decodable encoding.
BAD_PK = 1
BAD_C = 2
BAD_D = 4

_L_WORDS = tuple(np.uint64((RISTRETTO255_ORDER >> (64 * i)) & ((1 << 64) - 1)) for i in range(4))
#: Whether the kernel may run in this process (``SWITCH.usable()``, ``SWITCH.disable(exc)``).
SWITCH = JitSwitch("variable-time proof kernel")


@lru_cache(maxsize=1)
def warm_up() -> bool:
    """Load (or, without a cache, compile) the kernels once per process, so that no caller's
    timing includes it; False when they cannot be used (numba missing or the build failed)."""
    generator = GENERATOR_ENCODING
    one = (1).to_bytes(SCALAR_SIZE, "little")

    def both() -> None:
        single_proof_points(generator, generator, generator, one, one, one, 1)
        composite_points(generator, generator, one, 1)

    return SWITCH.warm_up(both)


@lru_cache(maxsize=1)
def _kernel() -> tuple[Any, npt.NDArray[np.uint64]]:
    """The compiled kernel and the generator table (built once per process)."""
    from primitives.group import _vartime_kernel

    return _vartime_kernel.proof_points, _vartime_kernel.base_table()


def composite_points(c: bytes, d: bytes, d0: bytes, n: int) -> tuple[npt.NDArray[np.uint8], list[bytes], list[bytes]]:
    """``(status, M, Z)`` for n single-element proofs: ``M = d0·C`` and ``Z = d0·D`` (VARIABLE
    time, public inputs only), what a prover computes besides its secret-key products.

    ``c`` and ``d`` are n concatenated 32-byte element encodings, ``d0`` n composite weights
    below L. ``status[i]`` is 0, or the BAD_C | BAD_D bits of proof i's encodings that are not
    canonical or do not decode (its M and Z are then ``bytes(32)`` and meaningless).
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidParameterError(f"n must be an integer >= 1, got {n!r}")
    cc, dd = (_rows(name, data, n, ELEMENT_SIZE) for name, data in (("c", c), ("d", d)))
    weights = _rows("d0", d0, n, SCALAR_SIZE)
    _check_scalars("d0", weights)
    from primitives.group import _vartime_kernel

    status = np.empty(n, dtype=np.uint8)
    out = np.empty((n, 2, 32), dtype=np.uint8)
    _vartime_kernel.composite_points(cc, dd, weights, status, out)
    ms, zs = out[:, 0].tobytes(), out[:, 1].tobytes()
    return status, [ms[32 * i : 32 * i + 32] for i in range(n)], [zs[32 * i : 32 * i + 32] for i in range(n)]


def _rows(name: str, data: bytes, n: int, size: int) -> npt.NDArray[np.uint8]:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise InvalidInputError(f"{name} must be bytes, got {type(data).__name__}")
    if len(data) != size * n:
        raise InvalidInputError(
            f"{name} must be {n} concatenated {size}-byte strings ({size * n} bytes), "
            f"got {len(data)} bytes"
        )
    return np.frombuffer(data, dtype=np.uint8).reshape(n, size)


def _check_scalars(name: str, rows: npt.NDArray[np.uint8]) -> None:
    """DecodeError naming the first scalar that is not below L (compared on 64-bit words)."""
    words = rows.view("<u8").astype(np.uint64)
    below = np.zeros(rows.shape[0], dtype=bool)
    equal = np.ones(rows.shape[0], dtype=bool)
    for k in range(3, -1, -1):
        below |= equal & (words[:, k] < _L_WORDS[k])
        equal &= words[:, k] == _L_WORDS[k]
    if not below.all():
        index = int(np.flatnonzero(~below)[0])
        raise DecodeError(
            f"{name}[{index}] must be a scalar below the group order L, got "
            f"{bytes(rows[index]).hex()}"
        )


def single_proof_points(
    pk: bytes, c: bytes, d: bytes, d0: bytes, ch: bytes, s: bytes, n: int
) -> tuple[npt.NDArray[np.uint8], list[bytes], list[bytes], list[bytes], list[bytes]]:
    """``(status, M, Z, t2, t3)`` for n proofs: ``M = d0·C``, ``Z = d0·D``, ``t2 = s·G + c·pk``,
    ``t3 = s·M + c·Z`` (VARIABLE time, public inputs only).

    Every argument but ``n`` is n concatenated 32-byte strings: ``pk``, ``c`` (the C_i), ``d``
    (the D_i) element encodings; ``d0`` (composite weights), ``ch`` (challenges) and ``s``
    little-endian scalars below L. ``status[i]`` is 0, or the BAD_PK | BAD_C | BAD_D bits of the
    encodings of proof i that are not canonical or do not decode; its four points are then
    ``bytes(32)`` and meaningless. The identity encoding is accepted (its products are the
    identity, as libsodium's are).
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidParameterError(f"n must be an integer >= 1, got {n!r}")
    elements = [
        _rows(name, data, n, ELEMENT_SIZE) for name, data in (("pk", pk), ("c", c), ("d", d))
    ]
    scalars = [
        _rows(name, data, n, SCALAR_SIZE) for name, data in (("d0", d0), ("ch", ch), ("s", s))
    ]
    for name, rows in zip(("d0", "ch", "s"), scalars, strict=True):
        _check_scalars(name, rows)
    kernel, base = _kernel()
    status = np.empty(n, dtype=np.uint8)
    out = np.empty((n, 4, 32), dtype=np.uint8)
    kernel(*elements, *scalars, base, status, out)
    columns = []
    for j in range(4):
        blob = out[:, j].tobytes()
        columns.append([blob[32 * i : 32 * i + 32] for i in range(n)])
    return status, columns[0], columns[1], columns[2], columns[3]
