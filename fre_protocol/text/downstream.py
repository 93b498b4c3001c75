"""Downstream utility: classify real held-out texts with what a per-class run released (paper §7.2
"Downstream utility", Table 2).

The paper runs Fre-E2T once per class of a labelled corpus, so every released centroid and every
synthetic text carries the label of its run, and scores two uses of the release on a test split
that synthesis never saw:

1. :func:`centroid_vote_accuracy` — a test text is embedded with the pipeline's embedder and
   given the majority label of its k nearest released centroids (L2), k in {1, 5, 10, 20}; the best
   k is reported, with every k beside it;
2. :func:`train_and_score` — a classifier trained on the synthetic texts, tested on the real ones.
   Deviation: the paper fine-tunes RoBERTa-base (following Aug-PE); this library fits a
   scikit-learn logistic regression on the pipeline embedder's embeddings, which a 2-core CPU
   trains in seconds where fine-tuning RoBERTa would take hours. Its absolute accuracy is not the
   paper's; the comparison it supports is between text sets scored the same way (synthetic
   against real training texts, ε against ε).

References: :func:`random_guess_accuracy` (uniform guessing, the paper's "random guessing
baseline", and majority-class guessing) and :func:`split_held_out` (a deterministic stratified
train/test split of a labelled corpus, for the non-DP baseline trained on real texts).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from fre_protocol.text.corpora import Corpus
from fre_protocol.text.embedder import Embedder
from primitives.errors import InvalidInputError, InvalidParameterError
from primitives.randomness import RandomSource

CLASSIFIERS = ("logreg",)
CLASSIFIER_DESCRIPTION = {
    "logreg": (
        "scikit-learn LogisticRegression (L2, C=1, lbfgs) on the pipeline embedder's embeddings "
        "(deviation: the paper fine-tunes RoBERTa-base, out of reach on a CPU)"
    ),
}
VOTE_KS = (1, 5, 10, 20)
_DISTANCE_CHUNK = 4096  # test rows per distance block: bounds memory at 4096 × centroids floats


# -- references ------------------------------------------------------------------------------------
def _check_labels(labels: Sequence[Any], name: str, n: int | None = None) -> list[str]:
    if isinstance(labels, str):
        raise InvalidInputError(f"{name} must be a sequence of labels, got a single string")
    out = [str(label) for label in labels]
    if n is not None and len(out) != n:
        raise InvalidInputError(f"{name} must have one entry per text ({n}), got {len(out)}")
    return out


def random_guess_accuracy(test_labels: Sequence[Any]) -> dict[str, Any]:
    """Expected accuracy of guessing: ``uniform`` = 1 / #classes (a uniformly random class per
    text; the paper's "random guessing baseline", 0.20 for 5 classes) and ``majority`` = the share
    of the most frequent test class (always guessing it), with ``majority_class``, ``classes`` (the
    number of distinct test labels) and ``n_test``."""
    labels = _check_labels(test_labels, "test_labels")
    if not labels:
        raise InvalidInputError("test_labels must be non-empty")
    counts = Counter(labels)
    top, top_count = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return {
        "uniform": 1.0 / len(counts),
        "majority": top_count / len(labels),
        "majority_class": top,
        "classes": len(counts),
        "n_test": len(labels),
    }


# -- a classifier on the synthetic texts ---------------------------------------------------------------
def _check_matrix(x: npt.ArrayLike, name: str) -> npt.NDArray[np.float64]:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] == 0:
        raise InvalidInputError(f"{name} must be a non-empty 2-D array (rows × d), got shape {a.shape}")
    if not np.isfinite(a).all():
        raise InvalidInputError(f"{name} must hold finite numbers")
    return a


def _unpredictable(test_classes: Sequence[str], known: set[str], what: str) -> dict[str, Any]:
    missing = sorted(set(test_classes) - known)
    out: dict[str, Any] = {"unpredictable_classes": missing}
    if missing:
        out["note"] = (
            f"{len(missing)} test class(es) have no {what} and cannot be predicted: {missing}; "
            "their test texts count as errors"
        )
    return out


def _train_classes(labels: Sequence[str]) -> list[str]:
    classes = sorted(set(labels))
    if len(classes) < 2:
        raise InvalidInputError(
            f"training needs texts of at least 2 classes, got {len(classes)} ({classes}); "
            "a per-class run that released nothing leaves its class without synthetic texts"
        )
    return classes


def score_embeddings(
    train_x: npt.ArrayLike,
    train_labels: Sequence[Any],
    test_x: npt.ArrayLike,
    test_labels: Sequence[Any],
    *,
    classifier: str = "logreg",
) -> dict[str, Any]:
    """Fit ``classifier`` on (train_x, train_labels), score it on (test_x, test_labels).

    Returns ``accuracy``, ``macro_f1`` (over the test classes; a class never predicted has F1 0),
    ``n_train``, ``n_test``, ``classes`` (train ∪ test), ``train_classes``, ``test_classes``,
    ``unpredictable_classes`` (test classes without a training text; with a ``note`` when any),
    ``chance`` (:func:`random_guess_accuracy`), ``classifier`` and ``description``. The fit is
    deterministic (lbfgs, no randomness).
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, f1_score

    if classifier not in CLASSIFIERS:
        raise InvalidParameterError(f"classifier must be one of {list(CLASSIFIERS)}, got {classifier!r}")
    xtr, xte = _check_matrix(train_x, "train embeddings"), _check_matrix(test_x, "test embeddings")
    if xtr.shape[1] != xte.shape[1]:
        raise InvalidInputError(
            f"train and test embeddings must have the same dimension, got {xtr.shape[1]} and {xte.shape[1]}"
        )
    ytr = _check_labels(train_labels, "train_labels", xtr.shape[0])
    yte = _check_labels(test_labels, "test_labels", xte.shape[0])
    train_classes = _train_classes(ytr)
    # On the raw (unit-norm) embeddings: standardising them first overfitted (fortunes, 5 classes,
    # all-MiniLM-L6-v2: 0.74 accuracy against 0.82 without, at C = 1).
    model = LogisticRegression(C=1.0, max_iter=2000)
    model.fit(xtr, ytr)
    predicted = [str(p) for p in model.predict(xte)]
    test_classes = sorted(set(yte))
    return {
        "classifier": classifier,
        "description": CLASSIFIER_DESCRIPTION[classifier],
        "accuracy": float(accuracy_score(yte, predicted)),
        "macro_f1": float(f1_score(yte, predicted, labels=test_classes, average="macro", zero_division=0)),
        "n_train": len(ytr),
        "n_test": len(yte),
        "classes": sorted(set(train_classes) | set(test_classes)),
        "train_classes": train_classes,
        "test_classes": test_classes,
        **_unpredictable(test_classes, set(train_classes), "training (synthetic) text"),
        "chance": random_guess_accuracy(yte),
    }


