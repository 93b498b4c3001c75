"""Guided inversion: a public language model writes the text, the embedder steers it (design §7).

Retrieval answers a centroid with the nearest sentence of the public pool, which is often far
from it: the pool rarely holds a sentence about exactly that. :class:`GuidedInverter` *writes*
one, zero-shot, with SmolLM2-135M-Instruct (the paraphraser's packaged model) and the pipeline's
own embedder in the loop, so it works for any embedder. Per target (the centroid, normalised):

1. **seed** — by default (``seeds_from="auto"``, with the packaged embedder) the learned
   generator's draft (:mod:`fre_protocol.text.prefix_generator`, trained on the public pool only)
   when a reader accepts one (:mod:`fre_protocol.text.rules`); otherwise, and always with
   ``"retrieval"`` or an embedder the generator was not trained on, the nearest *readable* one of
   the retrieval inverter's :data:`SEED_CHOICES` nearest pool texts (the nearest if none is); with
   ``"both"`` whichever of the draft and the retrieval seed is closer to the target in the guide.
   The seed is always a candidate, so the result is never farther from the target than its seed;
2. **keywords** — a greedy bag of public-vocabulary words (from the pool) whose summed word
   vectors point towards the target (no encoder call: word vectors are embedded once, cached);
3. **guided beam search** — the LM is prompted to write a sentence like the seed with the
   keywords (or, with ``soft_prompt=1``, reads the learned generator's soft prompt for the target
   and so writes as the generator does); at each step every beam is extended by the LM's
   ``top_k`` next tokens, each extended text is re-embedded and ranked by ``cosine to the
   target + fluency × mean log-probability``, and the best ``beam`` survive (the zero-shot inversion recipe of ZSInvert, cut down to a 135M
   LM and a few hundred encoder calls). Keeping only the LM's top tokens and weighing in its
   log-probability keeps the text fluent; the cosine moves it towards the target. **Only
   sentences come out** (issue 34): a beam that breaks a rule no later token can repair (a word
   repeated back to back, talk about the task) is dropped; a text becomes a candidate only when
   it ends a sentence (a stop token or final punctuation) and passes every reader's rule; beams
   still open at ``max_tokens`` are finished by the LM alone (its most likely tokens, at most
   ``finish`` more) and kept only if they then pass;
4. **rounds** — each further round samples ``samples`` rewrites of the current best (randomness
   from ``rng``) and runs the beam search again, prompted with the current best.

All LM forwards are batched over targets and beams with the KV cache; all candidates of a step are
embedded in one call. Cost grows with ``rounds × beam × top_k × max_tokens`` (:class:`GuidedBudget`).

Privacy: only the DP centroid, the public pool (seeds and vocabulary) and the public LM go in —
post-processing. No private text can reach a prompt: prompts are built from pool texts (or drafts
the generator, trained on the pool alone, wrote from the centroid) and pool
words only (:func:`build_prompt`), a soft prompt is the generator's map of the DP centroid, and
nothing here receives the private corpus.
"""

from __future__ import annotations

import inspect
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from fre_protocol.text import Inversion, check_centroids, check_num_texts, rules
from fre_protocol.text.embedder import Embedder, embed_uncached
from fre_protocol.text.inverter_retrieval import RetrievalInverter
from fre_protocol.text.prefix_generator import PrefixInverter, trained_for
from fre_protocol.text.seed_sources import DEFAULT_SEEDS_FROM, check_seeds_from
from primitives.errors import InvalidInputError, InvalidParameterError
from primitives.randomness import RandomSource

PROMPT = "Write one sentence similar to this one.\n\nSentence: {seed}\n\nUse some of these words: {words}"
SEED_CHOICES = 8  # nearest pool texts looked at for a seed that passes the reader's rules
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]+")
_SENTENCE_END = re.compile(r"[.!?][\"')\]]?$")
# A small chat model talks about the task ("This sentence is…") or loops ("Nope, Nope, Nope"):
# such candidates are dropped unless the seed itself uses the word.
_TASK_TALK = re.compile(r"\b(?:sentences?|rewrit\w*|paraphras\w*|here(?:'s| is))\b", re.IGNORECASE)
MAX_WORD_REPEATS = 2
MIN_WORD_COUNT = 2  # pool words seen fewer times are names and typos, not vocabulary
TARGETS_PER_BATCH = 16  # targets searched together (one LM batch of targets × beam rows)
WEIGHTS = ("fluency", "plain_fluency")  # the budget's real-valued keys
SWITCHES = ("soft_prompt",)  # its 0-or-1 keys; the others are counts


