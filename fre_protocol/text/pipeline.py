"""The main job: private texts in, DP synthetic texts out (design §7, paper §6 Step 1-4).

:func:`run_synthesis` is the list of its stages, each a function below with a progress bar and a
wall-clock timing:

1. :func:`prepare` — **checks before any budget is spent**: the inverter can run (its models are
   present; vec2text only with gtr-t5-base; the public pool is not the private input), the public
   pool is indexed (and r chosen from it, if asked), the budget is feasible and the population can
   release something (:func:`fre_protocol.text.tuning.preflight`);
2. :func:`embed_corpus` — **embed** the corpus (cached on disk by text hash and model);
3. :func:`release_and_record` — **release**: the distributed protocol (default;
   ``fre_protocol.drivers.inprocess.run_protocol``, all parties simulated in one process, transcripts
   recorded) or the centralized mechanism (``mechanism.fre_e2t.run_mechanism``), both given the
   unit of privacy (each text its own user, or the corpus's users bounded to c buckets each,
   design §4.6); writes ``centroids.npy`` + ``release.json`` and ``ledger.json`` (always, also when
   nothing was released; its ``unit`` says whom the guarantee protects);
4. :func:`invert_release` — **invert** each DP centroid into text (guided by default: a public
   language model steered from a seed, the draft of a generator trained on public text or the
   nearest public-pool text; or retrieval, or vec2text), then
   optionally **paraphrase** (2n variations sampled, the n nearest the centroid kept);
5. :func:`write_synthetic` — ``synthetic.jsonl``, each text with its distance to its centroid
   (and, for guided inversion, the seed it started from and its source);
6. :func:`evaluate_run` (optional, on by default) — reads the *private* embeddings to score the
   release against the frequent set (design §8). This is an evaluation for the operator, outside
   the DP guarantee, and every output that carries it is labelled so;
7. :func:`summarise` and :func:`write_summary_and_report` — ``summary.json`` and
   ``report.html`` (self-contained).

Steps 4-5 are post-processing of the DP release and cost no privacy.
"""

from __future__ import annotations

import dataclasses
import math
import os
import platform
import resource
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fre_protocol.outputs import prepare_out_dir, write_json_atomic, write_jsonl_atomic
from fre_protocol.published import LEDGER_FILE, SYNTHETIC_FILE
from fre_protocol.roles.config import RoundSpec, RunOptions
from fre_protocol.text import Inversion, Inverter, Paraphraser
from fre_protocol.text.carriers import (
    ACCELERATE,
    GGUF,
    MINILM,
    SMOLLM2,
    Carrier,
    require,
)
from fre_protocol.text.corpora import Corpus
from fre_protocol.text.embedder import SentenceTransformerEmbedder
from fre_protocol.text.inverter_retrieval import RetrievalInverter
from fre_protocol.text.inverters import (
    DEFAULT_INVERTER,
    INVERTERS,
    POOL_INVERTERS,
    PoolOptions,
    build_inverter,
)
from fre_protocol.text.inverters import required_carriers as inverter_carriers
from fre_protocol.text.public_pool import DEFAULT_MAX_TEXTS, DEFAULT_SOURCES, check_max_texts
from fre_protocol.text.seed_sources import DEFAULT_SEEDS_FROM, check_seeds_from
from fre_protocol.text.tuning import EVALUATION_LABEL, explain_empty_release, preflight
from mechanism.contributions import TEXT_UNIT, PrivacyUnit, with_unit
from mechanism.params import FreParams
from mechanism.release import Release
from mechanism.seeds import SeedPlan
from primitives.errors import InvalidParameterError

PROTOCOLS = ("distributed", "central")
PARAPHRASE_LABEL = "paraphrase"
#: Paraphrases sampled per one kept: the kept ones are those nearest the centroid.
PARAPHRASE_OVERSAMPLING = 2
SUMMARY_FILE = "summary.json"
REPORT_FILE = "report.html"
EVALUATION_FILE = "evaluation.json"
#: Inverters that read the public pool (and so can choose r from it and give N texts per centroid).


