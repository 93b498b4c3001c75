"""``fre-e2t account``: JSON keys and values, the table, and one-line errors with exit status 2."""

from __future__ import annotations

import gc
import json
import math

import pytest

import fre_protocol.cli as cli
from fre_protocol.gc_policy import ROUND_THRESHOLDS
from mechanism.ledger import FLAT_KEYS

PAPER_EPS4 = [
    "--epsilon", "4", "--delta", "1e-6", "--radius", "0.5", "--threshold", "100", "--k", "20",
    "--p-sample", "0.3", "--budget-factor", "4", "--sensitivity-ratio", "2.4",
]  # fmt: skip


@pytest.fixture(autouse=True)
def _only_account(monkeypatch: pytest.MonkeyPatch) -> None:
    # The dispatcher imports every sub-command; this test needs only its own.
    monkeypatch.setattr(cli, "COMMANDS", {"account": "fre_protocol.cli.account"})


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = cli.main(["account", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_json_has_flat_keys_and_paper_values(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, *PAPER_EPS4, "--rounding", "paper", "--json")
    assert rc == 0
    data = json.loads(out)  # exactly one JSON object
    assert isinstance(data, dict)
    for key in FLAT_KEYS:
        assert key in data, key
    assert data["tau"] == 30.0
    assert data["eps_fre"] == pytest.approx(1.42670, abs=5e-6)
    assert data["delta_fre"] == pytest.approx(2.926e-10, rel=2e-4)
    assert data["delta_sens"] == pytest.approx(8.945e-11, abs=0.01e-11)
    assert data["eps_agg"] == pytest.approx(2.57330, abs=5e-6)
    assert data["delta_agg"] == pytest.approx(1e-6 - 2.926e-10 - 8.945e-11, rel=1e-6)
    assert data["sensitivity"] == pytest.approx(1.2)
    assert data["sigma"] == pytest.approx(2.136, abs=1e-9)
    assert data["noise_multiplier"] == pytest.approx(1.78, abs=1e-12)
    assert data["bucket_edge"] == pytest.approx(1 / math.sqrt(20))
    assert data["epsilon"] == pytest.approx(4.0) and data["delta"] == pytest.approx(1e-6)
    assert [t["name"] for t in data["terms"]] == [
        "heavy_hitters",
        "sensitivity_failure",
        "centroid_gaussian",
    ]
    assert data["lemma1"] == "closed"


@pytest.mark.parametrize(("eps", "p", "v", "sigma"), [(8, 0.5, 4, 1.13111), (16, 0.6, 3, 0.51490)])
def test_json_exact_sigma(
    capsys: pytest.CaptureFixture[str], eps: int, p: float, v: int, sigma: float
) -> None:
    rc, out, _ = _run(
        capsys, "--epsilon", str(eps), "--p-sample", str(p), "--budget-factor", str(v), "--json"
    )
    assert rc == 0 and json.loads(out)["sigma"] == pytest.approx(sigma, abs=1e-4)


def test_json_exact_lemma1_and_non_dp(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, *PAPER_EPS4, "--lemma1", "exact", "--json")
    data = json.loads(out)
    assert rc == 0 and data["lemma1"] == "exact"
    assert data["delta_fre"] == pytest.approx(1.95518e-12, rel=1e-5)
    rc, out, _ = _run(capsys, "--epsilon", "inf", "--json")
    data = json.loads(out)
    assert rc == 0 and data["epsilon"] == "inf" and data["sigma"] == 0.0 and data["tau"] == 100.0


def test_json_optimise_v(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(
        capsys, "--epsilon", "8", "--p-sample", "0.5", "--rounding", "paper", "--optimise-v",
        "--v-grid", "1,2,3,4", "--json",
    )  # fmt: skip
    data = json.loads(out)
    assert rc == 0
    assert data["optimisation"]["budget_factor"] == 2.0
    assert data["sigma"] == pytest.approx(0.924, abs=1e-9)
    assert data["params"]["budget_factor"] == 2.0
    rows = data["optimisation"]["candidates"]
    assert [r["feasible"] for r in rows] == [False, True, True, True]
    assert "delta_fre" in rows[0]["reason"] and rows[3]["sigma"] == pytest.approx(1.14)


def test_table_lists_every_term_with_its_source(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, *PAPER_EPS4, "--rounding", "paper")
    assert rc == 0
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("term "))
    block = lines[header : header + 5]
    assert [line.split()[0] for line in block] == [
        "term",
        "heavy_hitters",
        "sensitivity_failure",
        "centroid_gaussian",
        "total",
    ]
    # aligned: every row's source starts in the same column
    col = block[0].index("source")
    assert block[1][col:].startswith("Lemma 1")
    assert block[2][col:].startswith("Lemma 2")
    assert block[3][col:].startswith("Theorem 3")
    assert block[4][col:].startswith("basic composition")
    assert block[1].split()[1] == "1.4267"
    sigma_row = next(line for line in lines if line.startswith("sigma "))
    assert sigma_row.split()[1] == "2.136"
    assert any(line.startswith("noise_multiplier  1.78") for line in lines)


def test_table_optimise_marks_best_and_infeasible(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "--epsilon", "8", "--optimise-v", "--v-grid", "1,2,4")
    assert rc == 0
    assert "<- best" in next(line for line in out.splitlines() if line.startswith("0.5  2 "))
    assert "infeasible: delta budget exhausted" in out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--p-sample", "1.5"], "p_sample"),
        (["--delta", "0"], "delta"),
        (["--radius", "-1"], "radius"),
        (["--epsilon", "2"], "eps_fre"),
        (["--delta", "5e-11"], "delta_sens"),
        (["--threshold", "10", "--budget-factor", "1"], "delta_fre"),
        (["--epsilon", "inf", "--optimise-v"], "--optimise-v"),
    ],
)
def test_bad_values_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    rc, out, err = _run(capsys, *argv)
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("fre-e2t account: error: ") and needle in err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--k", "abc"], "--k"),
        (["--rounding", "up"], "--rounding"),
        (["--v-grid", "a,b"], "--v-grid"),
    ],
)
def test_unparseable_flags_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["account", *argv])
    assert exc.value.code == 2
    assert needle in capsys.readouterr().err


