"""Generic audit building blocks over a transcript store (design §6.7).

The protocol's audit (``fre-e2t audit RUN``) composes these checks; nothing here knows the
protocol. Every check returns a list of :class:`AuditFinding` (name, passed, detail, data) and an
:class:`AuditReport` collects them with a summary.

Scanning cost. Payloads of the selected views are concatenated into chunks of about
``chunk_bytes`` (1 MiB) and scanned with numpy, never byte by byte in Python:

* :func:`check_no_forbidden_content` groups the forbidden byte strings by length. For every
  distinct length ``L`` it computes a polynomial rolling hash of *every* ``L``-byte window of the
  chunk at once (prefix sums modulo 2^64 with an odd base, which is invertible modulo 2^64, so
  each window hash is one multiply of a prefix difference), looks the window hashes up in the
  sorted needle hashes (``searchsorted``), and confirms each hash hit by an exact byte comparison
  against a ``set`` of needles — so a hash collision can cost time but never a false report.
  Windows that straddle two payloads are discarded. Time O(T·Λ·log M) for T scanned bytes, Λ
  distinct needle lengths and M needles; memory O(chunk_bytes + M).
* :func:`check_float_vectors` reinterprets each chunk as every float dtype at every byte
  alignment (so a vector at any offset of any payload is seen) and uses prefix sums to test every
  window of ``dim`` consecutive values for: all finite, all ``|v| <= max_abs``, squared L2 norm
  within ``norm_range``, and at least ``min_nonzero`` of the values non-zero. Time O(T·D) for D
  dtypes, independent of ``dim``.

Size-only records (payload not kept) cannot be scanned; the scanning checks count them and, unless
``allow_unscanned=True``, fail rather than pass on data they never saw.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from primitives.errors import InvalidParameterError
from transcripts.header import json_safe
from transcripts.schema import STATE_COMPLETE
from transcripts.store import TranscriptStore

DEFAULT_CHUNK_BYTES = 1 << 20
DEFAULT_FLOAT_DTYPES = ("<f4", ">f4", "<f8", ">f8", "<f2", ">f2")
_HASH_BASE = 0x100000001B3  # odd, so invertible modulo 2^64
_MASK64 = (1 << 64) - 1


# ---------------------------------------------------------------------------- report types


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditFinding:
    """The outcome of one check: ``passed`` plus a one-line human ``detail`` and JSON ``data``."""

    name: str
    passed: bool
    detail: str
    data: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidParameterError(
                f"finding name must be a non-empty string, got {self.name!r}"
            )
        if not isinstance(self.passed, bool):
            raise InvalidParameterError(f"passed must be a bool, got {self.passed!r}")
        if not isinstance(self.detail, str):
            raise InvalidParameterError(
                f"detail must be a string, got {type(self.detail).__name__}"
            )
        object.__setattr__(self, "data", json_safe(self.data, where=f"finding {self.name!r} data"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "passed": self.passed,
            "detail": self.detail,
            "data": dict(self.data),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditReport:
    """Findings plus a JSON-safe summary (e.g. the view summary, the ledger, run facts)."""

    findings: tuple[AuditFinding, ...]
    summary: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        findings = tuple(self.findings)
        if not all(isinstance(f, AuditFinding) for f in findings):
            raise InvalidParameterError("findings must be AuditFinding objects")
        object.__setattr__(self, "findings", findings)
        object.__setattr__(self, "summary", json_safe(self.summary, where="summary"))

    @property
    def passed(self) -> bool:
        """True when every finding passed (an empty report passes vacuously)."""
        return all(f.passed for f in self.findings)

    @property
    def failures(self) -> tuple[AuditFinding, ...]:
        return tuple(f for f in self.findings if not f.passed)

    def finding(self, name: str) -> AuditFinding:
        for f in self.findings:
            if f.name == name:
                return f
        raise InvalidParameterError(
            f"no finding named {name!r}; have {[f.name for f in self.findings]}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "findings": [f.to_dict() for f in self.findings],
            "summary": dict(self.summary),
        }

    def verdict_line(self, label: str = "audit") -> str:
        """``<label>: PASS (k/n checks passed)`` (FAIL when any check failed)."""
        return (
            f"{label}: {'PASS' if self.passed else 'FAIL'} "
            f"({len(self.findings) - len(self.failures)}/{len(self.findings)} checks passed)"
        )

    def finding_lines(self) -> list[str]:
        """One indented line per finding: ``[ok]`` or ``[FAIL]``, its name, its detail."""
        width = max((len(f.name) for f in self.findings), default=0)
        return [
            f"  [{'ok' if f.passed else 'FAIL'}] {f.name.ljust(width)}  {f.detail}"
            for f in self.findings
        ]

    def render_text(self) -> str:
        """A plain-text report: verdict, one line per finding, then the summary, indented."""
        lines = [self.verdict_line(), *self.finding_lines()]
        if self.summary:
            lines.append("summary:")
            lines.extend(_render_mapping(self.summary, indent=2))
        return "\n".join(lines) + "\n"


def _render_mapping(value: Mapping[str, Any], *, indent: int) -> list[str]:
    pad = " " * indent
    out: list[str] = []
    for key, item in value.items():
        if isinstance(item, Mapping) and set(item) == {"count", "bytes"}:
            out.append(f"{pad}{key}: {item['count']} messages, {item['bytes']} bytes")
        elif isinstance(item, Mapping) and item:
            out.append(f"{pad}{key}:")
            out.extend(_render_mapping(item, indent=indent + 2))
        else:
            out.append(f"{pad}{key}: {item}")
    return out


# ---------------------------------------------------------------------------- summaries


def view_summary(store: TranscriptStore) -> dict[str, dict[str, dict[str, int]]]:
    """``{view: {message_type: {"count": n, "bytes": b}}}``, grouped in SQL (design §6.7)."""
    return store.summary(by=("view", "message_type"))


def view_lines(views: Mapping[str, Mapping[str, Mapping[str, int]]]) -> list[str]:
    """What each party saw (a :func:`view_summary`): per view its totals, then one line per
    message type with its count and bytes."""
    lines: list[str] = []
    for view, types in sorted(views.items()):
        total = sum(t["count"] for t in types.values())
        size = sum(t["bytes"] for t in types.values())
        lines.append(f"  {view}: {total} messages, {size} bytes")
        for mtype, agg in sorted(types.items()):
            lines.append(f"    {mtype:<24} {agg['count']:>10} msgs {agg['bytes']:>14} bytes")
    return lines


# ---------------------------------------------------------------------------- chunking


@dataclass(frozen=True, slots=True)
class _Chunk:
    buffer: bytes
    starts: npt.NDArray[np.int64]  # byte offset of each payload in buffer
    seqs: list[int]
    views: list[str]
    types: list[str]

    def owner(self, positions: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Index of the payload holding each byte position."""
        return np.searchsorted(self.starts, positions, side="right").astype(np.int64) - 1


