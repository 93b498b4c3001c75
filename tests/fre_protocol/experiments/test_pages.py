"""Results pages are rendered from their JSON: ``fre-e2t experiment report --from DIR`` renders
every marked part again without running anything, the committed docs/results pages are exactly
what their JSON renders to, and the pages without a rendered part are the hand-written ones
docs/results/README.md lists."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fre_protocol.cli import main
from fre_protocol.experiments.pages import block, markers_only, render_part, rerender, time_phrase
from fre_protocol.experiments.report import rewrite_index
from primitives.errors import InvalidInputError

RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results"
#: Pages with no rendered part: prose and figures typed by hand (docs/results/README.md, "Which
#: pages are rendered"). A new page must be rendered from its JSON or be added here and there.
HAND_WRITTEN = {
    "README.md", "benchmarks.md", "claims-check.md", "demo-texts.md", "demo.md", "deploy-benchmark.md",
    "device-browser.md", "device-embedding.md", "embedding.md", "fluent-text.md", "pool-size.md",
    "prefix-generator.md", "roles-and-drivers.md", "streaming-scaling.md", "test-tiers.md",
}


@pytest.fixture
def results(tmp_path: Path) -> Path:
    copy = tmp_path / "results"
    shutil.copytree(RESULTS, copy)
    return copy


def test_the_committed_pages_are_what_their_json_renders_to(results: Path) -> None:
    found = rerender(results)
    assert found.changed == []
    assert rewrite_index(results) is False  # index.html too, from manifest.json and the pages
    for page in (RESULTS / p for p in found.rendered):  # nothing was written: byte for byte the same
        assert (results / page.name).read_bytes() == page.read_bytes(), page.name
    assert set(found.hand_written) == HAND_WRITTEN and found.unmarked == []
    assert set(found.rendered) | set(found.hand_written) == {p.name for p in RESULTS.glob("*.md")}


def test_every_experiment_page_states_its_json_and_command() -> None:
    for name in rerender(RESULTS, write=False).rendered:
        text = (RESULTS / name).read_text(encoding="utf-8")
        for source, _ in markers_only(text):
            assert f"`{source}`" in text, (name, source)
        if any(part in ("head", "data") for _, part in markers_only(text)):
            assert "*Rows: `" in text and "fre-e2t experiment report --from DIR" in text, name


@pytest.mark.parametrize(("count", "run"), [("utility-all-centroids-reader", "utility-all-centroids"),
                                            ("utility-reader", "utility")])
def test_the_readers_count_indexes_the_texts_it_names(count: str, run: str) -> None:
    """A reader's accepted indices mean something only for the texts read: each row names them by
    hash, and the hash must be that of the utility row's texts today."""
    from fre_protocol.text.judges import texts_sha256

    reader = json.loads((RESULTS / f"{count}.json").read_text(encoding="utf-8"))
    utility = json.loads((RESULTS / f"{run}.json").read_text(encoding="utf-8"))
    for row in reader["rows"]:
        (texts,) = [r["texts"] for r in utility["rows"] if r.get("level") == "text"
                    and (r["method"], r["epsilon"], r["seed"]) == (row["method"], row["epsilon"], row["seed"])]
        assert row["texts_sha256"] == texts_sha256(texts) and row["n_texts"] == len(texts)
        assert row["accepted"] == sorted(set(row["accepted"])) and all(0 <= i < len(texts) for i in row["accepted"])
        assert row["n_accepted"] == len(row["accepted"]) and row["accepted_share"] == len(row["accepted"]) / len(texts)
        if "refused_as" in row:  # one main reason for each refused text, and only for those
            reasons = sorted(i for indices in row["refused_as"].values() for i in indices)
            assert reasons == sorted(set(range(len(texts))) - set(row["accepted"]))


def test_readme_lists_the_hand_written_pages() -> None:
    readme = (RESULTS / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Which pages are rendered", 1)[1].split("\n## ", 1)[0]
    for page in HAND_WRITTEN - {"README.md"}:
        assert f"({page})" in section or f"`{page}`" in section, page


def test_an_edited_number_is_rendered_back_and_prose_is_kept(results: Path) -> None:
    page = results / "utility.md"
    committed = page.read_text(encoding="utf-8")
    row = "| 8 | 0.835 ± 0.022 | 0.900 ± 0.023 | 0.866 ± 0.002 |"  # α = 1, centroid level
    assert committed.count(row) == 1
    tampered = committed.replace(row, "| 8 | 0.835 ± 0.022 | 0.900 ± 0.023 | 0.12345 |")
    prose = "*Three seeds (n = 3) from one call"
    assert committed.count(prose) == 1  # the hand-written caveat the edit below must keep
    tampered = tampered.replace(prose, "*A reader's note. " + prose[1:])
    page.write_text(tampered, encoding="utf-8")
    assert rerender(results, write=False).changed == ["utility.md"]
    assert page.read_text(encoding="utf-8") == tampered  # --check writes nothing
    rerender(results)
    again = page.read_text(encoding="utf-8")
    assert row in again and "0.12345" not in again
    assert "*A reader's note. Three seeds (n = 3) from one call" in again


def test_a_part_whose_json_is_missing_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "page.md").write_text("# prose\n\n" + block("gone.json", "tables", "old\n"), encoding="utf-8")
    with pytest.raises(InvalidInputError, match="page.md renders 'gone.json', which is not a JSON file beside it"):
        rerender(tmp_path)
    (tmp_path / "gone.json").write_text(json.dumps({"no": "rows"}), encoding="utf-8")
    with pytest.raises(InvalidInputError, match="not an experiment's document"):
        rerender(tmp_path)