@dataclass(frozen=True, slots=True, kw_only=True)
class SynthesisOptions:
    """Everything about a synthesis run that is not a privacy parameter."""

    protocol: str = "distributed"
    inverter: str = DEFAULT_INVERTER
    budget: str | None = None  # guided search budget: a preset or key=value pairs (GuidedBudget.parse)
    texts_per_centroid: int = 1
    paraphrases: int = 0
    temperature: float = 0.8
    paraphraser: str | None = None
    embedder: str | None = None
    cache_dir: str | None = None
    pool_sources: tuple[str, ...] = DEFAULT_SOURCES
    pool_files: tuple[str, ...] = ()
    pool_field: str | None = None
    pool_max: int | None = DEFAULT_MAX_TEXTS
    seeds_from: str = DEFAULT_SEEDS_FROM  # guided: where its search starts (GuidedInverter's seeds_from)
    refine: bool = False
    radius_quantile: float | None = None
    vec2text_dir: str | None = None
    vec2text_steps: int | None = 20
    vec2text_beam: int = 0
    evaluate: bool = True
    noise: bool = True
    dropout: float = 0.0
    workers: int = 2
    progress: bool = True
    report: bool = True
    components: Mapping[str, str] | None = None  # registry names of the protocol's primitives (design §5)

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise InvalidParameterError(f"protocol must be one of {list(PROTOCOLS)}, got {self.protocol!r}")
        if self.components and self.protocol != "distributed":
            raise InvalidParameterError(
                f"components apply to the distributed protocol only, got protocol {self.protocol!r}"
            )
        if self.inverter not in INVERTERS:
            raise InvalidParameterError(f"inverter must be one of {list(INVERTERS)}, got {self.inverter!r}")
        check_max_texts(self.pool_max, "pool_max")
        if self.budget is not None and self.inverter != "guided":
            raise InvalidParameterError(f"budget applies to the guided inverter only, not to {self.inverter!r}")
        check_seeds_from(self.seeds_from, self.inverter)
        for name in ("texts_per_centroid",):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidParameterError(f"{name} must be an integer >= 1, got {value!r}")
        if isinstance(self.paraphrases, bool) or not isinstance(self.paraphrases, int) or self.paraphrases < 0:
            raise InvalidParameterError(f"paraphrases must be an integer >= 0, got {self.paraphrases!r}")
        if not (isinstance(self.temperature, int | float) and 0 <= self.temperature <= 5):
            raise InvalidParameterError(f"temperature must be in [0, 5], got {self.temperature!r}")
        if not (0.0 <= self.dropout < 1.0):
            raise InvalidParameterError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if self.radius_quantile is not None and not (0 < self.radius_quantile < 1):
            raise InvalidParameterError(f"radius_quantile must be in (0, 1), got {self.radius_quantile!r}")
        if self.radius_quantile is not None and self.inverter not in POOL_INVERTERS:
            raise InvalidParameterError(
                f"radius_quantile reads the public pool: it needs one of the inverters {list(POOL_INVERTERS)}"
            )
        if self.inverter == "vec2text" and self.texts_per_centroid != 1:
            raise InvalidParameterError(
                "vec2text gives one text per centroid: use --paraphrases for more, not --texts-per-centroid"
            )

    def pool(self) -> PoolOptions:
        return PoolOptions(
            sources=self.pool_sources, files=self.pool_files, field_name=self.pool_field, max_texts=self.pool_max
        )


@dataclass(slots=True, kw_only=True)
class SynthesisResult:
    release: Release
    records: list[dict[str, Any]]
    evaluation: dict[str, Any] | None
    timings: dict[str, float]
    warnings: list[str]
    out_dir: Path
    transcript_path: Path | None
    peak_memory_mb: float
    summary: dict[str, Any] = field(default_factory=dict)


class _Stages:
    """Wall-clock time of each stage, and a one-line log of what runs."""

    def __init__(self, log: Any) -> None:
        self.timings: dict[str, float] = {}
        self.log = log
        self.started = time.perf_counter()

    @contextmanager
    def stage(self, name: str, message: str | None = None) -> Iterator[None]:
        if message:
            self.log(message)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - t0

    def with_total(self) -> dict[str, float]:
        return {**self.timings, "total": time.perf_counter() - self.started}


