"""``downstream`` — paper Table 2: classify real held-out texts with what per-class runs released.

As in the paper, the labelled corpus is split (stratified, seeded) into a training part that
synthesis sees and a test part it never sees; Fre-E2T (the protocol) runs once per class on that
class's training texts, so every centroid and synthetic text carries its run's label. Scored on
the test texts: (1) a majority vote over the k nearest released centroids (best k of 1, 5, 10,
20), (2) a classifier trained on the inverted texts; beside them a classifier trained on the real
training texts (the non-DP reference) and random guessing. The classifier is a logistic
regression on the pipeline embedder's embeddings (the paper fine-tunes RoBERTa-base; out of reach
on a CPU). A class whose run releases nothing cannot be predicted; the rows say how many did.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from fre_protocol.experiments import Experiment
from fre_protocol.experiments.context import Context
from fre_protocol.experiments.tables import (
    cell,
    epsilon_label,
    group_rows,
    markdown_table,
    sorted_values,
)
from fre_protocol.roles.config import RoundSpec
from mechanism.params import FreParams

TEST_FRACTION = 0.2
QUICK_CLASSES = 2
#: Centroids inverted per class (those with the largest counts); the vote uses every centroid.
TEXTS_PER_CLASS = 3
#: The grid of the per-class runs unless --k is given: each run sees one class's training texts,
#: about a sixteenth of the corpus, and at the corpus's k = 10 no class releases a bucket at any
#: ε (three seeds of `experiment all` at f6b9862); k = 3 is the coarser grid that they fill.
CLASS_K = 3
#: Quick runs split 2,000 texts into classes of a few hundred: a coarser grid still (k = 2) lets
#: them release something, so the classifier path runs in CI too.
QUICK_K = 2


def _split(ctx: Context, seed: int) -> Any:
    from fre_protocol.text.downstream import split_held_out
    from primitives.randomness import RandomSource

    data = ctx.dataset()
    assert data.texts is not None and data.labels is not None
    return split_held_out(list(data.texts), list(data.labels), test_fraction=TEST_FRACTION,
                          rng=RandomSource.seeded(seed, "experiment/downstream/split"))


def _classes(ctx: Context) -> list[str]:
    labels = ctx.dataset().labels or ()
    ranked = [label for label, _ in sorted(Counter(labels).items(), key=lambda kv: (-kv[1], kv[0]))]
    return ranked[:QUICK_CLASSES] if ctx.config.quick else ranked


def class_params(ctx: Context, epsilon: float) -> FreParams:
    """The per-class runs' parameters at ``epsilon``: the run's, on the grid k = :data:`CLASS_K`
    (--quick: :data:`QUICK_K`) unless --k is given."""
    if "k" in ctx.config.params:
        return ctx.params(epsilon)
    return ctx.params(epsilon, k=QUICK_K if ctx.config.quick else CLASS_K)


def settings(ctx: Context) -> dict[str, Any]:
    """The run's settings, with the parameters the per-class runs used."""
    from fre_protocol.experiments.report import settings as run_settings

    out = run_settings(ctx)
    out["params_by_epsilon"] = {str(eps): class_params(ctx, eps).to_dict() for eps in ctx.config.run_epsilons}
    return out


def per_class_release(
    ctx: Context, epsilon: float, seed: int
) -> tuple[np.ndarray, list[str], list[str], list[str], dict[str, int]]:
    """One run per class: the centroids and their labels, the texts of the largest
    :data:`TEXTS_PER_CLASS` of each class and their labels, and each class's release size."""
    from fre_protocol.drivers.inprocess import run_protocol

    split, x = _split(ctx, seed), ctx.dataset().x
    params = class_params(ctx, epsilon)
    train = np.asarray(split.train_index)
    centroids: list[np.ndarray] = []
    labels: list[str] = []
    released: dict[str, int] = {}
    invert: list[int] = []
    for label in _classes(ctx):
        rows = train[np.asarray([split.train_labels[i] == label for i in range(len(train))])]
        release = run_protocol(x[rows], RoundSpec(params=params, seeds=ctx.seeds(seed), workers=ctx.config.workers)).release
        order = np.argsort(-release.counts, kind="stable")
        if ctx.config.run_max_centroids is not None:
            order = order[: ctx.config.run_max_centroids]
        released[label] = int(len(release))
        invert += [len(centroids) + i for i in range(min(TEXTS_PER_CLASS, len(order)))]
        centroids += list(np.asarray(release.centroids, dtype=np.float64)[order])
        labels += [label] * len(order)
    matrix = np.stack(centroids) if centroids else np.zeros((0, x.shape[1]))
    texts = ctx.invert(matrix[invert])[0] if invert else []
    return matrix, labels, texts, [labels[i] for i in invert], released


