"""``augpe`` — paper Tables 1 and 17: Aug-PE beside Fre-E2T, in utility and in per-user cost.

Aug-PE (Xie et al. 2024; :mod:`fre_protocol.text.augpe`, its accountant in
:mod:`mechanism.augpe`) evolves a population of SmolLM2 texts under a DP nearest-neighbour vote of
the private embeddings. Its synthetic texts are scored with the same metrics as Fre-E2T's text
level (``utility``, whose rows are reused from the same folder when present), at every ε.

Table 17 is one user's cost in a distributed Aug-PE — every user downloads every candidate's
embedding and scans them, every iteration — beside Fre-E2T's measured per-user cost
(:func:`fre_protocol.cost_measurement.measure`, paid once): bytes, CPU time and the ratios, at this run's
Aug-PE setting and at the paper's (N_syn 3000, L 7, T 20, d 768).

Deviation: the paper runs N_syn = 3000, L = 7, T = 20 with GPT-2; on two CPU cores we run a
population about the size of Fre-E2T's output (the paper equalises the number of texts; N_syn =
48), L = 3, T = 3, with SmolLM2-135M-Instruct.
"""

from __future__ import annotations

import math
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
from fre_protocol.experiments.utility import METRICS, score, stored_text_row

FULL_SETTING = {"n_syn": 48, "variations": 3, "iterations": 3, "max_new_tokens": 32, "batch_size": 48}
QUICK_SETTING = {"n_syn": 4, "variations": 2, "iterations": 1, "max_new_tokens": 16, "batch_size": 16}
#: Fre-E2T's per-user cost is measured on a synthetic population of this size (cost_measurement.measure); its
#: download grows with the released buckets it must hear of, and a population of a few thousand
#: releases none at t = 100, so the full run measures 20,000.
COST_USERS = 20000
QUICK_COST_USERS = 1000

#: Fre-E2T's rows with Aug-PE's output count (N_syn texts: several per centroid).
MATCHED = "fre-e2t-nsyn"


def _config(ctx: Context) -> Any:
    from fre_protocol.text.augpe import AugPEConfig

    base = QUICK_SETTING if ctx.config.quick else FULL_SETTING
    return AugPEConfig(**{**base, **dict(ctx.config.augpe_setting or {})})


def augpe_result(ctx: Context, epsilon: float, seed: int) -> Any:
    """One Aug-PE run at ``epsilon`` (the mechanism's δ) with this experiment's setting."""
    from fre_protocol.text.augpe import SmolLMGenerator, run_augpe
    from primitives.randomness import RandomSource

    ctx.note_smollm2("Aug-PE generator")  # SmolLMGenerator() below: the packaged SmolLM2
    return run_augpe(ctx.dataset().x, ctx.embedder(), _config(ctx), epsilon=epsilon, delta=ctx.params(epsilon).delta,
                     rng=RandomSource.seeded(seed, "experiment/augpe"), language_model=SmolLMGenerator(),
                     progress=ctx.config.progress)


def augpe_row(ctx: Context, epsilon: float, seed: int) -> dict[str, Any]:
    params = ctx.params(epsilon)
    result = augpe_result(ctx, epsilon, seed)
    row = score(ctx, result.embeddings, params)
    config = _config(ctx)
    row.update(setting={"n_syn": config.n_syn, "variations": config.variations, "iterations": config.iterations},
               sigma=result.sigma, seconds=sum(float(s.seconds) for s in result.iterations),
               timings=dict(result.timings), examples=list(result.texts[:3]))
    return row


def matched_row(ctx: Context, epsilon: float, seed: int) -> dict[str, Any]:
    """Fre-E2T with as many texts as Aug-PE's N_syn, so the two are scored on equal output
    counts: ⌈N_syn / c⌉ texts for each of the c inverted centroids, taken round by round (every
    centroid's best text, then every one's second, ...) until N_syn."""
    params = ctx.params(epsilon)
    release = ctx.release(FRE_E2T, params, seed)
    chosen = ctx.capped(release)
    n_syn = _config(ctx).n_syn
    per = math.ceil(n_syn / len(chosen)) if len(chosen) else 0
    groups = ctx.inversions(release.centroids[chosen], num_texts=per) if per else []
    texts = [g[k] for k in range(per) for g in groups if k < len(g)][:n_syn]
    row = {**score(ctx, ctx.embed_texts(texts), params), "n_released": len(release.ids),
           "n_inverted": int(len(chosen)), "texts_per_centroid": per}
    row["examples"] = texts[:3]
    return row


