"""Results pages rendered from the experiments' JSON, and re-rendered from it alone.

Every table on a page is written by the code, never by hand: ``fre-e2t experiment`` writes
``NAME.md`` from the document it has just written as ``NAME.json``, and ``fre-e2t experiment
report --from DIR`` renders every page of ``DIR`` again from the JSON, without rerunning anything.
A rendered part of a page sits between two markers::

    <!-- rendered from NAME.json (PART) by fre-e2t experiment report: edit outside these markers only -->
    ...
    <!-- end of rendered part -->

where PART is ``head`` (title, data line, where the rows came from), ``data`` (the same without
the title, for a page with its own), ``body`` (the evaluation label, notes, tables and figure),
``tables`` (the experiment's tables alone) or ``compare`` (tables that set columns of several
runs' rows side by side; NAME.json is then a spec naming each column's JSON, method and label,
see :func:`compare`). What lies outside the markers is prose written by
hand (readings, caveats) and is kept as it is; a page with no marker is hand-written throughout.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fre_protocol.experiments import EXPERIMENTS, get_experiment, reference
from fre_protocol.experiments.store import UNIT_SECONDS
from fre_protocol.experiments.tables import (
    cell,
    epsilon_label,
    markdown_table,
    mean_std,
    sorted_values,
)
from fre_protocol.outputs import write_atomically_text
from primitives.errors import InvalidInputError, InvalidParameterError

PARTS = ("head", "data", "body", "tables", "compare")
RENDER_COMMAND = "fre-e2t experiment report --from"
_BEGIN = "<!-- rendered from {source} ({part}) by fre-e2t experiment report: edit outside these markers only -->"
_END = "<!-- end of rendered part -->"
_BLOCK = re.compile(
    r"<!-- rendered from (?P<source>[^ ]+\.json) \((?P<part>[a-z]+)\) by fre-e2t experiment report: "
    r"edit outside these markers only -->\n(?P<content>.*?)" + re.escape(_END) + r"\n",
    re.DOTALL,
)
MANIFEST_FILE = "manifest.json"  # written by report.write_manifest


def block(source: str, part: str, content: str) -> str:
    """``content`` between the markers that let :func:`rerender` find and replace it."""
    if part not in PARTS:
        raise InvalidParameterError(f"part must be one of {list(PARTS)}, got {part!r}")
    return f"{_BEGIN.format(source=source, part=part)}\n{content.rstrip(chr(10))}\n\n{_END}\n"


def _short(commit: str) -> str:
    return commit[:10] if re.fullmatch(r"[0-9a-f]{40}", commit) else commit


def _commands_naming(name: str, manifest: Mapping[str, Any]) -> list[str]:
    """The commands of an older manifest (no per-experiment record) whose NAME list holds ``name``."""
    found = []
    for command in manifest.get("commands", []):
        words = shlex.split(command)
        if len(words) > 2 and words[:2] == ["fre-e2t", "experiment"] and name in words[2].split(","):
            found.append(command)
    return found


def provenance_line(document: Mapping[str, Any], source: str, folder: Path) -> str:
    """One line: the JSON the page comes from, the command and commit that made its rows."""
    made = document.get("provenance")
    if isinstance(made, Mapping):
        commit = str(made.get("commit", "unknown"))
        state = "" if commit == "unknown" else " (with uncommitted changes)" if made.get("dirty") else ""
        where = f"at commit `{_short(commit)}`{state}" if commit != "unknown" else "at an unknown commit (no git checkout, or no git)"
        older = [c for c in made.get("row_commits", []) if c != commit]
        resumed = f"; some rows resumed from commit {', '.join(f'`{_short(c)}`' for c in older)}" if older else ""
        unstamped = made.get("rows_without_commit", 0)
        if unstamped:
            resumed += f"; {unstamped} rows resumed from a run that recorded no commit"
        return (f"*Rows: `{source}`, made by `{made.get('command') or 'not recorded'}` {where}{resumed}. "
                f"This page is rendered from them by `{RENDER_COMMAND} DIR`.*")
    commands = [document["command"]] if isinstance(document.get("command"), str) else []
    recorded = f"`{source}` records it"
    if not commands and (folder / MANIFEST_FILE).is_file():
        manifest = json.loads((folder / MANIFEST_FILE).read_text(encoding="utf-8"))
        # only a manifest that lists this very file speaks for it (another run may share the name)
        if any(source in entry.get("files", []) for entry in manifest.get("experiments", [])):
            commands = _commands_naming(str(document.get("experiment", "")), manifest)
            recorded = f"{MANIFEST_FILE} records the commands that name it"
    if not commands:
        return (f"*Rows: `{source}`, which records neither the command nor the commit that made them (the text "
                f"of this page gives them where they are known). This page is rendered from them by "
                f"`{RENDER_COMMAND} DIR`.*")
    made_by = f"{'; then '.join(f'`{c}`' for c in commands)} ({recorded})"
    return (f"*Rows: `{source}`, made by {made_by}; the commit was not recorded. "
            f"This page is rendered from them by `{RENDER_COMMAND} DIR`.*")


def data_line(document: Mapping[str, Any]) -> str:
    settings = document.get("settings") or {}
    data = document.get("data")
    if data is None:  # documents written before "data" was recorded
        name = document.get("experiment")
        data = (get_experiment(name).data if name in EXPERIMENTS else None) or settings.get("data")
    limit = settings.get("limit")
    seeds = ", ".join(map(str, settings.get("seeds", [])))
    return (f"Data: {data}" + (f" ({limit} texts)" if limit else "")
            + f"; seeds {seeds}; mean ± std over seeds; {time_phrase(document)}"
            + (" (--quick)" if settings.get("quick") else "") + ".")


def rows_seconds(document: Mapping[str, Any]) -> float:
    """The rows' own times (what computing each cost, kept across resumes), summed."""
    return sum(float(row.get(UNIT_SECONDS) or 0.0) for row in document.get("rows") or [])


