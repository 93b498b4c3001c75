"""report.html renders self-contained, with the ledger, the clusters and a labelled evaluation."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import numpy as np
import pytest

from fre_protocol.text.pipeline import evaluate_release
from fre_protocol.text.report import render_report, summary_table, write_report
from fre_protocol.text.tuning import EVALUATION_LABEL, minilm_params
from mechanism.accounting import calibrate_noise
from mechanism.release import Release, ReleasedBucket
from mechanism.seeds import SeedPlan
from primitives.randomness import RandomSource

pytest.importorskip("matplotlib")


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


@pytest.fixture(scope="module")
def scene() -> dict:
    """A dense cluster (frequent) around e0 plus scattered rare points, one released centroid."""
    rng = RandomSource.seeded(11, "report")
    d = 16
    centre = np.zeros(d)
    centre[0] = 1.0
    dense = unit(centre + 0.05 * rng.normal((150, d)))
    rare = unit(rng.normal((60, d)))
    x = np.vstack([dense, rare])
    params = minilm_params(8.0, radius=0.5)
    ledger = calibrate_noise(params)
    release = Release(
        buckets=(ReleasedBucket(id="ab" * 16, count=75),),
        centroids=dense.mean(axis=0, keepdims=True),
        ledger=ledger,
        params=params,
        seeds=SeedPlan.from_seed(1).to_dict(),
        noise=True,
        info={"path": "protocol"},
    )
    synthetic = unit(dense[:2] + 0.01)
    evaluation = evaluate_release(x, release.centroids, synthetic, params)
    records = [
        {"text": "Flu <b>season</b> & you", "bucket_id": "ab" * 16, "bucket_count": 75, "centroid_index": 0,
         "kind": "inversion", "rank": 0, "distance_to_centroid": 0.12},
    ]
    summary = {
        "command": "fre-e2t synthesize --corpus healthtweets --epsilon 8 --out x",
        "corpus": {"name": "healthtweets", "normalization": "html+urls"},
        "n_texts": len(x),
        "embedder": "fake",
        "protocol": "distributed",
        "inverter": {"name": "retrieval"},
        "params": params.to_dict(),
        "n_released": 1,
        "n_synthetic": 1,
        "epsilon": ledger.epsilon,
        "delta": ledger.delta,
        "sigma": ledger.sigma,
        "warnings": ["a warning"],
        "timings_s": {"embed": 1.0, "total": 2.0},
        "peak_memory_mb": 100.0,
        "evaluation": {k: v for k, v in evaluation.items() if k not in ("centroid", "text")},
        "seeds": {"rng_mode": "seeded"},
    }
    return {"x": x, "release": release, "evaluation": evaluation, "records": records, "summary": summary,
            "ledger": ledger.to_dict()}


def test_evaluation_separates_frequent_from_infrequent(scene: dict) -> None:
    ev = scene["evaluation"]
    assert ev["label"] == EVALUATION_LABEL
    assert ev["n_frequent"] == 150  # exactly the dense cluster at r = 0.5, t = 100
    text = ev["text"]
    assert text["utility"]["precision"] == 1.0 and text["utility"]["recall"] == 1.0
    assert np.median(text["nearest_frequent"]) < np.median(text["nearest_infrequent"])
    strict = text["utility_strict"]  # α = 1: a hit needs a frequent text within r, not 1.5·r
    assert strict["alpha"] == 1.0 and strict["precision"] <= text["utility"]["precision"]
    assert strict["recall"] <= text["utility"]["recall"]
    assert dict(text["ssp"])[1.0] == pytest.approx(float(np.mean(text["nearest_infrequent"] <= 0.5)))


def test_report_is_self_contained_and_complete(scene: dict, tmp_path: Path) -> None:
    path = tmp_path / "report.html"
    write_report(path, summary=scene["summary"], release=scene["release"], records=scene["records"],
                 evaluation=scene["evaluation"], ledger=scene["ledger"])
    page = path.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", page)  # nothing fetched from outside
    for term in scene["ledger"]["terms"]:
        assert term["source"].split(" ")[0] in page
    assert EVALUATION_LABEL in page and "class='eval'" in page
    assert "Flu &lt;b&gt;season&lt;/b&gt; &amp; you" in page  # texts are escaped
    images = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", page)
    assert len(images) == 3  # cluster sizes, Fig. 2 histogram, Fig. 4 curve
    assert all(base64.b64decode(b)[:8] == b"\x89PNG\r\n\x1a\n" for b in images)
    assert "(inversion, d = 0.12)" in page and "search seed" not in page  # retrieval: no seed column


def test_clusters_show_each_text_with_its_distance_and_the_search_seed(scene: dict) -> None:
    """Guided inversion: beside the result, the seed the search started from and its source."""
    records = [
        dict(scene["records"][0], text="Flu shots now", distance_to_centroid=0.31,
             seed="Flu season is here & vaccines are available.", seed_distance=0.45, seed_source="news"),
        dict(scene["records"][0], text="Get your flu shot", kind="paraphrase", rank=0, distance_to_centroid=0.38),
    ]
    page = render_report(summary=scene["summary"], release=scene["release"], records=records,
                         evaluation=None, ledger=scene["ledger"])
    assert "<th>search seed</th>" in page
    assert "Flu shots now <span class='muted'>(inversion, d = 0.31)</span>" in page
    assert "Get your flu shot <span class='muted'>(paraphrase, d = 0.38)</span>" in page
    assert "<td>Flu season is here &amp; vaccines are available. <span class='muted'>(news, d = 0.45)</span></td>" in page


def test_report_without_release_or_evaluation(scene: dict) -> None:
    empty = Release(buckets=(), centroids=np.zeros((0, 16)), ledger=scene["release"].ledger,
                    params=scene["release"].params, seeds={}, noise=True, info={})
    summary = dict(scene["summary"], n_released=0, n_synthetic=0, empty_reason="no bucket reached τ")
    page = render_report(summary=summary, release=empty, records=[], evaluation=None, ledger=scene["ledger"])
    assert "Nothing was released" in page and "no bucket reached τ" in page and "--no-eval" in page


def test_summary_table_lists_the_key_figures(scene: dict) -> None:
    table = summary_table(scene["summary"] | {"evaluation": scene["evaluation"]})
    assert "released clusters" in table and "privacy spent (ε, δ)" in table
    assert "text level P / R / F1 / L2" in table and "not covered by DP" in table
    assert " u=4 C=1 σ=" in table  # the clip C of Δ = min(u·r, 2C)
    old = scene["summary"] | {"params": {k: v for k, v in scene["summary"]["params"].items() if k != "clip"}}
    assert " u=4 σ=" in summary_table(old)  # summaries written before C was a parameter


def test_the_readability_paragraph_gives_both_fluency_references() -> None:
    from fre_protocol.text.report import _readability_part

    readable = {
        "rules": {"n": 4, "pass_share": 0.75}, "rules_real": 0.1,
        "fluency": {"judge": "KN", "nll_median": 5.4, "reference_nll_median": 7.2, "share_above_cut": 0.0},
        "fluency_news": {"reference_nll_median": 5.21, "share_above_cut": 0.25},
    }
    text = _readability_part(readable)
    assert "share above the private texts' 90th-percentile NLL: 0." in text
    assert re.search(r"Against public news sentences \(median NLL 5\.2\d?\): share above their 90th-percentile NLL 0\.25", text)
    assert "news sentences" not in _readability_part({**readable, "fluency_news": None})  # a run made before it
