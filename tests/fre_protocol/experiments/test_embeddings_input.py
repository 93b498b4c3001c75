"""Experiments on embeddings alone (``--embeddings X.npy``): centroid-level rows, and the
text-only experiments say there is no text instead of failing. A planted population with known
clusters makes the answers checkable: every planted cluster is heavy and found without noise."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fre_protocol.cli import main
from mechanism.population import synthetic_population
from primitives.randomness import RandomSource


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("embeddings-experiment")
    population = synthetic_population(4, 150, 40, 64, 0.5, RandomSource.seeded(3, "experiments/population"),
                                      spread=0.02)
    np.save(folder / "x.npy", population.embeddings)
    argv = ["experiment", "utility,baselines,naturalness,ablation-t", "--embeddings", str(folder / "x.npy"),
            "--out", str(folder / "out"), "--epsilons", "8,inf", "--seeds", "1", "--threshold", "100",
            "--k", "10", "--radius", "0.5", "--no-progress"]
    assert main(argv) == 0
    return folder / "out"


def _rows(folder: Path, name: str) -> list[dict]:  # type: ignore[type-arg]
    return json.loads((folder / f"{name}.json").read_text(encoding="utf-8"))["rows"]


def test_centroid_level_only_and_planted_clusters_found(run_dir: Path) -> None:
    rows = _rows(run_dir, "utility")
    assert {r["level"] for r in rows} == {"centroid"}
    free = [r for r in rows if r["epsilon"] == "inf"]
    assert all(r["n_released"] >= 4 and r["recall"] == 1.0 for r in free)


def test_baselines_on_planted_clusters(run_dir: Path) -> None:
    by = {(r["method"], r["epsilon"]): r for r in _rows(run_dir, "baselines")}
    for method in ("fre-e2t", "central-dp", "trusted-curator", "ldp-oue", "ldp-embedding"):
        assert by[(method, "inf")]["cluster_recall"] == 1.0, method
    assert by[("trusted-curator", 8.0)]["cluster_recall"] == 1.0  # no sampling: every planted cluster
    assert by[("ldp-embedding", 8.0)]["n_released"] == 0  # d = 64 unit vectors + σ ≈ 1 noise: scattered
    assert by[("fre-e2t", 8.0)]["cluster_recall"] >= 0.5


def test_text_experiments_say_there_is_no_text(run_dir: Path) -> None:
    (row,) = _rows(run_dir, "naturalness")
    assert (row["source"], row["note"]) == ("none", "--embeddings holds no text")


def test_index_written_for_several_experiments(run_dir: Path) -> None:
    assert (run_dir / "index.html").is_file()
    ablation = _rows(run_dir, "ablation-t")
    assert {r["threshold"] for r in ablation} == {100, 150, 200}
