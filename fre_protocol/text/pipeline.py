"""The main job: private texts in, DP synthetic texts out (SPEC §7, paper §6 Step 1-4).

:func:`run_synthesis` runs, in order, with a progress bar per stage and a wall-clock timing of each:

1. **checks before any budget is spent** — the inverter can run (vec2text weights present and
   the embedder is gtr-t5-base; the public pool is not the private input), the budget is feasible
   and the population can release something (:func:`fre_protocol.text.tuning.preflight`);
2. **embed** the corpus (cached on disk by text hash and model);
3. **release** — the distributed protocol (default; ``fre_protocol.runner.run_protocol``, all
   parties simulated in one process, transcripts recorded) or the centralized mechanism
   (``mechanism.fre_e2t.run_mechanism``);
4. **invert** each DP centroid into text (retrieval from the public pool, or vec2text), then
   optionally **paraphrase** (n variations per text);
5. **write** ``synthetic.jsonl``, ``centroids.npy`` + ``release.json``, ``ledger.json`` (always,
   also when nothing was released), ``summary.json``;
6. **evaluate** (optional, on by default) — reads the *private* embeddings to score the release
   against the frequent set (SPEC §8). This is an evaluation for the operator, outside the DP
   guarantee, and every output that carries it is labelled so;
7. **report** — ``report.html`` (self-contained).

Steps 4-5 are post-processing of the DP release and cost no privacy.
"""

from __future__ import annotations

import dataclasses
import math
import os
import platform
import resource
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fre_protocol.outputs import prepare_out_dir, write_json_atomic, write_jsonl_atomic
from fre_protocol.published import LEDGER_FILE, SYNTHETIC_FILE
from fre_protocol.text import Inversion, Inverter
from fre_protocol.text.corpora import Corpus
from fre_protocol.text.embedder import SentenceTransformerEmbedder
from fre_protocol.text.public_pool import DEFAULT_MAX_TEXTS, DEFAULT_SOURCES
from fre_protocol.text.tuning import EVALUATION_LABEL, explain_empty_release, preflight
from mechanism.params import FreParams
from mechanism.release import Release
from mechanism.seeds import SeedPlan
from primitives.errors import InvalidParameterError

PROTOCOLS = ("distributed", "central")
INVERTERS = ("retrieval", "vec2text")
PARAPHRASE_LABEL = "paraphrase"
SUMMARY_FILE = "summary.json"
REPORT_FILE = "report.html"
EVALUATION_FILE = "evaluation.json"


