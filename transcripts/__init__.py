"""Per-party transcripts: recording, crash-safe storage, JSONL export and audit (SPEC §6.7).

Generic: this package knows views, roles, message types and bytes, not the protocol. The protocol
records every message through :class:`TranscriptStore` and builds its own audit on
:mod:`transcripts.audit`.
"""

from transcripts.entry import ACCEPTED, TranscriptEntry, rejected_status
from transcripts.header import RNG_MODES, SCHEMA_VERSION, TranscriptHeader, package_version
from transcripts.store import ArtifactInfo, TranscriptStore


def view_summary(store: TranscriptStore) -> dict[str, dict[str, dict[str, int]]]:
    """``{view: {message_type: {"count": n, "bytes": b}}}``, computed in SQL (SPEC §6.7)."""
    return store.summary(by=("view", "message_type"))


__all__ = [
    "ACCEPTED",
    "RNG_MODES",
    "SCHEMA_VERSION",
    "ArtifactInfo",
    "TranscriptEntry",
    "TranscriptHeader",
    "TranscriptStore",
    "package_version",
    "rejected_status",
    "view_summary",
]
