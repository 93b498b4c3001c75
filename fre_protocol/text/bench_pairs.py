"""Paired comparisons of an inversion benchmark's rows, target by target.

``fre-e2t bench-inversion`` stores per row (inverter × target kind) the mean E5 gain and each
target's guide cosine. Two inverters measured in one run saw the same targets, so their
difference is best read target by target: :func:`per_target_scores` recomputes every target's
E5 gain as the bench's own judge did (asserting it matches the stored mean), and :func:`paired`
gives the mean difference and its standard error. :func:`with_baseline` joins a second run of
the same targets (the same command before a model file changed, say), so its rows pair too.
:func:`language_model_scores` judges every stored output with a language model after the run
(Gemma-3 270M, of another family than the writer, agrees with a reader where the bench's
Kneser–Ney judge does not); :func:`other_family_scores` is it with Gemma against news.
``scripts/bench_pairs.py`` prints them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from primitives.errors import InvalidParameterError


def per_target_scores(bench: Mapping[str, Any], cache_dir: str | None = None) -> dict[str, dict[str, list[float]]]:
    """Per inverter label (e.g. ``guided[default]``, ``guided[default] seed``): the E5 gain and
    the guide cosine of every target, in the bench's row order (target kinds as stored), the
    E5 gains computed as :func:`fre_protocol.text.inversion_bench.judge_outputs` does on targets
    rebuilt from the run's config (deterministic)."""
    from fre_protocol.text import judges
    from fre_protocol.text.embedder import SentenceTransformerEmbedder
    from fre_protocol.text.inversion_bench import BenchConfig, SecondEmbedding, bench_targets

    config = dataclasses.replace(BenchConfig.recorded(bench["config"]), progress=False)
    _, _, targets = bench_targets(config, SentenceTransformerEmbedder(cache_dir=cache_dir))
    second = judges.SecondEmbedder()
    embedded = SecondEmbedding()  # each kind's target and source texts, as the bench's judge has them
    for t in targets:
        embedded.add(second, t)
    out: dict[str, dict[str, list[float]]] = {}
    for r in bench["rows"]:
        kind = r["target"]
        f = judges.fidelity(second.embed(r["outputs"]), embedded.targets[kind], embedded.sources[kind])
        if abs(f["gain_mean"] - r["e5_gain"]) > 1e-6:
            raise AssertionError(f"{r['inverter']} {r['target']}: E5 gain {f['gain_mean']} recomputed, {r['e5_gain']} stored")
        scores = out.setdefault(r["inverter"], {"e5_gain": [], "guide_cosine": []})
        scores["e5_gain"].extend(float(g) for g in f["gains"])
        scores["guide_cosine"].extend(float(c) for c in r["cosines"])
    return out


def language_model_scores(
    bench: Mapping[str, Any], nlls: Callable[[Sequence[str]], Any], reference: Sequence[str],
    quantile: float | None = None,
) -> tuple[dict[str, list[float]], float]:
    """Per inverter label the NLL of every output under a language model (``nlls``: texts → mean
    NLL per token), in the bench's row order as :func:`per_target_scores`, and the cut: the
    ``quantile`` (default the judges' 90th percentile) of the NLLs of ``reference``, real texts
    the model judges against. Outputs and reference are scored in one call."""
    from fre_protocol.text import judges

    if not reference:
        raise InvalidParameterError("reference: the language model's cut needs real texts, got none")
    outputs: dict[str, list[str]] = {}
    for r in bench["rows"]:
        outputs.setdefault(r["inverter"], []).extend(r["outputs"])
    texts = list(dict.fromkeys([*reference, *(t for o in outputs.values() for t in o)]))
    scored = dict(zip(texts, (float(x) for x in nlls(texts)), strict=True))
    cut = float(np.quantile([scored[t] for t in reference], judges.REFERENCE_QUANTILE if quantile is None else quantile))
    return {label: [scored[t] for t in o] for label, o in outputs.items()}, cut


def other_family_scores(bench: Mapping[str, Any]) -> tuple[dict[str, list[float]], float]:
    """:func:`language_model_scores` under Gemma-3 270M (optional, ``fre-e2t[judge]``: a
    :class:`~primitives.errors.FreError` naming the install when absent), cut on the fluency
    judge's held-out news sentences (:func:`fre_protocol.text.judges.news_reference`)."""
    from fre_protocol.text import judges
    from fre_protocol.text.quality import other_family_nlls

    judges.other_family_lm_file()  # fails here, before any scoring, when the judge is not installed
    return language_model_scores(bench, other_family_nlls, judges.news_reference())


BASELINE = " @baseline"
# What decides a bench's targets: two runs agreeing on these saw the same targets in the same order.
TARGET_KEYS = ("seed", "singles", "centroids", "candidates", "targets_from", "fixed_judge")


def with_baseline(bench: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    """``bench`` with ``baseline``'s rows added under labels ending in ``@baseline``."""
    differ = [k for k in TARGET_KEYS if bench["config"].get(k) != baseline["config"].get(k)]
    if differ:
        raise InvalidParameterError(f"baseline: the two runs drew different targets (they differ in {', '.join(differ)})")
    extra = [{**r, "inverter": r["inverter"] + BASELINE} for r in baseline["rows"]]
    return {**bench, "rows": [*bench["rows"], *extra], "baseline_command": baseline["command"]}


def paired(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    """Mean of b − a over the same targets, its standard error and n."""
    if len(a) != len(b) or len(a) < 2:
        raise ValueError(f"paired differences need the same targets, at least two; got {len(a)} and {len(b)}")
    d = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    return {"mean": float(d.mean()), "se": float(d.std(ddof=1) / np.sqrt(len(d))), "n": len(d)}


__all__ = ["BASELINE", "language_model_scores", "other_family_scores", "paired", "per_target_scores", "with_baseline"]
