"""Inversion benchmark: target construction and metrics as pure functions (known answers), and one
small end-to-end run of ``fre-e2t bench-inversion`` with the retrieval inverter."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from fre_protocol.cli import main
from fre_protocol.text import Inversion
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
from primitives.errors import InvalidInputError, InvalidParameterError
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
        ("guided", "small"), ("guided", "large"), ("retrieval", None)]
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


def test_bench_refuses_budgets_without_guided(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["bench-inversion", "--out", str(tmp_path), "--inverters", "retrieval", "--budgets", "small"]
    assert main(args) == 2
    assert "--budgets applies to the guided inverter" in capsys.readouterr().err


@pytest.mark.heavy
def test_fluency_scores_real_text_below_scrambled_text() -> None:
    from fre_protocol.text.inversion_bench import token_nlls
    from fre_protocol.text.paraphraser import CausalLMParaphraser

    tokenizer, model = CausalLMParaphraser().load()
    real = "The city council approved the new budget on Tuesday after a long debate."
    scrambled = "budget Tuesday the debate council after long on approved new city a the."
    nll = token_nlls([real, scrambled], tokenizer, model)
    assert 0 < nll[0] < nll[1]
