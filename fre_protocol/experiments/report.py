"""Running experiments and writing what they found: ``NAME.json``, ``NAME.md``, ``NAME.png``,
``manifest.json`` and a self-contained ``index.html``."""

from __future__ import annotations

import base64
import html
import importlib.util
import json
import platform
import re
import sys
import time
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from fre_protocol.experiments import EXPERIMENTS, Experiment, get_experiment, paper_reference
from fre_protocol.experiments.context import EVALUATION_NOTE, Context
from fre_protocol.experiments.pages import MANIFEST_FILE, experiment_page, seconds_spent
from fre_protocol.experiments.provenance import current_code_state, describe_model, distributions
from fre_protocol.experiments.store import ROWS_SUFFIX, read_checkpoint
from fre_protocol.outputs import write_atomically_text, write_json_atomic

INDEX_FILE = "index.html"
VERSIONED = ("fre-e2t", "numpy", "scipy", "torch", "transformers", "sentence-transformers", "scikit-learn", "sacrebleu")


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _data(ctx: Context) -> str | None:
    cfg = ctx.config
    return cfg.corpus or cfg.input or cfg.embeddings


def document_provenance(ctx: Context, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Where NAME.json's rows came from: this invocation's command and code, and the commits its
    rows were computed at (a resumed row keeps the commit of the run that computed it)."""
    code = current_code_state()
    stamped = [r["commit"] for r in rows if isinstance(r, Mapping) and "commit" in r]
    return {
        "command": ctx.config.command,
        "commit": code["commit"],
        "dirty": code["dirty"],
        "seeds": list(ctx.config.run_seeds),
        "row_commits": sorted(set(stamped)),
        "rows_without_commit": len(rows) - len(stamped),
        "manifest": MANIFEST_FILE,  # the versions and model files of the run
    }


def models_used(ctx: Context) -> list[dict[str, Any]]:
    """The models the invocation loaded, with the SHA-256 of each weight file (no local paths)."""
    return [describe_model(role, name, location, files)
            for (role, name), (location, files) in sorted(ctx.models.items())]


def settings(ctx: Context) -> dict[str, Any]:
    """The resolved parameters each ε runs with (before an experiment's own sweep)."""
    cfg = ctx.config
    out: dict[str, Any] = {
        "data": cfg.corpus or cfg.input or cfg.embeddings,
        "limit": cfg.run_limit,
        "epsilons": list(cfg.run_epsilons),
        "seeds": list(cfg.run_seeds),
        "quick": cfg.quick,
        "flags": dict(cfg.params),
        "inverter": cfg.inverter or "default",
        "budget": cfg.run_budget,
        "max_centroids": cfg.run_max_centroids,
        "protocol": {"noise_calibration": cfg.noise_calibration, "dropout_allowance": cfg.dropout_allowance,
                     "ddg_accountant": cfg.ddg_accountant, "dropout_policy": cfg.dropout_policy,
                     "dropout": cfg.dropout},
        "params_by_epsilon": {},
    }
    for eps in cfg.run_epsilons:
        out["params_by_epsilon"][str(eps)] = ctx.params(eps).to_dict()
    return out


def run_one(ctx: Context, experiment: Experiment) -> dict[str, Any]:
    """Run (or resume) one experiment and write its three files; returns its manifest entry."""
    out = ctx.config.out_dir
    ctx.log(f"experiment {experiment.name} ({paper_reference(experiment)})")
    checkpoint = out / f"{experiment.name}{ROWS_SUFFIX}"
    # rows an earlier call finished: the page then gives the rows' own time, not this call's
    rows_resumed = len(read_checkpoint(checkpoint)[1]) if checkpoint.is_file() else 0
    start = time.perf_counter()
    rows = experiment.run(ctx)
    wall = time.perf_counter() - start
    extra = experiment.publish(rows) if experiment.publish is not None else {}
    document = {
        "experiment": experiment.name,
        "title": experiment.title,
        "paper_tables": list(experiment.paper_tables),
        "paper_figures": list(experiment.paper_figures),
        "label": EVALUATION_NOTE,
        "notes": list(experiment.notes),
        "data": experiment.data or _data(ctx),
        "settings": settings(ctx) if experiment.settings is None else experiment.settings(ctx),
        "wall_seconds": wall,
        "rows_resumed": rows_resumed,
        "rows": rows,
        **extra,  # an experiment may publish a selection of its rows (e.g. the best budget split)
    }
    document["provenance"] = document_provenance(ctx, document["rows"])
    write_json_atomic(out / f"{experiment.name}.json", document)
    rows = document["rows"]
    figure_name = None
    if experiment.figure is not None and importlib.util.find_spec("matplotlib") is None:
        # The core install (embeddings-only runs) has no matplotlib: tables without the plot.
        ctx.log(f"experiment {experiment.name}: {experiment.name}.png skipped (matplotlib, of the text extra, "
                "is not installed)")
    elif experiment.figure is not None:
        figure_path = out / f"{experiment.name}.png"
        if experiment.figure(rows, figure_path):
            figure_name = figure_path.name
    write_atomically_text(out / f"{experiment.name}.md", experiment_page(document, f"{experiment.name}.json", out))
    ctx.log(f"experiment {experiment.name}: {len(rows)} rows in {wall:.1f} s")
    compute = ctx.store(experiment.name).compute_seconds() if checkpoint.exists() else 0.0
    return {"experiment": experiment.name, "wall_seconds": wall, "compute_seconds": compute, "rows": len(rows),
            "seeds": list(ctx.config.run_seeds), "commit": document["provenance"]["commit"],
            "command": document["provenance"]["command"],
            "files": [f"{experiment.name}.json", f"{experiment.name}.md"] + ([figure_name] if figure_name else [])}


def run_experiments(ctx: Context, names: Sequence[str]) -> dict[str, Any]:
    """Run ``names`` in order ('all' = every experiment), then write the manifest and index."""
    chosen = list(EXPERIMENTS) if list(names) == ["all"] else list(names)
    experiments = [get_experiment(n) for n in chosen]  # unknown names fail before any work
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    previous = read_manifest(ctx.config.out_dir)
    # the manifest is rewritten after each experiment, so a call stopped part-way (a session's
    # end, a crash) still records its command, code and what it finished
    entries: list[dict[str, Any]] = []
    manifest = write_manifest(ctx, entries, previous=previous, started=started, finished=False)
    for experiment in experiments:
        entries.append(run_one(ctx, experiment))
        manifest = write_manifest(ctx, entries, previous=previous, started=started,
                                  finished=len(entries) == len(experiments))
    if len(chosen) > 1 or list(names) == ["all"]:
        write_index(ctx.config.out_dir, manifest)
    return manifest


def read_manifest(folder: Path) -> dict[str, Any]:
    """The folder's manifest.json as it stands ({} when there is none or it cannot be read)."""
    path = folder / MANIFEST_FILE
    try:
        return dict(json.loads(path.read_text(encoding="utf-8"))) if path.is_file() else {}
    except (OSError, ValueError):
        return {}


def write_manifest(ctx: Context, entries: list[dict[str, Any]], *, previous: Mapping[str, Any], started: str,
                   finished: bool) -> dict[str, Any]:
    """manifest.json: what every experiment in the folder last ran with, and one record per
    invocation (command, code, distributions, models), appended to ``previous`` (the manifest
    before this call) so that a folder filled by several calls keeps each call's provenance.
    ``finished`` False: the call is still running (or was stopped) after the experiments in
    ``entries``."""
    path = ctx.config.out_dir / MANIFEST_FILE
    experiments = {e["experiment"]: e for e in previous.get("experiments", [])}
    experiments.update({e["experiment"]: e for e in entries})
    commands = list(previous.get("commands", []))
    if ctx.config.command and ctx.config.command not in commands:
        commands.append(ctx.config.command)
    code = current_code_state()
    invocation = {
        "command": ctx.config.command,
        "argv": list(ctx.config.argv) if ctx.config.argv is not None else None,
        "started": started,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) if finished else None,
        "code": code,
        "experiments": [e["experiment"] for e in entries],
        "seeds": list(ctx.config.run_seeds),
        "distributions": distributions(),
        "models": models_used(ctx),
    }
    manifest = {
        "label": EVALUATION_NOTE,
        "commit": code["commit"],  # the code of the latest invocation (each one: invocations[i].code)
        "dirty": code["dirty"],
        "versions": versions(),
        "machine": {"platform": platform.platform(), "processor": platform.machine(), "python": sys.version.split()[0]},
        "settings": settings(ctx),
        "commands": commands,
        "invocations": [*previous.get("invocations", []), invocation],
        "experiments": [experiments[n] for n in EXPERIMENTS if n in experiments],
    }
    write_json_atomic(path, manifest)
    return manifest


# -- index.html ----------------------------------------------------------------------------------
def _inline(text: str) -> str:
    escaped = html.escape(text)
    escaped = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", escaped)
    return re.sub(r"\*(.+?)\*", r"<i>\1</i>", escaped)


def markdown_to_html(text: str, folder: Path) -> str:
    """The small Markdown subset our tables use: headings, pipe tables, bullets, images, paragraphs."""
    out: list[str] = []
    table: list[list[str]] = []

    def flush() -> None:
        if table:
            head, body = table[0], [r for r in table[1:] if not all(set(c) <= {"-", ":"} for c in r)]
            out.append("<table><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head) + "</tr>"
                       + "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in body)
                       + "</table>")
            table.clear()

    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("<!--") and stripped.endswith("-->"):
            continue  # a marker of a rendered part (pages.py)
        if stripped.startswith("|"):
            table.append([c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", stripped.strip("|"))])
            continue
        flush()
        image = re.fullmatch(r"!\[(.*?)\]\((.+?)\)", stripped)
        if image and (folder / image.group(2)).is_file():
            data = base64.b64encode((folder / image.group(2)).read_bytes()).decode("ascii")
            out.append(f'<img alt="{html.escape(image.group(1))}" src="data:image/png;base64,{data}">')
        elif stripped.startswith("#"):
            level = min(len(stripped) - len(stripped.lstrip("#")) + 1, 6)
            out.append(f"<h{level}>{_inline(stripped.lstrip('#').strip())}</h{level}>")
        elif stripped.startswith("- "):
            out.append(f"<p>• {_inline(stripped[2:])}</p>")
        elif stripped:
            out.append(f"<p>{_inline(stripped)}</p>")
    flush()
    return "\n".join(out)


def write_index(folder: Path, manifest: Mapping[str, Any]) -> Path:
    path = folder / INDEX_FILE
    write_atomically_text(path, index_html(folder, manifest))
    return path


def rewrite_index(folder: Path, *, write: bool = True) -> bool | None:
    """index.html of ``folder`` again from its manifest and pages; whether it changed (None: the
    folder has no index.html or no manifest.json, and none is made)."""
    index, manifest_path = folder / INDEX_FILE, folder / MANIFEST_FILE
    if not (index.is_file() and manifest_path.is_file()):
        return None
    page = index_html(folder, json.loads(manifest_path.read_text(encoding="utf-8")))
    changed = page != index.read_text(encoding="utf-8")
    if changed and write:
        write_atomically_text(index, page)
    return changed


def page_documents(folder: Path, manifest: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The JSON beside the index of each experiment the manifest lists, read once (absent: not there)."""
    paths = {e["experiment"]: folder / f"{e['experiment']}.json" for e in manifest["experiments"]}
    return {name: json.loads(path.read_text(encoding="utf-8")) for name, path in paths.items() if path.is_file()}


def contents(entry: Mapping[str, Any], document: Mapping[str, Any] | None) -> str:
    """Rows and time of one experiment as its JSON beside the index has them: a page rerun or resumed
    since the manifest was written is counted as it stands, not as the manifest remembers it."""
    if document is None:
        return f"{entry['rows']} rows, {float(entry['wall_seconds']):.0f} s"
    return f"{len(document.get('rows') or [])} rows, {seconds_spent(document):.0f} s"


def page_commands(manifest: Mapping[str, Any], documents: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The commands that made the listed pages' rows, each once, with its commit, as each page's JSON
    records them; the manifest's own commands for pages whose JSON records none (older runs)."""
    made_by: dict[tuple[str, str], list[str]] = {}  # (command, commit) -> the experiments it made
    older: list[str] = []
    for entry in manifest["experiments"]:
        provenance = documents.get(entry["experiment"], {}).get("provenance")
        if provenance and provenance.get("command"):
            key = (str(provenance["command"]), str(provenance.get("commit") or "not recorded")[:10])
            made_by.setdefault(key, []).append(entry["experiment"])
        else:
            older.extend(manifest.get("commands", []))
    return [f"{command}  # commit {commit}: {', '.join(names)}" for (command, commit), names in made_by.items()] \
        + list(dict.fromkeys(older))


def index_html(folder: Path, manifest: Mapping[str, Any]) -> str:
    sections = []
    for entry in manifest["experiments"]:
        md = folder / f"{entry['experiment']}.md"
        if md.is_file():
            sections.append(f'<section id="{html.escape(entry["experiment"])}">'
                            + markdown_to_html(md.read_text(encoding="utf-8"), folder) + "</section>")
    documents = page_documents(folder, manifest)
    toc = "".join(f'<li><a href="#{html.escape(e["experiment"])}">{html.escape(e["experiment"])}</a> '
                  f"({contents(e, documents.get(e['experiment']))})</li>" for e in manifest["experiments"])
    commands = "".join(f"<pre>{html.escape(c)}</pre>" for c in page_commands(manifest, documents))
    if "commit" in manifest:  # manifests before provenance was recorded have none
        dirty = " (with uncommitted changes)" if manifest.get("dirty") else ""
        commands += f"<p>Code: commit {html.escape(str(manifest['commit']))}{dirty}</p>"
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>fre-e2t experiments</title>
<style>body{{font-family:sans-serif;max-width:70em;margin:2em auto;padding:0 1em}}
table{{border-collapse:collapse;margin:1em 0;font-size:90%}}td,th{{border:1px solid #bbb;padding:3px 7px;text-align:right}}
th{{background:#eee}}img{{max-width:42em}}pre{{background:#f4f4f4;padding:.5em;white-space:pre-wrap}}</style></head><body>
<h1>fre-e2t: the paper's evaluation</h1><p><i>{html.escape(str(manifest["label"]))}.</i></p>
<ul>{toc}</ul><h2>Commands</h2>{commands}
{"".join(sections)}
<h2>Versions</h2><pre>{html.escape(", ".join(f"{k} {v}" for k, v in manifest["versions"].items()))}</pre>
</body></html>
"""
    return page
