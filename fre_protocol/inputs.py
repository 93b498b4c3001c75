"""Reading the inputs a run is given as files, with a clear error for every bad case.

Used by the command line and by the library (experiments) alike, so it lives outside
``fre_protocol.cli``: a lower layer never imports the command line.
"""

from __future__ import annotations

import hashlib
import math
import mmap
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from primitives.errors import InvalidInputError

__all__ = ["EmbeddingShards", "file_sha256", "load_embeddings", "load_user_labels", "open_embeddings", "release_pages"]


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a file's bytes, hex (read in blocks: model files are large)."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def load_embeddings(path: str | os.PathLike[str]) -> np.ndarray:
    """Read an (N, d) float array from a .npy file with a clear error for every bad case."""
    p = Path(path)
    if not p.is_file():
        raise InvalidInputError(f"embeddings file {str(p)!r} does not exist or is not a file")
    try:
        x = _map_npy(p)
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
    # Chunked so a 1M × 768 file is checked without a second full-size temporary, and the pages
    # read for the check are handed back: the file is not left resident in this process.
    for start in range(0, x.shape[0], 65536):
        if not np.isfinite(x[start : start + 65536]).all():
            raise InvalidInputError(f"embeddings contain NaN or infinite values (rows from {start})")
        release_pages(x)
    return x


def load_user_labels(path: str | os.PathLike[str], rows: int, *, field: str | None = None) -> list[str]:
    """Whose each embedding row is: entry i of a ``.npy`` array, line i of a ``.txt`` file (one
    label per line), or the ``field`` of line/row i of a ``.jsonl``/``.csv`` file; exactly ``rows``
    labels, none empty."""
    import csv
    import io
    import json

    p = Path(path)
    if not p.is_file():
        raise InvalidInputError(f"users file {str(p)!r} does not exist or is not a file")
    suffix = p.suffix.lower()
    if suffix not in (".npy", ".txt", ".jsonl", ".csv"):
        raise InvalidInputError(f"users file must end in .npy, .txt, .jsonl or .csv, got {str(p)!r}")
    if (field is None) != (suffix in (".npy", ".txt")):
        raise InvalidInputError(
            f"users file {str(p)!r}: a .npy or .txt holds one label per row (no --user-field); a .jsonl/.csv "
            f"needs --user-field naming the column, got {field!r}"
        )
    labels: list[str] = []
    if suffix == ".npy":
        try:
            array = np.load(p, allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise InvalidInputError(f"users file {str(p)!r} is not a readable .npy array ({exc})") from None
        if array.ndim != 1 or array.dtype.kind not in "iuUS":
            raise InvalidInputError(
                f"users file {str(p)!r} must be a 1-D array of integer or string labels, got {array.dtype} {array.shape}"
            )
        text = ""
    else:
        try:
            text = p.read_text(encoding="utf-8-sig")
        except (UnicodeDecodeError, OSError) as exc:
            raise InvalidInputError(f"users file {str(p)!r} is not readable UTF-8 text ({exc})") from None
    if suffix == ".npy":
        values: list[tuple[str, object]] = [
            (f"entry {i}", v.decode() if isinstance(v, bytes) else v) for i, v in enumerate(array.tolist())
        ]
    elif suffix == ".txt":
        values = [(f"line {i}", line) for i, line in enumerate(text.splitlines(), 1)]
    elif suffix == ".jsonl":
        values = []
        for i, line in enumerate(text.splitlines(), 1):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InvalidInputError(f"{str(p)!r} line {i}: not valid JSON ({exc.msg})") from None
            values.append((f"line {i}", obj.get(field) if isinstance(obj, dict) else None))
    else:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        if field not in (reader.fieldnames or []):
            raise InvalidInputError(f"{str(p)!r}: column {field!r} not in the header {reader.fieldnames}")
        values = [(f"row {reader.line_num}", row.get(field)) for row in reader]
    for where, value in values:
        if isinstance(value, bool) or not isinstance(value, str | int) or not str(value).strip():
            raise InvalidInputError(f"{str(p)!r} {where}: the user label is missing or empty, got {value!r}")
        labels.append(str(value).strip())
    if len(labels) != rows:
        raise InvalidInputError(f"users file {str(p)!r} must give one label per embedding row ({rows}), got {len(labels)}")
    return labels


def _map_npy(path: Path) -> np.ndarray:
    """A read-only view of a ``.npy`` file's array over an ``mmap`` this module holds (so that
    :func:`release_pages` can hand its pages back); object arrays are refused, as
    ``np.load(allow_pickle=False)`` refuses them."""
    with path.open("rb") as f:
        version = np.lib.format.read_magic(f)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran_order, dtype = read_header(f)
        if dtype.hasobject:
            raise ValueError("object arrays are not embeddings (and would need unpickling)")
        offset = f.tell()
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    flat = np.frombuffer(mapped, dtype=dtype, count=math.prod(shape), offset=offset)
    return flat.reshape(shape, order="F" if fortran_order else "C")


def release_pages(x: Any) -> None:
    """Let the kernel unmap the pages of a memory-mapped input that this process has read: they
    stay in the page cache and come back on the next access, but no longer count in its resident
    memory, which then holds only what a driver is using. A no-op for arrays not mapped here."""
    if isinstance(x, EmbeddingShards):
        for shard in x.shards:
            release_pages(shard)
        return
    base = x
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    if isinstance(base, mmap.mmap) and not base.closed:
        base.madvise(mmap.MADV_DONTNEED)


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
        self.shards = list(shards)
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
        for j in range(first, len(self.shards)):
            if at >= hi:
                break
            base = int(self._starts[j])
            end = min(hi, int(self._starts[j + 1]))
            parts.append(self.shards[j][at - base : end - base])
            at = end
        if len(parts) == 1:
            return np.asarray(parts[0])
        return np.concatenate(parts) if parts else np.zeros((0, self.shape[1]), dtype=self.dtype)


    def take(self, index: np.ndarray) -> np.ndarray:
        """The rows at ``index`` (any order), read shard by shard: no block between them is read."""
        idx = np.asarray(index, dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self.shape[0]):
            raise InvalidInputError(f"row indices must lie in [0, {self.shape[0]}), got [{idx.min()}, {idx.max()}]")
        out = np.empty((idx.size, self.shape[1]), dtype=self.dtype)
        shard = np.searchsorted(self._starts, idx, side="right") - 1
        for j in np.unique(shard).tolist():
            mine = np.flatnonzero(shard == j)
            out[mine] = self.shards[j][idx[mine] - int(self._starts[j])]
        return out

    def blocks(self) -> list[np.ndarray]:
        """The shards in row order (what a pass over every row reads)."""
        return list(self.shards)


def take_rows(x: np.ndarray | EmbeddingShards, index: np.ndarray) -> np.ndarray:
    """The rows of ``x`` at ``index``, from an array (a memory map reads only those) or shards."""
    return x.take(index) if isinstance(x, EmbeddingShards) else np.asarray(x[np.asarray(index, dtype=np.int64)])


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
