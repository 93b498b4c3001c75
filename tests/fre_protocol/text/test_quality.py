"""Text-quality metrics: Self-BLEU against sacrebleu and known answers; NLL under small fake
language models with closed-form likelihoods; the perplexity summary's closed forms."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import sacrebleu
from hypothesis import given, settings
from hypothesis import strategies as st

from fre_protocol.text.quality import (
    LM_LABEL,
    perplexity_summary,
    self_bleu,
    self_bleu_per_cluster,
    self_bleu_scores,
    text_nlls,
    token_nlls,
)
from primitives.errors import InvalidInputError, InvalidParameterError

torch = pytest.importorskip("torch")


def sacrebleu_self_bleu_scores(texts: list[str]) -> list[float]:
    """The definition, spelled out with sacrebleu: each text against all the others."""
    return [sacrebleu.sentence_bleu(t, texts[:i] + texts[i + 1 :]).score for i, t in enumerate(texts)]


# -- Self-BLEU ---------------------------------------------------------------------------------------
def test_self_bleu_of_identical_texts_is_100() -> None:
    assert self_bleu(["the cat sat on the mat"] * 4) == pytest.approx(100.0)
    assert self_bleu(["hi", "hi"]) == pytest.approx(100.0)  # effective order: 1-grams only


def test_self_bleu_of_disjoint_vocabularies_is_0() -> None:
    texts = ["alpha beta gamma delta", "one two three four five", "red green blue"]
    assert self_bleu(texts) == 0.0
    assert self_bleu_scores(texts).tolist() == [0.0, 0.0, 0.0]


def test_self_bleu_needs_two_texts() -> None:
    assert math.isnan(self_bleu([]))
    assert math.isnan(self_bleu(["only one"]))
    assert self_bleu_scores(["only one"]).shape == (0,)
    with pytest.raises(InvalidInputError, match="single string"):
        self_bleu("a text")
    with pytest.raises(InvalidInputError, match=r"texts\[1\] must be a string"):
        self_bleu(["a", 3])  # type: ignore[list-item]


def test_self_bleu_known_mixture_matches_sacrebleu() -> None:
    texts = [
        "The cat sat on the mat.", "The cat sat on the mat.", "A dog sat on the mat!",
        "Completely different words here", "", "the the the the", "cat", "The cat sat.",
    ]
    expected = sacrebleu_self_bleu_scores(texts)
    np.testing.assert_allclose(self_bleu_scores(texts), expected, rtol=0, atol=1e-9)
    assert self_bleu(texts) == pytest.approx(float(np.mean(expected)), abs=1e-9)


WORDS = st.sampled_from(["a", "b", "c", "d", "the", "cat", ".", ",", "Cat", "dog's"])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(WORDS, min_size=0, max_size=9).map(" ".join), min_size=2, max_size=7))
def test_self_bleu_equals_the_quadratic_definition(texts: list[str]) -> None:
    """The one-pass top-two counts give exactly sacrebleu's leave-one-out sentence BLEU (small
    vocabulary: many shared n-grams, ties in counts and in reference lengths)."""
    np.testing.assert_allclose(self_bleu_scores(texts), sacrebleu_self_bleu_scores(texts), rtol=0, atol=1e-9)


def test_self_bleu_per_cluster_means_over_clusters_of_two_or_more() -> None:
    same = ["we like tea", "we like tea"]
    apart = ["alpha beta", "gamma delta"]
    out = self_bleu_per_cluster([same, ["lonely"], apart, []])
    assert out["clusters"] == 2 and out["clusters_skipped"] == 2
    assert out["self_bleu"] == pytest.approx(50.0)
    assert out["per_cluster"][0] == pytest.approx(100.0) and out["per_cluster"][2] == 0.0
    assert math.isnan(out["per_cluster"][1]) and math.isnan(out["per_cluster"][3])
    assert "sacrebleu sentence BLEU" in out["metric"]
    empty = self_bleu_per_cluster([["x"]])
    assert math.isnan(empty["self_bleu"]) and empty["clusters"] == 0


# -- NLL under fake language models ------------------------------------------------------------------
class WordTokenizer:
    """Whitespace words → ids 2.. (0 = BOS, 1 = unknown word)."""

    bos_token_id = 0
    eos_token_id = 0

    def __init__(self, vocab: list[str]) -> None:
        self.ids = {w: i + 2 for i, w in enumerate(vocab)}

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        assert add_special_tokens is False
        return {"input_ids": [self.ids.get(w, 1) for w in text.split()]}


class BigramLM(torch.nn.Module):
    """P(next | current) = softmax(table[current]): the logits at position t score token t+1."""

    def __init__(self, table: Any) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.as_tensor(table, dtype=torch.float32), requires_grad=False)
        self.calls: list[tuple[int, int]] = []

    def forward(self, input_ids: Any, attention_mask: Any) -> SimpleNamespace:
        self.calls.append(tuple(input_ids.shape))
        return SimpleNamespace(logits=self.table[input_ids])


VOCAB = ["the", "cat", "sat", "mat"]


def bigram_model(seed: int = 0) -> tuple[WordTokenizer, BigramLM, np.ndarray]:
    v = len(VOCAB) + 2
    table = np.random.default_rng(seed).normal(size=(v, v)) * 2
    logp = table - np.log(np.exp(table).sum(axis=1, keepdims=True))
    return WordTokenizer(VOCAB), BigramLM(table), logp


def closed_form_nll(text: str, tokenizer: WordTokenizer, logp: np.ndarray) -> float:
    ids = [0, *tokenizer(text)["input_ids"]]
    return float(np.mean([-logp[a, b] for a, b in zip(ids[:-1], ids[1:], strict=False)]))


def test_token_nlls_match_the_closed_form_of_a_bigram_model() -> None:
    tokenizer, model, logp = bigram_model()
    texts = ["the cat sat", "the cat sat on the mat", "mat", "cat the", "the cat sat", "sat sat sat sat"]
    expected = [closed_form_nll(t, tokenizer, logp) for t in texts]
    for batch_size in (1, 2, 16):  # padding and batching change nothing
        np.testing.assert_allclose(token_nlls(texts, tokenizer, model, batch_size=batch_size), expected, rtol=1e-5)
    model.calls.clear()
    token_nlls(texts, tokenizer, model, batch_size=16)
    assert model.calls == [(5, 7)]  # each of the 5 distinct texts once, padded to the longest


def test_uniform_model_gives_log_vocabulary_size() -> None:
    tokenizer, _, _ = bigram_model()
    v = len(VOCAB) + 2
    model = BigramLM(np.zeros((v, v)))
    nll = text_nlls(["the cat", "mat mat mat sat"], language_model=(tokenizer, model))
    np.testing.assert_allclose(nll, [math.log(v)] * 2, rtol=1e-6)


def test_empty_texts_have_no_likelihood_and_nothing_loads_for_no_texts(monkeypatch: pytest.MonkeyPatch) -> None:
    tokenizer, model, logp = bigram_model()
    nll = text_nlls(["", "the cat", ""], language_model=(tokenizer, model))
    assert math.isnan(nll[0]) and math.isnan(nll[2])
    assert nll[1] == pytest.approx(closed_form_nll("the cat", tokenizer, logp), rel=1e-5)
    assert math.isnan(text_nlls([""], language_model=(tokenizer, model))[0])

    import fre_protocol.text.paraphraser as paraphraser

    def no_loading(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("the language model must not load")

    monkeypatch.setattr(paraphraser, "load_causal_lm", no_loading)
    assert text_nlls([]).shape == (0,)
    with pytest.raises(InvalidParameterError, match="batch_size"):
        text_nlls(["x"], language_model=(tokenizer, model), batch_size=0)


def test_text_nlls_loads_smollm2_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    tokenizer, model, logp = bigram_model()
    asked: list[tuple[Any, ...]] = []

    def fake_load(*args: Any) -> tuple[Any, Any]:
        asked.append(args)
        return tokenizer, model

    import fre_protocol.text.paraphraser as paraphraser

    monkeypatch.setattr(paraphraser, "load_causal_lm", fake_load)
    assert text_nlls(["the mat"])[0] == pytest.approx(closed_form_nll("the mat", tokenizer, logp), rel=1e-5)
    assert asked == [("smollm2",)]


# -- the perplexity summary -----------------------------------------------------------------------------
def test_perplexity_summary_closed_forms() -> None:
    ln = math.log
    out = perplexity_summary([ln(2), ln(4), ln(8)])
    assert out["mean_ppl"] == pytest.approx(14 / 3)  # (2 + 4 + 8) / 3: the paper's average
    assert out["ppl_of_mean_nll"] == pytest.approx(4.0)  # exp(mean(ln 2, ln 4, ln 8)) = exp(2 ln 2)
    assert out["mean_nll"] == pytest.approx(2 * ln(2))
    assert out["median_nll"] == pytest.approx(ln(4))
    assert out["frac_nll_le_6"] == 1.0
    assert out["n"] == 3 and out["n_missing"] == 0
    assert out["model"] == LM_LABEL and "deviation: the paper uses GPT-2" in out["model"]
    assert out["paper_average_perplexity"] == "mean_ppl"


def test_perplexity_summary_threshold_missing_and_empty() -> None:
    out = perplexity_summary(np.array([1.0, 6.0, 7.0, math.nan]))
    assert out["frac_nll_le_6"] == pytest.approx(2 / 3)  # NLL <= 6 is natural (6 included)
    assert out["n"] == 3 and out["n_missing"] == 1
    assert out["median_nll"] == 6.0
    assert perplexity_summary([1.0, 2.0], threshold=1.5)["frac_nll_le_6"] == 0.5
    assert perplexity_summary([1.0], model="gpt2")["model"] == "gpt2"
    empty = perplexity_summary([])
    assert empty["n"] == 0 and all(math.isnan(empty[k]) for k in ("mean_ppl", "median_nll", "frac_nll_le_6"))
    with pytest.raises(InvalidInputError, match="infinite"):
        perplexity_summary([1.0, math.inf])


# -- the real model ------------------------------------------------------------------------------------
@pytest.mark.heavy
def test_smollm2_finds_real_text_more_natural_than_scrambled_text() -> None:
    real = "The city council approved the new budget on Tuesday after a long debate."
    scrambled = "budget Tuesday the debate council after long on approved new city a the."
    nll = text_nlls([real, scrambled, ""])
    assert 0 < nll[0] < nll[1] and math.isnan(nll[2])
    summary = perplexity_summary(nll)
    assert summary["n"] == 2 and summary["n_missing"] == 1
    assert summary["ppl_of_mean_nll"] <= summary["mean_ppl"]


def test_readability_reports_rules_and_the_public_judge(monkeypatch: pytest.MonkeyPatch) -> None:
    from fre_protocol.text import judges
    from fre_protocol.text.quality import readability

    public = ["The council approved the budget on Monday.", "The bank kept rates unchanged on Monday."] * 3
    monkeypatch.setattr(judges, "public_fluency_judge", lambda texts=None: judges.KneserNeyJudge().fit(public))
    news = ["The council approved the budget on Monday.", "Zebras quietly vanish."] * 5
    monkeypatch.setattr(judges, "news_reference", lambda: news)
    texts = ["The council kept the budget on Monday.", "Budget, Monday, council."]
    out = readability(texts, ["The bank approved the budget.", "Rates unchanged on Monday.", "The council met."])
    assert out["rules"]["pass_share"] == 0.5 and out["rules"]["broken"]["no_word_list"] == 1
    assert out["rules_real"] == pytest.approx(2 / 3)
    assert 0 <= out["fluency"]["share_above_cut"] <= 1 and out["fluency"]["judge"] == judges.FLUENCY_JUDGE
    # the strict reference: the same judge's NLLs of the news sentences set the cut
    judge = judges.public_fluency_judge()
    cut = float(np.quantile(judge.nlls(news), 0.9))
    assert out["fluency_news"]["reference_nll_cut"] == pytest.approx(cut)
    assert out["fluency_news"]["share_above_cut"] == pytest.approx(float(np.mean(judge.nlls(texts) > cut)))


def test_readability_fields_flatten_both_judges_and_name_a_missing_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    from fre_protocol.text import judges
    from fre_protocol.text.quality import readability_fields

    public = ["The council approved the budget on Monday.", "The bank kept rates unchanged on Monday."] * 3
    monkeypatch.setattr(judges, "public_fluency_judge", lambda texts=None: judges.KneserNeyJudge().fit(public))
    monkeypatch.setattr(judges, "news_reference", lambda: ["The bank kept rates unchanged on Monday."] * 10)
    texts = ["The council kept the budget on Monday.", "Budget, Monday, council."]
    row = readability_fields(texts, ["The bank approved the budget.", "The council met."])
    assert row["rules_pass"] == 0.5
    assert set(row) == {"rules_pass", "kn_median_nll", "kn_share_above_real_p90", "kn_share_above_news_p90"}
    assert row["kn_median_nll"] > 0 and 0 <= row["kn_share_above_real_p90"] <= 1
    assert "kn_share_above_real_p90" not in readability_fields(texts)  # no real texts, no cut
    assert set(readability_fields([])) == {"rules_pass"}  # no text: nothing for the judge to score

    def missing(texts: object = None) -> None:
        raise FileNotFoundError("no public pool")

    monkeypatch.setattr(judges, "public_fluency_judge", missing)
    assert readability_fields(texts) == {"rules_pass": 0.5, "kn_unavailable": "no public pool"}
