"""Aug-PE (Xie et al. 2024, ICML), the centralized DP text-synthesis baseline of the paper's §7.

Private Evolution for text, as the authors' ``pe`` library runs it with "rank" selection and the
selected samples kept:

1. **initial population** — N_syn random samples from the language model, each with L−1
   variations: N_cand = L·N_syn candidates. No private data is touched.
2. **T iterations** — every candidate is embedded; every private embedding votes for its nearest
   candidate (L2); the vote histogram is released with Gaussian noise σ per bin
   (:func:`mechanism.augpe.dp_histogram`); the N_syn candidates with the highest noisy counts are
   kept (:func:`mechanism.augpe.rank_select`). Except after the last iteration, each kept sample
   gets L−1 new variations and, with the kept samples, they form the next N_cand candidates.
3. **output** — the N_syn samples kept by the last histogram (what Aug-PE evaluates).

σ comes from :func:`mechanism.augpe.augpe_ledger`: T sensitivity-1 Gaussian releases, composed
in Gaussian DP.

Prompts (our decisions, recorded in :class:`AugPEConfig`):

* **random samples** use a generic, label-free prompt drawn uniformly from
  :data:`DEFAULT_RANDOM_PROMPTS` ("Write a short social media post." and the like). Aug-PE's
  published prompts name the dataset's labels (a Yelp business category and star rating); the
  paper removes label information for a fair comparison (§7, "Baseline and implementation"), and
  a dataset-specific prompt ("Write a short health news tweet.") would hand Aug-PE knowledge that
  Fre-E2T does not get. The list varies the kind of text so the population starts diverse.
* **variations** ask to rephrase the sample in a tone drawn uniformly from :data:`DEFAULT_TONES`
  per request, the device Aug-PE uses to diversify its rewrites.

The language model is any object with ``generate(prompts, max_new_tokens, temperature, rng) ->
list[str]`` (:class:`LanguageModel`); the default, :class:`SmolLMGenerator`, is
SmolLM2-135M-Instruct through its chat template. All randomness comes from the caller's
:class:`~primitives.randomness.RandomSource`, split by purpose with ``child`` labels; torch is
sampled through a ``torch.Generator`` seeded from it and never through the global generator.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from fre_protocol.text.embedder import Embedder, embed_uncached
from mechanism.augpe import augpe_ledger, dp_histogram, rank_select
from mechanism.ledger import PrivacyLedger
from primitives.errors import InvalidInputError, InvalidParameterError
from primitives.jsonsafe import json_safe
from primitives.randomness import RandomSource

#: Generic, label-free prompts for the initial random samples (module docstring).
DEFAULT_RANDOM_PROMPTS: tuple[str, ...] = (
    "Write a short social media post.",
    "Write a short message someone might post online.",
    "Write a short comment someone might leave on a website.",
    "Write a short text someone might send to a friend.",
    "Write a short note about something that happened today.",
    "Write one or two sentences someone might share online.",
)
#: Tones for the variation prompts, one drawn per request.
DEFAULT_TONES: tuple[str, ...] = (
    "in a casual way",
    "in a formal way",
    "in a professional tone",
    "in an informal way",
    "in a creative style",
    "more concisely",
    "in more detail",
    "briefly",
    "in a storytelling tone",
    "as someone would say it aloud",
    "in an earnest tone",
    "in a relaxed way",
    "imaginatively",
    "in plain, simple words",
)
VARIATION_PROMPT = (
    "Rephrase the following text {tone}. Answer with the rephrased text only.\n\nText: {text}"
)


@runtime_checkable
class LanguageModel(Protocol):
    """What the loop needs from a language model: one answer per prompt."""

    def generate(
        self, prompts: Sequence[str], max_new_tokens: int, temperature: float, rng: RandomSource
    ) -> list[str]: ...


# -- configuration -------------------------------------------------------------------------------
def _positive_int(name: str, value: Any, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidParameterError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _text_tuple(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence) or len(value) == 0:
        raise InvalidParameterError(f"{name} must be a non-empty sequence of strings, got {value!r}")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            raise InvalidParameterError(f"{name}[{i}] must be a non-empty string, got {item!r}")
    return tuple(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class AugPEConfig:
    """One Aug-PE run's settings. Defaults are the paper's (App. B.1: N_syn = 3000, L = 7,
    T = 20) with Aug-PE's 64 completion tokens; :meth:`smoke` is a seconds-long run.

    ``variations`` is L, the candidates per kept sample counting itself (L−1 rewrites).
    ``temperature`` is the sampling temperature of both prompts. Aug-PE sampled GPT-2 at 1.4
    with no nucleus cut; SmolLM2-135M-Instruct writes word salad at 1.4 and drifts off-task at
    1.0, so the default is 0.7 with :class:`SmolLMGenerator`'s ``top_p = 0.95`` (the settings of
    the paraphraser and the guided inverter): the baseline gets the most readable text this
    model gives.
    ``batch_size`` is the number of prompts per language-model call.
    """

    n_syn: int = 3000
    variations: int = 7
    iterations: int = 20
    max_new_tokens: int = 64
    temperature: float = 0.7
    batch_size: int = 64
    random_prompts: tuple[str, ...] = DEFAULT_RANDOM_PROMPTS
    tones: tuple[str, ...] = DEFAULT_TONES

    def __post_init__(self) -> None:
        _positive_int("n_syn", self.n_syn)
        _positive_int("variations", self.variations, 2)
        _positive_int("iterations", self.iterations)
        _positive_int("max_new_tokens", self.max_new_tokens)
        _positive_int("batch_size", self.batch_size)
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, int | float) or not (math.isfinite(t) and t > 0):
            raise InvalidParameterError(f"temperature must be a finite number > 0, got {t!r}")
        object.__setattr__(self, "random_prompts", _text_tuple("random_prompts", self.random_prompts))
        object.__setattr__(self, "tones", _text_tuple("tones", self.tones))

    @classmethod
    def paper(cls) -> AugPEConfig:
        """The paper's setting (App. B.1): 3000 samples, L = 7, T = 20."""
        return cls()

    @classmethod
    def smoke(cls) -> AugPEConfig:
        """A tiny run to check the wiring: 8 samples, L = 2, T = 1, 24 new tokens."""
        return cls(n_syn=8, variations=2, iterations=1, max_new_tokens=24, batch_size=16)

    @property
    def n_candidates(self) -> int:
        """N_cand = L·N_syn, the candidates each histogram scores."""
        return self.variations * self.n_syn

    def to_dict(self) -> dict[str, Any]:
        return {
            "n_syn": self.n_syn,
            "variations": self.variations,
            "iterations": self.iterations,
            "max_new_tokens": self.max_new_tokens,
            "temperature": self.temperature,
            "batch_size": self.batch_size,
            "random_prompts": list(self.random_prompts),
            "tones": list(self.tones),
        }


