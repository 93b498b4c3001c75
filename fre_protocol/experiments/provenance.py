"""Where an experiment's figures came from: the code's git commit, the command line, the installed
distributions and the model files, recorded in ``manifest.json`` and (commit, seed) in every row.

Nothing here may fail a run: what cannot be found is recorded as ``"unknown"`` with the reason.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterable
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from fre_protocol import inputs

UNKNOWN = "unknown"
#: The checkout this code runs from, when it runs from one (the folder holding fre_protocol/).
PROJECT_ROOT = Path(__file__).resolve().parents[2]
PROJECT = "fre-e2t"
#: Files that hold a model's weights (hashed); configuration and tokenizer files are not.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".onnx", ".h5", ".ckpt", ".msgpack", ".npz")
GIT_TIMEOUT_S = 10.0


# -- the code -------------------------------------------------------------------------------------
def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=GIT_TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None  # no git, or it hung
    # only the trailing newline goes: a porcelain line starts with a significant space
    return done.stdout.rstrip("\n") if done.returncode == 0 else None


def code_state(root: Path = PROJECT_ROOT) -> dict[str, Any]:
    """``{"commit", "dirty", "modified"}`` of the git checkout at ``root``; ``commit`` is "unknown"
    (and ``dirty`` None) when ``root`` is not the top of a git checkout, e.g. an installed wheel,
    whose site-packages may sit inside some other repository. ``dirty`` counts tracked files only:
    run outputs and caches are untracked and change no code."""
    top = _git(root, "rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != Path(root).resolve():
        return {"commit": UNKNOWN, "dirty": None, "modified": [], "why": f"{root.name} is not a git checkout's top"}
    commit = _git(root, "rev-parse", "HEAD")
    status = _git(root, "status", "--porcelain", "--untracked-files=no")
    if commit is None or status is None:
        return {"commit": UNKNOWN, "dirty": None, "modified": [], "why": "git could not read the checkout"}
    modified = sorted(line[3:] for line in status.splitlines() if line.strip())
    return {"commit": commit, "dirty": bool(modified), "modified": modified[:50]}


@cache
def current_code_state() -> dict[str, Any]:
    """:func:`code_state` of the running code, read once per process (rows stamp it)."""
    return code_state()


def row_stamp() -> dict[str, Any]:
    """What every computed row carries: the commit of the code that computed it."""
    state = current_code_state()
    return {"commit": state["commit"], "dirty": state["dirty"]}


# -- the distributions ----------------------------------------------------------------------------
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared_requirements(root: Path = PROJECT_ROOT) -> dict[str, list[str]]:
    """The project's dependencies by group ("" = the core, else the extra's name): from the
    checkout's pyproject.toml when there is one (the installed metadata may be older), else from
    the installed distribution's metadata."""
    groups: dict[str, list[str]] = {}
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        try:
            project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
        except (OSError, tomllib.TOMLDecodeError):
            project = {}
        if project.get("name") == PROJECT:
            groups[""] = [m.group(1) for r in project.get("dependencies", []) if (m := _NAME.match(r))]
            for extra, reqs in project.get("optional-dependencies", {}).items():
                groups[extra] = [m.group(1) for r in reqs if (m := _NAME.match(r))]
            return groups
    try:
        requires = metadata.requires(PROJECT) or []
    except metadata.PackageNotFoundError:
        return groups
    for requirement in requires:
        extra = re.search(r"""extra\s*==\s*["']([^"']+)["']""", requirement)
        if (m := _NAME.match(requirement)) is not None:
            groups.setdefault(extra.group(1) if extra else "", []).append(m.group(1))
    return groups


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def imported_distributions(modules: Iterable[str] | None = None) -> set[str]:
    """The installed distributions that provide a top-level module imported in this process."""
    tops = {m.partition(".")[0] for m in (sys.modules if modules is None else modules)}
    owners = metadata.packages_distributions()
    return {dist for top in tops for dist in owners.get(top, ())}


def distributions(root: Path = PROJECT_ROOT) -> dict[str, Any]:
    """``{"installed": {name: version}, "declared_not_installed": [...]}``: every distribution the
    run imported and every declared dependency (core and extras) that is installed."""
    declared = {name for names in declared_requirements(root).values() for name in names}
    installed: dict[str, str] = {}
    for name in sorted(declared | imported_distributions() | {PROJECT}, key=_canonical):
        version = _version(name)
        if version is not None:
            installed[_canonical(name)] = version
    missing = sorted({_canonical(n) for n in declared if _version(n) is None})
    return {"installed": dict(sorted(installed.items())), "declared_not_installed": missing}


# -- the models -----------------------------------------------------------------------------------
@cache
def _sha256(path: str, size: int, mtime_ns: int) -> str:  # size and mtime: a changed file is hashed again
    return inputs.file_sha256(path)


def file_sha256(path: Path) -> str:
    stat = path.stat()
    return _sha256(str(path), stat.st_size, stat.st_mtime_ns)


def carrier_of(path: Path) -> dict[str, str] | None:
    """The installed distribution whose package folder holds ``path`` (name and version), if any."""
    path = path.resolve()
    owners = metadata.packages_distributions()
    for entry in sys.path:
        try:
            relative = path.relative_to(Path(entry or os.curdir).resolve())
        except ValueError:
            continue
        if relative.parts and relative.parts[0] in owners:
            name = owners[relative.parts[0]][0]
            return {"distribution": name, "version": _version(name) or UNKNOWN}
    return None


def describe_model(role: str, name: str, location: str | os.PathLike[str] | None,
                   files: Iterable[str] | None = None) -> dict[str, Any]:
    """A model a run used: its role, name, the package carrying it, and the SHA-256 of each weight
    file (``files``: those read, relative to ``location``; default: every weight file there).
    A model loaded by hub name alone, with no folder here, is recorded by name only."""
    entry: dict[str, Any] = {"role": role, "name": name}
    folder = Path(location) if location is not None else None
    if folder is None or not folder.exists():
        entry["files"] = UNKNOWN
        entry["why"] = "loaded by name; no local folder to hash"
        return entry
    base = folder if folder.is_dir() else folder.parent
    if files is None:
        chosen = sorted(p for p in base.rglob("*") if p.is_file() and p.suffix in WEIGHT_SUFFIXES)
    else:
        chosen = [base / f for f in files]
    entry["carrier"] = carrier_of(base)
    entry["files"] = [{"file": p.relative_to(base).as_posix(), "bytes": p.stat().st_size, "sha256": file_sha256(p)}
                      for p in chosen if p.is_file()]
    return entry


__all__ = ["UNKNOWN", "code_state", "current_code_state", "describe_model", "distributions", "row_stamp"]
