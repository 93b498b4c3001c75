"""The ``paper-regime`` experiment at a tiny N: the paper's parameters with Lemma 2 operating
(Δ = u·r < 2C, δ_sens charged), the protocol beside the mechanism, the frequent set the planted
population's exact one, and a page that re-renders from its JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fre_protocol.cli import main
from fre_protocol.experiments import paper_regime
from mechanism import metrics

N = 3000


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("paper-regime")
    assert main(["experiment", "paper-regime", "--quick", "--limit", str(N), "--out", str(folder), "--no-progress"]) == 0
    return folder


def _rows(out: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads((out / "paper-regime.json").read_text(encoding="utf-8"))["rows"]
    return rows


def test_protocol_and_mechanism_release_in_the_paper_regime(out: Path) -> None:
    utility = [r for r in _rows(out) if r["part"] == "utility" and r["epsilon"] == 8.0]
    assert {r["method"] for r in utility} == {"fre-e2t", "central-dp"}
    for row in utility:
        assert row["n_points"] == N and row["n_released"] > 0 and row["f1"] > 0.5
        # Lemma 2 operates: Δ = u·r = 1.2 below the clip's 2C = 2, and δ_sens was charged
        assert row["sensitivity"] == pytest.approx(0.5 * 2.4) and row["sensitivity"] < row["diameter"] == 2.0
        assert row["delta_sens"] > 0


def test_noise_free_centroids_stay_inside_their_clusters(out: Path) -> None:
    """At ε = ∞ a centroid averages points within spread of one centre, so it lies within r of
    them (precision 1 at α = 1) and at least 2r − spread > 1.5·r from every rare point."""
    (free,) = [r for r in _rows(out) if r["part"] == "utility" and r["epsilon"] == "inf"]
    assert free["method"] == "central-dp" and free["precision_strict"] == 1.0
    assert all(free[paper_regime.psi_key("rare", psi)] == 0.0 for psi in paper_regime.PSIS)


def test_the_frequent_set_is_the_population_s_exact_one(out: Path) -> None:
    planted = paper_regime.population(N, 1)
    counted = metrics.frequent_mask(metrics.neighbour_counts(planted.embeddings, paper_regime.RADIUS), 100)
    assert np.array_equal(planted.frequent(100), counted)
    sizes = np.asarray(planted.cluster_sizes)
    assert sizes.min() < 101 < sizes.max()  # clusters below t: infrequent points that are not isolated
    for row in (r for r in _rows(out) if r.get("feasible", True)):
        assert row["n_frequent"] == int(counted.sum())
        assert row["n_infrequent_clustered"] == int((~counted & (planted.labels >= 0)).sum()) > 0


def test_sweeps_and_the_page_round_trip(out: Path) -> None:
    rows = _rows(out)
    k = {r["k"]: r for r in rows if r["part"] == "k"}
    assert set(k) == set(paper_regime.QUICK_K_VALUES)
    # Lemma 2 at k = 10: δ_sens = f(2/u)^10 alone exceeds δ = 1e-6, a row that says so (not an error)
    assert k[10]["feasible"] is False and "delta_sens" in k[10]["reason"] and k[20]["n_released"] > 0
    edge = {r["edge_multiplier"]: r for r in rows if r["part"] == "edge_multiplier"}
    assert edge[1.5]["sensitivity"] == pytest.approx(1.5 * edge[1.0]["sensitivity"])
    assert edge[1.5]["delta_sens"] == pytest.approx(edge[1.0]["delta_sens"])  # Δ = u·r·m: δ_sens unchanged
    page = (out / "paper-regime.md").read_text(encoding="utf-8")
    assert "paper Table 1, 6, 13, Figure 4" in page and f"central-dp (N = {N:,})" in page
    assert "| 8 | 10 | 1 | infeasible: delta budget exhausted" in page
    assert main(["experiment", "report", "--from", str(out), "--check"]) == 0
