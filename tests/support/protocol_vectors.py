"""Recorded protocol runs as test vectors (tests/vectors/protocol): the format, an in-process
driver, and :func:`replay_vector`, which checks any driver against a vector.

A vector holds a seeded run's inputs, every message its transcript recorded (``operations``, in
recording order, every view), the release, and optionally failing cases: messages injected on
the network (through the proxy's adversary hook) that a party must refuse with a typed status.
The shape follows the CFRG VDAF reference's ``test_vec`` files: a list of protocol steps, with
failing cases beside the passing ones.

A driver is a callable ``run(inputs, injections) -> Observed``: it plays the protocol on the
vector's inputs, delivers the injections, and returns what its transcripts recorded and what it
released. :func:`run_in_process` is the one for :func:`fre_protocol.drivers.inprocess.run_protocol`;
``network_vectors.run_network`` plays a local networked deployment, replayed with
``ordering="per_view_multiset"`` since its batching reorders messages within a view.
"""

from __future__ import annotations

import hashlib
import math
import re
import tempfile
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from fre_protocol.drivers.inprocess import run_protocol
from fre_protocol.messages import Role
from fre_protocol.roles.config import ProtocolConfig, RoundSpec, RunOptions
from fre_protocol.roles.proxy import NetworkAdversary
from mechanism.params import FreParams
from mechanism.release import Release
from mechanism.seeds import SeedPlan
from transcripts import ACCEPTED, TranscriptStore

VECTOR_DIR = Path(__file__).resolve().parents[1] / "vectors" / "protocol"
#: Bumped when the layout of a vector file changes.
FORMAT = 1

FORWARD = "forward"
RESPONSE = "response"
HOOKS = (FORWARD, RESPONSE)

Ordering = Literal["sequence", "per_view_multiset"]
ORDERINGS: tuple[str, ...] = ("sequence", "per_view_multiset")


