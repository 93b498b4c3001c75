"""A learned conditional generator: an embedding becomes a soft prompt of SmolLM2 (GEIA-style).

The guided inverter (:mod:`fre_protocol.text.inverter_guided`) starts from the nearest pool text,
which is often far from the target. This module *learns* to write a first draft instead: a small
adapter maps a unit all-MiniLM-L6-v2 vector (384-d) to ``prefix_length`` vectors in SmolLM2-135M's
input-embedding space (576-d), and SmolLM2, frozen, continues from that soft prompt (the
prefix-decoder of GEIA, Li et al. 2023, and the vec2text hypothesiser, Morris et al. 2023, cut down
to an MLP in front of a 135M LM).

* **Adapter** — ``x ↦ base + W₂ GELU(W₁ x + b₁) + b₂``, reshaped to ``(prefix_length, 576)``;
  ``base`` starts at the mean token embedding, so an untrained adapter already speaks.
* **Training** (``scripts/train_prefix_generator.py``) — teacher forcing: cross-entropy of the
  sentence's tokens (then end of text) after its own embedding's prefix. Training data is the
  **public pool only** (:mod:`fre_protocol.text.public_pool`: news sentences and WordNet glosses),
  never a private or an evaluation corpus, so the weights carry no private information and the
  generator is post-processing of a DP centroid like every other inverter.
* **Decoding** — beam search from the prefix (``beams`` finished texts, at least
  :data:`MIN_NEW_TOKENS` tokens, cut at the first sentence end); the inverter keeps, of those, the
  one closest to the target in the guide among those a reader accepts (:mod:`fre_protocol.text.rules`).

The weights (float16, safetensors) and their training log ship as package data
(:data:`WEIGHTS_FILE`, :data:`LOG_FILE`); the log records the SHA-256 of the weights, which
:func:`load_adapter` checks.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fre_protocol.inputs import file_sha256
from fre_protocol.text import Inversion, check_centroids, check_num_texts, rules
from fre_protocol.text.embedder import Embedder, embed_uncached, unit_rows
from primitives.errors import FreError, InvalidInputError, InvalidParameterError, VerificationError

DATA_DIR = Path(__file__).resolve().parent / "data"
WEIGHTS_FILE = DATA_DIR / "prefix_generator.safetensors"
LOG_FILE = DATA_DIR / "prefix_generator.json"
MAX_WEIGHT_BYTES = 20 * 1024 * 1024
MIN_NEW_TOKENS = 4
_SENTENCE_END = re.compile(r"[.!?][\"')\]]?(?=\s|$)")


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefixConfig:
    """The adapter's shape and what it was trained against (stored in the weights' metadata)."""

    embedding_dim: int = 384
    lm_dim: int = 576
    hidden: int = 768
    prefix_length: int = 8
    embedder: str = "all-MiniLM-L6-v2"
    language_model: str = "SmolLM2-135M-Instruct"

    def __post_init__(self) -> None:
        for name in ("embedding_dim", "lm_dim", "hidden", "prefix_length"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidParameterError(f"prefix config {name} must be an integer >= 1, got {value!r}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PrefixConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidInputError(f"prefix config has unknown keys {unknown}; known: {sorted(known)}")
        return cls(**data)

    def parameters(self) -> int:
        """Trainable parameters of the adapter."""
        return (self.embedding_dim * self.hidden + self.hidden
                + self.hidden * self.prefix_length * self.lm_dim + 2 * self.prefix_length * self.lm_dim)


def build_adapter(config: PrefixConfig, token_embeddings: Any | None = None) -> Any:
    """The adapter (a ``torch.nn.Module``): ``(n, embedding_dim)`` → ``(n, prefix_length, lm_dim)``.
    ``token_embeddings`` (the LM's input embedding matrix) sets ``base`` to its mean row."""
    import torch

    class PrefixAdapter(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.config = config
            self.inner = torch.nn.Linear(config.embedding_dim, config.hidden)
            self.outer = torch.nn.Linear(config.hidden, config.prefix_length * config.lm_dim)
            self.base = torch.nn.Parameter(torch.zeros(config.prefix_length, config.lm_dim))
            torch.nn.init.zeros_(self.outer.bias)
            with torch.no_grad():
                self.outer.weight.mul_(0.1)  # start near ``base``: a prompt the LM already reads
                if token_embeddings is not None:
                    self.base.copy_(token_embeddings.float().mean(dim=0).expand_as(self.base))

        def forward(self, x: Any) -> Any:
            h = torch.nn.functional.gelu(self.inner(x))
            return self.base + self.outer(h).view(-1, config.prefix_length, config.lm_dim)

    return PrefixAdapter()


def teacher_forced_loss(adapter: Any, model: Any, vectors: Any, token_ids: Any, mask: Any) -> Any:
    """Mean cross-entropy of ``token_ids`` (right-padded, ``mask`` 1 on real tokens) after the
    prefix of ``vectors``; ``model`` (the frozen LM) takes ``inputs_embeds``."""
    import torch

    prefix = adapter(vectors)
    k = prefix.shape[1]
    tokens = model.get_input_embeddings()(token_ids)
    inputs = torch.cat([prefix.to(tokens.dtype), tokens], dim=1)
    attention = torch.cat([torch.ones(mask.shape[0], k, dtype=mask.dtype, device=mask.device), mask], dim=1)
    logits = model(inputs_embeds=inputs, attention_mask=attention).logits
    predicted = logits[:, k - 1 : -1].float()  # position k-1 (the last prefix vector) predicts token 0
    labels = token_ids.masked_fill(mask == 0, -100)
    return torch.nn.functional.cross_entropy(predicted.reshape(-1, predicted.shape[-1]), labels.reshape(-1))


def encode_batch(tokenizer: Any, texts: Sequence[str], max_tokens: int, device: Any = "cpu") -> tuple[Any, Any]:
    """Right-padded token ids of ``texts`` each followed by end-of-text, cut to ``max_tokens``
    (a cut text has no end-of-text: the LM learns to stop only where sentences stop), and the mask."""
    import torch

    if max_tokens < 2:
        raise InvalidParameterError(f"max_tokens must be >= 2, got {max_tokens}")
    eos = int(tokenizer.eos_token_id)
    rows = [(tokenizer(t, add_special_tokens=False)["input_ids"] + [eos])[:max_tokens] for t in texts]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), eos, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        mask[i, : len(r)] = 1
    return ids.to(device), mask.to(device)


# -- weights ----------------------------------------------------------------------------------------
def save_adapter(adapter: Any, path: Path) -> str:
    """Write the adapter in float16 (safetensors, its config in the metadata); returns the SHA-256."""
    from safetensors.torch import save_file

    state = {k: v.detach().to("cpu").half().contiguous() for k, v in adapter.state_dict().items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(state, str(path), metadata={"config": json.dumps(asdict(adapter.config), sort_keys=True)})
    return file_sha256(path)


def read_log(path: Path = LOG_FILE) -> dict[str, Any]:
    if not path.is_file():
        raise FreError(f"the prefix generator's training log {path.name} is not installed beside its weights")
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def stored_config(path: Path = WEIGHTS_FILE) -> PrefixConfig:
    """The adapter's config from the weights' metadata, without loading a tensor or the LM."""
    from safetensors import safe_open

    if not path.is_file():
        raise FreError(f"no prefix generator weights at {path.name}: train them with scripts/train_prefix_generator.py")
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
    if "config" not in meta:
        raise InvalidInputError(f"{path.name} holds no prefix config in its metadata")
    return PrefixConfig.from_dict(json.loads(meta["config"]))


def embedder_name(embedder: Embedder) -> str:
    """The model's own name (the last part of its id), as a generator records what it was trained on."""
    return str(getattr(embedder, "model_id", "")).rstrip("/").split("/")[-1]


def trained_for(embedder: Embedder, weights: Path = WEIGHTS_FILE) -> bool:
    """Whether the generator at ``weights`` was trained on this embedder's vectors."""
    return embedder_name(embedder) == stored_config(weights).embedder


def load_adapter(path: Path = WEIGHTS_FILE, *, expected_sha256: str | None = None, device: str = "cpu") -> Any:
    """The adapter stored at ``path`` (float32, eval mode). With the packaged weights the SHA-256
    is checked against the training log's; a mismatch is a :class:`VerificationError`."""
    from safetensors.torch import load_file

    config = stored_config(path)
    if expected_sha256 is None and path == WEIGHTS_FILE:
        expected_sha256 = read_log()["weights"]["sha256"]
    if expected_sha256 is not None and file_sha256(path) != expected_sha256:
        raise VerificationError(f"prefix generator weights {path.name} do not match the SHA-256 in their log")
    adapter = build_adapter(config)
    adapter.load_state_dict({k: v.float() for k, v in load_file(str(path)).items()})
    return adapter.to(device).eval()


# -- generation ---------------------------------------------------------------------------------------
def first_sentence(text: str, min_words: int = rules.MIN_WORDS) -> str:
    """``text`` cut after the first sentence end that leaves at least ``min_words`` words."""
    text = " ".join(text.split())
    for m in _SENTENCE_END.finditer(text):
        head = text[: m.end()]
        if len(head.split()) >= min_words:
            return head
    return text


class PrefixGenerator:
    """Packaged adapter + SmolLM2: unit vectors in, ``beams`` drafts per vector out."""

    def __init__(self, *, weights: Path = WEIGHTS_FILE, beams: int = 4, max_new_tokens: int = 40) -> None:
        for name, value in (("beams", beams), ("max_new_tokens", max_new_tokens)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidParameterError(f"prefix generator {name} must be an integer >= 1, got {value!r}")
        self.weights = weights
        self.beams = beams
        self.max_new_tokens = max_new_tokens
        self._adapter: Any = None
        self._lm: tuple[Any, Any] | None = None

    def load(self) -> None:
        """Weights (checked against their log) and the LM; absent files fail here."""
        if self._lm is not None:
            return
        from fre_protocol.text.paraphraser import CausalLMParaphraser

        tokenizer, model = CausalLMParaphraser().load()
        self._adapter = load_adapter(self.weights, device=str(model.device))
        if self._adapter.config.lm_dim != model.get_input_embeddings().weight.shape[1]:
            raise InvalidInputError(
                f"prefix weights are for an LM of width {self._adapter.config.lm_dim}, "
                f"the loaded one has {model.get_input_embeddings().weight.shape[1]}"
            )
        self._lm = (tokenizer, model)

    @property
    def config(self) -> PrefixConfig:
        self.load()
        config: PrefixConfig = self._adapter.config
        return config

    def generate(self, vectors: npt.NDArray[np.floating], batch: int = 32) -> list[list[str]]:
        """Up to ``beams`` distinct drafts per row of ``vectors`` (normalised here), best beam first;
        ``batch`` rows per beam search (32 take 0.61 of the time of 8 on two cores, the same drafts)."""
        import torch

        self.load()
        assert self._lm is not None
        v = self._unit(vectors)
        tokenizer, model = self._lm
        out: list[list[str]] = []
        # The repetition penalty then applies to the generated tokens only (there are no prompt ids),
        # which is what is wanted: transformers warns about it on every call.
        with torch.no_grad(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*repetition_penalty.*inputs_embeds")
            for start in range(0, len(v), batch):
                prefix = self._prefix(v[start : start + batch])
                mask = torch.ones(prefix.shape[:2], dtype=torch.long, device=model.device)
                generated = model.generate(
                    inputs_embeds=prefix, attention_mask=mask, num_beams=self.beams,
                    num_return_sequences=self.beams, max_new_tokens=self.max_new_tokens,
                    min_new_tokens=MIN_NEW_TOKENS, do_sample=False, repetition_penalty=1.2,
                    eos_token_id=int(tokenizer.eos_token_id), pad_token_id=int(tokenizer.eos_token_id),
                )
                texts = tokenizer.batch_decode(generated, skip_special_tokens=True)
                for i in range(len(prefix)):
                    drafts = [first_sentence(t) for t in texts[i * self.beams : (i + 1) * self.beams]]
                    out.append([d for d in dict.fromkeys(drafts) if d])
        return out

    def soft_prompt(self, vectors: npt.NDArray[np.floating]) -> Any:
        """The adapter's soft prompt for each row of ``vectors`` (normalised here), in the LM's
        input-embedding dtype: (n, prefix length, LM width); the one :meth:`generate` decodes from."""
        import torch

        self.load()
        with torch.no_grad():
            return self._prefix(self._unit(vectors))

    def _unit(self, vectors: npt.NDArray[np.floating]) -> npt.NDArray[np.float32]:
        """``vectors`` checked against the adapter's input width and scaled to unit rows (float32)."""
        v = np.asarray(vectors, dtype=np.float32)
        if v.ndim != 2 or v.shape[1] != self.config.embedding_dim:
            raise InvalidInputError(f"vectors must be (n, {self.config.embedding_dim}), got {v.shape}")
        unit: npt.NDArray[np.float32] = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
        return unit

    def _prefix(self, unit: npt.NDArray[np.float32]) -> Any:
        """The adapter applied to unit rows, on the LM's device and in its input-embedding dtype."""
        import torch

        assert self._lm is not None
        model = self._lm[1]
        return self._adapter(torch.from_numpy(unit).to(model.device)).to(model.get_input_embeddings().weight.dtype)

    def describe(self) -> dict[str, Any]:
        log = read_log() if self.weights == WEIGHTS_FILE and LOG_FILE.is_file() else {}
        return {"weights": self.weights.name, "beams": self.beams, "max_new_tokens": self.max_new_tokens,
                "config": asdict(self.config), "trained": {k: log[k] for k in ("commit", "seed", "steps") if k in log}}


class PrefixInverter:
    """The generator alone as an inverter: of each target's drafts, the closest in the guide
    among those that pass the reader's rules (all drafts if none does)."""

    name = "prefix"

    def __init__(self, embedder: Embedder, generator: PrefixGenerator | None = None) -> None:
        self.embedder = embedder
        self.generator = generator or PrefixGenerator()

    def load(self) -> None:
        if embedder_name(self.embedder) != self.generator.config.embedder:
            raise InvalidParameterError(
                f"the prefix generator was trained on {self.generator.config.embedder} vectors, "
                f"the embedder is {self.embedder.model_id!r}"
            )

    def _unit(self, texts: Sequence[str]) -> npt.NDArray[np.float64]:
        return unit_rows(embed_uncached(self.embedder, texts))

    def drafts(self, centroids: npt.NDArray[np.floating]) -> list[list[tuple[str, float]]]:
        """Each target's drafts with their guide cosine, readable ones first, closest first."""
        c = check_centroids(centroids)
        targets = unit_rows(c)
        drafts = self.generator.generate(targets)
        flat = [t for d in drafts for t in d]
        vectors = self._unit(flat) if flat else np.zeros((0, c.shape[1]))
        out: list[list[tuple[str, float]]] = []
        at = 0
        for i, d in enumerate(drafts):
            cos = vectors[at : at + len(d)] @ targets[i]
            at += len(d)
            scored = sorted(zip(d, (float(x) for x in cos), strict=True),
                            key=lambda tc: (not rules.passes(tc[0]), -tc[1]))
            out.append(scored)
        return out

    def invert(
        self, centroids: npt.NDArray[np.floating], *, num_texts: int = 1, progress: bool = False
    ) -> list[Inversion]:
        check_num_texts(num_texts)
        c = check_centroids(centroids)
        if c.shape[0] == 0:
            return []
        self.load()
        out: list[Inversion] = []
        for row, drafts in zip(c, self.drafts(c), strict=True):
            if not drafts:
                drafts = [(".", 0.0)]
            texts = [t for t, _ in drafts[:num_texts]]
            emb = self._unit(texts)
            distances = np.linalg.norm(emb - row[None, :], axis=1)
            out.append(Inversion(texts=tuple(texts), distances=tuple(float(d) for d in distances),
                                 sources=("prefix",) * len(texts)))
        return out

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "generator": self.generator.describe()}


__all__ = [
    "LOG_FILE", "MAX_WEIGHT_BYTES", "WEIGHTS_FILE", "PrefixConfig", "PrefixGenerator", "PrefixInverter",
    "build_adapter", "embedder_name", "encode_batch", "first_sentence", "load_adapter", "read_log",
    "save_adapter", "stored_config", "teacher_forced_loss", "trained_for",
]
