"""Guided inversion: a public language model writes text, the embedder steers it (interim skeleton).

The search itself lands in the next commit; today ``invert`` returns the retrieval seed.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import numpy.typing as npt

from fre_protocol.text import Inversion, check_centroids
from fre_protocol.text.embedder import Embedder
from fre_protocol.text.inverter_retrieval import RetrievalInverter
from primitives.errors import InvalidParameterError
from primitives.randomness import RandomSource


@dataclass(frozen=True, slots=True, kw_only=True)
class GuidedBudget:
    """How much search per target: ``rounds`` × ``beam`` × ``top_k`` (and ``samples`` rewrites)."""

    rounds: int = 2
    beam: int = 4
    top_k: int = 8
    samples: int = 8

    PRESETS = ("small", "default", "large")

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidParameterError(f"budget {f.name} must be an integer >= 1, got {value!r}")

    @classmethod
    def preset(cls, name: str) -> GuidedBudget:
        table = {
            "small": cls(rounds=1, beam=2, top_k=6, samples=4),
            "default": cls(),
            "large": cls(rounds=4, beam=8, top_k=12, samples=16),
        }
        if name not in table:
            raise InvalidParameterError(f"budget preset must be one of {list(table)}, got {name!r}")
        return table[name]

    @classmethod
    def parse(cls, text: str) -> GuidedBudget:
        """A preset name, or ``key=value`` pairs separated by commas (the rest from the default)."""
        text = text.strip()
        if "=" not in text:
            return cls.preset(text)
        known = {f.name for f in fields(cls)}
        values: dict[str, int] = {}
        for part in text.split(","):
            key, sep, raw = part.partition("=")
            key = key.strip()
            if not sep or key not in known:
                raise InvalidParameterError(
                    f"budget must be a preset {list(cls.PRESETS)} or key=value pairs with keys "
                    f"{sorted(known)}, got {text!r}"
                )
            try:
                values[key] = int(raw)
            except ValueError:
                raise InvalidParameterError(f"budget {key} must be an integer, got {raw.strip()!r}") from None
        return cls(**values)

    def to_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class GuidedInverter:
    """Retrieval seed, then LM rewrites and embedding-guided beam search (see module docstring)."""

    name = "guided"

    def __init__(
        self,
        embedder: Embedder,
        retrieval: RetrievalInverter,
        *,
        budget: GuidedBudget | None = None,
        rng: RandomSource | None = None,
    ) -> None:
        self.embedder = embedder
        self.retrieval = retrieval
        self.budget = budget or GuidedBudget()
        self.rng = rng if rng is not None else RandomSource.cryptographic("text/inversion")

    def load(self) -> None:
        """Load the language model (absent weights fail here)."""

    def invert(
        self, centroids: npt.NDArray[np.floating], *, num_texts: int = 1, progress: bool = False
    ) -> list[Inversion]:
        c = check_centroids(centroids)
        seeds = self.retrieval.invert(c, num_texts=num_texts, progress=progress)
        return [
            Inversion(
                texts=s.texts, distances=s.distances, sources=s.sources,
                seed=s.texts[0], seed_distance=s.distances[0] if s.distances else None,
            )
            for s in seeds
        ]

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "budget": self.budget.to_dict(), "pool": self.retrieval.describe()}
