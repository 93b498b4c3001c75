"""An example fre-e2t plug-in package (entry-point group ``fre_e2t.components``)."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def sealed_box_alias() -> Any:
    """The ``channel`` family's factory takes no argument: the built-in sealed-box channel."""
    from primitives.channel import SealedBoxChannel

    return SealedBoxChannel()


__all__ = ["sealed_box_alias"]
