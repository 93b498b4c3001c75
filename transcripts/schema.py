"""The transcript file's schema: the SQLite tables (DDL), its version and marks, the states a
transcript can be in, and the row types read back from it.

Version 1. ``meta(key, value)`` holds ``schema_version``, ``header`` (JSON, written once), ``state``
(``open`` while writing or after a crash, ``complete`` after a clean close, ``aborted:<ErrorType>``
when the writer's ``with`` block raised) and ``closed_at``; ``entries`` one row per recorded message (``payload`` NULL for size-only
records, otherwise exactly ``size`` bytes); ``artifacts`` the recorded release, the ledger and, in
seeded runs only, secrets. The file carries ``PRAGMA application_id`` and ``PRAGMA user_version``
so a foreign or newer file is told apart before any table is read.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The version of this layout, written into every transcript (and its JSONL export).
SCHEMA_VERSION = 1
APPLICATION_ID = 0x46524532  # b"FRE2": marks the SQLite file as a fre-e2t transcript.
SQLITE_MAGIC = b"SQLite format 3\x00"

STATE_OPEN = "open"
STATE_COMPLETE = "complete"
STATE_ABORTED_PREFIX = "aborted:"

TABLES = frozenset({"meta", "entries", "artifacts"})
DDL = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    """CREATE TABLE entries (
        seq INTEGER PRIMARY KEY CHECK (seq >= 0),
        view TEXT NOT NULL,
        phase TEXT NOT NULL,
        sender TEXT NOT NULL,
        receiver TEXT NOT NULL,
        message_type TEXT NOT NULL,
        status TEXT NOT NULL,
        size INTEGER NOT NULL CHECK (size >= 0),
        payload BLOB CHECK (payload IS NULL OR length(payload) = size)
    )""",
    """CREATE TABLE artifacts (
        name TEXT PRIMARY KEY,
        kind TEXT NOT NULL CHECK (kind IN ('bytes', 'json')),
        secret INTEGER NOT NULL CHECK (secret IN (0, 1)),
        data BLOB NOT NULL
    ) WITHOUT ROWID""",
)
# Built on close, not during the run: a secondary index would slow every insert, while the
# summary queries of an audit (GROUP BY view, message_type) become covering-index scans.
SUMMARY_INDEX = (
    "CREATE INDEX IF NOT EXISTS entries_by_view ON entries (view, message_type, status, size)"
)
ENTRY_COLUMNS = "seq, view, phase, sender, receiver, message_type, status, size, payload"
INSERT_ENTRY = "INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"


@dataclass(frozen=True, slots=True, kw_only=True)
class ArtifactInfo:
    """What :meth:`TranscriptStore.artifacts` lists: never the data itself."""

    name: str
    kind: str  # "bytes" or "json"
    secret: bool
    size: int  # stored bytes (canonical JSON text for kind "json")


__all__ = [
    "APPLICATION_ID",
    "DDL",
    "ENTRY_COLUMNS",
    "INSERT_ENTRY",
    "SCHEMA_VERSION",
    "SQLITE_MAGIC",
    "STATE_ABORTED_PREFIX",
    "STATE_COMPLETE",
    "STATE_OPEN",
    "SUMMARY_INDEX",
    "TABLES",
    "ArtifactInfo",
]
