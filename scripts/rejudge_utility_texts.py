"""Re-judge the inverted texts of a ``utility`` run with today's judges (issue 34).

    python scripts/rejudge_utility_texts.py docs/results/utility-all-centroids.json

Text rows made since the judges were added keep every inverted text (``texts``), so the judges
can be rerun without inverting again: the reader's rules as they stand now (they grew stricter
after the run), and the Kneser–Ney judge's tail against public news. The rows already hold the
share above the real frequent texts' 90th percentile; tweets, with their URLs and handles, are
unlikely under a model of news, so that cut is lenient. Here the reference is the judge's 500
held-out news sentences, never trained on. Prints a markdown table, mean ± sd over the seeds per
(ε, method); reads nothing private.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from fre_protocol.experiments.tables import (
    cell,
    epsilon_label,
    group_rows,
    markdown_table,
    sorted_values,
)
from fre_protocol.text import judges, rules
from fre_protocol.text.public_pool import build_pool

COLUMNS = (("reader's rules pass (now)", "rules_pass_now", 2), ("KN median NLL", "kn_median_nll", 2),
           ("KN share above news p90", "kn_share_above_news_p90", 2), ("texts", "n", 0))


def rejudge(document: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per text row that kept its texts: the current rules and the news-referenced KN tail."""
    judge = judges.public_fluency_judge()
    news = judges.judge_training_texts(build_pool().texts)[0]
    news_nlls = judge.nlls(news)
    out = []
    for row in document["rows"]:
        texts = row.get("texts")
        if row.get("level") != "text" or not texts:
            continue
        fluency = judges.fluency_judgement(judge.nlls(texts), news_nlls)
        out.append({"method": row["method"], "epsilon": row["epsilon"], "seed": row["seed"], "n": len(texts),
                    "rules_pass_now": rules.summary(texts)["pass_share"],
                    "kn_median_nll": fluency["nll_median"], "kn_share_above_news_p90": fluency["share_above_cut"],
                    "news_texts": len(news), "news_nll_median": float(np.median(news_nlls))})
    return out


def table(rows: list[dict[str, Any]]) -> str:
    groups = group_rows(rows, ("epsilon", "method"))
    body = [[epsilon_label(eps), method] + [cell(groups[(eps, method)], key, digits) for _, key, digits in COLUMNS]
            for eps in sorted_values(rows, "epsilon") for method in dict.fromkeys(r["method"] for r in rows)
            if (eps, method) in groups]
    return markdown_table(["ε", "method"] + [name for name, _, _ in COLUMNS], body)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    path = Path(argv[0])
    rows = rejudge(json.loads(path.read_text(encoding="utf-8")))
    if not rows:
        print(f"{path}: no text row keeps its texts (rows made before the judges were added)", file=sys.stderr)
        return 1
    print(table(rows))
    print(f"News reference: {rows[0]['news_texts']} held-out sentences, median KN NLL {rows[0]['news_nll_median']:.2f}.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