def peak_memory_mb() -> float:
    """Peak resident memory of this process (Linux reports KiB, macOS bytes)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1 << 20) if platform.system() == "Darwin" else rss / 1024


def write_json(path: Path, data: Any) -> None:
    """``data`` as canonical JSON (:mod:`primitives.jsonsafe`), written atomically."""
    write_json_atomic(path, data)


def write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    """One canonical JSON object per line, written atomically."""
    write_jsonl_atomic(path, rows)


# -- what each stage hands to the next ---------------------------------------------------------------
@dataclass(slots=True, kw_only=True)
class Prepared:
    """Stage 1: the models, checked, and the parameters (r possibly from the public pool)."""

    embedder: SentenceTransformerEmbedder
    inverter: Inverter
    paraphraser: Paraphraser | None
    params: FreParams
    radius_note: str
    warnings: list[str]


@dataclass(slots=True, kw_only=True)
class Released:
    """Stage 3: the DP release, where its transcript went, and the ledger as written."""

    release: Release
    transcript_path: Path | None
    costs: dict[str, Any]
    ledger: dict[str, Any]
    empty_reason: str | None


@dataclass(slots=True, kw_only=True)
class Synthetic:
    """Stage 4: one record per synthetic text and the texts' embeddings, row for row."""

    records: list[dict[str, Any]]
    embeddings: npt.NDArray[np.float32]


# -- 1. checks and public work before any private text is read or any budget is spent ----------------
def required_carriers(options: SynthesisOptions, *, embedder_given: bool = False) -> list[Carrier]:
    """The data/model packages a run with ``options`` reads (:mod:`fre_protocol.text.carriers`)."""
    needed = inverter_carriers(options.inverter, options.pool_sources)
    if options.embedder is None and not embedder_given:
        needed.append(MINILM)
    if options.paraphrases and options.paraphraser in (None, "smollm2"):
        needed += [SMOLLM2, GGUF, ACCELERATE]
    return list(dict.fromkeys(needed))


def pool_index_of(inverter: Inverter) -> RetrievalInverter | None:
    """The retrieval inverter holding the public pool's index (guided keeps one as ``.retrieval``)."""
    if isinstance(inverter, RetrievalInverter):
        return inverter
    retrieval = getattr(inverter, "retrieval", None)
    return retrieval if isinstance(retrieval, RetrievalInverter) else None


def prepare(
    corpus: Corpus,
    params: FreParams,
    seeds: SeedPlan,
    options: SynthesisOptions,
    stages: _Stages,
    *,
    embedder: SentenceTransformerEmbedder | None,
    input_path: str | os.PathLike[str] | None,
) -> Prepared:
    with stages.stage("setup", f"setup: {len(corpus)} texts from {corpus.source or corpus.name}"):
        for w in corpus.warnings:
            stages.log(f"warning: {w}")
        require(required_carriers(options, embedder_given=embedder is not None), what="this synthesis run")
        if embedder is None:
            embedder = SentenceTransformerEmbedder(options.embedder, cache_dir=options.cache_dir)
        inverter = build_inverter(
            options.inverter,
            embedder,
            pool=options.pool(),
            private_input=input_path,
            private_texts=corpus.texts,
            refine=options.refine,
            budget=options.budget,
            rng=seeds.secret("text/inversion"),
            vec2text_dir=options.vec2text_dir,
            vec2text_steps=options.vec2text_steps,
            vec2text_beam=options.vec2text_beam,
            seeds_from=options.seeds_from,
        )
        paraphraser = None
        if options.paraphrases:
            from fre_protocol.text.paraphraser import CausalLMParaphraser

            paraphraser = CausalLMParaphraser(options.paraphraser)
            paraphraser.load()
    params, radius_note = _index_pool(inverter, params, options, stages)
    warnings = [*corpus.warnings, *_preflight(params, len(corpus), stages)]
    return Prepared(embedder=embedder, inverter=inverter, paraphraser=paraphraser, params=params,
                    radius_note=radius_note, warnings=warnings)