@dataclass(frozen=True, slots=True, kw_only=True)
class SynthesisOptions:
    """Everything about a synthesis run that is not a privacy parameter."""

    protocol: str = "distributed"
    inverter: str = "retrieval"
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

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise InvalidParameterError(f"protocol must be one of {list(PROTOCOLS)}, got {self.protocol!r}")
        if self.inverter not in INVERTERS:
            raise InvalidParameterError(f"inverter must be one of {list(INVERTERS)}, got {self.inverter!r}")
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
        if self.radius_quantile is not None and self.inverter != "retrieval":
            raise InvalidParameterError("radius_quantile reads the public pool: it needs the retrieval inverter")
        if self.inverter == "vec2text" and self.texts_per_centroid != 1:
            raise InvalidParameterError(
                "vec2text gives one text per centroid: use --paraphrases for more, not --texts-per-centroid"
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

    @contextmanager
    def stage(self, name: str, message: str | None = None) -> Iterator[None]:
        if message:
            self.log(message)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - t0


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


# -- building the components -------------------------------------------------------------------------
def build_inverter(
    options: SynthesisOptions,
    embedder: SentenceTransformerEmbedder,
    *,
    private_input: str | os.PathLike[str] | None = None,
) -> Inverter:
    """The inverter, checked to be usable *before* any privacy budget is spent."""
    if options.inverter == "vec2text":
        from fre_protocol.text.inverter_vec2text import Vec2TextInverter

        inv = Vec2TextInverter(
            embedder.model_id,
            model_dir=options.vec2text_dir,
            num_steps=options.vec2text_steps,
            sequence_beam_width=options.vec2text_beam,
        )
        inv.load()  # absent weights fail here, not after the release
        return inv
    from fre_protocol.text.inverter_retrieval import RetrievalInverter
    from fre_protocol.text.public_pool import build_pool

    if private_input is not None:
        private = Path(private_input).resolve()
        for f in options.pool_files:
            if Path(f).resolve() == private:
                raise InvalidParameterError(
                    f"the public pool file {str(f)!r} is the private input: the pool must be public "
                    "and disjoint from the private corpus"
                )
    pool = build_pool(
        sources=options.pool_sources,
        files=options.pool_files,
        field_name=options.pool_field,
        max_texts=options.pool_max,
    )
    return RetrievalInverter(embedder, pool, refine=options.refine)


def _release(
    x: npt.NDArray[np.float32], params: FreParams, seeds: SeedPlan, options: SynthesisOptions, out_dir: Path
) -> tuple[Release, Path | None, dict[str, Any]]:
    if options.protocol == "central":
        from mechanism.fre_e2t import run_mechanism

        release = run_mechanism(x, params, seeds, noise=options.noise, progress=options.progress)
        return release, None, {}
    from fre_protocol.runner import run_protocol

    result = run_protocol(
        x,
        params,
        seeds,
        noise=options.noise,
        out_dir=out_dir,
        dropout=options.dropout,
        progress=options.progress,
        workers=options.workers,
    )
    return result.release, result.transcript_path, dict(result.costs or {})


def _records(
    release: Release,
    inversions: list[Inversion],
    paraphrases: list[list[str]] | None,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for i, (bucket, inv) in enumerate(zip(release.buckets, inversions, strict=True)):
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
) -> dict[str, Any]:
    """SPEC §8 metrics against the frequent set of the private data: an EVALUATION, labelled so."""
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
) -> SynthesisResult:
    """Run the whole job (module docstring) and write every output file into ``out_dir``.

    ``embedder`` replaces the one ``options.embedder`` / ``options.cache_dir`` would build (e.g. a
    model already loaded).
    """
    from fre_protocol.text.report import write_report

    out = prepare_out_dir(out_dir)
    stages = _Stages(log)
    warnings: list[str] = []
    started = time.perf_counter()

    # 1. public work and checks before any private text is read or any budget is spent
    radius_note = "given"
    with stages.stage("setup", f"setup: {len(corpus)} texts from {corpus.source or corpus.name}"):
        if embedder is None:
            embedder = SentenceTransformerEmbedder(options.embedder, cache_dir=options.cache_dir)
        inverter = build_inverter(options, embedder, private_input=input_path)
        paraphraser = None
        if options.paraphrases:
            from fre_protocol.text.paraphraser import CausalLMParaphraser

            paraphraser = CausalLMParaphraser(options.paraphraser)
            paraphraser.load()
    if options.inverter == "retrieval":
        from fre_protocol.text.inverter_retrieval import RetrievalInverter

        assert isinstance(inverter, RetrievalInverter)
        with stages.stage("pool_index", f"embedding/indexing the public pool ({len(inverter.pool)} texts)"):
            pool_x = inverter.index(progress=options.progress)
        if options.radius_quantile is not None:
            from fre_protocol.text.tuning import MINILM_RADIUS_RANK, radius_from_public

            with stages.stage("radius", "choosing r from the public pool (quantile rule, paper §7.3)"):
                choice = radius_from_public(
                    pool_x, quantile=options.radius_quantile, neighbour_rank=MINILM_RADIUS_RANK
                )
            params = dataclasses.replace(params, radius=choice.radius)
            radius_note = (
                f"public pool: {options.radius_quantile:g}-quantile of the {MINILM_RADIUS_RANK}th-nearest-"
                f"neighbour distance over {choice.n_public} public texts"
            )
            log(f"r = {choice.radius:.4f} ({radius_note})")
    with stages.stage("setup"):
        check = preflight(params, len(corpus))
        warnings.extend(check.warnings)
        for w in check.warnings:
            log(f"warning: {w}")
        if not check.feasible:
            # calibrate_noise raises the precise InfeasibleBudgetError; let it surface unchanged
            from mechanism.accounting import calibrate_noise

            calibrate_noise(params)

    # 2. embedding
    with stages.stage("embed", f"embedding {len(corpus)} texts with {embedder.model_id}"):
        x = embedder.embed(list(corpus.texts), progress=options.progress)

    # 3. release
    path = "the two-server protocol" if options.protocol == "distributed" else "the centralized mechanism"
    with stages.stage("release", f"release: {path}, ε = {params.epsilon:g}"):
        release, transcript_path, costs = _release(x, params, seeds, options, out)
    m = len(release)
    with stages.stage("write"):
        release.save(out)
        ledger = release.ledger.to_dict()
        ledger["source"] = {
            "path": release.info.get("path", options.protocol),
            "note": "composed totals spent by this run (top-level epsilon, delta); every term with its source",
        }
        write_json(out / LEDGER_FILE, ledger)
    empty_reason = None
    if m == 0:
        empty_reason = explain_empty_release(params, len(corpus))
        log(f"nothing released: {empty_reason}")

    # 4. inversion (+ paraphrasing): post-processing
    inversions: list[Inversion] = []
    paraphrased: list[list[str]] | None = None
    with stages.stage("invert", f"inverting {m} centroid(s) with {inverter.name}"):
        if m:
            inversions = inverter.invert(
                release.centroids, num_texts=options.texts_per_centroid, progress=options.progress
            )
    if paraphraser is not None and m:
        with stages.stage("paraphrase", f"paraphrasing {m} text(s) × {options.paraphrases}"):
            paraphrased = paraphraser.paraphrase(
                [inv.texts[0] for inv in inversions],
                n=options.paraphrases,
                temperature=options.temperature,
                rng=seeds.secret("text/paraphrase"),
                progress=options.progress,
            )
    records = _records(release, inversions, paraphrased)
    synthetic = np.zeros((0, x.shape[1]), dtype=np.float32)
    if records:
        with stages.stage("embed_synthetic"):
            synthetic = embedder.embed([r["text"] for r in records])
            idx = np.array([r["centroid_index"] for r in records])
            dist = np.linalg.norm(synthetic.astype(np.float64) - release.centroids[idx], axis=1)
            for row, d in zip(records, dist.tolist(), strict=True):
                row["distance_to_centroid"] = d
    with stages.stage("write"):
        write_jsonl(out / SYNTHETIC_FILE, records)

    # 6. evaluation (private data; labelled)
    evaluation = None
    if options.evaluate:
        with stages.stage("evaluate", "evaluation (reads the private data; not part of the DP release)"):
            evaluation = evaluate_release(
                x, release.centroids, synthetic, params, release=release, seeds=seeds, progress=options.progress
            )
            write_json(out / EVALUATION_FILE, _strip_arrays(evaluation))

    timings = dict(stages.timings)
    timings["total"] = time.perf_counter() - started
    summary: dict[str, Any] = {
        "command": command,
        "corpus": corpus.describe(),
        "n_texts": len(corpus),
        "embedder": embedder.model_id,
        "embedder_device": embedder.device if embedder.stats["computed"] else "cache",
        "embedding_cache": dict(embedder.stats),
        "protocol": options.protocol,
        "inverter": getattr(inverter, "describe", lambda: {"name": inverter.name})(),
        "options": asdict(options),
        "params": params.to_dict(),
        "radius_source": radius_note,
        "notes": dict(notes or {}),
        "seeds": dict(release.seeds),
        "n_released": m,
        "released_texts": int(sum(b.count for b in release.buckets)),
        "n_synthetic": len(records),
        "epsilon": ledger["epsilon"],
        "delta": ledger["delta"],
        "sigma": ledger["sigma"],
        "empty_reason": empty_reason,
        "warnings": warnings,
        "transcript": str(transcript_path) if transcript_path else None,
        "protocol_costs": costs,
        "timings_s": timings,
        "peak_memory_mb": peak_memory_mb(),
        "evaluation": _strip_arrays(evaluation),
        "release_info": dict(release.info),
        "release_diagnostics": dict(release.diagnostics),
    }
    write_json(out / SUMMARY_FILE, summary)
    if options.report:
        with stages.stage("report", "writing report.html"):
            write_report(out / REPORT_FILE, summary=summary, release=release, records=records,
                         evaluation=evaluation, ledger=ledger)
        timings["report"] = stages.timings["report"]
        timings["total"] = time.perf_counter() - started
        summary["timings_s"] = timings
        summary["peak_memory_mb"] = peak_memory_mb()
        write_json(out / SUMMARY_FILE, summary)
    return SynthesisResult(
        release=release,
        records=records,
        evaluation=evaluation,
        timings=timings,
        warnings=warnings,
        out_dir=out,
        transcript_path=transcript_path,
        peak_memory_mb=peak_memory_mb(),
        summary=summary,
    )
