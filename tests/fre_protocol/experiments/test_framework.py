"""The experiment framework: checkpoints that resume, tables over seeds, the index page, the CLI's
errors, and the accountant facts the ablation tables print."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from fre_protocol.cli import main
from fre_protocol.experiments import EXPERIMENTS, get_experiment, paper_reference
from fre_protocol.experiments.ablations import EDGE_VALUES, paper_sigma_table
from fre_protocol.experiments.context import ExperimentConfig
from fre_protocol.experiments.report import markdown_to_html
from fre_protocol.experiments.store import RowStore
from fre_protocol.experiments.tables import cell, mean_std
from primitives.errors import InvalidInputError, InvalidParameterError


def test_store_runs_each_key_once_and_resumes(tmp_path: Path) -> None:
    calls: list[int] = []

    def compute(i: int) -> dict[str, int]:
        calls.append(i)
        return {"value": i * i}

    store = RowStore(tmp_path / "x.rows.jsonl", {"data": "a"})
    for i in (1, 2, 2):
        store.get_or_run({"i": i}, lambda i=i: compute(i))
    assert calls == [1, 2]
    again = RowStore(tmp_path / "x.rows.jsonl", {"data": "a"})
    assert again.resumed == 2
    row = again.get_or_run({"i": 2}, lambda: compute(99))
    assert {k: row[k] for k in ("i", "value")} == {"i": 2, "value": 4} and row["unit_seconds"] >= 0.0
    assert calls == [1, 2]
    assert again.compute_seconds() == sum(r["unit_seconds"] for r in again.rows())


def test_store_drops_a_torn_line_and_runs_that_unit_again(tmp_path: Path) -> None:
    path = tmp_path / "x.rows.jsonl"
    store = RowStore(path, {"data": "a"})
    store.get_or_run({"i": 1}, lambda: {"value": 1})
    with path.open("a", encoding="utf-8") as fh:
        fh.write('{"key": {"i": 2}, "row": {"val')  # a crash mid-write
    again = RowStore(path, {"data": "a"})
    assert again.resumed == 1
    assert again.get_or_run({"i": 2}, lambda: {"value": 2})["value"] == 2
    assert all(json.loads(line) for line in path.read_text().splitlines())


def test_store_refuses_rows_of_another_configuration(tmp_path: Path) -> None:
    RowStore(tmp_path / "x.rows.jsonl", {"data": "a", "limit": 10}).get_or_run({"i": 1}, lambda: {})
    with pytest.raises(InvalidInputError, match="limit.*--restart"):
        RowStore(tmp_path / "x.rows.jsonl", {"data": "a", "limit": 20})


def test_inversions_are_checkpointed_so_a_resumed_run_does_not_invert_again(tmp_path: Path) -> None:
    from types import SimpleNamespace

    import numpy as np

    from fre_protocol.experiments.context import Context

    class CountingInverter:  # each call names the rows it was asked for, so a new call shows up as new text
        def __init__(self) -> None:
            self.asked: list[int] = []

        def invert(self, rows: np.ndarray, *, num_texts: int, progress: bool) -> list[SimpleNamespace]:
            self.asked.append(len(rows))
            return [SimpleNamespace(texts=[f"call {len(self.asked)} row {r[0]:g} #{j}" for j in range(num_texts)])
                    for r in rows]

    config = ExperimentConfig(out_dir=tmp_path, corpus=None, embeddings="x.npy")
    centroids = np.array([[1.0, 0.0], [2.0, 0.0], [1.0, 0.0]])
    first = Context(config, log=lambda _: None)
    first._inverter = inverter = CountingInverter()
    texts = first.inversions(centroids)
    assert inverter.asked == [2]  # the repeated centroid is inverted once
    assert texts == [("call 1 row 1 #0",), ("call 1 row 2 #0",), ("call 1 row 1 #0",)]
    assert first.inversions(centroids[::-1]) == texts[::-1] and inverter.asked == [2]
    resumed = Context(config, log=lambda _: None)
    resumed._inverter = fresh = CountingInverter()
    assert resumed.inversions(centroids) == texts and fresh.asked == []
    assert resumed.inversions(centroids[:1], num_texts=2) == [("call 1 row 1 #0", "call 1 row 1 #1")]
    assert fresh.asked == [1]  # another number of texts is another unit
    assert (tmp_path / "inversions.rows.jsonl").exists()


def test_mean_std_over_seeds_ignores_undefined_values() -> None:
    rows = [{"f1": 0.5}, {"f1": 0.7}, {"f1": "nan"}, {"f1": None}]
    mean, std, n = mean_std(rows, "f1")
    assert (n, mean) == (2, pytest.approx(0.6))
    assert std == pytest.approx(math.sqrt(0.02))
    assert cell(rows, "f1") == "0.600 ± 0.141"
    assert cell([{"f1": 0.25}], "f1") == "0.250"
    assert cell([], "f1") == "–"


def test_paper_table12_sigma_is_exactly_proportional_to_m() -> None:
    """Paper Table 12: L·m with Δ = 2.4·r·m leaves δ_sens unchanged and makes σ ∝ m; at m = 1 σ is
    design §4.3's exact calibration (2.12805, 1.13111, 0.51490)."""
    table = paper_sigma_table()
    for eps, sigma1 in ((4.0, 2.12805), (8.0, 1.13111), (16.0, 0.51490)):
        rows = [r for r in table if r["epsilon"] == eps]
        assert [r["edge_multiplier"] for r in rows] == list(EDGE_VALUES)
        assert {round(r["sigma_over_m"], 9) for r in rows} == {round(rows[0]["sigma_over_m"], 9)}
        assert next(r["sigma"] for r in rows if r["edge_multiplier"] == 1.0) == pytest.approx(sigma1, abs=5e-6)
        assert len({r["delta_sens"] for r in rows}) == 1


