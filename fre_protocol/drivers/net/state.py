"""A service's crash-safe state: an SQLite file in WAL mode, written before anything is
acknowledged.

A server's protocol state is a function of the messages it accepted, in order, so what it keeps is
that log: one row per accepted request ``(request id, kind, body, response)``, committed (fsync,
``synchronous=FULL``) before the response leaves. A request id seen before is answered from the
log, never processed twice, which makes every retried request idempotent; after ``kill -9`` the
service rebuilds its role object by replaying the log. Small values (the round's keys, the
phase, the release) live in a key-value table beside it.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from primitives.errors import InvalidParameterError

SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS log (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    request_id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,
    body BLOB NOT NULL,
    response BLOB
);
CREATE TABLE IF NOT EXISTS view_rows (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    view TEXT NOT NULL, phase TEXT NOT NULL, sender TEXT NOT NULL, receiver TEXT NOT NULL,
    message_type TEXT NOT NULL, payload BLOB, size INTEGER NOT NULL, status TEXT NOT NULL
);
"""

#: ``(view, phase, sender, receiver, message_type, payload, status)``; an ``int`` payload is a
#: size-only record (what the parties' recorders produce).
ViewRow = tuple[str, str, str, str, str, "bytes | int", str]


@dataclass(frozen=True, slots=True)
class LogEntry:
    seq: int
    request_id: str
    kind: str
    body: bytes
    response: bytes | None