def _index_pool(inverter: Inverter, params: FreParams, options: SynthesisOptions,
                stages: _Stages) -> tuple[FreParams, str]:
    """Embed the public pool now (not after the release), and choose r from it if asked."""
    retrieval = pool_index_of(inverter)
    if retrieval is None:
        return params, "given"
    with stages.stage("pool_index", f"embedding/indexing the public pool ({len(retrieval.pool)} texts)"):
        pool_x = retrieval.index(progress=options.progress)
    if options.radius_quantile is None:
        return params, "given"
    from fre_protocol.text.tuning import MINILM_RADIUS_RANK, radius_from_public

    with stages.stage("radius", "choosing r from the public pool (quantile rule, paper §7.3)"):
        choice = radius_from_public(pool_x, quantile=options.radius_quantile, neighbour_rank=MINILM_RADIUS_RANK)
    note = (
        f"public pool: {options.radius_quantile:g}-quantile of the {MINILM_RADIUS_RANK}th-nearest-"
        f"neighbour distance over {choice.n_public} public texts"
    )
    stages.log(f"r = {choice.radius:.4f} ({note})")
    return dataclasses.replace(params, radius=choice.radius), note


def _preflight(params: FreParams, n_texts: int, stages: _Stages) -> list[str]:
    with stages.stage("setup"):
        check = preflight(params, n_texts)
        for w in check.warnings:
            stages.log(f"warning: {w}")
        if not check.feasible:
            # calibrate_noise raises the precise InfeasibleBudgetError; let it surface unchanged
            from mechanism.accounting import calibrate_noise

            calibrate_noise(params)
    return list(check.warnings)


# -- 2. embedding -------------------------------------------------------------------------------------
def embed_corpus(corpus: Corpus, embedder: SentenceTransformerEmbedder, options: SynthesisOptions,
                 stages: _Stages) -> npt.NDArray[np.float32]:
    with stages.stage("embed", f"embedding {len(corpus)} texts with {embedder.model_id}"):
        return embedder.embed(list(corpus.texts), progress=options.progress)


# -- 3. the release and its ledger --------------------------------------------------------------------
def release_and_record(
    x: npt.NDArray[np.float32],
    params: FreParams,
    seeds: SeedPlan,
    options: SynthesisOptions,
    out: Path,
    stages: _Stages,
    *,
    users: Sequence[str] | None = None,
    unit: PrivacyUnit = TEXT_UNIT,
) -> Released:
    path = "the two-server protocol" if options.protocol == "distributed" else "the centralized mechanism"
    with stages.stage("release", f"release: {path}, ε = {params.epsilon:g}"):
        release, transcript_path, costs = _release(x, params, seeds, options, out, users=users, unit=unit)
    if release.ledger.unit is None:  # a release path that does not state its unit yet
        release = dataclasses.replace(release, ledger=with_unit(release.ledger, unit))
    with stages.stage("write"):
        release.save(out)
        ledger = release.ledger.to_dict()
        ledger["source"] = {
            "path": release.info.get("path", options.protocol),
            "note": "composed totals spent by this run (top-level epsilon, delta); every term with its source",
        }
        write_json(out / LEDGER_FILE, ledger)
    empty_reason = None
    if len(release) == 0:
        empty_reason = explain_empty_release(params, len(x))
        stages.log(f"nothing released: {empty_reason}")
    return Released(release=release, transcript_path=transcript_path, costs=costs, ledger=ledger,
                    empty_reason=empty_reason)


def check_unit(corpus: Corpus, unit: PrivacyUnit, options: SynthesisOptions) -> None:
    """The unit must match the corpus (users exactly when it groups texts by user), and the release
    path must support it; checked before any text is embedded or any budget spent."""
    if (unit.kind == "user") != (corpus.users is not None):
        raise InvalidParameterError(
            f"the unit of privacy is {unit.kind!r} but the corpus "
            + ("names no user field" if corpus.users is None else f"groups its texts by {corpus.user_field!r}")
            + ": give both or neither"
        )