def test_markdown_tables_become_html() -> None:
    page = markdown_to_html("### T\n\n| a | b |\n|---|---|\n| 1 | x \\| y |\n\n- note *one*\n", Path("."))
    assert "<h4>T</h4>" in page
    assert "<th>a</th><th>b</th>" in page and "<td>1</td><td>x | y</td>" in page
    assert "<i>one</i>" in page


def test_every_registered_experiment_loads() -> None:
    for name in EXPERIMENTS:
        experiment = get_experiment(name)
        assert experiment.title and (experiment.paper_tables or experiment.paper_figures or experiment.name == "user-level")
    assert paper_reference(get_experiment("ssp")) == "paper Figure 4"
    assert paper_reference(get_experiment("utility")) == "paper Table 1, 9, 16"
    with pytest.raises(InvalidParameterError, match="experiment must be one of"):
        get_experiment("nope")


def test_config_checks_its_inputs(tmp_path: Path) -> None:
    with pytest.raises(InvalidParameterError, match="exactly one of --corpus, --input or --embeddings"):
        ExperimentConfig(out_dir=tmp_path, corpus="healthtweets", input="x.txt")
    with pytest.raises(InvalidParameterError, match="unknown mechanism parameters \\['radiuss'\\]"):
        ExperimentConfig(out_dir=tmp_path, params={"radiuss": 1.0})
    with pytest.raises(InvalidParameterError, match="epsilons must be > 0"):
        ExperimentConfig(out_dir=tmp_path, epsilons=(0.0,))
    quick = ExperimentConfig(out_dir=tmp_path, quick=True, params={"k": 8})
    assert quick.run_seeds == (1,) and quick.run_limit == 2000
    assert quick.param_overrides() == {"threshold": 50, "k": 8}  # a flag wins over --quick


def test_cli_rejects_bad_lists_and_single_epsilon(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["experiment", "utility", "--out", str(tmp_path), "--epsilons", "4,x"])
    assert "comma-separated list of numbers or inf" in capsys.readouterr().err
    assert main(["experiment", "utility", "--out", str(tmp_path), "--epsilon", "4"]) == 2
    assert "use --epsilons" in capsys.readouterr().err


