"""The layering of design §2: primitives ← mechanism, transcripts ← fre_protocol; no torch in core."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OURS = {"primitives", "mechanism", "transcripts", "fre_protocol"}
ALLOWED = {
    "primitives": set(),
    "mechanism": {"primitives"},
    "transcripts": {"primitives"},
    "fre_protocol": {"primitives", "mechanism", "transcripts"},
}
HEAVY = {"torch", "sentence_transformers", "transformers", "vec2text"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_lower_layers(package: str) -> None:
    for path in sorted((ROOT / package).rglob("*.py")):
        used = _imports(path) & OURS - {package}
        assert used <= ALLOWED[package], f"{path.relative_to(ROOT)} imports {sorted(used)}"


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_heavy_ml_only_in_text_package(package: str) -> None:
    for path in sorted((ROOT / package).rglob("*.py")):
        if "text" in path.relative_to(ROOT).parts:
            continue
        heavy = {name for name in _imports(path) if name in HEAVY}
        assert not heavy, f"{path.relative_to(ROOT)} imports {sorted(heavy)} outside fre_protocol/text"


def test_core_import_does_not_load_torch() -> None:
    code = (
        "import sys, primitives, mechanism, transcripts, fre_protocol, fre_protocol.cli;"
        "fre_protocol.cli.build_parser();"
        "heavy = [m for m in ('torch', 'sentence_transformers', 'transformers') if m in sys.modules];"
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def _module_imports(path: Path) -> set[str]:
    """Every module ``path`` imports by absolute name, at top level or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_library_never_imports_the_command_line() -> None:
    """The command line sits on top: nothing else in fre_protocol (text pipeline included) imports
    ``fre_protocol.cli``, lazily or not."""
    cli = ROOT / "fre_protocol" / "cli"
    for path in sorted((ROOT / "fre_protocol").rglob("*.py")):
        if cli in path.parents:
            continue
        used = {m for m in _module_imports(path) if m == "fre_protocol.cli" or m.startswith("fre_protocol.cli.")}
        assert not used, f"{path.relative_to(ROOT)} imports {sorted(used)}"


#: Inside fre_protocol (design §2, §13): the roles never import a driver, and neither roles nor
#: drivers import what sits above both (the text pipeline, the experiments, the command line).
ABOVE_ROLES_AND_DRIVERS = ("fre_protocol.text", "fre_protocol.experiments", "fre_protocol.cli")
FORBIDDEN_BELOW = {
    "roles": ("fre_protocol.drivers", *ABOVE_ROLES_AND_DRIVERS),
    "drivers": ABOVE_ROLES_AND_DRIVERS,
}


@pytest.mark.parametrize("package", sorted(FORBIDDEN_BELOW))
def test_roles_never_import_drivers_and_neither_imports_what_sits_above(package: str) -> None:
    forbidden = FORBIDDEN_BELOW[package]
    for path in sorted((ROOT / "fre_protocol" / package).rglob("*.py")):
        used = {m for m in _module_imports(path) if any(m == f or m.startswith(f + ".") for f in forbidden)}
        assert not used, f"{path.relative_to(ROOT)} imports {sorted(used)}"


def test_the_round_layer_is_not_a_driver() -> None:
    """The step functions every driver needs live in roles/: a driver imports no other driver's
    module except what the windowed ones share (the in-process moves, drivers/local.py; the
    windows, streaming; the users' chunk tasks that run outside this process, chunk_tasks; and
    Dask's windows, which worker processes play too)."""
    shared = {
        "fre_protocol.drivers.local", "fre_protocol.drivers.streaming", "fre_protocol.drivers.chunk_tasks",
        "fre_protocol.drivers.dask",
    }
    graph = _import_graph()
    for module, named in graph.items():
        if not module.startswith("fre_protocol.drivers.") or module.startswith("fre_protocol.drivers.net"):
            continue
        other = {m for m in named if m.startswith("fre_protocol.drivers.") and m not in shared}
        other -= {m for m in other if m.startswith(module)}
        assert not other, f"{module} imports drivers {sorted(other)}"


def test_importing_the_text_pipeline_loads_no_command_line_module() -> None:
    names = sorted(p.stem for p in (ROOT / "fre_protocol" / "text").glob("*.py") if p.stem != "__init__")
    code = (
        "import importlib, sys;"
        f"[importlib.import_module('fre_protocol.text.' + n) for n in {names!r}];"
        "cli = sorted(m for m in sys.modules if m.startswith('fre_protocol.cli'));"
        "print(cli); sys.exit(1 if cli else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Module → the modules of ours it names in an import, at top level or inside a function
    (``from a.b import c`` names ``a.b.c`` when that is a module, else ``a.b``)."""
    paths = {_module_name(p): p for pkg in sorted(OURS) for p in (ROOT / pkg).rglob("*.py")}

    def ours(module: str) -> str | None:
        while module and module not in paths:
            module = module.rpartition(".")[0]
        return module or None

    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        named: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                named.update(ours(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                named.update(ours(f"{node.module}.{alias.name}") for alias in node.names)
        graph[name] = {m for m in named if m is not None and m != name}
    return graph


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as a path that returns to its start, or None."""
    done: set[str] = set()
    for start in sorted(graph):
        stack: list[tuple[str, list[str]]] = [(start, sorted(graph[start]))]
        on_path = {start}
        while stack:
            node, todo = stack[-1]
            if not todo:
                stack.pop()
                on_path.discard(node)
                done.add(node)
                continue
            nxt = todo.pop()
            if nxt in on_path:
                path = [n for n, _ in stack]
                return path[path.index(nxt) :] + [nxt]
            if nxt not in done:
                stack.append((nxt, sorted(graph.get(nxt, ()))))
                on_path.add(nxt)
    return None


def test_no_import_cycles() -> None:
    """No module of ours reaches itself through imports, deferred function-level ones included: a
    cycle hidden inside a function is still two modules that cannot be read apart. A package's
    ``__init__`` counts as the package, so re-exporting a submodule is fine while that submodule
    does not import its own package back."""
    cycle = _find_cycle(_import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
