"""The anonymizing shuffler (design §5, §6; Bittau et al. 2017, "Prochlo").

Every user→server message passes through a proxy that removes who sent it and forwards a batch in
a uniformly random order, so a server can link neither a submission nor a share to a user or to
its arrival time. Registry family ``shuffler``: ``uniform`` → :class:`UniformShuffler`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

from primitives.errors import InvalidInputError
from primitives.randomness import RandomSource

T = TypeVar("T")
P = TypeVar("P")


@runtime_checkable
class Shuffler(Protocol):
    """Permutes a batch of messages: the ``shuffler`` family's contract.

    Factory convention: the registry entry is called with no arguments (``factory()``). The
    protocol calls :meth:`shuffle` only (the proxy permutes indices of the batch it has already
    stripped of connections, :mod:`fre_protocol.roles.proxy`); sender stripping is the caller's
    business, so it is not part of the contract. ``rng`` is the proxy's source: an implementation
    may draw its permutation from it (reproducible in seeded runs) or from its own key.
    """

    @property
    def name(self) -> str: ...

    def shuffle(self, items: Sequence[T], rng: RandomSource) -> list[T]:
        """A new list holding ``items`` in a uniformly random order."""
        ...


class UniformShuffler:
    """A uniformly random permutation from the caller's :class:`RandomSource` (Fisher-Yates).

    :meth:`shuffle` strips nothing itself: what the items carry is the caller's business.
    :meth:`strip_and_shuffle` is a convenience outside the :class:`Shuffler` contract (the
    protocol never calls it).
    """

    __slots__ = ()
    name: ClassVar[str] = "uniform"

    def shuffle(self, items: Sequence[T], rng: RandomSource) -> list[T]:
        """A new list holding ``items`` in a uniformly random order (the input is not modified)."""
        batch = list(items)
        return [batch[int(k)] for k in rng.permutation(len(batch))]

    def strip_and_shuffle(self, envelopes: Sequence[tuple[Any, P]], rng: RandomSource) -> list[P]:
        """Drop the sender of each ``(sender, payload)`` pair and permute the payloads.

        Stripping happens before the permutation, so no output position or object carries a
        reference to its sender.
        """
        payloads: list[P] = []
        for k, envelope in enumerate(envelopes):
            if not isinstance(envelope, tuple) or len(envelope) != 2:
                raise InvalidInputError(
                    f"envelope {k} must be a (sender, payload) pair, got {type(envelope).__name__}"
                )
            payloads.append(envelope[1])
        return self.shuffle(payloads, rng)

    def __repr__(self) -> str:
        return "UniformShuffler()"


__all__ = ["Shuffler", "UniformShuffler"]
