"""Mean ± std over seeds, and tables in Markdown (the paper's layout is chosen per experiment)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def _number(value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and value.lower() in ("inf", "-inf", "nan"):
        return float(value)
    return math.nan


def group_rows(rows: Iterable[Mapping[str, Any]], by: Sequence[str]) -> dict[tuple[Any, ...], list[Mapping[str, Any]]]:
    """Rows grouped by the values of ``by`` (rows lacking one of them are left out), in first-seen order."""
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for row in rows:
        if all(name in row for name in by):
            groups.setdefault(tuple(row[name] for name in by), []).append(row)
    return groups


def mean_std(rows: Sequence[Mapping[str, Any]], metric: str) -> tuple[float, float, int]:
    """Mean and sample std (ddof 1; 0 for one value) of ``metric`` over the rows holding a finite value."""
    values = np.array([_number(r.get(metric)) for r in rows], dtype=np.float64)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return math.nan, math.nan, 0
    std = float(values.std(ddof=1)) if values.size > 1 else 0.0
    return float(values.mean()), std, int(values.size)


def cell(rows: Sequence[Mapping[str, Any]], metric: str, digits: int = 3) -> str:
    """``mean ± std`` (``mean`` alone for one seed; ``–`` when undefined)."""
    mean, std, n = mean_std(rows, metric)
    if n == 0:
        return "–"
    if n == 1:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def epsilon_label(value: Any) -> str:
    number = _number(value)
    if math.isinf(number):
        return "∞"
    return f"{number:g}" if math.isfinite(number) else str(value)


def epsilon_order(value: Any) -> float:
    number = _number(value)
    return number if not math.isnan(number) else math.inf


def markdown_table(header: Sequence[str], body: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(str(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in row) + " |" for row in body]
    return "\n".join(lines) + "\n"


def sorted_values(rows: Iterable[Mapping[str, Any]], name: str) -> list[Any]:
    values = list(dict.fromkeys(r[name] for r in rows if name in r))
    if name == "epsilon":
        return sorted(values, key=epsilon_order)
    try:
        return sorted(values)
    except TypeError:
        return values


def plot_against_epsilon(path: Path, rows: Sequence[Mapping[str, Any]], series: Mapping[str, Sequence[Mapping[str, Any]]],
                         metric: str, ylabel: str) -> bool:
    """One line per series: the mean of ``metric`` over its rows at each ε (∞ drawn at the right
    end; an undefined mean is drawn as 0). False, and no file, when there is no ε."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epsilons = sorted_values(rows, "epsilon")
    if not epsilons:
        return False
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for label, got in series.items():
        means = [mean_std([r for r in got if r.get("epsilon") == e], metric)[0] for e in epsilons]
        ax.plot(range(len(epsilons)), np.nan_to_num(means, nan=0.0), marker="o", label=label)
    ax.set_xticks(range(len(epsilons)), [epsilon_label(e) for e in epsilons])
    ax.set_xlabel("ε")
    ax.set_ylabel(ylabel)
    ax.set_ylim(-0.03, 1.05)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