@dataclass(slots=True)
class _ScanStats:
    entries: int = 0
    scanned_bytes: int = 0
    size_only: int = 0
    skipped_short: int = 0


def _views_list(views: str | Iterable[str]) -> list[str]:
    selected = [views] if isinstance(views, str) else list(views)
    if not selected or not all(isinstance(v, str) and v for v in selected):
        raise InvalidParameterError(
            f"views must be a non-empty list of view names, got {selected!r}"
        )
    return selected


def _chunks(
    store: TranscriptStore,
    views: list[str],
    stats: _ScanStats,
    *,
    min_size: int,
    chunk_bytes: int,
) -> Iterator[_Chunk]:
    parts: list[bytes] = []
    seqs: list[int] = []
    vs: list[str] = []
    ts: list[str] = []
    total = 0

    def emit() -> _Chunk:
        lengths = np.fromiter((len(p) for p in parts), dtype=np.int64, count=len(parts))
        starts = np.zeros(len(parts), dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        return _Chunk(b"".join(parts), starts, list(seqs), list(vs), list(ts))

    for seq, view, message_type, _size, payload in store.iter_payloads(view=views):
        stats.entries += 1
        if payload is None:
            stats.size_only += 1
            continue
        if len(payload) < min_size:
            stats.skipped_short += 1
            continue
        stats.scanned_bytes += len(payload)
        if parts and total + len(payload) > chunk_bytes:
            yield emit()
            for buffer in (parts, seqs, vs, ts):
                buffer.clear()
            total = 0
        parts.append(payload)
        seqs.append(seq)
        vs.append(view)
        ts.append(message_type)
        total += len(payload)
    if parts:
        yield emit()


def _unscanned_note(stats: _ScanStats) -> str:
    return f"{stats.size_only} size-only entries were not scanned" if stats.size_only else ""


# ---------------------------------------------------------------------------- forbidden content


class _Powers:
    """B^i and B^-i modulo 2^64 for i < n, grown on demand."""

    def __init__(self) -> None:
        self.n = 0
        self.pw: npt.NDArray[np.uint64] = np.zeros(0, dtype=np.uint64)
        self.ipw: npt.NDArray[np.uint64] = np.zeros(0, dtype=np.uint64)

    def ensure(self, n: int) -> None:
        if n <= self.n:
            return
        n = max(n, 2 * self.n)
        base = np.full(n, _HASH_BASE, dtype=np.uint64)
        base[0] = 1
        inv = np.full(n, pow(_HASH_BASE, -1, 1 << 64), dtype=np.uint64)
        inv[0] = 1
        # uint64 products wrap modulo 2^64, which is exactly the arithmetic wanted.
        self.pw = np.cumprod(base, dtype=np.uint64)
        self.ipw = np.cumprod(inv, dtype=np.uint64)
        self.n = n


def _needle_hashes(needles: list[bytes], length: int) -> npt.NDArray[np.uint64]:
    mat = np.frombuffer(b"".join(needles), dtype=np.uint8).reshape(len(needles), length)
    powers = np.array(
        [pow(_HASH_BASE, length - 1 - j, 1 << 64) for j in range(length)], dtype=np.uint64
    )
    total = np.zeros(len(needles), dtype=np.uint64)
    # Column by column keeps memory at O(M) and wraps modulo 2^64 like the window hashes.
    for j in range(length):
        total += mat[:, j].astype(np.uint64) * powers[j]
    return total


@dataclass(frozen=True, slots=True, kw_only=True)
class ForbiddenMatch:
    """A forbidden byte string found in a payload: where, which label, at which byte offset."""

    seq: int
    view: str
    message_type: str
    label: str
    offset: int
    length: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "view": self.view,
            "message_type": self.message_type,
            "label": self.label,
            "offset": self.offset,
            "length": self.length,
        }


