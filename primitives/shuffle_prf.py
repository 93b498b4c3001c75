"""A second shuffler: sort by a pseudorandom function of the position (registry ``prf-sort``).

The permutation is ``argsort_i AES-256_k(i)`` — the AES-256-CTR keystream blocks of a fresh 32-byte
key ``k`` drawn from the caller's :class:`RandomSource`, one 128-bit block per position. AES is a
permutation of 128-bit blocks, so the n sort keys are distinct (no ties to break) and, AES being a
PRP, sorting them gives a permutation indistinguishable from uniform. What it teaches beside
:class:`~primitives.shuffle.UniformShuffler` (Fisher–Yates on uniform integers):

* the order is a function of a key and the batch size alone: whoever holds ``k`` can recompute it
  (an audit of a proxy that commits to ``k`` before the batch arrives, and reveals it after), and
  one key shuffles parallel columns of a batch identically;
* it is one vectorized keystream and one sort, with no integer sampling: ``O(n log n)`` but fast
  in numpy (the ``--compare shuffler=uniform,prf-sort`` cost table measures both).

The key is drawn from ``rng`` (the proxy's source: the OS CSPRNG in deployments, a seeded stream in
tests, so seeded runs stay reproducible) and never leaves the call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, TypeVar

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from primitives.randomness import RandomSource

T = TypeVar("T")

KEY_BYTES = 32


def prf_permutation(key: bytes, n: int) -> np.ndarray:
    """The positions ``0..n-1`` sorted by ``AES-256_key(i)`` (big-endian 128-bit blocks)."""
    if n <= 1:
        return np.arange(n, dtype=np.int64)
    stream = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor().update(bytes(16 * n))
    blocks = np.frombuffer(stream, dtype=">u8").reshape(n, 2)
    return np.lexsort((blocks[:, 1], blocks[:, 0])).astype(np.int64)


class PrfSortShuffler:
    """Permutes a batch by sorting its positions under a keyed PRP (AES-256, a fresh key a call)."""

    __slots__ = ()
    name: ClassVar[str] = "prf-sort"

    def shuffle(self, items: Sequence[T], rng: RandomSource) -> list[T]:
        """A new list holding ``items`` in the order of ``argsort AES_k(i)``, ``k`` from ``rng``."""
        batch = list(items)
        order = prf_permutation(rng.random_bytes(KEY_BYTES), len(batch))
        return [batch[int(k)] for k in order]

    def __repr__(self) -> str:
        return "PrfSortShuffler()"


__all__ = ["PrfSortShuffler", "prf_permutation"]
