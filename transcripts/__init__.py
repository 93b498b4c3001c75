"""Per-party transcripts: recording, crash-safe storage, JSONL export and audit (design §6.7).

Generic: this package knows views, roles, message types and bytes, not the protocol. The protocol
records every message through :class:`TranscriptStore` and builds its own audit on
:mod:`transcripts.audit`.
"""

from transcripts.audit import (
    AuditFinding,
    AuditReport,
    check_float_vectors,
    check_integrity,
    check_message_types,
    check_no_forbidden_content,
    view_summary,
)
from transcripts.entry import ACCEPTED, TranscriptEntry, rejected_status
from transcripts.header import RNG_MODES, TranscriptHeader, package_version
from transcripts.jsonl import export_jsonl
from transcripts.redaction import extract_views
from transcripts.schema import SCHEMA_VERSION, ArtifactInfo
from transcripts.store import TranscriptStore, import_jsonl

__all__ = [
    "ACCEPTED",
    "RNG_MODES",
    "SCHEMA_VERSION",
    "ArtifactInfo",
    "AuditFinding",
    "AuditReport",
    "TranscriptEntry",
    "TranscriptHeader",
    "TranscriptStore",
    "check_float_vectors",
    "check_integrity",
    "check_message_types",
    "check_no_forbidden_content",
    "export_jsonl",
    "extract_views",
    "import_jsonl",
    "package_version",
    "rejected_status",
    "view_summary",
]
