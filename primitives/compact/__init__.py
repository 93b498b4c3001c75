"""Compact public encodings of the released tags and their counts (issue 32).

Between the phases S_syn broadcasts the released tags with their counts; every device downloads
the broadcast to learn whether its tag was released and its tag's count. This package holds that
broadcast as a swappable primitive (registry family ``broadcast``):

- :mod:`primitives.compact.fuse`: a 3-wise binary fuse filter (membership, false-positive rate
  2^-w for w-bit fingerprints) and the same construction storing values (a static function);
- :mod:`primitives.compact.broadcast`: the interface and two encodings, ``full-list`` (today's
  list) and ``fuse`` (filter + counts);
- :mod:`primitives.compact.ribbon`: ``ribbon``, a standard ribbon holding fingerprints and counts
  (about 1.03-1.06 slots per tag against the fuse's 1.19-1.3 at 10^3-10^4 tags); not imported
  here, as it compiles two numba kernels on first use.

Byte formats: ``docs/compact-broadcast.md``.
"""

from __future__ import annotations

from primitives.compact.broadcast import (
    BroadcastEncoding,
    FullListBroadcast,
    FuseBroadcast,
    LoadedBroadcast,
)
from primitives.compact.fuse import FuseFilter, FuseRetrieval

__all__ = [
    "BroadcastEncoding",
    "FullListBroadcast",
    "FuseBroadcast",
    "FuseFilter",
    "FuseRetrieval",
    "LoadedBroadcast",
]