class ForbiddenScanner:
    """Find any of many fixed byte strings inside payloads (see the module docstring for cost)."""

    def __init__(self, forbidden: Mapping[str, Iterable[bytes]], *, min_length: int = 4) -> None:
        if min_length < 1:
            raise InvalidParameterError(f"min_length must be >= 1, got {min_length}")
        self.labels: list[str] = []
        self.needle_counts: dict[str, int] = {}
        owners: dict[bytes, set[str]] = {}
        for label, needles in forbidden.items():
            if not isinstance(label, str) or not label:
                raise InvalidParameterError(
                    f"forbidden labels must be non-empty strings, got {label!r}"
                )
            self.labels.append(label)
            count = 0
            for needle in needles:
                if not isinstance(needle, bytes | bytearray | memoryview):
                    raise InvalidParameterError(
                        f"forbidden[{label!r}] must hold byte strings, got {type(needle).__name__}"
                    )
                data = bytes(needle)
                if len(data) < min_length:
                    raise InvalidParameterError(
                        f"forbidden[{label!r}] holds a {len(data)}-byte string; needles shorter "
                        f"than min_length={min_length} would match by chance"
                    )
                owners.setdefault(data, set()).add(label)
                count += 1
            self.needle_counts[label] = count
        self._owners = owners
        self._by_length: dict[int, npt.NDArray[np.uint64]] = {}
        self._filters: dict[int, tuple[np.uint64, npt.NDArray[np.bool_]]] = {}
        grouped: dict[int, list[bytes]] = {}
        for needle in owners:
            grouped.setdefault(len(needle), []).append(needle)
        for length, group in grouped.items():
            hashes = np.unique(_needle_hashes(group, length))
            self._by_length[length] = hashes
            # A direct-mapped bitmap on the top hash bits rejects almost every window with one
            # gather; only the survivors (false-positive rate <= 1/16) pay for a binary search.
            bits = min(26, max(12, math.ceil(math.log2(len(hashes))) + 4))
            table = np.zeros(1 << bits, dtype=bool)
            table[hashes >> np.uint64(64 - bits)] = True
            self._filters[length] = (np.uint64(64 - bits), table)
        self._powers = _Powers()

    @property
    def min_needle(self) -> int:
        return min(self._by_length, default=0)

    def _scan(self, chunk: _Chunk) -> Iterator[tuple[int, int, bytes]]:
        """(payload index, offset in payload, needle) for every occurrence in the chunk."""
        buf = chunk.buffer
        total = len(buf)
        if total == 0 or not self._by_length:
            return
        self._powers.ensure(total + 1)
        data = np.frombuffer(buf, dtype=np.uint8).astype(np.uint64)
        prefix = np.zeros(total + 1, dtype=np.uint64)
        np.cumsum(data * self._powers.ipw[:total], dtype=np.uint64, out=prefix[1:])
        owner = np.zeros(total, dtype=np.int64)
        owner[chunk.starts[1:]] = 1
        owner = np.cumsum(owner)
        for length, hashes in self._by_length.items():
            if length > total:
                continue
            windows = total - length + 1
            diff = prefix[length : length + windows] - prefix[:windows]
            window_hash = diff * self._powers.pw[length - 1 : length - 1 + windows]
            shift, table = self._filters[length]
            candidates = np.flatnonzero(table[window_hash >> shift])
            if candidates.size == 0:
                continue
            candidate_hash = window_hash[candidates]
            pos = np.searchsorted(hashes, candidate_hash)
            pos[pos == len(hashes)] = 0
            same_payload = owner[candidates] == owner[candidates + (length - 1)]
            hits = candidates[(hashes[pos] == candidate_hash) & same_payload]
            for p in hits.tolist():
                needle = buf[p : p + length]
                if needle in self._owners:
                    idx = int(owner[p])
                    yield idx, p - int(chunk.starts[idx]), needle

    def find(
        self,
        store: TranscriptStore,
        views: list[str],
        stats: _ScanStats,
        *,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    ) -> Iterator[ForbiddenMatch]:
        for chunk in _chunks(
            store, views, stats, min_size=max(self.min_needle, 1), chunk_bytes=chunk_bytes
        ):
            for idx, offset, needle in self._scan(chunk):
                for label in sorted(self._owners[needle]):
                    yield ForbiddenMatch(
                        seq=chunk.seqs[idx],
                        view=chunk.views[idx],
                        message_type=chunk.types[idx],
                        label=label,
                        offset=offset,
                        length=len(needle),
                    )


