"""``user-level`` — utility when one person writes several texts (design §4.6, paper App. D).

The data: the ``fortunes`` corpus grouped by attribution (``-- Mark Twain``): a real author field
read offline; a fortune without one is its own user. Only authors with at least two fortunes are
kept (the question is what bounding costs them), taken in order of first appearance up to the
size limit, so the subset keeps every chosen author's texts together.

For each per-user budget ε_user (``--epsilons``) and c ∈ {1, 2, 4, 8}, the centralized
mechanism runs with each user bounded to c buckets, one text per bucket, at **a fixed per-user
budget**: per-contribution (ε, δ) = (ε_user / c, δ / c), so the ledger's per-user guarantee is
the same (ε_user, δ) in every column (c-fold basic composition). A larger c lets a prolific author
add to more clusters but leaves less budget, and more noise, per contribution. Rows score the
released centroids over texts (against the text-level frequent set) and over users (against the
user-level one: texts with ≥ t other users within r; :func:`mechanism.metrics.user_utility`,
:func:`~mechanism.metrics.user_ssp`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from fre_protocol.experiments import Experiment
from fre_protocol.experiments.context import Context
from fre_protocol.experiments.tables import (
    cell,
    epsilon_label,
    group_rows,
    markdown_table,
    sorted_values,
)
from fre_protocol.text.tuning import MINILM_DEFAULTS, smallest_threshold
from mechanism import metrics
from mechanism.contributions import PrivacyUnit
from mechanism.params import FreParams
from primitives.errors import InfeasibleBudgetError, InvalidParameterError

CAPS = (1, 2, 4, 8)
#: Fortunes a --quick run embeds (CI's smoke run; its other experiments share healthtweets, so
#: these are all extra embedding work): enough to write every row, not to release much.
QUICK_AUTHOR_LIMIT = 800
#: r unless --radius is given: fortunes are more varied than tweets, and with MiniLM no fortune
#: of the quick subset has t = 50 others within 0.9; at 1.1 about 4 % do (≈ 3 % over users).
RADIUS = 1.1
#: The largest threshold the search for a row's smallest affordable one tries (beyond it: infeasible).
MAX_THRESHOLD = 1000
#: Authors need this many fortunes to be kept: bounding costs nothing to one-text users.
MIN_TEXTS_PER_AUTHOR = 2
USER_FIELD = "author"


def author_subset(texts: Sequence[str], users: Sequence[str], limit: int | None) -> list[int]:
    """Rows of authors with at least :data:`MIN_TEXTS_PER_AUTHOR` texts, whole authors in order of
    first appearance, stopping before ``limit`` rows would be exceeded."""
    rows_of: dict[str, list[int]] = {}
    for i, user in enumerate(users):
        rows_of.setdefault(user, []).append(i)
    chosen: list[int] = []
    for rows in rows_of.values():
        if len(rows) < MIN_TEXTS_PER_AUTHOR:
            continue
        if limit is not None and len(chosen) + len(rows) > limit:
            break
        chosen += rows
    return sorted(chosen)


class AuthorData:
    """The fortunes of prolific authors, embedded once, with both frequent sets per parameters."""

    def __init__(self, ctx: Context) -> None:
        from fre_protocol.text.corpora import load_fortunes

        corpus = load_fortunes(authors=True)
        assert corpus.users is not None
        cfg = ctx.config
        limit = QUICK_AUTHOR_LIMIT if cfg.quick and cfg.limit is None else cfg.run_limit
        rows = author_subset(corpus.texts, corpus.users, limit)
        self.texts = [corpus.texts[i] for i in rows]
        self.users = [corpus.users[i] for i in rows]
        self.x = ctx.embed_texts(self.texts)
        self._frequent: dict[tuple[float, int], tuple[np.ndarray, np.ndarray]] = {}
        ctx.log(f"user-level: {len(self.texts)} fortunes by {len(set(self.users))} authors")

    def frequent(self, radius: float, threshold: int) -> tuple[np.ndarray, np.ndarray]:
        """(text-level, user-level) frequent masks."""
        key = (radius, threshold)
        if key not in self._frequent:
            texts = metrics.frequent_mask(metrics.neighbour_counts(self.x, radius), threshold)
            users = metrics.frequent_mask(metrics.user_neighbour_counts(self.x, self.users, radius), threshold)
            self._frequent[key] = (texts, users)
        return self._frequent[key]


def contribution_params(ctx: Context, epsilon_user: float, cap: int) -> FreParams:
    """The parameters of one contribution at the fixed per-user budget: (ε_user / c, δ / c), r =
    :data:`RADIUS` unless --radius is given, and t = --threshold (or --quick's) if given, else the smallest
    threshold that budget affords (from ε, δ and c alone: no data read). At ε = ∞ there is nothing
    to afford, and the run's threshold (default 100) stays.

    Raises :class:`InfeasibleBudgetError` when no threshold up to :data:`MAX_THRESHOLD` is."""
    radius = ctx.config.params.get("radius", RADIUS)
    delta = ctx.config.params.get("delta", MINILM_DEFAULTS["delta"]) / cap
    epsilon = epsilon_user / cap
    if "threshold" in ctx.config.param_overrides() or math.isinf(epsilon):  # given (or --quick's)
        return ctx.params(epsilon, delta=delta, radius=radius)

    def affordable(threshold: int) -> FreParams | None:
        try:
            return ctx.params(epsilon, delta=delta, radius=radius, threshold=threshold)
        except (InfeasibleBudgetError, InvalidParameterError):
            return None

    threshold = smallest_threshold(lambda t: affordable(t) is not None, limit=MAX_THRESHOLD)
    params = affordable(threshold) if threshold is not None else None
    if params is None:
        raise InfeasibleBudgetError(f"no threshold up to {MAX_THRESHOLD} is feasible at ε = {epsilon:g}, δ = {delta:g}")
    return params


def settings(ctx: Context) -> dict[str, Any]:
    """The run's settings, with each (ε_user, c)'s per-contribution parameters (r, t and the budget
    they ran with) in place of the run's own."""
    from fre_protocol.experiments.report import settings as run_settings

    out = run_settings(ctx)
    by_epsilon: dict[str, dict[str, Any]] = {}
    for epsilon in ctx.config.run_epsilons:
        by_cap: dict[str, Any] = {}
        for cap in CAPS:
            try:
                by_cap[f"c={cap}"] = contribution_params(ctx, epsilon, cap).to_dict()
            except (InfeasibleBudgetError, InvalidParameterError) as exc:
                by_cap[f"c={cap}"] = f"infeasible: {exc}"
        by_epsilon[str(epsilon)] = by_cap
    out["params_by_epsilon"] = by_epsilon
    return out


def cap_row(ctx: Context, data: AuthorData, epsilon_user: float, cap: int, seed: int) -> dict[str, Any]:
    from mechanism.fre_e2t import run_mechanism

    try:
        params = contribution_params(ctx, epsilon_user, cap)
        unit = PrivacyUnit(kind="user", cap=cap, user_field=USER_FIELD)
        release = run_mechanism(data.x, params, ctx.seeds(seed), users=data.users, unit=unit)
    except (InfeasibleBudgetError, InvalidParameterError) as exc:
        return {"n_released": 0, "note": f"infeasible: {exc}"}
    assert release.ledger.unit is not None
    row: dict[str, Any] = {
        "n_released": len(release),
        "epsilon_contribution": params.epsilon,
        "threshold": params.threshold,
        "epsilon_user": release.ledger.unit["epsilon"],
        "delta_user": release.ledger.unit["delta"],
        "n_contributions": release.diagnostics["n_contributions"],
    }
    texts, users = data.frequent(params.radius, params.threshold)
    outputs = release.centroids
    if len(outputs) and texts.any():
        row.update({f"{k}_texts": v for k, v in metrics.utility(outputs, data.x, params.radius, frequent=texts).items()
                    if k in ("precision", "recall", "f1")})
    if len(outputs) and users.any():
        row.update({f"{k}_users": v for k, v in metrics.user_utility(
            outputs, data.x, data.users, params.radius, frequent=users).items() if k in ("precision", "recall", "f1")})
    row["delta_star_texts"] = metrics.empirical_ssp(outputs, data.x[~texts], params.radius, (1.0,))[0][1]
    row["delta_star_users"] = metrics.user_ssp(outputs, data.x, data.users, params.radius, (1.0,), frequent=users)[0][1]
    return row


def run(ctx: Context) -> list[dict[str, Any]]:
    store = ctx.store("user-level")
    data: AuthorData | None = None

    def loaded() -> AuthorData:
        nonlocal data
        if data is None:
            data = AuthorData(ctx)
        return data

    def row(epsilon: float, cap: int, seed: int) -> dict[str, Any]:
        return cap_row(ctx, loaded(), epsilon, cap, seed)

    for epsilon in ctx.config.run_epsilons:
        for seed in ctx.config.run_seeds:
            for cap in CAPS:
                store.get_or_run({"epsilon": epsilon, "seed": seed, "cap": cap}, partial(row, epsilon, cap, seed))
    return store.rows()


def render(rows: Sequence[Mapping[str, Any]]) -> str:
    header = ["ε per user", "c", "ε per contribution", "t", "released", "P texts", "R texts", "P users",
              "R users", "δ*(r) texts", "δ*(r) users"]
    groups = group_rows(rows, ("epsilon", "cap"))
    body = []
    for eps in sorted_values(rows, "epsilon"):
        for cap in CAPS:
            got = groups.get((eps, cap), [])
            if not got:
                continue
            per = got[0].get("epsilon_contribution")
            thresholds = sorted({r["threshold"] for r in got if "threshold" in r})
            body.append([epsilon_label(eps), str(cap), epsilon_label(per) if per is not None else "infeasible",
                         ", ".join(map(str, thresholds)) or "–", cell(got, "n_released", 1), cell(got, "precision_texts"), cell(got, "recall_texts"),
                         cell(got, "precision_users"), cell(got, "recall_users"), cell(got, "delta_star_texts"),
                         cell(got, "delta_star_users")])
    return (
        "### Utility against c at a fixed per-user budget (centroid level, central mechanism)\n\n"
        "Per-contribution (ε, δ) = (ε_user / c, δ / c): every row protects each author at the same "
        "(ε_user, δ). t: the smallest threshold that per-contribution budget affords (unless --threshold "
        "is given; at ε = ∞ the run's threshold).\n\n" + markdown_table(header, body)
    )


EXPERIMENT = Experiment(
    name="user-level",
    title="Several texts per user: utility against the contribution cap c",
    paper_tables=(),
    run=run,
    render=render,
    settings=settings,
    data="fortunes grouped by attribution (authors with >= 2 fortunes)",
    notes=(
        f"r = {RADIUS} unless --radius is given: fortunes are more varied than tweets (no fortune has "
        "t = 50 others within r = 0.9).",
        "Not a table of the paper: its App. D states the per-user guarantee (c·ε, c·δ); this measures "
        "what bounding costs in utility.",
        "Data: fortunes grouped by attribution, authors with at least two fortunes, whole authors in order "
        f"of first appearance up to the size limit (--limit; --quick: {QUICK_AUTHOR_LIMIT:,}).",
        "Fixed per-user budget: per-contribution ε = ε_user / c and δ = δ / c (c-fold basic composition); "
        "the centralized mechanism only (the protocol bounds users the same way, with the same coins).",
        "Threshold per row: the smallest t the per-contribution (ε, δ) affords, found by the accountant "
        "from ε, δ and c alone (no data read), unless --threshold is given; a larger c leaves less budget "
        "per contribution and so needs a larger t. At ε = ∞ the run's threshold.",
        "Over users: the frequent set counts distinct other users within r; recall is the mean per-user "
        "share of covered frequent texts; δ* the share of users with an exposed rare text.",
    ),
)

__all__ = ["CAPS", "EXPERIMENT", "author_subset"]