def train_and_score(
    train_texts: Sequence[str],
    train_labels: Sequence[Any],
    test_texts: Sequence[str],
    test_labels: Sequence[Any],
    *,
    embedder: Embedder,
    classifier: str = "logreg",
    progress: bool = False,
) -> dict[str, Any]:
    """Train on ``train_texts`` (the synthetic texts of a per-class run, labelled by their run),
    test on ``test_texts`` (real held-out texts): :func:`score_embeddings` on the texts' embeddings
    under ``embedder`` (the pipeline's), plus ``embedder`` (its model id) in the result.

    Raises :class:`~primitives.errors.InvalidInputError` when the training texts hold fewer than 2
    classes; a test class with no training text is reported in ``unpredictable_classes``.
    """
    for name, texts, labels in (("train", train_texts, train_labels), ("test", test_texts, test_labels)):
        if isinstance(texts, str) or len(texts) == 0:
            raise InvalidInputError(f"{name}_texts must be a non-empty sequence of texts")
        _check_labels(labels, f"{name}_labels", len(texts))
    _train_classes(_check_labels(train_labels, "train_labels"))  # before the costly embedding
    if classifier not in CLASSIFIERS:
        raise InvalidParameterError(f"classifier must be one of {list(CLASSIFIERS)}, got {classifier!r}")
    xtr = embedder.embed(list(train_texts), progress=progress)
    xte = embedder.embed(list(test_texts), progress=progress)
    out = score_embeddings(xtr, train_labels, xte, test_labels, classifier=classifier)
    out["embedder"] = embedder.model_id
    return out