def find_forbidden_in(
    payloads: Sequence[bytes], forbidden: Mapping[str, Iterable[bytes]], *, min_length: int = 4
) -> list[tuple[int, str, int]]:
    """``(payload index, label, offset)`` of every forbidden byte string in plain payloads.

    The same scanner as :func:`check_no_forbidden_content`, for bytes that are not in a store.
    """
    scanner = ForbiddenScanner(forbidden, min_length=min_length)
    kept = [(i, bytes(p)) for i, p in enumerate(payloads) if len(p) >= max(scanner.min_needle, 1)]
    if not kept:
        return []
    lengths = np.array([len(p) for _, p in kept], dtype=np.int64)
    starts = np.zeros(len(kept), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    chunk = _Chunk(b"".join(p for _, p in kept), starts, [i for i, _ in kept], [], [])
    out: list[tuple[int, str, int]] = []
    for idx, offset, needle in scanner._scan(chunk):
        for label in sorted(scanner._owners[needle]):
            out.append((chunk.seqs[idx], label, offset))
    return out


def check_no_forbidden_content(
    store: TranscriptStore,
    *,
    views: str | Iterable[str],
    forbidden: Mapping[str, Iterable[bytes]],
    min_length: int = 4,
    max_examples: int = 10,
    allow_unscanned: bool = False,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    name_prefix: str = "no_forbidden",
) -> list[AuditFinding]:
    """One finding per label: passes iff no payload of ``views`` contains any of its byte strings.

    ``forbidden`` maps a label (``"raw_embedding"``, ``"bucket_index"``, ``"user_id"``) to the
    byte strings that must never appear. The finding's ``data`` lists up to ``max_examples``
    matches (seq, view, message_type, offset) and the total count.
    """
    selected = _views_list(views)
    scanner = ForbiddenScanner(forbidden, min_length=min_length)
    stats = _ScanStats()
    matches: dict[str, list[ForbiddenMatch]] = {label: [] for label in scanner.labels}
    totals: dict[str, int] = dict.fromkeys(scanner.labels, 0)
    entries_hit: dict[str, set[int]] = {label: set() for label in scanner.labels}
    for match in scanner.find(store, selected, stats, chunk_bytes=chunk_bytes):
        totals[match.label] += 1
        entries_hit[match.label].add(match.seq)
        if len(matches[match.label]) < max_examples:
            matches[match.label].append(match)
    findings: list[AuditFinding] = []
    unscanned = _unscanned_note(stats)
    for label in scanner.labels:
        found = totals[label]
        unscanned_fails = stats.size_only > 0 and not allow_unscanned
        passed = found == 0 and not unscanned_fails
        scope = (
            f"{scanner.needle_counts[label]} '{label}' byte strings in views {selected} "
            f"({stats.entries} entries, {stats.scanned_bytes} bytes scanned)"
        )
        if found:
            where = ", ".join(
                f"seq {m.seq} ({m.view}/{m.message_type} @{m.offset})" for m in matches[label]
            )
            detail = f"FOUND {found} occurrence(s) in {len(entries_hit[label])} entries of {scope}: {where}"
        else:
            detail = f"none of {scope}"
        if unscanned:
            detail += f"; {unscanned}"
        findings.append(
            AuditFinding(
                name=f"{name_prefix}:{label}",
                passed=passed,
                detail=detail,
                data={
                    "label": label,
                    "views": selected,
                    "needles": scanner.needle_counts[label],
                    "occurrences": found,
                    "entries_hit": len(entries_hit[label]),
                    "examples": [m.to_dict() for m in matches[label]],
                    "entries_scanned": stats.entries,
                    "bytes_scanned": stats.scanned_bytes,
                    "size_only_entries": stats.size_only,
                },
            )
        )
    return findings


# ---------------------------------------------------------------------------- float vectors


@dataclass(frozen=True, slots=True, kw_only=True)
class FloatVectorHit:
    seq: int
    view: str
    message_type: str
    offset: int
    dtype: str
    dim: int
    norm: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "view": self.view,
            "message_type": self.message_type,
            "offset": self.offset,
            "dtype": self.dtype,
            "dim": self.dim,
            "norm": self.norm,
        }


