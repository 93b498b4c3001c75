"""Variable-time multi-scalar multiplication ``Σ d_i·P_i`` on ristretto255 encodings, JIT-compiled.

Why it exists: the batched DLEQ proof of RFC 9497 §2.2 folds a batch into the composite
``M = Σ d_i·C[i]`` with *public* weights ``d_i``. libsodium offers only constant-time single
scalar multiplications on encoded points (≈ one scalar multiplication and one point addition per
element, each decoding and re-encoding), while a bucket (Pippenger) multi-scalar multiplication on
decoded points costs a fraction of that. It is used for public scalars only: nothing here runs in
constant time, and the secret-key multiplications stay in libsodium.

Arithmetic: field elements of GF(2^255 - 19) are tuples of ten signed int64 limbs in radix
2^25.5 (limb ``i`` has weight ``2^ceil(25.5·i)``); products stay below 2^61, so no 128-bit type is
needed. Points are edwards25519 points in extended coordinates (RFC 8032 §5.1.4); decoding follows
RFC 9496 §4.3.1. The result is returned as canonical coordinates and encoded by the reference code
in :mod:`primitives.group.ristretto255_pure`.

numba is imported lazily and only here; :func:`available` says whether it can be used.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from primitives.errors import DecodeError
from primitives.group import ristretto255_pure as ref

# Bit offset and width of each limb.
OFFSETS = (0, 26, 51, 77, 102, 128, 153, 179, 204, 230)
WIDTHS = (26, 25, 26, 25, 26, 25, 26, 25, 26, 25)


def int_to_limbs(value: int) -> tuple[int, ...]:
    value %= ref.P
    return tuple((value >> off) & ((1 << w) - 1) for off, w in zip(OFFSETS, WIDTHS, strict=True))


def limbs_to_int(limbs: npt.NDArray[np.int64] | tuple[int, ...]) -> int:
    return sum(int(limb) << off for limb, off in zip(limbs, OFFSETS, strict=True)) % ref.P


@lru_cache(maxsize=1)
def available() -> bool:
    """True when numba can be imported (it ships with galois, a declared dependency)."""
    try:
        import numba  # noqa: F401
    except ImportError:  # pragma: no cover - depends on the environment
        return False
    return True


def window_bits(n: int) -> int:
    """Bucket window for ``n`` points: roughly log2(n) - 2, the Pippenger optimum."""
    for bound, bits in ((32, 4), (128, 5), (512, 6), (2048, 7), (8192, 8)):
        if n < bound:
            return bits
    return 9


def _kernel() -> Any:
    from primitives.group import _msm_kernel

    return _msm_kernel.msm


def multi_scalar_mult(scalars: bytes, elements: bytes) -> bytes:
    """``Σ s_i·P_i`` for concatenated 32-byte scalars and ristretto255 encodings (variable time).

    Encodings must be canonical and non-negative (as :meth:`deserialize_element` guarantees);
    the curve equation is checked here and a DecodeError names the first element that fails.
    """
    n = len(elements) // 32
    if len(elements) != 32 * n or len(scalars) != 32 * n or n == 0:
        raise DecodeError(
            f"scalars and elements must be n >= 1 32-byte strings each, got {len(scalars)} "
            f"and {len(elements)} bytes"
        )
    out = np.empty((4, 10), dtype=np.int64)
    status = _kernel()(
        np.frombuffer(scalars, dtype=np.uint8).reshape(n, 32),
        np.frombuffer(elements, dtype=np.uint8).reshape(n, 32),
        window_bits(n),
        out,
    )
    if status >= 0:
        raise DecodeError(f"elements[{status}] must decode to a ristretto255 point")
    point = tuple(limbs_to_int(out[j]) for j in range(4))
    return ref.encode((point[0], point[1], point[2], point[3]))