# -- the released centroids as a k-NN classifier -----------------------------------------------------
def _nearest(centroids: npt.NDArray[np.float64], queries: npt.NDArray[np.float64], k: int) -> npt.NDArray[np.int64]:
    """Indices of the ``k`` nearest centroids (L2) of every query, nearest first (ties: lower index)."""
    c2 = np.einsum("ij,ij->i", centroids, centroids)
    out = np.empty((queries.shape[0], k), dtype=np.int64)
    for s in range(0, queries.shape[0], _DISTANCE_CHUNK):
        q = queries[s : s + _DISTANCE_CHUNK]
        # ‖q‖² is the same for every centroid of a row, so ‖c‖² − 2 q·c orders them as L2 does
        d = c2[None, :] - 2.0 * (q @ centroids.T)
        out[s : s + len(q)] = np.argsort(d, axis=1, kind="stable")[:, :k]
    return out


def vote(neighbour_classes: npt.NDArray[np.int64], k: int, n_classes: int) -> npt.NDArray[np.int64]:
    """Majority class among the first ``k`` columns of each row (class ids, nearest first); a tie
    goes to the tied class that appears first, i.e. whose nearest centroid is nearest."""
    n = neighbour_classes.shape[0]
    rows = np.arange(n)
    counts = np.zeros((n, n_classes), dtype=np.int64)
    first = np.full((n, n_classes), k, dtype=np.int64)
    for j in range(k):
        cls = neighbour_classes[:, j]
        counts[rows, cls] += 1
        first[rows, cls] = np.minimum(first[rows, cls], j)
    winners: npt.NDArray[np.int64] = np.argmax(counts * (k + 1) + (k - first), axis=1)
    return winners


def centroid_vote_accuracy(
    centroids: npt.ArrayLike,
    centroid_labels: Sequence[Any],
    test_embeddings: npt.ArrayLike,
    test_labels: Sequence[Any],
    ks: Sequence[int] = VOTE_KS,
) -> dict[str, Any]:
    """Accuracy of a majority vote over the k nearest released centroids (L2), for every k in
    ``ks`` (paper §7.2, the first use of the release; k larger than the number of centroids is
    cut to it, reported as ``k_effective``).

    Returns ``by_k`` (rows ``{"k", "k_effective", "accuracy"}``), ``best_k`` and ``best_accuracy``
    (the best k, the smallest among equals: the paper reports the best), ``n_centroids``,
    ``n_test``, ``centroid_classes``, ``unpredictable_classes`` (test classes without a centroid;
    with a ``note`` when any) and ``chance`` (:func:`random_guess_accuracy`).
    """
    c = _check_matrix(centroids, "centroids")
    q = _check_matrix(test_embeddings, "test embeddings")
    if c.shape[1] != q.shape[1]:
        raise InvalidInputError(
            f"centroids and test embeddings must have the same dimension, got {c.shape[1]} and {q.shape[1]}"
        )
    clabels = _check_labels(centroid_labels, "centroid_labels", c.shape[0])
    tlabels = _check_labels(test_labels, "test_labels", q.shape[0])
    ks = list(ks)
    if not ks or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in ks):
        raise InvalidParameterError(f"ks must be non-empty positive integers, got {ks!r}")
    classes = sorted(set(clabels))
    index = {label: i for i, label in enumerate(classes)}
    kmax = min(max(ks), c.shape[0])
    neighbours = np.asarray([index[label] for label in clabels], dtype=np.int64)[_nearest(c, q, kmax)]
    truth = np.asarray([index.get(label, -1) for label in tlabels], dtype=np.int64)
    rows = []
    for k in ks:
        keff = min(k, c.shape[0])
        accuracy = float((vote(neighbours, keff, len(classes)) == truth).mean())
        rows.append({"k": k, "k_effective": keff, "accuracy": accuracy})
    best = min(rows, key=lambda r: (-r["accuracy"], r["k"]))
    return {
        "by_k": rows,
        "best_k": best["k"],
        "best_accuracy": best["accuracy"],
        "n_centroids": int(c.shape[0]),
        "n_test": int(q.shape[0]),
        "centroid_classes": classes,
        "rule": "majority vote over the k nearest released centroids (L2); ties to the class of the nearest",
        **_unpredictable(sorted(set(tlabels)), set(classes), "released centroid"),
        "chance": random_guess_accuracy(tlabels),
    }


