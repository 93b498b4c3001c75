"""Additive sharing over a prime field ``GF(p)`` (design §5: a second ring behind the same interface).

``share(x) = (r, x - r mod p)`` with ``r`` uniform on ``[0, p)`` (rejection sampling, no modulo
bias). The field type is ``galois.GF(p)`` (:attr:`AdditivePrimeField.field`, :meth:`as_field`),
which validates ``p`` and gives callers full field arithmetic. The hot paths (share,
reconstruct, aggregate) run on plain uint64 numpy arrays instead: galois represents fields above
``2^32`` with Python-object arrays, and even for small ``p`` a single uint64 sum with one final
reduction is faster than reducing after every addition. The tests cross-check every hot path
against galois arithmetic.

Default ``p = 2^31 - 1`` (a Mersenne prime), because:

* a residue fits in 31 bits, so a coordinate is 4 bytes on the wire — the same as ``b = 32`` in
  :class:`~primitives.sharing.ring2k.AdditiveRing2k`, which makes the two comparable;
* up to ``(2^64 - 1) / (p - 1) ≈ 2^33`` shares sum in uint64 without overflow, so aggregation is
  one vectorized sum and one ``% p``;
* galois stores ``GF(2^31 - 1)`` in native int64 arrays with compiled ufuncs (``2^61 - 1`` would
  fall back to object arrays).

Any prime ``3 <= p < 2^63`` is accepted (``2p`` must fit in uint64); larger primes aggregate in
blocks of ``floor((2^64 - 1)/(p - 1))`` rows, reducing between blocks.

In the protocol (registry ``additive-prime-field`` → :func:`for_ring`) the field carries the DDG
encoder's ring ``Z_{2^b}`` instead (design §5): each user's integers are its residues mod ``2^b``
lifted to ``[0, 2^b)``, shared over ``GF(p)`` with ``p = 2^61 - 1`` (:data:`RING_PRIME`). A sum of
``k`` lifted values is below ``k (2^b - 1)``, so while ``k`` stays within :attr:`capacity` the
field sum *is* the integer sum and reading it mod ``2^b`` gives the ring sum; S_tag's signed
top-up noise enters the same way, lifted to ``[0, 2^b)`` (:meth:`AdditivePrimeField.add_integers`).
Subtracting a dropped user's share (a server's settlement) is exact in the field. The price: a
coordinate is an 8-byte word on the wire, where the ring needs ``ceil(b/8)`` bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

import galois
import numpy as np
import numpy.typing as npt

from primitives.errors import InvalidInputError, InvalidParameterError
from primitives.randomness import RandomSource
from primitives.sharing import ShareBatch, check_index
from primitives.sharing.ring2k import CHUNK_COORDINATES
from primitives.sharing.wire import as_residues, check_out, pack_words, unpack_words, word_bytes

#: The Mersenne prime ``2^31 - 1`` (see the module docstring for why).
DEFAULT_PRIME = (1 << 31) - 1
#: The Mersenne prime ``2^61 - 1``: the field that carries the DDG ring in the protocol.
RING_PRIME = (1 << 61) - 1
#: Fewest contributions a bucket's sum must be able to hold without wrapping mod p.
MIN_CAPACITY = 1 << 20

_U64_MAX = (1 << 64) - 1


@lru_cache(maxsize=8)
def _field(prime: int) -> Any:
    # Building a galois field class compiles its ufuncs once; cache it per prime.
    return galois.GF(prime)


@dataclass(frozen=True, slots=True, kw_only=True)
class AdditivePrimeField:
    """Two-party additive shares of ``(n, d)`` integer arrays mod a prime ``p``.

    Wire form of one user's share: ``d`` little-endian words of ``ceil(bitlen(p - 1) / 8)``
    bytes, each ``< p``.
    """

    name: ClassVar[str] = "additive-prime-field"
    prime: int = DEFAULT_PRIME
    #: ``b`` when the field carries the ring ``Z_{2^b}`` (module docstring); None: plain GF(p).
    ring_bits: int | None = None

    def __post_init__(self) -> None:
        p = self.prime
        if isinstance(p, bool) or not isinstance(p, int):
            raise InvalidParameterError(f"prime must be an int, got {type(p).__name__}")
        if not 3 <= p < 1 << 63:
            raise InvalidParameterError(f"prime must be in [3, 2^63), got {p}")
        if not galois.is_prime(p):
            raise InvalidParameterError(f"prime must be a prime number, got {p}")
        b = self.ring_bits
        if b is not None:
            if isinstance(b, bool) or not isinstance(b, int) or b < 1:
                raise InvalidParameterError(f"ring_bits must be an int >= 1, got {b!r}")
            if self.capacity < MIN_CAPACITY:
                raise InvalidParameterError(
                    f"ring_bits must leave room for {MIN_CAPACITY} lifted summands below p = {p}: "
                    f"2^{b} allows {self.capacity} (use a ring of at most "
                    f"{(p // MIN_CAPACITY).bit_length() - 1} bits, or additive-ring2k)"
                )

    @property
    def ring_modulus(self) -> int:
        """``2^b`` when the field carries a ring (what :meth:`reconstruct` answers mod), else ``p``."""
        return self.prime if self.ring_bits is None else 1 << self.ring_bits

    @property
    def capacity(self) -> int:
        """How many values in ``[0, ring_modulus)`` sum below ``p``: the most contributions (top-up
        included) one bucket's sum may hold for the ring reading to be exact."""
        return (self.prime - 1) // (self.ring_modulus - 1)

    @property
    def modulus(self) -> int:
        return self.prime

    @property
    def word_bytes(self) -> int:
        return word_bytes(self.prime)

    @property
    def field(self) -> Any:
        """The ``galois.GF(p)`` field class (built on first use)."""
        return _field(self.prime)

    def as_field(self, values: npt.ArrayLike) -> Any:
        """``values`` (residues in ``[0, p)``) as a galois ``FieldArray``."""
        residues = as_residues(values, self.prime, name="values")
        return self.field(residues.astype(np.int64))  # residues < p < 2^63 fit int64

    def share_sizes(self, dim: int) -> tuple[int, int]:
        return dim * self.word_bytes, dim * self.word_bytes

    # -- sharing -----------------------------------------------------------------------------
    def share(self, values: npt.ArrayLike, rng: RandomSource) -> tuple[ShareBatch, ShareBatch]:
        """Split ``(n, d)`` residues mod ``p`` (mod ``2^b``, lifted, when the field carries a
        ring) into ``(r, values - r mod p)``, ``r`` uniform."""
        x = as_residues(values, self.ring_modulus, name="values", ndim=2)
        n, dim = x.shape
        if dim < 1:
            raise InvalidInputError(f"values must have at least one column, got shape {x.shape}")
        p = np.uint64(self.prime)
        mask = np.empty((n, dim), dtype=np.uint64)
        other = np.empty((n, dim), dtype=np.uint64)
        # Row blocks keep the keystream and temporaries in cache (see AdditiveRing2k.share).
        step = max(1, CHUNK_COORDINATES // dim)
        for start in range(0, n, step):
            stop = min(n, start + step)
            block = rng.integers_below(self.prime, (stop - start) * dim).reshape(stop - start, dim)
            mask[start:stop] = block
            # x + (p - r) < 2p < 2^64: no wrap before the reduction.
            other[start:stop] = (x[start:stop] + (p - block)) % p
        return (
            ShareBatch(modulus=self.prime, dim=dim, data=mask),
            ShareBatch(modulus=self.prime, dim=dim, data=other),
        )

    def reconstruct(
        self, a: npt.ArrayLike, b: npt.ArrayLike, *, out: npt.NDArray[np.uint64] | None = None
    ) -> npt.NDArray[np.uint64]:
        """Elementwise ``(a + b) mod p`` — then mod ``2^b`` when the field carries a ring — into
        ``out`` when given (it may be ``a``)."""
        left = as_residues(a, self.prime, name="first share")
        right = as_residues(b, self.prime, name="second share")
        if left.shape != right.shape:
            raise InvalidInputError(
                f"shares must have the same shape, got {left.shape} and {right.shape}"
            )
        if out is not None:
            out = check_out(out, left.shape)
        # Residues are < p < 2^63 here, so the uint64 sum cannot wrap before the reduction.
        total = np.add(left, right, out=out)
        total %= np.uint64(self.prime)
        if self.ring_bits is not None:
            total &= np.uint64(self.ring_modulus - 1)
        return total

    def add_integers(self, total: npt.ArrayLike, integers: npt.ArrayLike) -> npt.NDArray[np.uint64]:
        """``total + (integers mod 2^b) mod p``: signed integers lifted to ``[0, 2^b)`` first, so
        they count as one more summand against :attr:`capacity` (plain GF(p): ``integers mod p``)."""
        arr = as_residues(total, self.prime, name="total")
        ints = np.asarray(integers, dtype=np.int64)
        lifted = np.mod(ints, np.int64(self.ring_modulus)).astype(np.uint64)  # ring_modulus <= p < 2^63
        out: npt.NDArray[np.uint64] = (arr + lifted) % np.uint64(self.prime)
        return out

    def aggregate(self, shares: npt.ArrayLike | ShareBatch) -> npt.NDArray[np.uint64]:
        """Sum over users mod ``p``: uint64 block sums that cannot overflow, reduced between blocks.

        Unlike the ``2^b`` ring, inputs are always range-checked: a word ``>= p`` is not a field
        element, and reducing it silently would hide a malformed share.
        """
        if isinstance(shares, ShareBatch):
            if shares.modulus != self.prime:
                raise InvalidInputError(
                    f"share batch modulus must be {self.prime}, got {shares.modulus}"
                )
            arr = shares.values()
        else:
            arr = as_residues(shares, self.prime, name="shares", ndim=2)
        p = np.uint64(self.prime)
        block = _U64_MAX // (self.prime - 1)
        while arr.shape[0] > block:
            rows = arr.shape[0]
            pad = (-rows) % block
            if pad:
                arr = np.concatenate([arr, np.zeros((pad, arr.shape[1]), dtype=np.uint64)])
            arr = arr.reshape(-1, block, arr.shape[1]).sum(axis=1, dtype=np.uint64) % p
        total: npt.NDArray[np.uint64] = np.add.reduce(arr, axis=0, dtype=np.uint64) % p
        return total

    # -- wire --------------------------------------------------------------------------------
    def encode_share(self, batch: ShareBatch, i: int) -> bytes:
        """User ``i``'s share: ``dim`` little-endian words, each ``< p``."""
        if batch.modulus != self.prime:
            raise InvalidInputError(
                f"share batch modulus must be {self.prime}, got {batch.modulus}"
            )
        return pack_words(batch.values()[check_index(batch, i)], self.word_bytes)

    def decode_share(self, data: bytes, dim: int) -> npt.NDArray[np.uint64]:
        """Parse one share; wrong length or a word ``>= p`` → DecodeError."""
        return unpack_words(data, dim, self.word_bytes, self.prime)


def for_ring(*, bits: int) -> AdditivePrimeField:
    """The registry factory: GF(2^61 - 1) carrying the DDG ring ``Z_{2^bits}`` (``bits <= 41``,
    so one bucket's sum holds at least 2^20 contributions)."""
    return AdditivePrimeField(prime=RING_PRIME, ring_bits=bits)
