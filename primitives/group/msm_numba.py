"""Variable-time multi-scalar multiplication ``Σ d_i·P_i`` on ristretto255 encodings, JIT-compiled.

Why it exists: the batched DLEQ proof of RFC 9497 §2.2 folds a batch into the composite
``M = Σ d_i·C[i]`` with *public* weights ``d_i``. libsodium offers only constant-time single
scalar multiplications on encoded points (≈ one scalar multiplication and one point addition per
element, each decoding and re-encoding), while a bucket (Pippenger) multi-scalar multiplication on
decoded points costs a fraction of that. It is used for public scalars only: nothing here runs in
constant time, and the secret-key multiplications stay in libsodium.

Arithmetic (in :mod:`primitives.group._msm_kernel`): field elements of GF(2^255 - 19) are five
64-bit limbs in radix 2^51, multiplied through LLVM intrinsics with 128-bit intermediates; points
are edwards25519 points in extended coordinates (RFC 8032 §5.1.4), decoded as RFC 9496 §4.3.1
prescribes. The limbs of the encodings and the signed digits of the scalars are prepared here with
numpy; the result comes back as canonical coordinates and is encoded by the reference code in
:mod:`primitives.group.ristretto255_pure`.

numba is imported lazily and only here; :data:`SWITCH` says whether the kernel can be used.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from primitives.errors import DecodeError
from primitives.group import GENERATOR_ENCODING
from primitives.group import ristretto255_pure as ref
from primitives.group.jit_switch import JitSwitch

_MASK51 = np.uint64((1 << 51) - 1)


def limbs_to_int(limbs: npt.NDArray[np.uint64]) -> int:
    return sum(int(limb) << (51 * i) for i, limb in enumerate(limbs)) % ref.P


def field_limbs(encodings: bytes, n: int) -> npt.NDArray[np.uint64]:
    """(n, 5) radix-2^51 limbs of the little-endian field elements, top bit dropped."""
    w = np.frombuffer(encodings, dtype="<u8").reshape(n, 4).astype(np.uint64)
    w3 = w[:, 3] & np.uint64(0x7FFFFFFFFFFFFFFF)
    out = np.empty((n, 5), dtype=np.uint64)
    out[:, 0] = w[:, 0] & _MASK51
    out[:, 1] = ((w[:, 0] >> np.uint64(51)) | (w[:, 1] << np.uint64(13))) & _MASK51
    out[:, 2] = ((w[:, 1] >> np.uint64(38)) | (w[:, 2] << np.uint64(26))) & _MASK51
    out[:, 3] = ((w[:, 2] >> np.uint64(25)) | (w3 << np.uint64(39))) & _MASK51
    out[:, 4] = (w3 >> np.uint64(12)) & _MASK51
    return out


def signed_digits(scalars: bytes, n: int, window: int) -> npt.NDArray[np.int64]:
    """(n, windows) digits d_w in [-2^(window-1), 2^(window-1)] with Σ d_w·2^(window·w) = s.

    Scalars are below 2^253, so ceil(254 / window) windows absorb the last carry.
    """
    n_windows = -(-254 // window)
    bits = np.unpackbits(np.frombuffer(scalars, dtype=np.uint8).reshape(n, 32), axis=1,
                         bitorder="little")  # fmt: skip
    padded = np.zeros((n, n_windows * window), dtype=np.int64)
    padded[:, :256] = bits[:, : n_windows * window]
    raw = padded.reshape(n, n_windows, window) @ (np.int64(1) << np.arange(window, dtype=np.int64))
    digits = np.empty((n, n_windows), dtype=np.int64)
    carry = np.zeros(n, dtype=np.int64)
    half, full = 1 << (window - 1), 1 << window
    for w in range(n_windows):
        value = raw[:, w] + carry
        carry = (value > half).astype(np.int64)
        digits[:, w] = value - carry * full
    if carry.any():
        raise DecodeError("scalars must be below 2^253 (reduced mod L)")
    return digits


#: Whether the kernel may run in this process (``SWITCH.usable()``, ``SWITCH.disable(exc)``).
SWITCH = JitSwitch("bucket multi-scalar multiplication")


def window_bits(n: int) -> int:
    """Bucket window for ``n`` points: roughly log2(n) - 2, the Pippenger optimum."""
    for bound, bits in ((32, 4), (128, 5), (512, 6), (2048, 7), (8192, 8)):
        if n < bound:
            return bits
    return 9


@lru_cache(maxsize=1)
def warm_up() -> bool:
    """Load (or, without a cache, compile) the kernel once per process, so that no caller's
    timing includes it; False when it cannot be used (numba missing or the build failed)."""
    one = (1).to_bytes(32, "little")
    return SWITCH.warm_up(lambda: multi_scalar_mult(one, GENERATOR_ENCODING))


def _kernel() -> Any:
    from primitives.group import _msm_kernel

    return _msm_kernel.msm


def multi_scalar_mult(scalars: bytes, elements: bytes) -> bytes:
    """``Σ s_i·P_i`` for concatenated 32-byte scalars and ristretto255 encodings (variable time).

    Encodings must be canonical and non-negative (as ``deserialize_element`` guarantees); the
    curve check of decoding runs here and a DecodeError names the first element that fails.
    """
    n = len(elements) // 32
    if len(elements) != 32 * n or len(scalars) != 32 * n or n == 0:
        raise DecodeError(
            f"scalars and elements must be n >= 1 32-byte strings each, got {len(scalars)} "
            f"and {len(elements)} bytes"
        )
    window = window_bits(n)
    out = np.empty((4, 5), dtype=np.uint64)
    status = _kernel()(field_limbs(elements, n), signed_digits(scalars, n, window), window, out)
    if status >= 0:
        raise DecodeError(f"elements[{status}] must decode to a ristretto255 point")
    x, y, z, t = (limbs_to_int(out[j]) for j in range(4))
    return ref.encode((x, y, z, t))
