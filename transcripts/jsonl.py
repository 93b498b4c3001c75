"""JSONL export and import of transcripts (design §6.7; bytes as hex).

One JSON object per line, in this order:

1. ``{"kind": "header", "format": "fre-e2t-transcript", "schema_version": 1, "state": ...,
   "header": {...}}`` — exactly once, first;
2. ``{"kind": "entry", "seq", "view", "phase", "sender", "receiver", "message_type", "status",
   "size", "payload"}`` per entry in ``seq`` order; ``payload`` is lowercase hex, or ``null`` for
   a size-only record;
3. ``{"kind": "artifact", "name", "secret", "encoding": "hex" | "json", "data"}`` per artifact,
   sorted by name; ``data`` is hex for bytes artifacts and the JSON value itself otherwise;
4. ``{"kind": "end", "entries": n, "artifacts": m}`` — last, so a truncated file is detected.

The export is written to a temporary file and renamed into place, so a crash never leaves a
half-written JSONL under the final name. A path ending in ``.gz`` is gzip-compressed.
:func:`iter_jsonl` reads a file back, line by line;
:func:`transcripts.store.import_jsonl` rebuilds from it a store whose entries, header, artifacts and state equal the
original's (property-tested); any malformed line raises :class:`DecodeError` naming the line.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol, cast

from primitives.errors import DecodeError, FreError, InvalidParameterError
from transcripts.entry import TranscriptEntry
from transcripts.header import TranscriptHeader
from transcripts.schema import SCHEMA_VERSION, STATE_OPEN, ArtifactInfo

FORMAT = "fre-e2t-transcript"
_ENTRY_KEYS = frozenset(
    {
        "kind",
        "seq",
        "view",
        "phase",
        "sender",
        "receiver",
        "message_type",
        "status",
        "size",
        "payload",
    }
)
_ARTIFACT_KEYS = frozenset({"kind", "name", "secret", "encoding", "data"})
_CHUNK = 4096


def _open_text(path: Path, mode: str) -> IO[str]:
    if path.name.endswith(".gz"):
        return cast(IO[str], gzip.open(path, mode + "t", encoding="utf-8", newline="\n"))
    return path.open(mode, encoding="utf-8", newline="\n")


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


class Exportable(Protocol):
    """What the export reads from a transcript store."""

    @property
    def state(self) -> str: ...
    @property
    def header(self) -> TranscriptHeader: ...
    def entries(self) -> Iterator[TranscriptEntry]: ...
    def artifacts(self) -> list[ArtifactInfo]: ...
    def get_artifact(self, name: str) -> Any: ...


def export_jsonl(
    store: Exportable, path: str | os.PathLike[str], *, include_secrets: bool = True
) -> None:
    """Write ``store`` as JSONL to ``path`` atomically (temporary file, fsync, rename).

    ``include_secrets=False`` leaves out artifacts marked secret (they exist only in seeded runs).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    # Keep the .gz suffix on the temporary name so _open_text picks the same encoding.
    if target.name.endswith(".gz"):
        tmp = tmp.rename(tmp.with_name(tmp.name + ".gz"))
    try:
        with _open_text(tmp, "w") as out:
            head = {
                "kind": "header",
                "format": FORMAT,
                "schema_version": SCHEMA_VERSION,
                "state": store.state,
                "header": store.header.to_dict(),
            }
            out.write(_dumps(head) + "\n")
            n_entries = 0
            lines: list[str] = []
            for entry in store.entries():
                # Names and statuses are validated identifiers (no quotes, backslashes or control
                # characters), so formatting them directly is valid JSON and much faster.
                payload = f'"{entry.payload.hex()}"' if entry.payload_recorded else "null"
                lines.append(
                    f'{{"kind":"entry","seq":{entry.seq},"view":"{entry.view}",'
                    f'"phase":"{entry.phase}","sender":"{entry.sender}",'
                    f'"receiver":"{entry.receiver}","message_type":"{entry.message_type}",'
                    f'"status":"{entry.status}","size":{entry.size},"payload":{payload}}}\n'
                )
                n_entries += 1
                if len(lines) >= _CHUNK:
                    out.write("".join(lines))
                    lines.clear()
            out.write("".join(lines))
            n_artifacts = 0
            for info in store.artifacts():
                if info.secret and not include_secrets:
                    continue
                data = store.get_artifact(info.name)
                record = {
                    "kind": "artifact",
                    "name": info.name,
                    "secret": info.secret,
                    "encoding": "hex" if info.kind == "bytes" else "json",
                    "data": data.hex() if info.kind == "bytes" else data,
                }
                out.write(_dumps(record) + "\n")
                n_artifacts += 1
            out.write(
                _dumps({"kind": "end", "entries": n_entries, "artifacts": n_artifacts}) + "\n"
            )
            out.flush()
        with tmp.open("rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@dataclass(frozen=True, slots=True, kw_only=True)
class JsonlArtifact:
    name: str
    secret: bool
    data: Any  # bytes or a JSON value


@dataclass(frozen=True, slots=True, kw_only=True)
class JsonlHead:
    header: TranscriptHeader
    state: str


def _fail(path: Path, lineno: int, reason: str) -> DecodeError:
    return DecodeError(f"{str(path)!r} line {lineno}: {reason}")


def _object(path: Path, lineno: int, line: str) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except ValueError as exc:
        raise _fail(path, lineno, f"not JSON ({exc})") from None
    if not isinstance(value, dict) or not isinstance(value.get("kind"), str):
        raise _fail(path, lineno, "expected a JSON object with a string 'kind'")
    return value


def _hex(path: Path, lineno: int, field: str, value: object) -> bytes:
    if not isinstance(value, str):
        raise _fail(path, lineno, f"{field} must be a hex string, got {type(value).__name__}")
    try:
        return bytes.fromhex(value)
    except ValueError:
        raise _fail(path, lineno, f"{field} is not valid hex") from None


def _head(path: Path, lineno: int, obj: dict[str, Any]) -> JsonlHead:
    if obj["kind"] != "header" or obj.get("format") != FORMAT:
        raise _fail(path, lineno, f"expected the {FORMAT!r} header line first")
    version = obj.get("schema_version")
    if not isinstance(version, int) or version > SCHEMA_VERSION or version < 1:
        raise _fail(
            path,
            lineno,
            f"schema_version {version!r} is not one this fre-e2t reads (1..{SCHEMA_VERSION})",
        )
    state = obj.get("state", STATE_OPEN)
    if not isinstance(state, str):
        raise _fail(path, lineno, "state must be a string")
    try:
        header = TranscriptHeader.from_dict(obj.get("header"))  # type: ignore[arg-type]
    except FreError as exc:
        raise _fail(path, lineno, str(exc)) from None
    return JsonlHead(header=header, state=state)


def _entry(path: Path, lineno: int, obj: dict[str, Any]) -> TranscriptEntry:
    if obj.keys() != _ENTRY_KEYS:
        raise _fail(path, lineno, f"entry keys must be {sorted(_ENTRY_KEYS)}")
    payload = obj["payload"]
    recorded = payload is not None
    data = _hex(path, lineno, "payload", payload) if recorded else b""
    try:
        return TranscriptEntry(
            seq=obj["seq"],
            view=obj["view"],
            phase=obj["phase"],
            sender=obj["sender"],
            receiver=obj["receiver"],
            message_type=obj["message_type"],
            status=obj["status"],
            size=obj["size"],
            payload=data,
            payload_recorded=recorded,
        )
    except InvalidParameterError as exc:
        raise _fail(path, lineno, str(exc)) from None


def _artifact(path: Path, lineno: int, obj: dict[str, Any]) -> JsonlArtifact:
    if obj.keys() != _ARTIFACT_KEYS:
        raise _fail(path, lineno, f"artifact keys must be {sorted(_ARTIFACT_KEYS)}")
    if not isinstance(obj["secret"], bool) or not isinstance(obj["name"], str):
        raise _fail(path, lineno, "artifact name must be a string and secret a bool")
    encoding = obj["encoding"]
    if encoding == "hex":
        value: Any = _hex(path, lineno, "data", obj["data"])
    elif encoding == "json" and isinstance(obj["data"], dict | list):
        value = obj["data"]
    else:
        raise _fail(path, lineno, "artifact encoding must be 'hex' or 'json' (dict/list)")
    return JsonlArtifact(name=obj["name"], secret=obj["secret"], data=value)


class _JsonlOrder:
    """Where a reader is in the file's fixed order (header, entries, artifacts, end), and the
    counts the end line must repeat."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.stage = "header"
        self.last_seq = -1
        self.n_entries = 0
        self.n_artifacts = 0

    def read(
        self, lineno: int, obj: dict[str, Any]
    ) -> JsonlHead | TranscriptEntry | JsonlArtifact | None:
        """The record on this line (``None`` for the end line), checked against the order."""
        kind = obj["kind"]
        if self.stage == "header":
            head = _head(self.path, lineno, obj)
            self.stage = "entries"
            return head
        if kind == "entry" and self.stage == "entries":
            entry = _entry(self.path, lineno, obj)
            if entry.seq <= self.last_seq:
                raise _fail(
                    self.path, lineno, f"seq {entry.seq} does not increase (after {self.last_seq})"
                )
            self.last_seq = entry.seq
            self.n_entries += 1
            return entry
        if kind == "artifact" and self.stage in ("entries", "artifacts"):
            self.stage = "artifacts"
            artifact = _artifact(self.path, lineno, obj)
            self.n_artifacts += 1
            return artifact
        if kind == "end" and self.stage in ("entries", "artifacts"):
            if obj != {"kind": "end", "entries": self.n_entries, "artifacts": self.n_artifacts}:
                raise _fail(
                    self.path,
                    lineno,
                    f"end line {obj} does not match the {self.n_entries} entries and "
                    f"{self.n_artifacts} artifacts read",
                )
            self.stage = "end"
            return None
        raise _fail(self.path, lineno, f"unexpected {kind!r} line (reading {self.stage})")


def iter_jsonl(
    path: str | os.PathLike[str],
) -> Iterator[JsonlHead | TranscriptEntry | JsonlArtifact]:
    """Parse a transcript JSONL: the head first, then entries, then artifacts; validates the end line.

    Raises :class:`DecodeError` (with the line number) on anything out of place.
    """
    source = Path(path)
    if not source.is_file():
        raise DecodeError(f"{str(source)!r} does not exist or is not a file")
    order = _JsonlOrder(source)
    lineno = 0
    try:
        fh = _open_text(source, "r")
        with fh:
            for lineno, raw in enumerate(fh, start=1):
                line = raw.rstrip("\n")
                if not line.strip():
                    raise _fail(source, lineno, "empty line")
                record = order.read(lineno, _object(source, lineno, line))
                if record is not None:
                    yield record
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise _fail(source, lineno + 1, f"unreadable ({exc})") from None
    if order.stage != "end":
        raise DecodeError(f"{str(source)!r} is truncated: no end line after line {lineno}")