def _float_windows(
    chunk: _Chunk,
    *,
    dim: int,
    dtype: np.dtype[Any],
    norm_range: tuple[float, float],
    max_abs: float,
    min_nonzero: int,
) -> Iterator[tuple[int, int, float]]:
    """(payload index, byte offset in payload, L2 norm) of every plausible vector in the chunk."""
    size = dtype.itemsize
    buf = chunk.buffer
    lo, hi = norm_range[0] ** 2, norm_range[1] ** 2
    for align in range(size):
        count = (len(buf) - align) // size
        if count < dim:
            continue
        with np.errstate(over="ignore", invalid="ignore"):
            values = np.frombuffer(buf, dtype=dtype, count=count, offset=align).astype(np.float64)
            ok = np.isfinite(values) & (np.abs(values) <= max_abs)
            sq = np.where(ok, values * values, 0.0)
        bad = np.concatenate(([0], np.cumsum(~ok, dtype=np.int64)))
        nonzero = np.concatenate(([0], np.cumsum(ok & (values != 0.0), dtype=np.int64)))
        energy = np.concatenate(([0.0], np.cumsum(sq)))
        window_bad = bad[dim:] - bad[:-dim]
        window_nz = nonzero[dim:] - nonzero[:-dim]
        window_sq = energy[dim:] - energy[:-dim]
        candidates = np.flatnonzero(
            (window_bad == 0) & (window_nz >= min_nonzero) & (window_sq >= lo) & (window_sq <= hi)
        )
        if candidates.size == 0:
            continue
        first = align + candidates.astype(np.int64) * size
        last = first + dim * size - 1
        same = chunk.owner(first) == chunk.owner(last)
        for start, cand in zip(first[same].tolist(), candidates[same].tolist(), strict=True):
            idx = int(chunk.owner(np.array([start], dtype=np.int64))[0])
            yield idx, start - int(chunk.starts[idx]), math.sqrt(max(float(window_sq[cand]), 0.0))


