"""Two-party additive secret sharing of integer vectors (design §5 "secret sharing"; Prio, SecAgg).

A user splits a vector ``x`` in ``Z_M^d`` into two shares ``(a, x - a mod M)`` with ``a``
uniform, sends one to each server, and each server sums the shares it receives. Either share
alone is uniform on ``Z_M^d`` and says nothing about ``x``; the sum of the two servers'
aggregates is the sum of the users' vectors mod ``M``.

Every construction works on a whole batch of users at once: ``values`` is an ``(n, d)`` array,
one row per user. Constructions (registry family ``secret_sharing``):

* ``additive-ring2k`` → :class:`primitives.sharing.ring2k.AdditiveRing2k` (``M = 2^b``),
* ``additive-ring2k-seeded`` → :class:`primitives.sharing.seeded.SeedCompressedRing2k`
  (the first share is a 32-byte seed expanded by AES-256-CTR),
* ``additive-prime-field`` → :func:`primitives.sharing.prime_field.for_ring`: shares over
  ``GF(p)``, ``p = 2^61 - 1``, of the encoder's integers lifted to ``[0, 2^b)``; sums of up to
  :attr:`~primitives.sharing.prime_field.AdditivePrimeField.capacity` of them never wrap mod
  ``p``, so the field sum read mod ``2^b`` is the ring sum (design §5).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from primitives.errors import InvalidInputError, InvalidParameterError
from primitives.randomness import RandomSource

#: Size in bytes of a seed share (SeedCompressedRing2k) on the wire.
SEED_SIZE = 32

#: Expands ``n`` seeds into an ``(n, dim)`` array of ring elements.
SeedExpander = Callable[[Sequence[bytes], int], npt.NDArray[np.uint64]]


@dataclass(frozen=True, slots=True, kw_only=True, repr=False, eq=False)
class ShareBatch:
    """One share for each of ``n`` users: either explicit ``(n, dim)`` values or ``n`` seeds.

    Explicit values are kept read-only. A seed batch expands on demand with :meth:`values`.
    ``repr`` shows sizes only: a share is secret material even though it looks random.
    """

    modulus: int
    dim: int
    data: npt.NDArray[np.uint64] | None = None
    seeds: tuple[bytes, ...] | None = None
    expand: SeedExpander | None = None

    def __post_init__(self) -> None:
        if self.modulus < 2:
            raise InvalidParameterError(f"modulus must be >= 2, got {self.modulus}")
        if self.dim < 1:
            raise InvalidParameterError(f"dim must be >= 1, got {self.dim}")
        if (self.data is None) == (self.seeds is None):
            raise InvalidParameterError("ShareBatch needs exactly one of data or seeds")
        if self.data is not None:
            if (
                self.data.dtype != np.uint64
                or self.data.ndim != 2
                or self.data.shape[1] != self.dim
            ):
                raise InvalidInputError(
                    f"share data must be a uint64 array of shape (n, {self.dim}), "
                    f"got {self.data.dtype} {self.data.shape}"
                )
            self.data.setflags(write=False)
        if self.seeds is not None:
            if self.expand is None:
                raise InvalidParameterError("a seed ShareBatch needs an expand function")
            for i, seed in enumerate(self.seeds):
                if len(seed) != SEED_SIZE:
                    raise InvalidInputError(
                        f"seed {i} must be {SEED_SIZE} bytes, got {len(seed)} bytes"
                    )

    @property
    def n(self) -> int:
        """Number of users in the batch."""
        if self.data is not None:
            return int(self.data.shape[0])
        assert self.seeds is not None
        return len(self.seeds)

    def __len__(self) -> int:
        return self.n

    @property
    def is_seeded(self) -> bool:
        return self.seeds is not None

    def values(self, dim: int | None = None) -> npt.NDArray[np.uint64]:
        """The ``(n, dim)`` share values; seeds are expanded (deterministically) here."""
        if dim is not None and dim != self.dim:
            raise InvalidInputError(f"dim must be {self.dim} for this batch, got {dim}")
        if self.data is not None:
            return self.data
        assert self.seeds is not None and self.expand is not None
        return self.expand(self.seeds, self.dim)

    def __repr__(self) -> str:
        kind = "seeds" if self.is_seeded else "values"
        return f"ShareBatch(n={self.n}, dim={self.dim}, kind={kind}, <redacted>)"


@runtime_checkable
class SecretSharing(Protocol):
    """What the protocol needs from a sharing scheme (design §5, §6 step 3): the
    ``secret_sharing`` family's contract.

    Factory convention: the registry entry is called as ``factory(bits=b)`` for the DDG encoder's
    ring ``Z_{2^b}``, once the round's modulus is known. Shares live in ``[0, modulus)``;
    :meth:`reconstruct` answers mod :attr:`ring_modulus`, which must be ``2^b``: the encoder wraps
    its integers mod ``2^b`` and S_syn decodes sums mod ``2^b`` (design §5). Every method below is
    called by a user, a server or the audit.
    """

    @property
    def name(self) -> str:
        """The registry name, written into transcript headers."""
        ...

    @property
    def modulus(self) -> int:
        """``M``: ``2^b`` for a ring, ``p`` for a prime field."""
        ...

    @property
    def ring_modulus(self) -> int:
        """``2^b``: what :meth:`reconstruct` answers modulo (``M`` itself for a ring)."""
        ...

    def share(self, values: npt.ArrayLike, rng: RandomSource) -> tuple[ShareBatch, ShareBatch]:
        """Split ``(n, d)`` integers in ``[0, 2^b)`` into two share batches."""
        ...

    def reconstruct(
        self, a: npt.ArrayLike, b: npt.ArrayLike, *, out: npt.NDArray[np.uint64] | None = None
    ) -> npt.NDArray[np.uint64]:
        """Elementwise ``(a + b) mod M``, read mod :attr:`ring_modulus`, into ``out`` when given
        (a uint64 array of their shape, which may be ``a`` itself: a server reconstructing many
        buckets reuses its buffer)."""
        ...

    def add_integers(self, total: npt.ArrayLike, integers: npt.ArrayLike) -> npt.NDArray[np.uint64]:
        """An aggregate share plus signed ``integers`` as the ring ``Z_{2^b}`` sees them (S_tag's
        top-up noise for missing contributors), still a share of the new sum."""
        ...

    def aggregate(self, shares: npt.ArrayLike | ShareBatch) -> npt.NDArray[np.uint64]:
        """Sum ``(n, d)`` shares over users: ``(d,)`` mod ``M``."""
        ...

    def encode_share(self, batch: ShareBatch, i: int) -> bytes:
        """User ``i``'s share in its canonical wire form."""
        ...

    def decode_share(self, data: bytes, dim: int) -> npt.NDArray[np.uint64]:
        """Parse one user's share into ``(dim,)`` values; :class:`DecodeError` if malformed."""
        ...

    def share_sizes(self, dim: int) -> tuple[int, int]:
        """Bytes on the wire of the first and the second share of one user."""
        ...


def check_index(batch: ShareBatch, i: int) -> int:
    """Validate a user index into ``batch`` (no negative indexing: it hides off-by-one bugs)."""
    if isinstance(i, bool) or not isinstance(i, int | np.integer):
        raise InvalidInputError(f"user index must be an int, got {type(i).__name__}")
    if not 0 <= int(i) < batch.n:
        raise InvalidInputError(f"user index must be in [0, {batch.n}), got {i}")
    return int(i)


__all__ = ["SEED_SIZE", "SecretSharing", "SeedExpander", "ShareBatch", "check_index"]