MINILM_EPS8 = [
    "--epsilon", "8", "--delta", "1e-6", "--radius", "0.9", "--threshold", "100", "--k", "10",
    "--p-sample", "0.7", "--budget-factor", "1.5", "--sensitivity-ratio", "4",
]  # fmt: skip


def test_json_shows_the_sensitivity_cap(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, *MINILM_EPS8, "--json")
    assert rc == 0
    data = json.loads(out)
    assert data["sensitivity"] == 2.0 and data["delta_sens"] == 0.0
    assert data["sigma"] == pytest.approx(1.66, abs=0.01)
    cap = data["sensitivity_cap"]
    assert cap == {
        "clip": 1.0,
        "sensitivity_target": pytest.approx(3.6),
        "diameter": 2.0,
        "sensitivity": 2.0,
        "binds": True,
        "delta_sens": 0.0,
    }
    assert data["params"]["clip"] == 1.0
    rc, out, _ = _run(capsys, *PAPER_EPS4, "--json")
    cap = json.loads(out)["sensitivity_cap"]
    assert cap["binds"] is False and cap["sensitivity"] == pytest.approx(1.2)
    assert cap["delta_sens"] == pytest.approx(8.945e-11, abs=0.01e-11)
    rc, out, _ = _run(capsys, *PAPER_EPS4, "--clip", "0.5", "--json")
    data = json.loads(out)
    assert data["sensitivity_cap"]["binds"] is True and data["sensitivity"] == 1.0


def test_table_shows_the_sensitivity_cap(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, *MINILM_EPS8)
    assert rc == 0
    lines = out.splitlines()
    assert " C=1 " in lines[1]
    rows = {line.split()[0]: line for line in lines if line.strip()}
    assert rows["sensitivity"].split()[1] == "2" and "binds" in rows["sensitivity"]
    assert rows["u*r"].split()[1] == "3.6" and rows["2C"].split()[1] == "2"
    assert rows["cap_binds"].split()[1] == "yes"
    assert rows["delta_sens"].split()[1] == "0"
    assert "2C" in rows["sensitivity_failure"]  # the term names the cap as its source
    rc, out, _ = _run(capsys, *PAPER_EPS4)
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert rows["cap_binds"].split()[1] == "no"
    assert rows["sensitivity"].split()[1] == "1.2"


