"""Write the known-answer vectors of primitives.compact (see README.md in this folder).

Run from the repository root with the project's Python: ``.venv/bin/python
tests/vectors/compact/generate.py``. The output is a function of the code alone (fixed tags,
counts and seeds; sorted keys), so running it on an unchanged tree rewrites the file byte for
byte; it prints the file's sha256 for the README and ``tests/support/known_answers.py``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from primitives.compact.broadcast import FullListBroadcast, FuseBroadcast  # noqa: E402
from primitives.compact.fuse import FuseFilter, FuseRetrieval, key64  # noqa: E402
from primitives.compact.ribbon import RibbonBroadcast  # noqa: E402
from primitives.compact.ribbon_classes import RibbonClassesBroadcast  # noqa: E402

OUT = Path(__file__).resolve().parent / "broadcast.json"
FORMAT = 1


def tag(label: str, i: int) -> bytes:
    """A fixed 32-byte tag: SHA-256 of ``label || u32 i`` (no randomness)."""
    return hashlib.sha256(label.encode() + i.to_bytes(4, "big")).digest()


def released(n: int, label: str) -> list[tuple[bytes, int]]:
    """n fixed tags with counts 1 + (37 i^2 mod 2000), some needing 16 bits."""
    return [(tag(label, i), 1 + (37 * i * i) % 2000) for i in range(n)]


def probes(label: str, members: list[bytes], absent: int = 5) -> list[bytes]:
    """Three members and ``absent`` (five unless told) non-members to query."""
    return members[:3] + [tag(label + "/absent", i) for i in range(absent)]


def fuse_case(n: int, bits: int, seed: bytes, label: str) -> dict[str, Any]:
    pairs = released(n, label)
    data = FuseBroadcast(bits).build(pairs, seed)
    loaded = FuseBroadcast(bits).load(data)
    queries = [
        {"tag": t.hex(), "key64": f"{key64(t):016x}", "answer": loaded.query(t)}
        for t in probes(label, [t for t, _ in pairs])
    ]
    return {
        "name": f"fuse broadcast, {n} tags, {bits}-bit fingerprints",
        "encoding": "fuse",
        "fingerprint_bits": bits,
        "seed": seed.hex(),
        "released": [[t.hex(), c] for t, c in pairs],
        "layout": {
            "seed": loaded.filter.layout.seed,
            "segment_length": loaded.filter.layout.segment_length,
            "segment_count": loaded.filter.layout.segment_count,
            "count_bits": loaded.counts.width,
        },
        "bytes": data.hex(),
        "sha256": hashlib.sha256(data).hexdigest(),
        "queries": queries,
    }


def ribbon_case(n: int, bits: int, seed: bytes, label: str) -> dict[str, Any]:
    pairs = released(n, label)
    data = RibbonBroadcast(bits).build(pairs, seed)
    loaded = RibbonBroadcast(bits).load(data)
    return {
        "name": f"ribbon broadcast, {n} tags, {bits}-bit fingerprints",
        "encoding": "ribbon",
        "fingerprint_bits": bits,
        "seed": seed.hex(),
        "released": [[t.hex(), c] for t, c in pairs],
        "layout": {"seed": loaded.seed, "slots": loaded.m, "count_bits": loaded.count_bits},
        "bytes": data.hex(),
        "sha256": hashlib.sha256(data).hexdigest(),
        "queries": [
            {"tag": t.hex(), "key64": f"{key64(t):016x}", "answer": loaded.query(t)}
            for t in probes(label, [t for t, _ in pairs])
        ],
    }


def ribbon_classes_case(
    n: int,
    fingerprint_bits: int,
    class_bits: int,
    seed: bytes,
    label: str,
    *,
    extra_members: int = 0,
    absent: int = 5,
) -> dict[str, Any]:
    """``extra_members`` more released tags (every 10th from the fourth) are queried, so a case
    whose counts are rounded answers some members below their count; ``absent`` non-members, so
    a case with few fingerprint bits answers some non-members with a class's floor."""
    pairs = released(n, label)
    encoding = RibbonClassesBroadcast(fingerprint_bits, class_bits)
    data = encoding.build(pairs, seed)
    loaded = encoding.load(data)
    members = [t for t, _ in pairs]
    queried = probes(label, members, absent) + members[3::10][:extra_members]
    return {
        "name": f"ribbon-classes broadcast, {n} tags, {fingerprint_bits}-bit fingerprints, {class_bits}-bit classes",
        "encoding": "ribbon-classes",
        "fingerprint_bits": fingerprint_bits,
        "class_bits": class_bits,
        "seed": seed.hex(),
        "released": [[t.hex(), c] for t, c in pairs],
        "layout": {"seed": loaded.seed, "slots": loaded.m},
        "floors": loaded.floors,
        "bytes": data.hex(),
        "sha256": hashlib.sha256(data).hexdigest(),
        "queries": [
            {"tag": t.hex(), "key64": f"{key64(t):016x}", "answer": loaded.query(t)}
            for t in queried
        ],
    }