def resolve_seeds_from(seeds_from: str, embedder: Embedder) -> str:
    """``auto`` (:data:`~fre_protocol.text.seed_sources.SEEDS_FROM`) made concrete for ``embedder``:
    ``prefix`` when the packaged generator was trained on its vectors, else ``retrieval``; every
    other source as given."""
    check_seeds_from(seeds_from)
    if seeds_from != "auto":
        return seeds_from
    return "prefix" if trained_for(embedder) else "retrieval"


@dataclass(frozen=True, slots=True, kw_only=True)
class GuidedBudget:
    """Search per target: ``rounds`` × ``beam`` × ``top_k`` candidates over ``max_tokens`` steps,
    plus ``samples`` sampled rewrites in every round after the first; ``keywords`` words in the
    prompt; ``fluency`` weighs the LM's mean log-probability against the cosine; ``finish``: at
    most that many further tokens, the LM's most likely, to finish each beam still open at
    ``max_tokens`` (a cut-off beam is never a candidate: it is no sentence). ``plain_fluency``
    weighs, in the final choice only, the LM's mean log-probability of each finished text read
    on its own, without the prompt: the prompted one rewards echoing the prompt's seed and
    keywords, the plain one text that reads well by itself (0: not computed). ``soft_prompt=1``:
    the beam search's LM reads the learned generator's soft prompt for the target instead of the
    chat prompt (the generator must have been trained on the embedder's vectors); measured in
    docs/results/fluent-text.md ("The search reading the generator's soft prompt"): closer to the
    target in an embedder the search never calls, and no slower, but a reader accepted fewer of
    the demo's texts, so the chat prompt (0) stays the default.

    A wider default was measured and not taken (docs/results/fluent-text.md, "A wider search"):
    5 beams × 8 tokens brings held-out texts closer in an embedder the search never calls, but
    at this fluency weight it writes less fluent text, and at a weight that keeps the fluency it
    helps single texts and not centroids, for about 1.7 times the time. ``large`` is the budget
    for closeness first."""

    rounds: int = 1
    beam: int = 3
    top_k: int = 5
    max_tokens: int = 24
    samples: int = 4
    keywords: int = 6
    fluency: float = 0.02
    finish: int = 12
    plain_fluency: float = 0.0
    soft_prompt: int = 0

    PRESETS = ("small", "default", "large")

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in SWITCHES:
                if value not in (0, 1) or isinstance(value, bool):
                    raise InvalidParameterError(f"budget {f.name} must be 0 or 1, got {value!r}")
            elif f.name in WEIGHTS:
                if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 10:
                    raise InvalidParameterError(f"budget {f.name} must be a number in [0, 10], got {value!r}")
            elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidParameterError(f"budget {f.name} must be an integer >= 1, got {value!r}")

    @classmethod
    def preset(cls, name: str) -> GuidedBudget:
        table = {
            "small": cls(beam=2, top_k=4, max_tokens=20),
            "default": cls(),
            "large": cls(rounds=2, beam=5, top_k=8, max_tokens=28, samples=8),
        }
        if name not in table:
            raise InvalidParameterError(f"budget preset must be one of {list(table)}, got {name!r}")
        return table[name]

    @classmethod
    def parse(cls, text: str) -> GuidedBudget:
        """A preset name, or ``key=value`` pairs separated by commas (the rest from the default)."""
        text = text.strip()
        if "=" not in text:
            return cls.preset(text)
        known = {f.name for f in fields(cls)}
        values: dict[str, Any] = {}
        for part in text.split(","):
            key, sep, raw = part.partition("=")
            key = key.strip()
            if not sep or key not in known:
                raise InvalidParameterError(
                    f"budget must be a preset {list(cls.PRESETS)} or key=value pairs with keys "
                    f"{sorted(known)}, got {text!r}"
                )
            try:
                values[key] = float(raw) if key in WEIGHTS else int(raw)
            except ValueError:
                raise InvalidParameterError(f"budget {key} must be a number, got {raw.strip()!r}") from None
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def build_prompt(seed: str, words: Sequence[str]) -> str:
    """The user message for one target: a public seed text and public keywords, nothing else."""
    return PROMPT.format(seed=seed, words=", ".join(words))