def test_noise_flags_reach_the_protocol_rows_and_the_checkpoint_fingerprint(tmp_path: Path) -> None:
    import argparse

    from fre_protocol.cli import experiment as experiment_cli

    parser = argparse.ArgumentParser()
    experiment_cli.add_arguments(parser)
    args = parser.parse_args(["utility", "--out", str(tmp_path), "--embeddings", "x.npy",
                              "--noise-calibration", "floor", "--dropout-allowance", "0", "--ddg-accountant", "rdp"])
    config = experiment_cli.config_from_args(args)
    protocol = config.protocol_config()
    assert (protocol.noise_calibration, protocol.dropout_allowance, protocol.ddg_accountant) == ("floor", 0.0, "rdp")
    assert config.fingerprint()["noise_calibration"] == "floor"
    assert config.fingerprint()["dropout_allowance"] == 0.0
    assert config.fingerprint()["ddg_accountant"] == "rdp"
    from fre_protocol.experiments.context import Context
    from fre_protocol.experiments.report import settings

    assert settings(Context(config))["protocol"] == {"noise_calibration": "floor", "dropout_allowance": 0.0,
                                                     "ddg_accountant": "rdp", "dropout_policy": "topup",
                                                     "dropout": 0.0}
    # the default calibration leaves the fingerprint as it was before the flag existed (old
    # checkpoints resume); the accountant and the allowance are always named, since checkpoints
    # written before them were made at RDP and f = 0.1, no longer the defaults (they must not
    # resume); the policy only with dropouts, the one place it acts
    default = ExperimentConfig(out_dir=tmp_path, corpus=None, embeddings="x.npy")
    assert not {"noise_calibration", "augpe_setting", "dropout", "dropout_policy"} & set(default.fingerprint())
    assert default.fingerprint()["ddg_accountant"] == "analytic"
    assert default.fingerprint()["dropout_allowance"] == 0.0
    dropping = ExperimentConfig(out_dir=tmp_path, corpus=None, embeddings="x.npy", dropout=0.1, dropout_policy="withhold")
    assert (dropping.fingerprint()["dropout"], dropping.fingerprint()["dropout_policy"]) == (0.1, "withhold")
    assert dropping.protocol_config().dropout_policy == "withhold"
    with pytest.raises(InvalidParameterError, match=r"dropout must be a number in \[0, 1\), got 1.0"):
        ExperimentConfig(out_dir=tmp_path, corpus=None, embeddings="x.npy", dropout=1.0)
    with pytest.raises(InvalidParameterError, match="dropout_policy must be one of"):
        ExperimentConfig(out_dir=tmp_path, corpus=None, embeddings="x.npy", dropout_policy="drop")
    args = parser.parse_args(["augpe", "--out", str(tmp_path), "--augpe-setting", "n_syn=300,iterations=5"])
    assert experiment_cli.config_from_args(args).fingerprint()["augpe_setting"] == {"iterations": 5, "n_syn": 300}
    with pytest.raises(SystemExit):
        parser.parse_args(["augpe", "--out", str(tmp_path), "--augpe-setting", "n_syn=0"])
    with pytest.raises(InvalidParameterError, match="augpe_setting takes positive integers"):
        ExperimentConfig(out_dir=tmp_path, corpus=None, embeddings="x.npy", augpe_setting={"temperature": 1})
    with pytest.raises(InvalidParameterError, match="dropout_allowance must be a number in \\[0, 1\\), got 1.5"):
        ExperimentConfig(out_dir=tmp_path, corpus=None, embeddings="x.npy", dropout_allowance=1.5)


def test_embedders_table_has_a_row_per_model_and_reads_rows_written_before_a_third() -> None:
    from fre_protocol.experiments.embedders import other_models, render

    def scored(place: str, model: str, p: float) -> list[dict[str, object]]:
        return [{"embedder": place, "model": model, "epsilon": 8.0, "seed": s, "precision": p + s / 100,
                 "recall": 1.0, "f1": 1.0, "avg_l2": 0.9} for s in (1, 2, 3)]

    old = [{"embedder": "transfer", "radius": 0.9, "second_radius": 0.878, "public_texts": 3994},
           *scored("first", "mini", 0.5), *scored("second", "mpnet", 0.3)]
    table = render(old)
    assert "under 2 embedders (r = 0.900 under mini; mpnet: r' = 0.878" in table
    assert "| 8 | mini | 0.520 ± 0.010 |" in table and "| 8 | mpnet | 0.320 ± 0.010 |" in table
    three = [*old, {"embedder": "transfer", "to": "third", "radius": 0.9, "second_radius": 0.21, "public_texts": 3994},
             *scored("third", "e5", 0.1)]
    table = render(three)
    assert "under 3 embedders" in table and "e5: r' = 0.210" in table and "| 8 | e5 | 0.120 ± 0.010 |" in table
    assert other_models(" a , multilingual-e5-small") == ["a", "multilingual-e5-small"]
    for spec, problem in (("a,,b", "comma-separated"), ("a,a", "twice"), ("a,b,c,d,e", "at most 4")):
        with pytest.raises(InvalidParameterError, match=problem):
            other_models(spec)