def _test_set(ctx: Context, seed: int) -> tuple[list[int], list[str]]:
    """Indices and labels of the test texts of the classes in play."""
    split, keep = _split(ctx, seed), set(_classes(ctx))
    index = [i for i, label in zip(split.test_index, split.test_labels, strict=True) if label in keep]
    labels = ctx.dataset().labels
    assert labels is not None
    return index, [labels[i] for i in index]


def synthetic_rows(ctx: Context, epsilon: float, seed: int) -> dict[str, Any]:
    from fre_protocol.text.downstream import centroid_vote_accuracy, train_and_score

    centroids, centroid_labels, texts, text_labels, released = per_class_release(ctx, epsilon, seed)
    test_index, test_labels = _test_set(ctx, seed)
    data = ctx.dataset()
    assert data.texts is not None
    row: dict[str, Any] = {"classes_released": sum(1 for v in released.values() if v), "classes": len(released),
                           "n_centroids": int(len(centroids)), "released_per_class": released}
    if len(set(centroid_labels)) < 2:  # then the texts' labels have fewer than 2 classes too
        row["note"] = "fewer than 2 classes released anything: no classifier can be trained"
        return row
    vote = centroid_vote_accuracy(centroids, centroid_labels, data.x[np.asarray(test_index)], test_labels)
    row.update(centroid_accuracy=vote["best_accuracy"], centroid_best_k=vote["best_k"])
    trained = train_and_score(texts, text_labels, [data.texts[i] for i in test_index], test_labels,
                              embedder=ctx.embedder())
    row.update(text_accuracy=trained["accuracy"], text_macro_f1=trained["macro_f1"], n_train=trained["n_train"])
    return row


def reference_row(ctx: Context, seed: int) -> dict[str, Any]:
    from fre_protocol.text.downstream import random_guess_accuracy, score_embeddings

    split, keep = _split(ctx, seed), set(_classes(ctx))
    train = [i for i, label in zip(split.train_index, split.train_labels, strict=True) if label in keep]
    labels = ctx.dataset().labels
    assert labels is not None
    test_index, test_labels = _test_set(ctx, seed)
    x = ctx.dataset().x
    real = score_embeddings(x[np.asarray(train)], [labels[i] for i in train], x[np.asarray(test_index)], test_labels)
    guess = random_guess_accuracy(test_labels)
    return {"real_accuracy": real["accuracy"], "real_macro_f1": real["macro_f1"], "n_train": len(train),
            "n_test": len(test_labels), "random_accuracy": guess["uniform"], "majority_accuracy": guess["majority"]}


def run(ctx: Context) -> list[dict[str, Any]]:
    store = ctx.store("downstream")
    data = ctx.dataset()
    if data.labels is None or data.texts is None:
        return [store.get_or_run({"source": "none"}, lambda: {"note": "the data has no labels: no downstream task"})]
    for seed in ctx.config.run_seeds:
        store.get_or_run({"source": "reference", "seed": seed}, partial(reference_row, ctx, seed))
        for epsilon in ctx.config.run_epsilons:
            store.get_or_run({"source": "fre-e2t", "epsilon": epsilon, "seed": seed},
                             partial(synthetic_rows, ctx, epsilon, seed))
    return store.rows()


def render(rows: Sequence[Mapping[str, Any]]) -> str:
    synthetic = [r for r in rows if r.get("source") == "fre-e2t"]
    groups = group_rows(synthetic, ("epsilon",))
    reference = [r for r in rows if r.get("source") == "reference"]
    header = ["", "centroid vote (best k)", "classifier on synthetic texts", "classes released"]
    body = [[f"Fre-E2T ε = {epsilon_label(e)}", cell(groups[(e,)], "centroid_accuracy"),
             cell(groups[(e,)], "text_accuracy"), cell(groups[(e,)], "classes_released", 1)]
            for e in sorted_values(synthetic, "epsilon")]
    if reference:
        body.append(["classifier on real training texts (non-DP)", "", cell(reference, "real_accuracy"), ""])
        body.append(["random guessing (uniform)", "", cell(reference, "random_accuracy"), ""])
        body.append(["always the majority class", "", cell(reference, "majority_accuracy"), ""])
    classes = next((r.get("classes") for r in synthetic if r.get("classes")), math.nan)
    return (f"### Table 2: downstream classification accuracy ({classes} classes, test split {TEST_FRACTION:g})\n\n"
            + markdown_table(header, body))


EXPERIMENT = Experiment(
    name="downstream",
    title="Downstream classification with per-class runs",
    paper_tables=(2,),
    run=run,
    render=render,
    settings=settings,
    notes=("Classifier: logistic regression on MiniLM embeddings (deviation: the paper fine-tunes RoBERTa-base).",
           f"Per-class runs on the grid k = {CLASS_K} unless --k is given (--quick: {QUICK_K}): each sees one class's "
           "training texts, about a sixteenth of the corpus, too few to fill the corpus's k = 10 grid.",
           "healthtweets' label is the news account that posted the tweet (16 classes); --quick uses the 2 largest."),
)
