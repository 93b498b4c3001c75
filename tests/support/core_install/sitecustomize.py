"""Put this folder first on PYTHONPATH to run Python as on the core install: the text extra's
libraries then cannot be imported and ``importlib.util.find_spec`` does not find them, although
they are installed in this environment (tests/fre_protocol/test_cli_core_install.py)."""

from __future__ import annotations

import sys
from importlib.machinery import PathFinder

BLOCKED = frozenset({"torch", "sentence_transformers", "transformers", "matplotlib", "sklearn", "sacrebleu", "vec2text"})


class _CoreInstallFinder:
    """PathFinder, except that the blocked packages are not found (as when not installed)."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):  # type: ignore[no-untyped-def]
        if name.partition(".")[0] in BLOCKED:
            return None
        return PathFinder.find_spec(name, path, target)

    @classmethod
    def invalidate_caches(cls) -> None:
        PathFinder.invalidate_caches()


sys.meta_path[:] = [_CoreInstallFinder if f is PathFinder else f for f in sys.meta_path]