def _float_scan_args(
    dim: int | Iterable[int],
    dtypes: Sequence[str],
    norm_range: tuple[float, float],
    max_abs: float,
    min_nonzero_fraction: float,
) -> tuple[list[int], list[np.dtype[Any]]]:
    """The checked dimensions and parsed dtypes of :func:`check_float_vectors`."""
    dims = [dim] if isinstance(dim, int) else list(dim)
    if not dims or any(isinstance(d, bool) or not isinstance(d, int) or d < 2 for d in dims):
        raise InvalidParameterError(f"dim must be an int >= 2 (or several), got {dim!r}")
    lo, hi = norm_range
    if not (0.0 <= lo <= hi and math.isfinite(hi)):
        raise InvalidParameterError(
            f"norm_range must satisfy 0 <= lo <= hi < inf, got {norm_range!r}"
        )
    if not max_abs > 0:
        raise InvalidParameterError(f"max_abs must be > 0, got {max_abs!r}")
    if not 0.0 <= min_nonzero_fraction <= 1.0:
        raise InvalidParameterError(
            f"min_nonzero_fraction must be in [0, 1], got {min_nonzero_fraction!r}"
        )
    try:
        parsed = [np.dtype(d) for d in dtypes]
    except TypeError as exc:
        raise InvalidParameterError(
            f"dtypes must be numpy float dtype strings, got {dtypes!r}"
        ) from exc
    if not parsed or any(d.kind != "f" for d in parsed):
        raise InvalidParameterError(f"dtypes must be float dtypes, got {list(dtypes)!r}")
    return dims, parsed