@dataclass(frozen=True, slots=True, kw_only=True)
class Operation:
    """One transcript entry: a message as one party's view recorded it. ``payload`` is hex, or
    None for a size-only record (then ``size`` is the wire size)."""

    view: str
    phase: str
    sender: str
    receiver: str
    message_type: str
    payload: str | None
    size: int
    status: str

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Operation:
        payload = data["payload"]
        size = len(payload) // 2 if payload is not None else int(data["size"])
        return cls(
            view=data["view"], phase=data["phase"], sender=data["sender"], receiver=data["receiver"],
            message_type=data["type"], payload=payload, size=size, status=data["status"],
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "view": self.view, "phase": self.phase, "sender": self.sender, "receiver": self.receiver,
            "type": self.message_type, "payload": self.payload, "status": self.status,
        }
        if self.payload is None:
            out["size"] = self.size
        return out

    def where(self) -> str:
        return f"view {self.view}, phase {self.phase}, type {self.message_type}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Injection:
    """A message put on the network at the proxy. ``forward``: appended, as sent by ``sender``
    on ``connection``, to the batch of ``phase`` before the proxy relays it. ``response``:
    replaces the server's answer to ``connection`` in ``phase`` before the user gets it."""

    hook: str
    phase: str
    connection: int
    sender: str
    data: bytes

    def __post_init__(self) -> None:
        if self.hook not in HOOKS:
            raise ValueError(f"hook must be one of {list(HOOKS)}, got {self.hook!r}")

    @classmethod
    def from_case(cls, case: Mapping[str, Any]) -> Injection:
        return cls(
            hook=case["hook"], phase=case["phase"], connection=int(case["connection"]),
            sender=case["sender"], data=bytes.fromhex(case["input"]),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Observed:
    """What a driver recorded (every view's entries, in recording order) and released
    (:func:`release_record`)."""

    operations: list[Operation]
    release: dict[str, Any]


Driver = Callable[[Mapping[str, Any], Sequence[Injection]], Observed]


class VectorAdversary(NetworkAdversary):
    """Delivers a vector's injections through the proxy's adversary hook, nothing else."""

    def __init__(self, injections: Sequence[Injection]) -> None:
        self._injections = list(injections)

    def on_forward(self, phase: str, items: list[tuple[int, Role, bytes]]) -> list[tuple[int, Role, bytes]]:
        extra = [
            (i.connection, Role[i.sender.upper()], i.data)
            for i in self._injections
            if i.hook == FORWARD and i.phase == phase
        ]
        return items + extra

    def on_response(self, phase: str, pairs: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
        replaced = {i.connection: i.data for i in self._injections if i.hook == RESPONSE and i.phase == phase}
        return [(conn, replaced.get(conn, data)) for conn, data in pairs]


def recorded_config(inputs: Mapping[str, Any]) -> ProtocolConfig:
    """The vector's ``ProtocolConfig`` (:meth:`ProtocolConfig.from_dict`: a config recorded before
    ``ddg_accountant`` existed replays with KLS21's RDP accountant, which calibrated it)."""
    return ProtocolConfig.from_dict(inputs["config"])


# -- the in-process driver --------------------------------------------------------------------------
def protocol_round(inputs: Mapping[str, Any]) -> tuple[npt.NDArray[np.float64], RoundSpec]:
    """:func:`run_protocol`'s embeddings and round from a vector's ``inputs``."""
    x = np.asarray(inputs["embeddings"], dtype=np.float64)
    return x, RoundSpec(
        params=FreParams.from_dict(inputs["params"]),
        seeds=SeedPlan.from_seed(int(inputs["seed"])),
        noise=bool(inputs["noise"]),
        components=dict(inputs["components"]),
        workers=int(inputs["workers"]),
        config=recorded_config(inputs),
    )


def run_in_process(inputs: Mapping[str, Any], injections: Sequence[Injection] = ()) -> Observed:
    """Play the vector's inputs through :func:`run_protocol` and read its transcript back."""
    adversary = VectorAdversary(injections) if injections else None
    with tempfile.TemporaryDirectory(prefix="fre-protocol-vector-") as out:
        x, spec = protocol_round(inputs)
        result = run_protocol(x, spec, RunOptions(out_dir=out), adversary=adversary)
        assert result.transcript_path is not None
        with TranscriptStore.open(result.transcript_path) as store:
            operations = [
                Operation(
                    view=e.view, phase=e.phase, sender=e.sender, receiver=e.receiver,
                    message_type=e.message_type, payload=e.payload.hex() if e.payload_recorded else None,
                    size=e.size, status=e.status,
                )
                for e in store.entries()
            ]
    return Observed(operations=operations, release=release_record(result.release))


def release_record(release: Release) -> dict[str, Any]:
    """Bucket ids and counts, and each centroid as the hex of its little-endian float64 bytes
    (exact: a decimal rendering could hide a last-bit change)."""
    centroids = np.ascontiguousarray(release.centroids, dtype="<f8")
    return {
        "buckets": [{"id": b.id, "count": int(b.count)} for b in release.buckets],
        "centroids": [row.tobytes().hex() for row in centroids],
    }


# -- replay -----------------------------------------------------------------------------------------
def replay_vector(vector: Mapping[str, Any], run: Driver, *, ordering: Ordering = "sequence") -> None:
    """Replay ``vector`` with the driver ``run``; AssertionError at the first difference.

    The honest run must record exactly the vector's operations (``sequence``: entry by entry,
    in order; ``per_view_multiset``: the same entries per view, in any order) and release
    exactly its buckets and centroids. With failing cases, a second run delivers them: it must
    reject exactly those messages, each recorded with its party, phase, payload and typed status
    (``sequence`` also checks where in the transcript), and release the vector's release for it.
    """
    if ordering not in ORDERINGS:
        raise ValueError(f"ordering must be one of {list(ORDERINGS)}, got {ordering!r}")
    if vector.get("format") != FORMAT:
        raise AssertionError(f"vector format must be {FORMAT}, got {vector.get('format')!r}")
    inputs = vector["inputs"]
    honest = run(inputs, ())
    compare_operations(
        [Operation.from_dict(o) for o in vector["operations"]], honest.operations, ordering=ordering
    )
    compare_release(vector["release"], honest.release, what="release")
    failing = vector.get("failing")
    if failing is None:
        return
    cases = failing["cases"]
    attacked = run(inputs, [Injection.from_case(c) for c in cases])
    compare_rejections(cases, attacked.operations, ordering=ordering)
    compare_release(failing["release"], attacked.release, what="release under the failing cases")


def compare_operations(expected: Sequence[Operation], got: Sequence[Operation], *, ordering: Ordering) -> None:
    """``got`` must equal ``expected``: entry by entry (``sequence``; the error names the index,
    view, phase and type of the first difference), or as one multiset per view."""
    if ordering == "sequence":
        for index, (want, have) in enumerate(zip(expected, got, strict=False)):
            if want != have:
                raise AssertionError(f"operation {index} ({want.where()}): {_difference(want, have)}")
        if len(expected) != len(got):
            index = min(len(expected), len(got))
            extra = (expected if len(expected) > len(got) else got)[index]
            kind = "missing from the run" if len(expected) > len(got) else "not in the vector"
            raise AssertionError(
                f"operation {index} ({extra.where()}) is {kind}: the vector has {len(expected)} "
                f"operations, the run recorded {len(got)}"
            )
        return
    views = sorted({o.view for o in expected} | {o.view for o in got})
    for view in views:
        wanted = Counter(o for o in expected if o.view == view)
        recorded = Counter(o for o in got if o.view == view)
        if wanted != recorded:
            missing, unexpected = wanted - recorded, recorded - wanted
            parts = [f"view {view}: {sum(missing.values())} operations missing, {sum(unexpected.values())} unexpected"]
            for label, side in (("first missing", missing), ("first unexpected", unexpected)):
                if side:
                    first = next(o for o in (expected if side is missing else got) if o in side)
                    parts.append(f"{label}: phase {first.phase}, type {first.message_type}, "
                                 f"status {first.status}, payload {_short(first.payload)}")
            raise AssertionError("; ".join(parts))


def compare_rejections(cases: Sequence[Mapping[str, Any]], got: Sequence[Operation], *, ordering: Ordering) -> None:
    """The run's rejected entries must be exactly the cases' recorded entries."""
    rejected = [(index, o) for index, o in enumerate(got) if o.status != ACCEPTED]
    expected = sorted(((int(c["seq"]), c) for c in cases), key=lambda pair: pair[0])
    if ordering == "per_view_multiset":
        want = Counter(Operation.from_dict(c["recorded"]) for _, c in expected)
        have = Counter(o for _, o in rejected)
        for _, case in expected:
            op = Operation.from_dict(case["recorded"])
            if have[op] < want[op]:
                raise AssertionError(f"failing case {case['name']!r} ({op.where()}): no entry with status {op.status}")
        surplus = have - want
        if surplus:
            index, extra = next((i, o) for i, o in rejected if o in surplus)
            raise AssertionError(f"operation {index} ({extra.where()}) was rejected ({extra.status}) but no failing case says so")
        return
    for (seq, case), (index, op) in zip(expected, rejected, strict=False):
        want_op = Operation.from_dict(case["recorded"])
        if (seq, want_op) != (index, op):
            raise AssertionError(
                f"failing case {case['name']!r}: expected operation {seq} ({want_op.where()}, "
                f"{want_op.status}); the run's next rejection is operation {index} ({op.where()}): "
                f"{_difference(want_op, op) if seq == index else op.status}"
            )
    if len(expected) > len(rejected):
        seq, case = expected[len(rejected)]
        want_op = Operation.from_dict(case["recorded"])
        raise AssertionError(f"failing case {case['name']!r} (operation {seq}, {want_op.where()}) was not rejected")
    if len(rejected) > len(expected):
        index, op = rejected[len(expected)]
        raise AssertionError(f"operation {index} ({op.where()}) was rejected ({op.status}) but no failing case says so")


def compare_release(expected: Mapping[str, Any], got: Mapping[str, Any], *, what: str) -> None:
    """The same buckets (ids, counts, in order) and the same centroids to the last few bits.

    The integer sums a centroid decodes are compared exactly (the aggregate shares are among the
    operations); the decode itself is floating point (a rotation and sums whose rounding depends
    on the CPU's vector width), so its last bits may differ between machines."""
    want_ids = [(b["id"], b["count"]) for b in expected["buckets"]]
    have_ids = [(b["id"], b["count"]) for b in got["buckets"]]
    if want_ids != have_ids:
        raise AssertionError(f"{what}: buckets (id, count) must be {want_ids}, got {have_ids}")
    for row, (want, have) in enumerate(zip(expected["centroids"], got["centroids"], strict=True)):
        if not np.allclose(_row(want), _row(have), rtol=1e-12, atol=1e-12):
            raise AssertionError(
                f"{what}: centroid {row} (bucket {want_ids[row][0][:16]}…) must be {_floats(want)}, "
                f"got {_floats(have)}"
            )


def _difference(want: Operation, have: Operation) -> str:
    fields = ("view", "phase", "sender", "receiver", "message_type", "status", "size", "payload")
    for name in fields:
        a, b = getattr(want, name), getattr(have, name)
        if a != b:
            if name == "payload" and a is not None and b is not None:
                at = next(i for i in range(len(a) // 2) if a[2 * i : 2 * i + 2] != b[2 * i : 2 * i + 2])
                start = max(0, at - 4)
                window = slice(2 * start, 2 * start + 32)
                return (
                    f"payload differs at byte {at} of {len(a) // 2}: from byte {start}, expected "
                    f"{a[window]}…, got {b[window]}…"
                )
            return f"{name} must be {a!r}, got {b!r}"
    return "equal"


def _short(payload: str | None) -> str:
    if payload is None:
        return "(size only)"
    return payload[:32] + ("…" if len(payload) > 32 else "") + f" ({len(payload) // 2} bytes)"


def _row(hex_row: str) -> np.ndarray:
    return np.frombuffer(bytes.fromhex(hex_row), dtype="<f8")


def _floats(hex_row: str) -> str:
    values = _row(hex_row)
    return "[" + ", ".join(repr(float(v)) if math.isfinite(v) else str(v) for v in values[:4]) + (", …]" if len(values) > 4 else "]")


# -- files ------------------------------------------------------------------------------------------
_CHECKSUM = re.compile(r"^- `(?P<name>[^`]+\.json)`: `(?P<sha>[0-9a-f]{64})`$", re.MULTILINE)


def readme_checksums(readme: Path = VECTOR_DIR / "README.md") -> dict[str, str]:
    """``file name -> sha256`` as the README lists them (lines ``- `name.json`: `<sha256>```)."""
    return {m["name"]: m["sha"] for m in _CHECKSUM.finditer(readme.read_text(encoding="utf-8"))}


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


__all__ = [
    "FORMAT",
    "FORWARD",
    "RESPONSE",
    "VECTOR_DIR",
    "Driver",
    "Injection",
    "Observed",
    "Operation",
    "VectorAdversary",
    "compare_operations",
    "compare_rejections",
    "compare_release",
    "protocol_round",
    "readme_checksums",
    "release_record",
    "replay_vector",
    "run_in_process",
    "sha256_of",
]
