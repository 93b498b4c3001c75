"""``fre-e2t web-assets``: write the assets folder a browser's device embedder loads.

The folder (``fre_protocol.web.assets``) holds the model as ONNX, its tokenizer, onnxruntime-web's
WebAssembly runtime (copied from ``clients/web/node_modules``) and ``manifest.json`` with each
file's SHA-256 and size. A folder that already matches its manifest is left as it is.
"""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "write the device embedder's assets folder (ONNX model, tokenizer, onnxruntime-web runtime, manifest)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from fre_protocol.web.assets import DEFAULT_OUT, WEB_DIR

    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, metavar="DIR",
                        help="the assets directory to write (default: clients/web/dist/assets, git-ignored)")
    parser.add_argument("--web", type=Path, default=WEB_DIR, metavar="DIR",
                        help="the web client's directory, whose node_modules holds onnxruntime-web (default: clients/web)")


def run(args: argparse.Namespace) -> int:
    from fre_protocol.web.assets import build_assets

    result = build_assets(args.out, web_dir=args.web)
    model = result.manifest["model"]
    size = sum(entry["size"] for entry in result.manifest["files"].values())
    state = "written" if result.built else "unchanged (matches its manifest)"
    print(f"{result.out}: {state}; {model['id']} (d = {model['dim']}), {len(result.manifest['files'])} files, {size / 1e6:.1f} MB")
    return 0
