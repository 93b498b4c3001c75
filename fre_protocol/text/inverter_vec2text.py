"""vec2text inversion (Morris et al. 2023; the paper's inverter, §6 Step 4 and §7).

An adapter over the real ``vec2text`` API:

* weights from a local folder ``DIR`` laid out as ``DIR/inversion`` (a
  ``vec2text.models.InversionModel``, e.g. a copy of ``jxm/gtr__nq__32``) and ``DIR/corrector``
  (a ``vec2text.models.CorrectorEncoderModel``, e.g. ``jxm/gtr__nq__32__correct``), joined with
  ``vec2text.api.load_corrector``; without a folder, ``vec2text.api.load_pretrained_corrector
  ("gtr-base")``, which works only where the hub weights are already in the local cache;
* inversion with ``vec2text.api.invert_embeddings(embeddings, corrector, num_steps,
  sequence_beam_width)`` in batches.

The public correctors were trained for **gtr-t5-base** embeddings only: the adapter refuses any
other embedder, and refuses with a message saying how to get the weights when they are absent.
vec2text gives one text per centroid (more come from the paraphraser).
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from fre_protocol.text import Inversion, check_centroids
from primitives.errors import FreError, InvalidParameterError

PRETRAINED_NAME = "gtr-base"
HUB_WEIGHTS = ("jxm/gtr__nq__32", "jxm/gtr__nq__32__correct")
GTR_DIM = 768


def is_gtr_t5_base(model_id: str) -> bool:
    mid = model_id.lower().replace("_", "-")
    return "gtr-t5-base" in mid


def _missing_weights_message(detail: str) -> str:
    return (
        f"vec2text weights for {PRETRAINED_NAME} are not available ({detail}). On a machine with "
        f"internet, save {HUB_WEIGHTS[0]} as DIR/inversion and {HUB_WEIGHTS[1]} as DIR/corrector "
        "(from_pretrained(...).save_pretrained(...)), copy DIR here and pass --vec2text-dir DIR; "
        "or use the offline default --inverter retrieval"
    )


def import_vec2text() -> ModuleType:
    try:
        import vec2text
    except ImportError as exc:
        raise FreError(
            f"the vec2text inverter needs the vec2text package ({exc}); pip install 'fre-e2t[text]'"
        ) from None
    module: ModuleType = vec2text
    return module


class Vec2TextInverter:
    """vec2text behind the :class:`~fre_protocol.text.Inverter` interface."""

    name = "vec2text"

    def __init__(
        self,
        embedder_id: str,
        *,
        model_dir: str | os.PathLike[str] | None = None,
        num_steps: int | None = 20,
        sequence_beam_width: int = 0,
        batch_size: int = 16,
        module: ModuleType | None = None,
    ) -> None:
        if not is_gtr_t5_base(embedder_id):
            raise InvalidParameterError(
                "the vec2text inverter only fits gtr-t5-base embeddings (its public corrector was "
                f"trained on them), got embedder {embedder_id!r}; use --embedder "
                "sentence-transformers/gtr-t5-base or the retrieval inverter"
            )
        if num_steps is not None and (isinstance(num_steps, bool) or num_steps < 1):
            raise InvalidParameterError(f"num_steps must be an integer >= 1 or None, got {num_steps!r}")
        if isinstance(sequence_beam_width, bool) or sequence_beam_width < 0:
            raise InvalidParameterError(
                f"sequence_beam_width must be an integer >= 0, got {sequence_beam_width!r}"
            )
        if sequence_beam_width and num_steps is None:
            raise InvalidParameterError("sequence_beam_width > 0 needs num_steps (vec2text's rule)")
        if isinstance(batch_size, bool) or batch_size < 1:
            raise InvalidParameterError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        self.embedder_id = embedder_id
        self.model_dir = Path(model_dir) if model_dir is not None else None
        self.num_steps = num_steps
        self.sequence_beam_width = sequence_beam_width
        self.batch_size = batch_size
        self._module = module
        self._corrector: Any = None
        if self.model_dir is not None:
            self._check_dir(self.model_dir)

    @staticmethod
    def _check_dir(path: Path) -> None:
        if not path.is_dir():
            raise InvalidParameterError(_missing_weights_message(f"{str(path)!r} is not a folder"))
        for sub in ("inversion", "corrector"):
            if not (path / sub / "config.json").is_file():
                raise InvalidParameterError(
                    _missing_weights_message(f"{str(path / sub)!r} holds no config.json")
                )

    @property
    def module(self) -> ModuleType:
        if self._module is None:
            self._module = import_vec2text()
        return self._module

    def load(self) -> Any:
        """The vec2text Corrector (loaded once)."""
        if self._corrector is not None:
            return self._corrector
        v2t = self.module
        if self.model_dir is not None:
            try:
                inversion = v2t.models.InversionModel.from_pretrained(str(self.model_dir / "inversion"))
                corrector_model = v2t.models.CorrectorEncoderModel.from_pretrained(
                    str(self.model_dir / "corrector")
                )
            except (OSError, ValueError) as exc:
                raise InvalidParameterError(_missing_weights_message(f"loading failed: {exc}")) from None
            self._corrector = v2t.api.load_corrector(inversion, corrector_model)
        else:
            try:
                self._corrector = v2t.api.load_pretrained_corrector(PRETRAINED_NAME)
            except (OSError, ValueError) as exc:
                first = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
                raise InvalidParameterError(_missing_weights_message(first)) from None
        return self._corrector

    def _device(self) -> Any:
        v2t = self.module
        utils = getattr(getattr(v2t, "models", None), "model_utils", None)
        device = getattr(utils, "device", None)
        if device is not None:
            return device
        from fre_protocol.text.embedder import pick_device

        return pick_device()

    def invert(
        self, centroids: npt.NDArray[np.floating], *, num_texts: int = 1, progress: bool = False
    ) -> list[Inversion]:
        if num_texts != 1:
            raise InvalidParameterError(
                f"the vec2text inverter gives one text per centroid, got num_texts={num_texts}; "
                "use --paraphrases for more"
            )
        c = check_centroids(centroids, GTR_DIM)
        if c.shape[0] == 0:
            return []
        import torch
        from tqdm.auto import tqdm

        corrector = self.load()
        device = self._device()
        out: list[Inversion] = []
        with tqdm(total=c.shape[0], desc="vec2text", unit="centroid", disable=not progress) as bar:
            for start in range(0, c.shape[0], self.batch_size):
                block = torch.as_tensor(c[start : start + self.batch_size], dtype=torch.float32)
                block = block.to(device)
                with torch.no_grad():
                    texts = self.module.api.invert_embeddings(
                        embeddings=block,
                        corrector=corrector,
                        num_steps=self.num_steps,
                        sequence_beam_width=self.sequence_beam_width,
                    )
                if len(texts) != block.shape[0]:
                    raise FreError(f"vec2text returned {len(texts)} texts for {block.shape[0]} centroids")
                out.extend(Inversion(texts=(str(t).strip() or "…",), sources=("vec2text",)) for t in texts)
                bar.update(int(block.shape[0]))
        return out

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "model_dir": str(self.model_dir) if self.model_dir else None,
            "pretrained": None if self.model_dir else PRETRAINED_NAME,
            "num_steps": self.num_steps,
            "sequence_beam_width": self.sequence_beam_width,
        }
