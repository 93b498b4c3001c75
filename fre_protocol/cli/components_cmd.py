"""``fre-e2t components``: every component family, the Protocol its components implement, and the
names registered in it with their origin (``built-in``, ``DIST VERSION`` of the plug-in
distribution whose ``fre_e2t.components`` entry point added it, or ``register()``).
``--check NAME`` (or ``FAMILY=NAME``) runs the conformance suite on one of them."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

HELP = "list the swappable components (families, Protocols, registered names and their origin); --check one"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--check", metavar="NAME|FAMILY=NAME", default=None,
        help="run the conformance suite (fre_protocol.testing.conformance) on this component; a NAME "
        "registered in several families needs FAMILY=NAME (default: none; only the list is printed)",
    )
    parser.add_argument("--json", action="store_true", help="print the list as JSON")


def _protocol_of(target: str | None) -> str:
    """``module.Class`` of a family's Protocol, or a dash where none is declared (or importable)."""
    if target is None:
        return "-"
    import importlib

    module, _, attribute = target.partition(":")
    try:
        getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError):
        return "-"
    return f"{module}.{attribute}"


def listing() -> dict[str, Any]:
    """``{"families": {family: {"protocol", "default", "names": {name: origin}}}, "broken": [...]}``."""
    from fre_protocol.components import DEFAULT_COMPONENTS, FAMILY_PROTOCOLS
    from primitives import registry

    families: dict[str, Any] = {}
    for family in registry.families():
        families[family] = {
            "protocol": _protocol_of(FAMILY_PROTOCOLS.get(family)),
            "default": DEFAULT_COMPONENTS.get(family),
            "names": {name: str(registry.origin(family, name)) for name in registry.names(family)},
        }
    return {"entry_point_group": registry.ENTRY_POINT_GROUP, "families": families, "broken": registry.broken()}


def render(data: dict[str, Any]) -> str:
    lines = [f"component families (plug-ins: entry-point group {data['entry_point_group']!r}, entry FAMILY.NAME):"]
    for family, info in data["families"].items():
        lines.append(f"{family}  (Protocol {info['protocol']})")
        width = max(len(n) for n in info["names"])
        for name, origin in info["names"].items():
            mark = "  [default]" if name == info["default"] else ""
            lines.append(f"  {name:<{width}}  {origin}{mark}")
    if data["broken"]:
        lines.append("plug-in entry points not added:")
        lines += [f"  {message}" for message in data["broken"]]
    return "\n".join(lines) + "\n"


def which(text: str) -> tuple[str, str]:
    """``(family, name)`` of ``--check``'s argument: FAMILY=NAME, or a NAME registered in one family."""
    from fre_protocol.components import parse_component
    from primitives import registry
    from primitives.errors import UnknownComponentError

    if "=" in text:
        family, name = parse_component(text)
        registry.origin(family, name)  # UnknownComponentError listing the known names
        return family, name
    found = [f for f in registry.families() if text in registry.names(f)]
    if len(found) != 1:
        known = sorted({n for f in registry.families() for n in registry.names(f)})
        raise UnknownComponentError(
            f"--check {text!r} is registered in {found} families: give FAMILY=NAME"
            if found else f"--check must name a registered component, one of {known}, got {text!r}"
        )
    return found[0], text


def run(args: argparse.Namespace) -> int:
    if args.check is None:
        data = listing()
        sys.stdout.write(json.dumps(data, indent=2) + "\n" if args.json else render(data))
        return 0
    family, name = which(args.check)
    from fre_protocol.testing.conformance import check

    report = check(family, name)
    if args.json:
        print(json.dumps({"family": family, "name": name, "ok": report.ok, "lines": report.lines(),
                          "false_failure_probability": report.false_failure_probability}, indent=2))
    else:
        print("\n".join(report.lines()))
        print(f"false-failure probability of the statistical checks (union bound): {report.false_failure_probability:.1e}")
    return 0 if report.ok else 1
