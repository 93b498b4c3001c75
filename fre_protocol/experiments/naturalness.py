"""``naturalness`` — paper Tables 4 and 15: perplexity and per-text NLL of the released texts.

Each text's mean token NLL under SmolLM2-135M-Instruct (a deviation: the paper uses GPT-2, so only
the ordering of text sets compares with the paper, not the values), for Fre-E2T's inverted texts
at every ε (the very texts utility's text rows report: read from its checkpoint in the same
folder, or computed into it) and for a matched reference of real frequent texts (the paper: a random 1,000-text
sample of the frequent texts). Reported: the mean per-text perplexity (Table 4), the median NLL
and the fraction of texts with NLL ≤ 6 (Table 15).

SmolLM2 also *writes* the guided inverter's texts and finds its own output likely, so two judges
that neither wrote nor steered them stand beside it (issue 34): the share of texts that pass the
reader's rules (:mod:`fre_protocol.text.rules`) and the median NLL under a Kneser–Ney model of
public news sentences outside the inverters' pool (:func:`fre_protocol.text.judges.public_fluency_judge`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from fre_protocol.experiments import Experiment
from fre_protocol.experiments.context import FRE_E2T, Context
from fre_protocol.experiments.store import RowStore
from fre_protocol.experiments.tables import (
    cell,
    epsilon_label,
    group_rows,
    markdown_table,
    sorted_values,
)
from fre_protocol.experiments.utility import stored_text_row

REFERENCE_TEXTS = 1000
QUICK_REFERENCE_TEXTS = 20
SUMMARY_KEYS = ("mean_ppl", "ppl_of_mean_nll", "mean_nll", "median_nll", "frac_nll_le_6", "n", "model")


def summarise(ctx: Context, texts: Sequence[str]) -> dict[str, Any]:
    from fre_protocol.text.quality import perplexity_summary, readability_fields, text_nlls

    nlls = text_nlls(list(texts), language_model=ctx.language_model(), progress=ctx.config.progress)
    summary = perplexity_summary(nlls)
    out = {k: summary[k] for k in SUMMARY_KEYS}
    return out | readability_fields(texts)


def run(ctx: Context) -> list[dict[str, Any]]:
    store = ctx.store("naturalness")
    if not ctx.dataset().has_texts:
        return [store.get_or_run({"source": "none"}, lambda: {"note": "--embeddings holds no text"})]
    size = QUICK_REFERENCE_TEXTS if ctx.config.quick else REFERENCE_TEXTS
    utility = ctx.store("utility")  # the texts scored are those utility's text rows report
    # The frequent set does not depend on ε (r and t are the same at every ε).
    reference_epsilon = ctx.config.run_epsilons[0]
    for seed in ctx.config.run_seeds:
        for epsilon in ctx.config.run_epsilons:
            store.get_or_run({"source": "fre-e2t", "epsilon": epsilon, "seed": seed},
                             partial(_synthetic, ctx, utility, epsilon, seed))
        store.get_or_run({"source": "real", "epsilon": "reference", "seed": seed},
                         partial(_reference, ctx, reference_epsilon, size, seed))
    return store.rows()


def _synthetic(ctx: Context, utility: RowStore, epsilon: float, seed: int) -> dict[str, Any]:
    return summarise(ctx, stored_text_row(ctx, utility, FRE_E2T, epsilon, seed)["texts"])


def _reference(ctx: Context, epsilon: float, size: int, seed: int) -> dict[str, Any]:
    return summarise(ctx, ctx.sample_frequent_texts(epsilon, size, seed))


#: the judges' fields (rows made before the judges existed lack them)
JUDGE_FIELDS = ("rules_pass", "kn_median_nll")


def render(rows: Sequence[Mapping[str, Any]]) -> str:
    groups = group_rows(rows, ("source", "epsilon"))
    synthetic = [r for r in rows if r.get("source") == "fre-e2t"]
    columns = [("mean perplexity (Table 4)", "mean_ppl", 1), ("median NLL (Table 15)", "median_nll", 2),
               ("frac. NLL ≤ 6 (Table 15)", "frac_nll_le_6", 2), ("n", "n", 0),
               ("reader's rules pass", "rules_pass", 2), ("Kneser–Ney median NLL", "kn_median_nll", 2)]
    # the judges came after the first runs: rows made before them get no column, not a column of –
    columns = [c for c in columns if c[1] not in JUDGE_FIELDS or any(c[1] in r for r in rows)]
    header = ["texts"] + [c[0] for c in columns]
    body = [[f"Fre-E2T ε = {epsilon_label(e)}"] + [cell(groups[("fre-e2t", e)], key, digits) for _, key, digits in columns]
            for e in sorted_values(synthetic, "epsilon")]
    real = groups.get(("real", "reference"), [])
    if real:
        body.append(["real frequent texts"] + [cell(real, key, digits) for _, key, digits in columns])
    return "### Tables 4 and 15: naturalness under SmolLM2-135M-Instruct\n\n" + markdown_table(header, body)


EXPERIMENT = Experiment(
    name="naturalness",
    title="Perplexity and per-text NLL of the released texts",
    paper_tables=(4, 15),
    run=run,
    render=render,
    notes=("Deviation: SmolLM2-135M-Instruct scores the texts, not the paper's GPT-2 (not reachable offline); "
           "compare sets with each other, not with the paper's values.",
           "SmolLM2 also writes the guided inverter's texts; the reader's rules and the Kneser-Ney model of public "
           "news (outside the inverters' pool) are judges that neither wrote nor steered them.",),
)
