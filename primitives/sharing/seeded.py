"""Seed-compressed additive sharing over ``Z_{2^b}`` (design §5; the PRG trick of Prio/SecAgg).

The first share of user ``i`` is a fresh 32-byte seed ``s_i``; its value is ``G(s_i)``, the
first ``d`` words of a pseudorandom stream. The second share is ``x_i - G(s_i) mod 2^b``. On the
wire the first share costs 32 bytes instead of ``d * ceil(b/8)``, which halves a user's upload
for large ``d``. Under the PRG assumption ``G(s)`` is indistinguishable from a uniform mask, so
each share alone still looks uniform.

Expansion ``G`` (deterministic, versioned): AES-256-CTR keyed by the seed, with the 16-byte
initial counter block ``SHA-256("fre-e2t/sharing/seed-expand/v1" || bits)[:8] || 0^8`` as
domain separation; the keystream is cut into the smallest native little-endian words holding
``bits`` bits (1, 2, 4 or 8 bytes) and each word is masked to ``bits`` bits. The 64-bit block
counter in the low half cannot wrap for any realistic ``d``.

When a seed would not be shorter than the explicit share (``d * ceil(b/8) <= 32``), both shares
are explicit: nothing is gained by a seed, and keeping the two wire lengths distinct makes
:meth:`SeedCompressedRing2k.decode_share` unambiguous.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import ClassVar

import numpy as np
import numpy.typing as npt
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from primitives.errors import DecodeError, InvalidInputError
from primitives.randomness import RandomSource
from primitives.sharing import SEED_SIZE, ShareBatch, check_index
from primitives.sharing.ring2k import AdditiveRing2k
from primitives.sharing.wire import as_residues, pack_words, stream_word_bytes, words_from_stream

EXPAND_DOMAIN = b"fre-e2t/sharing/seed-expand/v1"


@lru_cache(maxsize=64)
def _initial_counter(bits: int) -> bytes:
    return hashlib.sha256(EXPAND_DOMAIN + bytes([bits])).digest()[:8] + bytes(8)


def expand_seed(seed: bytes, dim: int, bits: int) -> npt.NDArray[np.uint64]:
    """``G(seed)``: ``dim`` pseudorandom residues mod ``2^bits`` (see the module docstring)."""
    if len(seed) != SEED_SIZE:
        raise InvalidInputError(f"seed must be {SEED_SIZE} bytes, got {len(seed)} bytes")
    width = stream_word_bytes(bits)
    encryptor = Cipher(algorithms.AES(bytes(seed)), modes.CTR(_initial_counter(bits))).encryptor()
    raw = encryptor.update(bytes(dim * width))
    return words_from_stream(raw, dim, bits)


def expand_seeds(seeds: Sequence[bytes], dim: int, bits: int) -> npt.NDArray[np.uint64]:
    """Expand ``n`` seeds into an ``(n, dim)`` array, one row per seed."""
    out = np.empty((len(seeds), dim), dtype=np.uint64)
    for row, seed in enumerate(seeds):
        out[row] = expand_seed(seed, dim, bits)
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class SeedCompressedRing2k(AdditiveRing2k):
    """Additive shares mod ``2^bits`` whose first share is a 32-byte seed (when that is shorter).

    Wire forms: the seed share is exactly 32 bytes; the explicit share is ``d`` little-endian
    ``ceil(bits/8)``-byte words, as in :class:`AdditiveRing2k`.
    """

    name: ClassVar[str] = "additive-ring2k-seeded"

    def compresses(self, dim: int) -> bool:
        """Whether a seed (32 bytes) is shorter than an explicit share of ``dim`` words."""
        return dim * self.word_bytes > SEED_SIZE

    def share_sizes(self, dim: int) -> tuple[int, int]:
        explicit = dim * self.word_bytes
        return (SEED_SIZE if self.compresses(dim) else explicit), explicit

    def expand(self, seeds: Sequence[bytes], dim: int) -> npt.NDArray[np.uint64]:
        """``G`` applied to each seed: the ``(n, dim)`` values of a seed share batch."""
        return expand_seeds(seeds, dim, self.bits)

    def share(self, values: npt.ArrayLike, rng: RandomSource) -> tuple[ShareBatch, ShareBatch]:
        """``(seeds, values - G(seeds))``; both explicit when a seed would not save bytes."""
        x = as_residues(values, self.modulus, name="values", ndim=2)
        n, dim = x.shape
        if dim < 1:
            raise InvalidInputError(f"values must have at least one column, got shape {x.shape}")
        if not self.compresses(dim):
            return AdditiveRing2k.share(self, x, rng)
        raw = rng.random_bytes(n * SEED_SIZE)
        seeds = tuple(raw[k * SEED_SIZE : (k + 1) * SEED_SIZE] for k in range(n))
        other = (x - self.expand(seeds, dim)) & self.mask
        expander = partial(expand_seeds, bits=self.bits)
        return (
            ShareBatch(modulus=self.modulus, dim=dim, seeds=seeds, expand=expander),
            ShareBatch(modulus=self.modulus, dim=dim, data=other),
        )

    def encode_share(self, batch: ShareBatch, i: int) -> bytes:
        """The 32-byte seed for a seed batch, packed words otherwise."""
        self._check_batch(batch)
        index = check_index(batch, i)
        if batch.seeds is not None:
            return batch.seeds[index]
        return pack_words(batch.values()[index], self.word_bytes)

    def decode_share(self, data: bytes, dim: int) -> npt.NDArray[np.uint64]:
        """A 32-byte seed (expanded here) or ``dim`` explicit words; anything else → DecodeError."""
        if (
            isinstance(data, bytes | bytearray | memoryview)
            and isinstance(dim, int)
            and not isinstance(dim, bool)
            and dim >= 1
            and self.compresses(dim)
        ):
            if len(data) == SEED_SIZE:
                return expand_seed(bytes(data), dim, self.bits)
            explicit = dim * self.word_bytes
            if len(data) != explicit:
                raise DecodeError(
                    f"share must be {SEED_SIZE} bytes (seed) or {explicit} bytes ({dim} words of "
                    f"{self.word_bytes} bytes), got {len(data)} bytes"
                )
        return AdditiveRing2k.decode_share(self, data, dim)
