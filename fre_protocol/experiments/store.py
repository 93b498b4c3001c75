"""Rows of an experiment, checkpointed one by one so that a long run resumes where it stopped.

``DIR/NAME.rows.jsonl`` starts with a header line naming the configuration the rows belong to (its
fingerprint: data, parameters, sizes); each further line is one finished unit of work, ``{"key":
..., "row": ...}``. A unit whose key is already there is not run again. A file written under another
configuration is refused rather than mixed in. Appends are flushed and fsynced line by line, and a
torn last line (a crash mid-write) is dropped on reading, so no finished row is ever lost.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from primitives.errors import InvalidInputError
from primitives.jsonsafe import json_safe

ROWS_SUFFIX = ".rows.jsonl"
UNIT_SECONDS = "unit_seconds"


def canonical_key(key: Mapping[str, Any]) -> str:
    return json.dumps(json_safe(dict(key)), sort_keys=True, allow_nan=False)


def read_checkpoint(path: Path) -> tuple[Any, dict[str, dict[str, Any]]]:
    """A checkpoint's fingerprint and its finished rows by :func:`canonical_key`, read only (a run
    may still be appending to it); a line torn by a crash is left out: that unit simply runs again."""
    lines = path.read_text(encoding="utf-8").splitlines()
    try:
        header = json.loads(lines[0]) if lines else None
    except json.JSONDecodeError:
        header = None
    if not isinstance(header, dict) or "fingerprint" not in header:
        raise InvalidInputError(f"{path.name} is not an experiment checkpoint (no header line)")
    rows: dict[str, dict[str, Any]] = {}
    for line in lines[1:]:
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        rows[canonical_key(entry["key"])] = entry["row"]
    return header["fingerprint"], rows


class RowStore:
    """The finished rows of one experiment in one output folder."""

    def __init__(self, path: Path, fingerprint: Mapping[str, Any], *, log: Callable[[str], Any] | None = None,
                 stamp: Mapping[str, Any] | None = None) -> None:
        self.path = path
        self.log = log
        # fields every newly computed row carries (the code's commit): a resumed row keeps its own
        self.stamp = json_safe(dict(stamp or {}))
        self.fingerprint = json_safe(dict(fingerprint))
        self._rows: dict[str, dict[str, Any]] = {}
        self.resumed = 0
        if path.exists():
            self._load()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._append({"fingerprint": self.fingerprint})

    def _load(self) -> None:
        fingerprint, self._rows = read_checkpoint(self.path)
        if fingerprint != self.fingerprint:
            raise InvalidInputError(
                f"{self.path.name} holds rows of another configuration ({_difference(fingerprint, self.fingerprint)}); "
                "use another --out folder or --restart"
            )
        self.resumed = len(self._rows)
        with self.path.open("w", encoding="utf-8") as fh:  # rewrite without torn lines
            fh.write(json.dumps({"fingerprint": self.fingerprint}) + "\n")
            for key, row in self._rows.items():
                fh.write(json.dumps({"key": json.loads(key), "row": row}, allow_nan=False) + "\n")

    def _append(self, entry: Mapping[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(json_safe(dict(entry)), allow_nan=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def __contains__(self, key: Mapping[str, Any]) -> bool:
        return canonical_key(key) in self._rows

    def get_or_run(self, key: Mapping[str, Any], compute: Callable[[], Mapping[str, Any]]) -> dict[str, Any]:
        """The row stored under ``key``, or ``compute()``'s, stored first (with the key's fields)."""
        if key not in self:
            start = time.perf_counter()
            row = compute()
            self.put(key, row, seconds=time.perf_counter() - start)
        return self.get(key)

    def put(self, key: Mapping[str, Any], row: Mapping[str, Any], *, seconds: float) -> None:
        """Store ``row`` (with the key's fields) under ``key``, ``seconds`` being what computing it cost
        (a unit computed in a batch is charged its share)."""
        stored = json_safe({**dict(key), **dict(row)})
        stored.update({name: value for name, value in self.stamp.items() if name not in stored})
        stored[UNIT_SECONDS] = seconds  # what the unit cost, kept across resumes
        if self.log is not None:  # one line per finished unit: the progress of a long run
            what = " ".join(f"{name}={value}" for name, value in json_safe(dict(key)).items())
            self.log(f"  {self.path.name.removesuffix(ROWS_SUFFIX)}: {what} ({seconds:.1f} s)")
        self._append({"key": json_safe(dict(key)), "row": stored})
        self._rows[canonical_key(key)] = stored

    def get(self, key: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of the row stored under ``key`` (KeyError when there is none)."""
        return dict(self._rows[canonical_key(key)])

    def rows(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self._rows.values()]

    def compute_seconds(self) -> float:
        """Seconds the stored units took when they were computed (in whichever run that was)."""
        return float(sum(r.get(UNIT_SECONDS, 0.0) for r in self._rows.values()))


def _difference(old: Any, new: Any) -> str:
    if isinstance(old, dict) and isinstance(new, dict):
        keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        return ", ".join(f"{k}: {old.get(k)!r} then, {new.get(k)!r} now" for k in keys[:3])
    return "different header"
