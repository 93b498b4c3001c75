"""How a fresh run of ``fre-e2t experiment`` compares with the rows docs/results publishes (issue 35).

    python scripts/results_diff.py RUN_DIR [--against docs/results] [--json OUT]

For each experiment in RUN_DIR (its ``NAME.json``, or while it runs its checkpoint
``NAME.rows.jsonl``, read as the store reads it), the published files that hold the same
experiment's rows (``NAME.json``; for ``utility`` also the every-centroid runs
``utility-all-centroids*.json``), their rows paired by what names them (method, ε, seed, level
and the experiment's own axes: :data:`IDENTITY`). For each pair of files: the rows paired, those
only in the run and those only published, and the figures of the paired rows that are the same
(to :data:`RELATIVE` relative), that differ (counted by the rows' level, centroid or text; the
largest listed) or are in one row only. Times and
commits are not compared; ``texts_sha256`` is, so a text-level row says whether the texts are the
same. The protocol and the mechanism are seeded in research mode, so a run reproduces every
figure of code that has not changed since the published rows were made, and differs where it has
(the inverter's texts since then).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fre_protocol.experiments.store import ROWS_SUFFIX, read_checkpoint  # noqa: E402

#: the fields that name a row rather than measure it
IDENTITY = ("method", "part", "level", "embedder", "to", "model", "source", "epsilon", "seed", "threshold",
            "edge_multiplier", "k", "p_sample", "budget_factor", "n_points", "temperature", "histogram_epsilon",
            "histogram_fraction")
#: published files beside NAME.json that hold rows of the same experiment (glob patterns)
ALSO = {"utility": ("utility-all-centroids*",)}
NOT_FIGURES = ("commit", "dirty")
#: figures this close are the same: the embeddings are float32, and another CPU's kernels round
#: their last bits differently (a published row made on an AVX2 machine and a run on an AVX-512
#: one differ by about 1e-8 relative in their mean distances)
RELATIVE = 1e-6
MAX_LABEL = 80  # a longer string is a text or a note, not a figure
SHOWN = 5  # largest differences listed per pair of files


def identity(row: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple((k, row[k]) for k in IDENTITY if k in row)


def figures(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row's measured fields: numbers and short strings, not its names, times, commit or texts
    (lists, long strings: ``texts_sha256`` stands for them)."""
    return {k: v for k, v in row.items()
            if k not in IDENTITY and k not in NOT_FIGURES and "seconds" not in k
            and not isinstance(v, dict | list) and not (isinstance(v, str) and len(v) > MAX_LABEL)}


def numbers(a: Any, b: Any) -> bool:
    return all(isinstance(x, int | float) and not isinstance(x, bool) for x in (a, b))


def relative(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b), 1e-300)


def same(a: Any, b: Any) -> bool:
    if not numbers(a, b):
        return bool(a == b)
    if math.isnan(a) and math.isnan(b):
        return True
    return relative(a, b) <= RELATIVE


def rows_of(path: Path) -> list[dict[str, Any]]:
    document = json.loads(path.read_text(encoding="utf-8"))
    rows = document.get("rows", []) if isinstance(document, dict) else []
    return [r for r in rows if isinstance(r, dict)]


def compare(run: Sequence[Mapping[str, Any]], published: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Pair the rows by :func:`identity` and compare their figures."""
    theirs: dict[tuple[tuple[str, Any], ...], Mapping[str, Any]] = {identity(r): r for r in published}
    ours = {identity(r): r for r in run}
    paired = [key for key in ours if key in theirs]
    equal, one_sided = 0, 0
    differ: list[dict[str, Any]] = []
    for key in paired:
        a, b = figures(theirs[key]), figures(ours[key])
        for field in sorted(a.keys() | b.keys()):
            if field not in a or field not in b:
                one_sided += 1
            elif same(a[field], b[field]):
                equal += 1
            else:
                differ.append({"row": dict(key), "field": field, "published": a[field], "run": b[field]})

    # the largest relative difference first; a string that differs counts as 0
    differ.sort(key=lambda d: relative(d["published"], d["run"]) if numbers(d["published"], d["run"]) else 0.0,
                reverse=True)
    by_level: dict[str, int] = {}
    for d in differ:
        level = str(d["row"].get("level", "rows"))
        by_level[level] = by_level.get(level, 0) + 1
    return {"paired": len(paired), "only_run": len(ours) - len(paired), "only_published": len(theirs) - len(paired),
            "figures_equal": equal, "figures_differ": len(differ), "figures_differ_by_level": by_level,
            "figures_one_sided": one_sided, "largest_differences": differ[:SHOWN]}


def published_files(name: str, against: Path) -> list[Path]:
    # a re-judging or a reader's count beside a run matches the pattern too: only a run's document names it
    also = sorted(p for pattern in ALSO.get(name, ()) for p in against.glob(f"{pattern}.json")
                  if json.loads(p.read_text(encoding="utf-8")).get("experiment") == name)
    return [p for p in (against / f"{name}.json", *also) if p.exists()]


def run_experiments(run_dir: Path) -> dict[str, tuple[str, list[dict[str, Any]]]]:
    """NAME -> (the file read, its rows): ``NAME.json`` where the experiment has finished, else
    its checkpoint ``NAME.rows.jsonl``."""
    found: dict[str, tuple[str, list[dict[str, Any]]]] = {}
    for path in sorted(run_dir.glob(f"*{ROWS_SUFFIX}")):
        found[path.name.removesuffix(ROWS_SUFFIX)] = (path.name, list(read_checkpoint(path)[1].values()))
    for path in sorted(run_dir.glob("*.json")):
        document = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(document, dict) and "experiment" in document:
            found[path.stem] = (path.name, rows_of(path))
    return found


def diff_folders(run_dir: Path, against: Path) -> list[dict[str, Any]]:
    """One entry per (experiment of the run, published file of the same experiment)."""
    return [{"run": name, "published": published.name, **compare(rows, rows_of(published))}
            for stem, (name, rows) in sorted(run_experiments(run_dir).items())
            for published in published_files(stem, against)]


def _short(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)[:40]


def markdown(entries: Iterable[Mapping[str, Any]]) -> str:
    lines = ["| run | published | rows paired | only run | only published | figures same | differ | one side "
             "| largest differences (published → run) |", "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for e in entries:
        shown = "; ".join(f"{d['field']} {dict(d['row'])}: {_short(d['published'])} → {_short(d['run'])}"
                          for d in e["largest_differences"][:2])
        levels = e["figures_differ_by_level"]
        differ = f"{e['figures_differ']}" + (f" ({', '.join(f'{k} {n}' for k, n in sorted(levels.items()))})"
                                             if set(levels) - {"rows"} else "")
        lines.append(f"| {e['run']} | {e['published']} | {e['paired']} | {e['only_run']} | {e['only_published']} "
                     f"| {e['figures_equal']} | {differ} | {e['figures_one_sided']} | {shown} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path, help="the --out folder of a `fre-e2t experiment` run")
    ap.add_argument("--against", type=Path, default=ROOT / "docs" / "results", help="published folder (default: docs/results)")
    ap.add_argument("--json", type=Path, help="also write the entries here")
    args = ap.parse_args(argv)
    if not args.run_dir.is_dir():
        ap.error(f"run_dir must be a folder of experiment JSON, got {args.run_dir}")
    entries = diff_folders(args.run_dir, args.against)
    print(markdown(entries))
    if args.json:
        args.json.write_text(json.dumps(entries, indent=1, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