def test_the_rendered_parts_of_a_page(results: Path) -> None:
    document = json.loads((results / "ablation-t.json").read_text(encoding="utf-8"))
    head = render_part(document, "ablation-t.json", "head", results)
    assert head.startswith("## ablation-t: Frequency threshold t (paper Table 14)\n\nData: healthtweets; seeds 1, 2, 3;")
    assert render_part(document, "ablation-t.json", "data", results).startswith("Data: healthtweets")
    assert "### Table 14" in render_part(document, "ablation-t.json", "body", results)
    assert render_part(document, "ablation-t.json", "tables", results).startswith("*Rendered from `ablation-t.json`")


def test_the_report_command(results: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["experiment", "report", "--from", str(results), "--check"]) == 0
    out = capsys.readouterr().out
    assert "utility.md: unchanged" in out and "written by hand, nothing rendered: README.md" in out
    page = results / "ablation-k.md"
    page.write_text(page.read_text(encoding="utf-8").replace("## ablation-k:", "## edited:"), encoding="utf-8")
    assert main(["experiment", "report", "--from", str(results), "--check"]) == 1
    assert "ablation-k.md: changed (not written: --check)" in capsys.readouterr().out
    assert main(["experiment", "report", "--from", str(results)]) == 0
    assert (results / "ablation-k.md").read_bytes() == (RESULTS / "ablation-k.md").read_bytes()

    assert main(["experiment", "report"]) == 2
    assert "experiment report needs --from DIR" in capsys.readouterr().err
    assert main(["experiment", "report", "--from", str(results), "--out", str(tmp_path)]) == 2
    assert "--out is for running experiments" in capsys.readouterr().err
    assert main(["experiment", "utility", "--from", str(results)]) == 2
    assert "--from and --check go with experiment report" in capsys.readouterr().err
    assert main(["experiment", "utility"]) == 2
    assert "experiment NAME needs --out DIR" in capsys.readouterr().err
    assert main(["experiment", "report", "--from", str(tmp_path / "absent")]) == 2
    assert "--from must be a folder of results pages" in capsys.readouterr().err


def test_an_unmarked_experiment_page_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(RESULTS / "ablation-t.json", tmp_path / "ablation-t.json")
    (tmp_path / "ablation-t.md").write_text("## ablation-t: a page from before the markers\n", encoding="utf-8")
    assert rerender(tmp_path).unmarked == ["ablation-t.md"]
    assert main(["experiment", "report", "--from", str(tmp_path)]) == 0
    assert "ablation-t.md: no rendered part, though ablation-t.json is beside it" in capsys.readouterr().out


def test_a_comparison_sets_runs_side_by_side(tmp_path: Path) -> None:
    def rows(method: str, values: list[float]) -> list[dict[str, object]]:
        return [{"method": method, "epsilon": 8.0, "seed": s, "f1_strict": v} for s, v in enumerate(values, 1)]

    (tmp_path / "a.json").write_text(json.dumps({"rows": rows("fre-e2t", [0.5, 0.7]) + rows("central-dp", [0.9])}))
    (tmp_path / "b.json").write_text(json.dumps({"rows": rows("fre-e2t", [0.8])}))
    spec = {"columns": [{"label": "a", "rows": "a.json", "method": "fre-e2t"},
                        {"label": "b", "rows": "b.json", "method": "fre-e2t"},
                        {"label": "dp", "rows": "a.json", "method": "central-dp"}],
            "tables": [{"title": "F1", "metric": "f1_strict", "difference": ["a", "dp"]}]}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    (tmp_path / "page.md").write_text("prose\n\n" + block("spec.json", "compare", "old\n"), encoding="utf-8")
    rerender(tmp_path)
    text = (tmp_path / "page.md").read_text(encoding="utf-8")
    assert "| ε | a | b | dp | a − dp |" in text and "| 8 | 0.600 ± 0.141 | 0.800 | 0.900 | −0.300 |" in text
    assert text.startswith("prose\n\n")
    spec["tables"] = [{"title": "F1", "metric": "f1_strict", "difference": ["a", "dp"],
                       "differences": [{"columns": ["b", "dp"], "header": "b vs dp"}]}]
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    rerender(tmp_path)
    text = (tmp_path / "page.md").read_text(encoding="utf-8")
    assert "| ε | a | b | dp | a − dp | b vs dp |" in text and "| 0.900 | −0.300 | −0.100 |" in text
    spec["tables"] = [{"title": "F1", "metric": "f1_strict", "differences": [{"columns": ["b", "c"]}]}]
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    with pytest.raises(InvalidInputError, match=r"a difference names two of the columns \['a', 'b', 'dp'\], got \['b', 'c'\]"):
        rerender(tmp_path)
    spec["columns"] = [{"label": "a", "rows": "a.json"}]
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    with pytest.raises(InvalidInputError, match="each column needs a label, rows and method"):
        rerender(tmp_path)