def resumed(document: Mapping[str, Any]) -> bool:
    """Whether the call that wrote the document took rows from an earlier call's checkpoint, as it
    recorded (``rows_resumed``); for documents written before that was recorded, whether the rows
    took longer than the call (a guess: a row's time can also count work shared with others)."""
    if "rows_resumed" in document:
        return int(document["rows_resumed"]) > 0
    return rows_seconds(document) > float(document.get("wall_seconds", 0.0)) + 1.0


def seconds_spent(document: Mapping[str, Any]) -> float:
    """The call's wall time, or for a resumed run the rows' own time (the last call's leaves out
    every row an earlier call computed)."""
    return rows_seconds(document) if resumed(document) else float(document.get("wall_seconds", 0.0))


def time_phrase(document: Mapping[str, Any]) -> str:
    """The call's wall time; for a resumed run, also its rows' own times summed across the calls."""
    wall = float(document.get("wall_seconds", 0.0))
    if not resumed(document):
        return f"wall time {wall:.0f} s"
    return f"rows' own time {rows_seconds(document):.0f} s over more than one call (wall time of the last call {wall:.0f} s)"


def tables(document: Mapping[str, Any]) -> str:
    name = document.get("experiment")
    if name not in EXPERIMENTS:
        raise InvalidInputError(f"the document's experiment must be one of {list(EXPERIMENTS)}, got {name!r}")
    rows = document.get("rows") or []
    return get_experiment(name).render(rows) if rows else "No rows.\n"


def compare(spec: Mapping[str, Any], folder: Path, page: str = "the page") -> str:
    """Tables that set runs side by side, from a spec (no figure of its own)::

        {"columns": [{"label": "floor", "rows": "a.json", "method": "fre-e2t"}, ...],
         "tables": [{"title": "...", "metric": "f1_strict", "headers": ["floor F1", ...],
                     "difference": ["count, f = 0", "central-dp"], "difference_header": "..."}]}

    One row per ε of the columns' centroid-level rows; each cell is mean ± std over the seeds of
    that column's rows; ``difference`` adds the first column's mean less the second's, and
    ``differences`` (a list of ``{"columns": [a, b], "header": h}``) several such columns."""
    columns = spec.get("columns")
    if not isinstance(columns, list) or not columns:
        raise InvalidInputError(f"{page}: a compare spec needs a non-empty list 'columns', got {columns!r}")
    cache: dict[str, Any] = {}
    picked: dict[str, list[Mapping[str, Any]]] = {}
    for column in columns:
        if not isinstance(column, Mapping) or not {"label", "rows", "method"} <= set(column):
            raise InvalidInputError(f"{page}: each column needs a label, rows and method, got {column!r}")
        rows = _load(folder, str(column["rows"]), page, cache)["rows"]
        picked[column["label"]] = [r for r in rows if r.get("method") == column.get("method")
                                   and r.get("level", "centroid") == "centroid"]
    epsilons = sorted_values([r for got in picked.values() for r in got], "epsilon")
    out = []
    for table in spec.get("tables", []):
        metric, headers = table["metric"], table.get("headers") or [c["label"] for c in columns]
        if len(headers) != len(columns):
            raise InvalidInputError(f"{page}: table {table.get('title')!r} has {len(headers)} headers for "
                                    f"{len(columns)} columns")
        differences = [(list(d["columns"]), d.get("header", " − ".join(d["columns"])))
                       for d in table.get("differences", [])]
        if table.get("difference"):
            differences.insert(0, (list(table["difference"]),
                                   table.get("difference_header", " − ".join(table["difference"]))))
        for pair, _ in differences:
            unknown = [label for label in pair if label not in picked]
            if len(pair) != 2 or unknown:
                raise InvalidInputError(f"{page}: a difference names two of the columns {list(picked)}, got {pair!r}")
        header = ["ε", *headers] + [h for _, h in differences]
        body = []
        for eps in epsilons:
            line = [epsilon_label(eps)] + [cell([r for r in picked[c["label"]] if r["epsilon"] == eps], metric)
                                           for c in columns]
            for pair, _ in differences:
                a, b = (mean_std([r for r in picked[label] if r["epsilon"] == eps], metric)[0] for label in pair)
                line.append(f"{a - b:.3f}".replace("-", "−"))
            body.append(line)
        out.append(f"## {table['title']}\n\n" + markdown_table(header, body))
    return "\n".join(out)


