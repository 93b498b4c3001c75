"""Paired comparisons of an inversion benchmark's rows, target by target.

``fre-e2t bench-inversion`` stores per row (inverter × target kind) the mean E5 gain and each
target's guide cosine. Two inverters measured in one run saw the same targets, so their
difference is best read target by target: :func:`per_target_scores` recomputes every target's
E5 gain as the bench's own judge did (asserting it matches the stored mean), and :func:`paired`
gives the mean difference and its standard error. ``scripts/bench_pairs.py`` prints them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def per_target_scores(bench: Mapping[str, Any], cache_dir: str | None = None) -> dict[str, dict[str, list[float]]]:
    """Per inverter label (e.g. ``guided[default]``, ``guided[default] seed``): the E5 gain and
    the guide cosine of every target, in the bench's row order (target kinds as stored), the
    E5 gains computed as :func:`fre_protocol.text.inversion_bench.judge_outputs` does on targets
    rebuilt from the run's config (deterministic)."""
    from fre_protocol.text import judges
    from fre_protocol.text.embedder import SentenceTransformerEmbedder
    from fre_protocol.text.inversion_bench import BenchConfig, bench_targets

    raw = {k: v for k, v in bench["config"].items() if k in BenchConfig.__dataclass_fields__}
    for key in ("inverters", "budgets", "seeds_from"):
        if key in raw:
            raw[key] = tuple(raw[key])
    raw["progress"] = False
    _, _, targets = bench_targets(BenchConfig(**raw), SentenceTransformerEmbedder(cache_dir=cache_dir))
    second = judges.SecondEmbedder()
    sources = {t.kind: second.embed(list(t.sources)) for t in targets}
    members = next((t.members for t in targets if t.members), None)
    centroid_e5 = None
    if members:
        flat = second.embed([x for m in members for x in m])
        at, means = 0, []
        for group in members:
            means.append(flat[at : at + len(group)].mean(axis=0))
            at += len(group)
        centroid_e5 = np.stack(means)
    out: dict[str, dict[str, list[float]]] = {}
    for r in bench["rows"]:
        e5_target = sources["single"] if r["target"] == "single" else centroid_e5
        f = judges.fidelity(second.embed(r["outputs"]), e5_target, sources[r["target"]])
        if abs(f["gain_mean"] - r["e5_gain"]) > 1e-6:
            raise AssertionError(f"{r['inverter']} {r['target']}: E5 gain {f['gain_mean']} recomputed, {r['e5_gain']} stored")
        scores = out.setdefault(r["inverter"], {"e5_gain": [], "guide_cosine": []})
        scores["e5_gain"].extend(float(g) for g in f["gains"])
        scores["guide_cosine"].extend(float(c) for c in r["cosines"])
    return out


def paired(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    """Mean of b − a over the same targets, its standard error and n."""
    if len(a) != len(b) or len(a) < 2:
        raise ValueError(f"paired differences need the same targets, at least two; got {len(a)} and {len(b)}")
    d = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    return {"mean": float(d.mean()), "se": float(d.std(ddof=1) / np.sqrt(len(d))), "n": len(d)}


__all__ = ["paired", "per_target_scores"]
