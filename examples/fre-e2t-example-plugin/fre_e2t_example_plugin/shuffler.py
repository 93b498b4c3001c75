"""``shuffler.sort-by-prf``: a permutation by sorting a keyed PRF of each position.

A batch of ``n`` items is put in the order of ``HMAC-SHA256(key, i)`` for positions ``i``, with a
fresh 32-byte key from :mod:`secrets` per batch. With HMAC a PRF, the ``n`` values are
indistinguishable from independent uniform 256-bit strings, so (barring a collision, probability
below n²/2²⁵⁷) their sorting order is a uniform permutation. The key is never stored or returned,
so the order cannot be recomputed afterwards.

The caller's ``rng`` is not used: in seeded test mode the order is therefore not reproducible,
but nothing the protocol releases depends on it (the servers' results do not depend on the order
of a batch).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence
from typing import Any, ClassVar, TypeVar

T = TypeVar("T")
P = TypeVar("P")

KEY_BYTES = 32


class SortByPrfShuffler:
    """The same methods as ``primitives.shuffle.UniformShuffler``: ``name``, ``shuffle`` and
    ``strip_and_shuffle``. The ``shuffler`` family's factory takes no argument."""

    __slots__ = ()
    name: ClassVar[str] = "sort-by-prf"

    def shuffle(self, items: Sequence[T], rng: Any = None) -> list[T]:
        """A new list holding ``items`` in a pseudo-random order (the input is not modified)."""
        batch = list(items)
        key = secrets.token_bytes(KEY_BYTES)

        def prf(i: int) -> bytes:
            return hmac.new(key, i.to_bytes(8, "big"), hashlib.sha256).digest()

        return [batch[i] for i in sorted(range(len(batch)), key=prf)]

    def strip_and_shuffle(self, envelopes: Sequence[tuple[Any, P]], rng: Any = None) -> list[P]:
        """Drop the sender of each ``(sender, payload)`` pair, then permute the payloads."""
        payloads: list[P] = []
        for k, envelope in enumerate(envelopes):
            if not isinstance(envelope, tuple) or len(envelope) != 2:
                from primitives.errors import InvalidInputError

                raise InvalidInputError(
                    f"envelope {k} must be a (sender, payload) pair, got {type(envelope).__name__}"
                )
            payloads.append(envelope[1])
        return self.shuffle(payloads, rng)

    def __repr__(self) -> str:
        return "SortByPrfShuffler()"


__all__ = ["SortByPrfShuffler"]
