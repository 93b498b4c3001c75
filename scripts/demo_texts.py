"""The largest clusters' synthetic texts of a ``synthesize`` run beside their retrieval seeds.

Reads only the run's publishable ``synthetic.jsonl`` (DP outputs and public pool texts: the seed
is the public pool text the guided search started from) and prints a markdown table: DP cluster
size, synthetic text, who wrote it (``guided``: the language model; a pool source such as ``news``: the
seed kept, no written text being closer to the centroid), retrieval seed, and whether each passes the reader's rules
(:mod:`fre_protocol.text.rules`).

    python scripts/demo_texts.py runs/healthtweets-eps8/synthetic.jsonl --top 20
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from fre_protocol.text import rules


def largest(records: list[dict[str, Any]], top: int) -> list[dict[str, Any]]:
    """The rank-0 inversion of each cluster, largest DP count first (ties: centroid index)."""
    firsts = [r for r in records if r.get("kind") == "inversion" and r.get("rank", 0) == 0]
    return sorted(firsts, key=lambda r: (-r["bucket_count"], r["centroid_index"]))[:top]


def cell(text: str | None) -> str:
    return "—" if text is None else text.replace("|", "\\|").replace("\n", " ")


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| # | cluster size (DP) | synthetic text | written by | rules | retrieval seed | seed rules |",
             "|---:|---:|---|---|---|---|---|"]
    for i, r in enumerate(rows, 1):
        seed = r.get("seed")
        lines.append(
            f"| {i} | {r['bucket_count']:.0f} | {cell(r['text'])} | {cell(r.get('source'))} | "
            f"{'yes' if rules.passes(r['text']) else 'no'} | "
            f"{cell(seed)} | {'—' if seed is None else 'yes' if rules.passes(seed) else 'no'} |"
        )
    kept = sum(1 for r in rows if r.get("seed") is not None and r["text"] == r["seed"])
    passed = sum(rules.passes(r["text"]) for r in rows)
    seeds = [r["seed"] for r in rows if r.get("seed") is not None]
    lines += ["", f"Rules pass: {passed} of {len(rows)} synthetic texts"
              + (f", {sum(rules.passes(s) for s in seeds)} of {len(seeds)} seeds; {kept} synthetic texts are "
                 "their seed unchanged (no written text was closer to the centroid)." if seeds else ".")]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("synthetic", type=Path, help="a run's synthetic.jsonl")
    parser.add_argument("--top", type=int, default=20, help="clusters to show (default 20)")
    args = parser.parse_args(argv)
    with args.synthetic.open(encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh if line.strip()]
    print(table(largest(records, args.top)), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
