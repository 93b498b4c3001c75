"""Downstream utility: the classifier on separable and on random data (with a fake embedder), the
centroid vote against a brute-force k-NN, the guessing baselines and the stratified split."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest

from fre_protocol.text.corpora import Corpus
from fre_protocol.text.downstream import (
    centroid_vote_accuracy,
    random_guess_accuracy,
    score_embeddings,
    split_held_out,
    train_and_score,
    vote,
)
from primitives.errors import InvalidInputError, InvalidParameterError
from primitives.randomness import RandomSource

pytest.importorskip("sklearn")

DIM = 8


class ClusterEmbedder:
    """"<class> <i>" → the class's centre (a scaled basis vector) plus N(0, 1) noise seeded by the
    text; any other text → noise only. Records how many texts it embedded."""

    model_id = "fake:clusters"

    def __init__(self, separation: float) -> None:
        self.separation = separation
        self.embedded = 0

    def embed(self, texts: Sequence[str], *, progress: bool = False) -> npt.NDArray[np.float32]:
        self.embedded += len(texts)
        rows = []
        for t in texts:
            seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "big")
            v = np.random.default_rng(seed).normal(size=DIM)
            head = t.split()[0]
            if head.startswith("class"):
                v[int(head[5:])] += self.separation
            rows.append(v)
        return np.asarray(rows, dtype=np.float32)


def labelled(classes: int, per_class: int, prefix: str) -> tuple[list[str], list[str]]:
    texts = [f"class{c} {prefix}{i}" for c in range(classes) for i in range(per_class)]
    return texts, [f"c{c}" for c in range(classes) for _ in range(per_class)]


# -- the classifier ----------------------------------------------------------------------------------
def test_separable_classes_are_learned() -> None:
    """Class centres 12σ apart along distinct axes: a linear classifier separates them (each test
    point is within 6σ of its own centre, so an error would need a 6σ draw: p < 1e-8 per point)."""
    embedder = ClusterEmbedder(separation=12.0)
    train, ytrain = labelled(3, 40, "train")
    test, ytest = labelled(3, 30, "test")
    out = train_and_score(train, ytrain, test, ytest, embedder=embedder)
    assert out["accuracy"] == 1.0 and out["macro_f1"] == 1.0
    assert out["n_train"] == 120 and out["n_test"] == 90
    assert out["classes"] == ["c0", "c1", "c2"] and out["unpredictable_classes"] == []
    assert "note" not in out
    assert out["chance"]["uniform"] == pytest.approx(1 / 3)
    assert out["embedder"] == "fake:clusters" and "RoBERTa" in out["description"]


def test_random_labels_score_near_chance() -> None:
    """Features carry no label information: training labels are random, test labels are drawn
    uniformly from 4 classes independently of everything the classifier saw, so each test
    prediction is right with probability exactly 1/4 and the accuracy is Binomial(400, 1/4)/400
    (sd 0.022). Tolerance 0.11 (5 sd): false-failure probability < 1e-6 for a fresh seed."""
    rng = np.random.default_rng(7)
    xtr, xte = rng.normal(size=(300, DIM)), rng.normal(size=(400, DIM))
    ytr = rng.integers(0, 4, size=300).astype(str)
    yte = rng.integers(0, 4, size=400).astype(str)
    out = score_embeddings(xtr, ytr, xte, yte)
    assert abs(out["accuracy"] - 0.25) <= 0.11
    assert out["macro_f1"] <= 0.36


def test_a_class_without_synthetic_texts_cannot_be_predicted() -> None:
    embedder = ClusterEmbedder(separation=12.0)
    train, ytrain = labelled(2, 30, "train")
    test, ytest = labelled(3, 20, "test")  # class c2 has test texts only
    out = train_and_score(train, ytrain, test, ytest, embedder=embedder)
    assert out["unpredictable_classes"] == ["c2"] and "cannot be predicted" in out["note"]
    assert out["accuracy"] == pytest.approx(2 / 3)  # c0 and c1 all right, c2 all wrong
    # c0, c1: recall 1, and the m_i of c2's 20 texts sent to class i cut precision to 20/(20+m_i),
    # so F1_i = 40/(40+m_i); with m_0 + m_1 = 20 the mean of (F1_0, F1_1, 0) lies in [8/15, 5/9]
    assert 8 / 15 - 1e-9 <= out["macro_f1"] <= 5 / 9 + 1e-9
    assert out["train_classes"] == ["c0", "c1"] and out["test_classes"] == ["c0", "c1", "c2"]


def test_training_needs_two_classes_before_anything_is_embedded() -> None:
    embedder = ClusterEmbedder(separation=1.0)
    with pytest.raises(InvalidInputError, match="at least 2 classes, got 1"):
        train_and_score(["class0 a", "class0 b"], ["x", "x"], ["class0 c"], ["x"], embedder=embedder)
    assert embedder.embedded == 0
    with pytest.raises(InvalidParameterError, match="classifier must be one of"):
        train_and_score(["a", "b"], ["x", "y"], ["c"], ["x"], embedder=embedder, classifier="roberta")
    with pytest.raises(InvalidInputError, match="one entry per text"):
        train_and_score(["a", "b"], ["x"], ["c"], ["x"], embedder=embedder)
    with pytest.raises(InvalidInputError, match="non-empty"):
        train_and_score([], [], ["c"], ["x"], embedder=embedder)
    with pytest.raises(InvalidInputError, match="same dimension"):
        score_embeddings(np.zeros((2, 3)), ["x", "y"], np.zeros((1, 4)), ["x"])


# -- the centroid vote -------------------------------------------------------------------------------
def brute_force_vote(centroids: np.ndarray, labels: list[str], query: np.ndarray, k: int) -> str:
    d = np.linalg.norm(centroids - query, axis=1)
    order = sorted(range(len(labels)), key=lambda i: (d[i], i))[:k]
    counts = Counter(labels[i] for i in order)
    top = max(counts.values())
    return next(labels[i] for i in order if counts[labels[i]] == top)  # tie: the nearest's class


def test_centroid_vote_equals_brute_force_knn() -> None:
    rng = np.random.default_rng(3)
    centroids = rng.normal(size=(25, 5))
    clabels = [f"c{i}" for i in rng.integers(0, 4, size=25)]
    queries = rng.normal(size=(60, 5))
    tlabels = [f"c{i}" for i in rng.integers(0, 4, size=60)]
    out = centroid_vote_accuracy(centroids, clabels, queries, tlabels, ks=(1, 2, 4, 5, 10, 25, 40))
    for row in out["by_k"]:
        keff = min(row["k"], 25)
        expected = np.mean([brute_force_vote(centroids, clabels, q, keff) == t for q, t in zip(queries, tlabels, strict=True)])
        assert row["accuracy"] == pytest.approx(expected) and row["k_effective"] == keff
    best = max(out["by_k"], key=lambda r: r["accuracy"])
    assert out["best_accuracy"] == best["accuracy"]
    assert out["best_k"] == min(r["k"] for r in out["by_k"] if r["accuracy"] == best["accuracy"])


def test_centroid_vote_known_answer_on_a_line() -> None:
    """Centroids at 0, 1, 2 (class a) and 10, 11 (class b); queries at 0.4 (a) and 10.4 (b)."""
    centroids = np.array([[0.0], [1.0], [2.0], [10.0], [11.0]])
    labels = ["a", "a", "a", "b", "b"]
    out = centroid_vote_accuracy(centroids, labels, np.array([[0.4], [10.4]]), ["a", "b"], ks=(1, 5))
    # k = 1: both right; k = 5: every query sees 3 a's and 2 b's, so both answer a
    assert [r["accuracy"] for r in out["by_k"]] == [1.0, 0.5]
    assert out["best_k"] == 1 and out["best_accuracy"] == 1.0
    tie = centroid_vote_accuracy(centroids[[1, 3]], ["a", "b"], np.array([[4.0], [7.0]]), ["a", "b"], ks=(2,))
    assert tie["best_accuracy"] == 1.0  # 1–1 ties go to the nearer centroid's class
    missing = centroid_vote_accuracy(centroids, labels, np.array([[0.0], [5.0]]), ["a", "z"], ks=(1,))
    assert missing["unpredictable_classes"] == ["z"] and missing["best_accuracy"] == 0.5


def test_vote_ties_go_to_the_nearest_class() -> None:
    neighbours = np.array([[2, 1, 1, 2], [0, 1, 2, 3], [3, 3, 0, 0]])
    assert vote(neighbours, 4, 4).tolist() == [2, 0, 3]
    assert vote(neighbours, 3, 4).tolist() == [1, 0, 3]


def test_centroid_vote_rejects_bad_input() -> None:
    with pytest.raises(InvalidParameterError, match="ks must be"):
        centroid_vote_accuracy(np.zeros((2, 2)), ["a", "b"], np.zeros((1, 2)), ["a"], ks=(0,))
    with pytest.raises(InvalidInputError, match="same dimension"):
        centroid_vote_accuracy(np.zeros((2, 2)), ["a", "b"], np.zeros((1, 3)), ["a"])
    with pytest.raises(InvalidInputError, match="centroid_labels must have one entry"):
        centroid_vote_accuracy(np.zeros((2, 2)), ["a"], np.zeros((1, 2)), ["a"])
    with pytest.raises(InvalidInputError, match="non-empty 2-D"):
        centroid_vote_accuracy(np.zeros((0, 2)), [], np.zeros((1, 2)), ["a"])


# -- guessing ----------------------------------------------------------------------------------------
def test_random_guess_accuracy_closed_forms() -> None:
    out = random_guess_accuracy(["a", "b", "b", "c", "c", "c", "d", "e"])
    assert out["uniform"] == pytest.approx(0.2)  # 5 classes: the paper's 0.20
    assert out["majority"] == pytest.approx(3 / 8) and out["majority_class"] == "c"
    assert out["classes"] == 5 and out["n_test"] == 8
    assert random_guess_accuracy(["y", "x"])["majority_class"] == "x"  # ties: first by name
    with pytest.raises(InvalidInputError, match="non-empty"):
        random_guess_accuracy([])


# -- the held-out split ------------------------------------------------------------------------------
def test_split_is_stratified_deterministic_and_a_partition() -> None:
    texts = [f"t{i}" for i in range(53)]
    labels = ["a"] * 30 + ["b"] * 20 + ["c"] * 2 + ["d"]
    split = split_held_out(texts, labels, test_fraction=0.25, rng=RandomSource.seeded(1, "split"))
    # round half up, at most n - 1: a 7.5 → 8, b 5, c 0.5 → 1, d 0.25 → 0 (and 1 would leave no training text)
    assert Counter(split.test_labels) == {"a": 8, "b": 5, "c": 1}
    assert set(split.train_index) | set(split.test_index) == set(range(53))
    assert not set(split.train_index) & set(split.test_index)
    assert list(split.test_index) == sorted(split.test_index)
    assert split.test_texts == tuple(texts[i] for i in split.test_index)
    assert split.train_labels == tuple(labels[i] for i in split.train_index)
    again = split_held_out(texts, labels, test_fraction=0.25, rng=RandomSource.seeded(1, "split"))
    assert again == split
    other = split_held_out(texts, labels, test_fraction=0.25, rng=RandomSource.seeded(2, "split"))
    assert other.test_index != split.test_index
    assert split_held_out(texts[:3], ["x", "x", "y"], test_fraction=0.9,
                          rng=RandomSource.seeded(1, "s")).describe()["test_per_class"] == {"x": 1}


def test_split_of_one_class_does_not_depend_on_the_others() -> None:
    rng = RandomSource.seeded(5, "split")
    base = split_held_out([f"a{i}" for i in range(10)], ["a"] * 10, test_fraction=0.3, rng=rng)
    more = split_held_out([f"a{i}" for i in range(10)] + ["b0", "b1"], ["a"] * 10 + ["b"] * 2,
                          test_fraction=0.3, rng=RandomSource.seeded(5, "split"))
    assert [t for t in more.test_texts if t.startswith("a")] == list(base.test_texts)


def test_split_takes_a_corpus_and_checks_its_input() -> None:
    corpus = Corpus(name="c", texts=("a", "b", "c", "d"), labels=("x", "x", "y", "y"))
    split = split_held_out(corpus, test_fraction=0.5, rng=RandomSource.seeded(0, "s"))
    assert sorted(split.test_labels) == ["x", "y"]
    rng = RandomSource.seeded(0, "s")
    with pytest.raises(InvalidParameterError, match="taken from the corpus"):
        split_held_out(corpus, ["x"] * 4, test_fraction=0.5, rng=rng)
    with pytest.raises(InvalidInputError, match="no labels"):
        split_held_out(Corpus(name="u", texts=("a",)), test_fraction=0.5, rng=rng)
    with pytest.raises(InvalidParameterError, match="labels are required"):
        split_held_out(["a"], test_fraction=0.5, rng=rng)
    for bad in (0, 1, 1.5, True):
        with pytest.raises(InvalidParameterError, match="test_fraction"):
            split_held_out(["a", "b"], ["x", "y"], test_fraction=bad, rng=rng)
