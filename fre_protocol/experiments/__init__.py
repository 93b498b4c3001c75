"""``fre-e2t experiment``: the paper's evaluation (§7, App. A-B), one experiment per table group.

Each experiment is an :class:`Experiment` — a name, the paper tables it reproduces, a ``run`` that
turns a :class:`~fre_protocol.experiments.context.Context` into rows (checkpointed one by one, so
long runs resume), a ``render`` that lays the rows out as the paper's tables (mean ± std over
seeds) and an optional ``figure``. :func:`~fre_protocol.experiments.report.run_experiments`
writes ``NAME.json``, ``NAME.md`` and ``NAME.png`` for each, then ``manifest.json`` and a
self-contained ``index.html``. The registry below maps names to the modules that define them,
imported only when run.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from primitives.errors import InvalidParameterError

Rows = list[dict[str, Any]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Experiment:
    name: str
    title: str
    paper_tables: tuple[int, ...]  # empty for an experiment that is not a table of the paper
    run: Callable[[Any], Rows]
    render: Callable[[Sequence[Mapping[str, Any]]], str]
    figure: Callable[[Sequence[Mapping[str, Any]], Path], bool] | None = None
    #: extra top-level fields of NAME.json computed from the rows (e.g. a chosen budget split)
    publish: Callable[[Sequence[Mapping[str, Any]]], dict[str, Any]] | None = None
    #: what the reader must know to read the table (deviations from the paper, stand-ins)
    notes: tuple[str, ...] = ()
    #: the data it reads when that is its own rather than --corpus/--input/--embeddings
    data: str | None = None
    #: the paper's figures it reproduces (beside or instead of tables)
    paper_figures: tuple[int, ...] = ()
    #: NAME.json's settings when the experiment chooses its own parameters (default: the run's)
    settings: Callable[[Any], dict[str, Any]] | None = None


#: name -> "module:attribute", in the order ``experiment all`` runs them.
EXPERIMENTS: dict[str, str] = {
    "utility": "fre_protocol.experiments.utility:EXPERIMENT",
    "baselines": "fre_protocol.experiments.baselines:EXPERIMENT",
    "augpe": "fre_protocol.experiments.augpe:EXPERIMENT",
    "ablation-ps": "fre_protocol.experiments.ablations:ABLATION_PS",
    "ablation-edge": "fre_protocol.experiments.ablations:ABLATION_EDGE",
    "ablation-k": "fre_protocol.experiments.ablations:ABLATION_K",
    "ablation-t": "fre_protocol.experiments.ablations:ABLATION_T",
    "diversity": "fre_protocol.experiments.diversity:EXPERIMENT",
    "naturalness": "fre_protocol.experiments.naturalness:EXPERIMENT",
    "downstream": "fre_protocol.experiments.downstream:EXPERIMENT",
    "embedders": "fre_protocol.experiments.embedders:EXPERIMENT",
    "user-level": "fre_protocol.experiments.user_level:EXPERIMENT",
    "ssp": "fre_protocol.experiments.ssp:EXPERIMENT",
    "paper-regime": "fre_protocol.experiments.paper_regime:EXPERIMENT",
}


def get_experiment(name: str) -> Experiment:
    if name not in EXPERIMENTS:
        raise InvalidParameterError(f"experiment must be one of {list(EXPERIMENTS)} or 'all', got {name!r}")
    module_name, attribute = EXPERIMENTS[name].split(":")
    experiment = getattr(importlib.import_module(module_name), attribute)
    assert isinstance(experiment, Experiment) and experiment.name == name
    return experiment




def paper_reference(experiment: Experiment) -> str:
    """``paper Table 1, 9`` or, for an experiment beyond the paper, ``not a table of the paper``."""
    return reference(experiment.paper_tables, experiment.paper_figures)


def reference(tables: Sequence[int], figures: Sequence[int]) -> str:
    """:func:`paper_reference` from the numbers alone (as a results JSON records them)."""
    parts = [f"Table {', '.join(map(str, tables))}"] if tables else []
    parts += [f"Figure {', '.join(map(str, figures))}"] if figures else []
    return f"paper {', '.join(parts)}" if parts else "not a table of the paper"


__all__ = ["EXPERIMENTS", "Experiment", "Rows", "get_experiment", "paper_reference", "reference"]
