"""Dummy submissions that hide sub-threshold tag counts from S_syn (design §4.5, §6 step 2).

S_syn sees the count of every tag it receives. A dummy generator, run by S_tag's dummy user,
pads each count level below the threshold with a random number of fresh tags so that one
user's presence changes the visible level counts only within a differential-privacy guarantee.

Registry family ``dummy_generator``: ``tsdlap`` →
:class:`primitives.dummies.tsdlap.TSDLapDummyGenerator`.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from primitives.randomness import RandomSource


@runtime_checkable
class DummyGenerator(Protocol):
    """What S_tag's dummy user needs: a plan of how many dummy tags to submit at each level."""

    @property
    def name(self) -> str: ...

    def sample(self, size: int, rng: RandomSource) -> npt.NDArray[np.int64]:
        """``size`` independent dummy counts."""
        ...

    def dummy_plan(self, tau: float, rng: RandomSource) -> dict[int, int]:
        """Level ``c`` (``1 <= c < tau``) → number of fresh dummy tags submitted ``c`` times."""
        ...

    def privacy(self) -> tuple[float, float]:
        """``(epsilon, delta)`` of the padded level counts against one user's change."""
        ...


__all__ = ["DummyGenerator"]
