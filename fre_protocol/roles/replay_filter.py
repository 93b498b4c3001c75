"""A server's memory of what it has already accepted, at 16 bytes an entry.

Replay checks must remember one digest (or nonce) per message for the whole round, so at paper
scale they are what grows with N: a Python ``set`` of 16-byte ``bytes`` costs about 90 bytes an
entry (the object and the table's slack), 0.5 kB per user over a server's inboxes. Here entries
live in sorted fixed-width numpy arrays ("runs", 16 bytes an entry) that are checked and extended
a batch at a time; runs of similar size are merged, so there are O(log N) of them and each entry
is re-sorted O(log N) times. Membership is exact (entries are compared whole), and within a batch
the first copy in arrival order is the one accepted.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from primitives.errors import InvalidParameterError


class ReplayFilter:
    """A set of fixed-width byte strings (digests, nonces) that remembers them compactly."""

    def __init__(self, width: int = 16) -> None:
        if isinstance(width, bool) or not isinstance(width, int) or not 1 <= width <= 64:
            raise InvalidParameterError(f"width must be an integer in [1, 64] bytes, got {width!r}")
        self.width = width
        self._dtype = np.dtype(f"S{width}")
        self._runs: list[npt.NDArray[np.bytes_]] = []

    def __len__(self) -> int:
        return sum(int(r.shape[0]) for r in self._runs)

    def __contains__(self, entry: bytes) -> bool:
        return not self._unseen(self._array([entry]))[0]

    def contains_many(self, entries: Sequence[bytes]) -> npt.NDArray[np.bool_]:
        """True where an entry is already held (a batch of membership tests; nothing is added)."""
        arr = self._array(entries)
        return ~self._unseen(arr) if arr.shape[0] else np.zeros(0, dtype=bool)

    def add(self, entry: bytes) -> bool:
        """Remember ``entry``; False when it was already there (a replay)."""
        return bool(self.add_many([entry])[0])

    def add_many(self, entries: Sequence[bytes]) -> npt.NDArray[np.bool_]:
        """Remember a batch; True where an entry is new (its first copy, in batch order)."""
        arr = self._array(entries)
        new = np.zeros(arr.shape[0], dtype=bool)
        if arr.shape[0] == 0:
            return new
        _, first = np.unique(arr, return_index=True)
        new[first] = True
        new &= self._unseen(arr)
        self._push(np.sort(arr[new]))
        return new

    def entries(self) -> list[bytes]:
        """Every entry, sorted (a fresh list: what a message that names them all needs)."""
        if not self._runs:
            return []
        merged = np.sort(np.concatenate(self._runs)) if len(self._runs) > 1 else self._runs[0]
        # "S" arrays drop trailing zero bytes when read back: pad to the width again.
        return [e.ljust(self.width, b"\x00") for e in merged.tolist()]

    @property
    def nbytes(self) -> int:
        return sum(int(r.nbytes) for r in self._runs)

    def _array(self, entries: Sequence[bytes]) -> npt.NDArray[np.bytes_]:
        # numpy would silently truncate or pad an entry of another width.
        for e in entries:
            if not isinstance(e, bytes) or len(e) != self.width:
                got = f"{len(e)} bytes" if isinstance(e, bytes) else type(e).__name__
                raise InvalidParameterError(f"entries must be {self.width}-byte strings, got {got}")
        return np.array(entries, dtype=self._dtype).reshape(-1)

    def _unseen(self, arr: npt.NDArray[np.bytes_]) -> npt.NDArray[np.bool_]:
        unseen = np.ones(arr.shape[0], dtype=bool)
        for run in self._runs:
            at = np.minimum(np.searchsorted(run, arr), run.shape[0] - 1)
            unseen &= run[at] != arr
        return unseen

    def _push(self, run: npt.NDArray[np.bytes_]) -> None:
        if run.shape[0] == 0:
            return
        self._runs.append(run)
        while len(self._runs) > 1 and self._runs[-2].shape[0] <= 2 * self._runs[-1].shape[0]:
            top = self._runs.pop()
            merged = np.concatenate([self._runs[-1], top])
            merged.sort()  # in place: a merge holds the two runs and one copy, not two
            self._runs[-1] = merged


__all__ = ["ReplayFilter"]
