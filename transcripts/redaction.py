"""Per-party copies of a transcript: one party's view, optionally without payload bytes.

A run's transcript holds every party's view. To hand a party (or its auditor) exactly what that
party saw — and nothing another party saw — :func:`extract_views` copies the entries of the chosen
views into a new transcript file, keeping their ``seq`` numbers so findings can be cross-referenced
with the full transcript. ``size_only=True`` keeps only the wire sizes (a volume report that can be
published). Secret artifacts are never copied; other artifacts only when named.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path

from primitives.errors import InvalidParameterError
from transcripts.entry import TranscriptEntry
from transcripts.store import TranscriptStore


def _stripped(entries: Iterable[TranscriptEntry]) -> Iterator[TranscriptEntry]:
    for entry in entries:
        yield replace(entry, payload=b"", payload_recorded=False)


def extract_views(
    store: TranscriptStore,
    dest: str | os.PathLike[str],
    *,
    views: str | Iterable[str],
    artifacts: Iterable[str] = (),
    size_only: bool = False,
    overwrite: bool = False,
) -> TranscriptStore:
    """Copy the entries of ``views`` (and the named non-secret ``artifacts``) to ``dest``.

    The new header equals the source's except ``extra``, which gains ``extracted_from`` (the
    source run id), ``views`` and ``size_only``. Returns the new transcript opened read-only.
    """
    selected = [views] if isinstance(views, str) else sorted(set(views))
    if not selected:
        raise InvalidParameterError("views must name at least one view, got none")
    wanted = list(artifacts)
    listing = {info.name: info for info in store.artifacts()}
    for name in wanted:
        if name not in listing:
            raise InvalidParameterError(
                f"artifact {name!r} is not in the source; it has {sorted(listing)}"
            )
        if listing[name].secret:
            raise InvalidParameterError(f"artifact {name!r} is secret and is never copied")
    header = replace(
        store.header,
        extra={
            **store.header.extra,
            "extracted_from": store.header.run_id,
            "views": selected,
            "size_only": size_only,
        },
    )
    target = Path(dest)
    with TranscriptStore.create(target, header, overwrite=overwrite) as out:
        entries: Iterable[TranscriptEntry] = store.entries(view=selected)
        out.append_entries(_stripped(entries) if size_only else entries)
        for name in wanted:
            out.put_artifact(name, store.get_artifact(name))
    return TranscriptStore.open(target)
