"""The ``ssp`` experiment (paper Figure 4) on a population whose δ*(ψ·r) is known in advance.

Four tight clusters of 150 unit vectors (frequent at every t swept), two rare points per cluster
at chord distance 0.6 from its centre (no cluster point within r = 0.5, so infrequent) and 40
scattered points. Without noise (ε = ∞) every released centroid sits on its cluster's centre, so
exactly the 8 rare points come within ψ·r once ψ·r passes 0.6 and none before: δ* is 0 up to
ψ = 1.1 (0.55) and 8/48 from ψ = 1.3 (0.65) on.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fre_protocol.cli import main
from fre_protocol.experiments.ssp import THRESHOLDS, psi_key, render, smallest_safe_psi

RADIUS, DIM, RARE_CHORD = 0.5, 64, 0.6


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def _population() -> np.ndarray:
    rng = np.random.default_rng(11)
    centres = _unit(rng.standard_normal((4, DIM)))
    rows = []
    angle = 2 * math.asin(RARE_CHORD / 2)
    for c in centres:
        rows.append(_unit(c + 0.004 * rng.standard_normal((150, DIM))))
        for _ in range(2):  # a direction orthogonal to c, then rotate c towards it by the angle
            u = rng.standard_normal(DIM)
            u = _unit(u - (u @ c) * c)
            rows.append((math.cos(angle) * c + math.sin(angle) * u)[None, :])
    rows.append(_unit(rng.standard_normal((40, DIM))))
    return np.concatenate(rows).astype(np.float32)


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:  # type: ignore[type-arg]
    folder = tmp_path_factory.mktemp("ssp")
    np.save(folder / "x.npy", _population())
    argv = ["experiment", "ssp", "--embeddings", str(folder / "x.npy"), "--out", str(folder / "out"),
            "--epsilons", "inf", "--seeds", "1", "--radius", str(RADIUS), "--k", "6", "--no-progress"]
    assert main(argv) == 0
    return json.loads((folder / "out" / "ssp.json").read_text(encoding="utf-8"))["rows"]  # type: ignore[no-any-return]


def test_delta_star_is_zero_before_the_rare_points_and_exact_after(rows: list[dict]) -> None:  # type: ignore[type-arg]
    centroid = [r for r in rows if r["level"] == "centroid"]
    assert {(r["method"], r["threshold"]) for r in centroid} == {(m, t) for m in ("fre-e2t", "central-dp") for t in THRESHOLDS}
    for r in centroid:
        assert r["n_infrequent"] == 48 and r["n_released"] >= 4, r
        assert all(r[psi_key(psi)] == 0.0 for psi in (0.1, 0.5, 1.0, 1.1)), r
        assert all(r[psi_key(psi)] == pytest.approx(8 / 48) for psi in (1.3, 1.4, 1.5)), r


def test_the_reading_names_the_largest_safe_psi(rows: list[dict]) -> None:  # type: ignore[type-arg]
    got = [r for r in rows if r["method"] == "fre-e2t" and r["threshold"] == 100]
    assert smallest_safe_psi(got) in (1.1, 1.2)  # 1.2: the rare points at 0.6 sit on the edge
    text = render(rows)
    assert "Figure 4" in text and "fre-e2t centroid, t = 100, ε = ∞" in text


def test_an_infeasible_threshold_is_a_row_not_a_failure() -> None:
    rows = [{"method": "fre-e2t", "epsilon": 4.0, "threshold": 10, "seed": 1, "level": "centroid",
             "feasible": False, "reason": "delta budget exhausted"}]
    assert "Infeasible at ε = 4, t = 10 for fre-e2t: delta budget exhausted" in render(rows)


def test_an_aug_pe_run_scored_at_each_threshold_counts_its_cost_once() -> None:
    # One Aug-PE run per seed is scored against every t; its rows must not sum its time twice.
    from fre_protocol.experiments.ssp import flatten

    run = {"method": "aug-pe", "epsilon": 4.0, "seed": 1, "level": "text", "unit_seconds": 125.0,
           "by_threshold": {"50": {"delta_star_at_r": 0.001}, "100": {"delta_star_at_r": 0.002}}}
    rows = flatten([run, {"method": "fre-e2t", "threshold": 100, "unit_seconds": 0.5}])
    assert [(r["method"], r.get("threshold"), r["unit_seconds"]) for r in rows] == [
        ("aug-pe", 50, 125.0), ("aug-pe", 100, 0.0), ("fre-e2t", 100, 0.5)]
    assert rows[1]["delta_star_at_r"] == 0.002 and "by_threshold" not in rows[1]
