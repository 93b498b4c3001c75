"""The text pipeline of Fre-E2T (design §7; paper §6 Step 4): corpora, embedding, inversion, paraphrasing.

Interfaces (what the pipeline needs; every implementation is swappable):

* :class:`~fre_protocol.text.embedder.Embedder` — texts → vectors
  (:class:`~fre_protocol.text.embedder.SentenceTransformerEmbedder`, cached on disk);
* :class:`Inverter` — centroids → texts
  (:class:`~fre_protocol.text.inverter_guided.GuidedInverter`, the offline default: a public
  language model writes text, steered by the embedder towards the centroid, starting from
  :class:`~fre_protocol.text.inverter_retrieval.RetrievalInverter`'s nearest texts of a *public*
  pool; :class:`~fre_protocol.text.inverter_vec2text.Vec2TextInverter`, the paper's model for
  gtr-t5-base embeddings). :mod:`fre_protocol.text.inverters` builds one by name;
* :class:`Paraphraser` — a text → n variations
  (:class:`~fre_protocol.text.paraphraser.CausalLMParaphraser`: SmolLM2-135M-Instruct offline,
  GPT-2 by name).

Inversion and paraphrasing are post-processing of the DP centroids and cost no privacy, as long
as the pool and the language models never saw the private texts.

Nothing here imports torch, sentence-transformers, transformers or vec2text at module level:
``import fre_protocol.text`` stays cheap, and the heavy imports happen inside the functions that
need a model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from fre_protocol.text.embedder import Embedder
from primitives.errors import InvalidInputError, InvalidParameterError
from primitives.randomness import RandomSource
from primitives.registry import register

__all__ = ["Embedder", "Inversion", "Inverter", "Paraphraser", "check_centroids", "check_num_texts"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Inversion:
    """The texts one centroid was inverted into, best first.

    ``distances`` are L2 distances in embedding space between each text's embedding and the
    centroid, when the inverter knows them (retrieval does; vec2text does not, the pipeline
    re-embeds its outputs).
    """

    texts: tuple[str, ...]
    distances: tuple[float, ...] | None = None
    sources: tuple[str, ...] | None = None  # where each text came from (pool source), if known
    # The seed a search started from (guided inversion), to show beside its result, and where it
    # came from: a pool source ("news", "wordnet", ...) or "prefix" (the learned generator's draft).
    seed: str | None = None
    seed_distance: float | None = None
    seed_source: str | None = None

    def __post_init__(self) -> None:
        if not self.texts:
            raise InvalidInputError("an inversion must hold at least one text")
        if self.distances is not None and len(self.distances) != len(self.texts):
            raise InvalidInputError(
                f"distances must have one entry per text ({len(self.texts)}), got {len(self.distances)}"
            )
        if self.sources is not None and len(self.sources) != len(self.texts):
            raise InvalidInputError(
                f"sources must have one entry per text ({len(self.texts)}), got {len(self.sources)}"
            )


@runtime_checkable
class Inverter(Protocol):
    """Centroids (m, d) → one :class:`Inversion` per row, in row order."""

    name: str

    def invert(
        self, centroids: npt.NDArray[np.floating], *, num_texts: int = 1, progress: bool = False
    ) -> list[Inversion]: ...


@runtime_checkable
class Paraphraser(Protocol):
    """A text → ``n`` variations sampled at ``temperature`` from randomness ``rng``."""

    name: str

    def paraphrase(
        self,
        texts: Sequence[str],
        *,
        n: int,
        temperature: float,
        rng: RandomSource,
        progress: bool = False,
    ) -> list[list[str]]: ...


def check_num_texts(num_texts: object) -> int:
    """Validate ``num_texts`` (texts per centroid): an integer >= 1."""
    if isinstance(num_texts, bool) or not isinstance(num_texts, int) or num_texts < 1:
        raise InvalidParameterError(f"num_texts must be an integer >= 1, got {num_texts!r}")
    return num_texts


def check_centroids(centroids: npt.NDArray[np.floating], dim: int | None = None) -> npt.NDArray[np.float64]:
    """Validate an (m, d) array of finite centroids (m may be 0)."""
    c = np.asarray(centroids)
    if c.ndim != 2:
        raise InvalidInputError(f"centroids must be a 2-D array (m × d), got shape {tuple(c.shape)}")
    if dim is not None and c.shape[0] and c.shape[1] != dim:
        raise InvalidInputError(
            f"centroids must have the embedder's dimension {dim}, got {c.shape[1]}"
        )
    if not np.issubdtype(c.dtype, np.number) or not np.isfinite(c).all():
        raise InvalidInputError("centroids must hold finite real numbers")
    return c.astype(np.float64, copy=False)


# Stable names for the text components (the registry stores only "module:attr" strings, so this
# costs no import of any backend).
register("embedder", "sentence-transformers", "fre_protocol.text.embedder:SentenceTransformerEmbedder", built_in=True)
register("inverter", "guided", "fre_protocol.text.inverter_guided:GuidedInverter", built_in=True)
register("inverter", "retrieval", "fre_protocol.text.inverter_retrieval:RetrievalInverter", built_in=True)
register("inverter", "vec2text", "fre_protocol.text.inverter_vec2text:Vec2TextInverter", built_in=True)
register("paraphraser", "causal-lm", "fre_protocol.text.paraphraser:CausalLMParaphraser", built_in=True)
