"""Reading the inputs a run is given as files, with a clear error for every bad case.

Used by the command line and by the library (experiments) alike, so it lives outside
``fre_protocol.cli``: a lower layer never imports the command line.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from primitives.errors import InvalidInputError

__all__ = ["load_embeddings"]


def load_embeddings(path: str | os.PathLike[str]) -> np.ndarray:
    """Read an (N, d) float array from a .npy file with a clear error for every bad case."""
    p = Path(path)
    if not p.is_file():
        raise InvalidInputError(f"embeddings file {str(p)!r} does not exist or is not a file")
    try:
        x = np.load(p, allow_pickle=False, mmap_mode="r")
    except (ValueError, OSError, EOFError) as exc:
        raise InvalidInputError(
            f"embeddings file {str(p)!r} is not a readable .npy array ({exc.__class__.__name__}: {exc})"
        ) from None
    if x.ndim != 2:
        raise InvalidInputError(
            f"embeddings must be a 2-D array (users × dimensions), got shape {tuple(x.shape)}"
        )
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise InvalidInputError(f"embeddings must be non-empty, got shape {tuple(x.shape)}")
    if not np.issubdtype(x.dtype, np.floating) and not np.issubdtype(x.dtype, np.integer):
        raise InvalidInputError(f"embeddings must hold real numbers, got dtype {x.dtype}")
    x = np.asarray(x, dtype=np.float32 if x.dtype != np.float64 else np.float64)
    # Chunked so a 1M × 768 file is checked without a second full-size temporary.
    for start in range(0, x.shape[0], 65536):
        if not np.isfinite(x[start : start + 65536]).all():
            raise InvalidInputError(f"embeddings contain NaN or infinite values (rows from {start})")
    return x
