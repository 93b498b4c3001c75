"""What every party shares: transcript recording, cost metering, chunked parallel work.

Parties record what they *receive* (design §6.7): each row is ``(view, phase, sender, receiver,
message_type, payload, status)`` and goes to :meth:`transcripts.TranscriptStore.record_many` in
batches. Roles are written, never user identities.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fre_protocol.messages import Role

# Channel and Shuffler are the primitives' interfaces, re-exported here for the parties.
from primitives.channel import Channel
from primitives.errors import InvalidParameterError
from primitives.shuffle import Shuffler
from transcripts import ACCEPTED, TranscriptStore, rejected_status
from transcripts.store import Row

T = TypeVar("T")
R = TypeVar("R")

# A Row is ``(view, phase, sender, receiver, message_type, payload, status)``; a payload given as
# an ``int`` is a size-only record (the bytes are a secret outside seeded mode, design §6.7).

PHASE1 = "phase1"
PHASE1_SUBMIT = "phase1_submit"
BROADCAST = "broadcast"
PHASE2 = "phase2"
AGGREGATION = "aggregation"

# What happens to a released tag whose phase-2 contributors fall below the release floor: its
# aggregate is never sent (``withhold``), or S_tag tops up the missing users' noise (``topup``).
WITHHOLD = "withhold"
TOPUP = "topup"
DROPOUT_POLICIES = (WITHHOLD, TOPUP)


def check_dropout_policy(value: object) -> str:
    """The dropout policy: ``"withhold"`` or ``"topup"``."""
    if value not in DROPOUT_POLICIES:
        raise InvalidParameterError(f"dropout_policy must be one of {list(DROPOUT_POLICIES)}, got {value!r}")
    return str(value)


def status_of(error: BaseException | None) -> str:
    """``"accepted"`` or ``"rejected:<ErrorType>"`` (design §6 robustness: typed, recorded)."""
    return ACCEPTED if error is None else rejected_status(error)


def size_only(row: Row) -> Row:
    """``row`` with its payload replaced by the payload's size."""
    payload = row[5]
    return row if isinstance(payload, int) else (*row[:5], len(payload), row[6])


class Recorder:
    """Buffers rows for a :class:`TranscriptStore`; without a store it only counts them.

    Thread-safe (the store serialises writers). ``payloads=False``
    records every message size-only (what was sent, by whom, to whom and how large, not its
    bytes): a paper-scale run's full transcript would take ~10 kB a user on disk.
    """

    def __init__(self, store: TranscriptStore | None = None, *, flush_every: int = 20_000, payloads: bool = True) -> None:
        self.store = store
        self.payloads = payloads
        self._lock = threading.Lock()
        self._pending: list[Row] = []
        self._flush_every = flush_every
        self.rows_recorded = 0
        self.bytes_recorded = 0

    def add(self, rows: Iterable[Row]) -> None:
        batch = list(rows)
        if not batch:
            return
        with self._lock:
            self.rows_recorded += len(batch)
            self.bytes_recorded += sum(r[5] if isinstance(r[5], int) else len(r[5]) for r in batch)
            if self.store is None:
                return
            self._pending.extend(batch if self.payloads else map(size_only, batch))
            if len(self._pending) >= self._flush_every:
                pending, self._pending = self._pending, []
            else:
                return
        self._write(pending)

    def _write(self, rows: list[Row]) -> None:
        assert self.store is not None
        self.store.record_many(rows)  # in order; int payloads are size-only entries

    def flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        if self.store is not None:
            if pending:
                self._write(pending)
            self.store.flush()


class HeldRows(Recorder):
    """A recorder that holds a party's rows until its driver takes them (:meth:`take`): a party
    that runs elsewhere (a Dask actor, a worker's task) ships them to the run's store, a service
    logs them with the request that made them (nothing recorded twice or lost in a crash)."""

    def __init__(self, *, payloads: bool = True) -> None:
        super().__init__(None, payloads=payloads)
        self._rows: list[Row] = []

    def add(self, rows: Iterable[Row]) -> None:
        # Size-only transcripts drop the bytes where they are recorded, not after shipping them.
        batch = list(rows) if self.payloads else [size_only(r) for r in rows]
        with self._lock:
            self._rows.extend(batch)

    def take(self) -> list[Row]:
        with self._lock:
            out, self._rows = self._rows, []
        return out

    def flush(self) -> None:
        """Rows leave when the driver takes them, not on flush."""