# -- results ---------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class IterationStats:
    """What one iteration released and cost. ``noisy_counts`` is the DP histogram itself (the
    release), so its max and mean are post-processing; the clean counts are never kept.
    ``candidate_texts`` is filled only when the run was asked to record candidates."""

    iteration: int
    candidates: int
    noisy_max: float
    noisy_mean: float
    noisy_counts: npt.NDArray[np.float64]
    selected: npt.NDArray[np.int64]
    seconds: float
    variation_s: float
    embedding_s: float
    histogram_s: float
    candidate_texts: tuple[str, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "iteration": self.iteration,
            "candidates": self.candidates,
            "noisy_max": self.noisy_max,
            "noisy_mean": self.noisy_mean,
            "seconds": self.seconds,
            "variation_s": self.variation_s,
            "embedding_s": self.embedding_s,
            "histogram_s": self.histogram_s,
        }


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class AugPEResult:
    """The N_syn texts kept by the last histogram, their embeddings (rows in the same order,
    from the embedder the run used), the run's privacy ledger and per-iteration statistics.
    ``timings`` holds seconds per stage: ``lm_load_s``, ``initial_generation_s``,
    ``variation_s``, ``embedding_s``, ``histogram_s`` and ``total_s``."""

    texts: tuple[str, ...]
    embeddings: npt.NDArray[np.float32]
    ledger: PrivacyLedger
    sigma: float
    config: AugPEConfig
    initial_texts: tuple[str, ...]
    iterations: tuple[IterationStats, ...]
    timings: Mapping[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe summary (texts, ledger, statistics; not the embeddings or histograms)."""
        return {
            "method": "aug-pe",
            "config": self.config.to_dict(),
            "sigma": json_safe(self.sigma),
            "ledger": self.ledger.to_dict(),
            "texts": list(self.texts),
            "iterations": [json_safe(s.to_dict()) for s in self.iterations],
            "timings": json_safe(dict(self.timings)),
        }


# -- the default language model --------------------------------------------------------------------
class SmolLMGenerator:
    """SmolLM2-135M-Instruct (or any causal LM :func:`~fre_protocol.text.paraphraser.load_causal_lm`
    loads) answering each prompt as one chat turn, batched with left padding.

    Sampling is done by a logits processor drawing from a ``torch.Generator`` seeded from the
    caller's ``rng`` (temperature, then nucleus ``top_p``; ``top_p = 1`` samples the whole
    distribution, as Aug-PE did);
    ``generate`` itself runs greedy over the processor's one-hot output, so the global torch
    generator is never read or seeded. Answers are cleaned to their first line that answers
    (:func:`~fre_protocol.text.paraphraser.clean_variation`); "" when there is none.
    """

    def __init__(self, name: str | None = None, *, device: str | None = None, top_p: float = 0.95) -> None:
        if isinstance(top_p, bool) or not isinstance(top_p, int | float) or not 0.0 < top_p <= 1.0:
            raise InvalidParameterError(f"top_p must be in (0, 1], got {top_p!r}")
        from fre_protocol.text.paraphraser import DEFAULT_PARAPHRASER

        self.name = name or DEFAULT_PARAPHRASER
        self.top_p = float(top_p)
        self._device = device
        self._lm: tuple[Any, Any] | None = None

    def load(self) -> tuple[Any, Any]:
        """(tokenizer, model), loaded once per process and shared with the paraphraser."""
        if self._lm is None:
            from fre_protocol.text.paraphraser import load_causal_lm

            self._lm = load_causal_lm(self.name, None, self._device)
        return self._lm

    def _chat_batch(self, prompts: Sequence[str]) -> dict[str, Any]:
        import torch

        tokenizer, model = self.load()
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        rows = [
            tokenizer.apply_chat_template(
                [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False
            )
            for p in prompts
        ]
        encoded = [tokenizer(r, add_special_tokens=False)["input_ids"] for r in rows]
        width = max(len(e) for e in encoded)
        ids = torch.full((len(encoded), width), int(pad), dtype=torch.long)
        mask = torch.zeros((len(encoded), width), dtype=torch.long)
        for i, e in enumerate(encoded):  # left padding: every answer starts at the same column
            ids[i, width - len(e) :] = torch.tensor(e, dtype=torch.long)
            mask[i, width - len(e) :] = 1
        return {"input_ids": ids.to(model.device), "attention_mask": mask.to(model.device), "pad": int(pad)}

    def generate(
        self, prompts: Sequence[str], max_new_tokens: int, temperature: float, rng: RandomSource
    ) -> list[str]:
        if not prompts:
            return []
        import torch
        from transformers import GenerationConfig, LogitsProcessorList

        from fre_protocol.text.paraphraser import clean_variation

        tokenizer, model = self.load()
        batch = self._chat_batch(prompts)
        generator = torch.Generator(device=batch["input_ids"].device)
        generator.manual_seed(int(rng.uint64(1)[0] & ((1 << 63) - 1)))
        config = GenerationConfig(  # type: ignore[no-untyped-call]
            max_new_tokens=int(max_new_tokens),
            do_sample=False,
            num_beams=1,
            pad_token_id=batch["pad"],
            eos_token_id=model.generation_config.eos_token_id,
        )
        processor = _sampling_processor(generator, float(temperature), self.top_p)
        with torch.no_grad():
            out = model.generate(
                input_ids=batch["input_ids"],
                attention_mask=batch["attention_mask"],
                generation_config=config,
                logits_processor=LogitsProcessorList([processor]),
            )
        answers = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
        return [clean_variation(a) for a in answers]


def _sampling_processor(generator: Any, temperature: float, top_p: float) -> Any:
    """A logits processor that samples the next token with ``generator`` and returns scores that
    are 0 at the drawn token and −inf elsewhere, so greedy decoding emits exactly the draw."""
    import torch
    from transformers import LogitsProcessor

    class _Sample(LogitsProcessor):
        def __call__(self, input_ids: Any, scores: Any) -> Any:
            probs = torch.softmax(scores.float() / temperature, dim=-1)
            if top_p < 1.0:
                sorted_p, order = torch.sort(probs, descending=True, dim=-1)
                # Keep the smallest prefix whose mass reaches top_p (the top token always stays).
                drop = (torch.cumsum(sorted_p, dim=-1) - sorted_p) >= top_p
                sorted_p = sorted_p.masked_fill(drop, 0.0)
                probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
            token = torch.multinomial(probs, 1, generator=generator)
            out = torch.full_like(scores, -math.inf)
            return out.scatter(-1, token, 0.0)

    return _Sample()


# -- the loop ----------------------------------------------------------------------------------------
def _check_private(private: Any) -> npt.NDArray[np.float32]:
    arr = np.asarray(private)
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise InvalidInputError(
            f"private_embeddings must be a non-empty 2-D array (texts × dimensions), got shape {arr.shape}"
        )
    if not np.issubdtype(arr.dtype, np.number) or not np.isfinite(arr).all():
        raise InvalidInputError("private_embeddings must hold finite real numbers")
    return arr.astype(np.float32, copy=False)


class _Run:
    """The state of one run: the language model, the embedder, the randomness and the clocks."""

    def __init__(
        self, lm: Any, embedder: Embedder, config: AugPEConfig, dim: int, rng: RandomSource, progress: bool
    ) -> None:
        self.lm, self.embedder, self.config, self.dim = lm, embedder, config, dim
        self.rng, self.progress = rng, progress
        self.clock: dict[str, float] = {"embedding_s": 0.0, "variation_s": 0.0}

    def pick(self, options: Sequence[str], n: int, rng: RandomSource) -> list[str]:
        idx = rng.integers_below(len(options), n)
        return [options[int(i)] for i in idx]

    def generate(self, prompts: Sequence[str], rng: RandomSource, desc: str) -> list[str]:
        from tqdm.auto import tqdm

        size = self.config.batch_size
        out: list[str] = []
        with tqdm(total=len(prompts), desc=desc, unit="text", disable=not self.progress) as bar:
            for b, start in enumerate(range(0, len(prompts), size)):
                chunk = list(prompts[start : start + size])
                answers = self.lm.generate(
                    chunk, self.config.max_new_tokens, self.config.temperature, rng.child(f"batch/{b}")
                )
                if not isinstance(answers, list) or len(answers) != len(chunk):
                    got = len(answers) if isinstance(answers, list) else type(answers).__name__
                    raise InvalidInputError(
                        f"the language model must return a list of {len(chunk)} answers, got {got}"
                    )
                for i, a in enumerate(answers):
                    if not isinstance(a, str):
                        raise InvalidInputError(f"answer {start + i} of the language model is not a string")
                out.extend(answers)
                bar.update(len(chunk))
        return out

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        t0 = time.perf_counter()
        emb = np.asarray(embed_uncached(self.embedder, texts), dtype=np.float32)
        if emb.shape != (len(texts), self.dim):
            raise InvalidInputError(
                f"the embedder must return ({len(texts)}, {self.dim}) rows (the private embeddings' "
                f"dimension), got shape {emb.shape}"
            )
        self.clock["embedding_s"] += time.perf_counter() - t0
        return emb

    def expand(
        self, texts: list[str], emb: npt.NDArray[np.float32], stage: str
    ) -> tuple[list[str], npt.NDArray[np.float32]]:
        """The kept texts followed by L−1 folds of variations of them, with their embeddings."""
        rng = self.rng.child(f"{stage}/variations")
        all_texts, parts = list(texts), [emb]
        for fold in range(self.config.variations - 1):
            fold_rng = rng.child(f"fold/{fold}")
            tones = self.pick(self.config.tones, len(texts), fold_rng.child("tones"))
            prompts = [VARIATION_PROMPT.format(tone=tone, text=t) for tone, t in zip(tones, texts, strict=True)]
            t0 = time.perf_counter()
            answers = self.generate(
                prompts, fold_rng.child("lm"), f"Aug-PE {stage}: variations {fold + 1}/{self.config.variations - 1}"
            )
            self.clock["variation_s"] += time.perf_counter() - t0
            # An empty rewrite falls back to its parent, as a failed variation would.
            variations = [a.strip() or t for a, t in zip(answers, texts, strict=True)]
            all_texts.extend(variations)
            parts.append(self.embed(variations))
        return all_texts, np.concatenate(parts, axis=0)

    def initial_samples(self) -> tuple[list[str], float]:
        """N_syn random samples, each from a prompt drawn uniformly (an empty answer falls back
        to its prompt); with the seconds generation took."""
        t0 = time.perf_counter()
        prompts = self.pick(self.config.random_prompts, self.config.n_syn, self.rng.child("initial/prompts"))
        answers = self.generate(prompts, self.rng.child("initial/lm"), "Aug-PE: initial samples")
        initial = [a.strip() or p for a, p in zip(answers, prompts, strict=True)]
        return initial, time.perf_counter() - t0

    def iteration(
        self,
        t: int,
        texts: list[str],
        emb: npt.NDArray[np.float32],
        private: npt.NDArray[np.float32],
        sigma: float,
        record_candidates: bool,
    ) -> tuple[IterationStats, list[str], npt.NDArray[np.float32]]:
        """Iteration ``t`` (1-based): expand the kept samples into candidates (from the second
        iteration on), release the noisy vote histogram and keep the N_syn best; returns the
        iteration's statistics and the kept texts with their embeddings."""
        it0 = time.perf_counter()
        clock0 = dict(self.clock)
        if t > 1:
            texts, emb = self.expand(texts, emb, f"iteration {t}")
        h0 = time.perf_counter()
        noisy = dp_histogram(private, emb, sigma, self.rng.child(f"iteration/{t}/noise"))
        keep = rank_select(noisy, self.config.n_syn)
        histogram_s = time.perf_counter() - h0
        stats = IterationStats(
            iteration=t,
            candidates=len(texts),
            noisy_max=float(noisy.max()),
            noisy_mean=float(noisy.mean()),
            noisy_counts=noisy,
            selected=keep,
            seconds=time.perf_counter() - it0,
            variation_s=self.clock["variation_s"] - clock0["variation_s"],
            embedding_s=self.clock["embedding_s"] - clock0["embedding_s"],
            histogram_s=histogram_s,
            candidate_texts=tuple(texts) if record_candidates else None,
        )
        return stats, [texts[int(i)] for i in keep], emb[keep]


