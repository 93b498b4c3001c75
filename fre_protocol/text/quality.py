"""Text-quality metrics of a synthetic text set: diversity (Self-BLEU) and naturalness (NLL,
perplexity) (paper §7.2 "Diversity" and "Perplexity", App. A.3; Tables 3, 4 and 15).

Diversity — **Self-BLEU** (Zhu et al. 2018, "Texygen", §3.3): every text in turn is the
hypothesis and all the *other* texts are its references; Self-BLEU is the mean of these BLEU
scores. Lower is more diverse; identical texts score 100. BLEU here is sacrebleu's *sentence*
BLEU (0–100; tokenizer ``13a``, case-sensitive, ``exp`` smoothing, effective order), the same
score as ``sacrebleu.sentence_bleu(text_i, others)``, computed in one pass over the texts: each
n-gram's two largest counts are kept, so the leave-one-out reference counts cost nothing and a
set of n texts costs O(n) instead of the O(n²) of calling sacrebleu n times (a bucket of real
texts can hold hundreds). The paper reports Self-BLEU per cluster (the texts emitted for one
released centroid: its inversion and paraphrases) averaged over clusters:
:func:`self_bleu_per_cluster`. Self-BLEU grows with the number of texts (more references, more
matched n-grams: 3,000 fortunes score 27.5, their 42 categories 16.2 on average), so only sets of
equal size are comparable, e.g. clusters of 1 + n paraphrases against n + 1 real texts.

Naturalness — the mean negative log-likelihood per token (nats) of each text under a causal
language model, plain text with no chat template and a start token prepended so that the first
word is scored too; a text's perplexity is ``exp(NLL)``. Deviation: the paper uses GPT-2; this
library uses SmolLM2-135M-Instruct, the offline model it ships for paraphrasing, so absolute
values are not comparable with the paper's, only the ordering of text sets is. Every summary
says so (:data:`LM_LABEL`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from primitives.errors import InvalidInputError, InvalidParameterError

MAX_NGRAM_ORDER = 4  # BLEU-4, as sacrebleu and Texygen
SELF_BLEU_METRIC = (
    "Self-BLEU (Zhu et al. 2018): mean over texts of sacrebleu sentence BLEU (0-100, tokenizer 13a, "
    "exp smoothing, effective order) against all other texts; lower is more diverse"
)
LM_LABEL = "SmolLM2-135M-Instruct (deviation: the paper uses GPT-2)"
NLL_THRESHOLD = 6.0  # App. A.3: the fraction of texts with NLL(w) <= 6 counts the natural ones


# -- diversity: Self-BLEU -------------------------------------------------------------------------------
def _check_texts(texts: Sequence[str], name: str = "texts") -> list[str]:
    if isinstance(texts, str):
        raise InvalidInputError(f"{name} must be a sequence of strings, got a single string")
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise InvalidInputError(f"{name}[{i}] must be a string, got {type(t).__name__}")
    return out


def _ngram_stats(texts: Sequence[str]) -> list[tuple[Counter[tuple[str, ...]], int]]:
    """Each text's n-gram counts (orders 1–4) and token count, tokenized as sacrebleu's BLEU does."""
    from sacrebleu.metrics.helpers import extract_all_word_ngrams
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    untyped: Any = Tokenizer13a  # sacrebleu's tokenizers carry no annotations
    tokenize = untyped()
    return [extract_all_word_ngrams(tokenize(t.rstrip()), 1, MAX_NGRAM_ORDER) for t in texts]


def _closest_other_length(length: int, lengths: Counter[int]) -> int:
    """sacrebleu's closest reference length (ties to the shorter) among the others' lengths."""
    candidates = [n for n, c in lengths.items() if c > (1 if n == length else 0)]
    return min(candidates, key=lambda n: (abs(length - n), n))


def self_bleu_scores(texts: Sequence[str]) -> npt.NDArray[np.float64]:
    """BLEU of each text against all the others (0–100), in input order; empty for < 2 texts.

    Equal to ``[sacrebleu.sentence_bleu(t, texts[:i] + texts[i+1:]).score for i, t in ...]``.
    """
    from sacrebleu.metrics.bleu import BLEU

    items = _check_texts(texts)
    if len(items) < 2:
        return np.zeros(0, dtype=np.float64)
    stats = _ngram_stats(items)
    # Per n-gram: the largest count, which text holds it, and the second largest. Leaving text i
    # out, the most any other reference holds is the largest, or the second if i holds the largest.
    top: dict[tuple[str, ...], tuple[int, int]] = {}
    second: dict[tuple[str, ...], int] = {}
    for i, (ngrams, _) in enumerate(stats):
        for g, c in ngrams.items():
            best = top.get(g)
            if best is None:
                top[g] = (c, i)
            elif c > best[0]:
                second[g] = best[0]
                top[g] = (c, i)
            elif c > second.get(g, 0):
                second[g] = c
    lengths = Counter(n for _, n in stats)
    scores = np.empty(len(items), dtype=np.float64)
    for i, (ngrams, hyp_len) in enumerate(stats):
        correct = [0] * MAX_NGRAM_ORDER
        total = [0] * MAX_NGRAM_ORDER
        for g, c in ngrams.items():
            order = len(g) - 1
            total[order] += c
            best_count, holder = top[g]
            ref = second.get(g, 0) if holder == i else best_count
            correct[order] += min(c, ref)
        score = BLEU.compute_bleu(
            correct, total, hyp_len, _closest_other_length(hyp_len, lengths),
            smooth_method="exp", smooth_value=None, effective_order=True,
            max_ngram_order=MAX_NGRAM_ORDER,
        )
        scores[i] = score.score
    return scores


def self_bleu(texts: Sequence[str]) -> float:
    """Self-BLEU of a text set (0–100, lower is more diverse; see the module docstring); NaN for
    fewer than 2 texts."""
    scores = self_bleu_scores(texts)
    return float(scores.mean()) if scores.size else math.nan


def self_bleu_per_cluster(groups: Sequence[Sequence[str]]) -> dict[str, Any]:
    """Self-BLEU of each group (e.g. the texts emitted for one centroid) and their mean over the
    groups of at least 2 texts (paper Table 3: "Self-BLEU per cluster, averaged over all clusters").

    Returns ``self_bleu`` (the mean; NaN when no group has 2 texts), ``clusters`` (groups scored),
    ``clusters_skipped`` (groups of fewer than 2 texts), ``per_cluster`` (one value per group,
    NaN where skipped) and ``metric``.
    """
    if isinstance(groups, str):
        raise InvalidInputError("groups must be a sequence of text sequences, got a single string")
    per = [self_bleu(_check_texts(g, f"groups[{i}]")) for i, g in enumerate(groups)]
    scored = [v for v in per if not math.isnan(v)]
    return {
        "self_bleu": float(np.mean(scored)) if scored else math.nan,
        "clusters": len(scored),
        "clusters_skipped": len(per) - len(scored),
        "per_cluster": per,
        "metric": SELF_BLEU_METRIC,
    }


# -- naturalness: NLL and perplexity ------------------------------------------------------------------
def token_nlls(
    texts: Sequence[str], tokenizer: Any, model: Any, *, batch_size: int = 16, progress: bool = False
) -> npt.NDArray[np.float64]:
    """Mean negative log-likelihood per token of each text under a causal LM (nats).

    Plain text, no chat template; a start token (BOS, else EOS) is prepended so the first token is
    scored too. A text with no token (empty) has no likelihood: NaN. Each distinct text is scored
    once, in batches of similar length (less padding: on a CPU the forward passes are the whole
    cost).
    """
    from tqdm.auto import tqdm

    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidParameterError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    distinct = list(dict.fromkeys(texts))
    ids = {t: [start, *tokenizer(t, add_special_tokens=False)["input_ids"]] for t in distinct}
    scored: dict[str, float] = {t: math.nan for t in distinct if len(ids[t]) < 2}
    todo = sorted((t for t in distinct if t not in scored), key=lambda t: len(ids[t]))
    for b in tqdm(range(0, len(todo), batch_size), desc="fluency (NLL)", unit="batch", disable=not progress):
        batch = todo[b : b + batch_size]
        scored.update(zip(batch, _batch_nll([ids[t] for t in batch], model, pad=start), strict=True))
    return np.asarray([scored[t] for t in texts], dtype=np.float64)


def _batch_nll(rows: Sequence[Sequence[int]], model: Any, *, pad: int) -> list[float]:
    import torch

    width = max(len(r) for r in rows)
    x = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        x[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    device = next(model.parameters()).device
    with torch.inference_mode():
        logits = model(input_ids=x.to(device), attention_mask=mask.to(device)).logits.float().cpu()
    nll = -torch.log_softmax(logits[:, :-1], dim=-1).gather(2, x[:, 1:, None]).squeeze(2)
    m = mask[:, 1:].float()
    return ((nll * m).sum(1) / m.sum(1).clamp(min=1)).tolist()


def text_nlls(
    texts: Sequence[str],
    *,
    language_model: tuple[Any, Any] | None = None,
    batch_size: int = 16,
    progress: bool = False,
) -> npt.NDArray[np.float64]:
    """Per-text mean token NLL (nats) of ``texts``, in input order (NaN for an empty text).

    ``language_model`` is a ``(tokenizer, model)`` pair of transformers objects; ``None`` loads
    SmolLM2-135M-Instruct offline (:func:`fre_protocol.text.paraphraser.load_causal_lm`, once per
    process; tens of seconds on a CPU). Nothing is loaded for an empty list.
    """
    items = _check_texts(texts)
    if not items:
        return np.zeros(0, dtype=np.float64)
    if language_model is None:
        from fre_protocol.text.paraphraser import DEFAULT_PARAPHRASER, load_causal_lm

        language_model = load_causal_lm(DEFAULT_PARAPHRASER)
    tokenizer, model = language_model
    return token_nlls(items, tokenizer, model, batch_size=batch_size, progress=progress)


def other_family_nlls(texts: Sequence[str], *, progress: bool = False) -> npt.NDArray[np.float64]:
    """Per-text mean token NLL under Gemma-3 270M, a language model of another family than the
    writer (:func:`fre_protocol.text.judges.other_family_lm`; optional, ``fre-e2t[judge]``)."""
    from fre_protocol.text.judges import other_family_lm

    items = _check_texts(texts)
    if not items:
        return np.zeros(0, dtype=np.float64)
    return text_nlls(items, language_model=other_family_lm(), progress=progress)


def perplexity_summary(
    nlls: Sequence[float] | npt.NDArray[np.floating],
    *,
    model: str = LM_LABEL,
    threshold: float = NLL_THRESHOLD,
) -> dict[str, Any]:
    """Summary of per-text NLLs (nats per token), NaN entries (empty texts) counted apart.

    * ``mean_ppl`` — the mean over texts of each text's perplexity ``exp(NLL)``: the paper's
      "average perplexity" (Table 4; §7.2 warns that it "can be affected by outliers", which
      fits this mean: one garbled text weighs exponentially);
    * ``ppl_of_mean_nll`` — ``exp(mean NLL)``, the perplexity of the set as one corpus of equally
      weighted texts (always <= ``mean_ppl``, by Jensen's inequality);
    * ``mean_nll``, ``median_nll`` and ``frac_nll_le_6`` (App. A.3, Table 15: the fraction of
      texts with NLL <= ``threshold``, 6 in the paper; the key keeps the name ``frac_nll_le_6``
      whatever the threshold, which is reported as ``threshold``);
    * ``n`` (texts scored), ``n_missing`` (NaN: no token), ``model``.

    Every statistic is NaN when no text was scored.
    """
    values = np.asarray(nlls, dtype=np.float64).reshape(-1)
    if np.isinf(values).any():
        raise InvalidInputError("nlls must be finite or NaN (an empty text), got an infinite value")
    finite = values[~np.isnan(values)]
    n = int(finite.size)
    nan = math.nan
    return {
        "model": model,
        "n": n,
        "n_missing": int(values.size - n),
        "mean_nll": float(finite.mean()) if n else nan,
        "median_nll": float(np.median(finite)) if n else nan,
        "mean_ppl": float(np.exp(finite).mean()) if n else nan,
        "ppl_of_mean_nll": float(np.exp(finite.mean())) if n else nan,
        "frac_nll_le_6": float((finite <= threshold).mean()) if n else nan,
        "threshold": threshold,
        "paper_average_perplexity": "mean_ppl",
    }


# -- readability: judges that neither wrote nor steered the text (issue 34) ---------------------------
def readability(texts: Sequence[str], real_texts: Sequence[str] | None = None) -> dict[str, Any]:
    """Reader's rules (:mod:`fre_protocol.text.rules`) over ``texts``, and their fluency under
    the Kneser–Ney judge trained on the public pool (:func:`fre_protocol.text.judges.public_fluency_judge`):
    median NLL and, with ``real_texts``, the share of ``texts`` above the real texts' 90th-percentile
    NLL; ``fluency_news`` is the same against the judge's held-out news sentences
    (:func:`fre_protocol.text.judges.news_reference`), the strict reference. Neither judge is
    SmolLM2 (the writer) nor the embedder (the guide). A judge that cannot be built (no public
    pool installed) is reported as unavailable, with the reason."""
    from fre_protocol.text import judges, rules

    items = _check_texts(texts)
    out: dict[str, Any] = {"rules": rules.summary(items)}
    if real_texts is not None:
        out["rules_real"] = rules.summary(_check_texts(real_texts, "real_texts"))["pass_share"]
    if not items:
        return out
    try:
        judge = judges.public_fluency_judge()
        news = judges.news_reference()
    except Exception as exc:  # noqa: BLE001 — a missing pool must not sink the evaluation
        out["fluency_unavailable"] = str(exc)
        return out
    nll = judge.nlls(items)
    fluency: dict[str, Any] = {"judge": judge.name, "nll_median": float(np.median(nll))}
    if real_texts:
        fluency |= judges.fluency_judgement(nll, judge.nlls(list(real_texts)))
    out["fluency"] = fluency
    out["fluency_news"] = judges.fluency_judgement(nll, judge.nlls(news))
    return out


def readability_fields(texts: Sequence[str], real_texts: Sequence[str] | None = None) -> dict[str, Any]:
    """:func:`readability` as flat result-row fields: ``rules_pass``; ``kn_median_nll``,
    ``kn_share_above_news_p90`` and, with ``real_texts``, ``kn_share_above_real_p90`` (no text:
    none); or ``kn_unavailable`` with the reason when the Kneser–Ney judge cannot be built."""
    read = readability(texts, real_texts)
    row: dict[str, Any] = {"rules_pass": read["rules"]["pass_share"]}
    if "fluency_unavailable" in read:
        row["kn_unavailable"] = read["fluency_unavailable"]
    elif "fluency" in read:
        row["kn_median_nll"] = read["fluency"]["nll_median"]
        if "share_above_cut" in read["fluency"]:
            row["kn_share_above_real_p90"] = read["fluency"]["share_above_cut"]
        row["kn_share_above_news_p90"] = read["fluency_news"]["share_above_cut"]
    return row


__all__ = [
    "LM_LABEL", "other_family_nlls", "readability", "readability_fields", "MAX_NGRAM_ORDER", "NLL_THRESHOLD", "SELF_BLEU_METRIC", "perplexity_summary",
    "self_bleu", "self_bleu_per_cluster", "self_bleu_scores", "text_nlls", "token_nlls",
]