def test_cap_shows_the_per_user_guarantee_by_the_formulas(capsys: pytest.CaptureFixture[str]) -> None:
    """Mechanism ledger: c-fold basic composition, (c·ε, c·δ). Protocol ledger: group privacy over
    c slots for S_syn's histogram view (c·ε_h, δ_h·(e^{c·ε_h} − 1)/(e^{ε_h} − 1)) plus c times the
    rest."""
    rc, out, _ = _run(capsys, *PAPER_EPS4, "--cap", "3", "--json")
    assert rc == 0
    data = json.loads(out)
    assert data["path"] == "mechanism"
    assert data["per_user"]["epsilon"] == pytest.approx(3 * data["epsilon"])
    assert data["per_user"]["delta"] == pytest.approx(3 * data["delta"])
    assert "c-fold basic composition" in data["per_user"]["rule"]
    rc, out, _ = _run(capsys, *PAPER_EPS4, "--cap", "3", "--protocol", "--dim", "16", "--json")
    assert rc == 0
    data = json.loads(out)
    hist = next(t for t in data["terms"] if t["name"] == "histogram_release")
    eps_h, delta_h = hist["epsilon"], hist["delta"]
    rest_eps, rest_delta = data["epsilon"] - eps_h, data["delta"] - delta_h
    assert data["path"] == "protocol"
    assert data["per_user"]["epsilon"] == pytest.approx(3 * eps_h + 3 * rest_eps)
    assert data["per_user"]["delta"] == pytest.approx(
        delta_h * math.expm1(3 * eps_h) / math.expm1(eps_h) + 3 * rest_delta
    )
    assert "group privacy over c=3 slots" in data["per_user"]["rule"]


def test_cap_table_and_its_errors(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, *PAPER_EPS4, "--cap", "2")
    assert rc == 0
    assert "per contribution" in out and "per user (c=2)" in out
    rc, out, _ = _run(capsys, *PAPER_EPS4, "--json")
    assert "per_user" not in json.loads(out)
    with pytest.raises(SystemExit):
        _run(capsys, *PAPER_EPS4, "--cap", "0")
    assert _run(capsys, *PAPER_EPS4, "--protocol", "--optimise-v")[0] == 2


def test_the_command_line_collects_cycles_at_the_round_thresholds(capsys: pytest.CaptureFixture[str]) -> None:
    """Every command runs with fre_protocol.gc_policy's thresholds, whatever the process had."""
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        rc, _, _ = _run(capsys, *PAPER_EPS4, "--json")
        assert rc == 0 and gc.get_threshold() == ROUND_THRESHOLDS
    finally:
        gc.set_threshold(*before)


def test_protocol_ledger_with_a_dishonest_fraction(capsys: pytest.CaptureFixture[str]) -> None:
    """--dishonest-fraction F sizes the protocol's DDG noise for ⌊(1 − F)·⌈τ⌉⌋ honest users and
    states it in its own zero-cost term; out of [0, 1), or without --protocol, a one-line error."""
    rc, out, _ = _run(capsys, *PAPER_EPS4, "--protocol", "--dim", "16", "--dishonest-fraction", "0.25", "--json")
    assert rc == 0
    terms = {t["name"]: t for t in json.loads(out)["terms"]}
    detail = terms["dishonest_contributors"]["detail"]
    assert detail["dishonest_fraction"] == 0.25 and detail["release_floor"] == 30 and detail["n_honest"] == 22
    assert detail["sigma_int"] > detail["sigma_int_at_f0"]
    assert terms["centroid_ddg"]["detail"]["n"] == 22
    rc, out, _ = _run(capsys, *PAPER_EPS4, "--protocol", "--dim", "16", "--json")
    assert "dishonest_contributors" not in {t["name"] for t in json.loads(out)["terms"]}
    for argv, needle in (
        (["--protocol", "--dishonest-fraction", "1"], "dishonest_fraction must be a number in [0, 1), got 1.0"),
        (["--dishonest-fraction", "0.1"], "add --protocol"),
    ):
        rc, out, err = _run(capsys, *PAPER_EPS4, *argv)
        assert rc == 2 and out == "" and needle in err and len(err.strip().splitlines()) == 1