def run_augpe(
    private_embeddings: npt.ArrayLike,
    embedder: Embedder,
    config: AugPEConfig,
    *,
    epsilon: float,
    delta: float,
    rng: RandomSource,
    language_model: LanguageModel | None = None,
    progress: bool = True,
    record_candidates: bool = False,
) -> AugPEResult:
    """Run Aug-PE (module docstring) on the private embeddings; (ε, δ)-DP for add/remove of one
    private embedding (ε = inf: no noise). ``embedder`` must be the one that produced
    ``private_embeddings``. ``language_model=None`` loads :class:`SmolLMGenerator`.
    ``record_candidates`` keeps every iteration's candidate texts in its statistics.
    """
    if not isinstance(config, AugPEConfig):
        raise InvalidParameterError(f"config must be an AugPEConfig, got {type(config).__name__}")
    if not isinstance(rng, RandomSource):
        raise InvalidParameterError(f"rng must be a RandomSource, got {type(rng).__name__}")
    private = _check_private(private_embeddings)
    ledger = augpe_ledger(epsilon, delta, config.iterations)
    start = time.perf_counter()
    lm, lm_load_s = _language_model(language_model)
    run = _Run(lm, embedder, config, private.shape[1], rng, progress)
    initial, initial_generation_s = run.initial_samples()
    texts, emb = run.expand(initial, run.embed(initial), "initial")
    stats: list[IterationStats] = []
    for t in range(1, config.iterations + 1):
        step, texts, emb = run.iteration(t, texts, emb, private, ledger.sigma, record_candidates)
        stats.append(step)
    timings = {
        "lm_load_s": lm_load_s,
        "initial_generation_s": initial_generation_s,
        "variation_s": run.clock["variation_s"],
        "embedding_s": run.clock["embedding_s"],
        "histogram_s": sum(s.histogram_s for s in stats),
        "total_s": time.perf_counter() - start,
    }
    return AugPEResult(
        texts=tuple(texts),
        embeddings=np.ascontiguousarray(emb),
        ledger=ledger,
        sigma=ledger.sigma,
        config=config,
        initial_texts=tuple(initial),
        iterations=tuple(stats),
        timings=timings,
    )


def _language_model(language_model: LanguageModel | None) -> tuple[Any, float]:
    """The caller's language model, or :class:`SmolLMGenerator` loaded now (so the load is
    timed apart from generation); with the seconds loading took (0.0 for the caller's)."""
    if language_model is not None:
        return language_model, 0.0
    start = time.perf_counter()
    lm = SmolLMGenerator()
    lm.load()
    return lm, time.perf_counter() - start
