"""A GGUF language model, converted once and kept as a transformers folder under the cache.

transformers reads a GGUF file by parsing every metadata field in Python (the tokenizer's
vocabulary alone is hundreds of thousands of them) and dequantizing the weights: 35–70 s for
SmolLM2-135M on two cores, longer for Gemma-3 270M, in every process that loads it. The first load
reads the GGUF file as before and writes what it got (the float32 weights as safetensors, the
config, the tokenizer) to ``<cache>/models/<name>-<fingerprint>/``; later loads read that folder,
which holds the same tensors and the same tokenizer, in seconds.

The folder is keyed by the GGUF file's name, size, first and last MiB, and the transformers
version that converted it, so a new file or a new converter never reads an old copy. It is written
under a temporary name and renamed into place only when complete (two processes converting at
once each finish, and one copy stays); a copy that cannot be read is ignored and rebuilt, and a
copy that cannot be written (a read-only or full disk) only costs the next process the slow load.
"""

from __future__ import annotations

import copy
import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from fre_protocol.text.embedder import default_cache_dir

COMPLETE = "converted-from-gguf.txt"  # written last: its presence means the folder is whole
_MIB = 1 << 20


def gguf_fingerprint(gguf: Path) -> str:
    """The file's name, size, first and last MiB, and the converting transformers version."""
    import transformers

    size = gguf.stat().st_size
    h = hashlib.sha256(f"{gguf.name}\0{size}\0{transformers.__version__}\0".encode())
    with gguf.open("rb") as fh:
        h.update(fh.read(_MIB))
        fh.seek(max(0, size - _MIB))
        h.update(fh.read(_MIB))
    return h.hexdigest()[:16]


def copy_folder(gguf: Path, cache_dir: Path | None = None) -> Path:
    """Where the converted copy of ``gguf`` is kept (it may not exist yet)."""
    root = cache_dir if cache_dir is not None else default_cache_dir()
    return root / "models" / f"{gguf.stem}-{gguf_fingerprint(gguf)}"


def load_gguf_model(folder: str, gguf_file: str, *, cache_dir: Path | None = None) -> tuple[Any, Any]:
    """(tokenizer, model) of ``folder/gguf_file``: from its converted copy when there is a whole
    one, else from the GGUF file, writing the copy for the next process."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kept = copy_folder(Path(folder) / gguf_file, cache_dir)
    if (kept / COMPLETE).is_file():
        try:
            return AutoTokenizer.from_pretrained(str(kept)), AutoModelForCausalLM.from_pretrained(str(kept))
        except Exception:  # noqa: BLE001 - a damaged copy is never trusted: the GGUF file is read again
            shutil.rmtree(kept, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf_file)
    _write_copy(tokenizer, model, kept, source=f"{folder}/{gguf_file}")
    return tokenizer, model


def _plain_model(model: Any) -> Any:
    """The same weights in a model transformers will save: one loaded from GGUF is marked as
    quantized (its weights are already dequantized) and refuses ``save_pretrained``."""
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=model.dtype)  # type: ignore[no-untyped-call]
    plain.load_state_dict(model.state_dict())
    return plain


def _write_copy(tokenizer: Any, model: Any, kept: Path, *, source: str) -> None:
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=kept.parent, prefix=f".{kept.name}."))
    except OSError:
        return
    try:
        _plain_model(model).save_pretrained(str(tmp), safe_serialization=True)
        model.generation_config.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        (tmp / COMPLETE).write_text(f"converted by transformers from {Path(source).name}\n", encoding="utf-8")
        os.replace(tmp, kept)
    except (OSError, ValueError, RuntimeError):
        pass  # another process's copy came first, the disk refused, or the model would not rebuild: next time
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
