"""A crash-safe SQLite store for one run's transcript (design §6.7).

One file per run, laid out as :mod:`transcripts.schema` says (tables, version, the file's marks
and its states); queries select entries with one :class:`EntryFilter`.

Crash safety [decision]. The store runs in WAL mode and commits entries in batches: every
transaction inserts a contiguous run of ``seq`` numbers, and transactions commit in ``seq`` order,
so after the process dies at any instant the file holds exactly a prefix ``0..n-1`` of the entries
(a whole number of committed batches plus nothing of the batch in flight). ``synchronous=FULL``
(the default) additionally fsyncs the WAL at every commit, so a committed batch also survives power
loss or an OS crash; ``NORMAL`` keeps atomicity and consistency under power loss but may lose the
last committed batches, and is offered for throwaway runs. Batching amortises the fsync: one per
``batch_size`` entries. Entries still in the in-memory buffer when the process dies are lost,
which is exactly the "not in" half of "fully in or not".

On :meth:`close` the store writes ``state = complete``, builds the summary index, checkpoints and
switches to rollback-journal mode, so a finished transcript is one self-contained file that can be
read from read-only media.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import warnings
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from primitives.errors import (
    DecodeError,
    FreError,
    InvalidInputError,
    InvalidParameterError,
    ProtocolStateError,
)
from transcripts.entry import (
    ACCEPTED,
    REJECTED_PREFIX,
    TranscriptEntry,
    check_identifier,
    check_status,
)
from transcripts.header import TranscriptHeader, json_safe, utc_now
from transcripts.jsonl import JsonlArtifact, JsonlHead, export_jsonl, iter_jsonl
from transcripts.schema import (
    APPLICATION_ID,
    DDL,
    ENTRY_COLUMNS,
    INSERT_ENTRY,
    SCHEMA_VERSION,
    SQLITE_MAGIC,
    STATE_ABORTED_PREFIX,
    STATE_COMPLETE,
    STATE_OPEN,
    SUMMARY_INDEX,
    TABLES,
)
from transcripts.schema import (
    ArtifactInfo as ArtifactInfo,
)

DEFAULT_BATCH_SIZE = 4096
SECRET_NAME_PREFIXES = ("secret", "secrets")
_SYNCHRONOUS = ("NORMAL", "FULL")

Filter = str | Iterable[str] | None
#: ``payload`` an ``int`` is a size-only record of that many bytes.
Row = tuple[str, str, str, str, str, bytes | int, str]


def _sidecars(path: Path) -> list[Path]:
    return [path.with_name(path.name + suffix) for suffix in ("-wal", "-shm", "-journal")]


def _check_artifact_name(name: object) -> str:
    if not isinstance(name, str) or not name or len(name) > 200:
        raise InvalidParameterError(
            f"artifact name must be a non-empty string (<= 200), got {name!r}"
        )
    parts = name.split("/")
    if any(not part or not _identifier_like(part) for part in parts):
        raise InvalidParameterError(
            "artifact name must be '/'-separated identifiers (a letter or digit, then letters, "
            "digits, '_.:-'), "
            f"got {name!r}"
        )
    return name


def _identifier_like(part: str) -> bool:
    # Each component starts with a letter or digit, so "." and ".." cannot appear.
    return (
        part[:1].isascii()
        and part[:1].isalnum()
        and all(ch.isascii() and (ch.isalnum() or ch in "_.:-") for ch in part)
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class EntryFilter:
    """Which entries a query selects. Each field is a value or values (any of them), None for
    any; ``status="rejected"`` selects every ``rejected:<ErrorType>``."""

    view: Filter = None
    phase: Filter = None
    message_type: Filter = None
    status: Filter = None
    sender: Filter = None
    receiver: Filter = None

    def where(self) -> tuple[list[str], list[Any]]:
        """SQL conditions (to be joined with AND) and their arguments."""
        clauses: list[str] = []
        args: list[Any] = []
        for column in ("view", "phase", "message_type", "status", "sender", "receiver"):
            self._condition(column, getattr(self, column), clauses, args)
        return clauses, args

    @staticmethod
    def _condition(column: str, value: Filter, clauses: list[str], args: list[Any]) -> None:
        if value is None:
            return
        if isinstance(value, str):
            values = [value]
        else:
            values = list(value)
            if not all(isinstance(v, str) for v in values):
                raise InvalidParameterError(
                    f"{column} filter must be a string or strings, got {values!r}"
                )
            if not values:
                clauses.append("0")
                return
        if column == "status" and "rejected" in values:
            # "rejected" selects every rejection whatever its error type.
            values = [v for v in values if v != "rejected"]
            alternatives = [f"substr(status, 1, {len(REJECTED_PREFIX)}) = ?"]
            args.append(REJECTED_PREFIX)
            if values:
                alternatives.append(f"status IN ({', '.join('?' * len(values))})")
                args.extend(values)
            clauses.append("(" + " OR ".join(alternatives) + ")")
            return
        if len(values) == 1:
            clauses.append(f"{column} = ?")
        else:
            clauses.append(f"{column} IN ({', '.join('?' * len(values))})")
        args.extend(values)


def _entry(row: tuple[Any, ...]) -> TranscriptEntry:
    seq, view, phase, sender, receiver, message_type, status, size, payload = row
    return TranscriptEntry(
        seq=seq,
        view=view,
        phase=phase,
        sender=sender,
        receiver=receiver,
        message_type=message_type,
        status=status,
        size=size,
        payload=b"" if payload is None else bytes(payload),
        payload_recorded=payload is not None,
    )


def _db_row(
    seq: int, view: str, phase: str, sender: str, receiver: str, message_type: str, status: str,
    size: int, payload: bytes | None,
) -> tuple[Any, ...]:
    """The one shape of an ``entries`` row, in the column order of the INSERT."""
    return (seq, view, phase, sender, receiver, message_type, status, size, payload)


def _as_payload(payload: object) -> bytes:
    if isinstance(payload, bytes):
        return bytes(payload)
    if isinstance(payload, bytearray | memoryview):
        return bytes(payload)
    raise InvalidParameterError(f"payload must be bytes, got {type(payload).__name__}")


def _decode_error(path: Path, reason: str) -> DecodeError:
    return DecodeError(f"{str(path)!r} is not a readable fre-e2t transcript: {reason}")


class TranscriptStore:
    """One run's transcript in one SQLite file. Build with :meth:`create` or :meth:`open`.

    Writing is buffered: :meth:`record` and :meth:`record_many` append to an in-memory batch that
    is committed in one transaction when it reaches ``batch_size`` entries, on :meth:`flush`, on
    :meth:`close`, before any query, and on leaving a ``with`` block. ``record``/``record_many``
    may be called from several threads of one process (a lock serialises them); separate
    processes must hand their messages to the one writer.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        *,
        path: Path,
        header: TranscriptHeader,
        writable: bool,
        batch_size: int,
    ) -> None:
        # Private: use create() or open(), which validate the file first.
        self._conn: sqlite3.Connection | None = conn
        self._path = path
        self._header = header
        self._writable = writable
        self._batch_size = batch_size
        self._lock = threading.RLock()
        self._buffer: list[tuple[Any, ...]] = []
        self._names_ok: set[str] = set()
        self._statuses_ok: set[str] = {ACCEPTED}
        row = conn.execute("SELECT max(seq) FROM entries").fetchone()
        self._next_seq = 0 if row[0] is None else int(row[0]) + 1

    # ------------------------------------------------------------------ construction

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        header: TranscriptHeader,
        *,
        overwrite: bool = False,
        batch_size: int = DEFAULT_BATCH_SIZE,
        synchronous: str = "FULL",
    ) -> TranscriptStore:
        """Create a new transcript at ``path`` with ``header``; refuses an existing file.

        ``overwrite=True`` deletes an existing file (and its WAL side files) first.
        """
        if not isinstance(header, TranscriptHeader):
            raise InvalidParameterError(
                f"header must be a TranscriptHeader, got {type(header).__name__}"
            )
        batch_size = cls._check_options(batch_size, synchronous)
        target = Path(path)
        existing = [p for p in [target, *_sidecars(target)] if p.exists()]
        if existing and not overwrite:
            raise InvalidParameterError(
                f"transcript {str(target)!r} already exists; pass overwrite=True to replace it"
            )
        if target.is_dir():
            raise InvalidParameterError(
                f"transcript path must be a file, got directory {str(target)!r}"
            )
        for p in existing:
            p.unlink()
        target.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(target, isolation_level=None, check_same_thread=False)
        try:
            cls._configure(conn, synchronous)
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            for statement in DDL:
                conn.execute(statement)
            conn.executemany(
                "INSERT INTO meta (key, value) VALUES (?, ?)",
                [
                    ("schema_version", str(SCHEMA_VERSION)),
                    ("header", json.dumps(header.to_dict(), sort_keys=True, allow_nan=False)),
                    ("state", STATE_OPEN),
                ],
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.close()
            for p in [target, *_sidecars(target)]:
                p.unlink(missing_ok=True)
            raise
        return cls(conn, path=target, header=header, writable=True, batch_size=batch_size)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        append: bool = False,
        batch_size: int = DEFAULT_BATCH_SIZE,
        synchronous: str = "FULL",
    ) -> TranscriptStore:
        """Open an existing transcript, read-only unless ``append=True``.

        Raises :class:`DecodeError` when the file is not a fre-e2t transcript, is corrupt, or was
        written by a newer schema than this version reads.
        """
        batch_size = cls._check_options(batch_size, synchronous)
        target = Path(path)
        if not target.is_file():
            raise InvalidInputError(f"transcript {str(target)!r} does not exist or is not a file")
        with target.open("rb") as fh:
            magic = fh.read(len(SQLITE_MAGIC))
        if magic != SQLITE_MAGIC:
            raise _decode_error(target, "not an SQLite database")
        uri = target.resolve().as_uri() + ("?mode=rw" if append else "?mode=ro")
        try:
            conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise _decode_error(target, f"SQLite cannot open it ({exc})") from None
        try:
            header = cls._read_header(conn, target)
            if append:
                cls._configure(conn, synchronous)
                conn.execute("UPDATE meta SET value = ? WHERE key = 'state'", (STATE_OPEN,))
            else:
                conn.execute("PRAGMA query_only = ON")
            store = cls(conn, path=target, header=header, writable=append, batch_size=batch_size)
        except sqlite3.Error as exc:
            conn.close()
            raise _decode_error(target, f"corrupt database ({exc})") from None
        except BaseException:
            conn.close()
            raise
        return store

    @staticmethod
    def _check_options(batch_size: int, synchronous: str) -> int:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidParameterError(f"batch_size must be an int >= 1, got {batch_size!r}")
        if synchronous not in _SYNCHRONOUS:
            raise InvalidParameterError(
                f"synchronous must be one of {list(_SYNCHRONOUS)}, got {synchronous!r}"
            )
        return batch_size

    @staticmethod
    def _configure(conn: sqlite3.Connection, synchronous: str) -> None:
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise InvalidInputError(
                f"the file system does not support SQLite WAL mode (got {mode!r})"
            )
        conn.execute(f"PRAGMA synchronous = {synchronous}")

    @staticmethod
    def _read_header(conn: sqlite3.Connection, path: Path) -> TranscriptHeader:
        try:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = {
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
        except sqlite3.Error as exc:
            raise _decode_error(path, f"corrupt database ({exc})") from None
        if app_id != APPLICATION_ID:
            raise _decode_error(
                path, f"SQLite application_id is {app_id:#x}, expected {APPLICATION_ID:#x}"
            )
        if version > SCHEMA_VERSION:
            raise _decode_error(
                path,
                f"written with transcript schema {version}, this fre-e2t reads schema "
                f"<= {SCHEMA_VERSION}; upgrade fre-e2t",
            )
        if version < 1 or not TABLES <= tables:
            raise _decode_error(
                path, f"schema {version} with tables {sorted(tables)}, expected {sorted(TABLES)}"
            )
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        if meta.get("schema_version") != str(version) or "header" not in meta:
            raise _decode_error(path, "meta table lacks a matching schema_version or the header")
        try:
            header = TranscriptHeader.from_dict(json.loads(meta["header"]))
        except (ValueError, InvalidInputError) as exc:
            raise _decode_error(path, f"bad header ({exc})") from None
        if header.schema_version != version:
            raise _decode_error(
                path, f"header schema_version {header.schema_version} != file schema {version}"
            )
        return header

    # ------------------------------------------------------------------ properties

    @property
    def path(self) -> Path:
        return self._path

    @property
    def header(self) -> TranscriptHeader:
        return self._header

    @property
    def writable(self) -> bool:
        return self._writable and self._conn is not None

    @property
    def closed(self) -> bool:
        return self._conn is None

    @property
    def batch_size(self) -> int:
        return self._batch_size

    @property
    def next_seq(self) -> int:
        """The ``seq`` the next recorded entry will get (buffered entries included)."""
        return self._next_seq

    @property
    def state(self) -> str:
        """``open`` (being written, or the writer died), ``complete`` or ``aborted:<Error>``."""
        with self._lock:
            row = (
                self._connection().execute("SELECT value FROM meta WHERE key = 'state'").fetchone()
            )
        return str(row[0]) if row else STATE_OPEN

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise ProtocolStateError(f"transcript store {str(self._path)!r} is closed")
        return self._conn

    def _writer(self) -> sqlite3.Connection:
        conn = self._connection()
        if not self._writable:
            raise ProtocolStateError(
                f"transcript {str(self._path)!r} is open read-only; use "
                "TranscriptStore.open(path, append=True) to add to it"
            )
        return conn

    # ------------------------------------------------------------------ writing

    def record(
        self,
        *,
        view: str,
        phase: str,
        sender: str,
        receiver: str,
        message_type: str,
        payload: bytes | None,
        status: str = ACCEPTED,
        size: int | None = None,
    ) -> int:
        """Buffer one entry and return its ``seq``.

        ``payload=None`` with ``size`` records a size-only entry (the bytes are not kept);
        otherwise ``size`` may be omitted and must equal ``len(payload)`` if given.
        """
        self._check_names(view, phase, sender, receiver, message_type, status)
        stored: bytes | None
        if payload is None:
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                raise InvalidParameterError(
                    f"a size-only record (payload=None) needs size as an int >= 0, got {size!r}"
                )
            stored = None
        else:
            stored = _as_payload(payload)
            if size is not None and size != len(stored):
                raise InvalidParameterError(
                    f"size must equal len(payload) = {len(stored)}, got {size!r}"
                )
            size = len(stored)
        with self._lock:
            self._writer()
            seq = self._next_seq
            self._buffer.append(
                _db_row(seq, view, phase, sender, receiver, message_type, status, size, stored)
            )
            self._next_seq = seq + 1
            if len(self._buffer) >= self._batch_size:
                self._flush_locked()
        return seq

    def _check_names(
        self, view: str, phase: str, sender: str, receiver: str, message_type: str, status: str
    ) -> None:
        """Identifiers and status are checked once per distinct value (then remembered)."""
        for label, name in (
            ("view", view),
            ("phase", phase),
            ("sender", sender),
            ("receiver", receiver),
            ("message_type", message_type),
        ):
            if name not in self._names_ok:
                self._names_ok.add(check_identifier(label, name))
        if status not in self._statuses_ok:
            self._statuses_ok.add(check_status(status))

    def record_many(self, rows: Iterable[Row]) -> range:
        """Buffer many ``(view, phase, sender, receiver, message_type, payload, status)`` rows;
        a ``payload`` that is an ``int`` records a size-only entry of that many bytes.

        Rows get consecutive ``seq`` numbers in iteration order; the returned range lists them.
        The call is all-or-nothing: an invalid row raises before any row of the call is buffered.
        """
        names_ok = self._names_ok
        statuses_ok = self._statuses_ok
        with self._lock:
            self._writer()
            first = seq = self._next_seq
            batch: list[tuple[Any, ...]] = []
            append = batch.append
            for row in rows:
                try:
                    view, phase, sender, receiver, message_type, payload, status = row
                except (TypeError, ValueError):
                    raise InvalidParameterError(
                        "record_many rows must be 7-tuples (view, phase, sender, receiver, "
                        f"message_type, payload, status), got {row!r:.120}"
                    ) from None
                if (
                    view not in names_ok
                    or phase not in names_ok
                    or sender not in names_ok
                    or receiver not in names_ok
                    or message_type not in names_ok
                    or status not in statuses_ok
                ):
                    self._check_names(view, phase, sender, receiver, message_type, status)
                if type(payload) is int:  # size-only
                    if payload < 0:
                        raise InvalidParameterError(f"a size-only row needs a size >= 0, got {payload}")
                    append(_db_row(seq, view, phase, sender, receiver, message_type, status, payload, None))
                    seq += 1
                    continue
                if type(payload) is not bytes:
                    payload = _as_payload(payload)
                append(_db_row(seq, view, phase, sender, receiver, message_type, status, len(payload), payload))
                seq += 1
            self._buffer.extend(batch)
            self._next_seq = seq
            if len(self._buffer) >= self._batch_size:
                self._flush_locked()
        return range(first, seq)

    def append_entries(self, entries: Iterable[TranscriptEntry]) -> int:
        """Append already-numbered entries (copying or importing a transcript); returns the count.

        ``seq`` must strictly increase and start at or after :attr:`next_seq`; gaps are kept.
        Entries are committed batch by batch as they stream in (memory stays bounded), so an
        invalid entry stops the copy after the entries before it.
        """
        count = 0
        with self._lock:
            self._writer()
            for entry in entries:
                if not isinstance(entry, TranscriptEntry):
                    raise InvalidParameterError(
                        f"append_entries takes TranscriptEntry objects, got {type(entry).__name__}"
                    )
                if entry.seq < self._next_seq:
                    raise InvalidParameterError(
                        f"entry seq must increase and be >= {self._next_seq}, got {entry.seq}"
                    )
                self._buffer.append(
                    _db_row(
                        entry.seq, entry.view, entry.phase, entry.sender, entry.receiver,
                        entry.message_type, entry.status, entry.size,
                        entry.payload if entry.payload_recorded else None,
                    )
                )
                self._next_seq = entry.seq + 1
                count += 1
                if len(self._buffer) >= self._batch_size:
                    self._flush_locked()
        return count

    def flush(self) -> None:
        """Commit every buffered entry in one transaction (atomic: all of them or none)."""
        with self._lock:
            self._writer()
            self._flush_locked()

    def _flush_locked(self) -> None:
        if not self._buffer:
            return
        conn = self._writer()
        batch = self._buffer
        self._buffer = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(INSERT_ENTRY, batch)
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            # Keep the entries so a retry (or the final close) can still commit them.
            self._buffer = batch + self._buffer
            if isinstance(exc, sqlite3.IntegrityError):
                raise ProtocolStateError(
                    f"transcript {str(self._path)!r} rejected a batch ({exc}); is another "
                    "process writing to it?"
                ) from exc
            raise

    def _set_meta(self, key: str, value: str) -> None:
        self._writer().execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    # ------------------------------------------------------------------ artifacts

    def put_artifact(
        self,
        name: str,
        data: bytes | Mapping[str, Any] | list[Any],
        *,
        secret: bool = False,
        replace: bool = False,
    ) -> None:
        """Store ``data`` (bytes, or a JSON-safe dict/list) under ``name``.

        ``secret=True`` marks keys, blinds, seeds or unmasked shares; the store refuses them
        (:class:`ProtocolStateError`) unless the header's ``rng_mode`` is ``"seeded"`` (design §6.7).
        Names whose first component is ``secret``/``secrets`` must be marked ``secret=True``.
        An existing name is refused unless ``replace=True``.
        """
        _check_artifact_name(name)
        if not isinstance(secret, bool):
            raise InvalidParameterError(f"secret must be a bool, got {secret!r}")
        if not secret and name.split("/")[0].lower() in SECRET_NAME_PREFIXES:
            raise InvalidParameterError(
                f"artifact {name!r} is named as a secret; pass secret=True (it is then stored "
                "only in seeded test mode)"
            )
        if secret and not self._header.seeded:
            raise ProtocolStateError(
                f"refusing to store secret artifact {name!r}: the transcript's rng_mode is "
                f"{self._header.rng_mode!r}; secrets are recorded only in seeded test mode"
            )
        kind: str
        blob: bytes
        if isinstance(data, bytes | bytearray | memoryview):
            kind, blob = "bytes", bytes(data)
        elif isinstance(data, Mapping | list | tuple):
            canonical = json_safe(data, where=f"artifact {name!r}")
            kind = "json"
            blob = json.dumps(
                canonical, sort_keys=True, separators=(",", ":"), allow_nan=False
            ).encode()
        else:
            raise InvalidParameterError(
                f"artifact data must be bytes or a JSON-safe dict/list, got {type(data).__name__}"
            )
        with self._lock:
            conn = self._writer()
            # Entries first: an artifact recorded after messages is never visible without them.
            self._flush_locked()
            exists = conn.execute("SELECT 1 FROM artifacts WHERE name = ?", (name,)).fetchone()
            if exists and not replace:
                raise ProtocolStateError(
                    f"artifact {name!r} already recorded; pass replace=True to overwrite it"
                )
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(
                    "INSERT OR REPLACE INTO artifacts (name, kind, secret, data) VALUES (?, ?, ?, ?)",
                    (name, kind, int(secret), blob),
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def get_artifact(self, name: str) -> Any:
        """The artifact's data: ``bytes`` for bytes artifacts, the decoded JSON value otherwise."""
        with self._lock:
            self._flush_if_writable()
            row = (
                self._connection()
                .execute("SELECT kind, data FROM artifacts WHERE name = ?", (name,))
                .fetchone()
            )
        if row is None:
            known = [info.name for info in self.artifacts()]
            raise InvalidParameterError(
                f"artifact {name!r} is not in this transcript; it has {known}"
            )
        kind, blob = row
        if kind == "bytes":
            return bytes(blob)
        try:
            return json.loads(bytes(blob).decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise DecodeError(f"artifact {name!r} holds invalid JSON ({exc})") from None

    def has_artifact(self, name: str) -> bool:
        with self._lock:
            row = (
                self._connection()
                .execute("SELECT 1 FROM artifacts WHERE name = ?", (name,))
                .fetchone()
            )
        return row is not None

    def artifacts(self) -> list[ArtifactInfo]:
        """Every artifact's name, kind, secret flag and size, sorted by name."""
        with self._lock:
            rows = (
                self._connection()
                .execute("SELECT name, kind, secret, length(data) FROM artifacts ORDER BY name")
                .fetchall()
            )
        return [ArtifactInfo(name=n, kind=k, secret=bool(s), size=int(z)) for n, k, s, z in rows]

    # ------------------------------------------------------------------ reading

    def _flush_if_writable(self) -> None:
        if self._writable and self._conn is not None:
            self._flush_locked()

    def entries(
        self,
        *,
        view: Filter = None,
        phase: Filter = None,
        message_type: Filter = None,
        status: Filter = None,
        sender: Filter = None,
        receiver: Filter = None,
        page: int = 4096,
    ) -> Iterator[TranscriptEntry]:
        """Entries matching every given filter, in ``seq`` order.

        A filter is a value or an iterable of values (any of them); ``status="rejected"`` selects
        every ``rejected:<ErrorType>``. Reads in pages keyed on ``seq``, so iterating while
        another thread records is safe and memory stays bounded.
        """
        clauses, args = EntryFilter(
            view=view,
            phase=phase,
            message_type=message_type,
            status=status,
            sender=sender,
            receiver=receiver,
        ).where()
        sql = (
            f"SELECT {ENTRY_COLUMNS} FROM entries WHERE "
            + " AND ".join(["seq > ?", *clauses])
            + " ORDER BY seq LIMIT ?"
        )
        last = -1
        while True:
            with self._lock:
                self._flush_if_writable()
                rows = self._connection().execute(sql, [last, *args, page]).fetchall()
            for row in rows:
                yield _entry(row)
            if len(rows) < page:
                return
            last = rows[-1][0]

    def __iter__(self) -> Iterator[TranscriptEntry]:
        return self.entries()

    def iter_payloads(
        self,
        *,
        view: Filter = None,
        phase: Filter = None,
        message_type: Filter = None,
        status: Filter = None,
        page: int = 8192,
    ) -> Iterator[tuple[int, str, str, int, bytes | None]]:
        """Fast scan for audits: ``(seq, view, message_type, size, payload or None)`` in seq order.

        Skips building :class:`TranscriptEntry` objects (and their validation), which dominates
        the cost of a full scan over millions of small messages.
        """
        clauses, args = EntryFilter(
            view=view, phase=phase, message_type=message_type, status=status
        ).where()
        sql = (
            "SELECT seq, view, message_type, size, payload FROM entries WHERE "
            + " AND ".join(["seq > ?", *clauses])
            + " ORDER BY seq LIMIT ?"
        )
        last = -1
        while True:
            with self._lock:
                self._flush_if_writable()
                rows = self._connection().execute(sql, [last, *args, page]).fetchall()
            yield from rows
            if len(rows) < page:
                return
            last = rows[-1][0]

    def _aggregate(self, select: str, **filters: Filter) -> tuple[Any, ...]:
        clauses, args = EntryFilter(**filters).where()
        sql = f"SELECT {select} FROM entries" + (
            " WHERE " + " AND ".join(clauses) if clauses else ""
        )
        with self._lock:
            self._flush_if_writable()
            row = self._connection().execute(sql, args).fetchone()
        return tuple(row)

    def count(
        self,
        *,
        view: Filter = None,
        phase: Filter = None,
        message_type: Filter = None,
        status: Filter = None,
        sender: Filter = None,
        receiver: Filter = None,
    ) -> int:
        """Number of entries matching the filters (computed in SQL)."""
        (n,) = self._aggregate(
            "count(*)",
            view=view,
            phase=phase,
            message_type=message_type,
            status=status,
            sender=sender,
            receiver=receiver,
        )
        return int(n)

    def total_bytes(
        self,
        *,
        view: Filter = None,
        phase: Filter = None,
        message_type: Filter = None,
        status: Filter = None,
        sender: Filter = None,
        receiver: Filter = None,
    ) -> int:
        """Sum of ``size`` over matching entries (wire bytes, size-only records included)."""
        (n,) = self._aggregate(
            "coalesce(sum(size), 0)",
            view=view,
            phase=phase,
            message_type=message_type,
            status=status,
            sender=sender,
            receiver=receiver,
        )
        return int(n)

    def __len__(self) -> int:
        return self.count()

    def views(self) -> list[str]:
        """Every view that has at least one entry, sorted."""
        with self._lock:
            self._flush_if_writable()
            rows = (
                self._connection()
                .execute("SELECT DISTINCT view FROM entries ORDER BY view")
                .fetchall()
            )
        return [str(r[0]) for r in rows]

    def summary(
        self, *, by: tuple[str, ...] = ("view", "message_type"), status: Filter = None
    ) -> dict[str, Any]:
        """Nested ``{key1: {key2: ... {"count": n, "bytes": b}}}`` grouped in SQL by ``by``.

        ``by`` is a non-empty tuple of columns among view, phase, sender, receiver,
        message_type, status.
        """
        allowed = ("view", "phase", "sender", "receiver", "message_type", "status")
        if not by or any(col not in allowed for col in by) or len(set(by)) != len(by):
            raise InvalidParameterError(
                f"by must be distinct columns among {list(allowed)}, got {list(by)!r}"
            )
        clauses, args = EntryFilter(status=status).where()
        cols = ", ".join(by)
        sql = (
            f"SELECT {cols}, count(*), coalesce(sum(size), 0) FROM entries"
            + (" WHERE " + " AND ".join(clauses) if clauses else "")
            + f" GROUP BY {cols} ORDER BY {cols}"
        )
        with self._lock:
            self._flush_if_writable()
            rows = self._connection().execute(sql, args).fetchall()
        out: dict[str, Any] = {}
        for row in rows:
            node = out
            for key in row[: len(by) - 1]:
                node = node.setdefault(key, {})
            node[row[len(by) - 1]] = {"count": int(row[-2]), "bytes": int(row[-1])}
        return out

    def integrity_errors(self) -> list[str]:
        """SQLite's ``PRAGMA integrity_check`` messages; empty when the file is sound."""
        with self._lock:
            self._flush_if_writable()
            rows = self._connection().execute("PRAGMA integrity_check").fetchall()
        messages = [str(r[0]) for r in rows]
        return [] if messages == ["ok"] else messages

    def export_jsonl(self, path: str | os.PathLike[str], *, include_secrets: bool = True) -> None:
        """Write the transcript as JSONL (see :mod:`transcripts.jsonl`), atomically."""
        export_jsonl(self, path, include_secrets=include_secrets)

    # ------------------------------------------------------------------ closing

    def close(self) -> None:
        """Flush, mark the transcript ``complete`` and close. Idempotent."""
        self._finish(STATE_COMPLETE)

    def _finish(self, state: str) -> None:
        with self._lock:
            conn = self._conn
            if conn is None:
                return
            try:
                if self._writable:
                    self._flush_locked()
                    conn.execute("BEGIN IMMEDIATE")
                    self._set_meta("state", state)
                    self._set_meta("closed_at", utc_now())
                    conn.execute(SUMMARY_INDEX)
                    conn.execute("COMMIT")
                    # One self-contained file from now on (readable without -wal/-shm). Needs
                    # exclusive access: while a reader is still open the file stays in WAL mode,
                    # which is just as consistent, so a busy database is not an error here.
                    try:
                        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                        conn.execute("PRAGMA journal_mode = DELETE")
                    except sqlite3.OperationalError:
                        pass
            finally:
                self._conn = None
                conn.close()

    def __enter__(self) -> TranscriptStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
            return
        # The messages buffered before the failure really were exchanged: keep them, and say
        # in the state that the run did not finish. Never mask the original exception.
        try:
            self._finish(STATE_ABORTED_PREFIX + exc_type.__name__)
        except Exception:  # the caller's exception is the one that matters
            with self._lock:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None

    def __del__(self) -> None:
        # Never flush from a finaliser (it may run at interpreter shutdown); say what is lost.
        if getattr(self, "_conn", None) is not None and getattr(self, "_buffer", None):
            warnings.warn(
                f"transcript {str(self._path)!r} was not closed; {len(self._buffer)} buffered "
                "entries were not committed (use close() or a with block)",
                ResourceWarning,
                stacklevel=1,
            )

    def __repr__(self) -> str:
        mode = "closed" if self.closed else ("rw" if self._writable else "ro")
        return f"TranscriptStore({str(self._path)!r}, run_id={self._header.run_id!r}, {mode})"


#: Entries appended per transaction while importing a JSONL export.
_IMPORT_CHUNK = 4096


def import_jsonl(
    source: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    *,
    overwrite: bool = False,
) -> TranscriptStore:
    """Rebuild a transcript store at ``dest`` from a JSONL export; returns it opened read-only.

    The store is built under a temporary name and renamed into place only when the whole file
    parsed, so a bad JSONL never leaves a partial transcript at ``dest``. Secret artifacts are
    accepted only if the header says ``rng_mode = "seeded"`` (the store enforces it).
    """
    target = Path(dest)
    if target.exists() and not overwrite:
        raise InvalidParameterError(
            f"transcript {str(target)!r} already exists; pass overwrite=True to replace it"
        )
    records = iter_jsonl(source)
    head = next(records)
    assert isinstance(head, JsonlHead)
    partial = target.with_name(f".{target.name}.partial")
    store = TranscriptStore.create(partial, head.header, overwrite=True)
    try:
        pending: list[TranscriptEntry] = []
        for record in records:
            if isinstance(record, TranscriptEntry):
                pending.append(record)
                if len(pending) >= _IMPORT_CHUNK:
                    store.append_entries(pending)
                    pending = []
                continue
            if pending:
                store.append_entries(pending)
                pending = []
            assert isinstance(record, JsonlArtifact)
            try:
                store.put_artifact(record.name, record.data, secret=record.secret)
            except FreError as exc:
                raise DecodeError(f"{str(source)!r}: artifact {record.name!r}: {exc}") from None
        store.append_entries(pending)
        store._finish(head.state)
        if overwrite and target.exists():
            target.unlink()
        os.replace(partial, target)
    except BaseException:
        store._finish(head.state)
        partial.unlink(missing_ok=True)
        raise
    return TranscriptStore.open(target)
