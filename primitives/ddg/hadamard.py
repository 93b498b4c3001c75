"""The randomized Hadamard rotation of the distributed discrete Gaussian (KLS21 §4.2).

``R x = H D x / √d'`` with ``H`` the Sylvester–Hadamard matrix of order ``d' = 2^⌈log2 d⌉`` and
``D`` a diagonal of random signs drawn from a *public* seed, so every party rebuilds the same
rotation. ``H/√d'`` is symmetric and orthogonal with ``(H/√d')² = I``, hence ``R⁻¹ y = D H y/√d'``.
The rotation spreads a vector's mass evenly over coordinates ("flattening"), which keeps per-
coordinate sums small enough for a short modulus and makes rounding errors isotropic.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import numpy.typing as npt

from primitives.errors import InvalidInputError, InvalidParameterError
from primitives.randomness import RandomSource

ROTATION_LABEL = "ddg/rotation-signs"


def padded_dimension(dim: int) -> int:
    """``2^⌈log2 dim⌉``: the Hadamard order for vectors of length ``dim`` (>= 1)."""
    if isinstance(dim, bool) or not isinstance(dim, int | np.integer) or dim < 1:
        raise InvalidParameterError(f"dim must be an integer >= 1, got {dim!r}")
    return 1 << (int(dim) - 1).bit_length()


def is_power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


_BLOCK = 32


@functools.cache
def _sylvester(order: int) -> npt.NDArray[np.float64]:
    """The unnormalized Sylvester–Hadamard matrix ``H_order`` (order a power of two)."""
    h = np.ones((1, 1), dtype=np.float64)
    while h.shape[0] < order:
        h = np.block([[h, h], [h, -h]])
    h.setflags(write=False)
    return h


def fwht(x: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Normalized fast Walsh–Hadamard transform of each row: ``x H / √d'`` (a new array).

    ``x`` has shape ``(n, d')`` or ``(d',)`` with ``d'`` a power of two. ``O(d' log d')`` per row:
    a 32×32 block product, then in-place butterfly passes vectorized over rows and blocks.
    """
    y = np.array(x, dtype=np.float64, copy=True)
    squeeze = y.ndim == 1
    if squeeze:
        y = y[None, :]
    if y.ndim != 2 or not is_power_of_two(y.shape[1]):
        raise InvalidInputError(
            f"x must have shape (n, d') with d' a power of two, got {np.shape(x)}"
        )
    rows, d = y.shape
    # The lowest log2(base) butterfly stages as one small matrix product (Sylvester order: the
    # last axis of the reshape is the low bits); the remaining stages work on contiguous blocks
    # of >= base elements, where numpy's strided loops are efficient.
    base = min(d, _BLOCK)
    y = (y.reshape(-1, base) @ _sylvester(base)).reshape(rows, d)
    h = base
    while h < d:
        blocks = y.reshape(rows, d // (2 * h), 2, h)
        a = blocks[:, :, 0, :]
        b = blocks[:, :, 1, :]
        a += b  # a ← a + b
        b *= -2.0
        b += a  # b ← (a + b) − 2b = a − b, without a temporary
        h *= 2
    y *= 1.0 / math.sqrt(d)
    return y[0] if squeeze else y


def rotation_signs(seed: bytes, padded_dim: int) -> npt.NDArray[np.float64]:
    """The public ±1 diagonal ``D`` of length ``padded_dim``, derived from ``seed``."""
    if not isinstance(seed, bytes) or not seed:
        raise InvalidParameterError("rotation_seed must be non-empty bytes")
    if not is_power_of_two(padded_dim):
        raise InvalidParameterError(f"padded_dim must be a power of two, got {padded_dim}")
    bits = RandomSource.seeded(seed, ROTATION_LABEL).integers_below(2, padded_dim)
    return 1.0 - 2.0 * bits.astype(np.float64)


def rotate(x: npt.NDArray[np.float64], signs: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``R x`` for each row of ``x`` (shape ``(n, d')``, already zero-padded)."""
    return fwht(x * signs)


def unrotate(y: npt.NDArray[np.float64], signs: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``R⁻¹ y = D H y / √d'`` for each row of ``y``."""
    out: npt.NDArray[np.float64] = fwht(y) * signs
    return out
