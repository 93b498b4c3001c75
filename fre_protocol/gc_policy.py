"""The cyclic garbage collector's policy for processes that play a round.

A round allocates millions of short-lived containers (messages, tuples, per-user lists) and makes
almost no reference cycles, which reference counting frees anyway. With CPython's default first
threshold (700 allocations) the collector runs ~7,500 times per 100,000 users in the driver and
~1,300 times in each users' worker, ~5% of all CPU, to find next to nothing. Raising the first
threshold to 50,000 keeps collection for the cycles that do occur (~100 runs per 100,000 users) at a
memory cost of at most that many unreachable containers between runs.

Only the command line and this library's own worker processes call :func:`relax_for_rounds`: a
program that imports the library keeps its own policy."""

from __future__ import annotations

import gc

#: (generation 0, generation 1, generation 2) thresholds of :func:`gc.set_threshold`.
ROUND_THRESHOLDS = (50_000, 20, 20)


def relax_for_rounds() -> None:
    """Sets this process's collector thresholds to :data:`ROUND_THRESHOLDS`."""
    gc.set_threshold(*ROUND_THRESHOLDS)


__all__ = ["ROUND_THRESHOLDS", "relax_for_rounds"]