def render_part(document: Mapping[str, Any], source: str, part: str, folder: Path) -> str:
    """One rendered part of a page from the JSON ``document`` (read from ``folder/source``)."""
    if part == "compare":
        return (f"*Rendered from `{source}` and the rows it names by `{RENDER_COMMAND} DIR`.*\n\n"
                + compare(document, folder, source))
    if part == "tables":
        return f"*Rendered from `{source}` by `{RENDER_COMMAND} DIR`.*\n\n" + tables(document)
    title = (f"## {document['experiment']}: {document.get('title', '')} "
             f"({reference(document.get('paper_tables', ()), document.get('paper_figures', ()))})")
    if part in ("head", "data"):
        lines = ([title, ""] if part == "head" else []) + [data_line(document), "", provenance_line(document, source, folder)]
        return "\n".join(lines) + "\n"
    if part != "body":
        raise InvalidParameterError(f"part must be one of {list(PARTS)}, got {part!r}")
    lines = [f"*{document.get('label', '')}.*", ""]
    lines += [f"- {note}" for note in document.get("notes", [])]
    if document.get("notes"):
        lines.append("")
    lines.append(tables(document))
    figure = Path(source).with_suffix(".png").name
    if (folder / figure).is_file():
        lines += ["", f"![{document['experiment']}]({figure})", ""]
    return "\n".join(lines)


def experiment_page(document: Mapping[str, Any], source: str, folder: Path) -> str:
    """The page ``fre-e2t experiment`` writes beside ``source``: its head, then its body, each
    re-renderable; a reader's note may go between them."""
    return (block(source, "head", render_part(document, source, "head", folder)) + "\n"
            + block(source, "body", render_part(document, source, "body", folder)))


@dataclass
class Rerendered:
    """What :func:`rerender` found: pages with rendered parts, which of them changed, and pages
    written by hand throughout (no marker)."""

    rendered: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    hand_written: list[str] = field(default_factory=list)
    #: unmarked pages with an experiment's NAME.json beside them: written before pages were marked
    unmarked: list[str] = field(default_factory=list)


def _load(folder: Path, source: str, page: str, cache: dict[str, Any], *, rows: bool = True) -> Mapping[str, Any]:
    if source not in cache:
        path = folder / source
        if Path(source).name != source or not path.is_file():
            raise InvalidInputError(f"{page} renders {source!r}, which is not a JSON file beside it in {folder.name}/")
        try:
            cache[source] = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise InvalidInputError(f"{source} (rendered into {page}) is not valid JSON: {exc}") from None
    document = cache[source]
    if not isinstance(document, Mapping) or (rows and "rows" not in document):
        raise InvalidInputError(f"{source} (rendered into {page}) is not an experiment's document (no rows)")
    return document


def rerender_text(text: str, folder: Path, page: str, cache: dict[str, Any] | None = None) -> str:
    cache = {} if cache is None else cache

    def replace(match: re.Match[str]) -> str:
        source, part = match.group("source"), match.group("part")
        if part not in PARTS:
            raise InvalidInputError(f"{page}: part must be one of {list(PARTS)}, got {part!r}")
        document = _load(folder, source, page, cache, rows=part != "compare")
        return block(source, part, render_part(document, source, part, folder))

    return _BLOCK.sub(replace, text)


def rerender(folder: Path | str, *, write: bool = True) -> Rerendered:
    """Render every marked part of every ``*.md`` in ``folder`` again from its JSON; with
    ``write=False`` nothing is written (a check that the pages are what their JSON renders to)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InvalidParameterError(f"--from must be a folder of results pages, got {str(folder)!r}")
    found = Rerendered()
    cache: dict[str, Any] = {}
    for page in sorted(folder.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        if not _BLOCK.search(text):
            found.hand_written.append(page.name)
            if _is_experiment_document(page.with_suffix(".json")):
                found.unmarked.append(page.name)
            continue
        found.rendered.append(page.name)
        new = rerender_text(text, folder, page.name, cache)
        if new != text:
            found.changed.append(page.name)
            if write:
                write_atomically_text(page, new)
    return found


def _is_experiment_document(path: Path) -> bool:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(document, dict) and document.get("experiment") in EXPERIMENTS and "rows" in document


def markers_only(text: str) -> Sequence[tuple[str, str]]:
    """The (source, part) of each rendered part of a page, in order."""
    return [(m.group("source"), m.group("part")) for m in _BLOCK.finditer(text)]


__all__ = ["PARTS", "Rerendered", "block", "experiment_page", "markers_only", "render_part", "rerender"]
