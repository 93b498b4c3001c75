"""One file replaced in one step, created with the permissions it will keep.

A key must never exist on disk with wider permissions than 0600, not even for the moment between
creating and ``chmod``: the temporary file is opened with its final mode, so the umask can only
narrow it.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

__all__ = ["write_file_atomically"]


def write_file_atomically(path: Path, data: bytes, *, mode: int) -> None:
    """Write ``data`` to a new file beside ``path`` created with ``mode``, fsync it, rename it over
    ``path`` and fsync the directory, so a crash leaves the old file or the new one, never half."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    # The rename is durable only once the directory entry is; not every platform can open one.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
