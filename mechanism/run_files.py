"""The file names of a run directory, in one place: what the mechanism and the protocol write
(the release, its centroids, the operator-private diagnostics), what the protocol adds (the
transcript and its JSONL export), and what the text pipeline publishes (ledger, synthetic text).

They live in the lowest layer that writes any of them, so every layer above names the same files.
"""

from __future__ import annotations

#: The centroids of a release, a float64 ``.npy`` array (one row per released bucket).
CENTROIDS_FILE = "centroids.npy"
#: The public release document: buckets, counts, ledger, public info.
RELEASE_FILE = "release.json"
#: Diagnostics that read the private data directly; operator-private, never published.
DIAGNOSTICS_FILE = "diagnostics.private.json"
#: The protocol run's per-party transcript (SQLite).
TRANSCRIPT_FILE = "transcript.sqlite"
#: Its JSONL export (``simulate --jsonl``).
TRANSCRIPT_JSONL_FILE = "transcript.jsonl"
#: A networked deployment's directory: one transcript store per party, each service's metrics,
#: and the deployment's own summary (wall time, CPU per service, bytes on the wire, request and
#: user counts); the metrics and the summary count users, so both are operator-private.
TRANSCRIPTS_DIR = "transcripts"
METRICS_DIR = "metrics"
DEPLOYMENT_FILE = "deployment.private.json"
#: The text pipeline's published privacy ledger.
LEDGER_FILE = "ledger.json"
#: The text pipeline's published synthetic texts.
SYNTHETIC_FILE = "synthetic.jsonl"

__all__ = [
    "CENTROIDS_FILE",
    "DEPLOYMENT_FILE",
    "METRICS_DIR",
    "TRANSCRIPTS_DIR",
    "DIAGNOSTICS_FILE",
    "LEDGER_FILE",
    "RELEASE_FILE",
    "SYNTHETIC_FILE",
    "TRANSCRIPT_FILE",
    "TRANSCRIPT_JSONL_FILE",
]
