"""A GGUF model's converted copy: the same weights, tokenizer and logits as the GGUF file (text
tier, on the packaged SmolLM2), and with fakes, when the copy is read, rebuilt or skipped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fre_protocol.text import gguf_copy
from fre_protocol.text.gguf_copy import COMPLETE, copy_folder, gguf_fingerprint, load_gguf_model


def _gguf(tmp_path: Path, content: bytes = b"GGUF" + bytes(range(256)) * 9000) -> Path:
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    path = folder / "m.gguf"
    path.write_bytes(content)
    return path


def test_the_copy_is_keyed_by_the_file_and_the_converter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("transformers")
    import transformers

    path = _gguf(tmp_path)
    key = gguf_fingerprint(path)
    assert copy_folder(path, tmp_path / "cache") == tmp_path / "cache" / "models" / f"m-{key}"
    data = bytearray(path.read_bytes())
    data[-1] ^= 1  # the last MiB changed
    path.write_bytes(bytes(data))
    assert gguf_fingerprint(path) != key
    changed = gguf_fingerprint(path)
    monkeypatch.setattr(transformers, "__version__", "0.0.0")
    assert gguf_fingerprint(path) != changed


class _Loaded:
    def __init__(self, source: str, **kwargs: Any) -> None:
        self.source, self.kwargs = source, kwargs


def _fake_transformers(monkeypatch: pytest.MonkeyPatch, broken: Path | None = None) -> list[str]:
    import transformers

    calls: list[str] = []

    def load(source: str, **kwargs: Any) -> _Loaded:
        calls.append(source + (" gguf" if "gguf_file" in kwargs else ""))
        if broken is not None and source == str(broken):
            raise OSError("damaged")
        return _Loaded(source, **kwargs)

    for auto in (transformers.AutoTokenizer, transformers.AutoModelForCausalLM):
        monkeypatch.setattr(auto, "from_pretrained", staticmethod(load))
    return calls


def test_a_whole_copy_is_read_and_the_gguf_file_is_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("transformers")
    path, cache = _gguf(tmp_path), tmp_path / "cache"
    kept = copy_folder(path, cache)
    kept.mkdir(parents=True)
    (kept / COMPLETE).write_text("x")
    calls = _fake_transformers(monkeypatch)
    tokenizer, model = load_gguf_model(str(path.parent), path.name, cache_dir=cache)
    assert calls == [str(kept), str(kept)] and model.source == str(kept)


def test_a_copy_without_its_mark_or_that_fails_to_load_is_rebuilt_from_the_gguf_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("transformers")
    path, cache = _gguf(tmp_path), tmp_path / "cache"
    kept = copy_folder(path, cache)
    kept.mkdir(parents=True)  # unfinished: no mark
    written: list[Path] = []
    monkeypatch.setattr(gguf_copy, "_write_copy", lambda tok, model, where, source: written.append(where))
    calls = _fake_transformers(monkeypatch)
    load_gguf_model(str(path.parent), path.name, cache_dir=cache)
    assert calls == [f"{path.parent} gguf"] * 2 and written == [kept]
    (kept / COMPLETE).write_text("x")  # marked, but its files cannot be read
    calls = _fake_transformers(monkeypatch, broken=kept)
    load_gguf_model(str(path.parent), path.name, cache_dir=cache)
    assert calls == [str(kept), f"{path.parent} gguf", f"{path.parent} gguf"] and not kept.exists()


@pytest.mark.text
def test_the_copy_of_smollm2_holds_what_its_gguf_file_holds(tmp_path: Path) -> None:
    """One GGUF load (tens of seconds), one from the copy it wrote: the same float32 tensors, token
    ids, chat template, generation config and logits, bit for bit."""
    torch = pytest.importorskip("torch")
    from fre_protocol.text.paraphraser import smollm2_location

    try:
        folder, gguf = smollm2_location()
    except Exception:  # noqa: BLE001 - not installed: the carrier's own tests say so
        pytest.skip("needs SmolLM2 (fre-e2t setup-data)")
    tok_gguf, from_gguf = load_gguf_model(str(folder), gguf, cache_dir=tmp_path)
    kept = copy_folder(folder / gguf, tmp_path)
    assert (kept / COMPLETE).is_file() and (kept / "model.safetensors").is_file()
    tok_copy, from_copy = load_gguf_model(str(folder), gguf, cache_dir=tmp_path)
    a, b = from_gguf.state_dict(), from_copy.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert from_copy.dtype == from_gguf.dtype == torch.float32
    for text in ("Flu shots are free at the clinic this week.", "naïve café, 3 tests — done"):
        assert tok_copy(text)["input_ids"] == tok_gguf(text)["input_ids"]
    assert tok_copy.chat_template == tok_gguf.chat_template and len(tok_copy) == len(tok_gguf)
    assert from_copy.generation_config.to_dict() == from_gguf.generation_config.to_dict()
    ids = tok_gguf("The senate passed the budget bill on Tuesday", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.equal(from_copy(ids).logits, from_gguf(ids).logits)