def pool_vocabulary(texts: Sequence[str], *, min_count: int = MIN_WORD_COUNT) -> list[str]:
    """Lower-cased words of at least three letters seen ``min_count`` times in the public pool."""
    counts = Counter(w for t in texts for w in _WORD.findall(t.lower()))
    return sorted(w for w, c in counts.items() if c >= min_count and len(w) >= 3)


def is_acceptable(text: str, seed: str) -> bool:
    """False for a candidate that talks about the task or repeats a word more than twice."""
    if _TASK_TALK.search(text) and not _TASK_TALK.search(seed):
        return False
    counts = Counter(w for w in _WORD.findall(text.lower()) if len(w) >= 3)
    return not counts or max(counts.values()) <= MAX_WORD_REPEATS


def readable_first(seed: Inversion, keep: int) -> Inversion:
    """The retrieval answer with the pool texts a reader accepts (:mod:`fre_protocol.text.rules`)
    moved first (stable), cut to ``keep``: the seed is the nearest *readable* pool text when one
    of the nearest is readable (a headline or a gloss often is not a finished sentence)."""
    order = sorted(range(len(seed.texts)), key=lambda i: not rules.passes(seed.texts[i]))[:keep]
    distances = tuple(seed.distances[i] for i in order) if seed.distances is not None else None
    sources = tuple(seed.sources[i] for i in order) if seed.sources is not None else None
    return Inversion(texts=tuple(seed.texts[i] for i in order), distances=distances, sources=sources,
                     seed=seed.seed, seed_distance=seed.seed_distance, seed_source=seed.seed_source)


def acceptable_prefix(text: str, seed: str) -> bool:
    """A beam worth extending: :func:`is_acceptable` and no rule a later token cannot repair
    (:func:`fre_protocol.text.rules.prefix_ok`)."""
    return is_acceptable(text, seed) and rules.prefix_ok(text)


def acceptable_candidate(text: str, seed: str) -> bool:
    """A finished candidate: an acceptable prefix that passes every reader's rule."""
    return is_acceptable(text, seed) and rules.passes(text)


def keyword_bag(
    target: npt.NDArray[np.floating], words: npt.NDArray[np.float32], *, size: int, shortlist: int = 48
) -> list[int]:
    """Greedy bag of word indices whose normalised sum of (unit) word vectors is closest to the
    target: a cheap stand-in for embedding every candidate bag."""
    scores = words @ target
    top = np.argsort(-scores, kind="stable")[:shortlist]
    bag: list[int] = []
    total = np.zeros(words.shape[1], dtype=np.float64)
    best = -np.inf
    for _ in range(size):
        rest = [i for i in top if i not in bag]
        if not rest:
            break
        sums = total[None, :] + words[rest]
        cos = (sums @ target) / np.maximum(np.linalg.norm(sums, axis=1), 1e-12)
        k = int(np.argmax(cos))
        if cos[k] <= best:
            break
        best = float(cos[k])
        bag.append(int(rest[k]))
        total = sums[k]
    return bag


def _kv_cache(output: Any) -> Any:
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


def _beams_from(output: Any, mask: Any, positions: Any, beam: int) -> tuple[Any, Any, Any, Any]:
    """(KV cache, next-token logits, attention mask, last position) of a prefill ``output``, each
    row repeated ``beam`` times so every target's beams start from its own state."""
    cache = _kv_cache(output)
    cache.batch_repeat_interleave(beam)
    return (cache, output.logits[:, -1].repeat_interleave(beam, dim=0), mask.repeat_interleave(beam, dim=0),
            positions[:, -1:].repeat_interleave(beam, dim=0))


#: One extension of a beam: (target, parent row, token ids, summed log-probability).
_Extension = tuple[int, int, list[int], float]