@dataclass
class Meter:
    """Accumulates time and counts per named operation (the cost table's raw material).

    ``seconds`` are summed over worker threads, i.e. core-seconds; divide by ``count`` for a
    per-operation figure. ``wall`` holds wall-clock time of whole phases.
    """

    seconds: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    wall: dict[str, float] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, name: str, seconds: float, count: int = 1) -> None:
        with self._lock:
            self.seconds[name] = self.seconds.get(name, 0.0) + seconds
            self.counts[name] = self.counts.get(name, 0) + count

    def add_bytes(self, name: str, n: int) -> None:
        with self._lock:
            self.bytes[name] = self.bytes.get(name, 0) + n

    @contextmanager
    def timed(self, name: str, count: int = 1) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start, count)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            with self._lock:
                self.wall[name] = self.wall.get(name, 0.0) + time.perf_counter() - start

    def add_wall(self, name: str, seconds: float) -> None:
        with self._lock:
            self.wall[name] = self.wall.get(name, 0.0) + seconds

    def per_op(self, name: str) -> float:
        n = self.counts.get(name, 0)
        return self.seconds.get(name, 0.0) / n if n else float("nan")

    def to_dict(self) -> dict[str, Any]:
        return {
            "seconds": dict(self.seconds),
            "counts": dict(self.counts),
            "wall": dict(self.wall),
            "bytes": dict(self.bytes),
        }


class Workers:
    """A small thread pool for chunked work. The heavy calls (libsodium scalar multiplications,
    sealing, AES, numpy) release the GIL, so two threads use two cores."""

    def __init__(self, workers: int = 2, *, progress: bool = False) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise InvalidParameterError(f"workers must be an integer >= 1, got {workers!r}")
        self.workers = workers
        self.progress = progress
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()  # map may be called from several threads

    def map(self, fn: Callable[[T], R], items: Sequence[T], *, desc: str | None = None) -> list[R]:
        """``[fn(item) for item in items]``, in order, on up to ``workers`` threads; with
        ``progress`` and a ``desc``, a tqdm bar counts finished items."""
        bar: Any = None
        if self.progress and desc is not None and len(items) > 1:
            from tqdm import tqdm

            bar = tqdm(total=len(items), desc=desc, unit="chunk", leave=False)
        try:
            if self.workers == 1 or len(items) < 2:
                results = []
                for item in items:
                    results.append(fn(item))
                    if bar is not None:
                        bar.update(1)
                return results
            with self._pool_lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="fre-party")
                pool = self._pool
            out = []
            for result in pool.map(fn, items):

                out.append(result)
                if bar is not None:
                    bar.update(1)
            return out
        finally:
            if bar is not None:
                bar.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Runtime:
    """What a driver lends the roles of one run: thread pools (the servers' and the devices'),
    the cost meter and the transcript recorder, and what sits on the network at the proxy (an
    adversary, for robustness tests) or beside S_syn (a contribution validator)."""

    meter: Meter
    pool: Workers
    user_pool: Workers
    recorder: Recorder
    adversary: Any = None
    validator: Any = None


def chunks(n: int, size: int) -> list[range]:
    """Fixed-size index ranges: chunk boundaries never depend on the worker count, so seeded
    randomness drawn per chunk is reproducible whatever ``workers`` is."""
    return [range(lo, min(n, lo + size)) for lo in range(0, n, size)]


def role_label(role: Role | str) -> str:
    return role.label if isinstance(role, Role) else role


__all__ = [
    "AGGREGATION",
    "BROADCAST",
    "Channel",
    "DROPOUT_POLICIES",
    "HeldRows",
    "PHASE1",
    "PHASE1_SUBMIT",
    "PHASE2",
    "Meter",
    "Recorder",
    "Row",
    "Runtime",
    "Shuffler",
    "TOPUP",
    "WITHHOLD",
    "Workers",
    "check_dropout_policy",
    "chunks",
    "role_label",
    "size_only",
    "status_of",
]
