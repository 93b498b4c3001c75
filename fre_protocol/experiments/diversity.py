"""``diversity`` — paper Table 3: Self-BLEU per cluster across paraphrase temperatures.

For Fre-E2T's release at ε = 8 (or the first finite ε given), each inverted text is paraphrased n
times at every temperature, exactly as ``synthesize --paraphrases`` does (2n sampled, the n
nearest the centroid kept); a cluster's texts are its inverted text and its paraphrases, and its
Self-BLEU (sacrebleu sentence BLEU against the others, 0–100, lower is more diverse) is averaged
over the clusters. Reference: the same number of real texts nearest each centroid.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from fre_protocol.experiments import Experiment
from fre_protocol.experiments.context import FRE_E2T, Context
from fre_protocol.experiments.tables import cell, group_rows, markdown_table

TEMPERATURES = (0.6, 0.8, 1.0, 1.2)
QUICK_TEMPERATURES = (0.8, 1.2)
PARAPHRASES = 5
QUICK_PARAPHRASES = 2
#: Clusters paraphrased (those with the largest counts): 2n samples per cluster and temperature
#: are about 3 s of SmolLM2 each on two cores.
CLUSTERS = 8
#: Tokens per paraphrase (the paraphraser's default is 48; quick runs write shorter ones).
QUICK_MAX_TOKENS = 24


def _epsilon(ctx: Context) -> float:
    finite = [e for e in ctx.config.run_epsilons if math.isfinite(e)]
    return 8.0 if 8.0 in finite or not finite else finite[0]


def paraphrased(ctx: Context, epsilon: float, seed: int, temperature: float, n: int) -> dict[str, Any]:
    from fre_protocol.text.paraphraser import CausalLMParaphraser
    from fre_protocol.text.pipeline import paraphrase_nearest
    from fre_protocol.text.quality import self_bleu_per_cluster
    from primitives.randomness import RandomSource

    release = ctx.release(FRE_E2T, ctx.params(epsilon), seed)
    centroids = release.centroids[ctx.capped(release)[:CLUSTERS]]
    texts = ctx.invert(centroids)[0]
    if not texts:
        return {"self_bleu": math.nan, "clusters": 0, "note": "nothing released"}
    tokenizer, model = ctx.language_model()
    tokens = {"max_new_tokens": QUICK_MAX_TOKENS} if ctx.config.quick else {}
    paraphraser = CausalLMParaphraser.from_objects(tokenizer, model, name="SmolLM2-135M-Instruct", **tokens)
    variants = paraphrase_nearest(paraphraser, ctx.embedder(), texts, centroids, n=n, temperature=temperature,
                                  rng=RandomSource.seeded(seed, f"experiment/diversity/{temperature}"),
                                  progress=ctx.config.progress)
    got = self_bleu_per_cluster([[t, *v] for t, v in zip(texts, variants, strict=True)])
    return {"self_bleu": got["self_bleu"], "clusters": got["clusters"], "texts_per_cluster": n + 1,
            "example": [texts[0], *variants[0][:2]]}


def real_reference(ctx: Context, epsilon: float, seed: int, n: int) -> dict[str, Any]:
    from fre_protocol.text.quality import self_bleu_per_cluster
    from mechanism.metrics import nearest_neighbours

    texts = ctx.dataset().texts
    release = ctx.release(FRE_E2T, ctx.params(epsilon), seed)
    centroids = release.centroids[ctx.capped(release)[:CLUSTERS]]
    if texts is None or len(centroids) == 0:
        return {"self_bleu": math.nan, "clusters": 0}
    _, idx = nearest_neighbours(centroids, ctx.dataset().x, rank=n + 1)
    groups = [[texts[i] for i in np.asarray(row).tolist()] for row in idx]
    got = self_bleu_per_cluster(groups)
    return {"self_bleu": got["self_bleu"], "clusters": got["clusters"], "texts_per_cluster": n + 1}


def run(ctx: Context) -> list[dict[str, Any]]:
    store = ctx.store("diversity")
    if not ctx.dataset().has_texts:
        return [store.get_or_run({"source": "none"}, lambda: {"note": "--embeddings holds no text"})]
    epsilon = _epsilon(ctx)
    temperatures = QUICK_TEMPERATURES if ctx.config.quick else TEMPERATURES
    n = QUICK_PARAPHRASES if ctx.config.quick else PARAPHRASES
    for seed in ctx.config.run_seeds:
        for temperature in temperatures:
            store.get_or_run({"source": "fre-e2t", "epsilon": epsilon, "temperature": temperature, "seed": seed},
                             partial(paraphrased, ctx, epsilon, seed, temperature, n))
        store.get_or_run({"source": "real", "epsilon": epsilon, "temperature": "—", "seed": seed},
                         partial(real_reference, ctx, epsilon, seed, n))
    return store.rows()


def render(rows: Sequence[Mapping[str, Any]]) -> str:
    groups = group_rows(rows, ("source", "temperature"))
    body = [[f"Fre-E2T, paraphrase T = {t}", cell(got, "self_bleu", 1), cell(got, "clusters", 0)]
            for (source, t), got in sorted(groups.items(), key=lambda kv: str(kv[0])) if source == "fre-e2t"]
    body += [["real texts nearest each centroid", cell(got, "self_bleu", 1), cell(got, "clusters", 0)]
             for (source, _), got in groups.items() if source == "real"]
    return ("### Table 3: Self-BLEU per cluster (↓ more diverse)\n\n"
            + markdown_table(["texts", "Self-BLEU", "clusters"], body))


EXPERIMENT = Experiment(
    name="diversity",
    title="Diversity across paraphrase temperatures",
    paper_tables=(3,),
    run=run,
    render=render,
    notes=("Paraphraser: SmolLM2-135M-Instruct (the paper: GPT-2). A cluster = the inverted text and its n "
           "paraphrases; Self-BLEU is sacrebleu's sentence BLEU of each against the others.",),
)