class _BestWindows:
    """Counts plausible windows and keeps, per entry, the one whose norm is closest to ``target``.

    Windows next to a real vector often pass too (one value swapped for a small neighbour), so an
    entry's best window is the one to report. Only the first ``max_examples`` entries are kept.
    """

    def __init__(self, *, target: float, max_examples: int) -> None:
        self.target = target
        self.max_examples = max_examples
        self.total = 0
        self.entries_hit: set[int] = set()
        self.best: dict[int, FloatVectorHit] = {}

    def add(
        self, chunk: _Chunk, idx: int, *, offset: int, dtype: str, dim: int, norm: float
    ) -> None:
        self.total += 1
        seq = chunk.seqs[idx]
        self.entries_hit.add(seq)
        current = self.best.get(seq)
        if current is None and len(self.best) >= self.max_examples:
            return
        if current is None or abs(norm - self.target) < abs(current.norm - self.target):
            self.best[seq] = FloatVectorHit(
                seq=seq,
                view=chunk.views[idx],
                message_type=chunk.types[idx],
                offset=offset,
                dtype=dtype,
                dim=dim,
                norm=norm,
            )

    def hits(self) -> list[FloatVectorHit]:
        return [self.best[seq] for seq in sorted(self.best)]


def _float_vector_detail(
    windows: _BestWindows, stats: _ScanStats, *, scope: str, hits: list[FloatVectorHit]
) -> str:
    if windows.total:
        where = ", ".join(
            f"seq {h.seq} ({h.view}/{h.message_type} @{h.offset} {h.dtype} norm {h.norm:.4f})"
            for h in hits
        )
        detail = (
            f"FOUND {windows.total} plausible windows of {scope.split(' (')[0]} in "
            f"{len(windows.entries_hit)} entries: {where}"
        )
    else:
        detail = f"no plausible {scope}"
    unscanned = _unscanned_note(stats)
    if unscanned:
        detail += f"; {unscanned}"
    return detail


def check_float_vectors(
    store: TranscriptStore,
    *,
    views: str | Iterable[str],
    dim: int | Iterable[int],
    dtypes: Sequence[str] = DEFAULT_FLOAT_DTYPES,
    norm_range: tuple[float, float] = (0.99, 1.01),
    max_abs: float = 1.0,
    min_nonzero_fraction: float = 0.5,
    max_examples: int = 10,
    allow_unscanned: bool = False,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    name: str = "no_float_vectors",
) -> list[AuditFinding]:
    """Flag payloads that contain what looks like a raw embedding of a known dimension.

    Heuristic [decision]: a run of ``dim`` consecutive floats (any of ``dtypes``, any byte
    offset) that are all finite, all within ``[-max_abs, max_abs]``, at least
    ``min_nonzero_fraction`` non-zero, and whose L2 norm lies in ``norm_range`` (unit-normalised
    sentence embeddings by default). Random or encrypted bytes pass these tests with probability
    about 2^-dim (each value must have a small exponent), so false alarms on ciphertexts, hashes and
    masked shares are negligible; an embedding re-encoded in another way (quantised, scaled,
    permuted across messages) is *not* caught — pair this with :func:`check_no_forbidden_content`
    on the exact encodings. Returns one finding; its ``occurrences`` counts matching windows
    (neighbouring windows of one vector often match too) and its ``examples`` give, per entry,
    the window whose norm is closest to the middle of ``norm_range``.
    """
    selected = _views_list(views)
    dims, parsed = _float_scan_args(dim, dtypes, norm_range, max_abs, min_nonzero_fraction)
    min_size = min(dims) * min(d.itemsize for d in parsed)
    stats = _ScanStats()
    lo, hi = norm_range
    windows = _BestWindows(target=(lo + hi) / 2, max_examples=max_examples)
    for chunk in _chunks(store, selected, stats, min_size=min_size, chunk_bytes=chunk_bytes):
        for d in dims:
            need = max(1, math.ceil(min_nonzero_fraction * d))
            for dt in parsed:
                for idx, offset, norm in _float_windows(
                    chunk, dim=d, dtype=dt, norm_range=norm_range, max_abs=max_abs, min_nonzero=need
                ):
                    windows.add(chunk, idx, offset=offset, dtype=dt.str, dim=d, norm=norm)
    hits = windows.hits()
    scope = (
        f"float vectors of dim {dims} ({', '.join(d.str for d in parsed)}) in views {selected} "
        f"({stats.entries} entries, {stats.scanned_bytes} bytes scanned)"
    )
    return [
        AuditFinding(
            name=name,
            passed=windows.total == 0 and (stats.size_only == 0 or allow_unscanned),
            detail=_float_vector_detail(windows, stats, scope=scope, hits=hits),
            data={
                "views": selected,
                "dims": dims,
                "dtypes": [d.str for d in parsed],
                "norm_range": list(norm_range),
                "occurrences": windows.total,
                "entries_hit": len(windows.entries_hit),
                "examples": [h.to_dict() for h in hits],
                "entries_scanned": stats.entries,
                "bytes_scanned": stats.scanned_bytes,
                "size_only_entries": stats.size_only,
            },
        )
    ]


