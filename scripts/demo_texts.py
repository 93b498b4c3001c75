"""The largest clusters' synthetic texts of a ``synthesize`` run beside the seeds they started from.

Reads only the run's publishable files (DP outputs and public data) and prints a markdown table:
DP cluster size, synthetic text, who wrote it (``guided``: the language model; ``prefix`` or a
pool source such as ``news``: the seed kept, no written text being closer to the centroid), the
search's seed with its source (``prefix``: the draft of the generator trained on public text; a
pool source: a public-pool text), and whether each passes the reader's rules
(:mod:`fre_protocol.text.rules`). With ``--retrieval`` it adds, for comparison, what retrieval alone
answers for the same DP centroid (``centroids.npy`` beside the file): the nearest readable text of
the default public pool, the seed the guided search had before the generator's drafts.

    python scripts/demo_texts.py runs/healthtweets-eps8/synthetic.jsonl --top 20 --retrieval
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from fre_protocol.text import rules


def largest(records: list[dict[str, Any]], top: int) -> list[dict[str, Any]]:
    """The rank-0 inversion of each cluster, largest DP count first (ties: centroid index)."""
    firsts = [r for r in records if r.get("kind") == "inversion" and r.get("rank", 0) == 0]
    return sorted(firsts, key=lambda r: (-r["bucket_count"], r["centroid_index"]))[:top]


def cell(text: str | None) -> str:
    return "—" if text is None else text.replace("|", "\\|").replace("\n", " ")


def verdict(text: str | None) -> str:
    return "—" if text is None else "yes" if rules.passes(text) else "no"


def table(rows: list[dict[str, Any]], retrieval: dict[int, str] | None = None) -> str:
    """``retrieval``: centroid index → retrieval's answer, shown in a column of its own."""
    head = "| # | cluster size (DP) | synthetic text | written by | rules | search seed | seed from | seed rules |"
    lines = [head + (" retrieval alone | its rules |" if retrieval is not None else ""),
             "|---:|---:|---|---|---|---|---|---|" + ("---|---|" if retrieval is not None else "")]
    for i, r in enumerate(rows, 1):
        seed = r.get("seed")
        line = (f"| {i} | {r['bucket_count']:.0f} | {cell(r['text'])} | {cell(r.get('source'))} | "
                f"{verdict(r['text'])} | {cell(seed)} | {cell(r.get('seed_source'))} | {verdict(seed)} |")
        if retrieval is not None:
            answer = retrieval.get(r["centroid_index"])
            line += f" {cell(answer)} | {verdict(answer)} |"
        lines.append(line)
    kept = sum(1 for r in rows if r.get("seed") is not None and r["text"] == r["seed"])
    passed = sum(rules.passes(r["text"]) for r in rows)
    seeds = [r["seed"] for r in rows if r.get("seed") is not None]
    summary = f"Rules pass: {passed} of {len(rows)} synthetic texts"
    if seeds:
        summary += (f", {sum(rules.passes(s) for s in seeds)} of {len(seeds)} seeds; {kept} synthetic texts are "
                    "their seed unchanged (no written text was closer to the centroid)")
    if retrieval is not None:
        answers = [retrieval[r["centroid_index"]] for r in rows if r["centroid_index"] in retrieval]
        summary += f"; retrieval alone: {sum(rules.passes(a) for a in answers)} of {len(answers)}"
    lines += ["", summary + "."]
    return "\n".join(lines) + "\n"


def retrieval_answers(centroids: np.ndarray, indices: list[int]) -> dict[int, str]:
    """Retrieval's nearest readable text of the default public pool for each centroid named
    (the guided search's seed with ``--seeds-from retrieval``)."""
    from fre_protocol.text.embedder import load_embedder
    from fre_protocol.text.inverter_guided import SEED_CHOICES, readable_first
    from fre_protocol.text.inverters import build_inverter

    inverter = build_inverter("retrieval", load_embedder(None))
    nearest = inverter.invert(centroids[indices], num_texts=SEED_CHOICES)
    return {i: readable_first(inv, 1).texts[0] for i, inv in zip(indices, nearest, strict=True)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("synthetic", type=Path, help="a run's synthetic.jsonl")
    parser.add_argument("--top", type=int, default=20, help="clusters to show (default 20)")
    parser.add_argument("--retrieval", action="store_true",
                        help="add retrieval's answer for each centroid (reads centroids.npy beside the file; "
                             "loads the embedder and the default public pool)")
    args = parser.parse_args(argv)
    with args.synthetic.open(encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh if line.strip()]
    rows = largest(records, args.top)
    retrieval = None
    if args.retrieval:
        centroids = np.load(args.synthetic.parent / "centroids.npy")
        retrieval = retrieval_answers(centroids, [r["centroid_index"] for r in rows])
    print(table(rows, retrieval), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