def _release(
    x: npt.NDArray[np.float32],
    params: FreParams,
    seeds: SeedPlan,
    options: SynthesisOptions,
    out_dir: Path,
    *,
    users: Sequence[str] | None,
    unit: PrivacyUnit,
) -> tuple[Release, Path | None, dict[str, Any]]:
    # Only a user unit passes users on, so a release path without them runs unchanged.
    by_user: dict[str, Any] = {"users": list(users), "unit": unit} if users is not None else {}
    if options.protocol == "central":
        from mechanism.fre_e2t import run_mechanism

        release = run_mechanism(x, params, seeds, noise=options.noise, progress=options.progress, **by_user)
        return release, None, {}
    from fre_protocol.drivers.inprocess import run_protocol

    spec = RoundSpec(
        params=params, seeds=seeds, unit=unit, noise=options.noise, dropout=options.dropout, workers=options.workers,
        components=options.components,
    )
    labels = list(users) if users is not None else None
    result = run_protocol(x, spec, RunOptions(out_dir=out_dir, progress=options.progress), users=labels)
    return result.release, result.transcript_path, dict(result.costs or {})


# -- 4. inversion and paraphrasing: post-processing of the DP centroids -------------------------------
def invert_release(release: Release, prepared: Prepared, seeds: SeedPlan, options: SynthesisOptions,
                   stages: _Stages) -> Synthetic:
    """Invert every centroid, paraphrase the best text of each (if asked), embed the results and
    note each text's distance to its centroid."""
    m = len(release)
    inversions: list[Inversion] = []
    with stages.stage("invert", f"inverting {m} centroid(s) with {prepared.inverter.name}"):
        if m:
            inversions = prepared.inverter.invert(
                release.centroids, num_texts=options.texts_per_centroid, progress=options.progress
            )
    paraphrased = None
    if prepared.paraphraser is not None and m:
        with stages.stage("paraphrase", f"paraphrasing {m} text(s) × {options.paraphrases}"):
            paraphrased = paraphrase_nearest(
                prepared.paraphraser, prepared.embedder, [inv.texts[0] for inv in inversions],
                release.centroids, n=options.paraphrases, temperature=options.temperature,
                rng=seeds.secret("text/paraphrase"), progress=options.progress,
            )
    records = _records(release, inversions, paraphrased)
    embeddings = np.zeros((0, release.centroids.shape[-1]), dtype=np.float32)
    if records:
        with stages.stage("embed_synthetic"):
            embeddings = prepared.embedder.embed([r["text"] for r in records])
            idx = np.array([r["centroid_index"] for r in records])
            dist = np.linalg.norm(embeddings.astype(np.float64) - release.centroids[idx], axis=1)
            for row, d in zip(records, dist.tolist(), strict=True):
                row["distance_to_centroid"] = d
    return Synthetic(records=records, embeddings=embeddings)


def paraphrase_nearest(
    paraphraser: Paraphraser,
    embedder: Any,
    texts: Sequence[str],
    centroids: npt.NDArray[np.floating],
    *,
    n: int,
    temperature: float,
    rng: Any,
    progress: bool = False,
) -> list[list[str]]:
    """``n`` paraphrases of ``texts[i]`` for centroid ``i``: ``PARAPHRASE_OVERSAMPLING · n`` are
    sampled and the ``n`` whose embeddings lie nearest the centroid kept, nearest first (distinct
    texts before repeats, so a sample that fell back to its input does not crowd out the rest)."""
    candidates = paraphraser.paraphrase(
        texts, n=PARAPHRASE_OVERSAMPLING * n, temperature=temperature, rng=rng, progress=progress
    )
    flat = [t for row in candidates for t in row]
    if not flat:
        return [[] for _ in texts]
    e = embedder.embed(flat).astype(np.float64)
    out: list[list[str]] = []
    start = 0
    for i, row in enumerate(candidates):
        dist = np.linalg.norm(e[start : start + len(row)] - np.asarray(centroids[i], dtype=np.float64), axis=1)
        start += len(row)
        distinct: list[int] = []
        repeats: list[int] = []
        for j in np.argsort(dist, kind="stable").tolist():
            (repeats if row[j] in (row[k] for k in distinct) else distinct).append(j)
        out.append([row[j] for j in (distinct + repeats)[:n]])
    return out