# ---------------------------------------------------------------------------- message types


def check_message_types(
    store: TranscriptStore,
    allowed: Mapping[str, Iterable[str]],
    *,
    unlisted_views: str = "fail",
    name_prefix: str = "message_types",
) -> list[AuditFinding]:
    """One finding per view: passes iff the view saw only the message types ``allowed`` for it.

    A view that has entries but is not a key of ``allowed`` fails when ``unlisted_views="fail"``
    (the default: an unexpected party is itself a finding) and is skipped with ``"ignore"``.
    """
    if unlisted_views not in ("fail", "ignore"):
        raise InvalidParameterError(
            f"unlisted_views must be 'fail' or 'ignore', got {unlisted_views!r}"
        )
    permitted = {view: set(types) for view, types in allowed.items()}
    seen = store.summary(by=("view", "message_type"))
    findings: list[AuditFinding] = []
    for view in sorted(set(permitted) | set(seen)):
        present: dict[str, dict[str, int]] = seen.get(view, {})
        if view not in permitted:
            if unlisted_views == "ignore":
                continue
            findings.append(
                AuditFinding(
                    name=f"{name_prefix}:{view}",
                    passed=False,
                    detail=f"view {view!r} is not expected but holds types {sorted(present)}",
                    data={"view": view, "unexpected": sorted(present), "present": present},
                )
            )
            continue
        unexpected = sorted(set(present) - permitted[view])
        if unexpected:
            counts = ", ".join(f"{t} x{present[t]['count']}" for t in unexpected)
            detail = f"unexpected message types: {counts}"
        else:
            detail = f"only allowed types {sorted(present)}" if present else "no entries"
        findings.append(
            AuditFinding(
                name=f"{name_prefix}:{view}",
                passed=not unexpected,
                detail=detail,
                data={
                    "view": view,
                    "allowed": sorted(permitted[view]),
                    "unexpected": unexpected,
                    "present": present,
                },
            )
        )
    return findings


# ---------------------------------------------------------------------------- store health


def check_integrity(store: TranscriptStore) -> list[AuditFinding]:
    """Two findings: SQLite's integrity check, and whether the run was closed as ``complete``.

    A transcript left ``open`` means the writer died (it still holds a consistent prefix of the
    messages); ``aborted:<Error>`` means the run raised. Either way the audit covers only part of
    a run, so the finding fails.
    """
    errors = store.integrity_errors()
    state = store.state
    first_last = store._aggregate("min(seq), max(seq), count(*)")
    return [
        AuditFinding(
            name="store_integrity",
            passed=not errors,
            detail="SQLite integrity check ok" if not errors else "; ".join(errors[:5]),
            data={
                "errors": errors[:20],
                "seq_min": first_last[0],
                "seq_max": first_last[1],
                "entries": first_last[2],
            },
        ),
        AuditFinding(
            name="run_complete",
            passed=state == STATE_COMPLETE,
            detail=f"transcript state is {state!r}",
            data={"state": state},
        ),
    ]
