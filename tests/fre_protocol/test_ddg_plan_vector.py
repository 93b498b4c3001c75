"""A DP round's phase-2 plan as a device derives it (tests/vectors/ddg_plan), against the code.

The vectors are what the TypeScript client's accountant replays (clients/web/test/plan.test.ts),
so they must stay what the Python code computes: the generator run now must write the committed
file byte for byte. Each case's recorded σ_int,h must meet the aggregation budget at its honest
count, and the grid must exercise every way a σ_int,h is found (the floor's configuration, the
exact √ scaling where τ_DDG underflows, and the bisection where it does not).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import known_answers
import pytest

from fre_protocol.roles.config import COUNT_CALIBRATION, FLOOR_CALIBRATION
from primitives.ddg import clipped_sensitivity, ddg_epsilon

FILE = "ddg_plan/plans.json"


def generator() -> ModuleType:
    path = Path(known_answers.ROOT) / "ddg_plan" / "generate.py"
    spec = importlib.util.spec_from_file_location("ddg_plan_generate", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def vector() -> dict[str, Any]:
    return known_answers.load(FILE)


def test_the_committed_vectors_are_what_the_code_computes_now(vector: dict[str, Any]) -> None:
    committed = (Path(known_answers.ROOT) / FILE).read_text(encoding="utf-8")
    assert known_answers.render(generator().build()) + "\n" == committed
    assert vector["format"] == 1


def test_every_recorded_sigma_meets_the_budget_at_its_honest_count(vector: dict[str, Any]) -> None:
    for case in vector["cases"]:
        config, budget = case["ddg_config"], case["budget"]
        sens = clipped_sensitivity(min(case["round"]["params"]["sensitivity_ratio"] * case["round"]["params"]["radius"],
                                       2 * case["round"]["params"]["clip"]), config["clip"])
        for sized in case["counts"]:
            eps = ddg_epsilon(sigma_int=sized["sigma_int"], gamma=config["gamma"], sensitivity=sens,
                              dim_padded=config["padded_dim"], n=sized["n_honest"], delta=budget["delta_agg"],
                              accountant=config["accountant"])
            assert eps == sized["epsilon"] <= budget["eps_agg"], (case["name"], sized["count"])


def test_the_grid_covers_both_calibrations_every_path_and_the_settings(vector: dict[str, Any]) -> None:
    cases = vector["cases"]
    assert {c["round"]["protocol"]["noise_calibration"] for c in cases} == {COUNT_CALIBRATION, FLOOR_CALIBRATION}
    assert {s["path"] for c in cases for s in c["counts"]} == {"floor", "scaled", "bisection"}
    assert {c["ddg_config"]["accountant"] for c in cases} == {"analytic", "rdp"}
    for accountant in ("analytic", "rdp"):
        paths = {s["path"] for c in cases if c["ddg_config"]["accountant"] == accountant for s in c["counts"]}
        assert paths == {"floor", "scaled", "bisection"}, (accountant, paths)
    assert {c["round"]["params"]["epsilon"] for c in cases} >= {1.0, 4.0, 8.0, 16.0}
    assert {c["round"]["dim"] for c in cases} >= {64, 384, 768}
    assert any(c["round"]["protocol"]["dishonest_fraction"] > 0 for c in cases)
    assert len({c["round"]["protocol"]["dropout_allowance"] for c in cases}) >= 3
    # Counts at the floor, just above it (m_h still the floor), and large.
    for case in cases:
        counts = [s["count"] for s in case["counts"]]
        assert counts[0] == case["floor"] and counts[1] == case["floor"] + 1 and counts[-1] >= 10 * case["floor"]