def _records(
    release: Release,
    inversions: list[Inversion],
    paraphrases: list[list[str]] | None,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for i, (bucket, inv) in enumerate(zip(release.buckets, inversions, strict=True)):
        seed: dict[str, Any] = {}
        if inv.seed is not None:
            seed["seed"] = inv.seed
            if inv.seed_distance is not None:
                seed["seed_distance"] = inv.seed_distance
            if inv.seed_source is not None:
                seed["seed_source"] = inv.seed_source
        for rank, text in enumerate(inv.texts):
            rows.append(
                {
                    "text": text,
                    "bucket_id": bucket.id,
                    "bucket_count": bucket.count,
                    "centroid_index": i,
                    "kind": "inversion",
                    "rank": rank,
                    "source": inv.sources[rank] if inv.sources else None,
                    **seed,
                }
            )
        if paraphrases is not None:
            for j, text in enumerate(paraphrases[i]):
                rows.append(
                    {
                        "text": text,
                        "bucket_id": bucket.id,
                        "bucket_count": bucket.count,
                        "centroid_index": i,
                        "kind": PARAPHRASE_LABEL,
                        "rank": j,
                        "source": "paraphrase",
                        "paraphrase_of": inv.texts[0],
                    }
                )
    return rows


# -- 5. the published synthetic texts -----------------------------------------------------------------
def write_synthetic(out: Path, synthetic: Synthetic, stages: _Stages) -> None:
    with stages.stage("write"):
        write_jsonl(out / SYNTHETIC_FILE, synthetic.records)


# -- evaluation (reads the private data) -------------------------------------------------------------
def evaluate_release(
    x: npt.NDArray[np.floating],
    centroids: npt.NDArray[np.floating],
    synthetic: npt.NDArray[np.floating],
    params: FreParams,
    *,
    release: Release | None = None,
    seeds: SeedPlan | None = None,
    progress: bool = False,
    users: Sequence[str] | None = None,
) -> dict[str, Any]:
    """design §8 metrics against the frequent set of the private data: an EVALUATION, labelled so.
    With ``users`` (one label per text), the same over users under ``"users"``
    (:func:`evaluate_users`)."""
    from mechanism import metrics

    r, t = params.radius, params.threshold
    out: dict[str, Any] = {"label": EVALUATION_LABEL, "radius": r, "threshold": t, "alpha": metrics.DEFAULT_ALPHA}
    counts = metrics.neighbour_counts(x, r, progress=progress)
    frequent = metrics.frequent_mask(counts, t)
    n_freq = int(frequent.sum())
    out.update(
        n_texts=int(len(x)),
        n_frequent=n_freq,
        frequent_share=float(frequent.mean()),
        neighbour_count_quantiles={
            str(q): float(np.quantile(counts, q)) for q in (0.5, 0.9, 0.99, 1.0)
        },
    )
    psis = list(metrics.DEFAULT_PSIS)
    rare = x[~frequent]
    for level, outputs in (("centroid", centroids), ("text", synthetic)):
        block: dict[str, Any] = {"n_outputs": int(len(outputs))}
        if len(outputs) and n_freq:
            block["utility"] = metrics.utility(outputs, x, r, frequent=frequent)
            # α = 1 (a hit must lie within r itself): with unit-norm embeddings such as MiniLM's,
            # α·r = 1.35 at r = 0.9 is close to the distance of unrelated texts (≈ 1.4).
            block["utility_strict"] = metrics.utility(outputs, x, r, alpha=1.0, frequent=frequent)
        elif len(outputs):
            block["utility"] = metrics.utility(outputs, x, r)  # F empty: against all of V only
            block["note"] = "no frequent text at (r, t): utility is against all texts V"
        if len(outputs):
            block["ssp"] = metrics.empirical_ssp(outputs, rare, r, psis)
            nearest = metrics.nearest_distances(x, outputs)
            block["nearest_frequent"] = nearest[frequent]
            block["nearest_infrequent"] = nearest[~frequent]
            block["delta_star_at_r"] = dict(block["ssp"]).get(1.0, math.nan)
        out[level] = block
    if release is not None and seeds is not None and release.info.get("path") == "mechanism":
        from mechanism.grid import PublicGrid

        grid = PublicGrid.derive(seeds, x.shape[1], params)
        out["clusters"] = metrics.cluster_recovery(grid.bucket_indices(x), release.ids, threshold=t)
    if users is not None:
        out["users"] = evaluate_users(x, users, centroids, synthetic, params, progress=progress)
    return out


def evaluate_users(
    x: npt.NDArray[np.floating],
    users: Sequence[str],
    centroids: npt.NDArray[np.floating],
    synthetic: npt.NDArray[np.floating],
    params: FreParams,
    *,
    progress: bool = False,
) -> dict[str, Any]:
    """The release scored over users (:func:`mechanism.metrics.user_utility`, ``user_ssp``)
    against the user-level frequent set: texts with at least t *other users* within r."""
    from mechanism import metrics

    r, t = params.radius, params.threshold
    frequent = metrics.frequent_mask(metrics.user_neighbour_counts(x, list(users), r, progress=progress), t)
    out: dict[str, Any] = {
        "n_users": len(set(users)),
        "n_frequent": int(frequent.sum()),
        "frequent_definition": f"texts with >= t = {t} other users within r = {r:g}",
    }
    for level, outputs in (("centroid", centroids), ("text", synthetic)):
        block: dict[str, Any] = {"n_outputs": int(len(outputs))}
        if len(outputs) and frequent.any():
            block["utility"] = metrics.user_utility(outputs, x, list(users), r, frequent=frequent)
        if len(outputs):
            ssp = metrics.user_ssp(outputs, x, list(users), r, (1.0,), frequent=frequent)
            block["delta_star_at_r"] = ssp[0][1]
        out[level] = block
    return out


def _strip_arrays(evaluation: dict[str, Any] | None) -> dict[str, Any] | None:
    """The evaluation without per-text arrays (for summary/evaluation JSON)."""
    if evaluation is None:
        return None
    out: dict[str, Any] = {}
    for key, value in evaluation.items():
        if isinstance(value, dict):
            out[key] = {
                k: (
                    {"n": int(len(v)), "mean": float(np.mean(v)) if len(v) else math.nan}
                    if isinstance(v, np.ndarray)
                    else v
                )
                for k, v in value.items()
            }
        else:
            out[key] = value
    return out


# -- 6. evaluation (private data; labelled) -----------------------------------------------------------
def evaluate_run(
    x: npt.NDArray[np.float32],
    released: Released,
    synthetic: Synthetic,
    params: FreParams,
    seeds: SeedPlan,
    options: SynthesisOptions,
    out: Path,
    stages: _Stages,
    *,
    users: Sequence[str] | None = None,
    texts: Sequence[str] | None = None,
) -> dict[str, Any] | None:
    if not options.evaluate:
        return None
    with stages.stage("evaluate", "evaluation (reads the private data; not part of the DP release)"):
        release = released.release
        evaluation = evaluate_release(
            x, release.centroids, synthetic.embeddings, params, release=release, seeds=seeds,
            progress=options.progress, users=users,
        )
        if texts is not None:
            from fre_protocol.text.quality import readability

            written = [r["text"] for r in synthetic.records if r.get("kind") == "inversion" and r.get("rank") == 0]
            evaluation["readability"] = readability(written, list(texts))
        write_json(out / EVALUATION_FILE, _strip_arrays(evaluation))
    return evaluation


# -- 7. summary and report ----------------------------------------------------------------------------
def summarise(
    corpus: Corpus,
    prepared: Prepared,
    released: Released,
    synthetic: Synthetic,
    evaluation: dict[str, Any] | None,
    options: SynthesisOptions,
    stages: _Stages,
    *,
    command: str | None,
    notes: dict[str, Any] | None,
) -> dict[str, Any]:
    embedder, inverter, release, ledger = prepared.embedder, prepared.inverter, released.release, released.ledger
    return {
        "command": command,
        "corpus": corpus.describe(),
        "n_texts": len(corpus),
        "n_users": corpus.n_users,
        "unit": dict(ledger.get("unit") or {}),
        "embedder": embedder.model_id,
        "embedder_device": embedder.device if embedder.stats["computed"] else "cache",
        "embedding_cache": dict(embedder.stats),
        "protocol": options.protocol,
        "inverter": getattr(inverter, "describe", lambda: {"name": inverter.name})(),
        "options": asdict(options),
        "params": prepared.params.to_dict(),
        "radius_source": prepared.radius_note,
        "notes": dict(notes or {}),
        "seeds": dict(release.seeds),
        "n_released": len(release),
        "released_texts": int(sum(b.count for b in release.buckets)),
        "n_synthetic": len(synthetic.records),
        "epsilon": ledger["epsilon"],
        "delta": ledger["delta"],
        "sigma": ledger["sigma"],
        "empty_reason": released.empty_reason,
        "warnings": prepared.warnings,
        "transcript": str(released.transcript_path) if released.transcript_path else None,
        "protocol_costs": released.costs,
        "timings_s": stages.with_total(),
        "peak_memory_mb": peak_memory_mb(),
        "evaluation": _strip_arrays(evaluation),
        "release_info": dict(release.info),
        "release_diagnostics": dict(release.diagnostics),
    }


def write_summary_and_report(
    out: Path,
    summary: dict[str, Any],
    released: Released,
    synthetic: Synthetic,
    evaluation: dict[str, Any] | None,
    options: SynthesisOptions,
    stages: _Stages,
) -> None:
    """``summary.json``, then ``report.html`` and the summary again with the report's timing."""
    write_json(out / SUMMARY_FILE, summary)
    if not options.report:
        return
    from fre_protocol.text.report import write_report

    with stages.stage("report", "writing report.html"):
        write_report(out / REPORT_FILE, summary=summary, release=released.release, records=synthetic.records,
                     evaluation=evaluation, ledger=released.ledger)
    summary["timings_s"] = stages.with_total()
    summary["peak_memory_mb"] = peak_memory_mb()
    write_json(out / SUMMARY_FILE, summary)


# -- the job -----------------------------------------------------------------------------------------
def run_synthesis(
    corpus: Corpus,
    params: FreParams,
    seeds: SeedPlan,
    options: SynthesisOptions,
    out_dir: str | os.PathLike[str],
    *,
    input_path: str | os.PathLike[str] | None = None,
    command: str | None = None,
    notes: dict[str, Any] | None = None,
    embedder: SentenceTransformerEmbedder | None = None,
    log: Any = print,
    unit: PrivacyUnit | None = None,
) -> SynthesisResult:
    """Run the whole job (module docstring) and write every output file into ``out_dir``.

    ``embedder`` replaces the one ``options.embedder`` / ``options.cache_dir`` would build (e.g. a
    model already loaded). ``unit``: whom the guarantee protects; by default each text (a corpus
    without users) or each of the corpus's users with c = 1.
    """
    if unit is None:
        unit = TEXT_UNIT if corpus.users is None else PrivacyUnit(kind="user", cap=1, user_field=corpus.user_field)
    check_unit(corpus, unit, options)
    out = prepare_out_dir(out_dir)
    stages = _Stages(log)
    prepared = prepare(corpus, params, seeds, options, stages, embedder=embedder, input_path=input_path)
    x = embed_corpus(corpus, prepared.embedder, options, stages)
    released = release_and_record(x, prepared.params, seeds, options, out, stages, users=corpus.users, unit=unit)
    synthetic = invert_release(released.release, prepared, seeds, options, stages)
    write_synthetic(out, synthetic, stages)
    evaluation = evaluate_run(x, released, synthetic, prepared.params, seeds, options, out, stages,
                              users=corpus.users, texts=corpus.texts)
    summary = summarise(corpus, prepared, released, synthetic, evaluation, options, stages,
                        command=command, notes=notes)
    write_summary_and_report(out, summary, released, synthetic, evaluation, options, stages)
    return SynthesisResult(
        release=released.release,
        records=synthetic.records,
        evaluation=evaluation,
        timings=dict(summary["timings_s"]),
        warnings=prepared.warnings,
        out_dir=out,
        transcript_path=released.transcript_path,
        peak_memory_mb=peak_memory_mb(),
        summary=summary,
    )
