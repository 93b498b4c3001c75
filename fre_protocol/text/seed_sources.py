"""Where the guided search's seed comes from: the names, the default and their check.

A module of its own, with no heavy import, because the command line's flags, the inverter
registry (:mod:`fre_protocol.text.inverters`) and the guided inverter all need the names, and
the registry imports the guided inverter only when it builds one.
"""

from __future__ import annotations

from primitives.errors import InvalidParameterError

#: Where the guided search's seed comes from: the nearest readable pool text, the learned
#: generator's draft, or the closer of the two in the guide; ``auto`` (the default) is ``prefix``
#: when the packaged generator was trained on the embedder's vectors and ``retrieval`` otherwise
#: (:func:`~fre_protocol.text.inverter_guided.resolve_seeds_from`). Prefix seeds beat retrieval
#: seeds by +0.027 ± 0.009 E5 gain over four held-out draws (docs/results/prefix-generator.md).
SEEDS_FROM = ("auto", "retrieval", "prefix", "both")
DEFAULT_SEEDS_FROM = "auto"


def check_seeds_from(seeds_from: str, inverter: str = "guided") -> None:
    """Refuse an unknown seed source, or one that names a generator seed for another inverter."""
    if seeds_from not in SEEDS_FROM:
        raise InvalidParameterError(f"seeds_from must be one of {list(SEEDS_FROM)}, got {seeds_from!r}")
    if seeds_from in ("prefix", "both") and inverter != "guided":
        raise InvalidParameterError(f"seeds_from applies to the guided inverter only, not to {inverter!r}")
