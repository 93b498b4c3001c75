"""Reading the inputs a run is given as files, with a clear error for every bad case.

Used by the command line and by the library (experiments) alike, so it lives outside
``fre_protocol.cli``: a lower layer never imports the command line.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from primitives.errors import InvalidInputError

__all__ = ["EmbeddingShards", "load_embeddings", "open_embeddings"]


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


class EmbeddingShards:
    """Memory-mapped ``.npy`` shards read as one (N, d) population, rows in file-name order.

    Nothing is copied until a driver asks for a block of rows, so a population larger than
    memory can be played window by window.
    """

    def __init__(self, shards: Sequence[np.ndarray]) -> None:
        if not shards:
            raise InvalidInputError("embedding shards must hold at least one array, got none")
        dims = {int(a.shape[1]) for a in shards}
        if len(dims) != 1:
            raise InvalidInputError(f"embedding shards must share one dimension d, got {sorted(dims)}")
        self._shards = list(shards)
        self._starts = np.cumsum([0] + [int(a.shape[0]) for a in shards])
        self.shape = (int(self._starts[-1]), dims.pop())
        self.dtype = np.result_type(*(a.dtype for a in shards))

    def rows(self, lo: int, hi: int) -> np.ndarray:
        """Rows ``lo..hi-1`` as one in-memory array (a view when they lie in one shard)."""
        if not 0 <= lo <= hi <= self.shape[0]:
            raise InvalidInputError(f"rows must satisfy 0 <= lo <= hi <= {self.shape[0]}, got ({lo}, {hi})")
        first = int(np.searchsorted(self._starts, lo, side="right")) - 1
        parts: list[Any] = []
        at = lo
        for j in range(first, len(self._shards)):
            if at >= hi:
                break
            base = int(self._starts[j])
            end = min(hi, int(self._starts[j + 1]))
            parts.append(self._shards[j][at - base : end - base])
            at = end
        if len(parts) == 1:
            return np.asarray(parts[0])
        return np.concatenate(parts) if parts else np.zeros((0, self.shape[1]), dtype=self.dtype)


def open_embeddings(path: str | os.PathLike[str]) -> np.ndarray | EmbeddingShards:
    """A memory-mapped ``.npy`` file (:func:`load_embeddings`), or a directory of ``.npy`` shards
    with one d (every shard checked the same way), read as one population."""
    p = Path(path)
    if not p.is_dir():
        return load_embeddings(p)
    files = sorted(f for f in p.iterdir() if f.suffix == ".npy")
    if not files:
        raise InvalidInputError(f"embeddings directory {str(p)!r} holds no .npy shard")
    return EmbeddingShards([load_embeddings(f) for f in files])
