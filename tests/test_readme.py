"""The README's library example runs as written: a doctest, so the front page cannot rot."""

from __future__ import annotations

import doctest
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_library_example_runs() -> None:
    result = doctest.testfile(str(README), module_relative=False, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 15, f"the README's example lost its >>> lines: {result.attempted} attempted"
    assert result.failed == 0, f"{result.failed} of the README's {result.attempted} examples failed (output above)"