def _extensions(
    logits: Any, top_k: int, beam: int, ids: list[list[int]], total: list[float], alive: list[bool]
) -> list[_Extension]:
    """Every live beam extended by each of the LM's ``top_k`` next tokens, row by row and in the
    LM's rank order (an extension's index here breaks ties when beams are chosen)."""
    import torch

    top_lp, top_ids = torch.log_softmax(logits.float(), dim=-1).topk(top_k, dim=-1)
    rows: list[_Extension] = []
    for r in range(len(ids)):
        if alive[r]:
            for lp, tok in zip(top_lp[r].tolist(), top_ids[r].tolist(), strict=True):
                rows.append((r // beam, r, ids[r] + [tok], total[r] + lp))
    return rows


@dataclass(slots=True)
class Candidate:
    """A finished text the search wrote (or the seed), with the scores it was ranked by."""

    text: str
    cosine: float
    logprob: float  # mean per-token log-probability under the prompt (0 for pool texts)
    source: str
    plain_logprob: float = 0.0  # the same without the prompt (computed only for a plain_fluency budget)


def closer_than_seed(candidates: Sequence[Candidate]) -> list[Candidate]:
    """The written candidates (after the seed, which comes first) closer to the target in the
    guide than the seed: the only ones the choice may take."""
    return [c for c in candidates[1:] if c.cosine > candidates[0].cosine]


class GuidedInverter:
    """Retrieval seed, then embedding-guided beam search with SmolLM2 (module docstring)."""

    name = "guided"

    def __init__(
        self,
        embedder: Embedder,
        retrieval: RetrievalInverter,
        *,
        budget: GuidedBudget | None = None,
        rng: RandomSource | None = None,
        language_model: str | None = None,
        seeds_from: str = DEFAULT_SEEDS_FROM,
        generator: PrefixInverter | None = None,
    ) -> None:
        if retrieval.embedder is not None and retrieval.embedder is not embedder:
            raise InvalidParameterError("the retrieval seed must come from the same embedder as the search")
        seeds_from = resolve_seeds_from(seeds_from, embedder)
        self.budget = budget or GuidedBudget()
        soft = bool(self.budget.soft_prompt)
        if soft and not trained_for(embedder):
            raise InvalidParameterError(
                f"budget soft_prompt=1 needs the learned generator trained on the embedder's vectors; "
                f"it was not trained on {getattr(embedder, 'model_id', embedder)!r} vectors"
            )
        if (seeds_from != "retrieval" or soft) and generator is None:
            generator = PrefixInverter(embedder)
        self.seeds_from = seeds_from
        self.generator = generator if seeds_from != "retrieval" else None
        # What the beam search's LM reads first: the generator's soft prompt for the target, or
        # the chat prompt (seed and keywords).
        self.soft_prompter = generator.generator if soft and generator is not None else None
        self.embedder = embedder
        self.retrieval = retrieval
        self.rng = rng if rng is not None else RandomSource.cryptographic("text/inversion")
        self.language_model = language_model
        self._lm: tuple[Any, Any] | None = None
        self._stop_ids: frozenset[int] = frozenset()
        self._cache_arg = "past_key_values"
        self._words: list[str] = []
        self._word_vectors: npt.NDArray[np.float32] | None = None

    # -- models ----------------------------------------------------------------------------------
    def load(self) -> None:
        """Load the language model (absent weights fail here, before any release)."""
        if self._lm is not None:
            return
        from fre_protocol.text.paraphraser import CausalLMParaphraser

        tokenizer, model = CausalLMParaphraser(self.language_model).load()
        # Tokens that end a one-line answer: end of sequence and anything holding a line break.
        stops = {i for i in (tokenizer.eos_token_id, getattr(model.config, "eos_token_id", None)) if isinstance(i, int)}
        vocab = tokenizer.get_vocab()
        stops.update(i for tok, i in vocab.items() if "\n" in tokenizer.convert_tokens_to_string([tok]))
        self._stop_ids = frozenset(stops)
        # transformers 5 renamed the KV cache argument ("past_key_values" → "cache").
        self._cache_arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        self._lm = (tokenizer, model)
        if self.generator is not None:
            self.generator.load()
        if self.soft_prompter is not None:
            self.soft_prompter.load()

    def vocabulary(self, *, progress: bool = False) -> tuple[list[str], npt.NDArray[np.float32]]:
        """The pool's words and their unit word vectors (embedded once, through the cache)."""
        if self._word_vectors is None:
            words = pool_vocabulary(self.retrieval.pool.texts)
            if not words:
                raise InvalidInputError("the public pool has no vocabulary to guide the search")
            vectors = np.asarray(self.embedder.embed(words, progress=progress), dtype=np.float32)
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
            self._words, self._word_vectors = words, vectors
        return self._words, self._word_vectors

    def _encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Unit embeddings of throwaway candidates: not worth the disk cache when it exists."""
        vectors: npt.NDArray[np.float32] = np.asarray(embed_uncached(self.embedder, texts), dtype=np.float32)
        unit: npt.NDArray[np.float32] = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return unit

    # -- inversion -------------------------------------------------------------------------------
    def invert(
        self, centroids: npt.NDArray[np.floating], *, num_texts: int = 1, progress: bool = False
    ) -> list[Inversion]:
        return [inversion for inversion, _ in self.search(centroids, num_texts=num_texts, progress=progress)]

    def search(
        self, centroids: npt.NDArray[np.floating], *, num_texts: int = 1, progress: bool = False
    ) -> list[tuple[Inversion, list[Candidate]]]:
        """:meth:`invert`'s answer for each centroid beside every candidate its search wrote (the
        seed first): what a study of the search's choices reads."""
        check_num_texts(num_texts)
        c = check_centroids(centroids)
        if c.shape[0] == 0:
            return []
        norms = np.linalg.norm(c, axis=1)
        if not (norms > 0).all():
            raise InvalidInputError(f"centroid row {int(np.argmin(norms))} is all zeros: it has no direction to invert")
        self.load()
        nearest = self.retrieval.invert(c, num_texts=max(num_texts, SEED_CHOICES), progress=progress)
        seeds = [readable_first(s, max(num_texts, 2)) for s in nearest]
        self.vocabulary(progress=progress)
        targets = (c / norms[:, None]).astype(np.float32)
        if self.generator is not None:
            seeds = self._generated_seeds(c, targets, seeds)
        from tqdm.auto import tqdm

        out: list[tuple[Inversion, list[Candidate]]] = []
        with tqdm(total=len(c), desc="guided inversion", unit="centroid", disable=not progress) as bar:
            for start in range(0, len(c), TARGETS_PER_BATCH):
                stop = min(start + TARGETS_PER_BATCH, len(c))
                pools = self._search(targets[start:stop], seeds[start:stop])
                if self.budget.plain_fluency:
                    pools = self._read_plainly(pools)
                for row, candidates in zip(range(start, stop), pools, strict=True):
                    out.append((self._choose(c[row], seeds[row], candidates, num_texts), candidates))
                bar.update(stop - start)
        return out

    def _generated_seeds(
        self, centroids: npt.NDArray[np.float64], targets: npt.NDArray[np.float32], seeds: list[Inversion]
    ) -> list[Inversion]:
        """Each target's seed replaced by the generator's closest readable draft: always with
        ``seeds_from="prefix"``, only when the draft is closer in the guide with ``"both"``; the
        retrieval seed stays when no draft passes the reader's rules. The retrieval texts follow
        the draft, so they stay candidates."""
        assert self.generator is not None
        drafts = self.generator.drafts(targets)
        retrieval_cos = (self._encode([s.texts[0] for s in seeds]) * targets).sum(axis=1)
        out: list[Inversion] = []
        for i, (seed, scored) in enumerate(zip(seeds, drafts, strict=True)):
            readable = [(t, cos) for t, cos in scored if acceptable_candidate(t, seed.texts[0])]
            if not readable or (self.seeds_from == "both" and readable[0][1] <= retrieval_cos[i]):
                out.append(seed)
                continue
            assert seed.distances is not None and seed.sources is not None
            text = readable[0][0]
            distance = float(np.linalg.norm(self._encode([text])[0].astype(np.float64) - centroids[i]))
            out.append(Inversion(texts=(text, *seed.texts), distances=(distance, *seed.distances),
                                 sources=("prefix", *seed.sources)))
        return out

    def _search(self, targets: npt.NDArray[np.float32], seeds: Sequence[Inversion]) -> list[list[Candidate]]:
        """Every candidate written for each target, over all rounds."""
        words, vectors = self.vocabulary()
        keywords = [[words[i] for i in keyword_bag(t, vectors, size=self.budget.keywords)] for t in targets]
        seed_texts = [s.texts[0] for s in seeds]
        seed_cos = (self._encode(seed_texts) * targets).sum(axis=1)
        found: list[list[Candidate]] = [
            [Candidate(t, float(cs), 0.0, "seed")] for t, cs in zip(seed_texts, seed_cos, strict=True)
        ]
        best = list(seed_texts)
        for round_no in range(self.budget.rounds):
            prompts = [build_prompt(b, kw) for b, kw in zip(best, keywords, strict=True)]
            if round_no > 0:
                for i, texts in enumerate(self._sample(prompts)):
                    texts = [t for t in texts if acceptable_candidate(t, seed_texts[i])]
                    if texts:
                        cos = self._encode(texts) @ targets[i]
                        found[i].extend(Candidate(t, float(s), 0.0, "rewrite") for t, s in zip(texts, cos, strict=True))
            for i, cands in enumerate(self._beam_search(prompts, targets, seed_texts)):
                found[i].extend(cands)
            best = [max(f, key=self._score).text for f in found]
        return found

    def _score(self, cand: Candidate) -> float:
        return cand.cosine + self.budget.fluency * cand.logprob + self.budget.plain_fluency * cand.plain_logprob

    def _read_plainly(self, pools: list[list[Candidate]]) -> list[list[Candidate]]:
        """The candidates that could be chosen (:func:`closer_than_seed`) with their plain
        log-probability: every target's in one batched LM pass."""
        from fre_protocol.text.quality import token_nlls

        assert self._lm is not None
        texts = list(dict.fromkeys(c.text for pool in pools for c in closer_than_seed(pool)))
        if not texts:
            return pools
        nll = dict(zip(texts, (float(x) for x in token_nlls(texts, *self._lm)), strict=True))
        return [[pool[0], *(replace(c, plain_logprob=-nll[c.text]) if c.text in nll else c for c in pool[1:])]
                for pool in pools]

    def _choose(
        self, centroid: npt.NDArray[np.float64], seed: Inversion, candidates: list[Candidate], num_texts: int
    ) -> Inversion:
        """Best-scored distinct texts; a written text replaces the seed only if it is closer."""
        assert seed.distances is not None and seed.sources is not None
        ranked = sorted(closer_than_seed(candidates), key=self._score, reverse=True) + [
            Candidate(t, -np.inf, 0.0, s) for t, s in zip(seed.texts, seed.sources, strict=True)
        ]
        texts: list[str] = []
        sources: list[str] = []
        for cand in ranked:
            if cand.text not in texts:
                texts.append(cand.text)
                sources.append(cand.source if cand.source != "seed" else "pool")
            if len(texts) == num_texts:
                break
        emb = self._encode(texts).astype(np.float64)
        distances = np.linalg.norm(emb - centroid[None, :], axis=1)
        return Inversion(
            texts=tuple(texts),
            distances=tuple(float(d) for d in distances),
            sources=tuple(sources),
            seed=seed.texts[0],
            seed_distance=seed.distances[0],
            seed_source=seed.sources[0],
        )

    # -- the language model ------------------------------------------------------------------------
    def _pad_id(self) -> int:
        assert self._lm is not None
        tokenizer = self._lm[0]
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        return int(pad)

    def _chat(self, prompts: Sequence[str]) -> dict[str, Any]:
        """The prompts in the LM's chat format, left-padded into one batch (the shared tokenizer
        is not modified)."""
        import torch

        assert self._lm is not None
        tokenizer, model = self._lm
        rows = [
            tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
            for p in prompts
        ]
        encoded = [tokenizer(r, add_special_tokens=False)["input_ids"] for r in rows]
        width = max(len(e) for e in encoded)
        ids = torch.full((len(encoded), width), self._pad_id(), dtype=torch.long)
        mask = torch.zeros((len(encoded), width), dtype=torch.long)
        for i, e in enumerate(encoded):
            ids[i, width - len(e) :] = torch.tensor(e, dtype=torch.long)
            mask[i, width - len(e) :] = 1
        return {"input_ids": ids.to(model.device), "attention_mask": mask.to(model.device)}

    def _sample(self, prompts: Sequence[str]) -> list[list[str]]:
        """``samples`` sampled one-line answers per prompt (seeded from ``rng``)."""
        import torch

        assert self._lm is not None
        tokenizer, model = self._lm
        batch = self._chat(prompts)
        seed = int(self.rng.uint64(1)[0] & ((1 << 63) - 1))
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(seed)
            generated = model.generate(
                **batch, do_sample=True, temperature=0.7, top_p=0.95, max_new_tokens=self.budget.max_tokens,
                num_return_sequences=self.budget.samples, pad_token_id=self._pad_id(),
            )
        answers = tokenizer.batch_decode(generated[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
        out: list[list[str]] = [[] for _ in prompts]
        for j, answer in enumerate(answers):
            line = answer.strip().split("\n")[0].strip()
            if line:
                out[j // self.budget.samples].append(line)
        return out

    def _beam_search(
        self, prompts: Sequence[str], targets: npt.NDArray[np.float32], seeds: Sequence[str]
    ) -> list[list[Candidate]]:
        """Token-level beam search ranked by cosine to the target + fluency × mean log-probability;
        prefixes that fail :func:`acceptable_prefix` (against the target's seed) are dropped, and
        only texts that pass every reader's rule become candidates.

        Beam state is kept per row (target × ``beam``): its token ids, summed log-probability and
        whether it is still extended; each step extends, ranks, keeps the best and feeds the LM."""
        import torch

        beam = self.budget.beam
        n = len(prompts)
        found: list[list[Candidate]] = [[] for _ in range(n)]
        with torch.no_grad():
            cache, logits, mask, position = (self._prefill_soft(targets) if self.soft_prompter is not None
                                             else self._prefill(prompts))
            ids: list[list[int]] = [[] for _ in range(n * beam)]
            total = [0.0] * (n * beam)
            alive = [b == 0 for _ in range(n) for b in range(beam)]  # the beams start as one
            for _ in range(self.budget.max_tokens):
                rows = _extensions(logits, self.budget.top_k, beam, ids, total, alive)
                if not rows:
                    break
                ranked = self._rank_extensions(rows, targets, seeds, found)
                parents, tokens = self._keep_best(ranked, rows, ids, total, alive)
                cache, logits, mask, position = self._step(cache, mask, position, parents, tokens)
            self._finish_beams(cache, logits, mask, position, ids, total, alive, targets, seeds, found)
        return found

    def _prefill(self, prompts: Sequence[str]) -> tuple[Any, Any, Any, Any]:
        """(KV cache, next-token logits, attention mask, last position) after reading the prompts,
        each repeated ``beam`` times so every prompt's beams start from its own state."""
        assert self._lm is not None
        model = self._lm[1]
        batch = self._chat(prompts)
        mask = batch["attention_mask"]
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = model(input_ids=batch["input_ids"], attention_mask=mask, position_ids=positions, use_cache=True)
        return _beams_from(out, mask, positions, self.budget.beam)

    def _prefill_soft(self, targets: npt.NDArray[np.float32]) -> tuple[Any, Any, Any, Any]:
        """:meth:`_prefill` with the learned generator's soft prompt for each target in place of
        the chat prompt: the LM then writes as the generator does (a sentence of the public pool
        for that vector), and the cosine steers from there."""
        import torch

        assert self._lm is not None and self.soft_prompter is not None
        model = self._lm[1]
        prefix = self.soft_prompter.soft_prompt(targets).to(model.device)
        mask = torch.ones(prefix.shape[:2], dtype=torch.long, device=model.device)
        positions = mask.cumsum(-1) - 1
        out = model(inputs_embeds=prefix, attention_mask=mask, position_ids=positions, use_cache=True)
        return _beams_from(out, mask, positions, self.budget.beam)

    def _rank_extensions(
        self,
        rows: list[_Extension],
        targets: npt.NDArray[np.float32],
        seeds: Sequence[str],
        found: list[list[Candidate]],
    ) -> list[list[tuple[float, int]]]:
        """Per target, its acceptable extensions as (score, index in ``rows``) to choose beams from.

        All extensions are decoded, and the acceptable ones embedded in one call. One that ends
        in a stop token is a finished candidate (added to ``found``, not extended); one that ends
        a sentence is added to ``found`` and still extended."""
        assert self._lm is not None
        tokenizer = self._lm[0]
        fluency = self.budget.fluency
        texts = [tokenizer.decode(seq, skip_special_tokens=True).strip() for seq in (x[2] for x in rows)]
        keep = [j for j, x in enumerate(rows) if acceptable_prefix(texts[j], seeds[x[0]])]
        ranked: list[list[tuple[float, int]]] = [[] for _ in range(len(found))]
        if not keep:
            return ranked
        cos = np.zeros(len(rows))
        cos[keep] = (self._encode([texts[j] or "." for j in keep]) * targets[[rows[j][0] for j in keep]]).sum(axis=1)
        for j in keep:
            target, _, seq, lp_sum = rows[j]
            mean_lp = lp_sum / len(seq)
            if seq[-1] in self._stop_ids:
                if texts[j] and rules.passes(texts[j]):
                    found[target].append(Candidate(texts[j], float(cos[j]), mean_lp, "guided"))
                continue
            if _SENTENCE_END.search(texts[j]) and rules.passes(texts[j]):
                found[target].append(Candidate(texts[j], float(cos[j]), mean_lp, "guided"))
            ranked[target].append((float(cos[j]) + fluency * mean_lp, j))
        return ranked

    def _keep_best(
        self,
        ranked: list[list[tuple[float, int]]],
        rows: list[_Extension],
        ids: list[list[int]],
        total: list[float],
        alive: list[bool],
    ) -> tuple[list[int], list[int]]:
        """The ``beam`` best-ranked extensions of each target become its beams (``ids``, ``total``
        and ``alive`` are updated in place); a target with fewer fills its other rows with dead
        beams fed padding. Returns every row's parent row and the token to feed it next."""
        beam = self.budget.beam
        parents: list[int] = []
        tokens: list[int] = []
        for target in range(len(ranked)):
            keep = sorted(ranked[target], reverse=True)[:beam]
            for b in range(beam):
                if b < len(keep):
                    j = keep[b][1]
                    parents.append(rows[j][1])
                    tokens.append(rows[j][2][-1])
                    ids_b, total_b, alive_b = rows[j][2], rows[j][3], True
                else:
                    parents.append(target * beam)
                    tokens.append(self._pad_id())
                    ids_b, total_b, alive_b = [], 0.0, False
                r = target * beam + b
                ids[r], total[r], alive[r] = ids_b, total_b, alive_b
        return parents, tokens

    def _step(
        self, cache: Any, mask: Any, position: Any, parents: list[int], tokens: list[int]
    ) -> tuple[Any, Any, Any, Any]:
        """Reorder the KV cache, mask and positions to each row's parent and feed every row its
        token; returns the new (KV cache, next-token logits, attention mask, position)."""
        import torch

        assert self._lm is not None
        model = self._lm[1]
        index = torch.tensor(parents, device=mask.device)
        cache.reorder_cache(index)
        mask = torch.cat([mask[index], torch.ones(len(parents), 1, dtype=mask.dtype, device=mask.device)], dim=1)
        position = position[index] + 1
        step = model(
            input_ids=torch.tensor(tokens, device=mask.device)[:, None], attention_mask=mask,
            position_ids=position, use_cache=True, **{self._cache_arg: cache},
        )
        return _kv_cache(step), step.logits[:, -1], mask, position

    def _finish_beams(
        self,
        cache: Any, logits: Any, mask: Any, position: Any,
        ids: list[list[int]],
        total: list[float],
        alive: list[bool],
        targets: npt.NDArray[np.float32],
        seeds: Sequence[str],
        found: list[list[Candidate]],
    ) -> None:
        """Beams still open at max_tokens are finished by the LM alone: its most likely token,
        for at most ``finish`` tokens, until a stop token or a sentence end; a beam that finishes
        a sentence a reader accepts is a candidate, one that does not is dropped.

        Only the open rows are fed: each step's batch shrinks to the beams not yet finished
        (``at`` maps a row to its place in the current batch)."""
        import torch

        assert self._lm is not None
        tokenizer = self._lm[0]
        beam = self.budget.beam
        open_rows = [r for r in range(len(ids)) if alive[r] and ids[r]]
        at = {r: r for r in open_rows}
        done: dict[int, tuple[str, float]] = {}
        ids = [list(x) for x in ids]
        total = list(total)
        for _ in range(self.budget.finish):
            if not open_rows:
                break
            lp = torch.log_softmax(logits.float(), dim=-1)
            best_lp, best = lp.max(dim=-1)
            still: list[int] = []
            parents: list[int] = []
            tokens: list[int] = []
            for r in open_rows:
                tok = int(best[at[r]])
                total[r] += float(best_lp[at[r]])
                if tok in self._stop_ids:
                    done[r] = (tokenizer.decode(ids[r], skip_special_tokens=True).strip(), total[r] / (len(ids[r]) + 1))
                    continue
                ids[r].append(tok)
                text = tokenizer.decode(ids[r], skip_special_tokens=True).strip()
                if _SENTENCE_END.search(text):
                    done[r] = (text, total[r] / len(ids[r]))
                    continue
                still.append(r)
                parents.append(at[r])
                tokens.append(tok)
            open_rows = still
            if open_rows:
                cache, logits, mask, position = self._step(cache, mask, position, parents, tokens)
                at = {r: i for i, r in enumerate(open_rows)}
        last = [(r // beam, text, mean_lp) for r, (text, mean_lp) in sorted(done.items())
                if text and acceptable_candidate(text, seeds[r // beam])]
        if last:
            cos = (self._encode([t for _, t, _ in last]) * targets[[x[0] for x in last]]).sum(axis=1)
            for (target, text, mean_lp), cs in zip(last, cos, strict=True):
                found[target].append(Candidate(text, float(cs), mean_lp, "guided"))

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "language_model": self.language_model or "SmolLM2-135M-Instruct",
            "budget": self.budget.to_dict(),
            "seeds_from": self.seeds_from,
            "prompt": "soft" if self.soft_prompter is not None else "chat",
            "pool_texts": len(self.retrieval.pool),
            "vocabulary": len(self._words) or None,
        }
