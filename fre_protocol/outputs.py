"""Writing a run's output files: atomically (no half-written file after a crash) and as the one
canonical JSON form of :mod:`primitives.jsonsafe`.

Used by the library (the text pipeline) and by the command line alike, so it lives outside
``fre_protocol.cli``: a lower layer never imports the command line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from mechanism.release import write_atomically
from primitives.errors import InvalidParameterError
from primitives.jsonsafe import json_safe

__all__ = ["prepare_out_dir", "write_atomically_text", "write_json_atomic", "write_jsonl_atomic", "write_npy_atomic"]


def write_json_atomic(path: Path, data: Any) -> None:
    """``data`` in canonical JSON, indented, one trailing newline."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(json_safe(data, where=path.name), indent=2, allow_nan=False) + "\n"
    write_atomically(path, lambda fh: fh.write(text.encode("utf-8")), "wb")


def write_atomically_text(path: Path, text: str) -> None:
    """A UTF-8 text file (a table, a page), replaced in one step."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, lambda fh: fh.write(text.encode("utf-8")), "wb")


def write_jsonl_atomic(path: Path, rows: Iterable[Any]) -> None:
    """One canonical JSON value per line (UTF-8, non-ASCII characters kept as they are)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps(json_safe(row, where=f"{path.name} line {i + 1}"), ensure_ascii=False, allow_nan=False) + "\n"
        for i, row in enumerate(rows)
    ]
    write_atomically(path, lambda fh: fh.write("".join(lines).encode("utf-8")), "wb")


def write_npy_atomic(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, lambda fh: np.save(fh, array, allow_pickle=False), "wb")


def prepare_out_dir(path: str | os.PathLike[str]) -> Path:
    """The output folder, created if absent; an existing file there is refused."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise InvalidParameterError(f"--out must be a directory, got existing file {str(out)!r}")
    out.mkdir(parents=True, exist_ok=True)
    return out
