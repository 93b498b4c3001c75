"""Each party's transcript in a deployment: its own store, written at the end of the round from
what it durably accepted, and the audit of a deployment's set of stores.

A server's transcript is its request log applied once more to a fresh role object that records
(the role's statuses are a function of the log, so the transcript says exactly what the live
service saw). The proxy's is written from its queue, the users' by the users' client. ``fre-e2t
audit`` on a deployment directory checks that each store holds only its own party's view, then
audits the union of the views with the same checks as a simulated run — the release recomputed
from S_syn's view alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fre_protocol.net.round import RoundContext
from fre_protocol.parties.base import Recorder
from transcripts import TranscriptHeader, TranscriptStore

#: Where a deployment directory keeps each party's store.
TRANSCRIPTS_DIR = "transcripts"
PARTY_VIEWS = {"S_tag": ("S_tag",), "S_syn": ("S_syn",), "proxy": ("proxy",), "users": ("user",)}


def party_header(ctx: RoundContext, *, party: str, extra: Mapping[str, Any] | None = None) -> TranscriptHeader:
    """The header of one party's store: the round's public settings (never the test seed)."""
    from fre_protocol.net.round import RoundSettings

    settings: RoundSettings = ctx.settings
    public_seeds = {k: v for k, v in ctx.seeds.to_dict().items() if k != "test_seed"}
    return TranscriptHeader(
        rng_mode=ctx.seeds.rng_mode,
        components=ctx.comps.header(),
        params=ctx.params.to_dict(),
        extra={
            "protocol": "fre-e2t two-server two-phase, networked deployment",
            "party": party,
            "round_id": settings.round_id,
            "seeds": public_seeds,
            "dim": settings.dim,
            "noise": settings.noise,
            "release_floor": ctx.floor,
            "tau": ctx.params.tau,
            "config": settings.protocol.to_dict(),
            **dict(extra or {}),
        },
    )


def put_artifacts(store: TranscriptStore, artifacts: Mapping[str, Any]) -> None:
    for name, value in artifacts.items():
        if value is None:
            continue
        store.put_artifact(name, value, secret=name.startswith("secrets/"), replace=True)


def write_party_transcript(
    path: Path,
    *,
    role: str,
    ctx: RoundContext,
    replay: Callable[[Recorder], None],
    artifacts: Mapping[str, Any],
) -> None:
    """A new store at ``path`` recording what ``replay(recorder)`` applies, plus ``artifacts``."""
    store = TranscriptStore.create(path, party_header(ctx, party=role), overwrite=True)
    try:
        recorder = Recorder(store)
        replay(recorder)
        recorder.flush()
        put_artifacts(store, artifacts)
    except BaseException as exc:
        store.__exit__(type(exc), exc, exc.__traceback__)
        raise
    store.close()


def _copy_entries(source: TranscriptStore, target: TranscriptStore) -> None:
    """Re-record ``source``'s entries in ``target``, in order (size-only records stay size-only)."""
    full: list[tuple[str, str, str, str, str, bytes, str]] = []
    for e in source.entries():
        if e.payload_recorded:
            full.append((e.view, e.phase, e.sender, e.receiver, e.message_type, e.payload, e.status))
            continue
        if full:
            target.record_many(full)
            full = []
        target.record(
            view=e.view, phase=e.phase, sender=e.sender, receiver=e.receiver,
            message_type=e.message_type, payload=None, size=e.size, status=e.status,
        )
    if full:
        target.record_many(full)


def combine(stores: Mapping[str, Path], out: Path, *, extra: Mapping[str, Any]) -> Path:
    """One store holding every party's entries (S_syn's header and artifacts, plus ``extra`` in
    the header), for the audit's cross-view checks."""
    from transcripts.header import TranscriptHeader as Header

    with TranscriptStore.open(stores["S_syn"]) as syn:
        base = syn.header.to_dict()
        base["extra"] = {**base.get("extra", {}), **dict(extra)}
        header = Header.from_dict(base)
        combined = TranscriptStore.create(out, header, overwrite=True)
        try:
            for party in ("users", "proxy", "S_tag", "S_syn"):
                if party not in stores:
                    continue
                with TranscriptStore.open(stores[party]) as store:
                    _copy_entries(store, combined)
                    for info in store.artifacts():
                        secret = info.name.startswith("secrets/")
                        combined.put_artifact(info.name, store.get_artifact(info.name), secret=secret, replace=True)
            combined.flush()
        except BaseException as exc:
            combined.__exit__(type(exc), exc, exc.__traceback__)
            raise
        combined.close()
    return out


__all__ = ["PARTY_VIEWS", "TRANSCRIPTS_DIR", "combine", "party_header", "put_artifacts", "write_party_transcript"]