def costs_row(ctx: Context) -> dict[str, Any]:
    from fre_protocol.augpe_costs import augpe_user_costs, cost_comparison
    from fre_protocol.cost_measurement import measure

    config = _config(ctx)
    dim = int(ctx.dataset().x.shape[1])
    augpe = augpe_user_costs(config.n_syn, config.variations, config.iterations, dim)
    users = QUICK_COST_USERS if ctx.config.quick else COST_USERS
    fre = measure(n=users, dim=dim, seed=0, batched_run=0, no_cover_run=False, record=False)
    out: dict[str, Any] = {"fre_users": users, "dim": dim, "augpe": augpe,
                           "fre": {k: fre.get(k) for k in ("download_bytes", "upload_bytes", "user_online_ms")},
                           "comparison": cost_comparison(augpe, fre)}
    if "paper_setting" in augpe:
        out["comparison_paper_setting"] = cost_comparison(augpe["paper_setting"], fre)
    return out


def run(ctx: Context) -> list[dict[str, Any]]:
    store = ctx.store("augpe")
    utility = ctx.store("utility")  # Fre-E2T's text-level rows: shared with the utility experiment
    if ctx.dataset().has_texts:
        for epsilon in ctx.config.run_epsilons:
            for seed in ctx.config.run_seeds:
                store.get_or_run({"method": "aug-pe", "epsilon": epsilon, "seed": seed},
                                 partial(augpe_row, ctx, epsilon, seed))
                fre = stored_text_row(ctx, utility, FRE_E2T, epsilon, seed)
                store.get_or_run({"method": FRE_E2T, "epsilon": epsilon, "seed": seed},
                                 lambda fre=fre: {k: v for k, v in fre.items() if k not in ("method", "epsilon", "seed")})
                store.get_or_run({"method": MATCHED, "epsilon": epsilon, "seed": seed},
                                 partial(matched_row, ctx, epsilon, seed))
    store.get_or_run({"method": "costs"}, partial(costs_row, ctx))
    return store.rows()


def render(rows: Sequence[Mapping[str, Any]]) -> str:
    from fre_protocol.augpe_costs import comparison_markdown

    methods = [m for m in ("aug-pe", FRE_E2T, MATCHED) if any(r["method"] == m for r in rows)]
    scored = [r for r in rows if r["method"] in methods]
    groups = group_rows(scored, ("epsilon", "method"))
    header = ["ε"] + [f"{m} {k}" for m in methods for k in ("P", "R", "F1", "L2", "P α=1", "R α=1")]
    body = []
    for eps in sorted_values(scored, "epsilon"):
        line = [epsilon_label(eps)]
        for m in methods:
            got = groups.get((eps, m), [])
            line += [cell(got, k) for k in METRICS] + [cell(got, "precision_strict"), cell(got, "recall_strict")]
        body.append(line)
    settings = sorted({tuple(r["setting"].items()) for r in scored if r["method"] == "aug-pe" and "setting" in r})
    ran = "; ".join(", ".join(f"{k} {v}" for k, v in s) for s in settings)
    matched = (f"{MATCHED}: Fre-E2T with Aug-PE's N_syn texts (several per centroid, best first, round by "
               "round).\n\n" if MATCHED in methods else "")
    parts = ["### Table 1 (text level): Aug-PE beside Fre-E2T, against the frequent set\n\n"
             + (f"Aug-PE setting of these rows: {ran}.\n\n" if ran else "") + matched + markdown_table(header, body)]
    costs = next((r for r in rows if r["method"] == "costs"), None)
    if costs:
        setting = costs["augpe"]["setting"]
        parts.append(f"### Table 17: one user's cost, distributed Aug-PE (N_syn {setting['n_syn']}, L {setting['variations']}, "
                     f"T {setting['iterations']}, d {setting['dim']}) beside Fre-E2T (measured, {costs['fre_users']} users)\n\n"
                     + comparison_markdown(costs["comparison"]))
        if "comparison_paper_setting" in costs:
            parts.append("### Table 17 at the paper's Aug-PE setting (N_syn 3000, L 7, T 20, d 768)\n\n"
                         + comparison_markdown(costs["comparison_paper_setting"]))
        download = next((c for c in costs.get("comparison_paper_setting", costs["comparison"])
                         if c["unit"] == "bytes" and "download" in c["quantity"]), None)
        if download and math.isfinite(float(download["ratio_per_iteration"])):
            parts.append(f"Aug-PE's per-user download is {float(download['ratio_per_iteration']):.3g}× Fre-E2T's per "
                         f"iteration and {float(download['ratio_per_run']):.3g}× per run.\n")
    return "\n".join(parts)


EXPERIMENT = Experiment(
    name="augpe",
    title="Aug-PE beside Fre-E2T: utility and per-user cost",
    paper_tables=(1, 17),
    run=run,
    render=render,
    notes=(
        "Deviation: Aug-PE runs with N_syn 48, L 3, T 3 by default (--quick: 4, 2, 1; --augpe-setting for "
        "others, named above Table 1) and SmolLM2-135M-Instruct, not the paper's 3000, 7, 20 with GPT-2; "
        "the cost table is also given at the paper's setting.",
        "Aug-PE's label-free prompts (the paper removes label information from its prompts).",
    ),
)