def test_a_resumed_run_states_its_rows_own_time_not_only_the_last_call() -> None:
    # Resuming runs only the missing rows, so the last call's wall time leaves out what earlier calls
    # computed: the page must not say "wall time 0 s" for rows that took minutes.
    rows = [{"unit_seconds": 400.0}, {"unit_seconds": 366.0}]
    assert time_phrase({"wall_seconds": 0.1, "rows": rows}) == (
        "rows' own time 766 s over more than one call (wall time of the last call 0 s)")
    assert time_phrase({"wall_seconds": 770.4, "rows": rows}) == "wall time 770 s"
    assert time_phrase({"wall_seconds": 12.0, "rows": [{"epsilon": 4.0}]}) == "wall time 12 s"  # older rows
    # A call records how many rows it took from a checkpoint: that, not the guess above, decides.
    # (A row's time can count work another experiment did, e.g. augpe's rows carry utility's texts.)
    assert time_phrase({"wall_seconds": 0.1, "rows_resumed": 0, "rows": rows}) == "wall time 0 s"
    assert time_phrase({"wall_seconds": 900.0, "rows_resumed": 1, "rows": rows}).startswith("rows' own time 766 s")


def test_the_index_counts_each_experiment_as_its_json_stands(tmp_path: Path) -> None:
    # The manifest remembers the call that wrote it; a page rerun or resumed since is counted from its JSON.
    from fre_protocol.experiments.report import contents, page_documents

    (tmp_path / "utility.json").write_text(json.dumps({"wall_seconds": 6.0, "rows": [
        {"unit_seconds": 300.0}, {"unit_seconds": 200.0}, {"unit_seconds": 100.0}]}), encoding="utf-8")
    manifest = {"experiments": [{"experiment": "utility", "rows": 17, "wall_seconds": 1026.0},
                                {"experiment": "ssp", "rows": 36, "wall_seconds": 766.4}]}
    documents = page_documents(tmp_path, manifest)
    assert list(documents) == ["utility"]  # ssp's JSON is not in the folder
    assert [contents(e, documents.get(e["experiment"])) for e in manifest["experiments"]] == [
        "3 rows, 600 s", "36 rows, 766 s"]


def test_the_index_names_the_command_that_made_each_page(tmp_path: Path) -> None:
    from fre_protocol.experiments.report import page_commands, page_documents

    made = {"command": "fre-e2t experiment all --seeds 1,2,3", "commit": "f6b986246a6bc4"}
    for name in ("utility", "baselines"):
        (tmp_path / f"{name}.json").write_text(json.dumps({"rows": [], "provenance": made}), encoding="utf-8")
    manifest = {"commands": ["fre-e2t experiment utility,ssp --seeds 1"],
                "experiments": [{"experiment": n} for n in ("utility", "baselines", "ssp")]}
    assert page_commands(manifest, page_documents(tmp_path, manifest)) == [
        "fre-e2t experiment all --seeds 1,2,3  # commit f6b986246a: utility, baselines",
        "fre-e2t experiment utility,ssp --seeds 1"]  # ssp's JSON is not here: the manifest's commands


def test_the_provenance_line_says_what_is_known(tmp_path: Path) -> None:
    from fre_protocol.experiments.pages import provenance_line

    made = {"command": "fre-e2t experiment utility --out o", "commit": "a" * 40, "dirty": False,
            "row_commits": ["a" * 40, "b" * 40], "rows_without_commit": 2}
    line = provenance_line({"provenance": made}, "utility.json", tmp_path)
    assert line.startswith("*Rows: `utility.json`, made by `fre-e2t experiment utility --out o` at commit `aaaaaaaaaa`;")
    assert "some rows resumed from commit `bbbbbbbbbb`; 2 rows resumed from a run that recorded no commit" in line
    dirty = provenance_line({"provenance": {**made, "dirty": True, "row_commits": [], "rows_without_commit": 0}},
                           "utility.json", tmp_path)
    assert "at commit `aaaaaaaaaa` (with uncommitted changes)." in dirty
    unknown = provenance_line({"provenance": {**made, "commit": "unknown", "row_commits": []}}, "u.json", tmp_path)
    assert "at an unknown commit (no git checkout, or no git)" in unknown
    bare = provenance_line({"experiment": "utility", "rows": []}, "u.json", tmp_path)
    assert "records neither the command nor the commit" in bare
