"""Per-party transcripts: recording, crash-safe storage, JSONL export and audit."""