# -- a held-out split ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class HeldOutSplit:
    """A stratified train/test split; indices refer to the input, in input order."""

    train_texts: tuple[str, ...]
    train_labels: tuple[str, ...]
    test_texts: tuple[str, ...]
    test_labels: tuple[str, ...]
    train_index: tuple[int, ...]
    test_index: tuple[int, ...]
    test_fraction: float

    def describe(self) -> dict[str, Any]:
        return {
            "test_fraction": self.test_fraction,
            "n_train": len(self.train_index),
            "n_test": len(self.test_index),
            "test_per_class": dict(sorted(Counter(self.test_labels).items())),
        }


def split_held_out(
    corpus_or_texts: Corpus | Sequence[str],
    labels: Sequence[Any] | None = None,
    *,
    test_fraction: float,
    rng: RandomSource,
) -> HeldOutSplit:
    """A deterministic stratified split: in every class, ``round(test_fraction · n_class)`` texts
    (half up) chosen uniformly at random go to the test set, at most ``n_class − 1`` (a class keeps
    at least one training text; a class of one text is training only). Each class draws from its
    own child stream ``rng.child("class:<label>")``, so one class's split does not depend on the
    others. ``labels`` come from the corpus when a :class:`Corpus` is given.
    """
    if isinstance(corpus_or_texts, Corpus):
        if labels is not None:
            raise InvalidParameterError("labels are taken from the corpus; give labels only with a text sequence")
        if corpus_or_texts.labels is None:
            raise InvalidInputError(f"corpus {corpus_or_texts.name!r} has no labels to stratify by")
        texts, labels = list(corpus_or_texts.texts), list(corpus_or_texts.labels)
    else:
        if isinstance(corpus_or_texts, str):
            raise InvalidInputError("texts must be a sequence of strings, got a single string")
        if labels is None:
            raise InvalidParameterError("labels are required with a text sequence")
        texts = list(corpus_or_texts)
    y = _check_labels(labels, "labels", len(texts))
    if not texts:
        raise InvalidInputError("texts must be non-empty")
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, int | float) or not 0 < test_fraction < 1:
        raise InvalidParameterError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    by_class: dict[str, list[int]] = {}
    for i, label in enumerate(y):
        by_class.setdefault(label, []).append(i)
    test: list[int] = []
    for label in sorted(by_class):
        members = by_class[label]
        take = min(math.floor(test_fraction * len(members) + 0.5), len(members) - 1)
        order = rng.child(f"class:{label}").permutation(len(members))
        test.extend(members[int(j)] for j in order[:take])
    test_set = set(test)
    test_index = tuple(sorted(test_set))
    train_index = tuple(i for i in range(len(texts)) if i not in test_set)
    return HeldOutSplit(
        train_texts=tuple(texts[i] for i in train_index),
        train_labels=tuple(y[i] for i in train_index),
        test_texts=tuple(texts[i] for i in test_index),
        test_labels=tuple(y[i] for i in test_index),
        train_index=train_index,
        test_index=test_index,
        test_fraction=float(test_fraction),
    )


__all__ = [
    "CLASSIFIERS", "CLASSIFIER_DESCRIPTION", "VOTE_KS", "HeldOutSplit", "centroid_vote_accuracy",
    "random_guess_accuracy", "score_embeddings", "split_held_out", "train_and_score", "vote",
]
