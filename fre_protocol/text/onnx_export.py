"""The packaged default embedder's transformer as a float32 ONNX file, for a device to run.

The file maps ``input_ids``, ``attention_mask``, ``token_type_ids`` (int64, batch × tokens) to
``last_hidden_state`` (float32, batch × tokens × 384); pooling and normalisation are the device's
(``clients/web/src/embed.ts``), as they are sentence-transformers' modules in Python. It is written
by torch's TorchScript exporter (``dynamo=False``), which needs the ``onnx`` package (the ``text``
extra pins it); torch is imported here only, inside the function.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from primitives.errors import FreError

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT_NAME = "last_hidden_state"
OPSET = 17
ONNX_INSTALL = "pip install 'onnx==1.23.2' (or the text extra: pip install 'fre-e2t[text]')"


def export_transformer(model_dir: Path, out: Path) -> None:
    """Write the transformer of the sentence-transformers folder ``model_dir`` to ``out``."""
    try:
        import onnx  # noqa: F401 - torch's exporter needs it; fail early with the fix
    except ImportError:
        raise FreError(f"exporting the model to ONNX needs the onnx package; {ONNX_INSTALL}") from None
    import torch
    from transformers import AutoModel

    class TokenEmbeddings(torch.nn.Module):
        def __init__(self, model: Any) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    model = AutoModel.from_pretrained(str(model_dir)).eval()
    example = tuple(torch.ones(1, 8, dtype=torch.long) for _ in INPUT_NAMES)
    axes = {name: {0: "batch", 1: "tokens"} for name in (*INPUT_NAMES, OUTPUT_NAME)}
    with torch.no_grad():
        torch.onnx.export(
            TokenEmbeddings(model),
            example,
            str(out),
            input_names=list(INPUT_NAMES),
            output_names=[OUTPUT_NAME],
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
        )
