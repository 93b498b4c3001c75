"""Dummy submissions that hide sub-threshold tag counts from S_syn (design §4.5, §6 step 2).

S_syn sees the count of every tag it receives. A dummy generator, run by S_tag's dummy user,
pads each count level below the threshold with a random number of fresh tags so that one
user's presence changes the visible level counts only within a differential-privacy guarantee.

Registry family ``dummy_generator``: ``tsdlap`` →
:class:`primitives.dummies.tsdlap.TSDLapDummyGenerator`.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from primitives.randomness import RandomSource


@runtime_checkable
class DummyGenerator(Protocol):
    """What S_tag's dummy user needs: a plan of how many dummy tags to submit at each level. The
    ``dummy_generator`` family's contract.

    Factory convention: the registry entry is called as ``factory(epsilon0, delta0, 1)`` (the
    budget of the padding and the sensitivity of a level count) once per DP round. The dummy user
    calls :meth:`dummy_plan` and reports ``epsilon0``, ``delta0`` and ``shift`` (the centre of the
    count distribution) in its summary. Sampling single counts and the privacy statement are an
    implementation's own (the ledger charges ``(2 ε0, 2 δ0)`` itself, design §4.5).
    """

    @property
    def epsilon0(self) -> float: ...

    @property
    def delta0(self) -> float: ...

    @property
    def shift(self) -> int:
        """The centre of the per-level count distribution (its mean for a symmetric law)."""
        ...

    def dummy_plan(self, tau: float, rng: RandomSource) -> dict[int, int]:
        """Level ``c`` (``1 <= c < tau``) → number of fresh dummy tags submitted ``c`` times."""
        ...


__all__ = ["DummyGenerator"]
