"""What S_syn's view of the tag submissions says about which tags are dummies (issue 28, H2).

A run is played on topic-grouped rows (tight clusters laid out one after the other in the input),
and every batch of tag submissions that reaches S_syn is taken from S_syn's recorded view as the
driver records it (one ``Recorder.add`` per delivery). For each tag, its *spread* is the number of
distinct deliveries its submissions came in; :func:`spread_test` compares the spreads of real and
dummy tags of the same count.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import few_dummies
import numpy as np
import pytest

from fre_protocol.messages import TagSubmission, decode
from fre_protocol.roles import base
from fre_protocol.roles.base import ACCEPTED, PHASE1_SUBMIT
from mechanism.population import synthetic_population
from primitives.dummies import tsdlap
from primitives.randomness import RandomSource

#: Windows of one chunk of 32 users; 50 clusters of 8 users one after the other, then 40 rare
#: points: 440 users in 14 windows, each cluster inside one or two of them.
CONFIG = dataclasses.replace(few_dummies.CONFIG, chunk_size=32)
WINDOW_CHUNKS = 1
#: τ = 8 (t = 16, p_s = 0.5): counts 1 … 7 are padded, about 40 dummy tags at each (ε0 = 0.3).
PARAMS = few_dummies.PARAMS
#: Significance level of the spread test.
ALPHA = 0.01


def grouped_rows(seed: int = 3) -> np.ndarray:
    """Topic-grouped input: tight clusters (one bucket each), contiguous, then rare points."""
    return synthetic_population(
        50, 8, 40, 32, 0.5, RandomSource.seeded(seed, "h2/population"), spread=0.02, shuffle=False
    ).embeddings


@dataclass(frozen=True, slots=True)
class SpreadView:
    """Per tag: its count at S_syn, the deliveries it came in, and whether it is a dummy."""

    counts: dict[bytes, int]
    spread: dict[bytes, int]
    dummy: set[bytes]
    deliveries: int

    def by_level(self) -> dict[int, tuple[list[int], list[int]]]:
        """Count level → (real tags' spreads, dummy tags' spreads), levels below τ only."""
        out: dict[int, tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
        for tag, c in self.counts.items():
            if 2 <= c < PARAMS.tau:
                out[c][1 if tag in self.dummy else 0].append(self.spread[tag])
        return dict(sorted(out.items()))


@contextmanager
def syn_view(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], SpreadView]]:
    """Within the block, record each delivery of tag submissions in S_syn's view and the dummy
    user's tags (the drivers' parties must run in this process: an in-process Dask cluster)."""
    deliveries: list[list[bytes]] = []
    dummies: set[bytes] = set()
    add, draw = base.Recorder.add, tsdlap.dummy_submissions

    def spy_add(self: base.Recorder, rows: Any) -> None:
        rows = list(rows)
        tags = [
            decode(r[5], TagSubmission).tag  # type: ignore[union-attr]
            for r in rows
            if r[0] == "S_syn" and r[1] == PHASE1_SUBMIT and r[6] == ACCEPTED
        ]
        if tags:
            deliveries.append(tags)
        add(self, rows)

    def spy_draw(*args: Any, **kwargs: Any) -> Any:
        tags = draw(*args, **kwargs)
        dummies.update(bytes(t) for t in tags)
        return tags

    monkeypatch.setattr(base.Recorder, "add", spy_add)
    monkeypatch.setattr(tsdlap, "dummy_submissions", spy_draw)

    def view() -> SpreadView:
        counts: Counter[bytes] = Counter()
        where: dict[bytes, set[int]] = defaultdict(set)
        for k, tags in enumerate(deliveries):
            for t in tags:
                counts[t] += 1
                where[t].add(k)
        return SpreadView(
            counts=dict(counts), spread={t: len(w) for t, w in where.items()}, dummy=dummies,
            deliveries=len(deliveries),
        )

    yield view


def spread_test(view: SpreadView) -> tuple[float, float]:
    """Stratified two-sample permutation test of the spreads, real against dummy tags, within
    each count level 2 … ⌈τ⌉ − 1 (van Elteren's idea with the values themselves): in a level
    with n tags, n_r of them real, pooled mean m and variance v, the real tags' sum S has, when
    the labels are exchangeable, mean n_r·m and variance n_r·(n − n_r)·v / n. Returns
    Z = Σ (S − n_r·m) / √Σ n_r·(n − n_r)·v / n and its two-sided normal p-value."""
    num = var = 0.0
    for real, dummy in view.by_level().values():
        n_r, n = len(real), len(real) + len(dummy)
        if not real or not dummy:
            continue
        pooled = np.asarray(real + dummy, dtype=np.float64)
        num += float(np.sum(real)) - n_r * float(pooled.mean())
        var += n_r * (n - n_r) * float(pooled.var(ddof=1)) / n
    if var == 0.0:
        return 0.0, 1.0
    z = num / math.sqrt(var)
    return z, math.erfc(abs(z) / math.sqrt(2.0))


def describe(view: SpreadView) -> str:
    """Per level: the real and the dummy tags' spread histograms (for a failure message)."""
    lines = [f"{view.deliveries} deliveries to S_syn"]
    for c, (real, dummy) in view.by_level().items():
        lines.append(f"count {c}: real {dict(sorted(Counter(real).items()))}, dummy {dict(sorted(Counter(dummy).items()))}")
    return "\n".join(lines)


__all__ = ["ALPHA", "CONFIG", "PARAMS", "WINDOW_CHUNKS", "SpreadView", "describe", "grouped_rows", "spread_test", "syn_view"]
