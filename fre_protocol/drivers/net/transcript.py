"""Each party's transcript in a deployment: its own store, written as the round runs from what
the party durably accepted, and the audit of a deployment's set of stores.

A server's transcript is what its role object recorded while the live service applied each
request, logged with that request and then appended to the store (:class:`LiveTranscript`). The
proxy's is appended from its queue batch by batch once each batch is acknowledged, the users' is
written by the users' client. ``fre-e2t
audit`` on a deployment directory checks that each store holds only its own party's view, then
audits the union of the views with the same checks as a simulated run — the release recomputed
from S_syn's view alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from fre_protocol.drivers.net.round import RoundContext
from fre_protocol.drivers.net.state import ViewRow
from mechanism.run_files import TRANSCRIPTS_DIR
from primitives.errors import ProtocolStateError
from transcripts import TranscriptHeader, TranscriptStore

PARTY_VIEWS = {"S_tag": ("S_tag",), "S_syn": ("S_syn",), "proxy": ("proxy",), "users": ("user",)}


def party_header(ctx: RoundContext, *, party: str, extra: Mapping[str, Any] | None = None) -> TranscriptHeader:
    """The header of one party's store: the round's public settings (never the test seed)."""
    from fre_protocol.roles.round import transcript_header

    settings = ctx.settings
    header: TranscriptHeader = transcript_header(
        ctx.seeds, ctx.comps, ctx.params, settings.protocol,
        protocol="fre-e2t two-server two-phase, networked deployment",
        party=party, round_id=settings.round_id, dim=settings.dim, noise=settings.noise, **dict(extra or {}),
    )
    return header


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
    rows: Iterable[ViewRow],
    artifacts: Mapping[str, Any],
) -> None:
    """A new store at ``path`` with the party's view ``rows`` (as its recorder produced them,
    in order) and ``artifacts``."""
    store = TranscriptStore.create(path, party_header(ctx, party=role), overwrite=True)
    try:
        store.record_many(rows)  # in order; int payloads are size-only entries
        put_artifacts(store, artifacts)
    except BaseException as exc:
        store.__exit__(type(exc), exc, exc.__traceback__)
        raise
    store.close()


class LiveTranscript:
    """A party's transcript written while the round runs, so that the end of the round only
    closes it (writing a whole view there held up the release by seconds per party).

    The party's durable state stays the source of truth: a store that was never opened (a
    restarted service) or that failed to take rows is started again from the beginning of the
    view by its owner, and :meth:`extend` never raises, so a failing transcript never fails a
    request that was already logged."""

    def __init__(self, path: Callable[[], Path], header: Callable[[], TranscriptHeader]) -> None:
        self._path, self._header = path, header
        self.store: TranscriptStore | None = None
        self.finished = False  # closed complete: never opened (and so overwritten) again

    @property
    def is_open(self) -> bool:
        return self.store is not None

    def open(self) -> bool:
        """A new, empty store (replacing any earlier file); False if it could not be created
        or the transcript is already finished."""
        if self.finished:
            return False
        self.abandon()
        try:
            self.store = TranscriptStore.create(self._path(), self._header(), overwrite=True)
        except Exception:  # noqa: BLE001 - the owner writes the view from its state instead
            self.store = None
        return self.store is not None

    def extend(self, rows: Iterable[ViewRow]) -> bool:
        """Append ``rows`` (in order); False, with the store dropped, if that failed."""
        if self.store is None:
            return False
        try:
            self.store.record_many(rows)
        except Exception:  # noqa: BLE001 - as in open
            self.abandon()
            return False
        return True

    def finish(self, artifacts: Mapping[str, Any]) -> None:
        """Add ``artifacts`` and close the store, complete."""
        store, self.store = self.store, None
        if store is None:
            raise ProtocolStateError("the live transcript is not open")
        try:
            put_artifacts(store, artifacts)
        except BaseException as exc:
            store.__exit__(type(exc), exc, exc.__traceback__)
            raise
        store.close()
        self.finished = True

    def abandon(self) -> None:
        """Close the store as aborted (never complete), if one is open."""
        store, self.store = self.store, None
        if store is not None:
            try:
                store.__exit__(ProtocolStateError, ProtocolStateError("abandoned"), None)
            except Exception:  # noqa: BLE001, S110 - it is being replaced or written again anyway
                pass


def _copy_entries(source: TranscriptStore, target: TranscriptStore) -> None:
    """Re-record ``source``'s entries in ``target``, in order (size-only records stay size-only)."""
    target.record_many(
        (
            (e.view, e.phase, e.sender, e.receiver, e.message_type, e.payload if e.payload_recorded else e.size, e.status)
            for e in source.entries()
        ),
    )


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




def check_own_views(stores: Mapping[str, Path]) -> list[Any]:
    """Each party's store holds its own view and nothing else (a store that held another
    party's view would mean one operator recorded what only another may see)."""
    from transcripts.audit import AuditFinding

    findings = []
    for party, path in sorted(stores.items()):
        allowed = set(PARTY_VIEWS.get(party, ()))
        with TranscriptStore.open(path) as store:
            views = set(store.summary(by=("view",)))
        stray = sorted(views - allowed)
        findings.append(
            AuditFinding(
                name=f"deployment:{party}_store_holds_own_view",
                passed=bool(allowed) and not stray,
                detail=(
                    f"{path.name} holds views {sorted(views)}"
                    + (f"; NOT its own: {stray}" if stray else "")
                    + ("" if allowed else f"; {party!r} is not a party of the protocol")
                ),
            )
        )
    missing = sorted(set(PARTY_VIEWS) - set(stores))
    findings.append(
        AuditFinding(
            name="deployment:every_party_store",
            passed=not missing,
            detail="a store for every party" if not missing else f"no store for {missing}",
        )
    )
    return findings


def audit_deployment(run: Path, *, embeddings: Any = None, user_ids: Any = None) -> Any:
    """Audit a deployment directory: each party's store on its own, then every view together
    (the release recomputed from S_syn's store), then the published files."""
    import tempfile

    from fre_protocol.audit import _audit
    from fre_protocol.published import check_published
    from transcripts.audit import AuditReport

    stores = {p.stem: p for p in sorted((run / TRANSCRIPTS_DIR).glob("*.sqlite"))}
    own = check_own_views(stores)
    n_users = None
    if "users" in stores:
        with TranscriptStore.open(stores["users"]) as users:
            n_users = users.header.extra.get("n_users")
    if "S_syn" not in stores:
        return AuditReport(findings=tuple(own), summary={"stores": sorted(stores)})
    with tempfile.TemporaryDirectory() as tmp:
        combined = combine(stores, Path(tmp) / "combined.sqlite", extra={"n_users": n_users})
        with TranscriptStore.open(combined) as store:
            report = _audit(store, embeddings=embeddings, user_ids=user_ids)
    published = tuple(check_published(run))
    summary = {**report.summary, "stores": {k: v.name for k, v in stores.items()}}
    return AuditReport(findings=tuple(own) + report.findings + published, summary=summary)


__all__ = [
    "PARTY_VIEWS",
    "TRANSCRIPTS_DIR",
    "audit_deployment",
    "check_own_views",
    "combine",
    "party_header",
    "put_artifacts",
    "write_party_transcript",
    "LiveTranscript",
]