class ServiceState:
    """The durable state of one service (thread-safe: one connection behind a lock)."""

    def __init__(self, path: str | Path, *, schema: str = "") -> None:
        self.path = Path(path)
        if self.path.exists() and self.path.is_dir():
            raise InvalidParameterError(f"state path must be a file, got directory {str(self.path)!r}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self.conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        # FULL: a commit is on disk before the service answers (WAL's NORMAL could lose the
        # last transactions on power loss, after their requests were acknowledged).
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.executescript(SCHEMA + schema)

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic write (BEGIN IMMEDIATE … COMMIT, rolled back on any error)."""
        with self._lock:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self.conn
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")

    def query(self, sql: str, args: Sequence[object] = ()) -> list[tuple[object, ...]]:
        with self._lock:
            return list(self.conn.execute(sql, tuple(args)))

    # -- the request log ------------------------------------------------------------------------
    def logged(self, request_id: str) -> LogEntry | None:
        """The entry of a request already accepted (answer it from here), or None."""
        rows = self.query("SELECT seq, request_id, kind, body, response FROM log WHERE request_id = ?", (request_id,))
        return LogEntry(*rows[0]) if rows else None  # type: ignore[arg-type]

    def append(
        self, request_id: str, kind: str, body: bytes, response: bytes | None, rows: Sequence[ViewRow] = ()
    ) -> None:
        """Log one accepted request and what the party recorded in its view while applying it,
        in one transaction (the view never holds a request the log lacks, or the reverse)."""
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO log (request_id, kind, body, response) VALUES (?, ?, ?, ?)",
                (request_id, kind, body, response),
            )
            conn.executemany(
                "INSERT INTO view_rows (view, phase, sender, receiver, message_type, payload, size, status) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (v, ph, se, re, mt, None if isinstance(p, int) else p, p if isinstance(p, int) else len(p), st)
                    for v, ph, se, re, mt, p, st in rows
                ],
            )

    def view_rows(self) -> Iterator[ViewRow]:
        """The party's view as recorded, in order (size-only rows carry their size as payload)."""
        for view, phase, sender, receiver, mtype, payload, size, status in self.query(
            "SELECT view, phase, sender, receiver, message_type, payload, size, status FROM view_rows ORDER BY id"
        ):
            data: bytes | int = int(size) if payload is None else bytes(payload)  # type: ignore[call-overload, arg-type]
            yield (str(view), str(phase), str(sender), str(receiver), str(mtype), data, str(status))

    def entries(self) -> Iterator[LogEntry]:
        """Every accepted request in acceptance order (what a restart replays)."""
        for row in self.query("SELECT seq, request_id, kind, body, response FROM log ORDER BY seq"):
            yield LogEntry(*row)  # type: ignore[arg-type]

    def forget(
        self, kinds: Sequence[str], *, delete: Sequence[str] = (), put: Mapping[str, bytes] | None = None,
        view: bool = False,
    ) -> int:
        """Delete the log rows of ``kinds`` (e.g. the shares once the release is out) and give
        the space back; returns how many rows went. The small values in ``delete`` go and those
        in ``put`` are set in the same transaction, so a crash never leaves a log that lacks
        the rows without the values that say why (a replay would then miss them). ``view``
        also deletes the recorded view (once it has been written to the party's transcript),
        so that giving the space back does not rewrite it."""
        marks = ",".join("?" * len(kinds))
        with self.transaction() as conn:
            n = conn.execute(f"DELETE FROM log WHERE kind IN ({marks})", tuple(kinds)).rowcount  # noqa: S608
            if view:
                # The view is kept in the transcript, so its pages need not be overwritten with
                # zeros as the shares' are (this SQLite deletes securely by default).
                secure = conn.execute("PRAGMA secure_delete").fetchone()[0]
                conn.execute("PRAGMA secure_delete = OFF")
                try:
                    conn.execute("DELETE FROM view_rows")
                finally:
                    conn.execute(f"PRAGMA secure_delete = {int(secure)}")
            conn.executemany("DELETE FROM kv WHERE key = ?", [(k,) for k in delete])
            conn.executemany("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", list((put or {}).items()))
        self.compact()
        return int(n)

    def compact(self) -> None:
        """Give deleted or overwritten rows' space back: the WAL is checkpointed into the file
        and truncated, then the file is rebuilt (VACUUM), so old versions of a row survive in
        neither the file's free pages nor the WAL."""
        with self._lock:
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self.conn.execute("VACUUM")

    # -- small values ---------------------------------------------------------------------------
    def get(self, key: str) -> bytes | None:
        rows = self.query("SELECT value FROM kv WHERE key = ?", (key,))
        return bytes(rows[0][0]) if rows else None  # type: ignore[arg-type]

    def put(self, key: str, value: bytes) -> None:
        with self.transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", (key, value))

    def delete(self, keys: Sequence[str]) -> None:
        with self.transaction() as conn:
            conn.executemany("DELETE FROM kv WHERE key = ?", [(k,) for k in keys])

    def close(self) -> None:
        with self._lock:
            self.conn.close()





class GroupCommit:
    """Many small writes, one fsync: callers hand in functions that run inside one shared
    transaction on a writer thread and wait for its commit (group commit). Each function returns
    its result or an exception *instance* (its caller's refusal, which does not abort the others);
    an exception raised by a function or by SQLite aborts the whole group, and every caller of it
    gets that error."""

    def __init__(self, state: ServiceState, *, max_group: int = 4096) -> None:
        self._state = state
        # SimpleQueue: no condition variable to wake per item, unlike queue.Queue.
        self._queue: queue.SimpleQueue[tuple[Any, Any]] = queue.SimpleQueue()
        self._max = max_group
        self._thread = threading.Thread(target=self._run, name="group-commit", daemon=True)
        self._thread.start()

    def submit(self, fn: Any) -> Future[Any]:
        """Run ``fn(conn)`` in the next group; a ``concurrent.futures.Future`` of its result."""
        future: Future[Any] = Future()
        self._queue.put((fn, future))
        return future

    def submit_async(self, fn: Any) -> asyncio.Future[Any]:
        """:meth:`submit` for a caller on an event loop: an ``asyncio.Future``, settled together
        with the rest of its group's by one call into the loop (not one wake-up per caller)."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._queue.put((fn, (loop, future)))
        return future

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first[0] is None:
                return
            group = [first]
            while len(group) < self._max:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item[0] is None:
                    self._queue.put(item)
                    break
                group.append(item)
            try:
                with self._state.transaction() as conn:
                    outcomes: list[Any] = [fn(conn) for fn, _ in group]
            except BaseException as exc:  # noqa: BLE001 - handed to every waiting caller
                outcomes = [exc] * len(group)
            on_loops: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any]]] = {}
            for (_, sink), outcome in zip(group, outcomes, strict=True):
                if isinstance(sink, Future):
                    _settle(sink, outcome)
                else:
                    loop, future = sink
                    on_loops.setdefault(loop, []).append((future, outcome))
            for loop, settled in on_loops.items():
                try:
                    loop.call_soon_threadsafe(_settle_all, settled)
                except RuntimeError:  # that loop has closed: nobody waits there any more
                    pass

    def close(self) -> None:
        self._queue.put((None, None))
        self._thread.join(timeout=10)


def _settle(future: Future[Any] | asyncio.Future[Any], outcome: Any) -> None:
    """Give ``future`` its result, or its error when ``outcome`` is an exception instance."""
    if future.done():  # an asyncio caller that gave up (cancelled)
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


def _settle_all(settled: list[tuple[asyncio.Future[Any], Any]]) -> None:
    for future, outcome in settled:
        _settle(future, outcome)


__all__ = ["GroupCommit", "LogEntry", "ServiceState", "ViewRow"]