def structure_case(n: int, kind: str, width: int, seed: bytes, label: str) -> dict[str, Any]:
    pairs = released(n, label)
    if kind == "filter":
        data = FuseFilter.build([t for t, _ in pairs], seed, width=width).to_bytes()
        f = FuseFilter.from_bytes(data)
        answers = [t in f for t in probes(label, [t for t, _ in pairs])]
    else:
        data = FuseRetrieval.build(pairs, seed, width=width).to_bytes()
        r = FuseRetrieval.from_bytes(data)
        answers = [r[t] for t in probes(label, [t for t, _ in pairs])]
    return {
        "name": f"fuse {kind}, {n} keys, {width}-bit slots",
        "encoding": kind,
        "width": width,
        "seed": seed.hex(),
        "released": [[t.hex(), c] for t, c in pairs],
        "bytes": data.hex(),
        "sha256": hashlib.sha256(data).hexdigest(),
        "queries": [
            {"tag": t.hex(), "answer": a}
            for t, a in zip(probes(label, [t for t, _ in pairs]), answers, strict=True)
        ],
    }


def full_case(n: int, label: str) -> dict[str, Any]:
    pairs = released(n, label)
    data = FullListBroadcast().build(pairs, b"")
    loaded = FullListBroadcast().load(data)
    return {
        "name": f"full list, {n} tags",
        "encoding": "full-list",
        "seed": "",
        "released": [[t.hex(), c] for t, c in pairs],
        "bytes": data.hex(),
        "sha256": hashlib.sha256(data).hexdigest(),
        "queries": [
            {"tag": t.hex(), "answer": loaded.query(t)}
            for t in probes(label, [t for t, _ in pairs])
        ],
    }


def main() -> None:
    seed = b"fre-e2t compact KAT seed"
    cases = [
        fuse_case(0, 16, seed, "kat/empty"),
        fuse_case(1, 16, seed, "kat/one"),
        fuse_case(12, 16, seed, "kat/12"),
        fuse_case(12, 32, seed, "kat/12"),
        fuse_case(100, 16, seed, "kat/100"),
        ribbon_case(0, 16, seed, "kat/empty"),
        ribbon_case(12, 16, seed, "kat/12"),
        ribbon_case(12, 32, seed, "kat/12"),
        ribbon_case(100, 16, seed, "kat/100"),
        ribbon_classes_case(0, 27, 8, seed, "kat/empty"),
        ribbon_classes_case(12, 27, 8, seed, "kat/12"),
        ribbon_classes_case(100, 27, 8, seed, "kat/100"),
        ribbon_classes_case(300, 27, 4, seed, "kat/300", extra_members=12),
        ribbon_classes_case(12, 3, 4, seed, "kat/12", absent=40),
        structure_case(12, "filter", 8, seed, "kat/12"),
        structure_case(12, "filter", 16, seed, "kat/12"),
        structure_case(12, "filter", 32, seed, "kat/12"),
        structure_case(12, "retrieval", 16, seed, "kat/12"),
        full_case(12, "kat/12"),
    ]
    document = {
        "format": FORMAT,
        "description": (
            "Known answers of primitives.compact: fixed tags (SHA-256 of label || u32 i) with"
            " counts 1 + (37 i^2 mod 2000), a fixed public seed; each case's exact bytes and the"
            " answers to three member and five non-member queries."
        ),
        "cases": cases,
    }
    text = json.dumps(document, indent=1, sort_keys=True) + "\n"
    OUT.write_text(text, encoding="utf-8")
    print(f"{OUT.name}: {hashlib.sha256(text.encode()).hexdigest()}")


if __name__ == "__main__":
    main()
