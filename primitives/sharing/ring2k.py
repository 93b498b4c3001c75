"""Additive sharing over the ring ``Z_{2^b}`` (design §5; Prio/SecAgg-style masking).

``share(x) = (r, x - r mod 2^b)`` with ``r`` uniform from the caller's :class:`RandomSource`.
Arithmetic runs on uint64 arrays: numpy's wrap-around modulo ``2^64`` followed by a mask with
``2^b - 1`` is exactly reduction mod ``2^b`` because ``2^b`` divides ``2^64``. That makes
aggregation one vectorized sum plus one mask, whatever the number of users.

The ring is the natural home of the DDG encoder's output (design §4.4), which already wraps its
integers mod ``2^b``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from primitives.errors import InvalidInputError, InvalidParameterError
from primitives.randomness import RandomSource
from primitives.sharing import ShareBatch, check_index
from primitives.sharing.wire import (
    as_residues,
    check_out,
    pack_words,
    stream_word_bytes,
    unpack_words,
    word_bytes,
    words_from_stream,
)

#: Coordinates per block when drawing masks for many users.
CHUNK_COORDINATES = 1 << 18



@dataclass(frozen=True, slots=True, kw_only=True)
class AdditiveRing2k:
    """Two-party additive shares of ``(n, d)`` integer arrays mod ``2^bits`` (``1 <= bits <= 64``).

    Wire form of one user's share: ``d`` little-endian words of ``ceil(bits/8)`` bytes.
    """

    name: ClassVar[str] = "additive-ring2k"
    bits: int = 32

    def __post_init__(self) -> None:
        if isinstance(self.bits, bool) or not isinstance(self.bits, int):
            raise InvalidParameterError(f"bits must be an int, got {type(self.bits).__name__}")
        if not 1 <= self.bits <= 64:
            raise InvalidParameterError(f"bits must be in [1, 64], got {self.bits}")

    # -- ring constants ----------------------------------------------------------------------
    @property
    def modulus(self) -> int:
        return 1 << self.bits

    @property
    def mask(self) -> np.uint64:
        """``2^bits - 1``: ``x & mask`` is ``x mod 2^bits`` for uint64 ``x``."""
        return np.uint64(self.modulus - 1)

    @property
    def word_bytes(self) -> int:
        """Bytes per coordinate on the wire: ``ceil(bits / 8)``."""
        return word_bytes(self.modulus)

    def share_sizes(self, dim: int) -> tuple[int, int]:
        return dim * self.word_bytes, dim * self.word_bytes

    # -- sharing -----------------------------------------------------------------------------
    def random_elements(self, count: int, rng: RandomSource) -> npt.NDArray[np.uint64]:
        """``count`` uniform ring elements, drawing only as many stream bytes as the word needs."""
        raw = rng.random_bytes(count * stream_word_bytes(self.bits))
        return words_from_stream(raw, count, self.bits)

    def share(self, values: npt.ArrayLike, rng: RandomSource) -> tuple[ShareBatch, ShareBatch]:
        """Split ``(n, d)`` residues into ``(mask, values - mask)``; the mask is uniform."""
        x = as_residues(values, self.modulus, name="values", ndim=2)
        n, dim = x.shape
        if dim < 1:
            raise InvalidInputError(f"values must have at least one column, got shape {x.shape}")
        mask = np.empty((n, dim), dtype=np.uint64)
        other = np.empty((n, dim), dtype=np.uint64)
        # Row blocks of ~2^18 coordinates keep the keystream and temporaries in cache (several
        # times faster than one huge draw); the stream is consumed in the same order either way.
        step = max(1, CHUNK_COORDINATES // dim)
        for start in range(0, n, step):
            stop = min(n, start + step)
            block = self.random_elements((stop - start) * dim, rng).reshape(stop - start, dim)
            mask[start:stop] = block
            np.subtract(x[start:stop], block, out=other[start:stop])
        other &= self.mask
        return (
            ShareBatch(modulus=self.modulus, dim=dim, data=mask),
            ShareBatch(modulus=self.modulus, dim=dim, data=other),
        )

    @property
    def ring_modulus(self) -> int:
        """``2^bits``: a ring reconstructs in itself."""
        return self.modulus

    def add_integers(self, total: npt.ArrayLike, integers: npt.ArrayLike) -> npt.NDArray[np.uint64]:
        """``total + integers mod 2^bits`` for signed ``integers`` (S_tag's top-up noise)."""
        arr = np.asarray(total, dtype=np.uint64)
        out: npt.NDArray[np.uint64] = (arr.astype(np.int64) + np.asarray(integers, dtype=np.int64)).astype(np.uint64) & self.mask
        return out

    def reconstruct(
        self, a: npt.ArrayLike, b: npt.ArrayLike, *, out: npt.NDArray[np.uint64] | None = None
    ) -> npt.NDArray[np.uint64]:
        """Elementwise ``(a + b) mod 2^bits`` of two shares (or two aggregates), into ``out``
        when given (it may be ``a``: the sum is element by element)."""
        if out is not None:
            out = check_out(out, np.shape(a))
        if (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.dtype == np.uint64
            and b.dtype == np.uint64
            and a.shape == b.shape
        ):
            # Hot path (the server reconstructs every bucket at once): two max reductions check
            # both ranges without a temporary array, before anything is written to ``out``
            # (which may be ``a``); then one addition and one mask, in place.
            if self.bits < 64 and a.size and max(int(a.max()), int(b.max())) >= self.modulus:
                as_residues(a, self.modulus, name="first share")
                as_residues(b, self.modulus, name="second share")
            target = np.add(a, b, out=out)
            target &= self.mask
            return target
        left = as_residues(a, self.modulus, name="first share")
        right = as_residues(b, self.modulus, name="second share")
        if left.shape != right.shape:
            raise InvalidInputError(
                f"shares must have the same shape, got {left.shape} and {right.shape}"
            )
        total = np.add(left, right, out=out)
        total &= self.mask
        return total

    def aggregate(self, shares: npt.ArrayLike | ShareBatch) -> npt.NDArray[np.uint64]:
        """Sum of ``(n, d)`` shares over users mod ``2^bits``: a ``(d,)`` array.

        This is the servers' hot path. A uint64 array is taken as elements of ``Z_{2^64}`` and
        reduced mod ``2^bits`` (exact, since ``2^bits`` divides ``2^64``) without a range pass;
        :meth:`decode_share` has already range-checked every word that came off the wire. Other
        integer dtypes are range-checked first.
        """
        if isinstance(shares, ShareBatch):
            self._check_batch(shares)
            arr = shares.values()
        elif isinstance(shares, np.ndarray) and shares.dtype == np.uint64:
            arr = shares
            if arr.ndim != 2:
                raise InvalidInputError(f"shares must be a 2-D array, got shape {arr.shape}")
        else:
            arr = as_residues(shares, self.modulus, name="shares", ndim=2)
        total: npt.NDArray[np.uint64] = np.add.reduce(arr, axis=0, dtype=np.uint64)
        return total & self.mask

    # -- wire --------------------------------------------------------------------------------
    def encode_share(self, batch: ShareBatch, i: int) -> bytes:
        """User ``i``'s share: ``dim`` little-endian ``ceil(bits/8)``-byte words."""
        self._check_batch(batch)
        row = batch.values()[check_index(batch, i)]
        return pack_words(row, self.word_bytes)

    def decode_share(self, data: bytes, dim: int) -> npt.NDArray[np.uint64]:
        """Parse one share of ``dim`` words; wrong length or a word ``>= 2^bits`` → DecodeError."""
        return unpack_words(data, dim, self.word_bytes, self.modulus)

    def _check_batch(self, batch: ShareBatch) -> None:
        if batch.modulus != self.modulus:
            raise InvalidInputError(
                f"share batch modulus must be 2^{self.bits}, got {batch.modulus}"
            )
