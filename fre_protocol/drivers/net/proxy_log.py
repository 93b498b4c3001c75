"""The proxy's durable log: the round's phases and the keys it keeps, the tables of its state
(relayed items, their envelopes, refusals, batches) and the rows a relayed or refused request
writes there. Every change the proxy makes is one transaction on this log, so a restart resumes
where it stopped.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from fre_protocol.messages import Role

PHASE1, SUBMIT, PHASE2 = "phase1", "submit", "phase2"
#: Round phases at the proxy, in order.
OPEN1, CLOSING1, OPEN2, CLOSING2, DONE = "phase1", "closing_phase1", "phase2", "closing_phase2", "released"
PHASE_KEY, DOCUMENT_KEY, BROADCAST_KEY, RELEASE_KEY = "phase", "round_document", "broadcast", "release"
SIGNED_DOCUMENT_KEY = "signed_round_document"  # what users get: the document with both servers' signatures

# An item's envelope lives in its own table: the item rows, which batching and the end of the
# round rewrite (batch_id, credential), stay small, so those updates rewrite a few pages rather
# than every envelope's.
SCHEMA = """
CREATE TABLE IF NOT EXISTS items (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    ticket TEXT UNIQUE,
    credential TEXT,
    digest BLOB NOT NULL,
    sender TEXT NOT NULL,
    recipient TEXT NOT NULL,
    batch_id TEXT,
    response BLOB
);
CREATE TABLE IF NOT EXISTS envelopes (id INTEGER PRIMARY KEY, envelope BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS items_by_credential ON items (kind, credential);
CREATE INDEX IF NOT EXISTS items_pending ON items (kind, batch_id);
CREATE TABLE IF NOT EXISTS refused (
    id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, digest BLOB NOT NULL, size INTEGER NOT NULL,
    status TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS refusals (credential TEXT PRIMARY KEY, n INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS batches (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    batch_id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,
    recipient TEXT NOT NULL,
    item_ids TEXT NOT NULL,
    done INTEGER NOT NULL DEFAULT 0
);
"""

#: A credential's refusals kept (digest, size and status) in one round; the rest are only counted.
REFUSALS_KEPT = 16
#: A credential's refusals in one round; beyond them its requests are refused (429) unread.
REFUSAL_BUDGET = 64


#: Where each kind goes and which endpoint takes it there.
ROUTES = {
    (PHASE1, Role.S_TAG.label): "/v1/phase1",
    (SUBMIT, Role.S_SYN.label): "/v1/submissions",
    (PHASE2, Role.S_TAG.label): "/v1/phase2",
    (PHASE2, Role.S_SYN.label): "/v1/phase2",
}


def record_item(conn: Any, kind: str, credential: str | None, digest: bytes, sender: str, recipient: str,
                envelope: bytes) -> tuple[int, str | None]:
    """One relayed envelope: its item row and, in the table of its own, its bytes; the item's id
    and, for a user's, its ticket (random: the ids count every request, dummies included)."""
    ticket = secrets.token_hex(16) if credential is not None else None
    cur = conn.execute(
        "INSERT INTO items (kind, ticket, credential, digest, sender, recipient) VALUES (?, ?, ?, ?, ?, ?)",
        (kind, ticket, credential, digest, sender, recipient),
    )
    conn.execute("INSERT INTO envelopes (id, envelope) VALUES (?, ?)", (cur.lastrowid, envelope))
    return int(cur.lastrowid), ticket


def record_refusal(conn: Any, kind: str, credential: str, body: bytes, error: Exception) -> int:
    """Count a refused user request against its credential and, for the first
    :data:`REFUSALS_KEPT`, keep its digest, size and typed status for the proxy's view (never the
    body: a credential could otherwise fill the disk with refused bodies); the credential's count."""
    from fre_protocol.roles.base import status_of

    n = int(conn.execute(
        "INSERT INTO refusals (credential, n) VALUES (?, 1) ON CONFLICT (credential) DO UPDATE SET n = n + 1 RETURNING n",
        (credential,),
    ).fetchone()[0])
    if n <= REFUSALS_KEPT:
        conn.execute(
            "INSERT INTO refused (kind, digest, size, status) VALUES (?, ?, ?, ?)",
            (kind, hashlib.sha256(body).digest(), len(body), status_of(error)),
        )
    return n


__all__ = [
    "BROADCAST_KEY", "CLOSING1", "CLOSING2", "DOCUMENT_KEY", "DONE", "OPEN1", "OPEN2", "PHASE1", "PHASE2", "PHASE_KEY",
    "REFUSALS_KEPT", "REFUSAL_BUDGET", "RELEASE_KEY", "ROUTES", "SCHEMA", "SIGNED_DOCUMENT_KEY", "SUBMIT",
    "record_item", "record_refusal",
]
